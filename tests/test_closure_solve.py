"""The closure layer against an independent reference (tests/closure_reference.py).

Analytic closure Jacobians and velocity-product terms from the kinematics workspace
against ``jax.jacfwd``/``jax.jvp`` through the poses; the joint-space (augmented
Lagrangian) solve against the dense dual route with its Tikhonov term; on map folds
2x2..6x6, a 3x3 Miura-ori and the four-bar, at generic states on the constraint manifold:
accelerations, multipliers and gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import closure_reference as ref
import diffmb
from diffmb import simulate
from diffmb.closures import constraint_solve, dynamics as cs, nodes as cl
from diffmb.scenarios import get
from diffmb.scenarios.fourbar import fourbar_system
from diffmb.tree import crba, rnea
from diffmb.tree.kinematics import kinematics

#: the paper's model (contact off): the closure solves, without contact's own states
CASES = {
    "map2x2": ("map-fold", {"rows": 2.0, "cols": 2.0, "contact": 0.0}),
    "map3x3": ("map-fold", {"rows": 3.0, "cols": 3.0, "contact": 0.0}),
    "map4x4": ("map-fold", {"rows": 4.0, "cols": 4.0, "contact": 0.0}),
    "map6x6": ("map-fold", {"rows": 6.0, "cols": 6.0, "contact": 0.0}),
    "miura3x3": ("miura", {"contact": 0.0}),
}


def _system(case, stabilization="baumgarte"):
    if case == "fourbar":
        return fourbar_system(0.3, 2.0, stabilization, (5.0, 5.0))
    name, values = CASES[case]
    sc = get(name)
    system, _ = sc.build(sc.resolve(values), stabilization)
    return system


def _generic_state(system, seed=0):
    """A state on the position and velocity manifolds away from the folded-flat start."""
    p = system.default_params()
    model, nodes = p["model"], p["closures"]
    rng = np.random.default_rng(seed)
    n = model.nv
    q = p["q0"] + 0.15 * jnp.asarray(rng.standard_normal(n))
    qd = 0.2 * jnp.asarray(rng.standard_normal(n))
    proj = jax.jit(lambda q, qd: cs.project_state(model, q, qd, nodes, 6))
    for _ in range(4):
        q, qd = proj(q, qd)
    return p, q, qd


SLOW = pytest.mark.slow
# the Miura fold (a free-flying fold of several loops) and the four-bar (a fixed base)
# cover every code path; the map folds add size (and ~45 s of compiling the 4x4 reference),
# so they run in the slow job, the 2x2 too (~10 s): the default job reaches the map folds'
# closure solve through the 4x4 fold's folded-flat start and nested loops below
ALL = [pytest.param("map2x2", marks=SLOW), pytest.param("map3x3", marks=SLOW), pytest.param("map4x4", marks=SLOW),
       pytest.param("map6x6", marks=SLOW), "miura3x3", "fourbar"]
_STATES = {}


def _case(case, seed):
    """System and generic state of a case, computed once per test session."""
    if (case, seed) not in _STATES:
        system = _system(case)
        _STATES[case, seed] = (system,) + _generic_state(system, seed)
    return _STATES[case, seed]


# What the tests evaluate, jitted: one program per structure (evaluated operation by
# operation, this file compiled ~1,000 single-operation programs, ~45 s of one core).
@jax.jit
def _analytic(model, q, qd, nodes):
    """``(phi, G, gamma, w)`` from diffmb's closure layer, all rows."""
    ws = kinematics(model, q, qd)
    return (cl.position_residual(model, q, nodes).reshape(-1), cl.jacobian(model, q, nodes),
            cl.velocity_product(ws, nodes).reshape(-1), cl.velocity(ws, nodes).reshape(-1))


@jax.jit
def _free_dynamics(model, q, qd, tau, nodes):
    """``(b, a_f)``: the acceleration target and the unconstrained accelerations' right-hand
    side ``tau - C``."""
    ws = kinematics(model, q, qd)
    return cs.acceleration_target(ws, nodes).reshape(-1), tau - rnea.bias_forces_ws(model, ws)


_constrained_acceleration = jax.jit(cs.constrained_acceleration)


@pytest.mark.parametrize("case", ALL)
def test_analytic_jacobian_and_velocity_product_match_autodiff(case):
    system, p, q, qd = _case(case, 0)
    model, nodes = p["model"], p["closures"]
    rows = np.asarray(nodes.rows)
    phi, G, g, w = (np.asarray(a) for a in _analytic(model, q, qd, nodes))
    assert np.abs(phi[rows]).max() < 1e-10
    G_ref = np.asarray(jax.jit(ref.jacobian, static_argnums=())(model, q, nodes))
    scale = np.abs(G_ref).max()
    np.testing.assert_allclose(G, G_ref, rtol=0, atol=1e-12 * scale)
    g_ref = np.asarray(jax.jit(ref.velocity_product)(model, q, qd, nodes))
    np.testing.assert_allclose(g[rows], g_ref, rtol=0, atol=1e-11 * max(1.0, np.abs(g_ref).max()))
    np.testing.assert_allclose(w[rows], G @ np.asarray(qd), atol=1e-12 * scale)


@pytest.mark.parametrize("case", ALL)
def test_joint_space_solve_matches_dense_dual(case):
    system, p, q, qd = _case(case, 0)
    model, nodes = p["model"], p["closures"]
    rows = np.asarray(nodes.rows)
    tau = 0.3 * jnp.asarray(np.random.default_rng(2).standard_normal(model.nv))
    gains = (5.0, 3.0)
    qdd, lam = _constrained_acceleration(model, q, qd, tau, nodes, gains)
    qdd_r, lam_r = jax.jit(ref.constrained_acceleration)(model, q, qd, tau, nodes, gains)
    scale = np.abs(np.asarray(qdd_r)).max()
    np.testing.assert_allclose(qdd, qdd_r, rtol=0, atol=1e-10 * scale)
    # the generalized constraint forces G^T lambda = tau - C - M qdd are unique (to the
    # round-off of that difference)
    G = np.asarray(jax.jit(ref.jacobian)(model, q, nodes))
    f, f_r = G.T @ np.asarray(lam), G.T @ np.asarray(lam_r)
    M = np.asarray(jax.jit(ref.mass_matrix)(model, q))
    size = max(np.abs(f_r).max(), np.abs(M @ np.asarray(qdd_r)).max())
    np.testing.assert_allclose(f, f_r, rtol=0, atol=1e-10 * size)
    # the multipliers themselves: redundant rows get the minimum-norm ones, up to the
    # multiplier iterations' accumulation of the right-hand side's inconsistent part
    # (round-off here, as the state is on the manifold and no Baumgarte term is added)
    qdd, lam = _constrained_acceleration(model, q, qd, tau, nodes)
    b, f_free = (np.asarray(a) for a in _free_dynamics(model, q, qd, tau, nodes))
    b = b[rows]
    a_f = np.linalg.solve(M, f_free)
    lam_star = np.linalg.pinv(G @ np.linalg.solve(M, G.T), rcond=1e-10) @ (G @ a_f - b)
    np.testing.assert_allclose(lam, lam_star, rtol=0, atol=1e-6 * np.abs(lam_star).max())
    assert rows.size == lam.shape[0]


def test_gradient_through_closure_geometry_matches_finite_differences():
    """d(qdd)/d(node placement) on the four-bar: the closure Jacobian enters the factorised
    matrix ``M + rho G^T G`` with a large ``rho``, so the Cholesky factor's derivative must
    see a symmetric tangent (a lower-triangle-only one was off by 1e-4 here). Not on an
    origami fold: moving one node makes its redundant loops inconsistent, and the answer
    then depends on ``rho``, which carries no derivative."""
    import dataclasses

    system, p, q, qd = _case("fourbar", 0)
    model, nodes = p["model"], p["closures"]
    tau = jnp.zeros(model.nv)

    def accel(dx):
        moved = dataclasses.replace(nodes, pos_a=nodes.pos_a.at[0, 0].add(dx))  # G reads node A
        return jnp.sum(jnp.sin(cs.constrained_acceleration(model, q, qd, tau, moved)[0]))

    g = float(jax.jit(jax.grad(accel))(0.0))
    h = 1e-6
    accel = jax.jit(accel)
    fd = (float(accel(h)) - float(accel(-h))) / (2 * h)
    assert abs(fd) > 1e-3
    assert g == pytest.approx(fd, rel=1e-6)


@SLOW
@pytest.mark.parametrize("case", ["map3x3", "fourbar"])
def test_gradients_through_a_run_match_the_dense_reference(case):
    """d(final state)/d(parameters) through 50 RK4 steps: the analytic, joint-space path
    and the autodiff, dense-dual path differentiate the same dynamics."""
    from diffmb import TreeSystem

    system, p, q, qd = _case(case, 0)

    class Reference(TreeSystem):
        def accelerations(self, t, x, params):
            model = params["model"]
            q, qd = self.split(x)
            tau = self.generalized_force(t, q, qd, params)
            gains = (params["baumgarte"]["a"], params["baumgarte"]["b"])
            return ref.constrained_acceleration(model, q, qd, tau, params["closures"], gains,
                                                mass=diffmb.mass_matrix)

    reference = Reference(system.model, system.q0, system.qd0, closures=system.closures,
                          stabilization="baumgarte", baumgarte=(5.0, 3.0))
    x0 = jnp.concatenate([q, qd])

    def final(sys_, params, adjoint):
        return simulate(sys_, params=params, x0=x0, t1=0.05, dt=1e-3, saveat=2, adjoint=adjoint).x_final

    def loss(sys_, scale, adjoint="checkpoint"):
        params = dict(p, baumgarte={"a": jnp.asarray(5.0), "b": jnp.asarray(3.0)})
        model = params["model"]
        params["model"] = eqx_replace(model, mass=model.mass * scale)
        return jnp.sum(jnp.sin(final(sys_, params, adjoint)))

    # the user's reverse mode on the joint-space path (one program: the gradient, and the
    # values the central difference reads); the reference in forward mode through the
    # dense dual (a second reverse-mode program would cost as much again to compile)
    value_and_grad = jax.jit(jax.value_and_grad(lambda s: loss(system, s)))
    g_new = value_and_grad(jnp.asarray(1.1))[1]
    g_ref = jax.jit(lambda s: jax.jvp(lambda s: loss(reference, s, "direct"), (s,), (jnp.ones_like(s),))[1])(
        jnp.asarray(1.1))
    np.testing.assert_allclose(g_new, g_ref, rtol=1e-8)
    h = 1e-5
    fd = (value_and_grad(jnp.asarray(1.1 + h))[0] - value_and_grad(jnp.asarray(1.1 - h))[0]) / (2 * h)
    np.testing.assert_allclose(g_new, fd, rtol=1e-6)


def eqx_replace(model, **kw):
    import equinox as eqx

    return eqx.tree_at(lambda m: tuple(getattr(m, k) for k in kw), model, tuple(kw.values()))


def test_solver_needs_no_rank_decision_at_the_folded_flat_state():
    """At the map fold's folded-flat start the closure rows are massively redundant and
    the rank is not the generic one; the joint-space solve still returns finite
    accelerations that satisfy the acceleration constraint."""
    system = _system("map4x4", "none")
    p = system.default_params()
    model, nodes = p["model"], p["closures"]
    q, qd = system.split(system.init_state(p))

    @jax.jit
    def solve_there(model, q, qd, nodes):
        ws = kinematics(model, q, qd)
        qdd, _ = cs.constrained_dynamics(model, ws, 0.1 * jnp.ones(model.nv), nodes)
        G = cs.blocks(ws, nodes, model.nv)
        residual = G.apply(qdd) - cs.acceleration_target(ws, nodes)
        return qdd, residual, constraint_solve.numerical_rank(crba.mass_matrix_ws(model, ws), G)

    qdd, residual, rank = solve_there(model, q, qd, nodes)
    assert np.all(np.isfinite(np.asarray(qdd)))
    res = np.abs(np.asarray(residual)).max()
    assert res < 1e-9, res
    assert float(rank) < len(nodes.rows)


@jax.jit
def _products(G, D, x, y):
    """``(G x, G^T y, lower G^T G, G^T G on its pairs)`` from the blocks, and the same from
    the dense ``D``."""
    D2 = D.T @ D
    keys, _ = constraint_solve._gram_pairs(G.paths, G.nv)
    i, j = keys // (G.nv + 1), keys % (G.nv + 1)
    return ((G.apply(x).reshape(-1), G.apply_T(y), G.gram_lower(), G.gram_values()),
            (D @ x, D.T @ y.reshape(-1), jnp.tril(D2), D2[i, j]))


@jax.jit
def _grouped_and_dense(model, q, nodes):
    """``G`` at ``q`` in closure blocks, always grouped (never the small systems' dense
    ``G``), and the dense Jacobian ``(6 P, nv)`` from the same blocks."""
    blocks = cl.jacobian_blocks(kinematics(model, q, jnp.zeros_like(q)), nodes)
    return (constraint_solve.Blocks(blocks, nodes.paths, model.nv, dense=False),
            cl.dense_jacobian(blocks, nodes, model.nv))


def _grouped_products_match(G, D, seed=0):
    rng = np.random.default_rng(seed)
    x, y = jnp.asarray(rng.standard_normal(G.nv)), jnp.asarray(rng.standard_normal((G.P, 6)))
    for a, b in zip(*_products(G, D, x, y)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14 * np.abs(np.asarray(b)).max())


def test_nested_loops_share_one_block_of_the_gram_matrix():
    """A 4x4 map fold's closures, three per column pair, have nested loops (each row's loop
    holds the one below it): they form one group per pair, whose G^T G is summed over its
    rows before it is added into the matrix. Every product of G through the groups equals
    the dense Jacobian's."""
    p = _system("map4x4").default_params()
    model, nodes = p["model"], p["closures"]
    groups = cl.loop_groups(nodes.paths)
    assert sorted(len(m) for _, m in groups) == [3, 3, 3]
    for lead, members in groups:
        assert all(set(nodes.paths[k][0]) <= set(nodes.paths[lead][0]) for k in members)
    # the products are an identity of G at any state: no need to project onto the manifold
    rng = np.random.default_rng(3)
    q = p["q0"] + 0.3 * jnp.asarray(rng.standard_normal(model.nv))
    G, D = _grouped_and_dense(model, q, nodes)
    _grouped_products_match(G, D)


def test_a_coupling_inside_a_loop_joins_its_group():
    """The four-bar with a gear between its crank and coupler (both on the loop): the
    coupling's row is placed at its joints' columns of the loop's group, ``e_y - p'(q_x)
    e_x``, and the node pair's rows are the four-bar's own."""
    from diffmb.closures.couplings import coupling
    from diffmb.scenarios.fourbar import B as LB, C as LC

    four = fourbar_system(0.3, 2.0)
    p = four.default_params()
    model, alone = p["model"], p["closures"]
    hinge = dict(name="B", body_a=model.body_index("coupler"), body_b=model.body_index("rocker"), kind="hinge",
                 axis=2, rot_a=np.eye(3), pos_a=(LB, 0, 0), rot_b=np.eye(3), pos_b=(LC, 0, 0))
    coef = (0.1, 0.5, -0.2)
    nodes = cl.loop_closures(model, [hinge, coupling("gear", 1, 0, coef)])
    assert cl.loop_groups(nodes.paths) == ((0, (0, 1)),)
    q = p["q0"]
    G, D = _grouped_and_dense(model, q, nodes)
    _, D_alone = _grouped_and_dense(model, q, alone)
    D = np.asarray(D)
    np.testing.assert_allclose(D[:6], np.asarray(D_alone), rtol=0, atol=1e-15)
    slope = coef[1] + 2 * coef[2] * float(q[0])
    np.testing.assert_allclose(D[6], [-slope, 1.0, 0.0], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(D[7:], 0.0)
    _grouped_products_match(G, jnp.asarray(D))
