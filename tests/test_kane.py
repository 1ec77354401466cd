"""Kane's method for constrained systems with cut joints (Madonna; Bajodah, Hodges & Chen).

* slider-crank: Kane form (eq. 6) vs multiplier DAE (eq. 11) vs a 1-DOF model in theta1
  derived by hand, dopri5 at tight tolerances over 5 s, to 1e-8;
* energy conservation without friction or control, both forms;
* the partition (pivoted QR of C) picks a well-conditioned dependent block, and the
  re-partition keeps the answer when a forced partition goes singular;
* reactions (eq. 10, back-substitution) satisfy Newton's third law at the cut: equal and
  opposite forces on the slider and on the rod tip make both open branches' Newton-Euler
  equations (RNEA) hold with the joints' own (zero) torques;
* projection drift control; bad input raises ValueError;
* dual-arm-grasp: de-spin completes and the final distance is 0.75 m (slow).
"""

from __future__ import annotations

import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import simulate
from diffmb.formulations import kane
from diffmb.scenarios import REGISTRY, closed_mechanisms as sk
from diffmb.tree import api

V = dict(sk.SLIDER_CRANK_DEFAULTS)
T1 = 5.0
TS = np.linspace(0.0, T1, 51)
TIGHT = dict(solver="dopri5", rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------- hand-derived 1-DOF model


def hand_rhs(t, y, args):
    """Slider-crank in theta1 alone (Lagrange with kinematic coefficients, by hand).

    theta2 = -asin(l1 sin(theta1) / l2) (slider at x > 0), s3 = l1 c1 + l2 c2. With
    ' = d/dtheta1: theta2' = -l1 c1 / (l2 c2), theta2'' = -l1 (-s1 c2 + c1 s2 theta2') / (l2 c2^2);
    rod centre G2 = (l1 c1 + l2/2 c2, l1 s1 + l2/2 s2); crank inertia about the pivot
    m1 l1^2 / 3, rod about G2 m2 l2^2 / 12. Equation:
    m_eff theta1_dd + (sum m r'.r'' + I2 theta2' theta2'') theta1_d^2 + V' = 0.
    """
    l1, l2, m1, m2, m3, g = args
    th, w = y[0], y[1]
    s1, c1 = jnp.sin(th), jnp.cos(th)
    s2 = -l1 * s1 / l2
    c2 = jnp.sqrt(1.0 - s2 * s2)
    d2 = -l1 * c1 / (l2 * c2)
    dd2 = -l1 * (-s1 * c2 + c1 * s2 * d2) / (l2 * c2 * c2)
    gx1 = -l1 * s1 - l2 / 2 * s2 * d2
    gy1 = l1 * c1 + l2 / 2 * c2 * d2
    gx2 = -l1 * c1 - l2 / 2 * (c2 * d2 * d2 + s2 * dd2)
    gy2 = -l1 * s1 + l2 / 2 * (-s2 * d2 * d2 + c2 * dd2)
    x1 = -l1 * s1 - l2 * s2 * d2
    x2 = -l1 * c1 - l2 * (c2 * d2 * d2 + s2 * dd2)
    I1, I2 = m1 * l1 * l1 / 3.0, m2 * l2 * l2 / 12.0
    m_eff = I1 + m2 * (gx1 * gx1 + gy1 * gy1) + I2 * d2 * d2 + m3 * x1 * x1
    quad = m2 * (gx1 * gx2 + gy1 * gy2) + I2 * d2 * dd2 + m3 * x1 * x2
    dV = m1 * g * l1 / 2 * c1 + m2 * g * gy1
    return jnp.stack([w, -(quad * w * w + dV) / m_eff])


def hand_solution(v, ts):
    args = tuple(jnp.asarray(v[k]) for k in ("l1", "l2", "m1", "m2", "m3", "g"))
    sol = dfx.diffeqsolve(
        dfx.ODETerm(hand_rhs), dfx.Dopri5(), 0.0, float(ts[-1]), 1e-3,
        jnp.asarray([v["theta1_0"], v["omega1_0"]]), args, saveat=dfx.SaveAt(ts=jnp.asarray(ts)),
        stepsize_controller=dfx.PIDController(rtol=1e-12, atol=1e-12), max_steps=1 << 16)
    return np.asarray(sol.ys)


@pytest.fixture(scope="module")
def runs():
    out = {}
    for f in kane.FORMULATIONS:
        system, params = sk.slider_crank(V, formulation=f)
        tr = simulate(system, t1=T1, saveat=TS, **TIGHT)
        assert tr.status == "success"
        out[f] = (system, params, tr)
    return out


def test_kane_dae_and_hand_model_agree(runs):
    hand = hand_solution(V, TS)
    _, _, k = runs["kane"]
    _, _, d = runs["dae"]
    th_k, th_d = np.asarray(k["theta1"]), np.asarray(d["theta1"])
    assert th_k[-1] > 2 * math.pi  # the crank turns over (unwrapped angle keeps counting)
    np.testing.assert_allclose(th_k, hand[:, 0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(th_d, hand[:, 0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.asarray(k["theta1_dot"]), hand[:, 1], rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.asarray(k.xs), np.asarray(d.xs), rtol=0, atol=1e-8)
    # the dependent coordinates follow eq. (8)
    l1, l2 = V["l1"], V["l2"]
    th1, th2, s3 = (np.asarray(k[n]) for n in ("theta1", "theta2", "s3"))
    np.testing.assert_allclose(l1 * np.cos(th1) + l2 * np.cos(th2) - s3, 0.0, atol=1e-9)
    np.testing.assert_allclose(l1 * np.sin(th1) + l2 * np.sin(th2), 0.0, atol=1e-9)


def test_energy_conserved(runs):
    for f in kane.FORMULATIONS:
        _, _, tr = runs[f]
        e = np.asarray(tr.diagnostics["energy"])
        assert abs(e[0]) > 1.0
        assert np.abs(e - e[0]).max() < 1e-9 * abs(e[0]), f
        assert float(tr.violation["position"].max()) < 1e-9


def test_energy_conserved_rk4_and_projection():
    """Fixed-step RK4 (the CLI default, dt = 1 ms) with the projection: the closure holds
    to round-off (without it RK4 drifts to ~1e-7 m over 5 s) and the energy to 1e-8."""
    system, params = sk.slider_crank(V, "projection")
    tr = simulate(system, t1=T1, dt=1e-3, solver="rk4", saveat=51)
    e = np.asarray(tr.diagnostics["energy"])
    assert np.abs(e - e[0]).max() < 1e-8 * abs(e[0])
    assert float(tr.violation["position"].max()) < 1e-13
    assert float(tr.violation["velocity"].max()) < 1e-12


def test_initial_state_and_vector_fields_agree(runs):
    ks, kp, _ = runs["kane"]
    ds, dp, _ = runs["dae"]
    x0 = ks.init_state(kp)
    np.testing.assert_allclose(np.asarray(x0), [math.pi / 3, -math.asin(0.5 * math.sin(math.pi / 3)),
                                                0.5 * 0.5 + math.sqrt(1 - (0.5 * math.sin(math.pi / 3)) ** 2),
                                                2.0, float(x0[4]), float(x0[5])], atol=1e-14)
    fk = np.asarray(ks.vector_field(0.0, x0, kp))
    fd = np.asarray(ds.vector_field(0.0, x0, dp))
    np.testing.assert_allclose(fk, fd, rtol=1e-12, atol=1e-12)
    hand = np.asarray(hand_rhs(0.0, jnp.asarray([V["theta1_0"], V["omega1_0"]]),
                               tuple(jnp.asarray(V[k]) for k in ("l1", "l2", "m1", "m2", "m3", "g"))))
    assert fk[3] == pytest.approx(hand[1], rel=1e-12)


def test_partition_well_conditioned():
    system, params = sk.slider_crank(V)
    assert system.independent_names == ("theta1",)
    assert system.dependent_names == ("theta2", "s3")
    q0 = params["q0"]
    C = np.asarray(system.constraint_jacobian(q0, params))
    # eq. (12) for the slider-crank by hand: rows d/dt of eq. (8)
    th1, th2 = float(q0[0]), float(q0[1])
    l1, l2 = V["l1"], V["l2"]
    np.testing.assert_allclose(C, [[-l1 * math.sin(th1), -l2 * math.sin(th2), -1.0],
                                   [l1 * math.cos(th1), l2 * math.cos(th2), 0.0]], atol=1e-14)
    conds = {}
    for ind in range(3):
        dep = [i for i in range(3) if i != ind]
        conds[system.names[ind]] = np.linalg.cond(C[:, dep])
    chosen = conds["theta1"]
    assert chosen == min(conds.values())
    assert chosen < 3.0
    # A = -C_D^-1 C_I (eq. 13) gives u_D = A u_I (eq. 1) on the initial state
    u0 = np.asarray(params["u0"])
    A = -np.linalg.solve(C[:, 1:], C[:, :1])
    np.testing.assert_allclose(A @ u0[:1], u0[1:], rtol=1e-12)


def test_kane_matrices(runs):
    """A2^T spans null(C) (eqs. 2, 13), A1 u = u_D - A u_I = 0 on the state (eq. 5), T of
    eq. (6) is invertible, and the constrained Kane equations (eq. 4) hold."""
    system, params, tr = runs["kane"]
    x = tr.xs[20]
    q, u, t = system.unpack(x)
    k = eqx.filter_jit(lambda s, t, q, u, p: s.kane_matrices(t, q, u, p))(system, t, q, u, params)
    perm = np.asarray(k["perm"])
    C = np.asarray(system.constraint_jacobian(q, params))[:, perm]
    A2, A1, T = np.asarray(k["A2"]), np.asarray(k["A1"]), np.asarray(k["T"])
    np.testing.assert_allclose(C @ A2.T, 0.0, atol=1e-13)
    np.testing.assert_allclose(A1 @ np.asarray(u)[perm], 0.0, atol=1e-9)
    assert np.linalg.cond(T) < 1e3
    udot = np.linalg.solve(T, np.asarray(k["rhs"]))
    M = np.asarray(k["M"])[np.ix_(perm, perm)]
    res = A2 @ (M @ udot + np.asarray(k["nl"])[perm] - np.asarray(k["F"])[perm])
    np.testing.assert_allclose(res, 0.0, atol=1e-10)
    np.testing.assert_allclose(udot, np.asarray(system.vector_field(0.0, x, params))[3:][perm], atol=1e-12)


# slow job: a second tight run of the slider-crank (~5 s); the default job keeps the
# re-partition at the singular state itself (test_repartition_when_dependent_block_goes_singular)
@pytest.mark.slow
def test_a_run_through_the_singular_partition_matches_the_default_run(runs):
    """With {theta1, s3} forced dependent, C_D is singular at theta1 = pi/2 (crank
    vertical); the run passes it, re-partitions there, and matches the default run."""
    forced, _ = sk.slider_crank(V, independent=("theta2",))
    _, _, b = runs["kane"]
    a = simulate(forced, t1=T1, saveat=TS, **TIGHT)
    assert float(a["theta1"][-1]) > math.pi / 2 + 0.5  # went through the singular configuration
    np.testing.assert_allclose(np.asarray(a.xs), np.asarray(b.xs), rtol=0, atol=1e-9)


def test_repartition_when_dependent_block_goes_singular(runs):
    """With {theta1, s3} forced dependent, C_D is singular at theta1 = pi/2 (crank
    vertical): there the build-time partition is rejected, the re-partitioned vector
    field equals the default one, and without re-partitioning the solve breaks down."""
    forced, params = sk.slider_crank(V, independent=("theta2",))
    assert forced.dependent_names == ("theta1", "s3")
    default = runs["kane"][0]
    # at theta1 = pi/2 exactly the build-time partition is rejected
    q, u = sk.slider_crank_state(V["l1"], V["l2"], math.pi / 2, 1.0)
    x = jnp.asarray(np.concatenate([q, u]))
    assert float(forced.diagnostics(x, params)["repartitioned"]) == 1.0
    assert float(default.diagnostics(x, params)["repartitioned"]) == 0.0
    np.testing.assert_allclose(np.asarray(forced.vector_field(0.0, x, params)),
                               np.asarray(default.vector_field(0.0, x, params)), rtol=1e-10, atol=1e-10)
    # without re-partitioning the forced partition's solve breaks down there
    stuck, _ = sk.slider_crank(V, independent=("theta2",), repartition_tol=0.0)
    f = np.asarray(stuck.vector_field(0.0, x, params))
    assert not np.allclose(f, np.asarray(default.vector_field(0.0, x, params)), atol=1e-6)


def test_reactions_newton_third_law(runs):
    """lambda = force the rod exerts on the slider (node A axes = world). Applying +lambda
    to the slider and -lambda at the rod tip, the RNEA of the open tree with the Kane
    accelerations returns the joints' own torques (zero): Newton-Euler holds for the
    slider and for the crank-rod branch with equal and opposite forces at the cut."""
    system, params, tr = runs["kane"]
    model = params["models"][0]
    P = np.asarray(sk.SLIDER_CRANK_MAP)
    l2 = V["l2"]
    acc = eqx.filter_jit(lambda s, t, q, u, p: s.accelerations(t, q, u, p))
    for i in (0, 17, 33, 50):
        x = tr.xs[i]
        q, u, t = system.unpack(x)
        udot, lam, _ = acc(system, t, q, u, params)
        lam_saved = np.asarray(tr.diagnostics["reaction"][i])
        np.testing.assert_allclose(np.asarray(lam), lam_saved, rtol=1e-12)
        # same multipliers from the DAE form (eq. 11)
        _, lam_dae, _ = acc(runs["dae"][0], t, q, u, params)
        np.testing.assert_allclose(np.asarray(lam), np.asarray(lam_dae), rtol=1e-9, atol=1e-9)
        force_on_slider = jnp.concatenate([lam, jnp.zeros(1, lam.dtype)])
        dcm, _ = api.forward_kinematics(model, P @ q)
        rod = model.body_index("rod")
        f_rod = dcm[rod] @ (-force_on_slider)  # rod body axes
        tip = jnp.asarray([l2, 0.0, 0.0])
        f_ext = jnp.zeros((3, 6), x.dtype)
        f_ext = f_ext.at[rod].set(jnp.concatenate([jnp.cross(tip, f_rod), f_rod]))
        f_ext = f_ext.at[model.body_index("slider")].set(jnp.concatenate([jnp.zeros(3, x.dtype), force_on_slider]))
        tau = api.inverse_dynamics(model, P @ q, P @ u, P @ udot, f_ext)
        np.testing.assert_allclose(np.asarray(tau), 0.0, atol=1e-10)
        # and the wrench layout: (P, 6) with the force rows (tx, ty) set, tz dropped
        w = np.asarray(system.reaction_wrenches(lam))
        np.testing.assert_allclose(w[0], [0, 0, 0, float(lam[0]), float(lam[1]), 0.0])
        assert abs(float(lam[1])) > 1.0  # the pin carries load


@pytest.mark.slow
def test_gradient_matches_finite_differences():
    """d theta1(T) / d m3 through the Kane ODE (recursive checkpointing) vs central FD."""
    system, params = sk.slider_crank(V)

    def final_theta(m3):
        p = dict(params)
        model = p["models"][0]
        mass = model.mass.at[model.body_index("slider")].set(m3)
        p["models"] = (eqx_set(model, mass),)
        tr = simulate(system, t1=0.5, dt=5e-3, solver="rk4", params=p, saveat=2)
        return tr.x_final[0]

    g = float(jax.grad(final_theta)(jnp.asarray(3.0)))
    h = 1e-4
    fd = (float(final_theta(jnp.asarray(3.0 + h))) - float(final_theta(jnp.asarray(3.0 - h)))) / (2 * h)
    assert abs(g) > 1e-3
    assert g == pytest.approx(fd, rel=1e-6)


def eqx_set(model, mass):
    return eqx.tree_at(lambda m: m.mass, model, mass)


def test_bad_input():
    with pytest.raises(ValueError, match="violates the closure"):
        model = sk.slider_crank_model(0.5, 1.0, 1, 2, 3, 9.81)
        cuts = kane.make_cuts(model, [{"name": "pin", "body_a": "slider", "body_b": "rod",
                                       "kind": "point", "pos_b": (1.0, 0, 0)}])
        kane.KaneSystem(model, cuts, [0.3, 0.0, 1.2], [0.0, 0.0, 0.0], names=("a", "b", "c"),
                        coordinate_map=sk.SLIDER_CRANK_MAP)
    with pytest.raises(ValueError, match="unknown body"):
        kane.make_cuts(model, [{"body_a": "slider", "body_b": "piston"}])
    with pytest.raises(ValueError, match="independent"):
        sk.slider_crank(V, independent=("bogus",))
    with pytest.raises(ValueError, match="independent"):
        sk.slider_crank(V, independent=("theta1", "theta2"))
    with pytest.raises(ValueError, match="velocity closure"):
        q, _ = sk.slider_crank_state(0.5, 1.0, 1.0, 1.0)
        kane.KaneSystem(model, cuts, q, [1.0, 0.0, 0.0], names=("a", "b", "c"),
                        coordinate_map=sk.SLIDER_CRANK_MAP)
    with pytest.raises(ValueError, match=r"Baumgarte stabilization is for the multiplier \(DAE\) form.*"
                                         r"--set formulation=1"):   # the scenario says which value
        sk.slider_crank(V, "baumgarte", formulation="kane")
    with pytest.raises(ValueError, match="stabilization 'baumgarte' is for the multiplier"):   # the library
        q, u = sk.slider_crank_state(0.5, 1.0, 1.0, 1.0)
        kane.build("kane", model, cuts, q, u, names=("a", "b", "c"), coordinate_map=sk.SLIDER_CRANK_MAP,
                   stabilization="baumgarte")
    with pytest.raises(ValueError, match="formulation"):
        REGISTRY["slider-crank"].make({"formulation": 2})
    with pytest.raises(ValueError, match="l1 < l2"):
        REGISTRY["slider-crank"].make({"l1": 1.5})


@pytest.mark.slow
def test_dae_baumgarte_scenario_runs():
    system, params, _ = REGISTRY["slider-crank"].make({"formulation": 1, "a": 5.0, "b": 5.0}, "baumgarte")
    tr = simulate(system, t1=1.0, dt=1e-3, solver="rk4", params=params, saveat=11)
    assert tr.status == "success"
    assert float(tr.violation["position"].max()) < 1e-10


# ------------------------------------------------------------------------ dual-arm grasp


@pytest.mark.slow
def test_dual_arm_mission():
    """The full 600 s mission, Kane form (RK4, 50 ms): de-spin to below 0.01 deg/s by the
    end of the de-spin phase (180 s) and at the end, final distance 0.75 m +- 1 mm, no
    external force (linear momentum kept), closures held; the DAE form ends in the same
    state."""
    sc = REGISTRY["dual-arm-grasp"]
    ts = np.linspace(0.0, sc.t1, 601)
    ends = {}
    for form in (0.0, 1.0):
        system, params, _ = sc.make({"formulation": form})
        tr = simulate(system, t1=sc.t1, dt=sc.dt, solver=sc.solver, params=params, saveat=ts)
        assert tr.status == "success"
        d = {k: np.asarray(v) for k, v in tr.diagnostics.items()}
        rate = d["target_rate_deg_s"]
        assert rate[0] == pytest.approx(5.0)
        assert rate[180] < 0.01 and rate[-1] < 0.01
        assert np.abs(d["bus_rate_b1_deg_s"][180:]).max() < 0.01
        assert abs(d["distance"][-1] - 0.75) < 1e-3
        assert abs(d["distance"][240] - 1.5) < 1e-3
        p = d["linear_momentum"]
        assert np.abs(p - p[0]).max() < 1e-8
        assert float(np.max(np.asarray(tr.violation["position"]))) < 1e-8
        assert np.abs(d["bus_torque"]).max() < 5.0  # "modest control efforts"
        assert np.abs(d["reaction"]).max() > 0.01  # the grasps carry load
        ends[form] = np.asarray(tr.x_final)
    np.testing.assert_allclose(ends[0.0], ends[1.0], atol=1e-7)


# slow job: the dual-arm build (~10 s: two arms welded to a target), the build-time half of the
# slow mission test; the default job keeps the Kane partition, weld rows and build checks on the
# slider-crank
@pytest.mark.slow
def test_dual_arm_model_and_partition():
    """Build-time facts of the dual-arm case: 18 coordinates (bus 6, arms 3 + 3, target
    6), two welds of 12 rows of which the planar arms make 3 redundant (9 kept), 9
    independent speeds (the bus and the left arm), the dependent block well conditioned;
    the initial state is a rigid spin at 5 deg/s about b1 on the closure. (The Kane and
    DAE forms are compared over the whole mission in the slow test.)"""
    sc = REGISTRY["dual-arm-grasp"]
    system, params, _ = sc.make()
    assert len(system.coordinate_names) == 18 and system.n_independent == 9
    assert system.independent_names == ("bus_sigma1", "bus_sigma2", "bus_sigma3", "bus_x", "bus_y",
                                        "bus_z", "left1", "left2", "left3")
    labels = system.reaction_labels
    assert len(labels) == 9 and all(l.startswith("grasp_left") for l in labels[:6])
    assert labels[6:] == ["grasp_right:rz", "grasp_right:tx", "grasp_right:ty"]
    q0, u0 = params["q0"], params["u0"]
    C = np.asarray(system.constraint_jacobian(q0, params))
    perm = list(system.perm)
    assert np.linalg.cond(C[:, perm[9:]]) < 50.0
    np.testing.assert_allclose(C @ np.asarray(u0), 0.0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(u0)[[0, 12]], 5.0 * math.pi / 180.0)
    np.testing.assert_allclose(np.asarray(system.closure(q0, params)), 0.0, atol=1e-14)
    auto = kane.KaneSystem(params["models"], params["cuts"], q0, u0)  # automatic partition
    assert np.linalg.cond(C[:, list(auto.perm[9:])]) < 50.0


def test_the_build_checks_are_one_program_and_a_second_build_compiles_nothing():
    """The build's checks at q0 (closure residual and Jacobian, the partition) run as one
    jitted program on the system's structure: evaluated operation by operation they
    compiled ~200 programs (slider-crank's build 6.1-6.5 s, dual-arm-grasp's 12-14 s on a
    2-core CPU; now 0.9-1.0 and 3.7-4.0 s). Another build with other numbers compiles
    nothing."""
    import logging

    compiled = []
    handler = logging.Handler()
    handler.emit = lambda rec: compiled.append(rec.getMessage()) if "Finished XLA compilation" in rec.getMessage() else None
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles():
            REGISTRY["slider-crank"].make({"formulation": 0.0})
            first = len(compiled)
            REGISTRY["slider-crank"].make({"l1": 0.4, "m2": 2.5, "theta1_0": 0.7, "formulation": 0.0})
    finally:
        logging.getLogger("jax").removeHandler(handler)
    assert first <= 20, compiled
    assert len(compiled) == first, compiled[first:]
