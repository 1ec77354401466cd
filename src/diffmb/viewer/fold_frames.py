"""An origami run as a multi-frame FOLD file (FOLD 1.1 ``file_frames``).

Frame 0 is the crease pattern as :func:`diffmb.formats.fold.to_fold` writes it (flat, 2-D,
with the initial fold angles); each further frame inherits it (``frame_inherit``,
``frame_parent: 0``) and gives the folded state at one time: ``vertices_coords`` in 3-D
(a vertex shared by several panels at the mean of where they carry it, which is one
point while the closures hold) and ``edges_foldAngle`` in degrees, valley positive as
FOLD has it. A tree crease's angle is its hinge coordinate; a cut crease's is measured
from its panels' normals and continued through time (in ``(-180, 180]`` at the start,
or on the pattern's side when it starts folded flat). The time is
``diffmb:time`` [s] (a namespaced custom field) and the frame title.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from ..formats.fold import to_fold
from ..formats.fold_develop import fold_angle
from .frames import body_poses, hinge_series, rotate, world_points
from .origami import panel_origins, pattern_of
from .scene import FPS, MAX_FRAMES, frame_indices


def dihedral(pose_a, pose_b, p1, p2, centroid_a) -> np.ndarray:
    """Fold angle [rad] across the crease ``p1 -> p2`` (flat layout) between panels ``a``
    and ``b`` (poses ``(F, 7)``), valley positive: ``b``'s normal against ``a``'s about the
    crease, signed by the side of the crease ``a`` lies on."""
    z = np.array([0.0, 0.0, 1.0])
    na, nb = rotate(pose_a[:, 3:], z), rotate(pose_b[:, 3:], z)
    e_flat = np.asarray(p2, float) - np.asarray(p1, float)
    side = np.sign(np.cross(np.asarray(centroid_a, float) - np.asarray(p1, float), e_flat)[2])
    e = rotate(pose_a[:, 3:], e_flat / np.linalg.norm(e_flat))
    return fold_angle(na, nb, e, side)


def _rounded_xy(p) -> tuple:
    """A flat point as :func:`~diffmb.formats.fold.to_fold` keys its vertices."""
    return tuple(round(float(x), 12) + 0.0 for x in np.asarray(p, float)[:2])


def fold_frames(run, fps: float = FPS, max_frames: int = MAX_FRAMES) -> dict:
    """The FOLD dict of an origami :class:`~diffmb.viewer.saved.SavedRun` (ValueError when
    the run is not origami)."""
    pattern = pattern_of(run)
    if pattern is None:
        raise ValueError(f"{run.path}: not an origami run (scenario {run.name!r}); a FOLD file holds crease patterns")
    base = to_fold(pattern, title=run.name)
    tr = run.traj.trimmed()
    pick = frame_indices(np.asarray(tr.ts), fps, max_frames)
    ts, xs = np.asarray(tr.ts)[pick], np.asarray(tr.xs)[pick]
    poses = body_poses(run.system, run.params, xs)
    names = list(run.system.body_names)
    index = {n: i for i, n in enumerate(names)}
    _, origin, _ = panel_origins(pattern)
    V = np.asarray(base["vertices_coords"], float)
    V3 = np.pad(V, ((0, 0), (0, 1)))
    total, count = np.zeros((len(ts), len(V), 3)), np.zeros(len(V))
    for panel, face in zip(pattern.panels, base["faces_vertices"]):
        b = index[panel.name]
        for v in face:
            total[:, v] += world_points(poses[:, b], V3[v] - origin[panel.name])
            count[v] += 1
    coords = total / np.maximum(count, 1)[None, :, None]

    angle, _, moved = hinge_series(run.system, xs)
    hinge_of = {names[b]: k for k, b in enumerate(moved)}
    parents = run.system.model.parents
    vid = {tuple(p): i for i, p in enumerate(base["vertices_coords"])}
    edge_angle = {}
    for c in pattern.creases:
        ends = frozenset(vid[_rounded_xy(p)] for p in (c.p1, c.p2))
        a, b = index[c.a], index[c.b]
        child = c.b if parents[b] == a else c.a if parents[a] == b else None
        if child is not None and child in hinge_of:
            edge_angle[ends] = angle[:, hinge_of[child]]
        else:
            g = np.unwrap(dihedral(poses[:, a], poses[:, b], np.pad(np.asarray(c.p1, float)[:2], (0, 1)),
                                   np.pad(np.asarray(c.p2, float)[:2], (0, 1)), pattern.panel(c.a).centroid()))
            ref = c.fold if abs(abs(g[0]) - np.pi) < 1e-3 else g[0]  # folded flat: the pattern's side
            g = g + 2 * np.pi * np.round((ref - g[0]) / (2 * np.pi))
            edge_angle[ends] = g
    frames = []
    for f, t in enumerate(ts):
        angles = [round(math.degrees(float(edge_angle[frozenset(e)][f])), 9) + 0.0 if frozenset(e) in edge_angle
                  else 0.0 for e in base["edges_vertices"]]
        frames.append({"frame_title": f"{run.name} at t = {float(t):.6g} s", "frame_inherit": True,
                       "frame_parent": 0, "frame_classes": ["foldedForm"], "frame_attributes": ["3D"],
                       "diffmb:time": float(t), "vertices_coords": np.round(coords[f], 9).tolist(),
                       "edges_foldAngle": angles})
    return {**base, "file_classes": ["animation"], "file_frames": frames}


def write_fold_frames(run, path, *, fps: float = FPS, max_frames: int = MAX_FRAMES) -> Path:
    """Write :func:`fold_frames` of ``run`` to ``path`` (JSON) atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(fold_frames(run, fps, max_frames), separators=(",", ":")))
    os.replace(tmp, path)
    return path
