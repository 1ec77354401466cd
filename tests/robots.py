"""Real robot descriptions (the ``example-robot-data`` package) and the state maps between
diffmb and Pinocchio, shared by the cross-check tests and ``experiments/survey_robots.py``.

diffmb orders coordinates by URDF document order and stores a free root as
``q = [sigma; p]`` (MRP of ``[body world]``), ``qd = [omega; v]`` in body axes.
Pinocchio orders joints depth-first, stores a continuous joint as ``(cos q, sin q)`` and
a free-flyer as ``q = [p; quat xyzw]`` of ``[world body]``, ``v = [v; omega]`` in the
local frame.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from pathlib import Path

import numpy as np

import diffmb
from diffmb.math import spatial as sp

TOL = 1e-9
#: Condition number of M beyond which forward dynamics is compared by its backward error.
ILL_CONDITIONED = 1e7


def robot_urdfs() -> list[Path]:
    """Every URDF shipped by ``example-robot-data`` (sorted by path)."""
    dist = importlib.metadata.distribution("example-robot-data")
    root = Path(dist.locate_file("cmeel.prefix/share/example-robot-data/robots"))
    if not root.is_dir():
        raise FileNotFoundError(f"example-robot-data installed without its robots folder {root}")
    return sorted(root.rglob("*.urdf"))


def joint_maps(model, pmodel, skip=0):
    """Pinocchio ``(idx_q, nq, idx_v)`` of each diffmb 1-DOF joint, in diffmb's order."""
    out = []
    for name in model.joint_names[skip:]:
        j = pmodel.joints[pmodel.getJointId(name)]
        out.append((j.idx_q, j.nq, j.idx_v))
    return out


def pin_q(maps, qp, q):
    for (iq, nq, _), qi in zip(maps, q):
        qp[iq : iq + nq] = [np.cos(qi), np.sin(qi)] if nq == 2 else [qi]
    return qp


def to_pin_free(model, pmodel, q, qd, x6):
    """diffmb ``(q, qd, x6)`` of a floating model (x6: a velocity-sized vector) in
    Pinocchio's layout. diffmb's scalar-last quaternion of ``[BN]`` read as a Hamilton
    quaternion is the rotation ``[NB]``: exactly Pinocchio's."""
    maps = joint_maps(model, pmodel, skip=1)
    iv = np.array([m[2] for m in maps], dtype=int)
    qp = np.zeros(pmodel.nq)
    qp[:3], qp[3:7] = q[3:6], np.asarray(sp.mrp_to_quat(np.asarray(q[:3])))
    pin_q(maps, qp, q[6:])
    vp, xp = np.zeros(pmodel.nv), np.zeros(pmodel.nv)
    vp[:3], vp[3:6] = qd[3:6], qd[:3]
    xp[:3], xp[3:6] = x6[3:6], x6[:3]
    if len(iv):
        vp[iv], xp[iv] = qd[6:], x6[6:]
    return qp, vp, xp


def from_pin_free(model, pmodel, xp):
    iv = np.array([m[2] for m in joint_maps(model, pmodel, skip=1)], dtype=int)
    return np.concatenate([xp[3:6], xp[:3], xp[iv] if len(iv) else np.zeros(0)])


def _pin_model(pin, path, floating):
    return (pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating
            else pin.buildModelFromUrdf(str(path)))


def compare(path, floating: bool, *, states: int = 2, seed: int = 0) -> dict:
    """Load ``path`` in both engines and compare M, RNEA and ABA at random states.

    Returns ``{"status": "match" | "mismatch" | "refused" | "pin-refused" | "no-dof",
    "worst": max abs difference, "nv", "why"}``.
    """
    import jax
    import pinocchio as pin

    try:
        pmodel = _pin_model(pin, path, floating)
    except Exception as e:
        return {"status": "pin-refused", "why": str(e).splitlines()[0][:200]}
    if pmodel.nv == 0:
        return {"status": "no-dof", "why": "no movable joint"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = diffmb.load_urdf(path, floating_base=floating)
    except ValueError as e:
        return {"status": "refused", "why": str(e), "nv": pmodel.nv}
    if model.nv != pmodel.nv:
        return {"status": "mismatch", "why": f"nv {model.nv} vs Pinocchio {pmodel.nv}", "nv": model.nv}
    pmodel.gravity.linear = np.asarray(model.gravity)
    data = pmodel.createData()
    rng = np.random.default_rng(seed)
    fns = jax.jit(lambda q, qd, qdd, tau: (diffmb.mass_matrix(model, q),
                                            diffmb.inverse_dynamics(model, q, qd, qdd),
                                            diffmb.forward_dynamics(model, q, qd, tau)))
    worst = 0.0
    lo = np.where(np.isfinite(model.lower), model.lower, -1.5)
    hi = np.where(np.isfinite(model.upper), model.upper, 1.5)
    for _ in range(states):
        q = rng.uniform(np.maximum(lo, -1.5), np.minimum(hi, 1.5))
        if floating:
            q[:3], q[3:6] = rng.uniform(-0.4, 0.4, 3), rng.normal(size=3)
        qd, qdd, tau = rng.normal(size=model.nv), rng.normal(size=model.nv), 5 * rng.normal(size=model.nv)
        if floating:
            qp, vp, taup = to_pin_free(model, pmodel, q, qd, tau)
            qddp = to_pin_free(model, pmodel, q, qd, qdd)[2]
            back = lambda x: from_pin_free(model, pmodel, x)
            P = np.stack([back(c) for c in np.eye(model.nv)], 1)
        else:
            maps = joint_maps(model, pmodel)
            perm = np.array([m[2] for m in maps], dtype=int)
            qp = pin_q(maps, pin.neutral(pmodel), q)
            vp, taup, qddp = (np.zeros(model.nv) for _ in range(3))
            vp[perm], taup[perm], qddp[perm] = qd, tau, qdd
            back = lambda x: x[perm]
            P = np.eye(model.nv)[perm]
        M, tau_id, a = (np.asarray(x) for x in fns(q, qd, qdd, tau))
        M_ref = pin.crba(pmodel, data, qp).copy()
        M_ref = np.triu(M_ref) + np.triu(M_ref, 1).T
        M_ref = P @ M_ref @ P.T
        scale = max(1.0, np.abs(M_ref).max())
        ev = np.linalg.eigvalsh(M_ref)
        if ev.max() > ILL_CONDITIONED * ev.min():
            # forward dynamics is determined only to about cond(M) * eps (iCub's point-mass
            # head: cond 5e8, accelerations of 1e7): judge it by its backward error, the
            # generalized force its acceleration leaves unexplained in Pinocchio's model
            a_pin = to_pin_free(model, pmodel, q, qd, a)[2] if floating else P.T @ a
            unexplained = np.abs(back(pin.rnea(pmodel, data, qp, vp, a_pin)) - tau).max()
            fd = unexplained / max(scale * max(1.0, np.abs(a).max()), np.abs(tau).max())  # normwise
        else:
            fd = np.abs(a - back(pin.aba(pmodel, data, qp, vp, taup))).max() / max(1.0, np.abs(a).max())
        worst = max(worst, np.abs(M - M_ref).max() / scale,
                    np.abs(tau_id - back(pin.rnea(pmodel, data, qp, vp, qddp))).max() / scale, fd)
    return {"status": "match" if worst < TOL else "mismatch", "worst": float(worst), "nv": model.nv}
