"""Closed-chain dynamics on a tree: constrained accelerations, Baumgarte, projection.

The tree-augmented approach of Fulton & Schaub (section 4.1): the tree's dynamics
(:mod:`diffmb.tree.crba`, :mod:`diffmb.tree.rnea`) plus loop-closure constraints
(:mod:`diffmb.closures`), all read from one kinematics workspace per evaluation
(:mod:`diffmb.tree.kinematics`), solved exactly in the joint space
(:mod:`diffmb.closures.constraint_solve`).

* :func:`constrained_dynamics`: ``qdd`` and the multipliers ``lambda`` (eqs. 22-25,
  42-43) with optional Baumgarte stabilization ``w_dot + 2 a w + b^2 phi = 0`` (eq. 41).
  The wrench that body B exerts on body A at node A (in A's axes, free rows zero) is
  ``Q^T lambda`` (the paper's ``-f_c``, Figs. 12 and 18).
* :func:`project_state`: mass-weighted projection onto the position and velocity
  constraint manifolds after a step.

Redundant closures (rigid-origami loops over-constrain the tree) are the norm, and
*which* rows are redundant changes along a deployment: a map fold's folded-flat state is
where a branch that unfolds the columns meets one that unfolds the rows. The solve needs
no rank decision (see :mod:`diffmb.closures.constraint_solve`); the rank is *reported*, once at
build time (:func:`diffmb.closures.nodes.analyse`) and along the run (the ``closure_rank``
diagnostic, :func:`diffmb.closures.constraint_constraint_solve.numerical_rank`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..math import small_cholesky, spatial as sp
from ..tree import api, crba, rnea
from ..tree.kinematics import kinematics, world_velocities
from ..tree.layout import layout
from . import constraint_solve, nodes as cl


def blocks(ws, nodes, nv) -> constraint_solve.Blocks:
    """The closure Jacobian ``G`` of the workspace's state, in blocks."""
    return constraint_solve.Blocks(cl.jacobian_blocks(ws, nodes), nodes.paths, nv)


def plan(model, nodes):
    """The block order in which ``M + rho G^T G`` is factored, ``None`` for dense
    (:func:`diffmb.closures.constraint_constraint_solve.plan_for`)."""
    return constraint_solve.plan_for(layout(model), nodes.paths)


def _per_row(nodes, x, dtype):
    """A gain given as a scalar or one value per constrained row -> (P, 6)."""
    x = jnp.asarray(x, dtype)
    if x.ndim == 0:
        return x
    P = len(nodes.closures)
    return jnp.zeros(6 * P, dtype).at[np.asarray(nodes.rows)].set(x).reshape(P, 6)


def acceleration_target(ws, nodes, gains=None, phi=None):
    """``b (P, 6)`` with ``G qdd = b``: ``-(g + 2 a w + b^2 phi)`` on the constrained rows."""
    dt = ws.S.dtype
    mask = jnp.asarray(nodes.mask(), dt)
    rhs = cl.velocity_product(ws, nodes)
    if gains is not None:
        a, b = (_per_row(nodes, x, dt) for x in gains)
        phi = cl.residual(ws, nodes) if phi is None else phi
        rhs = rhs + 2.0 * a * cl.velocity(ws, nodes) + b**2 * phi
    return -rhs * mask


def constrained_dynamics(model, ws, tau, nodes, gains=None, f_ext=None):
    """Tree-augmented forward dynamics at the workspace's state: ``(qdd, lambda (P, 6))``.

    ``gains``: ``None`` (no stabilization) or ``(a, b)`` for Baumgarte's
    ``w_dot + 2 a w + b^2 phi = 0`` (eq. 41), scalars or one value per constrained row.
    """
    M = crba.mass_matrix_ws(model, ws)
    f = tau - rnea.bias_forces_ws(model, ws, f_ext)
    F = constraint_solve.factor(M, blocks(ws, nodes, model.nv), plan=plan(model, nodes))
    return F.solve(f, acceleration_target(ws, nodes, gains))


def constrained_acceleration(model, q, qd, tau, nodes, gains=None):
    """``(qdd, lambda)`` at ``(q, qd)``; ``lambda`` on the kept rows (``nodes.rows``)."""
    qdd, lam = constrained_dynamics(model, kinematics(model, q, qd), tau, nodes, gains)
    return qdd, lam.reshape(-1)[np.asarray(nodes.rows)]


def project_state(model, q, qd, nodes, iterations: int = 3, keep_momentum: bool = False,
                  with_kinematics: bool = False):
    """Mass-weighted projection onto the position and velocity constraint manifolds.

    Gauss-Newton on ``phi(q) = 0``: the smallest correction in the metric of ``M``,
    ``dnu = argmin dnu^T M dnu  s.t.  G dnu = -phi``, mapped to coordinate increments by
    the kinematic map (MRPs, eq. 3), ``iterations`` times. Then the velocity projection
    ``qd <- argmin (x - qd)^T M (x - qd)  s.t.  G x = 0``, exact since the constraint is
    linear in ``qd``; it reuses the factorisation of the last Gauss-Newton iterate, which
    differs from the corrected ``q`` by that iterate's correction (quadratically small
    once converged: after an integrator step, one iteration already is). Both
    corrections are constraint impulses, but the position correction moves the
    Jacobians under a fixed ``qd``, which changes the total momentum slightly:
    ``keep_momentum`` (a free-flying system) puts it back (:func:`_restore_momentum`),
    the target taken at the first iterate's poses.

    In the written-out form of CPU batch programs (:func:`diffmb.math.spatial.written_out`)
    the iterations stop after the first whose residual was already at round-off
    (:func:`_at_round_off`): its correction is then at round-off too, so the velocity
    projected with its factor is exact to round-off. A while loop, which ends once every
    member of the batch has stopped: after an integrator step, usually after the first
    linearisation. Elsewhere a ``lax.cond`` per iteration cost fold-4panel's single run
    more than the linearisations it skipped (80 against 65 ms), so every iteration runs.
    Every iteration corrects: left uncorrected, a residual at round-off made fold-4panel's
    adaptive run take 338 steps instead of 274.

    ``with_kinematics``: also return the kinematics (positions) at the corrected ``q``, the
    momentum restore's where it ran (contact's arming at a step's end reads them).
    """
    nv = model.nv
    mask = jnp.asarray(nodes.mask(), q.dtype)
    zero = jnp.zeros(nv, q.dtype)
    qd0 = qd

    def linearise(q):
        ws = kinematics(model, q)
        M = crba.mass_matrix_ws(model, ws)
        return ws, M, constraint_solve.factor(M, blocks(ws, nodes, nv), plan=plan(model, nodes))

    def gn(carry, stop: bool):
        i, _, q, _, _, h0 = carry
        ws, M, F = linearise(q)
        if keep_momentum:  # the state given is the first iterate
            h0 = jax.lax.cond(i == 0, lambda: _momentum(model, ws, qd0), lambda: h0)
        phi = cl.residual(ws, nodes) * mask
        dnu, _ = F.solve(zero, -phi)
        done = _at_round_off(phi, ws) if stop else jnp.asarray(False)
        return i + 1, done, q + api.coordinate_rates(model, q, dnu), M, F, h0

    h0 = jnp.zeros(6, q.dtype)
    if iterations < 1:
        ws, M, F = linearise(q)
        if keep_momentum:
            h0 = _momentum(model, ws, qd0)
    else:
        shapes = jax.eval_shape(lambda q: linearise(q)[1:], q)
        M, F = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        carry = (jnp.asarray(0, jnp.int32), jnp.asarray(False), q, M, F, h0)
        if iterations == 1:  # no loop: a smaller program
            carry = gn(carry, False)
        elif sp.contraction_form() == "written":
            carry = jax.lax.while_loop(lambda c: (c[0] < iterations) & ~c[1], lambda c: gn(c, True), carry)
        else:
            carry = jax.lax.fori_loop(0, iterations, lambda _, c: gn(c, False), carry)
        _, _, q, M, F, h0 = carry
    qd, _ = F.solve(M @ qd, jnp.zeros_like(mask))
    ws = None
    if keep_momentum:
        qd, ws = _restore_momentum(model, q, qd, h0)
    if with_kinematics:   # the corrected positions' kinematics, taken once
        return q, qd, kinematics(model, q) if ws is None else ws
    return q, qd


#: A closure residual within this many ulps of the system's size is round-off: a
#: Gauss-Newton correction does not reduce it (see :func:`project_state`).
ROUND_OFF_ULPS = 4


def _at_round_off(phi, ws):
    """Whether the residual ``phi`` is at round-off: every entry within
    :data:`ROUND_OFF_ULPS` ulps of ``1 +`` the largest body position (the closures'
    lengths, in m, and their rotations, dimensionless)."""
    eps = jnp.finfo(phi.dtype).eps
    return jnp.max(jnp.abs(phi)) <= ROUND_OFF_ULPS * eps * (1 + jnp.max(jnp.abs(ws.pos)))


def _momentum(model, ws, qd):
    """Total spatial momentum (world axes, about the world origin) at a workspace
    without speeds."""
    return api.spatial_momentum_ws(ws, world_velocities(model, ws, qd))


def _restore_momentum(model, q, qd, target):
    """Give the whole system the rigid velocity that restores its total momentum
    ``target``: a uniform spatial velocity added to every free root moves every body
    rigidly, so it keeps the closures' velocity constraints, and solved against the
    system's composite inertia it puts back exactly the momentum of the state before the
    projection. Returns ``(qd, kinematics at q)``."""
    ws = kinematics(model, q)
    dh = target - _momentum(model, ws, qd)            # world axes, about the world origin
    Ic = jnp.sum(ws.inertia, 0)                       # the whole system, world origin
    # the rigid velocity, world-origin coordinates; Ic is symmetric positive definite
    # (Cholesky, not LU: no pivoting in the program)
    dv = small_cholesky.cho_solve(jax.lax.linalg.cholesky(Ic, symmetrize_input=False), dh)
    for b in model.free_roots:
        s, e = model.body_slices[b]
        qd = qd.at[s:e].add(sp.xform_motion(ws.rot[b], ws.pos[b], dv))
    return qd, ws
