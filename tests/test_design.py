"""Design tools: parameter binding, tuning (gradients vs finite differences), fitting
(recovery of known parameters, standard errors, data-file errors), batch sweeps (equal
to single runs; sharded equal to unsharded) and their CLI commands."""

import json
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import cli, simulate
from diffmb.design.batch import member_values, scenario_batch, sweep
from diffmb.design.binding import bind
from diffmb.design.data import read_data, write_data
from diffmb.design.fit import fit, synth
from diffmb.design.tune import FORWARD_MAX, _derivatives, _Objective, _value_and_grad, named_loss, tune
from diffmb.scenarios import get
from diffmb.simulation.integrate import RunSettings

# ---------------------------------------------------------------- binding


def test_binding_reproduces_builds_and_refuses_nonlinear_parameters():
    sc = get("fold-4panel")
    b = bind(sc, ["K", "c", "a", "b"], stabilization="baumgarte")
    p = b.params(jnp.array([0.3, 0.02, 50.0, 2.0]))
    _, ref, _ = sc.make({"K": 0.3, "c": 0.02, "a": 50.0, "b": 2.0}, "baumgarte")
    for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="nonlinearly"):
        bind(get("pendulum"), ["l"])  # the length moves the geometry
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        bind(sc, ["nope"])
    with pytest.raises(ValueError, match="no coordinate 'theta_q'"):
        bind(sc, ["K.theta_q"])


def test_per_hinge_binding_changes_one_hinge_only():
    b = bind(get("fold-4panel"), ["K.theta_m"])
    k = np.asarray(b.params(jnp.array([0.7]))["model"].stiffness)
    names = b.system.model.coordinate_names
    assert k[names.index("theta_m")] == 0.7 and k[names.index("theta_l")] == 0.1


# ---------------------------------------------------------------- tuning


def _fourbar_objective(t1=0.5, derivatives="forward"):
    b = bind(get("four-bar"), ["a", "b"], {"kick": 0.3}, "baumgarte")
    run = RunSettings(t1=t1, dt=1e-2, solver="rk4", saveat=26)
    return _Objective(binding=b, settings=run, loss=named_loss("violation", w_energy=0.1), penalty=1e3,
                      log_mask=(True, True), derivatives=derivatives)


@pytest.mark.slow  # the tuning loss's forward-mode gradient through a four-bar run, by differences
# (~8 s); the default job runs the tuner itself (test_tune_example.py, test_cli_robustness.py)
def test_tuning_loss_gradient_matches_finite_differences():
    # the forward-mode gradient tune() takes for two gains; the differences read the loss
    # from the same compiled program at the shifted values (one compile, five calls)
    obj = _fourbar_objective()
    z = jnp.log(jnp.array([3.0, 2.0]))
    val, g = _value_and_grad(obj, z)
    h = 1e-5
    fd = [(math.log(_value_and_grad(obj, z + h * e)[0]) - math.log(_value_and_grad(obj, z - h * e)[0])) / (2 * h)
          for e in jnp.eye(2)]
    np.testing.assert_allclose(np.asarray(g), np.asarray(fd), rtol=1e-5)
    assert np.all(np.asarray(g) < 0)  # stiffer stabilization removes the kick faster


@pytest.mark.slow
def test_reverse_mode_tuning_gradient_equals_forward_mode():
    # tune() takes reverse mode beyond FORWARD_MAX values: the recursive-checkpoint
    # adjoint gives the forward-mode gradient to round-off
    z = jnp.log(jnp.array([3.0, 2.0]))
    val_f, g_f = _value_and_grad(_fourbar_objective(), z)
    val_r, g_r = _value_and_grad(_fourbar_objective(derivatives="reverse"), z)
    assert float(val_r) == pytest.approx(float(val_f), rel=1e-12)
    np.testing.assert_allclose(np.asarray(g_r), np.asarray(g_f), rtol=1e-9)
    assert _derivatives(FORWARD_MAX, "auto") == "forward" and _derivatives(FORWARD_MAX + 1, "auto") == "reverse"
    with pytest.raises(ValueError, match="derivatives: unknown 'sideways'"):
        _derivatives(2, "sideways")


@pytest.mark.slow
def test_tune_reduces_violation_and_reports_history():
    res = tune("four-bar", ["a", "b"], overrides={"kick": 0.3, "a": 1.0, "b": 1.0}, t1=1.0,
               iterations=12, learning_rate=0.3, saveat=51)
    assert len(res.history) >= 5 and res.history[0]["loss"] == pytest.approx(res.initial_loss, rel=1e-9)
    assert res.best_loss < 0.2 * res.initial_loss
    assert res.best["a"] > 1.0
    js = res.to_json()
    assert set(js) >= {"initial", "final", "history"} and js["final"]["loss"] == res.best_loss


@pytest.mark.slow  # the four-bar tuning run's program (~4 s), which the default job does not compile
def test_tune_says_when_its_gradient_is_not_finite(monkeypatch):
    """Adam skips a step whose gradient is NaN (a trial run that diverges); a gradient
    that is never finite (forward mode through contact's step check was) ended the tuning
    as a plateau without a word. Now it is said, in the result and as a warning."""
    import diffmb.design.tune as tune_module

    real = tune_module._value_and_grad
    monkeypatch.setattr(tune_module, "_value_and_grad", lambda obj, z: (real(obj, z)[0], jnp.full_like(z, jnp.nan)))
    with pytest.warns(tune_module.TuneWarning, match=r"the gradient was not finite at 3 of 3 iterations whose "
                                                     r"loss was \(first at iteration 0, a=1, b=1\)"):
        res = tune("four-bar", ["a", "b"], overrides={"kick": 0.3, "a": 1.0, "b": 1.0}, t1=1.0,
                   iterations=3, learning_rate=0.3, saveat=51)
    assert [h["gradient_finite"] for h in res.history] == [False] * 3 and res.best == {"a": 1.0, "b": 1.0}
    assert res.to_json()["warnings"] == res.warnings and len(res.warnings) == 1


def test_a_gradient_that_is_not_finite_is_said_only_where_the_loss_is():
    from diffmb.design.tune import _gradient_warnings

    h = lambda i, loss, ok: {"iteration": i, "loss": loss, "params": {"a": 2.0}, "gradient_finite": ok}
    assert _gradient_warnings([h(0, 1.0, True), h(1, float("nan"), False)]) == []   # a diverged trial
    (said,) = _gradient_warnings([h(0, 1.0, True), h(1, 0.5, False), h(2, 0.5, False)])
    assert said.startswith("the gradient was not finite at 2 of 3 iterations whose loss was (first at iteration 1, a=2)")


# ---------------------------------------------------------------- fitting


@pytest.fixture(scope="module")
def pendulum_data():
    data, _ = synth("pendulum", {"g": 9.81, "damping": 0.05}, t1=2.0, dt=1e-2, noise=1e-3, seed=1,
                    samples=101)
    return data


def test_fit_recovers_parameters_from_factor_three_guess(pendulum_data):
    res = fit("pendulum", pendulum_data, ["g", "damping"], overrides={"g": 3.0, "damping": 0.15}, dt=1e-2)
    assert res.converged
    for name, true in (("g", 9.81), ("damping", 0.05)):
        assert abs(res.params[name] - true) < 0.01 * true
        # the truth lies within 4 standard errors, and the errors are not vacuous
        assert abs(res.params[name] - true) < 4 * res.stderr[name] < 0.01 * true
    assert 0.7e-3 < res.rms < 1.3e-3  # the residual is the noise


@pytest.mark.slow  # a run's forward-mode derivative by differences (~6 s); the default job
# fits from a factor-three guess (test_fit_recovers_parameters_from_factor_three_guess)
def test_fit_residual_jacobian_matches_finite_differences(pendulum_data):
    from diffmb.design.fit_residual import Residual  # noqa: F401  (the residual the fit linearises)

    b = bind(get("pendulum"), ["g", "damping"])

    def theta_at(g):
        p = b.params(jnp.array([g, 0.05]))
        return simulate(b.system, t1=1.0, dt=1e-2, params=p, saveat=11, adjoint="direct").xs[-1, 0]

    d = jax.jacfwd(theta_at)(9.81)
    h = 1e-5
    np.testing.assert_allclose(d, (theta_at(9.81 + h) - theta_at(9.81 - h)) / (2 * h), rtol=1e-6)


# slow job: a second fit of the pendulum data (~8 s); the default job keeps the single-shooting
# fit (test_fit_recovers_parameters_from_factor_three_guess)
@pytest.mark.slow
def test_multiple_shooting_fit_from_nearby_guess(pendulum_data):
    res = fit("pendulum", pendulum_data, ["g", "damping"], overrides={"g": 9.0, "damping": 0.06},
              dt=1e-2, shooting=2, iterations=60)
    assert abs(res.params["g"] - 9.81) < 0.01 * 9.81


def test_data_round_trip_and_errors(tmp_path, pendulum_data):
    system, _, _ = get("pendulum").make()
    path = write_data(tmp_path / "d.csv", pendulum_data, system)
    back = read_data(path, system)
    np.testing.assert_allclose(back.values, pendulum_data.values, rtol=0, atol=0)
    assert open(path).readline().strip() == "t [s],theta [rad]"
    npz = write_data(tmp_path / "d.npz", pendulum_data, system)
    np.testing.assert_array_equal(read_data(npz, system).t, pendulum_data.t)

    def bad(text, match):
        p = tmp_path / "bad.csv"
        p.write_text(text)
        with pytest.raises(ValueError, match=match):
            read_data(p, system)

    bad("time,theta\n0,1\n1,2\n", r"missing column 't'")
    bad("t,phi\n0,1\n1,2\n", r"column 'phi' is not a state")
    bad("t,theta\n0,1\n0.2,2\n0.1,3\n", r"row 4, column 't': time 0.1 does not increase")
    bad("t,theta\n0,1\n0.1,nan\n", r"row 3, column 'theta'.*NaN")
    bad("t,theta [m]\n0,1\n0.1,2\n", r"column 'theta': unit mismatch: 'm' given, .* angle coordinate is in rad")
    bad("t,theta [deg]\n0,1\n0.1,2\n", r"unit mismatch")
    bad("t,theta\n0,1\n0.1,abc\n", r"row 3, column 'theta': 'abc' is not a number")
    with pytest.raises(ValueError, match="not found"):
        read_data(tmp_path / "missing.csv", system)


@pytest.mark.parametrize("contact", ["0", "1"])
def test_data_length_unit_checked_against_the_model(tmp_path, contact):
    """The tree's coordinates keep their kinds with contact's own states after them."""
    system, _, _ = get("fold-4panel").make({"contact": contact})
    assert bool(system.elements[0].state_names) == (contact == "1")
    p = tmp_path / "hub.csv"
    p.write_text("t,r_free_x [mm]\n0,1\n0.1,2\n")
    with pytest.raises(ValueError, match=r"'r_free_x': unit mismatch: 'mm' given, .* length coordinate is in m"):
        read_data(p, system)
    p.write_text("t,r_free_x [m]\n0,1\n0.1,2\n")
    assert read_data(p, system).names == ("r_free_x",)


# ---------------------------------------------------------------- sweeps


@pytest.fixture(scope="module")
def four_bar_sweep():
    """Five four-bars in chunks of two (3 chunks, the last padded), run in this process;
    the sharded sweep is compared with it."""
    sc = get("four-bar")
    members = member_values({"c": (0.0, 0.4), "omega0": (1.0, 2.0)}, {"a": 5.0}, 5)
    system, params = scenario_batch(sc, members, "baumgarte")
    return sc, members, sweep(system, params, t1=1.0, dt=1e-2, members=members, chunk=2)


def test_sweep_members_equal_single_runs(four_bar_sweep):
    sc, members, res = four_bar_sweep
    assert res.batch == 5 and res.chunks == 3 and list(res.table["status"]) == [0] * 5
    for i in (0, 4):
        s1, p1, _ = sc.make(members[i], "baumgarte")
        tr = simulate(s1, t1=1.0, dt=1e-2, params=p1, saveat=1001)
        s = tr.summary()
        assert res.table["energy_drift"][i] == pytest.approx(s["energy"]["max_rel_change"], rel=1e-9)
        assert res.table["max_violation"][i] == pytest.approx(s["violation"]["position_max"], rel=1e-9, abs=1e-15)
    drift = res.table["energy_drift"]
    assert np.all(np.diff(drift) > 0)  # more damping, more energy lost


def test_sweep_nonaffine_parameter_rebuilds_each_member():
    sc = get("pendulum")
    members = member_values({"l": (0.5, 2.0)}, {}, 3)
    system, params = scenario_batch(sc, members)
    res = sweep(system, params, t1=1.0, dt=1e-2, members=members)
    for i in range(3):
        s1, p1, _ = sc.make(members[i])
        e = simulate(s1, t1=1.0, dt=1e-2, params=p1, saveat=1001).summary()["energy"]["max_rel_change"]
        assert res.table["energy_drift"][i] == pytest.approx(e, rel=1e-9)


def test_a_second_sweep_of_the_same_structure_compiles_nothing():
    """Same structure, new numbers: a second sweep (other member values, same chunk shape)
    runs the first one's program, with no tracing or compilation at all, and its members
    still equal their single runs."""
    from jax import monitoring

    sc = get("pendulum")
    run = dict(t1=1.0, dt=1e-2)  # the sweep and single runs of the test above: XLA reads them back
    first = member_values({"l": (0.5, 2.0)}, {}, 3)
    system, params = scenario_batch(sc, first)
    sweep(system, params, members=first, **run)  # compiles, unless the test above ran here first
    events = []
    listener = lambda name, secs, **kw: events.append(name)
    monitoring.register_event_duration_secs_listener(listener)
    try:
        other = member_values({"l": (0.7, 1.1)}, {}, 3)
        res = sweep(*scenario_batch(sc, other), members=other, **run)
    finally:
        monitoring.unregister_event_duration_listener(listener)
    assert res.compile_s == 0.0
    assert not [e for e in events if e.startswith("/jax/core/compile")], events
    s1, p1, _ = sc.make(other[2])
    e = simulate(s1, t1=1.0, dt=1e-2, params=p1, saveat=1001).summary()["energy"]["max_rel_change"]
    assert res.table["energy_drift"][2] == pytest.approx(e, rel=1e-9)


SHARD_SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, jax
    from diffmb.design.batch import scenario_batch, sweep
    from diffmb.scenarios import get
    assert len(jax.devices()) == 2, jax.devices()
    members = json.loads(sys.argv[1])
    system, params = scenario_batch(get("four-bar"), members, "baumgarte")
    two = sweep(system, params, t1=1.0, dt=1e-2, members=members, chunk=2, devices="all")
    print(json.dumps({"devices": two.devices, "table": {k: v.tolist() for k, v in two.table.items()}}))
""")

def test_chunks_on_threads_equal_chunks_one_after_another_and_stop_keeps_the_running_ones():
    """Two threads running chunks at once (the default on a 2-core CPU) give the numbers of
    one chunk after another, bit for bit; a stop after the first chunk (run alone: it
    compiles) stops handing out chunks, and keeps those already running."""
    sc = get("pendulum")
    members = member_values({"l": (0.5, 2.0), "damping": (0.0, 0.5)}, {}, 11, sample="random")
    system, params = scenario_batch(sc, members)
    run = dict(t1=0.3, dt=0.01, members=members, chunk=2)  # 6 chunks, the last padded
    one, two = (sweep(system, params, threads=t, **run) for t in (1, 2))
    assert one.batch == two.batch == 11 and one.table.keys() == two.table.keys()
    for k in one.table:
        assert np.array_equal(one.table[k], two.table[k], equal_nan=True), k
    calls = []
    part = sweep(system, params, threads=2, stop=lambda: calls.append(1) or len(calls) >= 2, **run)
    assert part.interrupted and part.requested == 11 and list(part.member_index()) == list(range(6))
    assert np.array_equal(part.table["t_final"], one.table["t_final"][:6])


@pytest.mark.slow  # a fresh process with four host devices (~9 s); the default job checks a
# sweep member by member and across two Dask workers (test_distributed_sweep.py)
def test_sharded_sweep_equals_unsharded(four_bar_sweep):
    """The module's sweep with each chunk sharded over 2 host devices (one member on each;
    the last chunk padded) gives this process's unsharded results."""
    _, members, one = four_bar_sweep
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", SHARD_SCRIPT, json.dumps(members)], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["devices"] == 2 and out["table"].keys() == one.table.keys()
    # equal to round-off: XLA may compile the sharded program differently (bit-identical on
    # jaxlib 0.10; on 0.11 the energy drift and violation differ by ~1e-15)
    for k, v in one.table.items():
        np.testing.assert_allclose(np.asarray(out["table"][k], float), v, rtol=1e-10, atol=1e-13, err_msg=k)


# ---------------------------------------------------------------- CLI


def test_cli_synth_and_fit(tmp_path):
    data = tmp_path / "pend.csv"
    assert cli.main(["synth", "pendulum", "--set", "damping=0.05", "--t1", "1", "--dt", "0.01",
                     "--noise", "1e-3", "--seed", "2", "--out", str(data), "--quiet"]) == 0
    js = tmp_path / "fit.json"
    assert cli.main(["fit", "pendulum", "--data", str(data), "--params", "g,damping", "--set", "g=8",
                     "--set", "damping=0.1", "--dt", "0.01", "--json", str(js), "--quiet"]) == 0
    out = json.loads(js.read_text())
    assert abs(out["params"]["g"] - 9.81) < 0.05 and set(out) >= {"params", "stderr", "rms"}


@pytest.mark.slow  # 3 Adam steps: a reverse-mode compile (~25 s); the tuning-loss gradient and
# `diffmb tune`'s floor check stay in the default job
def test_cli_tune(tmp_path):
    js = tmp_path / "tune.json"
    assert cli.main(["tune", "four-bar", "--params", "a,b", "--set", "kick=0.3", "--steps", "3",
                     "--t1", "0.5", "--json", str(js), "--quiet"]) == 0
    out = json.loads(js.read_text())
    assert set(out) >= {"initial", "final", "history"} and len(out["history"]) == 3
    assert out["final"]["loss"] <= out["initial"]["loss"]


def test_cli_sweep(tmp_path):
    js, csv_path = tmp_path / "sweep.json", tmp_path / "sweep.csv"
    assert cli.main(["sweep", "four-bar", "--batch", "3", "--set", "c=0:0.2", "--t1", "0.5",
                     "--json", str(js), "--csv", str(csv_path), "--quiet"]) == 0
    out = json.loads(js.read_text())
    assert len(out["members"]) == 3 and out["throughput_member_s_per_s"] > 0
    assert [m["c"] for m in out["members"]] == [0.0, 0.1, 0.2]
    assert csv_path.read_text().splitlines()[0].startswith("c,")


@pytest.mark.parametrize("argv, match", [
    (["fit", "pendulum", "--data", "nope.csv", "--params", "g"], "data file not found"),
    (["tune", "pendulum", "--params", "zzz"], "no parameter 'zzz'"),
    (["sweep", "four-bar", "--batch", "2", "--set", "c=a:b"], "expected NAME=lo:hi"),
    (["sweep", "four-bar", "--batch", "0"], "--batch must be at least 1"),
    (["synth", "pendulum", "--out", "x.csv", "--columns", "nope"], "unknown column"),
])
def test_cli_design_errors_exit_2(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]


def test_cli_fit_bad_data_file_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_text("t,theta\n0,1\n0.2,2\n0.1,3\n")
    assert cli.main(["fit", "pendulum", "--data", str(p), "--params", "g"]) == 2
    err = capsys.readouterr().err
    assert "row 4, column 't'" in err and str(p) in err


def test_default_chunk_follows_the_platform():
    from types import SimpleNamespace

    from diffmb.design.batch import ACCELERATOR_CHUNK, DEFAULT_CHUNK, default_chunk

    cpu, gpu = SimpleNamespace(platform="cpu"), SimpleNamespace(platform="gpu")
    assert default_chunk([cpu]) == DEFAULT_CHUNK
    assert default_chunk([gpu, gpu]) == 2 * ACCELERATOR_CHUNK  # each GPU gets a full chunk
