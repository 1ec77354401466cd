"""Loop closures: a four-bar linkage against its one-coordinate model, redundancy,
stabilization (Baumgarte, projection), constraint wrenches, gradients w.r.t. gains."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import ModelBuilder, TreeSystem, simulate
from diffmb.closures.nodes import make_closures
from diffmb.scenarios.fourbar import M1, M2, M3, A, B, C, D, G, fourbar_system


def minimal_model_rhs(state):
    """The same mechanism in the crank angle alone: M(th) th'' + M'(th) th'^2 / 2 + V'(th) = 0."""

    def angles(th):
        ax, ay = A * jnp.cos(th), A * jnp.sin(th)
        dx, dy = D - ax, -ay
        r = jnp.sqrt(dx * dx + dy * dy)
        phi = jnp.arctan2(dy, dx) + jnp.arccos((B * B + r * r - C * C) / (2 * B * r))
        bx, by = ax + B * jnp.cos(phi), ay + B * jnp.sin(phi)
        psi = jnp.arctan2(by, bx - D)
        return th, phi, psi

    def coms(th):
        t, phi, psi = angles(th)
        c1 = 0.5 * A * jnp.array([jnp.cos(t), jnp.sin(t)])
        c2 = A * jnp.array([jnp.cos(t), jnp.sin(t)]) + 0.5 * B * jnp.array([jnp.cos(phi), jnp.sin(phi)])
        c3 = jnp.array([D, 0.0]) + 0.5 * C * jnp.array([jnp.cos(psi), jnp.sin(psi)])
        return (c1, c2, c3), (t, phi, psi)

    def mass(th):
        Jc = jax.jacfwd(lambda x: coms(x)[0])(th)
        Ja = jax.jacfwd(lambda x: jnp.stack(angles(x)))(th)
        Izz = jnp.array([M1 * A * A / 12, M2 * B * B / 12, M3 * C * C / 12])
        m = jnp.array([M1, M2, M3])
        return sum(m[i] * jnp.dot(Jc[i], Jc[i]) for i in range(3)) + jnp.sum(Izz * Ja**2)

    def potential(th):
        (c1, c2, c3), _ = coms(th)
        return G * (M1 * c1[1] + M2 * c2[1] + M3 * c3[1])

    th, om = state[0], state[1]
    dM = jax.grad(mass)(th)
    acc = -(0.5 * dM * om**2 + jax.grad(potential)(th)) / mass(th)
    return jnp.array([om, acc])


def one_dof_reference(theta0, omega0, t1=3.0):
    """The one-coordinate model's run from ``(theta0, omega0)``: dopri8, 31 save points."""
    from diffmb.system import System

    class OneDof(System):
        def default_params(self):
            return {}

        def init_state(self, params):
            return jnp.array([theta0, omega0])

        def state_derivative(self, t, x, params):
            return minimal_model_rhs(x)

        @property
        def state_names(self):
            return ("theta", "omega")

    return simulate(OneDof(), t1=t1, solver="dopri8", rtol=1e-11, atol=1e-12, saveat=31)


def test_fourbar_matches_minimal_coordinates():
    theta0, omega0 = 0.3, 2.0
    system = fourbar_system(theta0, omega0)
    report = system.closures.report
    assert report.rank == 2 and set(report.redundant) == {"B:rx", "B:ry", "B:tz"}
    tr = simulate(system, t1=3.0, solver="dopri8", rtol=1e-11, atol=1e-12, saveat=31)
    ref = one_dof_reference(theta0, omega0)
    np.testing.assert_allclose(np.asarray(tr.xs[:, 0]), np.asarray(ref.xs[:, 0]), atol=1e-7)
    np.testing.assert_allclose(np.asarray(tr.xs[:, 3]), np.asarray(ref.xs[:, 1]), atol=1e-7)
    s = tr.summary()
    assert s["violation"]["position_max"] < 1e-9  # save points inside adaptive steps: interpolant error
    assert s["energy"]["max_rel_change"] < 1e-8
    # the closure rank along the run (an eigendecomposition per point) is sampled: every
    # ceil(31 / 21) = 2nd save point here; the four-bar keeps rank 2 all the way
    np.testing.assert_array_equal(np.asarray(tr.diagnostics["closure_rank"])[::2], np.full(16, 2.0))


def test_closure_rank_is_sampled_on_long_save_grids():
    tr = simulate(fourbar_system(0.3, 2.0), t1=1.0, dt=1e-2, solver="rk4", saveat=201)
    rank = np.asarray(tr.diagnostics["closure_rank"])
    sampled = np.arange(0, 201, 10)  # ceil(201 / 21) = 10: 21 points
    np.testing.assert_array_equal(rank[sampled], 2.0)
    assert np.isnan(np.delete(rank, sampled)).all()


def test_drift_none_vs_baumgarte_vs_projection():
    out = {}
    for stab, gains in (("none", (0.0, 0.0)), ("baumgarte", (10.0, 10.0)), ("projection", (0.0, 0.0))):
        tr = simulate(fourbar_system(0.3, 2.0, stab, gains), t1=3.0, dt=1e-2, solver="rk4")
        out[stab] = tr.summary()["violation"]["position_max"]
    assert out["projection"] < 1e-12
    assert out["baumgarte"] < out["none"]


def test_constraint_wrench_balances_gravity_at_rest():
    """At rest the closure carries part of the weight: the tree alone would fall."""
    system = fourbar_system(0.3, 0.0)
    p = system.default_params()
    x = system.init_state(p)
    from diffmb.closures.nodes import jacobian

    @jax.jit  # one program (operation by operation: ~100 small ones)
    def evaluate(x, p):
        qdd = system.vector_field(0.0, x, p)[3:]
        return system.constraint_wrenches(0.0, x, p), jacobian(p["model"], x[:3], system.closures) @ qdd

    w, Gqdd = evaluate(x, p)
    assert w.shape == (1, 6)
    assert abs(float(w[0, 2])) == 0.0  # the hinge axis row is free
    assert np.linalg.norm(np.asarray(w[0, 3:5])) > 1.0  # in-plane force of order m g
    np.testing.assert_allclose(Gqdd, 0.0, atol=1e-10)


@pytest.mark.slow  # reverse mode through a four-bar run (~20 s), as test_design's tuning-loss gradient
def test_gradient_of_violation_wrt_baumgarte_gains():
    system = fourbar_system(0.3, 2.0, "baumgarte", (5.0, 5.0))
    params = system.default_params()

    # start off the velocity manifold so the gains matter
    x0 = system.init_state(params).at[5].add(0.2)

    def loss(a):
        p = dict(params, baumgarte={"a": a, "b": params["baumgarte"]["b"]})
        tr = simulate(system, params=p, x0=x0, t1=0.5, dt=1e-2, solver="rk4", saveat=11)
        return jnp.sum(tr.violation["velocity"] ** 2)

    g = jax.grad(loss)(jnp.asarray(5.0))
    h = 1e-4
    fd = (loss(jnp.asarray(5.0 + h)) - loss(jnp.asarray(5.0 - h))) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-5)


def test_closure_errors_name_the_closure():
    b = ModelBuilder()
    b.add_body("a", "world", "revolute", mass=1.0, inertia=np.eye(3))
    b.add_body("b", "world", "revolute", pos=(1, 0, 0), mass=1.0, inertia=np.eye(3))
    model = b.build()
    with pytest.raises(ValueError, match="'gap'.*violates"):
        make_closures(model, model.neutral(), [dict(name="gap", body_a="a", body_b="b", kind="point")])
    with pytest.raises(ValueError, match="unknown body"):
        make_closures(model, model.neutral(), [dict(name="x", body_a="a", body_b="nope")])
    with pytest.raises(ValueError, match="kind"):
        make_closures(model, model.neutral(), [dict(name="x", body_a="a", body_b="b", kind="glue",
                                                    pos_b=(-1, 0, 0))])
    with pytest.raises(ValueError, match="needs loop closures"):
        TreeSystem(model, stabilization="projection")


def test_save_points_inside_adaptive_steps_are_projected_with_fewer_iterations():
    """Dopri5 at a loose tolerance: its dense output between projected step ends is off the
    closures by ~1e-6 in position and ~1e-5 in velocity (measured); the save points' two
    Gauss-Newton iterations (project_interpolated) put them back to round-off, and a
    state 1e-5 off lands where the full projection (three) puts it, to that squared
    (one iteration would leave the velocity 1e-5 off: its factor is taken before the
    correction)."""
    system = fourbar_system(0.3, 2.0, "projection", (0.0, 0.0))
    p = system.default_params()
    tr = simulate(system, t1=1.0, solver="dopri5", rtol=1e-6, atol=1e-8, saveat=41)
    s = tr.summary()["violation"]
    assert tr.n_steps < 40 and s["position_max"] < 1e-14 and s["velocity_max"] < 1e-12
    x = np.asarray(tr.xs[20])
    e = 1e-5 * np.random.default_rng(0).normal(size=x.shape)
    full, fewer = system.project(jnp.asarray(x + e), p), system.project_interpolated(jnp.asarray(x + e), p)
    v = system.violation(fewer, p)
    assert float(v["position"]) < 1e-14 and float(v["velocity"]) < 1e-9
    assert float(jnp.max(jnp.abs(fewer - full))) < 1e-9


def test_a_batch_projection_stops_where_every_member_is_at_round_off():
    """In the written-out form (CPU batch programs) the Gauss-Newton iterations stop after
    the first whose residual was already at round-off, as a while loop over the batch.
    Fold-4panel (a free-flying hub: the momentum restored too), three members: a state
    on the manifolds (at round-off at once), and the same with its coordinates 1e-10 and
    1e-6 off (its speeds 1e-8 and 1e-4). Vmapped together, each lands on both
    manifolds to round-off, with its total momentum, and where the default form's
    projection of it alone (every iteration) puts it, to 1e-12 (measured 0.8-1.7e-13 on
    speeds of 0.2: the two forms round differently, and the default form projects the
    velocity with the factor of the iterate before its last correction)."""
    from diffmb import scenarios
    from diffmb.math import spatial as sp
    from diffmb.tree import api

    # (the paper's model: random speeds over 20 unresolved steps would drive creases deep
    # into contact's barriers)
    system, params, _ = scenarios.get("fold-4panel").make({"contact": 0.0}, "projection")
    project = lambda x: system.project(x, params)
    alone = jax.jit(project)
    rng = np.random.default_rng(0)
    nq = params["model"].nq
    f = jax.jit(lambda x: system.vector_field(0.0, x, params))
    step = lambda x, h: x + h * np.asarray(f(x + 0.5 * h * np.asarray(f(x))))   # midpoint, unprojected
    # away from the stowed state, where the folded-flat hinges make the closures singular
    # (a projection there converges linearly): random speeds, 20 projected steps of 20 ms
    x0 = np.asarray(system.init_state(params))
    x1 = np.asarray(alone(x0 + np.concatenate([np.zeros(nq), 0.3 * rng.normal(size=len(x0) - nq)])))
    for _ in range(20):
        x1 = np.asarray(alone(step(x1, 0.02)))
    near, off = (x1 + np.concatenate([e * rng.normal(size=nq), 1e2 * e * rng.normal(size=len(x1) - nq)])
                 for e in (1e-10, 1e-6))
    batch = jnp.asarray(np.stack([x1, near, off]))
    with sp.written_out():
        written = np.asarray(jax.jit(jax.vmap(project))(batch))
    momentum = lambda x: np.asarray(api.spatial_momentum(params["model"], *system.split(jnp.asarray(x))))
    for k in range(3):
        v = system.violation(jnp.asarray(written[k]), params)
        assert float(v["position"]) < 1e-14 and float(v["velocity"]) < 1e-12, k
        np.testing.assert_allclose(written[k], np.asarray(alone(batch[k])), rtol=0, atol=1e-12)
        np.testing.assert_allclose(momentum(written[k]), momentum(batch[k]), rtol=0, atol=1e-13)
