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
    n = jax.vmap(geo.polygon_normal)(P, mask)
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


def pair_distances(Pi, mi, Pj, mj):
    """The 24 (quad-quad) primitive distances of one pair and their weights: each
    polygon's vertices against the other polygon (:func:`~diffmb.math.geometry.point_polygon_distance`),
    and the edge-edge pairs mollified.

    Every segment distance of the pair in one batch: the 16 edge-edge pairs and, for the
    vertices beside the other polygon's face, the 2 x 4 x 4 vertex-edge pairs (a vertex
    is a segment of zero length). The nearest-point search is traced once, where a
    vertex-face search of its own, with its own derivative rule, doubled the tracing (the
    10x10 map fold's panel forces alone: 0.35 -> 0.18 s to lower, 0.88 -> 0.75 s with
    XLA's compile)."""
    k = Pi.shape[0]
    ai, bi = geo.edges(Pi, mi)
    aj, bj = geo.edges(Pj, mj)
    X = jnp.stack([Pi, Pj])                                    # each side's vertices ...
    Va, Vb, Vm = jnp.stack([aj, ai]), jnp.stack([bj, bi]), jnp.stack([mj, mi])   # ... and the other's edges
    inside, height = jax.vmap(lambda X, V, m: jax.vmap(lambda x: geo.face_side(x, V, m))(X))(
        X, jnp.stack([Pj, Pi]), Vm)
    # segments: edge i of Pi against edge j of Pj; vertex v of a side against edge e of the other
    rep = lambda A: jnp.repeat(A, k, axis=-2)                  # row r -> r // k
    til = lambda A: jnp.tile(A, (1,) * (A.ndim - 2) + (k, 1))   # row r -> r % k
    p1 = jnp.concatenate([rep(ai), rep(X).reshape(-1, 3)])
    q1 = jnp.concatenate([rep(bi), rep(X).reshape(-1, 3)])
    p2 = jnp.concatenate([til(aj), til(Va).reshape(-1, 3)])
    q2 = jnp.concatenate([til(bj), til(Vb).reshape(-1, 3)])
    seg = jax.vmap(geo.segment_distance)(p1, q1, p2, q2)
    d_ee, to_edges = seg[:k * k], seg[k * k:].reshape(2, k, k)
    sides = jnp.where(inside, jnp.abs(height), jnp.min(to_edges, -1))
    ei, ej = bi - ai, bj - aj
    cross2 = jnp.sum(jnp.cross(ei[:, None, :], ej[None, :, :]) ** 2, -1)
    eps = 1e-3 * jnp.sum(ei * ei, -1)[:, None] * jnp.sum(ej * ej, -1)[None, :] + 1e-300
    moll = br.mollifier(cross2, eps)
    d = jnp.concatenate([sides.reshape(-1), d_ee])
    w = jnp.concatenate([mi.astype(d.dtype), mj.astype(d.dtype),
                         (moll * (mi[:, None] & mj[None, :]).astype(d.dtype)).reshape(-1)])
    return d, w


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
    n = jax.vmap(geo.polygon_normal)(Ps, mask)          # once a panel, not once a pair
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
