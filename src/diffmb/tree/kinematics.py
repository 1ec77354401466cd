"""The kinematics workspace: one forward sweep per evaluation, read by every consumer.

:func:`kinematics` computes, for one state, everything the dynamics and the constraints
need from the tree's geometry (Pinocchio's ``Data``, MJX's ``Data``): body poses, the
motion-subspace (Jacobian) column of every generalized velocity, body velocities,
velocity-product accelerations and the bodies' spatial inertias. The CRBA, the RNEA, the
ABA, loop-closure residuals, Jacobians and their velocity-product terms, energy and
momentum (:mod:`diffmb.tree.crba`, :mod:`diffmb.tree.rnea`, :mod:`diffmb.tree.aba`,
:mod:`diffmb.closures`, :mod:`diffmb.tree`) all take a :class:`Kinematics` instead of
recomputing forward kinematics.

World-origin spatial coordinates. Velocities, accelerations, Jacobian columns and
inertias are spatial vectors ``[angular; linear]`` in world axes *at the world origin*
(Featherstone's fixed-frame form, *RBDA* section 2.8): the linear part of a body's
velocity is the velocity of the body-fixed point that is at the origin. In these
coordinates no quantity has to be carried from parent to child: a body's velocity is the
sum of the joint velocities on its path to the root,
``v_i = sum_{j in path(i)} s_j qd_j``, and its velocity-product (bias) acceleration
``a_i = sum_{j in path(i)} v_j x (s_j qd_j) + X c_J`` (Fulton & Schaub eqs. 5-7 with the
hinge map ``H = S^T``, eq. 9), so both are one :func:`~diffmb.tree.scan.ancestors_sum`.
Only the poses need a recursion (:func:`~diffmb.tree.scan.compose_poses`).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ..math import spatial as sp
from . import joints as jt, scan
from .layout import layout


class Kinematics(eqx.Module):
    """The workspace of one state (see module docstring). Per body, topological order:

    ``rot (N, 3, 3)`` DCM [body world]; ``pos (N, 3)`` body origin in world;
    ``inertia (N, 6, 6)`` spatial inertia at the world origin in world axes;
    ``vel (N, 6)`` spatial velocity; ``acc (N, 6)`` velocity-product acceleration
    (``qdd = 0``, no gravity) and ``joint_acc (N, 6)`` its part from each body's own joint
    (``S_dot qd``); per generalized velocity (public order) ``S (nv, 6)``:
    the motion-subspace column ``s_j`` (the body Jacobian column of joint ``j``).
    ``vel``/``acc``/``joint_acc`` are ``None`` when no velocities were given; ``q`` and
    ``qd`` are the state itself (read by coordinate couplings, :mod:`diffmb.closures`).
    """

    rot: jnp.ndarray
    pos: jnp.ndarray
    inertia: jnp.ndarray
    S: jnp.ndarray
    vel: jnp.ndarray | None = None
    acc: jnp.ndarray | None = None
    joint_acc: jnp.ndarray | None = None
    q: jnp.ndarray | None = None
    qd: jnp.ndarray | None = None


def joint_placements(model, q):
    """Per body ``(E, r)`` parent -> body (the joint placement then the joint motion),
    and per generalized velocity the subspace column in child coordinates ``(nv, 6)``.

    Kind-specific joint models (:mod:`diffmb.tree.joints`) run once per joint kind, vmapped
    over that kind's bodies.
    """
    lay = layout(model)
    Ss = []
    for kind, bodies, qidx in lay.groups:
        S = jax.vmap(lambda a, a2, qq, k=kind: jt.subspace(k, a, a2, qq))(
            model.axis[bodies], model.axis2[bodies], q[qidx])
        Ss.append(jnp.swapaxes(S, -1, -2).reshape(-1, 6))
    return (*_placements(model, q), jnp.concatenate(Ss)[lay.dof_order])


def _joint_bias(model, lay, q, qd):
    """``c_J = S_dot qd`` in child coordinates (non-zero for universal joints only)."""
    out = jnp.zeros((lay.n_bodies, 6), q.dtype)
    for kind, bodies, qidx in lay.groups:
        if kind != "universal":
            continue
        c = jax.vmap(lambda a, a2, qq, vv: jt.bias(kind, a, a2, qq, vv))(
            model.axis[bodies], model.axis2[bodies], q[qidx], qd[qidx])
        out = out.at[bodies].set(c)
    return out


def poses(model, q):
    """Per body ``(rot (N, 3, 3), pos (N, 3))``: the poses of :func:`kinematics` alone
    (what a check of how far the bodies moved reads), without its subspaces and inertias."""
    lay = layout(model)
    E_loc, r_loc = _placements(model, q)
    return scan.compose_poses(lay, E_loc, r_loc)


def _placements(model, q):
    """Per body ``(E, r)`` parent -> body (:func:`joint_placements` without the subspaces)."""
    lay = layout(model)
    Es, rs = [], []
    for kind, bodies, qidx in lay.groups:
        EJ, rJ = jax.vmap(lambda a, a2, qq, k=kind: jt.transform(k, a, a2, qq))(
            model.axis[bodies], model.axis2[bodies], q[qidx])
        E, r = sp.xform_compose(EJ, rJ, model.tree_rot[bodies], model.tree_pos[bodies])
        Es.append(E)
        rs.append(r)
    return jnp.concatenate(Es)[lay.body_order], jnp.concatenate(rs)[lay.body_order]


def kinematics(model, q, qd=None) -> Kinematics:
    """The :class:`Kinematics` workspace of ``(q, qd)`` (``q``, ``qd`` public order)."""
    lay = layout(model)
    E_loc, r_loc, S_child = joint_placements(model, q)
    E, r = scan.compose_poses(lay, E_loc, r_loc)
    b = lay.dof_body
    S = sp.xform_motion_inv(E[b], r[b], S_child)
    if sp.writes_out(3, E.shape):
        # a batch on a CPU, or a large tree: about the world origin from the mass, the world
        # centre of mass and the rotated central inertia, two 3x3 products instead of the
        # seven of X^T I X (32 bodies x 128 states: 250 against 540 us; the 20 x 20 map
        # fold's vector field, 401 bodies: 1.5-1.6 against 1.7-1.8 ms). One state of a
        # small tree keeps X^T I X, whose float32 round-off the float32 checks were
        # measured with (fold-4panel's momentum: 1.0e-5 of its scale against 1.07e-5 for
        # the shorter form).
        com = r + sp.mtv(E, model.com)
        inertia = sp.spatial_inertia(model.mass, com, sp.mm(jnp.swapaxes(E, -1, -2), sp.mm(model.inertia, E)))
    else:
        inertia = sp.inertia_to_parent(E, r, model.spatial_inertias())
    if qd is None:
        return Kinematics(E, r, inertia, S, q=q)
    vJ, vel = _velocities(lay, S, qd)
    kappa = sp.cross_motion(vel, vJ)
    if any(kind == "universal" for kind, _, _ in lay.groups):
        kappa = kappa + sp.xform_motion_inv(E, r, _joint_bias(model, lay, q, qd))
    acc = scan.ancestors_sum(lay, kappa)
    return Kinematics(E, r, inertia, S, vel, acc, kappa, q, qd)


def _velocities(lay, S, qd):
    """Joint velocities ``S qd`` per body and the bodies' spatial velocities (world)."""
    vJ = scan.dof_to_body(lay, S * qd[:, None])
    return vJ, scan.ancestors_sum(lay, vJ)


def world_velocities(model, ws: Kinematics, qd):
    """The bodies' spatial velocities (world axes, ``(N, 6)``) at a workspace built
    without speeds: the same sums :func:`kinematics` makes, without its pose pass."""
    return _velocities(layout(model), ws.S, qd)[1]


def body_velocities(ws: Kinematics):
    """Spatial velocities in body coordinates ``(N, 6)`` (the public convention)."""
    return sp.xform_motion(ws.rot, ws.pos, ws.vel)


def point_frames(ws: Kinematics, bodies, rot, pos):
    """World DCMs ``[frame world]`` and origins of frames fixed on ``bodies``, placed by
    ``rot`` (DCM [frame body]) and ``pos`` (origin in body coordinates)."""
    E = ws.rot[bodies]
    return sp.mm(rot, E), ws.pos[bodies] + sp.mtv(E, pos)
