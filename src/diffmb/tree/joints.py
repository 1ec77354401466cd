"""Joint models: the hinge map of Fulton & Schaub section 2.3.1 for each joint kind.

Every joint carries its child body's frame relative to a fixed *joint frame* J placed on
the parent. For each kind this module gives

* ``transform(kind, axis, axis2, q) -> (E, r)``: the motion transform J -> child;
* ``subspace(kind, axis, axis2, q) -> S``: the 6 x nv motion subspace in child
  coordinates (the transpose of the paper's hinge map ``H``, eq. 9);
* ``bias(kind, axis, axis2, q, qd) -> c``: the velocity-product term ``S_dot qd``;
* ``qdot(kind, q, qd)``: the kinematic map from velocities to coordinate rates.

For every kind ``nq == nv`` (attitudes use MRPs, eq. 3), so ``q`` and ``qd`` share one
layout. Kinds:

``revolute``   1 DOF, rotation ``q`` about ``axis`` (unit, in J).
``prismatic``  1 DOF, translation ``q`` along ``axis``.
``universal``  2 DOF (Hooke): rotate about ``axis`` by ``q0``, then about ``axis2`` (in the
               intermediate frame) by ``q1``.
``spherical``  3 DOF, ``q = sigma`` (MRP, child -> J), ``qd = omega`` in child coordinates.
``free``       6 DOF, ``q = [sigma; p]`` (p: child origin in J), ``qd = [omega; v]`` in child
               coordinates (the origami paper's free-flying root, eqs. 1-4).
"""

from __future__ import annotations

import jax.numpy as jnp

from ..math import spatial as sp

NV = {"revolute": 1, "prismatic": 1, "universal": 2, "spherical": 3, "free": 6}
KINDS = tuple(NV) + ("fixed",)
MRP_KINDS = ("spherical", "free")


def mrp_starts(model, offset: int = 0) -> tuple:
    """Coordinate index (plus ``offset``) of each MRP attitude triple of ``model``: the
    first three coordinates of its spherical and free joints."""
    return tuple(offset + s for (s, _), k in zip(model.body_slices, model.joint_kinds) if k in MRP_KINDS)


def transform(kind, axis, axis2, q):
    dt = q.dtype
    if kind == "revolute":
        return sp.axis_angle_dcm(axis, q[0]), jnp.zeros(3, dt)
    if kind == "prismatic":
        return jnp.eye(3, dtype=dt), axis * q[0]
    if kind == "universal":
        E1 = sp.axis_angle_dcm(axis, q[0])
        E2 = sp.axis_angle_dcm(axis2, q[1])
        return sp.mm(E2, E1), jnp.zeros(3, dt)
    if kind == "spherical":
        return sp.mrp_to_dcm(q), jnp.zeros(3, dt)
    if kind == "free":
        return sp.mrp_to_dcm(q[:3]), q[3:]
    raise ValueError(f"unknown joint kind {kind!r}")


def subspace(kind, axis, axis2, q):
    dt = q.dtype
    z3 = jnp.zeros(3, dt)
    if kind == "revolute":
        return jnp.concatenate([axis, z3])[:, None]
    if kind == "prismatic":
        return jnp.concatenate([z3, axis])[:, None]
    if kind == "universal":
        # omega_rel in child axes = E2 (axis q0_dot) + axis2 q1_dot.
        E2 = sp.axis_angle_dcm(axis2, q[1])
        a1 = sp.mv(E2, axis)
        return jnp.stack([jnp.concatenate([a1, z3]), jnp.concatenate([axis2, z3])], -1)
    if kind == "spherical":
        return jnp.concatenate([jnp.eye(3, dtype=dt), jnp.zeros((3, 3), dt)], 0)
    if kind == "free":
        return jnp.eye(6, dtype=dt)
    raise ValueError(f"unknown joint kind {kind!r}")


def motion(kind, axis, axis2, q, qd):
    """Joint velocity ``S qd`` without forming S where it is trivial."""
    dt = q.dtype
    z3 = jnp.zeros(3, dt)
    if kind == "revolute":
        return jnp.concatenate([axis * qd[0], z3])
    if kind == "prismatic":
        return jnp.concatenate([z3, axis * qd[0]])
    if kind == "spherical":
        return jnp.concatenate([qd, z3])
    if kind == "free":
        return qd
    return sp.mv(subspace(kind, axis, axis2, q), qd)


def bias(kind, axis, axis2, q, qd):
    """``c_J = S_dot qd`` (apparent derivative in the child frame)."""
    if kind == "universal":
        # d/dt (E2 axis) = -q1_dot axis2 x (E2 axis)   (E2 = [child, intermediate])
        E2 = sp.axis_angle_dcm(axis2, q[1])
        a1 = sp.mv(E2, axis)
        w = -qd[1] * qd[0] * sp.cross(axis2, a1)
        return jnp.concatenate([w, jnp.zeros(3, q.dtype)])
    return jnp.zeros(6, q.dtype)


def qdot(kind, q, qd):
    """Coordinate rates from joint velocities: identity, or eqs. (3)-(4) for MRP joints."""
    if kind == "spherical":
        return sp.mv(sp.mrp_B(q), qd)
    if kind == "free":
        sigma = q[:3]
        # p is held in J components; v is in child components: p_dot = [J child] v.
        return jnp.concatenate([sp.mv(sp.mrp_B(sigma), qd[:3]), sp.mtv(sp.mrp_to_dcm(sigma), qd[3:])])
    return qd
