"""Survey: do users' MJCF files give MuJoCo's dynamics in diffmb?

For every ``*.xml`` in the folders given (e.g. the 19 models of ``dm_control``'s suite:
``pip download dm_control --no-deps`` and unzip ``dm_control/suite``), at a random state
(hinges and slides moved by up to ~0.3, random ball and free-joint rotations, random
velocities) set through a keyframe: MuJoCo's smooth accelerations ``qacc_smooth``
(passive forces, gravity, Coriolis; contacts, limits, equalities and actuation are
constraints or switched off) against diffmb's (``forward_dynamics`` with the imported
system's generalized forces: joint springs and dampers, armature, tendons, fluid drag).

A file is *matched* when the largest difference is below 1e-9 of the accelerations'
scale, *differs* otherwise, *refused* when ``load_mjcf`` refuses it (the reason is printed).
The notes of what was not carried over are printed with each file. JSON to
``out/survey_mjcf.json``.

    python experiments/survey_mjcf.py /path/to/dm_control/suite
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
import diffmb
from diffmb.formats.mjcf_import import load_mjcf, velocity_map

TOL = 1e-9


def _random_state(m, rng):
    qpos = m.qpos0.copy()
    for j in range(m.njnt):
        a = m.jnt_qposadr[j]
        if m.jnt_type[j] == 0:
            qpos[a:a + 3] += 0.1 * rng.normal(size=3)
            q = rng.normal(size=4)
            qpos[a + 3:a + 7] = q / np.linalg.norm(q)
        elif m.jnt_type[j] == 1:
            q = rng.normal(size=4)
            qpos[a:a + 4] = q / np.linalg.norm(q)
        else:
            qpos[a] += 0.3 * rng.normal()
    return qpos, rng.normal(size=m.nv)


def _with_key(text, qpos, qvel):
    fmt = lambda v: " ".join(f"{x:.17g}" for x in v)
    key = f'<keyframe><key name="survey" qpos="{fmt(qpos)}" qvel="{fmt(qvel)}"/></keyframe>'
    if "<keyframe>" in text:
        return text.replace("<keyframe>", key.replace("</keyframe>", ""), 1)
    i = text.rindex("</mujoco>")
    return text[:i] + key + text[i:]


def _sync(m, imp, qpos, qvel):
    """MuJoCo's state with diffmb's hinge and slide coordinates (an equality's projection
    moves only the coupled scalar joints here; ball and free joints keep MuJoCo's)."""
    qpos, qvel = qpos.copy(), qvel.copy()
    q0, qd0 = np.asarray(imp.q0), np.asarray(imp.qd0)
    for j, b, kind in imp.joint_bodies:
        if kind in ("revolute", "prismatic"):
            s, _ = imp.model.body_slices[b]
            a, v = m.jnt_qposadr[j], m.jnt_dofadr[j]
            qpos[a], qvel[v] = q0[s] + m.qpos0[a], qd0[s]
    return qpos, qvel


def survey_file(path, seed=0):
    import mujoco

    m = mujoco.MjModel.from_xml_path(path)
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
    d = mujoco.MjData(m)
    qpos, qvel = _random_state(m, np.random.default_rng(seed))
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(m, d)
    with open(path, encoding="utf-8") as f:
        text = _with_key(f.read(), qpos, qvel)
    # beside the original, so its <include>s and assets resolve
    fd, tmp = tempfile.mkstemp(suffix=".xml", dir=os.path.dirname(path))
    os.close(fd)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = load_mjcf(tmp, key="survey")
    except ValueError as e:
        return {"status": "refused", "reason": str(e).replace(tmp, path)}
    finally:
        os.remove(tmp)
    moved = [n for n in imp.notes if "moved onto" in n or "correction applied" in n]
    if moved:  # diffmb put the state onto the equalities: give MuJoCo that state
        qpos, qvel = _sync(m, imp, qpos, qvel)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
    system = imp.system()
    params = system.default_params()
    tau = system.generalized_force(0.0, imp.q0, imp.qd0, params)
    ours = np.asarray(diffmb.forward_dynamics(imp.model, imp.q0, imp.qd0, tau))
    T = velocity_map(m, qpos)
    theirs = T @ d.qacc_smooth
    for j in range(m.njnt):
        if m.jnt_type[j] == 0:
            v = m.jnt_dofadr[j]
            theirs[v + 3:v + 6] -= np.cross(qvel[v + 3:v + 6], T[v + 3:v + 6, v:v + 3] @ qvel[v:v + 3])
    scale = max(1.0, float(np.abs(theirs).max()))
    err = float(np.abs(ours - theirs).max()) / scale
    status = "matched" if err < TOL else "differs"
    return {"status": status, "relative_difference": err, "nv": int(m.nv), "notes": imp.notes,
            "state_moved": bool(moved)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--out", default="out/survey_mjcf.json")
    args = ap.parse_args(argv)
    files = sorted(f for d in args.folders for f in glob.glob(os.path.join(d, "*.xml")))
    results = {}
    for path in files:
        name = os.path.basename(path)
        try:
            r = survey_file(path)
        except Exception as e:
            r = {"status": "not a model", "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"}
        results[name] = r
        extra = (f"{r['relative_difference']:.1e}" if "relative_difference" in r else r.get("reason", ""))
        print(f"{name:24s} {r['status']:9s} {extra}")
        for n in r.get("notes", []):
            print(f"{'':24s}   note: {n}")
    counts = {}
    for r in results.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("  ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"counts": counts, "files": results}, f, indent=1)


if __name__ == "__main__":
    main()
