"""An independent reference for the closure layer (test oracle only).

What diffmb computes analytically from the kinematics workspace and solves in the joint
space, this module computes the way diffmb did before: body velocities by differentiating
the poses (``jax.jvp`` of forward kinematics along the coordinate rates), ``G`` by
``jax.jacfwd`` of the relative node velocity, its velocity-product term by ``jax.jvp``,
the mass matrix as the Hessian of the kinetic energy, and the multipliers from the dense
operational-space compliance ``Lambda = G M^-1 G^T`` with a Tikhonov term refined once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmb.closures.nodes import point_frames
from diffmb.math import spatial as sp
from diffmb.tree import api, rnea
from diffmb.tree.kinematics import kinematics


def _poses(model, q):
    ws = kinematics(model, q)
    return ws.rot, ws.pos


def world_velocities(model, q, qd):
    """World-origin spatial velocities ``(N, 6)`` from the time derivative of the poses."""
    rates = api.coordinate_rates(model, q, qd)
    (E, r), (dE, dr) = jax.jvp(lambda x: _poses(model, x), (q,), (rates,))
    # [body world] E: omega in world from  dE^T E = [omega~]  (dE/dt = -[w_b~] E)
    W = jnp.einsum("nki,nkj->nij", dE, E)          # dE^T E = skew(omega_world)
    omega = jnp.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], -1)
    v0 = dr - sp.cross(omega, r)                   # velocity of the point at the origin
    return jnp.concatenate([omega, v0], -1)


def relative_velocity(model, q, qd, nodes):
    ws = kinematics(model, q)
    v = world_velocities(model, q, qd)
    ia = np.array([c.body_a for c in nodes.closures])
    ib = np.array([c.body_b for c in nodes.closures])
    Ea, pa = point_frames(ws, ia, nodes.rot_a, nodes.pos_a)
    return sp.xform_motion(Ea, pa, v[ib] - v[ia])


def jacobian(model, q, nodes):
    rows = np.asarray(nodes.rows)
    f = lambda qd: relative_velocity(model, q, qd, nodes).reshape(-1)[rows]
    return jax.jacfwd(f)(jnp.zeros_like(q))


def velocity_product(model, q, qd, nodes):
    rows = np.asarray(nodes.rows)
    rates = api.coordinate_rates(model, q, qd)
    f = lambda q_, qd_: relative_velocity(model, q_, qd_, nodes).reshape(-1)[rows]
    return jax.jvp(f, (q, qd), (rates, jnp.zeros_like(qd)))[1]


def mass_matrix(model, q):
    def T(qd):
        ws = kinematics(model, q)
        v = world_velocities(model, q, qd)
        return 0.5 * jnp.sum(v * sp.mv(ws.inertia, v))

    return jax.hessian(T)(jnp.zeros_like(q))


def constrained_acceleration(model, q, qd, tau, nodes, gains=None, mu_rel=1e-8, refinements=6,
                             mass=None):
    """``(qdd, lambda)`` by the dense dual route: Tikhonov ``mu = mu_rel max diag Lambda``,
    refined ``refinements`` times. diffmb's earlier solve refined once, which leaves a
    relative error ``(mu / s)^2`` in a constraint direction of compliance eigenvalue
    ``s`` (3.7e-10 on a 3x3 map fold with ``s / max = 1.6e-4``); six refinements make the
    reference exact to round-off. ``mass``: a function ``(model, q) -> M`` in place of the
    kinetic energy's Hessian (cheaper to compile inside a differentiated run)."""
    from diffmb.closures.nodes import position_residual

    rows = np.asarray(nodes.rows)
    G = jacobian(model, q, nodes)
    M = (mass or mass_matrix)(model, q)
    C = rnea.bias_forces_ws(model, kinematics(model, q, qd))
    a_f = jnp.linalg.solve(M, tau - C)
    Y = jnp.linalg.solve(M, G.T)
    Lam = G @ Y
    rhs = G @ a_f + velocity_product(model, q, qd, nodes)
    if gains is not None:
        a, b = gains
        w = relative_velocity(model, q, qd, nodes).reshape(-1)[rows]
        phi = position_residual(model, q, nodes).reshape(-1)[rows]
        rhs = rhs + 2.0 * a * w + b**2 * phi
    mu = mu_rel * jnp.max(jnp.diagonal(Lam))
    A = Lam + mu * jnp.eye(Lam.shape[0], dtype=Lam.dtype)
    lam = jnp.zeros_like(rhs)
    for _ in range(refinements + 1):
        lam = jnp.linalg.solve(A, rhs + mu * lam)
    return a_f - Y @ lam, lam
