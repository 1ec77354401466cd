"""Udwadia–Kalaba formulation with quaternion states (Shoer & Peck): eq. (7) and (11),
eq. (14) structured solve vs the literal pseudo-inverse, joint rows (eqs. 18-19) vs autodiff,
cross-check against the tree (ABA), conservation, projection, gradients, the
reconfiguration explorer, bad input."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import scenarios, simulate
from diffmb.cli import main
from diffmb.formulations import udwadia_kalaba as uk
from diffmb.formulations.udwadia_kalaba import potentials as pot
from diffmb.math import spatial as sp
from diffmb.scenarios import modular_spacecraft as S


def _unit(rng, n):
    v = rng.normal(size=n)
    return v / np.linalg.norm(v)


# ------------------------------------------------------------------ eqs. 7, 10, 11
def test_T_matrix_properties_eq7():
    rng = np.random.default_rng(0)
    q = jnp.asarray(_unit(rng, 4))
    T = uk.T_matrix(q)
    assert np.allclose(T @ q, 0.0, atol=1e-15)  # the singular direction of M~ is q itself
    assert np.allclose(T @ T.T, 4.0 * np.eye(3), atol=1e-14)
    w = jnp.asarray(rng.normal(size=3))
    assert np.allclose(uk.omega_body(q, uk.quat_rate(q, w)), w, atol=1e-14)


def test_kinetic_energy_identity_eq11():
    """1/2 qd^T (T^T I T) qd equals 1/2 w^T I w, with w from the DCM rate (not from T)."""
    rng = np.random.default_rng(1)
    for _ in range(5):
        q = jnp.asarray(_unit(rng, 4))
        w = rng.normal(size=3)
        I = np.diag(rng.uniform(0.5, 2.0, 3))
        # attitude a short time later, rotating at w (body axes): q(t) = q0 * exp
        h = 1e-6
        dq = np.concatenate([w / np.linalg.norm(w) * math.sin(np.linalg.norm(w) * h / 2),
                             [math.cos(np.linalg.norm(w) * h / 2)]])
        qp, qm = sp.quat_multiply(jnp.asarray(dq), q), sp.quat_multiply(jnp.asarray(np.concatenate([-dq[:3], dq[3:]])), q)
        qd = (qp - qm) / (2 * h)
        # cross-check w against the DCM: [BN]_dot = -w~ [BN]
        C = sp.quat_to_dcm(q)
        Cd = (sp.quat_to_dcm(qp) - sp.quat_to_dcm(qm)) / (2 * h)
        assert np.allclose(-Cd @ C.T, sp.skew(jnp.asarray(w)), atol=1e-8)
        Mt = uk.effective_mass(q, jnp.asarray(I))
        assert np.allclose(Mt @ q, 0.0, atol=1e-14)
        assert 0.5 * qd @ Mt @ qd == pytest.approx(0.5 * w @ I @ w, rel=1e-8)


# ------------------------------------------------------------------ a mixed system
def _mixed_system(stabilization="none", **kw):
    """Five free bodies and a fixed one: spherical, revolute, fixed and prismatic joints plus
    a user row, gravity and damping; the initial velocity is a rigid rotation of the whole
    assembly about the ground joint (so every joint's velocity constraint holds) about z
    (so b4 keeps its height)."""
    b = uk.UKBuilder()
    rng = np.random.default_rng(3)
    w_n = np.array([0.0, 0.0, 0.7])  # about z through the ground joint: keeps s0 and b4's height
    c = np.array([-0.25, 0.0, 0.0])
    for i in range(5):
        q = _unit(rng, 4)
        r = np.array([0.5 * i, 0.1 * i, -0.05 * i])
        QN = np.asarray(uk.dcm_NB(jnp.asarray(q)))
        I = np.diag(rng.uniform(0.03, 0.05, 3))
        b.add_body(f"b{i}", mass=rng.uniform(0.5, 2.0), inertia=I, r=r, q=q, v=np.cross(w_n, r - c),
                   omega=QN.T @ w_n)
    b.add_body("ground", mass=1.0, inertia=np.eye(3) * 0.01, r=(-0.5, 0, 0), fixed=True)
    b.add_joint("s0", "spherical", "ground", "b0", at=(-0.25, 0.0, 0.0))
    b.add_joint("r1", "revolute", "b0", "b1", at=(0.25, 0.05, -0.02), axis=(0.3, 0.2, 1.0), half_span=0.2)
    b.add_joint("f2", "fixed", "b1", "b2", at=(0.75, 0.15, -0.07))
    b.add_joint("p3", "prismatic", "b2", "b3", at=(1.25, 0.25, -0.12), axis=(1.0, 0.2, 0.0))
    b.add_constraint("plane4", lambda x, p: x[7 * 4 + 2: 7 * 4 + 3] - p["z"], {"z": -0.2})
    b.add_joint("s4", "spherical", "b3", "b4", at=(1.75, 0.35, -0.2))
    b.add(pot.UniformGravity("g", g=(0.0, 0.0, -9.81)))
    b.add(pot.LinearDamping("damp", c_v=0.1, c_w=0.01))
    system = b.build(stabilization=stabilization, **kw)
    return system, system.default_params()


@pytest.fixture(scope="module")
def mixed():
    """The mixed system, its params and its accelerations by the structured solve (eq. 14)."""
    system, p = _mixed_system()
    return system, p, system.vector_field(0.0, p["x0"], p)


def test_structured_solve_matches_literal_eq14(mixed):
    system, p, f = mixed
    x = p["x0"]
    lit, _ = _mixed_system(linear_solve="pinv")
    assert np.max(np.abs(f - lit.vector_field(0.0, x, p))) < 1e-9
    # every constraint's second time derivative vanishes along the computed motion (eq. 1)
    X, V = system.body_states(x)
    acc = f[7 * system.n:].reshape(system.n, 7)

    def phi(Xf):
        _, _, ph = system._joint_blocks(Xf, jnp.zeros_like(Xf), p)
        return jnp.concatenate([ph, jnp.sum(Xf[:, 3:] ** 2, -1)])

    @jax.jit
    def phidd(X, V, acc):
        first = lambda Z: jax.jvp(phi, (Z,), (V,))[1]
        return jax.jvp(first, (X,), (V,))[1] + jax.jvp(phi, (X,), (acc,))[1], first(X)

    dd, d = phidd(X, V, acc)
    assert np.max(np.abs(d)) < 1e-12  # the rigid initial motion satisfies every velocity row
    assert np.max(np.abs(dd)) < 1e-9
    assert system.n_rows == 3 + 6 + 6 + 5 + 3 + 1


def test_joint_rows_eqs_18_19_match_autodiff(mixed):
    system, p, f = mixed
    ad, _ = _mixed_system(analytic=False)
    assert np.max(np.abs(f - ad.vector_field(0.0, p["x0"], p))) < 1e-10


# ------------------------------------------------------------------ chain vs tree
@pytest.fixture(scope="module")
def chain_runs():
    system, tsys = S.chain_pair(4, stabilization="projection")
    ts = np.linspace(0.0, 2.0, 21)
    a = simulate(system, t1=2.0, solver="dopri5", rtol=1e-13, atol=1e-13, saveat=ts)
    b = simulate(tsys, t1=2.0, solver="dopri5", rtol=1e-12, atol=1e-12, saveat=ts)
    return system, tsys, a, b


def test_chain_agrees_with_tree_formulation(chain_runs):
    system, tsys, a, b = chain_runs
    assert a.status == b.status == "success"
    ru, Eu = S.chain_poses_uk(system, a.xs)
    rt, Et = S.chain_poses_tree(tsys.model, b.xs)
    assert float(jnp.max(jnp.abs(ru - rt))) < 1e-7
    assert float(jnp.max(jnp.abs(Eu - Et))) < 1e-7


def test_chain_conserves_energy_and_momentum(chain_runs):
    system, _, a, _ = chain_runs
    d = a.diagnostics
    E = np.asarray(d["energy"])
    assert np.max(np.abs(E - E[0])) < 1e-9 * abs(E[0])
    for k in ("linear_momentum", "angular_momentum"):
        h = np.asarray(d[k])
        assert np.max(np.abs(h - h[0])) < 1e-9


def test_projection_holds_quaternion_norm_and_joints(chain_runs):
    system, _, a, _ = chain_runs
    assert float(jnp.max(a.violation["position"])) < 1e-10
    assert float(jnp.max(a.violation["velocity"])) < 1e-10
    P = np.asarray(a.xs[:, : 7 * system.n]).reshape(-1, system.n, 7)
    assert np.max(np.abs(np.linalg.norm(P[..., 3:], axis=-1) - 1.0)) < 1e-10


@pytest.mark.slow  # the chain over 10 s (~10 s with its compile); the default job checks 1 s above
def test_uk_chain_scenario_holds_its_momentum_to_1e8_over_10_s():
    """Issue 57: ``diffmb run uk-chain --t1 10 --solver dopri5 --stabilization projection``
    drifted 6.3e-8 N m s in angular momentum at the builder's eps 1e-10 and rtol 1e-10; the
    scenario's own (eps 1e-8, rtol 1e-11) hold it below 1e-8, in fewer steps, with its
    poses as close to the tree formulation's as before."""
    sc = scenarios.get("uk-chain")
    system, params, _ = sc.make({}, "projection")
    st = sc.run_settings(t1=10.0, solver="dopri5")
    tr = simulate(system, params=params, t1=10.0, dt=st["dt"], solver="dopri5", rtol=st["rtol"], atol=st["atol"])
    assert tr.status == "success" and system.eps == S.CHAIN_EPS
    s = tr.summary()
    assert s["angular_momentum"]["max_abs_change"] < 1e-8
    lin = np.asarray(tr.diagnostics["linear_momentum"])
    assert np.max(np.abs(lin - lin[0])) < 1e-8
    assert int(tr.n_steps) < 3000  # 3,887 at the old settings


@pytest.mark.slow
def test_projection_fixes_a_perturbed_state():
    system, p = _mixed_system(stabilization="projection")
    x = p["x0"] + 1e-4 * jnp.asarray(np.random.default_rng(5).normal(size=p["x0"].shape))
    v0 = system.violation(x, p)
    y = system.project(x, p)
    v1 = system.violation(y, p)
    assert float(v0["position"]) > 1e-5
    assert float(v1["position"]) < 1e-12 and float(v1["velocity"]) < 1e-12


# ------------------------------------------------------------------ gradients
def _final_angle(adjoint):
    """The hinged cubes' rotation about z after 0.3 s, as a function of one flux-pinning
    well's torsional stiffness (30 RK4 steps: long enough for the well to turn c2)."""
    system, params = S.hinged_cubes(stabilization="baumgarte")

    def angle(k_t):
        inter = dict(params["interactions"])
        inter["well_my"] = {**inter["well_my"], "k_t": k_t}
        tr = simulate(system, t1=0.3, params={**params, "interactions": inter}, solver="rk4", dt=0.01,
                      saveat=2, adjoint=adjoint, diagnostics=False)
        q = tr.x_final[3:7]
        return 2.0 * jnp.arctan2(q[2], q[3])  # rotation about z

    return angle


def _check_against_fd(value_and_derivative):
    """``value_and_derivative(k) -> (angle, d angle / dk)`` jitted as one program, which
    also gives the values the central difference reads (the derivative and two plain runs
    compiled apart cost 12 s more)."""
    f = jax.jit(value_and_derivative)
    k, h = 20.0, 1e-3
    g = f(k)[1]
    fd = (f(k + h)[0] - f(k - h)[0]) / (2 * h)
    assert abs(float(g)) > 1e-4
    assert float(g) == pytest.approx(float(fd), rel=1e-5)


@pytest.mark.slow  # a derivative through a whole UK run, checked by differences (~7 s); the
# default job checks the engine's run gradients (test_simulate.py) and the joint rows' autodiff
def test_forward_mode_derivative_of_final_pose_wrt_well_stiffness_matches_fd():
    """Forward mode through the whole run (the formulation's JVP rules; fit's Jacobians)."""
    angle = _final_angle("direct")
    _check_against_fd(lambda k: jax.jvp(angle, (k,), (jnp.ones_like(k),)))


@pytest.mark.slow  # compiling the reverse pass through the checkpointed UK run: ~25 s
def test_gradient_of_final_pose_wrt_well_stiffness_matches_fd():
    """Reverse mode through the checkpointed run (what tune differentiates)."""
    _check_against_fd(jax.value_and_grad(_final_angle("checkpoint")))


# ------------------------------------------------------------------ explorer
def test_explorer_hinged_cubes_two_nodes_two_edges(tmp_path):
    from diffmb.formulations.udwadia_kalaba import reconfig

    obj = reconfig.run(scenarios.get("uk-hinged-cubes"), out=tmp_path, json_path=tmp_path / "g.json")
    assert len(obj["nodes"]) == 2 and len(obj["edges"]) == 2
    pairs = {(e["source"], e["target"]): e["potential"] for e in obj["edges"]}
    assert pairs == {(0, 1): "-y", (1, 0): "+x"}
    assert all(e["joints"] == {"hinge": "revolute"} for e in obj["edges"])
    assert obj["rejected"].get("collision", 0) >= 1  # the free-hinge runs sweep c2 through c1
    # node 1: c2 turned -90 deg about z, across the gap from c1's -y face
    r = obj["nodes"][1]["poses"]["c2"]["r"]
    assert r[0] == pytest.approx(0.0, abs=5e-3) and r[1] == pytest.approx(-0.125, abs=5e-3)
    assert (tmp_path / "uk-hinged-cubes.graphml").exists() and (tmp_path / "uk-hinged-cubes.png").exists()
    assert json.loads((tmp_path / "g.json").read_text())["graph_file"].endswith(".graphml")
    assert obj["unexplored"] == 0
    # Ctrl-C (the flag stop() reads) after node 0: the graph found so far is kept and written
    part = reconfig.run(scenarios.get("uk-hinged-cubes"), out=tmp_path / "part", stop=lambda: True)
    assert len(part["nodes"]) == 2 and part["unexplored"] == 1
    assert [(e["source"], e["target"]) for e in part["edges"]] == [(0, 1)]
    assert (tmp_path / "part" / "uk-hinged-cubes.graphml").exists()


def test_redundant_rows_solve_in_float32_as_in_float64():
    """Two hinges on one line (a welded-hinge candidate of the explorer) give eq. (14) a
    singular ``S``. Its regularisation of 1e-10 of the mean diagonal is below float32's
    resolution: the factor's pivot came out 0 and the accelerations NaN, and float32's
    explorer lost a node. It is now at least 100 float32 round-offs; float64 keeps 1e-10."""
    system, _, _ = scenarios.get("uk-hinged-cubes").make({})
    A = np.array([[-1, 0, 0, 0, -0.1, 0], [0, -1, 0, 0.1, 0, 0.25], [0, 0, -1, 0, -0.25, 0],
                  [-1, 0, 0, 0, 0.1, 0], [0, -1, 0, -0.1, 0, 0.25], [0, 0, -1, 0, -0.25, 0]])
    S = A @ np.diag([1.0, 1.0, 1.0, 600.0, 600.0, 600.0]) @ A.T
    assert np.linalg.matrix_rank(S) == 5
    r = S @ np.array([1.0, -2.0, 0.5, 0.3, 0.0, 1.0])   # consistent: in S's range
    for dtype, tol in ((jnp.float32, 1e-6), (jnp.float64, 1e-14)):
        mu = system._solve_sym(jnp.asarray(S, dtype), jnp.asarray(r, dtype))
        assert mu.dtype == dtype and np.all(np.isfinite(mu))
        assert np.max(np.abs(S @ np.asarray(mu, float) - r)) < tol * np.max(np.abs(r))


@pytest.mark.slow  # ~10 s: the hinged cubes explored twice (the batched program compiles anew)
def test_explorer_one_batch_and_one_run_after_another_find_the_same_graph():
    """A node's candidates as one padded ``vmap`` (the accelerators' form) and one after
    another (a CPU's): the same nodes, edges and rejections, the nodes' states equal to
    the integration's tolerance (the batch rounds differently, and every candidate of it
    takes the smallest steps any of them needs)."""
    from diffmb.formulations.udwadia_kalaba import reconfig

    problem = reconfig.get_problem(scenarios.get("uk-hinged-cubes"))
    one, batch = (reconfig.explore(problem, batched=b) for b in (False, True))
    assert one.graph["rejected"] == batch.graph["rejected"] and one.number_of_nodes() == 2
    assert sorted(one.edges(data="potential")) == sorted(batch.edges(data="potential"))
    for v in one.nodes:
        assert np.allclose(one.nodes[v]["state"], batch.nodes[v]["state"], atol=1e-6)


# ------------------------------------------------------------------ bad input
def test_bad_input_names_the_culprit():
    b = uk.UKBuilder()
    b.add_body("a", mass=1.0, inertia=np.eye(3))
    with pytest.raises(ValueError, match="body 'a': duplicate"):
        b.add_body("a", mass=1.0, inertia=np.eye(3))
    with pytest.raises(ValueError, match="body 'z'.*positive mass"):
        b.add_body("z", mass=0.0, inertia=np.eye(3))
    with pytest.raises(ValueError, match="body 'w' q.*unit norm"):
        b.add_body("w", mass=1.0, inertia=np.eye(3), q=(0, 0, 0, 2))
    b.add_body("c", mass=1.0, inertia=np.eye(3), r=(1, 0, 0))
    with pytest.raises(ValueError, match="joint 'j'.*unknown joint kind 'hinge'"):
        b.add_joint("j", "hinge", "a", "c", at=(0.5, 0, 0))
    with pytest.raises(ValueError, match="joint 'j'.*unknown body 'x'"):
        b.add_joint("j", "revolute", "a", "x", at=(0.5, 0, 0))
    with pytest.raises(ValueError, match="joint 'j'.*violate"):
        b.add_joint("j", "spherical", "a", "c", p_bc=(0.5, 0, 0), p_cb=(0.1, 0, 0))
    with pytest.raises(ValueError, match="joint 'j' axis"):
        b.add_joint("j", "revolute", "a", "c", at=(0.5, 0, 0), axis=(0, 0, 0))
    with pytest.raises(ValueError, match="FluxPinningWell 'w': unknown body 'q'"):
        b.add(pot.FluxPinningWell("w", bodies=("a", "q"))).build()
    b2 = uk.UKBuilder().add_body("a", mass=1.0, inertia=np.eye(3))
    b2.add_constraint("c1", lambda x, p: x[:1] - 1.0)
    with pytest.raises(ValueError, match="constraint 'c1'.*violates"):
        b2.build()
    with pytest.raises(ValueError, match="stabilization"):
        uk.UKBuilder().add_body("a", mass=1.0, inertia=np.eye(3)).build(stabilization="magic")


def test_cli_reconfig_bad_input(capsys):
    assert main(["reconfig", "pendulum"]) == 2
    assert "no reconfiguration problem" in capsys.readouterr().err
    assert main(["reconfig", "uk-hinged-cubes", "--set", "nope=1"]) == 2
    assert "no parameter 'nope'" in capsys.readouterr().err
    assert main(["reconfig", "no-such-scenario"]) == 2


# ------------------------------------------------------------------ uk-imaging (section IV.B)
def _imaging_tilt(X, k):
    """Rotation about z [deg] of moving body ``k`` (scalar-last quaternion)."""
    q = X[7 * k + 3: 7 * k + 7]
    return math.degrees(2.0 * math.atan2(float(q[2]), float(q[3])))


@pytest.mark.slow  # ~40 s: compiling the projected 3-revolute + 3-weld system dominates
def test_imaging_projection_holds_constraints_and_energy():
    """Transit block -> wide-angle L (s12 fixed, s23 revolute, s34 fixed, em-wide wells):
    joints and quaternion norms held to 1e-10 by projection at the step ends (the saved
    points between steps are dense output), total energy non-increasing (damped); without
    dissipation (same compiled run, other numbers) the energy is conserved."""
    system, params = S.imaging({"em": 2.0}, "projection", projection_iterations=1)
    assert system.moving_bodies == ("m2", "m3", "m4") and system.n_rows == 3 * (6 + 6)
    tr = simulate(system, t1=400.0, params=params, solver="dopri5", rtol=1e-9, atol=1e-11, saveat=21)
    assert tr.status == "success"
    vf = system.violation(tr.x_final, params)
    assert float(vf["position"]) < 1e-10 and float(vf["velocity"]) < 1e-10
    assert float(jnp.max(tr.violation["position"])) < 1e-7
    E = np.asarray(tr.diagnostics["energy"])
    assert np.all(np.diff(E) <= 1e-9 * np.abs(E).max()) and E[-1] < E[0]
    # m3 and m4 swing together (s34 welded) about the s23 hinge, outwards (clockwise)
    xf = np.asarray(tr.x_final)
    assert _imaging_tilt(xf, 1) == pytest.approx(_imaging_tilt(xf, 2), abs=1e-6)
    assert 0.0 < _imaging_tilt(xf, 1) < 170.0
    # no dissipation: energy conserved
    inter = {k: {**v, **{c: jnp.zeros_like(v[c]) for c in ("c_v", "c_w", "c_t", "c_r") if c in v}}
             for k, v in params["interactions"].items()}
    tr2 = simulate(system, t1=400.0, params={**params, "interactions": inter}, solver="dopri5", rtol=1e-9,
                   atol=1e-11, saveat=21)
    E2 = np.asarray(tr2.diagnostics["energy"])
    assert np.max(np.abs(E2 - E2[0])) < 1e-6 * np.abs(E2).max()


@pytest.mark.slow  # ~70 s on 2 shared cores (compile + two 4-candidate batches)
def test_imaging_explorer_small_layout_graph(tmp_path):
    """The explorer on uk-imaging with s12/s34 welded, s23 revolute or fixed, and the
    em-wide / em-fold choices: the transit block opens into the wide-angle L; the way back
    (em-fold) overshoots m4 into m1's bounding sphere and is rejected as a collision."""
    import dataclasses

    from diffmb.formulations.udwadia_kalaba import reconfig

    full = reconfig.get_problem(scenarios.get("uk-imaging"))
    sites = tuple(dataclasses.replace(s, options={"fixed": s.options["fixed"]} if s.name != "s23"
                                      else {o: s.options[o] for o in ("revolute", "fixed")})
                  for s in full.sites)
    problem = dataclasses.replace(full, sites=sites,
                                  choices={c: full.choices[c] for c in ("em-wide", "em-fold")})
    G = reconfig.explore(problem)
    assert G.number_of_nodes() == 2 and G.number_of_edges() == 1
    edges = {(u, v): (d["potential"], d["joints"]["s23"]) for u, v, d in G.edges(data=True)}
    assert edges == {(0, 1): ("em-wide", "revolute")}
    assert G.graph["rejected"].get("collision", 0) >= 1
    X1 = np.asarray(G.nodes[1]["state"])
    d = S.IMAGING["side"] + S.IMAGING["gap"]
    wide = S.imaging_configurations(d)["wide"]
    for k, name in enumerate(("m2", "m3", "m4")):
        assert np.allclose(X1[7 * k: 7 * k + 3], wide[name][0], atol=SETTLE_TOL)
    obj = reconfig.graph_json(G, problem.system, reconfig.save_graphml(G, tmp_path / "g.graphml"))
    reconfig.draw(G, problem.system, tmp_path / "g.png", title="uk-imaging")
    assert (tmp_path / "g.graphml").exists() and (tmp_path / "g.png").exists()
    assert len(obj["nodes"]) == 2 and obj["graph_file"].endswith(".graphml")


@pytest.mark.slow
def test_candidates_run_two_at_a_time_give_the_graph_of_one_at_a_time(monkeypatch):
    """On a CPU a node's candidates run on a thread each (``_THREADS``): every candidate is
    its own run of the same program, so the graph, its node states to the last bit, its
    edges and its rejections are those of the candidates one after another."""
    import dataclasses

    from diffmb.formulations.udwadia_kalaba import reconfig

    full = reconfig.get_problem(scenarios.get("uk-imaging"))
    sites = tuple(dataclasses.replace(s, options={"fixed": s.options["fixed"]} if s.name != "s23"
                                      else {o: s.options[o] for o in ("revolute", "fixed", "free")})
                  for s in full.sites)
    problem = dataclasses.replace(full, sites=sites, choices={c: full.choices[c] for c in ("em-wide", "em-fold")})
    graphs = {}
    for threads in (1, 2):
        monkeypatch.setattr(reconfig, "_THREADS", threads)
        graphs[threads] = reconfig.explore(problem)
    one, two = graphs[1], graphs[2]
    assert one.number_of_nodes() >= 2
    assert [one.nodes[v]["state"] for v in one.nodes] == [two.nodes[v]["state"] for v in two.nodes]
    assert list(one.edges(data=True)) == list(two.edges(data=True))
    assert one.graph["rejected"] == two.graph["rejected"]


#: How far a settled module may sit from its well's centre: the gravity gradient shifts the
#: equilibrium of an electromagnet well by ~5 cm; block, L and line poses are >= 0.5 m apart.
SETTLE_TOL = 0.1


@pytest.mark.slow
def test_imaging_reconfig_cli_graph_is_consistent(tmp_path):
    """``diffmb reconfig uk-imaging``: a consistent graph (every edge between existing
    nodes, no self-loops, the transit block reaches the wide-angle L), files written."""
    path = tmp_path / "r.json"
    assert main(["reconfig", "uk-imaging", "--json", str(path), "--out", str(tmp_path)]) == 0
    obj = json.loads(path.read_text())
    ids = {n["id"] for n in obj["nodes"]}
    assert ids == set(range(len(obj["nodes"]))) and 2 <= len(ids) <= S.IMAGING_MAX_NODES
    assert obj["edges"] and all(e["source"] in ids and e["target"] in ids and e["source"] != e["target"]
                                for e in obj["edges"])
    assert all(set(e["joints"]) == {"s12", "s23", "s34"} for e in obj["edges"])
    d = S.IMAGING["side"] + S.IMAGING["gap"]
    wide = S.imaging_configurations(d)["wide"]
    hit = [n for n in obj["nodes"] if all(np.allclose(n["poses"][b]["r"], wide[b][0], atol=SETTLE_TOL)
                                          for b in ("m2", "m3", "m4"))]
    assert hit and any(e["source"] == 0 and e["target"] == hit[0]["id"] for e in obj["edges"])
    assert (tmp_path / "uk-imaging.graphml").exists() and (tmp_path / "uk-imaging.png").exists()


@pytest.mark.slow
def test_imaging_cli_run(tmp_path):
    out = tmp_path / "uki.json"
    assert main(["run", "uk-imaging", "--json", str(out), "--no-plot", "--out", str(tmp_path)]) == 0
    assert out.exists()


# ------------------------------------------------------------ magnets, user forces


def _two_bodies():
    R = jnp.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.3]])
    Q = jnp.array([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    return R, Q


def test_dipole_dipole_energy_and_force_match_the_dipole_field():
    """Coaxial dipoles m along z at distance r: U = -mu0 m^2 / (2 pi r^3), attracting with
    3 mu0 m^2 / (2 pi r^4); side by side U = +mu0 m^2 / (4 pi r^3); with one dipole
    turned by 90 degrees about x (moment across the line joining them) U = 0."""
    m, r = 2.0, 0.3
    d = pot.DipoleDipole("mag", bodies=("a", "b"), moment_a=(0, 0, m), moment_b=(0, 0, m)).resolve({"a": 0, "b": 1})
    p = {k: jnp.asarray(v) for k, v in d.defaults().items()}
    R, Q = _two_bodies()
    U = float(d.energy(R, Q, p, None))
    assert U == pytest.approx(-pot.MU0 * m * m / (2 * math.pi * r**3), rel=1e-12)
    F = jax.grad(lambda R_: d.energy(R_, Q, p, None))(R)
    assert float(F[1, 2]) == pytest.approx(3 * pot.MU0 * m * m / (2 * math.pi * r**4), rel=1e-12)  # dU/dz_b > 0: attracted
    np.testing.assert_allclose(np.asarray(F[0] + F[1]), 0.0, atol=1e-18)                          # action = reaction
    side = R.at[1].set(jnp.array([r, 0.0, 0.0]))
    assert float(d.energy(side, Q, p, None)) == pytest.approx(pot.MU0 * m * m / (4 * math.pi * r**3), rel=1e-12)
    turned = Q.at[1].set(jnp.array([math.sin(math.pi / 4), 0.0, 0.0, math.cos(math.pi / 4)]))  # b's moment along -y or y
    assert abs(float(d.energy(R, turned, p, None))) < 1e-18


def test_applied_force_acts_on_its_body_with_its_weight():
    f = pot.AppliedForce("push", bodies=("b",), numbers=(("k", 3.0),),
                         fn=lambda t, R, Q, V, W, p: (p["k"] * jnp.array([1.0, 0.0, 0.0]) * t, jnp.array([0.0, 0.0, 0.5])))
    f = f.resolve({"a": 0, "b": 1})
    p = {k: jnp.asarray(v) for k, v in {**f.defaults(), "weight": 2.0}.items()}
    R, Q = _two_bodies()
    F, tau = f.force(2.0, R, Q, jnp.zeros_like(R), jnp.zeros_like(R), p, None)
    np.testing.assert_allclose(np.asarray(F), [[0, 0, 0], [12.0, 0, 0]])
    np.testing.assert_allclose(np.asarray(tau), [[0, 0, 0], [0, 0, 1.0]])
    with pytest.raises(ValueError, match="applied force 'bad': fn must be callable"):
        pot.AppliedForce("bad", bodies=("b",)).defaults()
