"""Coordinate couplings: one-row closures between scalar joints.

A MuJoCo joint equality, a URDF ``<mimic>`` or a gear holds ``q_y = p(q_x) = a0 + a1 q_x
+ ... + a4 q_x^4`` (``q_y = a0`` without ``q_x``). Each is a pair of the closure layer
(:mod:`diffmb.closures`), in the same pairs, rows and blocks as the node pairs, so the
joint-space solve, Baumgarte, projection and the rank analysis treat both alike. Its one
row (labelled ``q``) has

* residual ``q_y - p(q_x)``;
* Jacobian row ``e_y - p'(q_x) e_x`` on the loop ``(y, x)``;
* velocity product ``-p''(q_x) qd_x^2`` (``w_dot = G qdd + g``).

The coefficients are arrays of the pairs (``LoopClosures.coef``), so a gear ratio is a
differentiable parameter. The functions below take the closure set ``nodes`` and the
kinematics workspace ``ws`` (which carries ``q`` and ``qd``) and write the coupling rows
into the ``(P, 6)`` arrays the closure layer computes for every pair.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

#: The one row of a coordinate coupling, and its label.
COUPLING_ROWS = (0,)
COUPLING_LABEL = "q"


def coupling(name, y: int, x: int | None = None, coef=(0.0, 1.0)) -> dict:
    """A coordinate-coupling pair for :func:`loop_closures`: ``q[y] = sum_k coef[k] q[x]^k``
    (at most 5 coefficients; ``x=None`` holds ``q[y] = coef[0]``)."""
    c = np.zeros(5)
    coef = np.atleast_1d(np.asarray(coef, float))
    if coef.size > 5:
        raise ValueError(f"coupling {name!r}: at most 5 polynomial coefficients (a0..a4), got {coef.size}")
    c[: coef.size] = coef
    coords = (int(y),) if x is None else (int(y), int(x))
    if x is not None and int(x) == int(y):
        raise ValueError(f"coupling {name!r}: a coordinate cannot be coupled to itself")
    return dict(name=name, body_a=-1, body_b=-1, kind="coupling", axis=0, coords=coords, coef=c,
                rot_a=np.eye(3), pos_a=np.zeros(3), rot_b=np.eye(3), pos_b=np.zeros(3))


def _couplings(nodes):
    """Static ``(ids, y, x)``: the coupling pairs and their coordinates (``x = -1``: none)."""
    ids = [k for k, c in enumerate(nodes.closures) if c.coords]
    y = [nodes.closures[k].coords[0] for k in ids]
    x = [nodes.closures[k].coords[1] if len(nodes.closures[k].coords) > 1 else -1 for k in ids]
    return np.array(ids, np.int32), np.array(y, np.int32), np.array(x, np.int32)


def _poly(nodes, ids, x, qx):
    """``p, p', p''`` of the couplings ``ids`` at ``qx`` (zero where there is no ``x``)."""
    a = nodes.coef[ids]
    has_x = jnp.asarray(x >= 0, qx.dtype)
    z = qx * has_x
    powers = jnp.stack([z**k for k in range(5)], -1)
    p = jnp.sum(a * powers, -1)
    dp = jnp.sum(a[:, 1:] * powers[:, :4] * jnp.arange(1, 5, dtype=qx.dtype)[None, :], -1) * has_x
    ddp = jnp.sum(a[:, 2:] * powers[:, :3] * jnp.asarray([[2.0, 6.0, 12.0]], qx.dtype), -1) * has_x
    return p, dp, ddp


def _at_x(a, x):
    """``a[x]`` per coupling (any entry where there is no ``x``; it is multiplied by 0)."""
    return a[np.maximum(x, 0)]


def _with_rows(ws, nodes, out, value):
    """``out (P, 6)`` with each coupling's row set to ``value(y, x, ids)`` (C,)."""
    ids, y, x = _couplings(nodes)
    if not ids.size:
        return out
    if ws.q is None:
        raise ValueError("coordinate couplings need the state in the workspace: kinematics(model, q, qd)")
    return out.at[ids, COUPLING_ROWS[0]].set(value(y, x, ids))


def with_residual(ws, nodes, out):
    """The residual ``q_y - p(q_x)`` in each coupling's row of ``out``."""
    return _with_rows(ws, nodes, out, lambda y, x, ids: ws.q[y] - _poly(nodes, ids, x, _at_x(ws.q, x))[0])


def with_rate(ws, nodes, out):
    """The constrained rate ``qd_y - p'(q_x) qd_x`` in each coupling's row of ``out``."""
    def rate(y, x, ids):
        return ws.qd[y] - _poly(nodes, ids, x, _at_x(ws.q, x))[1] * _at_x(ws.qd, x)
    return _with_rows(ws, nodes, out, rate)


def with_product(ws, nodes, out):
    """The velocity product ``-p''(q_x) qd_x^2`` in each coupling's row of ``out``."""
    def product(y, x, ids):
        return -_poly(nodes, ids, x, _at_x(ws.q, x))[2] * _at_x(ws.qd, x) ** 2
    return _with_rows(ws, nodes, out, product)


def slopes(ws, nodes):
    """``p'(q_x)`` of every coupling (``None`` when there are none)."""
    ids, _, x = _couplings(nodes)
    return _poly(nodes, ids, x, _at_x(ws.q, x))[1] if ids.size else None


def _columns(bucket, rows, dofs):
    """The column of joint ``dofs[i]`` in the bucket's row ``rows[i]``."""
    return np.array([int(np.flatnonzero(bucket.dofs[r] == j)[0]) for r, j in zip(rows, dofs)], np.int32)


def with_jacobian_rows(nodes, bucket, B, slopes):
    """A bucket's Jacobian blocks ``B (P_b, 6, L)`` with each coupling's row ``e_y - p'(q_x)
    e_x`` on its loop ``(y, x)``."""
    ids, y, x = _couplings(nodes)
    here = [(r, int(np.flatnonzero(ids == k)[0])) for r, k in enumerate(bucket.ids) if k in ids]
    if not here:
        return B
    r, c = (np.array(v) for v in zip(*here))
    B = B.at[r, COUPLING_ROWS[0], _columns(bucket, r, y[c])].set(1.0)
    r, c = r[x[c] >= 0], c[x[c] >= 0]
    if r.size:
        B = B.at[r, COUPLING_ROWS[0], _columns(bucket, r, x[c])].set(-slopes[c])
    return B
