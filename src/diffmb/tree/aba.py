"""Articulated-body algorithm, one depth level at a time.

Featherstone, *RBDA* table 7.1 (Jain's ABFD; Fulton & Schaub section 2.2) in world-origin
coordinates (:mod:`diffmb.tree.kinematics`), where an articulated inertia is handed to the
parent without a coordinate transform. Tip to base, for every body ``i``:

    U = IA_i S_i,  D = S_i^T U,  u = tau_i - S_i^T pA_i,
    IA_parent += IA_i - U D^-1 U^T,  pA_parent += pA_i + Ia c_i + U D^-1 u

and base to tip ``a' = a_parent + c_i``, ``qdd_i = D^-1 (u - U^T a')``,
``a_i = a' + S_i qdd_i``, starting from the fictitious base acceleration ``-g``.

Both sweeps run all bodies of a depth level at once, level 0 on its own and the deeper
levels in one ``lax.scan``, so the cost is O(n) and the compiled graph does not grow with
the tree. Each level works on its *slots* (:mod:`diffmb.tree.layout`: its bodies, grouped by
joint kind as MJX's ``scan.body_tree`` does): every body's inputs are gathered into
level-major arrays before the scan, and a level hands its articulated inertias up (and
its accelerations down) through the 0/1 matrix of ``slot_parent``. The scan's carry is
one level wide; an array of every body updated in place per level would be copied whole
at every level of a vmapped batch (O(n^2)).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..math import spatial as sp
from . import rnea
from .layout import layout

#: Slots per level up to which the hand-over to the parents' slots is a written-out sum
#: over the child slots; wider levels use one matrix product.
WRITTEN_OUT_SLOTS = 8


def _inv(D):
    if D.shape[-1] == 1:
        return 1.0 / D
    return jnp.linalg.inv(D)


def _hand_over(P, X):
    """``sum_s P[p, s] X[s]``: the children's slot values summed into their parents' slots."""
    if P.shape[-1] <= WRITTEN_OUT_SLOTS:
        shape = (P.shape[0],) + (1,) * (X.ndim - 1)
        out = P[:, 0].reshape(shape) * X[0][None]
        for s in range(1, P.shape[-1]):
            out = out + P[:, s].reshape(shape) * X[s][None]
        return out
    return jnp.tensordot(P, X, axes=1)


def _incidence(lay, width, dtype):
    """``(levels, width, slots)``: 1 where a deeper level's slot hangs from a slot above."""
    sp_ = lay.slot_parent
    P = np.zeros((sp_.shape[0], width, sp_.shape[1]))
    li, s = np.nonzero(sp_ >= 0)
    P[li, sp_[li, s], s] = 1.0
    return jnp.asarray(P, dtype)


def _tables(groups, index):
    """Per group: the static ``(ids, dofs, valid)`` of its slots (``index``: level 0, or
    all deeper levels stacked)."""
    return [(jnp.asarray(g.ids[index]), jnp.asarray(g.dofs[index]), jnp.asarray(g.valid[index]))
            for g in groups]


def _gather(tables, I, pA0, c, S, tau, armature):
    """Per group: one level's inputs, read from the per-body arrays inside the scan (a
    level-major copy made before it would cost a transpose of every body's data)."""
    return [(valid, I[ids], pA0[ids], c[ids], S[dofs], tau[dofs], armature[dofs])
            for ids, dofs, valid in tables]


def _articulate(level, IAc, pAc):
    """One level tip to base: its slots' ``(U, D^-1, u)`` and what each hands its parent."""
    saved, Ia_all, pa_all, off = [], [], [], 0
    for valid, I, pA0, c, S, tau, armature in level:
        W, k = S.shape[0], S.shape[1]
        v3 = valid[:, None, None]
        eye6 = jnp.eye(6, dtype=I.dtype)
        IA = jnp.where(v3, I + IAc[off:off + W], eye6)
        pA = pA0 + pAc[off:off + W]
        U = sp.mv(IA[:, None], S)                                  # (W, k, 6) = (IA S)^T
        D = sp.vdot(S[:, :, None, :], U[:, None, :, :])            # (W, k, k)
        D = D + armature[:, :, None] * jnp.eye(k, dtype=I.dtype)[None]
        Dinv = _inv(jnp.where(v3, D, jnp.eye(k, dtype=I.dtype)))
        u = tau - sp.vdot(S, pA[:, None, :])                       # (W, k)
        UD = sp.mm(Dinv, U)                                        # (W, k, 6) = (U D^-1)^T
        Ia = IA - sp.mm(jnp.swapaxes(UD, -1, -2), U)
        pa = pA + sp.mv(Ia, c) + sp.mtv(UD, u)
        Ia_all.append(jnp.where(v3, Ia, 0.0))
        pa_all.append(jnp.where(valid[:, None], pa, 0.0))
        saved.append((U, Dinv, u))
        off += W
    return saved, jnp.concatenate(Ia_all), jnp.concatenate(pa_all)


def _accelerate(level, saved, ap):
    """One level base to tip, from its slots' parent accelerations ``ap``: the joint
    accelerations of each group and the slots' accelerations."""
    qdd, a_all, off = [], [], 0
    for (valid, I, pA0, c, S, tau, armature), (U, Dinv, u) in zip(level, saved):
        W = S.shape[0]
        a_in = ap[off:off + W] + c
        qi = sp.mv(Dinv, u - sp.vdot(U, a_in[:, None, :]))        # D^-1 (u - U^T a')
        qdd.append(qi)
        a_all.append(a_in + sp.mtv(S, qi))
        off += W
    return qdd, jnp.concatenate(a_all)


def _pad_rows(x, rows):
    return jnp.concatenate([x, jnp.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)]) if rows > x.shape[0] else x


def forward_dynamics_ws(model, ws, tau, f_ext=None):
    """``qdd`` (public order) for total generalized force ``tau`` at the workspace's state."""
    lay = layout(model)
    g0, g = lay.levels
    dt = ws.S.dtype
    if lay.nv == 0:
        return jnp.zeros(0, dt)
    pad2 = lambda x: jnp.concatenate([x, jnp.zeros((2,) + x.shape[1:], dt)], 0)
    pA0 = sp.cross_force(ws.vel, sp.mv(ws.inertia, ws.vel))
    if f_ext is not None:
        pA0 = pA0 - rnea.external_forces_world(ws, f_ext)
    inputs = (pad2(ws.inertia), pad2(pA0), pad2(ws.joint_acc),
              jnp.concatenate([ws.S, jnp.zeros((1, 6), dt)], 0),
              jnp.concatenate([tau, jnp.zeros(1, dt)]),
              jnp.concatenate([model.armature.astype(dt), jnp.zeros(1, dt)]))
    level0 = _gather(_tables(g0, 0), *inputs)
    deeper = _tables(g, slice(None))
    W0 = sum(x.ids.shape[1] for x in g0)
    width = max(W0, lay.slot_parent.shape[1])
    P = _incidence(lay, width, dt)

    def up(carry, xs):
        tables, P_l = xs
        saved, Ia, pa = _articulate(_gather(tables, *inputs), *carry)
        return (_hand_over(P_l, Ia), _hand_over(P_l, pa)), saved

    def down(a_above, xs):
        tables, saved, P_l = xs
        qdd, a = _accelerate(_gather(tables, *inputs), saved, _hand_over(P_l.T, a_above))
        return _pad_rows(a, width), qdd

    carry = (jnp.zeros((width, 6, 6), dt), jnp.zeros((width, 6), dt))
    saved_deep = None
    if g:
        carry, saved_deep = lax.scan(up, carry, (deeper, P), reverse=True)
    saved0, _, _ = _articulate(level0, *carry)

    a_world = jnp.broadcast_to(rnea.gravity_acceleration(model), (W0, 6))
    qdd0, a0 = _accelerate(level0, saved0, a_world)
    parts = [q.reshape(-1) for q in qdd0]
    if g:
        _, qdd_deep = lax.scan(down, _pad_rows(a0, width), (deeper, saved_deep, P))
        parts += [q.reshape(-1) for q in qdd_deep]
    return jnp.concatenate(parts)[_dof_positions(lay)]


def _dof_positions(lay):
    """Where each public velocity sits in the concatenated per-group level outputs."""
    g0, g = lay.levels
    flat = [x.dofs[0].reshape(-1) for x in g0] + [x.dofs.reshape(-1) for x in g]
    flat = np.concatenate(flat)
    pos = np.empty(lay.nv, np.int32)
    for i, d in enumerate(flat):
        if d < lay.nv:
            pos[d] = i
    return pos
