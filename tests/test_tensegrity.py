"""Tensegrity formulation (Hsu, Tadiparthi & Bhattacharya): closed forms vs autodiff,
tension-only strings, direct correction, energy, linearization, minimal-coordinate T-bar,
builder validation, CLI."""

import dataclasses
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import scenarios, simulate
from diffmb.cli import main
from diffmb.formulations import tensegrity as tg
from diffmb.formulations.tensegrity import linear as tl
from diffmb.scenarios.tensegrity import (
    TBAR_BARS,
    TBAR_FIXED,
    TBAR_STRINGS,
    ball_geometry,
    tbar_elastic,
    tbar_minimal_error,
    tbar_nodes,
)


def tbar(**kw):
    return scenarios.get("tbar").make(kw)


def ball_structure():
    N, bars, strings = ball_geometry()
    return tg.make_structure(N, bars, strings, fixed=[0, 1, 8], bar_radius=0.01, bar_density=1300.0,
                             string_E=2e9, string_radius=1e-3, point_masses={12: 1.0},
                             gravity=(0.0, 0.0, -9.806))


def random_state(system, seed, scale=0.05):
    rng = np.random.default_rng(seed)
    p = system.default_params()
    n3 = 3 * system.n_nodes
    Z = np.asarray(p["Z_lin"])  # move only the free coordinates (A q = b holds)
    q = np.asarray(p["q0"]) + scale * Z @ rng.normal(size=Z.shape[1])
    qd = Z @ rng.normal(size=Z.shape[1])
    assert n3 == q.size
    return jnp.asarray(q), jnp.asarray(qd)


# ------------------------------------------------------------------ closed forms (eqs. 10, 11, 18, 25)
def test_mass_gravity_constraints_match_closed_forms():
    s = ball_structure()
    system = tg.TensegritySystem(s)
    p = system.default_params()
    q, qd = random_state(system, 0)

    @jax.jit  # one program (operation by operation: ~270 small ones)
    def evaluate(q, qd, p):
        # V_g = -G^T q (eq. 11): its gradient is -G (strings removed so only gravity remains)
        Vg_grad = jax.grad(system.potential)(q, {**p, "string_K": jnp.zeros_like(p["string_K"])})
        Rq = jax.jacfwd(lambda x: system.residual(x, p))(q)
        return system.mass_matrix(q, p), Vg_grad, Rq, system.constraint_terms(q, qd, p)[2]

    M, Vg_grad, Rq, xi2 = evaluate(q, qd, p)
    np.testing.assert_allclose(np.asarray(M), tg.closed_form_mass(s), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(np.asarray(Vg_grad), -tg.closed_form_gravity(s), rtol=1e-13, atol=1e-13)
    Rq_cf, xi2_cf = tg.closed_form_constraints(s, q, qd)
    np.testing.assert_allclose(np.asarray(Rq), Rq_cf, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(xi2), xi2_cf, rtol=1e-12, atol=1e-12)


def test_string_force_matches_eq18_with_slack_strings():
    system, params, _ = tbar()
    s = tg.make_structure(tbar_nodes(), TBAR_BARS, TBAR_STRINGS, fixed=TBAR_FIXED, bar_radius=0.05,
                          bar_density=500.0, string_stiffness=[100.0, 80.0, 120.0, 90.0],
                          rest_fraction=[1.0, 0.9, 1.0, 0.9])
    system = tg.TensegritySystem(s)
    p = system.default_params()
    density, gradient = eqx.filter_jit(system.string_force_density), jax.jit(jax.grad(system.potential))
    for seed in range(4):
        q, _ = random_state(system, seed, scale=0.3)
        sig = np.asarray(density(q, p))
        assert np.any(sig == 0.0) or seed > 0  # at least the first draw has a slack string
        dVs = gradient(q, p)  # no gravity here: V = V_s
        np.testing.assert_allclose(np.asarray(dVs), tg.closed_form_string_force(s, q), rtol=1e-12, atol=1e-12)


def test_slack_string_exerts_no_force_or_damping():
    system, p, _ = tbar(damping=3.0)
    q = np.asarray(p["q0"]).copy()
    q[3 * 2 + 0] -= 0.2  # node 3 moves left: the top string 3-4 (index 2) shortens below rest
    q, qd = jnp.asarray(q), jnp.asarray(np.random.default_rng(1).normal(size=q.size))
    sig = np.asarray(system.string_force_density(q, p))
    assert sig[2] == 0.0 and sig[1] > 0.0
    accelerations = eqx.filter_jit(system.accelerations)   # one program for the three parameter sets
    a = accelerations(0.0, q, qd, p)[0]
    for key, val in (("string_K", 1e4), ("string_damping", 50.0)):
        p2 = {**p, key: p[key].at[2].set(val)}
        np.testing.assert_array_equal(np.asarray(accelerations(0.0, q, qd, p2)[0]), np.asarray(a))
    # the taut strings' dampers do act
    p3 = {**p, "string_damping": p["string_damping"].at[1].set(50.0)}
    assert np.max(np.abs(np.asarray(accelerations(0.0, q, qd, p3)[0] - a))) > 1e-3


@pytest.mark.parametrize("name", ["tbar", "tbar-compressible"])
def test_power_balance(name):
    """dE/dt = f . qd along the equations of motion (constraint forces do no work): checks the
    Lagrangian-derived EOM, including T_f and Poisson thinning for compressible bars."""
    system, p, _ = scenarios.get(name).make({"damping": 2.0})
    q, qd = random_state(system, 3, scale=0.02)
    if not system.compressible:  # put (q, qd) on the constraint manifold (no energy row)
        plain = scenarios.get(name).make({"damping": 2.0, "energy_correction": 0.0})[0]
        for _ in range(2):
            q, qd, _ = plain.correct(q, qd, jnp.zeros(()), {**p, "gamma": jnp.asarray(0.0)})
        v = plain.violation(jnp.concatenate([q, qd, jnp.zeros(1)]), p)
        assert max(np.max(np.abs(np.asarray(v[k]))) for k in ("position", "velocity")) < 1e-12
    @jax.jit
    def rate_and_power(q, qd, p):
        t = 1.5
        qdd = system.accelerations(t, q, qd, p)[0]
        dE = jax.jvp(lambda a, b: system.energy(a, b, p), (q, qd), (qd, qdd))[1]
        return dE, jnp.dot(system.nonconservative_force(t, q, qd, p), qd)

    dE, power = rate_and_power(q, qd, p)
    assert abs(float(dE - power)) < 1e-8 * (1.0 + abs(float(power)))


# ------------------------------------------------------------------ correction (section 2.4)
@pytest.mark.parametrize("energy_correction", [0.0, 1.0])
def test_correction_restores_constraints_to_gamma(energy_correction):
    system, p, _ = tbar(energy_correction=energy_correction, gamma=1e-10)
    x0 = system.init_state(p)
    rng = np.random.default_rng(7)
    n3 = 3 * system.n_nodes
    kick = jnp.concatenate([jnp.asarray(p["Z_lin"] @ rng.normal(size=4)) * 1e-4,
                            jnp.asarray(p["Z_lin"] @ rng.normal(size=4)) * 1e-3, jnp.zeros(1)])
    x = x0 + kick
    before = system.violation(x, p)
    assert np.max(np.abs(np.asarray(before["position"]))) > 1e-6
    y = system.project(x, p)
    v = system.violation(y, p)
    Rb = jnp.sum((y[:n3].reshape(-1, 3)[2] - y[:n3].reshape(-1, 3)[0]) ** 2) - 25.0
    assert abs(float(Rb)) <= 1e-10
    assert np.max(np.abs(np.asarray(v["position"]))) <= 1e-10
    assert np.max(np.abs(np.asarray(v["velocity"]))) <= 1e-10
    if energy_correction:
        assert abs(float(v["energy"][0])) <= 1e-10
    else:
        assert abs(float(v["energy"][0])) > 1e-6  # energy left alone
        assert float(y[-1]) == 0.0


# slow job: 3 s runs at 1e-11 (~5 s); the default job keeps the power balance
# (test_power_balance), energy accounted for over a damped run to 1e-8
# (test_work_of_dampers_balances_energy) and the correction
# (test_correction_restores_constraints_to_gamma)
@pytest.mark.slow
def test_energy_conserved_without_damping_or_force():
    system, p, _ = tbar()
    for stab, bound in (("none", 1e-8), ("projection", 1e-9)):
        sys_ = scenarios.get("tbar").make({}, stab)[0]
        tr = simulate(sys_, params=p, t1=3.0, solver="dopri5", rtol=1e-11, atol=1e-11, saveat=61)
        s = tr.summary()
        assert tr.status == "success"
        assert s["energy"]["max_rel_change"] < bound, (stab, s)
        e = np.asarray(tr.diagnostics["mechanical_energy"])
        assert np.ptp(e) / e[0] < bound
    # something actually moves
    assert np.ptp(np.asarray(tr["x3"])) > 0.05


@pytest.mark.parametrize("slack_width", [0.0, 1e-3])
def test_work_of_dampers_balances_energy(slack_width):
    """Also with the smoothed slack switch: its V_s and damping weight are consistent."""
    system, p, _ = tbar(damping=5.0, slack_width=slack_width)
    tr = simulate(system, params=p, t1=3.0, solver="dopri5", rtol=1e-10, atol=1e-10, saveat=31)
    e = np.asarray(tr.diagnostics["mechanical_energy"])
    w = np.asarray(tr.diagnostics["work"])
    assert e[-1] < e[0] - 0.1 and w[-1] < -0.1  # energy dissipated ...
    assert np.max(np.abs(e - w - e[0])) < 1e-8 * e[0]  # ... and accounted for by W_f (eq. 35)


# ------------------------------------------------------------------ minimal coordinates (Fig. 2)
def test_rigid_tbar_matches_hand_derived_minimal_model():
    err, swing = tbar_minimal_error(2.0, 1e-12, samples=21)
    assert swing > 0.05
    assert err < 1e-8, err


# ------------------------------------------------------------------ linearization (sections 2.5, 3.3)
@pytest.mark.parametrize("name", ["tbar", "tbar-compressible"])
def test_linearization_matches_finite_differences(name):
    system, p, _ = scenarios.get(name).make({"damping": 1.0})
    q_eq = tl.equilibrium(system, p)[0]
    lin = tl.linearize(system, p, q_eq)
    n3 = q_eq.shape[0]
    pu = tl._unforced(p)
    acc = jax.jit(lambda q, qd, ds: system.accelerations(0.0, q, qd, pu, ds)[0])
    z, zs = jnp.zeros(n3), jnp.zeros(len(system.strings))
    rng = np.random.default_rng(0)
    Z = np.asarray(p["Z_lin"])
    for _ in range(3):
        dq = jnp.asarray(Z @ rng.normal(size=Z.shape[1]))
        dqd = jnp.asarray(Z @ rng.normal(size=Z.shape[1]))
        ds = jnp.asarray(rng.normal(size=len(system.strings)))
        h = 1e-6 if not system.compressible else 1e-8
        fd_q = (acc(q_eq + h * dq, z, zs) - acc(q_eq - h * dq, z, zs)) / (2 * h)
        fd_qd = (acc(q_eq, h * dqd, zs) - acc(q_eq, -h * dqd, zs)) / (2 * h)
        fd_s = (acc(q_eq, z, h * ds) - acc(q_eq, z, -h * ds)) / (2 * h)
        lo = lin["A"][n3:]
        for got, want in ((lo[:, :n3] @ np.asarray(dq), fd_q), (lo[:, n3:] @ np.asarray(dqd), fd_qd),
                          (lin["B_sigma"][n3:] @ np.asarray(ds), fd_s)):
            want = np.asarray(want)
            assert np.max(np.abs(got - want)) < 1e-5 * (1.0 + np.max(np.abs(want))), (got, want)


def test_minimal_realization_and_norms():
    system, p, _ = scenarios.get("tbar-compressible").make()
    rep = tl.linearize_report(system, p)
    assert rep["A_shape"] == [24, 24]
    assert rep["minimal_order"] == 8  # 4 free coordinates: positions and velocities
    ev = np.array(rep["eigenvalues"])
    assert np.all(ev[:, 0] < 0)  # damped strings: asymptotically stable
    assert 0 < rep["h2_norm"] < np.inf and 0 < rep["hinf_norm"] < np.inf
    # H-inf is the peak gain: no sampled frequency exceeds it
    lin = tl.linearize(system, p)
    A, B, _ = tl.minimal_realization(system, p, lin)
    peak = max(tl._sigma_max(A, B, np.eye(A.shape[0]), w) for w in np.logspace(-2, 4, 400))
    assert peak <= rep["hinf_norm"] * (1 + 1e-6)
    # node forces -> deflections: the static gain C (-A)^-1 B is the compliance K_sys^-1 (Fig. 19)
    q_eq = tl.equilibrium(system, p)[0]
    B, C = tl.io_matrices(lin, p, "forces", "positions")
    A, Bm, V = tl.minimal_realization(system, p, tl.linearize(system, p, q_eq), B)
    Z = np.asarray(p["Z_lin"])
    dc = Z.T @ (C @ V) @ np.linalg.solve(-A, Bm)
    np.testing.assert_allclose(dc, np.linalg.inv(tl.stiffness(system, p, q_eq)), rtol=1e-6, atol=1e-12)
    # rigid, undamped T-bar: 2 degrees of freedom, purely imaginary poles, infinite norms
    rig = tl.linearize_report(*scenarios.get("tbar").make()[:2])
    assert rig["minimal_order"] == 4 and rig["h2_norm"] is None and rig["hinf_norm"] is None


# ------------------------------------------------------------------ prestress, scenarios
def test_prestressed_scenarios_start_in_equilibrium():
    for name in ("tensegrity-ball", "tbar-compressible"):
        system, p, _ = scenarios.get(name).make()
        x0 = system.init_state(p)
        n3 = 3 * system.n_nodes
        qdd = np.asarray(system.vector_field(0.0, x0, p)[n3:2 * n3])
        assert np.max(np.abs(qdd)) < 1e-8, name
        assert np.all(np.asarray(system.string_force_density(p["q0"], p)) > 0), name


def test_material_names_and_values():
    sc = scenarios.get("tbar-compressible")
    _, p0, v0 = sc.make({"material": "hdpe"})
    _, p1, v1 = sc.make({"material": "aluminium"})
    assert v0["material"] == 0.0 and v1["material"] == 1.0
    np.testing.assert_allclose(2 * float(p0["bar_mass"][0]), 75.398, rtol=1e-4)   # Table 2
    np.testing.assert_allclose(2 * float(p1["bar_mass"][0]), 212.06, rtol=1e-4)
    with pytest.raises(ValueError, match="material"):
        sc.make({"material": "steel"})
    with pytest.raises(ValueError, match="material"):
        sc.make({"material": "2"})
    with pytest.raises(ValueError, match="energy_correction"):
        scenarios.get("tbar").make({"energy_correction": "0.5"})


# ------------------------------------------------------------------ builder validation
BASE = dict(bar_radius=0.05, bar_density=500.0, string_stiffness=100.0)


@pytest.mark.parametrize("kw, match", [
    (dict(nodes=tbar_nodes().tolist() + [[9.0, 0.0, 9.0]]), "node 4 is dangling"),
    (dict(strings=TBAR_STRINGS + ((0, 2),)), "string 4 .* duplicates bar 0"),
    (dict(bars=((0, 2), (1, 1))), "bar 1 joins node 1 to itself"),
    (dict(bars=((0, 2), (1, 7))), "bar 1: node 7 out of range"),
    (dict(nodes=[[0, 0, 0], [0, 0, 0], [3, 0, 3], [0, 0, 3]]), "string 0 .* zero length"),
    (dict(bars=((0, 1), (1, 3)), strings=((1, 2), (2, 3), (3, 0), (0, 2))), "bar 0 .* joins two fixed nodes"),
    (dict(rest_fraction=0.9, rest_length=3.0), "not both"),
    (dict(rest_fraction=[1, 0.9, -1, 0.9]), "string 2: rest fraction must be"),
    (dict(bar_radius=[0.05, 0.0]), "bar 1: radius must be"),
    (dict(fixed={0: "xyz", 1: "xyw"}), "node 1: unknown coordinate 'w'"),
])
def test_builder_validation(kw, match):
    args = dict(nodes=tbar_nodes(), bars=TBAR_BARS, strings=TBAR_STRINGS, fixed=TBAR_FIXED, **BASE)
    args.update(kw)
    nodes, bars, strings = args.pop("nodes"), args.pop("bars"), args.pop("strings")
    with pytest.raises(ValueError, match=match):
        tg.make_structure(nodes, bars, strings, **args)


def test_massless_node_and_inconsistent_prestress():
    N = [[0, 0, 0], [1, 0, 0], [0.5, 0, -1]]
    with pytest.raises(ValueError, match="node 2 is free but massless"):
        tg.make_structure(N, [(0, 1)], [(1, 2), (2, 0)], fixed={0: "xyz", 1: "y"}, **BASE)
    # a point mass hanging from two strings, held by 1 N/m springs cannot carry 1000 kg
    s = tg.make_structure(N, [], [(0, 2), (1, 2)], fixed=[0, 1], string_stiffness=1.0,
                          point_masses={2: 1000.0}, gravity=(0, 0, -9.81), bar_radius=[])
    with pytest.raises(ValueError, match="string 0: prestress needs tension .* inconsistent prestress"):
        tg.prestress_to_equilibrium(s)
    assert tg.prestress_to_equilibrium(s.replace(string_K=np.full(2, 1e6))).string_rest.min() > 0
    # strings cannot push: a mass standing above its anchors has no feasible prestress
    s2 = tg.make_structure(N, [], [(0, 2), (1, 2)], fixed=[0, 1], string_stiffness=1e6,
                           point_masses={2: 1.0}, gravity=(0, 0, 9.81), bar_radius=[])
    with pytest.raises(ValueError, match="inconsistent prestress"):
        tg.prestress_to_equilibrium(s2)


# ------------------------------------------------------------------ CLI
def test_cli_linearize_and_bad_input(tmp_path, capsys):
    path = tmp_path / "lin.json"
    assert main(["linearize", "tbar-compressible", "--set", "material=aluminium", "--json", str(path)]) == 0
    obj = json.loads(path.read_text())
    assert set(obj) >= {"A_shape", "eigenvalues", "h2_norm", "hinf_norm", "compliance_eigenvalues"}
    assert main(["linearize", "tbar-compressible", "--inputs", "forces", "--outputs", "positions",
                 "--json", str(path)]) == 0
    forces = json.loads(path.read_text())
    assert (forces["inputs"], forces["outputs"]) == ("forces", "positions")
    # force -> deflection at zero frequency is the compliance: Hinf >= the largest compliance
    assert forces["hinf_norm"] >= forces["compliance_eigenvalues"][0] * (1 - 1e-6)
    assert main(["linearize", "pendulum"]) == 2
    assert main(["linearize", "tbar", "--set", "material=1"]) == 2
    err = capsys.readouterr().err
    assert "not a tensegrity scenario" in err and "no parameter 'material'" in err
    assert len([line for line in err.splitlines() if line]) == 2  # one line each
    assert main(["linearize", "tbar-compressible", "--inputs", "forcez"]) == 2
    assert "inputs: expected one of" in capsys.readouterr().err


# ------------------------------------------------------------------ compressible bars (section 3, Figs. 15, 19)
def test_stiffness_matches_closed_form_and_compliance_is_string_dominated():
    comp = {}
    for mat in ("hdpe", "aluminium"):
        system, p, _ = scenarios.get("tbar-compressible").make({"material": mat})
        s = tg.make_structure(tbar_nodes(), TBAR_BARS, TBAR_STRINGS, fixed=TBAR_FIXED, bar_radius=0.05,
                              bar_density=1.0, bar_E=np.asarray(p["bar_E"]), string_stiffness=np.asarray(p["string_K"]))
        s = s.replace(string_rest=np.asarray(p["string_rest"]), bar_length=np.asarray(p["bar_length"]))
        q_eq = tl.equilibrium(system, p)[0]
        Z = np.asarray(p["Z_lin"])
        np.testing.assert_allclose(tl.stiffness(system, p, q_eq), Z.T @ tg.closed_form_stiffness(s, q_eq) @ Z,
                                   rtol=1e-10, atol=1e-8)
        comp[mat] = tl.compliance_eigenvalues(system, p, q_eq)
    # Fig. 19: the string-dominated compliances hardly depend on the bar material; the two
    # bar-dominated ones scale with 1/E (68 GPa vs 1 GPa)
    np.testing.assert_allclose(comp["hdpe"][:2], comp["aluminium"][:2], rtol=1e-3)
    np.testing.assert_allclose(comp["hdpe"][2:] / comp["aluminium"][2:], 68.0, rtol=0.05)


# slow job: Fig. 15 at full length with dopri8 at 1e-12 (~9 s); the default job keeps the
# compressible T-bar's power balance, linearisation and stiffness
@pytest.mark.slow
def test_compressible_bars_tend_to_rigid_bars():
    """Fig. 15: stiff compressible bars follow the rigid T-bar, the difference ~ 1/E."""
    rigid, p, v = scenarios.get("tbar").make({}, "none")
    ts = np.linspace(0.0, 1.0, 101)
    ref = np.asarray(simulate(rigid, params=p, t1=1.0, solver="dopri8", rtol=1e-12, atol=1e-12, saveat=ts).xs)[:, :12]
    diff = []
    for E in (2e10, 2e11):
        tr = simulate(tbar_elastic(v, E=E), t1=1.0, solver="dopri8", rtol=1e-12, atol=1e-12, saveat=ts,
                      max_steps=1 << 16)
        assert tr.status == "success"
        diff.append(float(np.max(np.abs(np.asarray(tr.xs)[:, :12] - ref))))
    assert diff[1] < 3e-7  # the paper: "of the order of 1e-7" at 200 GPa
    assert 7.0 < diff[0] / diff[1] < 14.0, diff


@pytest.mark.slow
def test_implicit_and_explicit_solvers_agree_on_compressible_tbar():
    sc = scenarios.get("tbar-compressible")
    system, p, _ = sc.make({"material": "hdpe"})
    ts = np.linspace(0.0, 3.0, 301)
    a = simulate(system, params=p, t1=3.0, solver="kvaerno5", rtol=1e-8, atol=1e-8, saveat=ts, max_steps=1 << 16)
    b = simulate(system, params=p, t1=3.0, solver="dopri8", rtol=1e-8, atol=1e-8, saveat=ts, max_steps=1 << 16)
    assert a.status == b.status == "success"
    x3 = np.asarray(b["x3"])
    assert np.ptp(x3) > 1e-2  # the doublet moves node 3
    assert np.max(np.abs(np.asarray(a.xs)[:, :12] - np.asarray(b.xs)[:, :12])) < 2e-5


# ------------------------------------------------------------------ differentiable, compiled once
@pytest.mark.slow  # a derivative through a whole corrected run, checked by differences (~13 s):
# the default job checks the engine's run gradients (test_simulate.py) and the T-bar's
# linearization against differences (test_linearization_matches_finite_differences)
def test_gradient_through_corrected_run_matches_finite_differences():
    system, p, _ = tbar()
    K0 = p["string_K"]

    def x3_final(scale):
        tr = simulate(system, params={**p, "string_K": K0 * scale}, t1=1.0, solver="dopri5",
                      rtol=1e-11, atol=1e-11, saveat=2, diagnostics=False)
        return tr.xs[-1, 6]

    # one program: the reverse-mode gradient, and the values the differences read
    # (the unjitted grad and two plain runs compiled five programs more: 27 -> 16 s)
    value_and_grad = jax.jit(jax.value_and_grad(x3_final))
    g = float(value_and_grad(1.0)[1])
    h = 1e-4
    fd = (float(value_and_grad(1.0 + h)[0]) - float(value_and_grad(1.0 - h)[0])) / (2 * h)
    assert abs(fd) > 1e-3
    assert abs(g - fd) < 1e-5 * abs(fd), (g, fd)


def test_new_numbers_do_not_recompile():
    traces = []

    class Counted(tg.TensegritySystem):
        def state_derivative(self, t, x, params):
            traces.append(1)
            return super().state_derivative(t, x, params)

    sc = scenarios.get("tbar-compressible")
    builds = [sc.make({"material": m, "K": K})[:2] for m, K in (("hdpe", 100.0), ("aluminium", 80.0))]
    runs = []
    for system, p in builds:
        counted = Counted.__new__(Counted)  # the same fields in a class of its own (fresh cache)
        for f in dataclasses.fields(system):
            object.__setattr__(counted, f.name, getattr(system, f.name))
        runs.append(simulate(counted, params=p, t1=0.05, solver="dopri5", rtol=1e-6, atol=1e-6, saveat=3))
        if len(runs) == 1:
            n = len(traces)
    assert n > 0 and len(traces) == n
    assert not np.allclose(np.asarray(runs[0].xs[-1]), np.asarray(runs[1].xs[-1]))


@pytest.mark.slow
def test_smoothed_slack_switch_gives_exact_gradients():
    """Strings go slack under the doublet; with the switch smoothed over 1 mm the run moves
    by < 1e-5 m and its gradient matches finite differences of itself to 1e-6 and those
    of the hard switch to 1 % (autodiff through the hard switch misses the moving
    switching times: 7 % off here)."""
    def x3_end(slack_width):
        system, p, _ = scenarios.get("tbar-compressible").make({"slack_width": slack_width})

        def f(a):
            pa = {**p, "forcing": {**p["forcing"], "amplitude": a}}
            return simulate(system, params=pa, t1=4.0, solver="dopri5", rtol=1e-11, atol=1e-11, saveat=2,
                            max_steps=1 << 17).xs[-1, 6]
        return f

    hard, smooth = x3_end(0.0), x3_end(1e-3)
    assert abs(float(hard(10.0)) - float(smooth(10.0))) < 1e-5
    g = float(jax.grad(smooth)(10.0))
    h = 1e-3
    fd_smooth = (float(smooth(10.0 + h)) - float(smooth(10.0 - h))) / (2 * h)
    fd_hard = (float(hard(10.0 + h)) - float(hard(10.0 - h))) / (2 * h)
    assert abs(g - fd_smooth) < 1e-6 * abs(fd_smooth), (g, fd_smooth)
    assert abs(g - fd_hard) < 1e-2 * abs(fd_hard), (g, fd_hard)
    with pytest.raises(ValueError, match="slack_width"):
        scenarios.get("tbar").make({"slack_width": -1.0})


def test_tune_violation_loss_reads_per_row_violations():
    """Tensegrity reports one violation per constraint row (trees report the worst row):
    tune's loss integrates the sum of their squares, and `diffmb tune` runs on it."""
    from diffmb import scenarios, simulate
    from diffmb.design.tune import violation_loss

    system, params, _ = scenarios.get("tbar").make({})
    tr = simulate(system, params=params, t1=0.2, dt=1e-2, solver="rk4", saveat=21)
    pos, vel = np.asarray(tr.violation["position"]), np.asarray(tr.violation["velocity"])
    assert pos.ndim == 2 and pos.shape[1] > 1
    ts = np.asarray(tr.ts)
    want = np.trapezoid(np.sum(pos**2, 1), ts) + np.trapezoid(np.sum(vel**2, 1), ts)
    got = float(violation_loss(tr, params))
    assert got > 0 and got == pytest.approx(want, rel=1e-12)


def test_a_sweep_of_t_bars_reports_each_members_worst_bar_violation():
    """A tensegrity system reports its violation row by row (every bar's length, the
    linear rows): a sweep's ``max_violation`` column took it for a per-save-point scalar,
    as trees report it, and ``diffmb sweep tbar`` failed on a broadcast. Each member's
    column is the worst row at the worst save point, as its single run's summary says."""
    from diffmb.design.batch import scenario_batch, sweep

    sc = scenarios.get("tbar")
    members = [{"K": 50.0}, {"K": 150.0}]
    # uncorrected, at a coarse step: a drift of 1e-9 to 1e-8 m (round-off's 1e-14 with
    # the correction would not tell the worst row from any other)
    system, params = scenario_batch(sc, members, "none")
    res = sweep(system, params, t1=2.0, dt=2e-2, members=members, solver="rk4", saveat=21)
    assert list(res.table["status"]) == [0, 0]
    for i, m in enumerate(members):
        s1, p1, _ = sc.make(m, "none")
        tr = simulate(s1, t1=2.0, dt=2e-2, params=p1, solver="rk4", saveat=21)
        worst = tr.summary()["violation"]["position_max"]
        assert worst > 1e-9 and res.table["max_violation"][i] == pytest.approx(worst, rel=1e-9)
