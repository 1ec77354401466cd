"""Sweeps over a tree without a Python loop over its bodies.

The recursive algorithms (Featherstone, *Rigid Body Dynamics Algorithms*, tables 5.1, 6.2,
7.1) are built from three kinds of sweep, each run on whole arrays of bodies with static
index tables from :mod:`diffmb.tree.layout`, so the traced graph — and the compile time — does
not grow with the number of bodies:

:func:`ancestors_sum`
    base-to-tip accumulation ``y_i = sum_{j in path(i)} x_j`` (velocities and bias
    accelerations in world coordinates are such sums of joint contributions);
:func:`subtree_sum`
    tip-to-base accumulation ``y_i = sum_{j in subtree(i)} x_j`` (composite inertias, the
    RNEA's transmitted forces), the transpose of :func:`ancestors_sum`;
:func:`compose_poses`
    world poses from parent-to-body transforms.

All three use pointer doubling (Hillis-Steele prefix over root paths): round ``k`` combines
every body with its ``2**k``-th ancestor, so ``ceil(log2(depth + 1))`` vectorised rounds
replace a sweep of ``depth`` steps. A genuinely nonlinear recursion (the articulated-body
inertias) runs one depth level at a time instead, in :mod:`diffmb.tree.aba`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..math import spatial as sp


def _pad(x, value=0.0):
    """Append one sentinel row (the world) to a per-body array."""
    fill = jnp.full((1,) + x.shape[1:], value, x.dtype)
    return jnp.concatenate([x, fill], 0)


#: Trees of at most this many bodies compose their poses body by body (unrolled; XLA
#: fuses it into a few kernels, but the graph grows with the tree), larger ones by
#: pointer doubling; and trees of at most ``DENSE_MAX_BODIES`` bodies sum along root
#: paths by one product with the (N, N) ancestor matrix instead of doubling rounds.
#: Measured (experiments/bench_tree.py --sweeps; kinematics + CRBA + RNEA of a revolute
#: chain, one state, 2-core CPU), small forms / doubling: 4.4 / 5.8 us at N = 4, 8.4 /
#: 13.8 at 16, 16.5 / 19.5 at 32, 45.5 / 55.6 at 64, 162 / 107 at 128; compile 0.26 /
#: 0.33 s at 4, 0.35 / 0.48 at 16, 1.08 / 0.69 at 64, 2.59 / 0.73 at 128.
UNROLL_MAX_BODIES = 16
DENSE_MAX_BODIES = 64


def dof_to_body(lay, x):
    """``y_b = sum of x_j over the velocities j of body b's joint`` (x: ``(nv, ...)``)."""
    if lay.n_bodies <= DENSE_MAX_BODIES:
        B = jnp.asarray(lay.dof_body[None, :] == np.arange(lay.n_bodies)[:, None], x.dtype)
        return sp.table_product(B, x.reshape(lay.nv, -1)).reshape((lay.n_bodies,) + x.shape[1:])
    return jax.ops.segment_sum(x, lay.dof_body, num_segments=lay.n_bodies)


def _dense(lay, x, transpose):
    A = jnp.asarray(lay.ancestors.T if transpose else lay.ancestors, x.dtype)
    return sp.table_product(A, x.reshape(lay.n_bodies, -1)).reshape(x.shape)


def ancestors_sum(lay, x):
    """``y_i = sum of x_j over body i and all its ancestors`` (x: ``(N, ...)``)."""
    N = lay.n_bodies
    if N <= DENSE_MAX_BODIES:
        return _dense(lay, x, False)
    y = _pad(x)
    for jump in lay.jumps:
        y = y.at[:N].add(y[jump])
    return y[:N]


def subtree_sum(lay, x):
    """``y_i = sum of x_j over body i and all its descendants`` (x: ``(N, ...)``)."""
    N = lay.n_bodies
    if N <= DENSE_MAX_BODIES:
        return _dense(lay, x, True)
    y = _pad(x)
    for jump in reversed(lay.jumps):
        y = y.at[jump].add(y[:N])
        y = y.at[N].set(0.0)
    return y[:N]


def compose_poses(lay, E, r):
    """World poses ``(E_i = [body world], r_i)`` from parent-to-body transforms ``(E, r)``."""
    N = lay.n_bodies
    if N <= UNROLL_MAX_BODIES:
        # a few bodies: one composition each, fused by XLA into a handful of kernels
        Ew, rw = [], []
        for i, p in enumerate(lay.parents):
            if p < 0:
                Ew.append(E[i]), rw.append(r[i])
            else:
                e2, r2 = sp.xform_compose(E[i], r[i], Ew[p], rw[p])
                Ew.append(e2), rw.append(r2)
        return jnp.stack(Ew), jnp.stack(rw)
    eye = jnp.eye(3, dtype=E.dtype)[None]
    E = jnp.concatenate([E, eye], 0)
    r = _pad(r)
    for jump in lay.jumps:
        # the path transform from the 2**k-th ancestor, after the one above it
        E2, r2 = sp.xform_compose(E[:N], r[:N], E[jump], r[jump])
        E = E.at[:N].set(E2)
        r = r.at[:N].set(r2)
    return E[:N], r[:N]


__all__ = ["ancestors_sum", "subtree_sum", "compose_poses"]
