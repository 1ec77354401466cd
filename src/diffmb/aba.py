"""Articulated-body algorithm, one depth level at a time.

Featherstone, *RBDA* table 7.1 (Jain's ABFD; Fulton & Schaub section 2.2) in world-origin
coordinates (:mod:`diffmb.kinematics`), where an articulated inertia is handed to the
parent without a coordinate transform. Tip to base, for every body ``i``:

    U = IA_i S_i,  D = S_i^T U,  u = tau_i - S_i^T pA_i,
    IA_parent += IA_i - U D^-1 U^T,  pA_parent += pA_i + Ia c_i + U D^-1 u

and base to tip ``a' = a_parent + c_i``, ``qdd_i = D^-1 (u - U^T a')``,
``a_i = a' + S_i qdd_i``, starting from the fictitious base acceleration ``-g``. Both
sweeps run all bodies of a depth level at once (:func:`diffmb.treescan.levels_up` /
``levels_down``), so the cost is O(n) and the compiled graph does not grow with the tree.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import rnea
from . import spatial as sp
from . import treescan
from .layout import layout


def _inv(D):
    if D.shape[-1] == 1:
        return 1.0 / D
    return jnp.linalg.inv(D)


def forward_dynamics(model, ws, tau, f_ext=None):
    """``qdd`` (public order) for total generalized force ``tau`` at the workspace's state."""
    lay = layout(model)
    N, nv = lay.n_bodies, lay.nv
    dt = ws.S.dtype
    pad2 = lambda x: jnp.concatenate([x, jnp.zeros((2,) + x.shape[1:], dt)], 0)  # noqa: E731
    S = jnp.concatenate([ws.S, jnp.zeros((1, 6), dt)], 0)
    tau = jnp.concatenate([tau, jnp.zeros(1, dt)])
    armature = jnp.concatenate([model.armature.astype(dt), jnp.zeros(1, dt)])
    c = pad2(ws.joint_acc)
    pA0 = sp.cross_force(ws.vel, sp.mv(ws.inertia, ws.vel))
    if f_ext is not None:
        pA0 = pA0 - rnea.external_forces_world(ws, f_ext)
    eye = jnp.eye(6, dtype=dt)

    def up(carry, level):
        IA, pA = carry
        groups, _ = level
        out = {}
        for kind, (ids, parent, dofs, valid) in groups.items():
            # multiply-and-sum instead of batched dot kernels: XLA fuses these into a
            # few elementwise loops (tiny batched matrix products are slow on CPUs)
            v3 = valid[:, None, None]
            IAi = jnp.where(v3, IA[ids], eye)
            Si = S[dofs]                                              # (W, k, 6)
            U = jnp.sum(IAi[:, None, :, :] * Si[:, :, None, :], -1)   # (W, k, 6) = (IA S)^T
            D = jnp.sum(Si[:, :, None, :] * U[:, None, :, :], -1)     # (W, k, k)
            D = D + armature[dofs][:, :, None] * jnp.eye(D.shape[-1], dtype=dt)[None]
            D = jnp.where(v3, D, jnp.eye(D.shape[-1], dtype=dt))
            Dinv = _inv(D)
            pAi = pA[ids]
            u = tau[dofs] - jnp.sum(Si * pAi[:, None, :], -1)         # (W, k)
            UD = jnp.sum(Dinv[:, :, :, None] * U[:, None, :, :], 2)   # (W, k, 6) = (U D^-1)^T
            Ia = IAi - jnp.sum(UD[:, :, :, None] * U[:, :, None, :], 1)
            pa = pAi + sp.mv(Ia, c[ids]) + jnp.sum(UD * u[:, :, None], 1)
            IA = IA.at[parent].add(jnp.where(v3, Ia, 0.0))
            pA = pA.at[parent].add(jnp.where(valid[:, None], pa, 0.0))
            out[kind] = (U, Dinv, u)
        return (IA, pA), out

    _, saved = treescan.levels_up(lay, up, (pad2(ws.inertia), pad2(pA0)))

    a0 = jnp.concatenate([jnp.zeros((N, 6), dt), rnea.gravity_acceleration(model)[None],
                          jnp.zeros((1, 6), dt)], 0)

    def down(carry, level):
        a, qdd = carry
        groups, data = level
        for kind, (ids, parent, dofs, _) in groups.items():
            U, Dinv, u = data[kind]
            ap = a[parent] + c[ids]
            r = u - jnp.sum(U * ap[:, None, :], -1)                   # u - U^T a'
            qi = jnp.sum(Dinv * r[:, None, :], -1)
            a = a.at[ids].set(ap + jnp.sum(qi[:, :, None] * S[dofs], 1))
            qdd = qdd.at[dofs].set(qi)
        return (a, qdd), None

    (_, qdd), _ = treescan.levels_down(lay, down, (a0, jnp.zeros(nv + 1, dt)), saved)
    return qdd[:nv]
