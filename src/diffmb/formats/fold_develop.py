"""From the coordinates a FOLD file gives to the flat crease pattern and its fold angles.

Three cases, each pure numpy:

* :func:`flat_sheet`: a flat sheet in any plane (Origami Simulator exports lie in
  ``x``-``z``) is fitted by its best plane (least squares, the smallest singular vector)
  and rotated into ``z = 0``, its normal chosen so that the faces run counter-clockwise
  seen from ``+z`` (FOLD's convention for the top side, the side a valley closes).
* :func:`develop`: a folded form (3-D, or 2-D folded flat) is developed into its crease
  pattern. Every face is laid out in its own plane (origin at its first vertex, ``x``
  along its first side, normal by Newell's method), then the faces are unfolded breadth
  first across the creases: a face joins its placed neighbour along their shared side, on
  the other side of it. The layout is a crease pattern only when every vertex lands at
  one point from all its faces; otherwise the surface is not developable (the sector
  angles around a vertex do not add up to 360 degrees) and the error says where.
* :func:`fold_angles`: the fold angle of every crease between two faces of a folded
  state, valley positive: ``b``'s normal against ``a``'s about the crease, signed by the
  side of the crease ``a`` lies on in the crease pattern (the same rule as the viewer's
  :func:`~diffmb.viewer.fold_frames.dihedral`). A crease folded flat (180 degrees) has no
  sign in the geometry: its ``M``/``V`` assignment gives it.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: Flatness and closure tolerance of the geometry, relative to the sheet's size: other
#: tools write coordinates to 6-7 significant digits (a rigidly folded square twist from
#: Mathematica develops to within 1.8e-6).
RELATIVE_TOL = 1e-5


def size(V: np.ndarray) -> float:
    """The sheet's bounding-box diagonal (the length tolerances scale with)."""
    return max(float(np.linalg.norm(np.ptp(V, axis=0))), 1e-300)


def signed_area(P: np.ndarray) -> float:
    x, y = P[:, 0], P[:, 1]
    return float((x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2)


def flat_sheet(V: np.ndarray, faces: list, tol: float = RELATIVE_TOL):
    """``(V2, note)``: the vertices of a sheet rotated into ``z = 0`` (``(n, 3)``, ``z``
    zero) and a sentence saying what was done, or ``None`` when ``V`` is not flat
    within ``tol`` of its size (then it is a folded form). A sheet already in ``z = 0``
    is kept as it is (``note`` None)."""
    s = size(V)
    if np.abs(V[:, 2]).max() <= 1e-9 * s:
        out = V.copy()
        out[:, 2] = 0.0
        return out, None
    c = V.mean(0)
    _, sv, vt = np.linalg.svd(V - c)
    n = vt[2]
    if np.abs((V - c) @ n).max() > tol * s:
        return None, None
    x = vt[0]
    y = np.cross(n, x)
    P = np.stack([(V - c) @ x, (V - c) @ y, np.zeros(len(V))], -1)
    if sum(signed_area(P[f]) for f in faces) < 0:   # faces clockwise: look from the other side
        n, y = -n, -y
        P[:, 1] = -P[:, 1]
    note = (f"the flat sheet lies in the plane through ({_fmt(c)}) with normal ({_fmt(n)}); "
            f"rotated into z = 0 (out of plane by at most {np.abs((V - c) @ n).max():.2g} m)")
    return P, note


def _fmt(v) -> str:
    return ", ".join(f"{x:.4g}" for x in np.asarray(v, float) + 0.0)


def _newell(P: np.ndarray) -> np.ndarray:
    n = np.zeros(3)
    for i in range(len(P)):
        a, b = P[i], P[(i + 1) % len(P)]
        n += np.array([(a[1] - b[1]) * (a[2] + b[2]), (a[2] - b[2]) * (a[0] + b[0]), (a[0] - b[0]) * (a[1] + b[1])])
    return n


def face_frame(V: np.ndarray, face: list, fi: int, tol: float):
    """``(local (k, 2), normal (3,))``: face ``fi`` laid out in its own plane, counter-
    clockwise about its Newell normal; ValueError when it is not planar within ``tol``."""
    P = V[face]
    n = _newell(P)
    if np.linalg.norm(n) < 1e-300:
        raise ValueError(f"faces_vertices[{fi}]: degenerate face (zero area in the folded form)")
    n = n / np.linalg.norm(n)
    o = P[0]
    side = next((P[k] - o for k in range(1, len(P)) if np.linalg.norm(P[k] - o) > 0), None)
    x = side / np.linalg.norm(side)
    y = np.cross(n, x)
    off = np.abs((P - o) @ n).max()
    if off > tol:
        raise ValueError(f"faces_vertices[{fi}]: the face is not planar in the folded form (a vertex "
                         f"{off:.3g} m off its plane); a rigid panel cannot be developed from it")
    return np.stack([(P - o) @ x, (P - o) @ y], -1), n


def _rigid_2d(a0, a1, b0, b1):
    """The proper rigid motion of the plane taking ``a0 -> b0`` and the direction
    ``a0 a1`` onto ``b0 b1``: ``(R, t)`` with ``x -> R x + t``."""
    da, db = a1 - a0, b1 - b0
    ang = np.arctan2(db[1], db[0]) - np.arctan2(da[1], da[0])
    R = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
    return R, b0 - R @ a0


def _cross2(a, b) -> float:
    return float(a[0] * b[1] - a[1] * b[0])


def develop(V: np.ndarray, faces: list, tol: float = RELATIVE_TOL):
    """``(V2 (n, 3), flipped)``: the crease pattern of the folded form ``V`` (``(n, 3)``;
    a 2-D form has ``z = 0``), its vertices in ``z = 0``, and the faces whose vertex order
    runs against their neighbours' (laid out mirrored; FOLD wants them consistent).
    ValueError names the face that is not planar, the faces that are not connected, or
    the vertex the faces do not place at one point."""
    s = size(V)
    frames = [face_frame(V, f, fi, tol * s) for fi, f in enumerate(faces)]
    sides = {}
    for fi, f in enumerate(faces):
        for k in range(len(f)):
            sides.setdefault(frozenset((f[k], f[(k + 1) % len(f)])), []).append(fi)
    placed = {0: {v: p for v, p in zip(faces[0], frames[0][0])}}
    flipped = set()
    queue = deque([0])
    while queue:
        fi = queue.popleft()
        f = faces[fi]
        for k in range(len(f)):
            u, w = f[k], f[(k + 1) % len(f)]
            for g in sides[frozenset((u, w))]:
                if g in placed:
                    continue
                local = {v: p for v, p in zip(faces[g], frames[g][0])}
                pu, pw = placed[fi][u], placed[fi][w]
                R, t = _rigid_2d(local[u], local[w], pu, pw)
                pos = {v: R @ p + t for v, p in local.items()}
                here = np.mean(list(placed[fi].values()), 0)
                there = np.mean(list(pos.values()), 0)
                if _cross2(pw - pu, here - pu) * _cross2(pw - pu, there - pu) > 0:   # same side: mirror it
                    local = {v: np.array([p[0], -p[1]]) for v, p in local.items()}
                    R, t = _rigid_2d(local[u], local[w], pu, pw)
                    pos = {v: R @ p + t for v, p in local.items()}
                    flipped.add(g)
                placed[g] = pos
                queue.append(g)
    missing = [fi for fi in range(len(faces)) if fi not in placed]
    if missing:
        raise ValueError(f"faces_vertices[{missing[0]}]: the folded form is not one connected sheet "
                         f"(faces {missing[:5]} share no side with face 0); it cannot be developed")
    out = np.zeros((len(V), 3))
    seen = np.zeros(len(V), bool)
    worst, at = 0.0, -1
    for fi, pos in placed.items():
        for v, p in pos.items():
            if seen[v]:
                d = float(np.linalg.norm(out[v, :2] - p))
                if d > worst:
                    worst, at = d, v
            else:
                out[v, :2], seen[v] = p, True
    if worst > tol * s:
        raise ValueError(f"vertices_coords[{at}]: the faces around this vertex do not develop into a flat "
                         f"sheet (they place it {worst:.3g} m apart; its sector angles add up to "
                         f"{np.degrees(sector_sum(V, faces, at)):.6g} deg): not a folded form of a flat crease "
                         f"pattern")
    return out, sorted(flipped)


def sector_sum(V: np.ndarray, faces: list, v: int) -> float:
    """The sum of the corner angles [rad] of the faces at vertex ``v``."""
    total = 0.0
    for f in faces:
        for k, w in enumerate(f):
            if w == v:
                a, b = V[f[k - 1]] - V[v], V[f[(k + 1) % len(f)]] - V[v]
                total += float(np.arctan2(np.linalg.norm(np.cross(a, b)), a @ b))
    return total


def fold_angle(na, nb, e, side) -> np.ndarray:
    """Fold angle [rad] of the crease with direction ``e`` (the folded state) between
    faces of normals ``na`` and ``nb``, ``side`` the sign of ``a``'s side of the crease in
    the crease pattern (module docstring); any leading batch axes."""
    na, nb, e = (np.asarray(x, float) for x in (na, nb, e))
    return np.arctan2(side * np.einsum("...i,...i->...", np.cross(na, nb), e), np.einsum("...i,...i->...", na, nb))


def fold_angles(V2: np.ndarray, V3: np.ndarray, faces: list, edges: list, border: dict, tol: float = 1e-6):
    """``(angles, flat)``: per edge, the fold angle [rad] of folded state ``V3`` against the
    crease pattern ``V2`` for edges between two faces (others 0), and the edges folded flat
    (within ``tol`` rad of 180 degrees: their sign is the assignment's)."""
    n3 = []
    for f in faces:
        n = _newell(V3[f])
        n3.append(n / max(np.linalg.norm(n), 1e-300))
    orient = [np.sign(signed_area(V2[f])) or 1.0 for f in faces]
    angles, flat = np.zeros(len(edges)), []
    for i, (p, q) in enumerate(edges):
        fs = border.get(i, [])
        if len(fs) != 2 or fs[0] == fs[1]:
            continue
        a, b = fs
        ca = V2[faces[a]].mean(0)
        side = np.sign(_cross2(ca - V2[p], V2[q] - V2[p]))
        e = V3[q] - V3[p]
        e = e / max(np.linalg.norm(e), 1e-300)
        ang = float(fold_angle(orient[a] * n3[a], orient[b] * n3[b], e, side))
        angles[i] = ang
        if abs(abs(ang) - np.pi) < tol:
            flat.append(i)
    return angles, flat
