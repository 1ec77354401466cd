"""Reference deployment records from MuJoCo: the same sensors, another engine.

A fit is only tested when its data did not come from the model being fitted.
:func:`mujoco_record` converts a tree System with loop closures to MJCF
(:func:`~diffmb.formats.mjcf.to_mjcf`: a ``connect`` pair per cut crease, made nearly hard), runs
MuJoCo's own integrator, and reads the declared sensors (:mod:`diffmb.design.sensors`) off
MuJoCo's body poses: a marker from ``xpos + xmat p``, a gyro from ``mj_objectVelocity``
in the body's axes. :func:`mujoco_file_record` does the same for a user's MJCF file as
MuJoCo simulates it. Needs the optional ``mujoco`` extra.
"""

from __future__ import annotations

import numpy as np

from ..formats.mjcf import to_mjcf, to_mujoco_state
from .data import Data


def _mujoco():
    try:
        import mujoco
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError("MuJoCo records need MuJoCo: pip install 'diffmb[mujoco]'") from None
    return mujoco


def mujoco_record(system, params, sensors, *, t1: float, rate: float, dt: float = 5e-4,
                  path: str = "<mujoco>") -> Data:
    """Noise-free record of ``sensors`` (markers and gyros) sampled at ``rate`` [Hz] over
    ``[0, t1]``, simulated by MuJoCo (RK4 at ``dt``) from the System's initial state."""
    mujoco = _mujoco()
    model = params["model"]
    xml = to_mjcf(model, params.get("closures"), timestep=dt, solref=(2 * dt, 1.0),
                  solimp=(0.9999, 0.9999, 0.001))
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = to_mujoco_state(model, np.asarray(params["q0"]), np.asarray(params["qd0"]))
    return _record(m, d, sensors, t1=t1, rate=rate, dt=dt, path=path)


def mujoco_file_record(source, sensors, *, t1: float, rate: float, dt: float = 5e-4, key=None,
                       path: str | None = None) -> Data:
    """Noise-free record of ``sensors`` from MuJoCo simulating an MJCF file (or XML
    string) itself: its own soft equalities, contacts and actuators as MuJoCo has them,
    RK4 at ``dt``, from keyframe ``key`` (default: the first, else ``qpos0``). Sensor
    bodies and marker points are in MuJoCo's body frames (diffmb's, where each body's
    joint sits at the body's origin)."""
    mujoco = _mujoco()
    from_string = isinstance(source, str) and source.lstrip().startswith("<")
    m = mujoco.MjModel.from_xml_string(source) if from_string else mujoco.MjModel.from_xml_path(str(source))
    m.opt.timestep, m.opt.integrator = dt, mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(m)
    if m.nkey:
        k = 0 if key is None else (key if isinstance(key, int) else mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, key))
        mujoco.mj_resetDataKeyframe(m, d, k)
    return _record(m, d, sensors, t1=t1, rate=rate, dt=dt,
                   path=path or ("<mujoco>" if from_string else str(source)))


def _record(m, d, sensors, *, t1, rate, dt, path) -> Data:
    """Step MuJoCo's ``(m, d)`` over ``[0, t1]`` and sample the markers and gyros."""
    mujoco = _mujoco()
    bad = [s.name for s in sensors if s.kind not in ("marker", "gyro")]
    if bad:
        raise ValueError(f"mujoco_record: sensor(s) {', '.join(bad)}: only markers and gyros are read from MuJoCo")
    mujoco.mj_forward(m, d)
    every, n = int(round(1.0 / (rate * dt))), int(round(t1 / dt))
    if every < 1 or abs(every * rate * dt - 1.0) > 1e-9:
        raise ValueError(f"mujoco_record: the sample period 1/{rate:g} s must be a multiple of dt = {dt:g} s")
    w6, ts, rows = np.zeros(6), [], []
    for step in range(n + 1):
        if step % every == 0:
            row = []
            for s in sensors:
                b = m.body(s.body).id
                if s.kind == "marker":
                    row += list(d.xpos[b] + d.xmat[b].reshape(3, 3) @ np.asarray(s.point))
                else:
                    mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, b, w6, 1)
                    row += list(w6[:3])
            ts.append(d.time)
            rows.append(row)
        if step < n:
            mujoco.mj_step(m, d)
    names = tuple(c for s in sensors for c in s.columns)
    return Data(t=np.asarray(ts), names=names, values=np.asarray(rows), path=path)
