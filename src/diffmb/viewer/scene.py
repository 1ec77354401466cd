"""What the viewer page draws: a :class:`Scene` of rigid bodies moving over time.

A scene holds, per body, its geometry in its own frame (polygons, line segments,
primitives) and, per frame, its pose (``position xyz``, ``quaternion xyzw`` body ->
world, float32): poses, not vertices, so a 400-panel fold over 10 s stays a few MB.
``links`` join points on two bodies (a tensegrity's strings, a cut crease's two sides, a
tree's skeleton); ``quantities`` are the per-body or per-link time series the page can
colour by and plot.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np

#: Default decimation: at most this many frames per second of simulated time, and at most
#: MAX_FRAMES frames (the page interpolates poses between frames while it plays).
FPS = 25.0
MAX_FRAMES = 400


@dataclass
class Quantity:
    """A time series to colour by: ``values (F, n)`` for each body (``target="bodies"``)
    or each link (``"links"``); NaN where it does not apply (the hub has no hinge)."""

    name: str
    unit: str
    target: str
    values: np.ndarray
    signed: bool = False


@dataclass
class Scene:
    """A run, ready for the page (module docstring).

    ``geometry[i]``: body ``i``'s ``{"polygons": [[xyz, ...], ...], "segments": [[xyz,
    xyz], ...], "primitives": [{"type", "size", "pos", "quat"}], "role"}`` in its frame
    (``role``: ``"hub"``, ``"panel"``, ``"link"``, ``"node"``); ``links``: ``{"a", "pa",
    "b", "pb", "kind"}``; ``poses (F, N, 7)``.
    """

    title: str
    times: np.ndarray
    body_names: list
    poses: np.ndarray
    geometry: list
    links: list = field(default_factory=list)
    quantities: list = field(default_factory=list)
    hub: int | None = None
    kind: str = "bodies"
    notes: list = field(default_factory=list)
    info: dict = field(default_factory=dict)


def frame_indices(ts: np.ndarray, fps: float = FPS, max_frames: int = MAX_FRAMES) -> np.ndarray:
    """Indices of the save points nearest to an even grid of at most ``fps`` frames per
    simulated second and ``max_frames`` frames, first and last always kept."""
    ts = np.asarray(ts, float)
    if len(ts) == 0:
        raise ValueError("the run has no finite states to show")
    span = float(ts[-1] - ts[0])
    n = int(min(max_frames, max(2, np.ceil(span * fps) + 1), len(ts)))
    grid = np.linspace(ts[0], ts[-1], n)
    idx = np.clip(np.searchsorted(ts, grid), 0, len(ts) - 1)
    prev = np.clip(idx - 1, 0, len(ts) - 1)
    idx = np.where(np.abs(ts[prev] - grid) < np.abs(ts[idx] - grid), prev, idx)
    return np.unique(np.concatenate([[0], idx, [len(ts) - 1]]))


def dcm_to_quat(rot_world_to_body: np.ndarray) -> np.ndarray:
    """Quaternions ``(..., 4)`` ``xyzw`` of the body -> world rotations ``R^T`` of DCMs
    ``[body world]`` ``(..., 3, 3)`` (three.js order, positive ``w``)."""
    R = np.swapaxes(np.asarray(rot_world_to_body, float), -1, -2)
    m00, m11, m22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    tr = m00 + m11 + m22
    cands = np.stack([
        np.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1], 1 + tr], -1),
        np.stack([1 + m00 - m11 - m22, R[..., 0, 1] + R[..., 1, 0], R[..., 0, 2] + R[..., 2, 0],
                  R[..., 2, 1] - R[..., 1, 2]], -1),
        np.stack([R[..., 0, 1] + R[..., 1, 0], 1 + m11 - m00 - m22, R[..., 1, 2] + R[..., 2, 1],
                  R[..., 0, 2] - R[..., 2, 0]], -1),
        np.stack([R[..., 0, 2] + R[..., 2, 0], R[..., 1, 2] + R[..., 2, 1], 1 + m22 - m00 - m11,
                  R[..., 1, 0] - R[..., 0, 1]], -1),
    ], 0)
    best = np.argmax(np.stack([tr, m00, m11, m22], 0), axis=0)
    q = np.take_along_axis(cands, best[None, ..., None], 0)[0]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.where(q[..., 3:4] < 0, -q, q)


def poses_of(rot: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``(F, N, 7)`` float32 poses from DCMs ``[body world]`` ``(F, N, 3, 3)`` and origins."""
    return np.concatenate([np.asarray(pos, float), dcm_to_quat(rot)], -1).astype(np.float32)


def packed(a: np.ndarray) -> dict:
    """A float32 array for the page: ``{"shape", "b64"}`` (little-endian bytes, base64)."""
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    return {"shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def _rounded(obj, digits=6):
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_rounded(v, digits) for v in obj]
    if isinstance(obj, np.ndarray):
        return _rounded(obj.tolist(), digits)
    if isinstance(obj, float | np.floating):
        return round(float(obj), digits)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def to_json(scene: Scene) -> dict:
    """The page's data object (geometry as short lists, time series packed float32)."""
    return {
        "title": scene.title,
        "kind": scene.kind,
        "times": packed(scene.times),
        "bodies": list(scene.body_names),
        "poses": packed(scene.poses),
        "geometry": _rounded(scene.geometry),
        "links": _rounded(scene.links),
        "hub": scene.hub,
        "quantities": [{"name": q.name, "unit": q.unit, "target": q.target, "signed": bool(q.signed),
                        "values": packed(q.values)} for q in scene.quantities],
        "notes": list(scene.notes),
        "info": _rounded(scene.info),
    }
