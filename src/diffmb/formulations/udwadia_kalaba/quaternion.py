"""Quaternion kinematics of the Udwadia-Kalaba form (Shoer & Peck eqs. 4-9): the ``T``
matrix, DCMs, body rates and the effective mass and force of a body in ``(r, q)``."""

from __future__ import annotations

import jax.numpy as jnp

from ...math import spatial as sp


def T_matrix(q):
    """``T(q) = 2 [q4 1_3 - q123^x, -q123]`` (eq. 7): ``{}^B omega^{B/N} = T(q) q_dot``."""
    v, w = q[..., :3], q[..., 3]
    eye = jnp.broadcast_to(jnp.eye(3, dtype=q.dtype), v.shape[:-1] + (3, 3))
    left = w[..., None, None] * eye - sp.skew(v)
    return 2.0 * jnp.concatenate([left, -v[..., :, None]], axis=-1)


def dcm_NB(q):
    """``{}^N Q^B`` (body components -> N components); ``spatial.quat_to_dcm`` gives ``[BN]``."""
    return jnp.swapaxes(sp.quat_to_dcm(q), -1, -2)


def omega_body(q, qd):
    """Body-axes angular velocity ``T(q) q_dot`` (eq. 7)."""
    return jnp.sum(T_matrix(q) * qd[..., None, :], axis=-1)


def quat_rate(q, omega):
    """``q_dot = T(q)^T omega / (4 |q|^2)`` — the inverse of eq. (7) on ``q^T q_dot = 0``."""
    T = T_matrix(q)
    return jnp.sum(T * omega[..., :, None], axis=-2) / (4.0 * jnp.sum(q * q, -1, keepdims=True))


def effective_mass(q, inertia):
    """``M~_B = T^T I_B T`` (eq. 10), a singular 4x4 (``M~ q = 0``)."""
    T = T_matrix(q)
    return jnp.swapaxes(T, -1, -2) @ inertia @ T


def effective_force(q, qd, inertia, tau):
    """``F~_B = T^T (tau - (T qd)^x I (T qd) - I T_dot qd)`` (eq. 10; ``T_dot qd = 0``)."""
    T = T_matrix(q)
    w = sp.mv(T, qd)
    rhs = tau - sp.cross(w, sp.mv(inertia, w))
    return sp.mtv(T, rhs)
