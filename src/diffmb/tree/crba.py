"""Composite-rigid-body algorithm: the joint-space mass matrix from the workspace.

Featherstone, *RBDA* table 6.2 (Fulton & Schaub's ``[M]`` of eq. 8), in world-origin
coordinates (:mod:`diffmb.tree.kinematics`): the composite inertia of the subtree below body
``i`` is the plain sum of its bodies' inertias, ``Ic_i = sum_{k in subtree(i)} I_k``
(one :func:`~diffmb.tree.scan.subtree_sum`, no transforms), and

    M_ij = s_i^T Ic_{b(j)} s_j    when the body of ``i`` supports the body of ``j``,

symmetric, and zero for joints on different branches. One ``(nv, 6) x (6, nv)`` product
and a static support mask give the dense matrix.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..math import spatial as sp
from . import scan
from .kinematics import kinematics
from .layout import layout


def composite_inertias(model, ws):
    """``Ic (N, 6, 6)``: each body's subtree inertia, world-origin coordinates."""
    return scan.subtree_sum(layout(model), ws.inertia)


def mass_matrix_ws(model, ws):
    """``M (nv, nv)`` in the public velocity order, the joints' armature on its diagonal."""
    lay = layout(model)
    Ic = composite_inertias(model, ws)
    F = sp.mv(Ic[lay.dof_body], ws.S)          # Ic_{b(j)} s_j
    full = ws.S @ F.T                          # [i, j] = s_i^T Ic_{b(j)} s_j
    support = jnp.asarray(lay.dof_support)
    zero = jnp.zeros((), full.dtype)
    return jnp.where(support, full, jnp.where(support.T, full.T, zero)) + jnp.diag(model.armature)


@sp.jit_per_form
def mass_matrix_at(model, q):
    """``M(q)``: the workspace at ``q`` and the CRBA, one jit per model structure (a build
    check or a loop of eager calls compiles it once, not op by op)."""
    return mass_matrix_ws(model, kinematics(model, q))
