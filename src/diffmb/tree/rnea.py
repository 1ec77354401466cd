"""Recursive Newton-Euler inverse dynamics from the workspace.

Featherstone, *RBDA* table 5.1, in world-origin coordinates (:mod:`diffmb.tree.kinematics`):
body accelerations are the workspace's velocity-product accelerations plus the joint
accelerations summed along each root path (and gravity as a fictitious base acceleration
``-g``, Featherstone section 5.3, exact for fixed and free bases); each body's net force
``f_i = I_i a_i + v_i x* I_i v_i - f_ext,i`` is summed over its subtree and projected
onto the joint axes: ``tau_j = s_j^T F_{b(j)}`` (Fulton & Schaub eqs. 8-10).
"""

from __future__ import annotations

import jax.numpy as jnp

from ..math import spatial as sp
from . import scan
from .layout import layout


def gravity_acceleration(model):
    """The fictitious base acceleration ``[0; -g]`` (world-origin coordinates)."""
    return jnp.concatenate([jnp.zeros(3, model.gravity.dtype), -model.gravity])


def external_forces_world(ws, f_ext):
    """Body-frame wrenches ``(N, 6)`` about each body origin -> world-origin coordinates."""
    return sp.xform_force_T(ws.rot, ws.pos, f_ext)


def body_forces(model, ws, qdd=None, f_ext=None, gravity=True):
    """Net spatial force on every body, ``(N, 6)``, for joint accelerations ``qdd``."""
    lay = layout(model)
    a = ws.acc
    if qdd is not None:
        aJ = scan.dof_to_body(lay, ws.S * qdd[:, None])
        a = a + scan.ancestors_sum(lay, aJ)
    if gravity:
        g = gravity_acceleration(model)
        a = a + jnp.broadcast_to(g, a.shape)
    f = sp.mv(ws.inertia, a) + sp.cross_force(ws.vel, sp.mv(ws.inertia, ws.vel))
    if f_ext is not None:
        f = f - external_forces_world(ws, f_ext)
    return f


def generalized_forces(model, ws, f):
    """``tau_j = s_j^T F_{b(j)}`` with ``F`` the subtree sums of the body forces ``f``."""
    lay = layout(model)
    F = scan.subtree_sum(lay, f)
    return sp.vdot(ws.S, F[lay.dof_body])


def inverse_dynamics_ws(model, ws, qdd, f_ext=None):
    """``tau`` (public order) that produces ``qdd`` at the workspace's state (the joints'
    armature takes ``armature * qdd`` of it)."""
    return generalized_forces(model, ws, body_forces(model, ws, qdd, f_ext)) + model.armature * qdd


def bias_forces_ws(model, ws, f_ext=None):
    """``C(q, qd)`` of Fulton & Schaub eq. (8): Coriolis, centrifugal, gravity, ``-f_ext``."""
    return generalized_forces(model, ws, body_forces(model, ws, None, f_ext))
