"""What a new user runs into: silent wrong results, tracebacks, lost work, wasted time,
unreadable plots. Bad input goes through ``cli.main`` in this process, as the console
script calls it (one line on stderr, exit 2, before any compiling): a Python start per case
would cost 2 s and test nothing more (``test_cli.py`` runs the console script itself, and
Ctrl-C below needs a real process).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import numpy as np
import pytest

import diffmb
from diffmb import cli, scenarios
from diffmb.design.batch import member_values, sweep_scenario
from diffmb.simulation import health, resumable
from diffmb.simulation.trajectory import ENERGY_WITH_WORK, Trajectory
from diffmb.viewer.plots import coordinates_figure, energy_figure, violation_figure

SCRIPT = shutil.which("diffmb", path=os.path.dirname(sys.executable)) or shutil.which("diffmb")


def _script(*argv, cwd=None, timeout=120):
    """The real console script in a new process: for what only a process shows (warnings
    printed as ``diffmb: warning:`` lines, signals)."""
    assert SCRIPT is not None, "console script 'diffmb' missing: install with pip install -e ."
    return subprocess.run([SCRIPT, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.fixture
def diffmb_cli(capsys, monkeypatch):
    """``diffmb ARGV...`` run by ``cli.main`` in this process: its exit code and output."""
    def call(*argv, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        args = [str(a) for a in argv]
        code = cli.main(args)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)
    return call


def _one_line_error(r, *words):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("diffmb: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


# ------------------------------------------------------------------ silent wrong results
@pytest.mark.parametrize("argv, words", [
    (["run", "double-pendulum", "--dt", "2", "--t1", "1"], ["--dt 2", "--t1 1"]),
    (["run", "fold-4panel", "--set", "K=-1"], ["'K'", "stiffness", "negative"]),
    (["run", "fold-4panel", "--set", "c=-0.5"], ["'c'", "damping", "negative"]),
    (["run", "fold-4panel", "--set", "K=inf"], ["'K'", "finite"]),
    (["run", "fold-4panel", "--set", "a=-5"], ["'a'", "gain"]),
    (["sweep", "fold-4panel", "--batch", "2", "--set", "K=0.1:-1"], ["'K'", "negative"]),
    # a count of beam elements: once rounded, then refused for too few modes, not for the count
    (["run", "flex-4body", "--set", "n_elements=1.5"], ["flex-4body", "n_elements", "whole number", "1.5"]),
    (["run", "solar-sail-slew", "--set", "n_elements=2"], ["solar-sail-slew", "n_elements", "at least 4"]),
    (["run", "flex-4body", "--set", "speeds=0.6"], ["'speeds'", "efficient (0), customary (1)", "got 0.6"]),   # was run as 1
    (["run", "solar-sail-slew", "--set", "geometric_stiffening=2"], ["'geometric_stiffening'", "True (1)", "got 2"]),
])
def test_unphysical_input_is_refused_before_compiling(argv, words, tmp_path, diffmb_cli):
    start = time.perf_counter()
    r = diffmb_cli(*argv, "--out", tmp_path / "o") if argv[0] == "run" else diffmb_cli(*argv)
    _one_line_error(r, *words)
    assert time.perf_counter() - start < 60  # refused up front: no 60 s compile first


def test_an_error_raised_inside_jax_is_a_defect_not_bad_input(capsys, monkeypatch):
    """Bad input is checked before it reaches JAX, so a ValueError or TypeError JAX raises
    is diffmb's defect: said as one (exit 1), never as the user's bad input (exit 2), and
    DIFFMB_TRACEBACK=1 shows its traceback."""
    import jax.numpy as jnp

    from diffmb.cli._common import UsageError, one_line_errors

    @one_line_errors
    def broken(args):
        return int((jnp.ones(3) + jnp.ones(4)).sum())   # shapes that do not broadcast

    @one_line_errors
    def refused(args):
        raise ValueError("--set K: must be positive")

    @one_line_errors
    def usage(args):
        raise UsageError("--t1 must be a positive number")

    monkeypatch.delenv("DIFFMB_TRACEBACK", raising=False)
    assert broken(None) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("diffmb: internal error: TypeError raised inside jax: ")
    assert "broadcast" in line and "DIFFMB_TRACEBACK=1" in line
    assert refused(None) == 2 and usage(None) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["diffmb: error: --set K: must be positive", "diffmb: error: --t1 must be a positive number"]
    monkeypatch.setenv("DIFFMB_TRACEBACK", "1")
    with pytest.raises(TypeError, match="broadcast"):
        broken(None)
    with pytest.raises(ValueError, match="must be positive"):
        refused(None)


def test_a_numerical_failure_in_diffmbs_own_algebra_is_a_defect_not_bad_input(capsys, monkeypatch):
    """numpy's LinAlgError is a ValueError, and a fit's SVD of a Jacobian holding NaN raised
    one ("SVD did not converge"): it was printed as the user's bad input (exit 2). A
    failure of diffmb's arithmetic on matrices it built is a defect (exit 1)."""
    import numpy as np

    from diffmb.cli._common import one_line_errors

    @one_line_errors
    def svd(args):
        np.linalg.svd(np.full((2, 2), np.nan))

    @one_line_errors
    def tangents(args):
        raise FloatingPointError("the simulation's derivatives with respect to K are not finite at K = 0.08")

    monkeypatch.delenv("DIFFMB_TRACEBACK", raising=False)
    assert svd(None) == 1 and tangents(None) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("diffmb: internal error: LinAlgError raised inside numpy: SVD did not converge")
    assert lines[1].startswith("diffmb: internal error: FloatingPointError raised inside diffmb: the "
                               "simulation's derivatives")


def test_a_warning_the_command_gives_again_is_printed_once(monkeypatch):
    """A fit builds its model once for each probe of its parameters: a map fold's start
    state note was printed four times. The CLI prints each warning's text once, and
    every other warning as before."""
    import warnings

    from diffmb.cli import COMMANDS

    def noisy(args):
        for _ in range(4):
            warnings.warn("the start state misses closing by 3.5e-07 m", UserWarning)
        warnings.warn("another note", UserWarning)
        return 0

    monkeypatch.setattr(COMMANDS["list"], "main", noisy)
    shown = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")     # every warning reaches showwarning, as after a catch_warnings
        warnings.showwarning = lambda message, category, *args, **kwargs: shown.append(str(message))
        assert cli.main(["list"]) == 0
        assert shown == ["the start state misses closing by 3.5e-07 m", "another note"]
        assert cli.main(["list"]) == 0      # a second command says its warnings again
        assert len(shown) == 4


def test_negative_coordinates_and_gravity_stay_allowed():
    v = scenarios.get("double-pendulum").resolve({"theta1_0": "-1", "g": "-9.81", "omega2_0": "-2"})
    assert v["theta1_0"] == -1 and v["g"] == -9.81


def test_one_step_over_the_whole_motion_is_flagged_suspect(tmp_path):
    js = tmp_path / "r.json"
    assert cli.main(["run", "double-pendulum", "--dt", "0.5", "--t1", "1", "--out", str(tmp_path),
                     "--json", str(js), "--no-plot", "--quiet"]) == 0
    rep = json.loads(js.read_text())
    assert rep["status"] == "suspect"
    (w,) = rep["warnings"]
    assert w["kind"] == "energy_jump" and w["relative"] > 0.5
    # the same system at 1 ms is healthy: RK4 holds the energy to 1e-9
    assert cli.main(["run", "double-pendulum", "--t1", "1", "--out", str(tmp_path), "--json", str(js),
                     "--no-plot", "--quiet"]) == 0
    rep = json.loads(js.read_text())
    assert rep["status"] == "success" and rep["warnings"] == []


def test_only_what_the_physics_conserves_is_checked():
    fold = scenarios.get("fold-4panel")
    assert fold.conserved(fold.resolve({"contact": "0"})) == ("energy", "angular_momentum")  # the paper's
    assert fold.conserved(fold.resolve({"contact": "0", "c": "0.01"})) == ("energy_falls", "angular_momentum")
    # contact, on by default, damps a crease resting past flat; elastic, it conserves
    assert fold.conserved(fold.resolve({})) == ("energy_falls", "angular_momentum")
    assert fold.conserved(fold.resolve({"contact_rest_damping": "0"})) == ("energy", "angular_momentum")
    assert scenarios.get("dual-arm-grasp").conserved({}) == ()  # controlled
    assert scenarios.get("solar-sail-slew").conserved({}) == ()  # torqued
    t = np.linspace(0, 1, 101)
    e = np.where(t < 0.5, 1.0, 0.5)  # a damped latch capturing: energy drops at once
    tr = Trajectory(ts=t, xs=np.zeros((101, 2)), diagnostics={"energy": e}, violation={},
                    t_final=np.asarray(1.0), x_final=np.zeros(2), n_steps=np.asarray(100),
                    n_rejected=np.asarray(0), status_code=np.asarray(0), event_mask=np.zeros(1, bool),
                    state_names=("x", "x_dot"), coordinate_names=("x",), solver="rk4")
    assert health.check(tr, ()) == [] and health.check(tr, ("energy",))[0]["kind"] == "energy_jump"
    # a damped fold's energy may fall at once, not rise: the same jump upwards is flagged
    assert health.check(tr, ("energy_falls",)) == []
    gain = eqx.tree_at(lambda x: x.diagnostics, tr, {"energy": e[::-1].copy()})
    (w,) = health.check(gain, ("energy_falls",))
    assert w["kind"] == "energy_rise" and w["relative"] == pytest.approx(1.0) and "rose" in w["message"]  # 0.5 -> 1


def test_jump_rule_on_series():
    t = np.linspace(0, 1, 1001)
    smooth = 1.0 - 0.3 * t**2  # a damped system's steady loss
    assert health.jumps(t, smooth) == []
    kicked = smooth.copy()
    kicked[600:] -= 0.05  # a 5 % impulse in one interval
    (j,) = health.jumps(t, kicked)
    assert j["t0"] == pytest.approx(t[599]) and j["relative"] == pytest.approx(0.05, rel=1e-2)
    assert health.jumps(t, 1e-12 * np.sin(50 * t)) == []  # round-off level: below the floor
    # rises alone: a steady loss and a drop are not, a 5 % gain in one interval is
    assert health.jumps(t, smooth, rises=True) == [] and health.jumps(t, kicked, rises=True) == []
    gained = smooth.copy()
    gained[600:] += 0.05
    (j,) = health.jumps(t, gained, rises=True)
    assert j["t0"] == pytest.approx(t[599]) and j["relative"] == pytest.approx(0.05, rel=1e-2)


@pytest.mark.slow  # a 10 s RK4 run (~8 s)
def test_a_fixed_step_run_with_contact_that_diverges_says_why(tmp_path):
    """The paper's fold-4panel member under its RK4 at 1 ms with contact on (the default):
    where crease j reaches flat the barrier stops it faster than a step spans, and the run
    diverges; the trajectory up to then is kept and a warning says what helps (with
    contact off the same run ends ``suspect``: test_health)."""
    out = tmp_path / "o"
    assert cli.main(["run", "fold-4panel", "--solver", "rk4", "--stabilization", "baumgarte",
                     "--set", "K=0.19749114882187768", "--set", "c=0.049163716273959226", "--out", str(out),
                     "--json", str(out / "r.json"), "--no-plot", "--quiet"]) == 1   # diverged: exit 1
    r = json.loads((out / "r.json").read_text())
    assert r["status"] == "diverged"
    (w,) = [w for w in r["warnings"] if w["kind"] == "contact_fixed_step"]
    assert 9.98 < w["t"] < 10.0 and "--solver dopri5" in w["message"] and "--set contact=0" in w["message"]
    traj, _ = Trajectory.load(out / "fold-4panel.npz")
    assert np.isfinite(np.asarray(traj.trimmed().xs)).all() and float(traj.trimmed().ts[-1]) > 9.9


@pytest.mark.slow
def test_fold_2x4_paper_settings_jump_at_the_flat_crossing_is_flagged():
    """Fulton & Schaub's 2x4 fold (no damping, a = 40) drives panel 7 through flat near
    t = 20.06 s; the energy of this undamped, unforced system jumps there (the paper's
    model: contact off)."""
    sc = scenarios.get("fold-2x4")
    system, params, values = sc.make({"contact": "0"}, "baumgarte")
    assert sc.conserved(values) == ("energy", "angular_momentum")
    tr = diffmb.simulate(system, t1=21.0, dt=1e-3, params=params, saveat=21001)
    warnings = health.check(tr, sc.conserved(values))
    assert [w["kind"] for w in warnings] == ["energy_jump", "momentum_jump"]
    assert all(20.0 < w["t"] < 20.1 for w in warnings)
    short = diffmb.simulate(system, t1=19.0, dt=1e-3, params=params, saveat=19001)
    assert health.check(short, sc.conserved(values)) == []  # before the crossing the run is clean


def test_json_is_strict_and_keys_are_always_there(tmp_path):
    nan_traj = Trajectory(
        ts=np.array([0.0, 0.5, np.nan]), xs=np.array([[0.0, 1.0], [1e300, 1e300], [np.nan, np.nan]]),
        diagnostics={"energy": np.array([0.0, np.inf, np.nan])}, violation={},
        t_final=np.asarray(0.5), x_final=np.array([np.nan, np.inf]), n_steps=np.asarray(1),
        n_rejected=np.asarray(0), status_code=np.asarray(0), event_mask=np.zeros(1, bool),
        state_names=("x", "x_dot"), coordinate_names=("x",), solver="rk4")
    cfg = cli.RunConfig(name="t", system=None, params=None, values={}, t1=1.0, dt=0.5, solver="rk4",
                        rtol=1e-8, atol=1e-10, stabilization="none", out=tmp_path, json_path=None,
                        plot=False, quiet=True, segments=1, segments_given=True, resume=False)
    rep = cli.report(cfg, cli.RunResult(traj=nan_traj))
    text = json.dumps(rep, allow_nan=False)  # raises on NaN / Infinity literals
    back = json.loads(text)
    assert back["final"] == {"x": 1e300, "x_dot": 1e300}  # the last finite state
    assert back["angular_momentum"] is None and back["violation"] is None
    assert back["energy"]["max_abs_change"] is None and back["energy"]["final"] is None  # inf
    assert back["energy"]["max_rel_change"] is None  # E(0) = 0: no relative change exists
    cli._common.write_json(tmp_path / "r.json", {"loss": float("nan")})
    assert json.loads((tmp_path / "r.json").read_text()) == {"loss": None}


def test_tensegrity_energy_is_labelled_as_energy_minus_work():
    tr = Trajectory(
        ts=np.linspace(0, 1, 5), xs=np.zeros((5, 2)),
        diagnostics={"energy": np.ones(5), "work": np.linspace(0, 1, 5)}, violation={},
        t_final=np.asarray(1.0), x_final=np.zeros(2), n_steps=np.asarray(4), n_rejected=np.asarray(0),
        status_code=np.asarray(0), event_mask=np.zeros(1, bool), state_names=("x", "x_dot"),
        coordinate_names=("x",), solver="rk4")
    assert tr.summary()["energy"]["quantity"] == ENERGY_WITH_WORK
    system, params, _ = scenarios.get("tbar").make({})
    assert "work" in system.diagnostics(system.init_state(params), params)


def test_fit_refuses_a_record_missing_a_hinge_column(tmp_path, diffmb_cli):
    data = tmp_path / "deploy.csv"
    data.write_text("t,theta_j,theta_m\n0,0.1,0.2\n0.1,0.1,0.2\n0.2,0.1,0.2\n")  # theta_l missing
    r = diffmb_cli("fit", "fold-4panel", "--data", str(data), "--params", "K")
    _one_line_error(r, str(data), "theta_l", "--columns")


# ------------------------------------------------------------------ tracebacks
@pytest.mark.parametrize("cmd", ["run", "linearize", "reconfig"])
def test_unwritable_outputs_are_refused_before_any_work(cmd, tmp_path, diffmb_cli):
    scenario = {"run": "pendulum", "linearize": "tbar", "reconfig": "uk-hinged-cubes"}[cmd]
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [["--json", str(tmp_path)],  # a folder
             ["--json", str(a_file / "r.json")]]  # a folder that cannot be created
    if cmd != "linearize":
        cases += [["--out", str(a_file)], ["--out", str(a_file / "sub")]]
    for extra in cases:
        r = diffmb_cli(cmd, scenario, *extra)
        _one_line_error(r, extra[0])
        assert "Traceback" not in r.stderr


def _wait_for(path: Path, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def test_ctrl_c_while_starting_and_while_running(tmp_path):
    # while Python imports JAX: one line, exit 130, no traceback
    p = subprocess.Popen([SCRIPT, "run", "pendulum", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    # during the run: the segment in flight ends, its partial file is kept, resume works
    p = subprocess.Popen([SCRIPT, "run", "pendulum", "--t1", "400", "--segments", "400", "--quiet",
                          "--no-plot", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert _wait_for(tmp_path / "pendulum.partial.npz", 120)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "--resume" in err
    part, meta = Trajectory.load(tmp_path / "pendulum.partial.npz")
    assert 1 <= meta["segments_done"] < 400 and float(part.t_final) == pytest.approx(meta["segments_done"])


# ------------------------------------------------------------------ wasted time
def test_a_single_segment_is_compiled_ahead_and_run_once(tmp_path, monkeypatch):
    runs = []
    real = resumable.compile_simulation

    def counting(system, **kw):
        run, seconds = real(system, **kw)
        return (lambda **c: runs.append(1) or run(**c)), seconds

    monkeypatch.setattr(resumable, "compile_simulation", counting)
    js = tmp_path / "r.json"
    assert cli.main(["run", "pendulum", "--t1", "0.3", "--out", str(tmp_path), "--json", str(js),
                     "--no-plot", "--quiet"]) == 0
    rep = json.loads(js.read_text())
    assert len(runs) == 1 and rep["compile_s"] > 0 and rep["steps"] == 300


def test_integrator_floor_is_the_step_halving_error():
    """RK4's global error goes as dt^4, so the floor (a squared error) as dt^8: halving
    the step lowers it about 256x."""
    from diffmb.design.binding import resolve
    from diffmb.design.tune import integrator_floor
    from diffmb.simulation.integrate import RunSettings

    b, _ = resolve("pendulum", ["m"], {"theta0": "2.5"})
    floors = [integrator_floor(b, RunSettings(t1=2.0, dt=dt, saveat=101), b.values) for dt in (0.04, 0.02)]
    assert 256 / 2 < floors[0] / floors[1] < 256 * 2


def test_tune_stops_at_the_floor_and_says_so(capsys):
    from diffmb.design.tune import tune

    res = tune("four-bar", ["a", "b"], t1=1.0, iterations=20)
    assert res.stopped == "floor" and res.history == [] and res.best_loss <= res.floor
    assert cli.main(["tune", "four-bar", "--params", "a,b", "--t1", "1", "--iterations", "20"]) == 0  # same compiles
    out = capsys.readouterr().out
    assert "floor" in out and "nothing to tune" in out and "a smaller --dt lowers the floor" in out
    # adaptive: the floor is the run against itself at 1/100 of the tolerances, and --dt,
    # only an adaptive solver's first step, is not what lowers it
    assert cli.main(["tune", "four-bar", "--params", "a,b", "--t1", "0.5", "--solver", "dopri5"]) == 0
    out = capsys.readouterr().out
    assert "nothing to tune (tighter --rtol and --atol lower the floor)" in out and "--dt" not in out


def test_a_sweep_without_a_range_says_its_members_are_one_run(capsys):
    """``diffmb sweep tbar --batch 4`` with no ``--set NAME=lo:hi`` ran four identical
    members without a word."""
    assert cli.main(["sweep", "pendulum", "--batch", "2", "--t1", "0.1", "--dt", "0.01", "--solver", "rk4"]) == 0
    assert "no range given (--set NAME=lo:hi): the 2 members are one run repeated" in capsys.readouterr().err
    assert cli.main(["sweep", "pendulum", "--batch", "2", "--t1", "0.1", "--dt", "0.01", "--solver", "rk4",
                     "--set", "theta0=0.1:0.2"]) == 0
    assert "one run repeated" not in capsys.readouterr().err


def test_sweep_grid_and_member_values_in_rows(tmp_path, diffmb_cli):
    grid = member_values({"K": (0.1, 0.2, 3), "c": (0.0, 0.02, 2)}, {"a": 50.0}, None, sample="grid")
    np.testing.assert_allclose([(m["K"], m["c"]) for m in grid],
                               [(k, c) for k in (0.1, 0.15, 0.2) for c in (0.0, 0.02)], rtol=1e-12)
    assert all(m["a"] == 50.0 for m in grid)
    assert len(member_values({"K": (0, 1), "c": (0, 1)}, {}, 16, sample="grid")) == 16
    with pytest.raises(ValueError, match="--batch 9"):
        member_values({"K": (0, 1), "c": (0, 1)}, {}, 10, sample="grid")
    res = sweep_scenario("pendulum", {"l": (0.5, 2.0, 2), "theta0": (0.1, 0.2, 2)}, sample="grid",
                         t1=0.2, dt=1e-3, saveat=21)
    rows = res.rows()
    assert [(r["l"], r["theta0"]) for r in rows] == [(0.5, 0.1), (0.5, 0.2), (2.0, 0.1), (2.0, 0.2)]
    csv = tmp_path / "g.csv"
    r = diffmb_cli("sweep", "pendulum", "--t1", "0.2", "--set", "l=0.5:2", "--set", "m=1:3",
                "--batch", "2", "--csv", str(csv))
    assert r.returncode == 0 and "vary together" in r.stderr and "--sampling grid" in r.stderr


# ------------------------------------------------------------------ plots
def _traj(names, n=200, zeros=False):
    t = np.linspace(0, 1, n)
    q = np.column_stack([np.sin((i + 1) * t) for i in range(len(names))])
    v = 1e-12 * (1 + t)
    if zeros:
        v[::2] = 0.0
    return Trajectory(ts=t, xs=np.hstack([q, q]), diagnostics={"energy": 1 + 1e-9 * t},
                      violation={"position": v, "velocity": 1e-10 * t},
                      t_final=np.asarray(1.0), x_final=np.zeros(2 * len(names)), n_steps=np.asarray(n - 1),
                      n_rejected=np.asarray(0), status_code=np.asarray(0), event_mask=np.zeros(1, bool),
                      state_names=tuple(names) + tuple(f"{n_}_dot" for n_ in names),
                      coordinate_names=tuple(names), solver="rk4")


def _outside(fig, ax):
    fig.canvas.draw()
    leg = ax.get_legend()
    return leg.get_window_extent().x0 >= ax.get_window_extent().x1 - 1


def test_violation_plot_spans_the_data_and_marks_zeros():
    fig = violation_figure(_traj(["a"], zeros=True))
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert 1e-14 <= lo <= 1e-12 and hi <= 1e-8  # the data's decades, not down to 1e-300
    assert any("exactly 0" in t.get_text() for t in ax.get_legend().get_texts())
    assert _outside(fig, ax)


def test_coordinate_plot_groups_by_unit():
    names = ["r_free_sigma1", "r_free_sigma2", "r_free_sigma3", "r_free_x", "r_free_y", "r_free_z"] + \
            [f"theta_{i}" for i in range(12)]
    fig = coordinates_figure(_traj(names))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["angles [rad]", "positions [m]", "attitude (MRP) [-]"]
    styles = {(ln.get_color(), ln.get_linestyle()) for ln in fig.axes[0].get_lines()}
    assert len(styles) == 12  # 12 hinge curves, no two alike
    assert all(_outside(fig, ax) for ax in fig.axes)


def test_energy_plot_has_no_relative_panel_when_e0_is_zero():
    tr = _traj(["a"])
    tr = Trajectory(**{**{f: getattr(tr, f) for f in tr.__dataclass_fields__},
                       "diagnostics": {"energy": np.linspace(0, 1, 200)}})
    assert len(energy_figure(tr).axes) == 1


def test_reconfiguration_graph_figure_is_labelled_and_fits():
    import networkx as nx

    from diffmb.formulations.udwadia_kalaba.reconfig import graph_figure

    system, params, _ = scenarios.get("uk-hinged-cubes").make({})
    x = np.asarray(system.init_state(params))
    G = nx.DiGraph()
    G.add_node(0, state=x.tolist())
    G.add_node(1, state=x.tolist())
    G.add_edge(0, 1, potential="a_long_potential_name", joints={})
    fig = graph_figure(G, system, title="uk-hinged-cubes")
    fig.canvas.draw()
    box = fig.bbox
    title = fig._suptitle.get_window_extent()
    assert box.x0 <= title.x0 and title.x1 <= box.x1 and title.y1 <= box.y1  # not cut off
    ax2 = fig.axes[1]
    assert ax2.get_xlabel() == "x [m]" and ax2.get_ylabel() == "y [m]"
    # node names in a legend, not on top of each other; each body named once (both nodes share a state)
    assert sorted(t.get_text() for t in ax2.texts) == ["c1\n(fixed)", "c2"]
    assert [t.get_text() for t in ax2.get_legend().get_texts()] == ["node 0", "node 1"]


# ------------------------------------------------------------------ README truth
def test_default_output_folder_is_out(tmp_path, diffmb_cli):
    r = diffmb_cli("run", "pendulum", "--t1", "0.05", "--no-plot", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "pendulum.npz").exists()
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "default `out/`" in readme


def test_missing_fold_file_says_where_it_looked(tmp_path, diffmb_cli):
    r = diffmb_cli("run", "examples/miura_3x3.fold", cwd=tmp_path)
    _one_line_error(r, str(tmp_path / "examples" / "miura_3x3.fold"), "repository root")


def test_linearize_says_why_a_norm_is_infinite(tmp_path):
    js = tmp_path / "l.json"
    assert cli.main(["linearize", "tbar", "--json", str(js)]) == 0
    rep = json.loads(js.read_text())
    assert rep["h2_norm"] is None and "not asymptotically stable" in rep["norms_infinite_because"]
    assert cli.main(["linearize", "tbar", "--set", "damping=1", "--json", str(js)]) == 0
    rep = json.loads(js.read_text())
    assert rep["h2_norm"] > 0 and rep["norms_infinite_because"] is None


def test_an_origami_runs_summary_says_how_close_its_panels_came():
    """The summary's ``panels`` line: the detector's figures beside the tolerance that makes
    an overlap a crossing, and with contact on what kept the panels apart (a gap of
    ``null``: no armed pair)."""
    from diffmb.cli.run import panels_text

    off = {"contact": False, "max_crease_angle_deg": 180.18158, "crease_overfold_rad": 3.2e-3,
           "max_panel_overlap_m": 6.34e-3, "overlap_panels": "14/4", "overlap_tolerance_m": 2.83e-5}
    assert panels_text(off) == ("largest crease 180.18158 deg; deepest overlap 0.00634 m (14/4), a crossing "
                                "beyond 2.83e-05 m; contact off (--set contact=1 keeps panels apart)")
    on = dict(off, contact=True, max_panel_overlap_m=-1e-3, min_contact_gap=None, min_crease_margin=9.99e-4,
              certified_crease_margin_rad=5e-4, certified_gap_m=1.41e-3)
    assert panels_text(on) == ("largest crease 180.18158 deg; deepest overlap 0 m, a crossing beyond 2.83e-05 m; "
                               "contact on: least gap inf (no armed pair); least crease margin 0.000999 rad; "
                               "certified by the energy 0.0005 rad and 0.00141 m")
