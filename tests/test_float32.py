"""float32 runs (``DIFFMB_FLOAT32=1``, fixed at import: each case runs in a fresh process).

In float32 the closure solve takes a smaller penalty and more multiplier iterations
(:mod:`diffmb.closures.constraint_solve`) and adaptive tolerances are raised to 100 eps; the
origami scenarios then run to their horizon with their default settings: closures held
to 1e-4 m, energy to 1e-3 relative where conserved, angular momentum to 1e-5 of the
bodies' momenta (fold-4panel and fold-2x4: 2e-5, :data:`FOLD_4PANEL_MOMENTUM`; the 4x4 map fold: 1e-4),
and the result agrees with float64.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from diffmb.simulation.trajectory import Trajectory

#: fold-4panel's float32 momentum bound, of its natural scale. The change is float32
#: round-off accumulated over the run, and it depends on how the CPU's code rounds:
#: 1.32e-5 on an AMD EPYC (AVX2), under 1.0e-5 on the machine CI ran on before, 1.8e-5
#: with XLA at optimisation level 0; on the EPYC the other solvers give 0.84e-5 (Tsit5)
#: to 1.9e-5 (RK4 at 10 ms), and tighter tolerances do not shrink it (rtol 10 eps:
#: 1.5e-5). The 1e-5 aimed for sits on that floor, so the test takes 2e-5.
FOLD_4PANEL_MOMENTUM = 2e-5


def _run(tmp_path, name, args, float32: bool):
    out = tmp_path / ("f32" if float32 else "f64")
    env = {**os.environ, "DIFFMB_FLOAT32": "1" if float32 else "0"}
    subprocess.run([sys.executable, "-m", "diffmb", "run", name, *args, "--out", str(out), "--json",
                    str(out / "r.json"), "--no-plot", "--quiet"], check=True, env=env, timeout=600)
    traj, _ = Trajectory.load(out / f"{name}.npz")
    return json.loads((out / "r.json").read_text()), traj.trimmed()


#: Runs whose panels pass through each other, by the detector (``docs/contact.md``): the
#: 4x4 map fold's stacked layers cross in float64 too (0.63 mm within 1 s), run here as
#: the paper's model (``contact=0``: in float32 contact does not stop them either, since
#: they cross before they separate and arm, and the energy rises where they are found);
#: fold-2x4's rows lie stacked on a crease held at flat by nothing but symmetry, and
#: float32's integration error (rtol 1.2e-5) tips it past flat (measured without contact:
#: 2.7e-4 rad, layers crossing by 0.55 mm), where float64 keeps it to 1e-12 rad; contact,
#: on by default, acts on those layers only once they have separated. The runs say so;
#: everything else is checked as for the rest.
CROSSING_IN_FLOAT32 = {"fold-2x4", "map-fold"}


def _check_float32(tmp_path, name, args=(), momentum=1e-5):
    r32, t32 = _run(tmp_path, name, args, True)
    r64, t64 = _run(tmp_path, name, args, False)
    assert t32.xs.dtype == np.float32 and t64.xs.dtype == np.float64
    if name in CROSSING_IN_FLOAT32:
        kinds = {w["kind"] for w in r32["warnings"]}
        assert r32["status"] == "suspect" and kinds and kinds <= {"crease_overfold", "panel_overlap"}, kinds
    else:
        assert r32["status"] == "success"
    assert r32["t1"] == r64["t1"]
    assert r32["mobility"] == r64["mobility"]   # the dof probe solves and ranks to float32's round-off
    assert r32["violation"]["position_max"] < 1e-4
    assert r32["energy"]["max_rel_change"] < 1e-3
    scale = float(np.max(t64.diagnostics["momentum_scale"]))
    assert r32["angular_momentum"]["max_abs_change"] < momentum * scale
    # the same motion: final hinge angles and energy as in float64. The angles differ by
    # the float32 run's own integration error (rtol 1.2e-5 over 10-30 s of motion:
    # measured 2e-3 rad on fold-4panel, 1.4e-2 on fold-2x4), not by round-off alone
    f32, f64 = r32["final"], r64["final"]
    hinges = [k for k in f64 if k.startswith("theta_") and not k.endswith("_dot")]
    assert hinges and max(abs(f32[k] - f64[k]) for k in hinges) < 0.03
    assert r32["energy"]["final"] == pytest.approx(r64["energy"]["final"], rel=1e-3)


@pytest.mark.slow  # ~17 s; the default job's float32 tests cover the casts
def test_fold_4panel_runs_in_float32_with_its_defaults(tmp_path):
    """The physics alone, in one process (the slow job compares with float64 too)."""
    r, tr = _run(tmp_path, "fold-4panel", (), True)
    assert tr.xs.dtype == np.float32 and r["status"] == "success" and r["warnings"] == []
    assert r["violation"]["position_max"] < 1e-4
    assert r["energy"]["max_rel_change"] < 1e-3
    scale = float(np.max(tr.diagnostics["momentum_scale"]))
    assert r["angular_momentum"]["max_abs_change"] < FOLD_4PANEL_MOMENTUM * scale


@pytest.mark.slow
@pytest.mark.parametrize("name, args, momentum", [
    ("fold-4panel", (), FOLD_4PANEL_MOMENTUM),
    # measured 1.0e-5 of its scale (0.39e-5 before each crease's rest depth came from its
    # lever): Dopri5's error at float32's rtol (1.2e-5), growing over the 30 s (from 4e-6
    # at 20 s), larger since the softer resting creases let the run take 236 steps, not
    # 267; the same bound as fold-4panel's
    ("fold-2x4", (), 2e-5),
    # of its (small: 0.25 N m s, a 100 kg hub barely turning) scale, measured: 3e-5 on an
    # Intel Xeon, 6.3e-5 on an AMD EPYC (jax 0.10.2; Tsit5 5.9e-5; float64 3.7e-10). It is
    # round-off gathered step by step, growing with the step count (RK4 at 1 ms: 6.3e-4),
    # so it rides on how the CPU's code rounds, as fold-4panel's does; the 1e-5 aimed for
    # is missed here, and the bound sits 1.6x above the larger of the two measured
    ("map-fold", ("--set", "rows=4", "--set", "cols=4", "--set", "contact=0"), 1e-4),
    ("fold-4panel", ("--solver", "rk4", "--stabilization", "baumgarte"), 1e-5)])
def test_origami_runs_in_float32(tmp_path, name, args, momentum):
    _check_float32(tmp_path, name, args, momentum)


@pytest.mark.slow  # a float32 process synthesising and fitting (~9 s); the default job runs
# fold-4panel in float32 and fits in float64 (test_design.py)
def test_a_float32_fit_binds_its_parameters_and_recovers_them(tmp_path):
    """Binding checks that a parameter enters the params affinely; a float32 build's own
    round-off (1e-7) must not read as a nonlinearity. Pendulum synthetic data with 1 mrad
    noise: g and damping come back within three standard errors."""
    env = {**os.environ, "DIFFMB_FLOAT32": "1"}
    data, js = tmp_path / "p.csv", tmp_path / "fit.json"
    synth = ["synth", "pendulum", "--set", "damping=0.05", "--t1", "1", "--dt", "0.01", "--noise", "1e-3",
             "--out", str(data), "--quiet", "--json", str(tmp_path / "s.json")]
    fit = ["fit", "pendulum", "--data", str(data), "--params", "g,damping", "--set", "g=8", "--set", "damping=0.1",
           "--dt", "0.01", "--json", str(js), "--quiet"]
    # both commands in one float32 process (the console script's cli.main, one Python start)
    code = ("import json, sys\nfrom diffmb import cli\n"
            "for argv in json.loads(sys.argv[1]):\n    code = cli.main(argv)\n    if code:\n        sys.exit(code)")
    subprocess.run([sys.executable, "-c", code, json.dumps([synth, fit])], check=True, env=env, timeout=300,
                   capture_output=True, text=True)
    res = json.loads(js.read_text())
    assert res["converged"]
    for name, true in (("g", 9.81), ("damping", 0.05)):
        assert abs(res["params"][name] - true) < 3 * res["stderr"][name], (name, res["params"][name])


#: One precision's sweep of 8 fold-4panel members (K 0.05-0.2 x c 0, 0.05) with the
#: scenario's defaults, through the library's batch API: the sweep's metrics and, from
#: the same batched params, every member's run (final state, energy, momentum).
_SWEEP = """
import json, sys
import equinox as eqx, numpy as np
from diffmb import scenarios
from diffmb.design.batch import scenario_batch, sweep_scenario
from diffmb.simulation.integrate import RunSettings
t1, ranges, sc = float(sys.argv[1]), {"K": (0.05, 0.2, 4), "c": (0.0, 0.05, 2)}, scenarios.get("fold-4panel")
fixed = {"contact_rest_damping": 0.0}   # contact elastic: an undamped member conserves energy
res = sweep_scenario(sc, ranges, fixed, sample="grid", t1=t1, saveat=101)
system, params = scenario_batch(sc, [{k: m[k] for k in [*ranges, *fixed]} for m in res.members])
s = RunSettings(**sc.run_settings(t1=t1), saveat=101)
tr = eqx.filter_jit(eqx.filter_vmap(lambda p: s.run(system, p)))(params)
names = list(system.state_names)
hinge = [i for i, n in enumerate(names) if n.startswith("theta_") and not n.endswith("_dot")]
xs, e, h = (np.asarray(a) for a in (tr.xs, tr.diagnostics["energy"], tr.diagnostics["angular_momentum"]))
json.dump({"dtype": str(xs.dtype), "rows": res.rows(), "statuses": res.statuses(),
           "hinge_final": xs[:, -1][:, hinge].tolist(), "energy_final": e[:, -1].tolist(),
           "dh": np.sqrt(((h - h[:, :1]) ** 2).sum(-1)).max(1).tolist(),
           "momentum_scale": np.asarray(tr.diagnostics["momentum_scale"]).max(1).tolist()},
          open(sys.argv[2], "w"))
"""


def _sweep(tmp_path, float32: bool, t1: float):
    path = tmp_path / f"sweep{32 if float32 else 64}.json"
    env = {**os.environ, "DIFFMB_FLOAT32": "1" if float32 else "0"}
    subprocess.run([sys.executable, "-c", _SWEEP, str(t1), str(path)], check=True, env=env, timeout=600)
    return json.loads(path.read_text())


@pytest.mark.slow
def test_a_float32_sweep_agrees_with_float64_member_by_member(tmp_path):
    """Issue 30 item 5: a float32 batch sweep against the float64 sweep of the same members.

    4 s: long enough that the two stiffest members (K 0.15, 0.2) drive panel j through
    flat, the singular state where float32 once diverged, short enough that the float32
    run's own integration error (Dopri5 at rtol 100 eps = 1.2e-5) keeps the final angles
    close: measured 2.4e-5 rad at most (4e-7 for the members that do not cross flat);
    over the scenario's 10 s it is 2e-3 rad, which would hide a real difference that big.
    Measured besides: violation 4.9e-7 m, energy drift 1.4e-5 where conserved, final
    energy within 1.7e-5 of float64, momentum 1.7e-5 of its scale (K 0.2; 3e-6 at K <= 0.1):
    the 1e-5 aimed for is missed by the members that cross flat, as by map-fold 4x4 above.
    About 35 + 25 s on the 2-core CPU (a compile for the sweep and one for the runs, per
    precision)."""
    r32, r64 = _sweep(tmp_path, True, 4.0), _sweep(tmp_path, False, 4.0)
    assert r32["dtype"] == "float32" and r64["dtype"] == "float64"
    assert r32["statuses"] == ["success"] * 8 and r64["statuses"] == ["success"] * 8
    h32, h64 = np.asarray(r32["hinge_final"]), np.asarray(r64["hinge_final"])
    assert np.abs(h32 - h64).max() < 1e-4
    assert np.abs(h64[:, 0] - h64[0, 0]).max() > 1.0    # the members do differ: a real sweep
    e32, e64 = np.asarray(r32["energy_final"]), np.asarray(r64["energy_final"])
    np.testing.assert_allclose(e32, e64, rtol=1e-4)
    conserved = 0
    for a, b, dh, scale in zip(r32["rows"], r64["rows"], r32["dh"], r64["momentum_scale"]):
        assert (a["K"], a["c"]) == (b["K"], b["c"])
        assert a["max_violation"] < 1e-4
        if b["c"] == 0.0:                                # undamped: energy conserved
            assert a["energy_drift"] < 1e-3
            conserved += 1
        else:
            assert np.isnan(a["energy_drift"])
        assert dh < 3e-5 * scale
    assert conserved == 4


@pytest.mark.slow  # ~13 s (a 10x10 build); smaller float32 builds stay in the default job
def test_a_10x10_map_fold_builds_in_float32():
    """Its 19-joint loops close to float32's round-off (1e-6), which the closure check at
    the build must accept: it took float64's 1e-6 as its bound and refused the fold."""
    # the violation jitted: evaluated operation by operation it compiled ~600 one-operation
    # programs (5 s of the test's 10), to the same number bit for bit
    code = ("import diffmb, equinox as eqx, numpy as np\n"
            "from diffmb.scenarios import get\n"
            "s, p, _ = get('map-fold').make({'rows': 10, 'cols': 10})\n"
            "v = eqx.filter_jit(s.violation)(np.asarray(s.init_state(p)), p)\n"
            "print(p['q0'].dtype, max(float(np.max(np.abs(x))) for x in v.values()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "DIFFMB_FLOAT32": "1"})
    dtype, violation = out.stdout.split()
    assert dtype == "float32" and float(violation) < 1e-5


def test_float32_multiplies_matrices_at_full_float32_precision():
    """A GPU's default float32 matrix product is TensorFloat-32 (10-bit mantissa), which the
    penalised closure solve cannot bear (every fold-4panel member diverged at once on an
    H200); diffmb asks for full precision unless the user chose one."""
    import diffmb._config as config

    # the configuration module alone (it imports jax, not the rest of diffmb), applied
    # once per value of DIFFMB_FLOAT32 given on the command line
    code = ("import importlib.util, os, sys, jax\n"
            "for flag in sys.argv[2:]:\n"
            "    os.environ['DIFFMB_FLOAT32'] = flag\n"
            "    spec = importlib.util.spec_from_file_location('cfg', sys.argv[1])\n"
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "    print(jax.config.jax_default_matmul_precision)")
    env = {k: v for k, v in os.environ.items() if k != "JAX_DEFAULT_MATMUL_PRECISION"}
    run = lambda flags, **e: subprocess.run([sys.executable, "-c", code, config.__file__, *flags],
                                            capture_output=True, text=True, check=True, timeout=120,
                                            env={**env, **e}).stdout.split()
    assert run(["0", "1"]) == ["None", "highest"]
    assert run(["1"], JAX_DEFAULT_MATMUL_PRECISION="tensorfloat32") == ["tensorfloat32"]


@pytest.mark.slow  # two explorations in processes of their own (~15 s); the default job
# checks the float32 solve that the lost node hit (test_udwadia_kalaba.py)
def test_the_float32_explorer_finds_the_float64_graph(tmp_path):
    """``diffmb reconfig uk-hinged-cubes`` in float32 found 1 node (2 candidates diverged
    at their first step: NaN accelerations from a singular eq. (14) factored in float32)
    where float64 finds 2 nodes and 2 edges."""
    graphs = {}
    for flag in ("1", "0"):
        out = tmp_path / flag
        subprocess.run([sys.executable, "-m", "diffmb", "reconfig", "uk-hinged-cubes", "--out", str(out),
                        "--json", str(out / "g.json"), "--quiet"], check=True,
                       env={**os.environ, "DIFFMB_FLOAT32": flag}, timeout=600)
        graphs[flag] = json.loads((out / "g.json").read_text())
    for g in graphs.values():
        assert len(g["nodes"]) == 2 and g["rejected"] == {"collision": 2}
        assert {(e["source"], e["target"]): e["potential"] for e in g["edges"]} == {(0, 1): "-y", (1, 0): "+x"}
    r32, r64 = (np.asarray(graphs[f]["nodes"][1]["poses"]["c2"]["r"]) for f in ("1", "0"))
    assert np.max(np.abs(r32 - r64)) < 1e-5   # 1.2e-6 measured: float32 at rtol 1.2e-5 on a 0.125 m offset


@pytest.mark.slow  # two processes (~12 s); the float32 build is what failed, the run checks it through
def test_a_kane_closed_chain_builds_and_runs_in_float32(tmp_path):
    """The slider-crank's start state closes its cut to 6e-8 in float32 (float32's round-off
    on a 1 m linkage): the build refused it against a fixed 1e-8, naming the cut. The check
    now allows 100 round-offs of the coordinates' dtype; float64's bound is unchanged."""
    r32, t32 = _run(tmp_path, "slider-crank", ("--t1", "2"), True)
    r64, t64 = _run(tmp_path, "slider-crank", ("--t1", "2"), False)
    assert t32.xs.dtype == np.float32 and r32["status"] == r64["status"] == "success"
    assert r32["violation"]["position_max"] < 1e-5 and r32["energy"]["max_rel_change"] < 1e-4
    # measured: 4e-6 rad and 1.5e-6 m apart after 2 s (float32 at rtol 1.2e-5)
    for k in ("theta1", "theta2", "s3"):
        assert abs(r32["final"][k] - r64["final"][k]) < 5e-5, k
