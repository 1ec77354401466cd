"""The scene of any System with bodies (``System.body_frames``): trees from URDF/MJCF,
Kane's forests, Udwadia-Kalaba modules.

What each body shows, first that applies:

* the model file's visual primitives (URDF ``<visual>`` box / sphere / cylinder; MJCF
  ``<geom>`` box / sphere / cylinder / capsule) on the body of the same name
  (:mod:`.visuals`);
* Udwadia-Kalaba modules: the uniform box of the body's mass and inertia;
* a link-frame skeleton: the body's axes, a line from its parent's origin to its own and
  one from its origin to its centre of mass.

Quantities: for trees, the revolute joints' angle and rate on the body each one moves;
for every model, each body's speed.
"""

from __future__ import annotations

import numpy as np

from ..design.data import state_tree
from .frames import body_poses, hinge_series
from .scene import Quantity, Scene, frame_indices
from .visuals import file_visuals


def inertia_box(mass: float, inertia: np.ndarray):
    """``(sides, axes)`` of the uniform box with this mass and inertia (``axes``: the box's
    axes as the columns of a rotation in body axes), or ``None`` when the inertia is not
    that of a box (a point mass, a rod with a zero moment)."""
    w, v = np.linalg.eigh(np.asarray(inertia, float))
    if not mass > 0:
        return None
    sq = 6.0 * (w.sum() - 2.0 * w) / mass
    if np.any(sq <= 0) or not np.all(np.isfinite(sq)):
        return None
    if np.linalg.det(v) < 0:
        v[:, 2] = -v[:, 2]
    return np.sqrt(sq).tolist(), v


def _coms(system, n: int) -> np.ndarray:
    """Each body's centre of mass in its frame (tree-like systems; zeros otherwise)."""
    coms = [np.asarray(m.com, float) for m in system.tree_models]
    out = np.concatenate(coms) if coms else np.zeros((0, 3))
    return out if len(out) == n else np.zeros((n, 3))


def _parents(system) -> list:
    """Parent body index of each body (-1 for a root), for tree-like systems."""
    out, base = [], 0
    for m in system.tree_models:
        out += [p + base if p >= 0 else -1 for p in m.parents]
        base += len(m.body_names)
    return out


def _quat_of(R: np.ndarray) -> list:
    from .scene import dcm_to_quat

    return dcm_to_quat(R.T).tolist()


def scene(run, fps: float, max_frames: int) -> Scene | None:
    """The scene of ``run``'s bodies, or ``None`` when its System has none."""
    system = run.system
    if not system.body_names:
        return None
    tr = run.traj.trimmed()
    pick = frame_indices(np.asarray(tr.ts), fps, max_frames)
    ts, xs = np.asarray(tr.ts)[pick], np.asarray(tr.xs)[pick]
    names = list(system.body_names)
    poses = body_poses(system, run.params, xs)
    parents = _parents(system)
    models = system.tree_models
    visuals, notes = file_visuals(run.meta.get("model"), names, models[0] if len(models) == 1 else None)
    geometry = [{"polygons": [], "segments": [], "primitives": list(visuals.get(n, [])), "role": "link"}
                for n in names]
    if type(system).__name__ == "UKSystem":
        bodies = run.params["bodies"]
        for i in range(len(names)):
            box = inertia_box(float(bodies["mass"][i]), np.asarray(bodies["inertia"][i]))
            if box is not None and not geometry[i]["primitives"]:
                sides, axes = box
                geometry[i]["primitives"].append({"type": "box", "size": sides, "pos": [0, 0, 0],
                                                  "quat": _quat_of(axes)})
        notes.append("Modules drawn as the uniform boxes of their mass and inertia.")
    coms = _coms(system, len(names))
    spread = max(float(np.nanmax(np.ptp(poses[..., :3].reshape(-1, 3), axis=0))) if len(names) > 1 else 0.0,
                 2.0 * float(np.linalg.norm(coms, axis=1).max()) if len(coms) else 0.0)
    axis = 0.12 * (spread if spread > 0 else 1.0)
    for g, c in zip(geometry, coms):
        if np.linalg.norm(c) > 1e-9 and not g["primitives"]:
            g["segments"].append({"p": [[0, 0, 0], c.tolist()], "kind": "skeleton"})
    links = []
    for i, p in enumerate(parents):
        if p >= 0:
            links.append({"a": p, "pa": [0, 0, 0], "b": i, "pb": [0, 0, 0], "kind": "skeleton"})
    for g in geometry:
        for k, kind in enumerate(("axis_x", "axis_y", "axis_z")):
            tip = [0.0, 0.0, 0.0]
            tip[k] = axis
            g["segments"].append({"p": [[0, 0, 0], tip], "kind": kind})
    if not any(g["primitives"] for g in geometry):
        notes.append("No visual geometry in the model: each body as its frame (x red, y green, z blue), "
                     "lines from each parent's origin to its child's.")
    n_f, n_b = len(ts), len(names)
    quantities = []
    if state_tree(system) is not None:
        angle, rate, moved = hinge_series(system, xs)
        if len(moved):
            a, r = np.full((n_f, n_b), np.nan), np.full((n_f, n_b), np.nan)
            a[:, moved], r[:, moved] = np.degrees(angle), np.degrees(rate)
            quantities += [Quantity("joint angle (revolute)", "deg", "bodies", a, signed=True),
                           Quantity("joint rate (revolute)", "deg/s", "bodies", r, signed=True)]
    speed = np.linalg.norm(np.diff(poses[..., :3], axis=0), axis=-1) / np.maximum(np.diff(ts), 1e-300)[:, None]
    speed = np.concatenate([speed[:1], speed], 0) if len(speed) else np.zeros((n_f, n_b))
    quantities.append(Quantity("body speed (between frames)", "m/s", "bodies", speed))
    roots = [i for i, p in enumerate(parents) if p < 0]
    hub = roots[0] if len(roots) == 1 and _floating(system) else None
    if visuals.get(None):
        names.append("world (fixed)")
        geometry.append({"polygons": [], "segments": [], "primitives": list(visuals[None]), "role": "world"})
        poses = np.concatenate([poses, np.broadcast_to([0, 0, 0, 0, 0, 0, 1.0], (n_f, 1, 7))], 1)
        for q in quantities:
            q.values = np.concatenate([q.values, np.full((n_f, 1), np.nan)], 1)
    return Scene(title=run.name, times=ts.astype(np.float32), body_names=names, poses=poses.astype(np.float32),
                 geometry=geometry, links=links, quantities=quantities, hub=hub, kind="bodies", notes=notes,
                 info={"bodies": n_b, "formulation": type(system).__name__})


def _floating(system) -> bool:
    return any(m.floating_base for m in system.tree_models)
