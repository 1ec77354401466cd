"""The faces of a crease pattern given by its edges alone (a planar straight-line graph).

FOLD lets a file give ``edges_vertices`` without ``faces_vertices``; the faces are then the
bounded faces of the planar graph. They are traced the usual way: around every vertex the
edges are sorted by angle, and a face is walked by leaving each vertex along the edge next
clockwise after the one it arrived by, which traces every bounded face counter-clockwise
and the outer boundary clockwise (dropped: it has negative area). Every directed side is
walked once, so the cost is ``O(E log E)``. A vertex met twice on one walk is a slit
(a cut that ends inside the sheet), which FOLD allows.

Edges that cross without a shared vertex have no planar faces: :func:`crossing_edges`
finds them first so that the error names them.
"""

from __future__ import annotations

import numpy as np


def crossing_edges(V: np.ndarray, edges: list):
    """The first pair ``(i, j)`` of edges whose interiors cross (or overlap), or None."""
    E = np.asarray(edges, int)
    if len(E) < 2:
        return None
    a, b = V[E[:, 0], :2], V[E[:, 1], :2]
    scale = max(float(np.ptp(V[:, :2], axis=0).max()), 1e-300)
    eps = 1e-12 * scale * scale
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    for i in range(len(E) - 1):
        j = np.arange(i + 1, len(E))
        box = np.all(lo[j] <= hi[i] + 1e-12 * scale, 1) & np.all(hi[j] >= lo[i] - 1e-12 * scale, 1)
        shared = (E[j] == E[i, 0]).any(1) | (E[j] == E[i, 1]).any(1)
        j = j[box & ~shared]
        if not len(j):
            continue
        d = b[i] - a[i]
        o1 = _cross(d, a[j] - a[i])
        o2 = _cross(d, b[j] - a[i])
        e = b[j] - a[j]
        o3 = _cross(e, a[i] - a[j])
        o4 = _cross(e, b[i] - a[j])
        proper = (o1 * o2 < -eps) & (o3 * o4 < -eps)
        touch = ((np.abs(o1) <= eps) & _between(a[j], a[i], b[i])) | ((np.abs(o2) <= eps) & _between(b[j], a[i], b[i]))
        hit = np.flatnonzero(proper | touch)
        if len(hit):
            return i, int(j[hit[0]])
    return None


def _cross(u, v):
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def _between(p, a, b):
    """Points ``p`` (already on the line ``a b``) strictly inside the segment."""
    d = b - a
    t = ((p - a) @ d) / (d @ d)
    return (t > 1e-12) & (t < 1 - 1e-12)


def faces_of(V: np.ndarray, edges: list) -> list:
    """The bounded faces (vertex index lists, counter-clockwise) of the planar graph of
    ``edges`` on vertices ``V`` (``(n, 2+)``); ValueError when two edges cross or no
    bounded face is left."""
    hit = crossing_edges(V, edges)
    if hit is not None:
        i, j = hit
        raise ValueError(f"edges_vertices[{i}] and edges_vertices[{j}] cross without a shared vertex; "
                         "faces cannot be derived (split them at their crossing)")
    nbrs: dict = {}
    for u, w in edges:
        nbrs.setdefault(u, []).append(w)
        nbrs.setdefault(w, []).append(u)
    order = {}
    for u, ws in nbrs.items():
        ang = [np.arctan2(V[w, 1] - V[u, 1], V[w, 0] - V[u, 0]) for w in ws]
        order[u] = [ws[k] for k in np.argsort(ang)]          # counter-clockwise around u
    position = {(u, w): k for u, ws in order.items() for k, w in enumerate(ws)}
    used, faces = set(), []
    for u0, w0 in [(u, w) for u, w in edges] + [(w, u) for u, w in edges]:
        if (u0, w0) in used:
            continue
        face, (u, w) = [], (u0, w0)
        while (u, w) not in used:
            used.add((u, w))
            face.append(u)
            ring = order[w]
            nxt = ring[(position[(w, u)] - 1) % len(ring)]   # next clockwise after the way we came
            u, w = w, nxt
        P = V[face, :2]
        area = float((P[:, 0] * np.roll(P[:, 1], -1) - np.roll(P[:, 0], -1) * P[:, 1]).sum() / 2)
        if area > 0:
            faces.append(face)
    if not faces:
        raise ValueError("edges_vertices: the edges enclose no face (faces_vertices missing and none can be derived)")
    return faces
