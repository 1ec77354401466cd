"""Sweeps over a tree without a Python loop over its bodies.

The recursive algorithms (Featherstone, *Rigid Body Dynamics Algorithms*, tables 5.1, 6.2,
7.1) are built from three kinds of sweep, each run on whole arrays of bodies with static
index tables from :mod:`diffmb.layout`, so the traced graph — and the compile time — does
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
replace a sweep of ``depth`` steps. :func:`level_scan` runs a genuinely nonlinear
recursion (the articulated-body inertias) one depth level at a time: :func:`levels_up`
and :func:`levels_down` call ``step(carry, level)`` with all bodies of a level at once
(grouped by joint kind, as MJX's ``scan.body_tree`` does), level 0 outside the scan (its
joint kinds, e.g. a free root, often appear nowhere else) and the deeper levels in one
``lax.scan``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from . import spatial as sp


def _pad(x, value=0.0):
    """Append one sentinel row (the world) to a per-body array."""
    fill = jnp.full((1,) + x.shape[1:], value, x.dtype)
    return jnp.concatenate([x, fill], 0)


#: Trees of at most this many bodies sum along root paths with one dense product by the
#: (N, N) ancestor matrix (one kernel) instead of pointer-doubling rounds (three kernels
#: per round). Set from measurements (experiments/bench_tree.py).
DENSE_MAX_BODIES = 32


def _dense(lay, x, transpose):
    A = jnp.asarray(lay.ancestors.T if transpose else lay.ancestors, x.dtype)
    return (A @ x.reshape(lay.n_bodies, -1)).reshape(x.shape)


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
    eye = jnp.eye(3, dtype=E.dtype)[None]
    E = jnp.concatenate([E, eye], 0)
    r = _pad(r)
    for jump in lay.jumps:
        # the path transform from the 2**k-th ancestor, after the one above it
        E2, r2 = sp.xform_compose(E[:N], r[:N], E[jump], r[jump])
        E = E.at[:N].set(E2)
        r = r.at[:N].set(r2)
    return E[:N], r[:N]


def _level_xs(groups):
    return {g.kind: (jnp.asarray(g.ids), jnp.asarray(g.parent), jnp.asarray(g.dofs),
                     jnp.asarray(g.valid)) for g in groups}


def _level0(groups):
    return {g.kind: (jnp.asarray(g.ids[0]), jnp.asarray(g.parent[0]), jnp.asarray(g.dofs[0]),
                     jnp.asarray(g.valid[0])) for g in groups}


def levels_down(lay, step, carry, extra=(None, None)):
    """Base-to-tip: ``step(carry, (level, extra))`` on level 0, then on levels 1.. in one
    ``lax.scan``. ``extra``: per-level data ``(level 0's, the deeper levels' stacked)``,
    e.g. what :func:`levels_up` returned. Returns ``(carry, (out0, outs))``."""
    g0, g = lay.levels
    carry, out0 = step(carry, (_level0(g0), extra[0]))
    outs = None
    if g:
        carry, outs = lax.scan(step, carry, (_level_xs(g), extra[1]))
    return carry, (out0, outs)


def levels_up(lay, step, carry, extra=(None, None)):
    """Tip-to-base: the deeper levels in one reversed ``lax.scan``, then level 0."""
    g0, g = lay.levels
    outs = None
    if g:
        carry, outs = lax.scan(step, carry, (_level_xs(g), extra[1]), reverse=True)
    carry, out0 = step(carry, (_level0(g0), extra[0]))
    return carry, (out0, outs)


__all__ = ["ancestors_sum", "subtree_sum", "compose_poses", "levels_down", "levels_up"]
