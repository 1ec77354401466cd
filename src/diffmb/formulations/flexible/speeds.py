"""Per-body speed relations and inertia terms of Banerjee & Lemak's formulation.

Eq. (2) relates the modal speeds ``s`` to the modal rates; ``gyro`` is the velocity-product
term ``g(w)`` of the inertia force ``-(M0 w_dot + g)`` (derived in the package docstring).
"""

from __future__ import annotations

import jax.numpy as jnp

from ...math import spatial as sp


def lam(G, w, q):
    """``L_i = sum_{a,j} w_a G[a, j, i] q_j`` (right side of eq. 2)."""
    return jnp.einsum("aji,a,j->i", G, w, q)


def qdot_modal(I, w, q, s):
    """Eq. (2): ``q_dot = s - Me^-1 L(w, q)``."""
    if q.shape[0] == 0:
        return q
    return s - sp.mv(I["Me_inv"], lam(I["G"], w, q))


def s_from_qdot(I, w, q, qd):
    if q.shape[0] == 0:
        return qd
    return qd + sp.mv(I["Me_inv"], lam(I["G"], w, q))


def gyro(I, wv):
    """``g(w)`` of the module docstring (inertia force = ``-(M0 w_dot + g)``)."""
    w, v, s = wv[:3], wv[3:6], wv[6:]
    V = wv[:6]
    Isp = I["M0"][:6, :6]
    rig = sp.cross_force(V, sp.mv(Isp, V))
    if s.shape[0] == 0:
        return rig
    Ns = jnp.einsum("aib,i->ab", I["N"], s)
    As = sp.mv(I["A"], s)
    gw = w * jnp.dot(I["d"], s) - sp.mv(Ns, w)
    gv = sp.cross(w, As)
    Gw = jnp.einsum("a,aji->ij", w, I["G"])
    gs = (sp.mtv(I["A"], sp.cross(w, v)) + jnp.einsum("aib,a,b->i", I["N"], w, w) - I["d"] * jnp.dot(w, w)
          + sp.mv(Gw, s))
    return jnp.concatenate([rig[:3] + gw, rig[3:] + gv, gs])


def deformation_moment(I, q, wv):
    """``int (Phi q) x v dm`` (B axes), ``v`` the field of eq. (1): the deformation's part
    of the moment of momentum about the origin of B (``M0[:3] @ w`` is ``int p x v dm``
    with the undeformed ``p``). With ``delta = Phi q``:
    ``(A q) x v + w (d . q) - (N q)^T w + sum_ij G[:, j, i] q_j s_i``.
    """
    if q.shape[0] == 0:
        return jnp.zeros(3, wv.dtype)
    w, v, s = wv[:3], wv[3:6], wv[6:]
    Nq = jnp.einsum("aib,i->ab", I["N"], q)
    return (sp.cross(sp.mv(I["A"], q), v) + w * jnp.dot(I["d"], q) - sp.mtv(Nq, w)
            + jnp.einsum("aji,j,i->a", I["G"], q, s))


def binv(sig):
    """``B(sigma)^-1 = 16 / (1 + sigma^2)^2 B^T`` (MRP kinematics, Schaub & Junkins)."""
    s2 = jnp.dot(sig, sig)
    return (16.0 / (1.0 + s2) ** 2) * sp.mrp_B(sig).T

