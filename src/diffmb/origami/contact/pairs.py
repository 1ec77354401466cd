"""Tier B's geometry, pure functions of the panels' world vertices ``P`` (``(n_panels,
k, 3)``, a panel of fewer than ``k`` vertices padded by repeating its last, ``mask``
saying which rows are real) and the pairs' panel indices ``I``, ``J``: a lower bound on
every pair's distance (the broad phase), the exact primitive distances of one pair (the
narrow phase, IPC's vertex-face and edge-edge primitives), and the detector's overlap
test."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...math import barrier as br, geometry as geo


def pair_bounds(P, mask, radius, I, J):
    """A lower bound on every pair's distance: the bounding spheres' gap (``radius``:
    each panel's about its vertex centroid), or the gap between one panel's plane and
    the other's vertices, whichever is larger. Formed for all panels at once as dense
    (panels x panels) tables, then read at the pairs: a few small products where a
    gather of every pair's vertices would cost more than the rest of the contact term."""
    c = jnp.sum(jnp.where(mask[..., None], P, 0.0), 1) / jnp.sum(mask, 1).astype(P.dtype)[:, None]
    cc = jnp.sum(c * c, -1)
    # centre distances from the Gram matrix (its round-off, 1e-16 of the structure's
    # size squared, is far below any reach)
    d2 = jnp.maximum(cc[:, None] + cc[None, :] - 2.0 * c @ c.T, geo.TINY)
    sphere = jnp.sqrt(d2) - radius[:, None] - radius[None, :]
    n = geo.polygon_normal(P, mask)
    # vertex k of panel b above the plane of panel a, one (a, b) table per k, their
    # extremes taken elementwise: a padded vertex row repeats a real vertex, so it changes
    # neither extreme (an (a, b, k) array reduced over k took twice the time: 10x10 map
    # fold 150 -> 75 us a call)
    offset = jnp.sum(P[:, 0, :] * n, -1)[:, None]
    lo = hi = None
    for k in range(P.shape[1]):
        h = n @ P[:, k, :].T - offset
        lo, hi = (h, h) if lo is None else (jnp.minimum(lo, h), jnp.maximum(hi, h))
    plane = jnp.maximum(lo, -hi)
    return jnp.maximum(sphere, jnp.maximum(plane, plane.T))[I, J]


def _segment_batch(Pi, mi, Pj, mj):
    """The pair's segments in one batch, and which vertices lie over the other face:
    ``(inside, height, (p1, q1, p2, q2))``. Rows ``r < k^2``: edge ``r // k`` of ``Pi``
    against edge ``r % k`` of ``Pj``; then, side ``a`` (0: ``Pi``'s vertices against
    ``Pj``'s edges, 1: the reverse) and vertex ``v``, ``k`` rows against the other side's
    edges ``e`` (a vertex is a segment of zero length). Leading axes of ``Pi (..., k,
    3)`` and the rest are pairs side by side: every operation takes them all at once,
    which traces once where a ``vmap`` over the pairs batched each nested program."""
    k = Pi.shape[-2]
    ai, bi = geo.edges(Pi, mi)
    aj, bj = geo.edges(Pj, mj)
    side = lambda a, b: jnp.stack([a, b], -3)
    X = side(Pi, Pj)                                           # each side's vertices ...
    Va, Vb = side(aj, ai), side(bj, bi)                        # ... and the other's edges
    inside, height = geo.face_side(X, jnp.expand_dims(side(Pj, Pi), -3), jnp.expand_dims(jnp.stack([mj, mi], -2), -2))
    rows = lambda A: A.reshape(A.shape[:-3] + (-1, 3))
    rep = lambda A: jnp.repeat(A, k, axis=-2)                  # row r -> r // k
    til = lambda A: jnp.tile(A, (1,) * (A.ndim - 2) + (k, 1))   # row r -> r % k
    p1 = jnp.concatenate([rep(ai), rows(rep(X))], -2)
    q1 = jnp.concatenate([rep(bi), rows(rep(X))], -2)
    p2 = jnp.concatenate([til(aj), rows(til(Va))], -2)
    q2 = jnp.concatenate([til(bj), rows(til(Vb))], -2)
    return inside, height, (p1, q1, p2, q2)


def _edge_terms(Pi, mi, Pj, mj):
    """The edge-edge primitives' weights ``(..., k^2)`` (IPC's mollifier of ``x = |ei x
    ej|^2`` against ``eps = 1e-3 |ei|^2 |ej|^2``, which takes a pair of nearly parallel
    edges out smoothly, where their nearest points stop being unique; 0 for padded
    edges), and the couple ``(..., k^2, 3)`` on panel ``i`` per unit energy on the weight,
    ``-ei x dw/dei``: the weight turns with the edges' relative angle, ``ei x dx/dei =
    -2 (ei . ej) ei x ej`` (``eps`` is unchanged by a rotation), and panel ``j`` takes the
    opposite couple."""
    k = Pi.shape[-2]
    ai, bi = geo.edges(Pi, mi)
    aj, bj = geo.edges(Pj, mj)
    ei = jnp.repeat(bi - ai, k, axis=-2)                      # row r: edge r // k of Pi ...
    ej = jnp.tile(bj - aj, (1,) * (Pj.ndim - 2) + (k, 1))      # ... against edge r % k of Pj
    c = jnp.cross(ei, ej)
    x = jnp.sum(c * c, -1)
    eps = 1e-3 * jnp.sum(ei * ei, -1) * jnp.sum(ej * ej, -1) + 1e-300
    on = (mi[..., :, None] & mj[..., None, :]).reshape(mi.shape[:-1] + (-1,)).astype(Pi.dtype)
    # (eps is 0 for a padded edge in float32, where 1e-300 underflows: divided only where
    # the mollifier acts)
    safe = jnp.where(x < eps, eps, 1.0)
    slope = jnp.where(x < eps, 2.0 - 2.0 * x / safe, 0.0)   # dw/dx eps
    couple = (on * slope * 2.0 * jnp.sum(ei * ej, -1) / safe)[..., None] * c
    return br.mollifier(x, eps) * on, couple


def _weights(mi, mj, w_ee):
    return jnp.concatenate([mi.astype(w_ee.dtype), mj.astype(w_ee.dtype), w_ee], -1)


def _sides(inside, height, to_edges):
    """The vertex-face distances ``(..., 2k)``: ``|height|`` over the face, else the
    nearest edge's distance."""
    sides = jnp.where(inside, jnp.abs(height), jnp.min(to_edges, -1))
    return sides.reshape(sides.shape[:-2] + (-1,))


def pair_distances(Pi, mi, Pj, mj):
    """The 24 (quad-quad) primitive distances of one pair and their weights: each
    polygon's vertices against the other polygon (:func:`~diffmb.math.geometry.point_polygon_distance`),
    and the edge-edge pairs mollified (:func:`_edge_terms`). Leading axes: pairs side by
    side.

    Every segment distance of the pair in one batch (:func:`_segment_batch`): the 16
    edge-edge pairs and, for the vertices beside the other polygon's face, the 2 x 4 x 4
    vertex-edge pairs. The nearest-point search is traced once, where a vertex-face
    search of its own, with its own derivative rule, doubled the tracing (the 10x10 map
    fold's panel forces alone: 0.35 -> 0.18 s to lower, 0.88 -> 0.75 s with XLA's
    compile)."""
    k = Pi.shape[-2]
    inside, height, seg = _segment_batch(Pi, mi, Pj, mj)
    seg = geo.segment_distance(*seg)                           # elementwise over the rows
    d_ee, to_edges = seg[..., :k * k], seg[..., k * k:].reshape(seg.shape[:-1] + (2, k, k))
    d = jnp.concatenate([_sides(inside, height, to_edges), d_ee], -1)
    return d, _weights(mi, mj, _edge_terms(Pi, mi, Pj, mj)[0])


def pair_primitives(Pi, mi, Pj, mj):
    """:func:`pair_distances`' distances and weights with each primitive's nearest points,
    ``ci`` on ``Pi`` and ``cj`` on ``Pj`` (``(..., 2k + k^2, 3)`` each, ``|ci - cj| = d``),
    and the edge-edge weights' couples (:func:`_edge_terms`): a primitive's barrier force
    acts along ``ci - cj`` at those points, which by the envelope theorem (the nearest
    points held fixed) is its energy's exact gradient for the rigid motions panels make.
    A vertex over the other face meets its projection onto that face's plane; one beside
    it, the nearest point of the nearest edge. Leading axes: pairs side by side."""
    k = Pi.shape[-2]
    inside, height, (p1, q1, p2, q2) = _segment_batch(Pi, mi, Pj, mj)
    seg, s, t = geo.segment_nearest(p1, q1, p2, q2)           # elementwise over the rows
    c1 = p1 + s[..., None] * (q1 - p1)
    c2 = p2 + t[..., None] * (q2 - p2)
    lead = seg.shape[:-1]
    d_ee, to_edges = seg[..., :k * k], seg[..., k * k:].reshape(lead + (2, k, k))
    nearest = jax.nn.one_hot(jnp.argmin(to_edges, -1), k, dtype=Pi.dtype)   # (side, vertex, edge)
    on_edge = jnp.einsum("...ave,...avej->...avj", nearest, c2[..., k * k:, :].reshape(lead + (2, k, k, 3)))
    X = jnp.stack([Pi, Pj], -3)
    n = jnp.stack([geo.polygon_normal(Pj, mj), geo.polygon_normal(Pi, mi)], -2)   # the other side's face
    other = jnp.where(inside[..., None], X - height[..., None] * n[..., None, :], on_edge)   # (side, vertex, 3)
    d = jnp.concatenate([_sides(inside, height, to_edges), d_ee], -1)
    ci = jnp.concatenate([Pi, other[..., 1, :, :], c1[..., :k * k, :]], -2)
    cj = jnp.concatenate([other[..., 0, :, :], Pj, c2[..., :k * k, :]], -2)
    w_ee, couple = _edge_terms(Pi, mi, Pj, mj)
    return d, _weights(mi, mj, w_ee), ci, cj, couple


def overlaps(P, mask, I, J, shrink, bound, capacity: int):
    """The detector's exact test: ``(pick, depth)``, the pairs tested (all, or the
    ``capacity`` nearest by their lower ``bound``) and the separating-axis depth of each,
    the panels shrunk by ``shrink`` about their centroids so that shared edges and
    corners do not count."""
    pick = jnp.arange(I.shape[0])
    if I.shape[0] > capacity:   # the pairs that may touch, by a lower bound
        pick = jax.lax.top_k(-bound, capacity)[1]
    c = jnp.sum(jnp.where(mask[..., None], P, 0.0), 1) / jnp.sum(mask, 1).astype(P.dtype)[:, None]
    Ps = c[:, None, :] + (1.0 - shrink) * (P - c[:, None, :])
    i, j = I[pick], J[pick]
    n = geo.polygon_normal(Ps, mask)          # once a panel, not once a pair
    return pick, jax.vmap(geo.overlap_depth)(Ps[i], mask[i], Ps[j], mask[j], n[i], n[j])


def rows(P, idx):
    """``P[idx]`` as a product with a one-hot matrix: its derivative's transpose is a
    product too, where a gather's is a scatter-add that the CPU compiles into a loop
    (the panels are few beside the candidates' primitives, so the product is cheap)."""
    onehot = (idx[:, None] == jnp.arange(P.shape[0], dtype=idx.dtype)[None, :]).astype(P.dtype)
    return (onehot @ P.reshape(P.shape[0], -1)).reshape(idx.shape + P.shape[1:])


def onto(n: int, index: np.ndarray) -> np.ndarray:
    """The constant ``(n, len(index))`` matrix that adds item ``k`` onto row ``index[k]``
    (a body, or a speed; an item on the world, ``index < 0``, onto none)."""
    out = np.zeros((n, len(index)))
    k = np.flatnonzero(index >= 0)
    np.add.at(out, (index[k], k), 1.0)
    return out
