"""The ``diffmb`` command line: list, run, JSON/npz/CSV/plots, bad input, interrupt + resume.

Runs go in-process through ``cli.main`` on short horizons (pendulum 0.4 s in 4 segments,
double pendulum 0.5 s) so every compiled shape is reused; ``python -m diffmb`` and the
console script run in processes of their own in ``test_compile_cache.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import cli, scenarios
from diffmb.simulation.trajectory import Trajectory
from diffmb.system import System
from diffmb.viewer.plots import plot_trajectory
from helpers import interrupt_after

JSON_KEYS = {"scenario", "t1", "dt", "solver", "steps", "wall_s", "build_s", "compile_s", "compile_cached", "energy",
             "angular_momentum", "violation", "final", "contact", "status", "warnings",
             "mobility", "notes"}  # contact: issue 58; mobility, notes: issue 56
PENDULUM = ["run", "pendulum", "--t1", "0.4", "--segments", "4", "--quiet"]


def _json(path) -> dict:
    return json.loads(Path(path).read_text())


def test_list_shows_scenarios(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["NAME", "DESCRIPTION", "PAPER"]
    names = {line.split()[0] for line in out[1:]}
    assert {"pendulum", "double-pendulum"} <= names
    # aligned: the description column starts at the same offset on every line
    assert len({re.match(r"\S+\s+", line).end() for line in out}) == 1


def test_run_double_pendulum_writes_everything(tmp_path):
    out, js = tmp_path / "out", tmp_path / "out.json"
    assert cli.main(["run", "double-pendulum", "--t1", "0.5", "--json", str(js), "--out", str(out), "--quiet"]) == 0
    rep = _json(js)
    assert set(rep) == JSON_KEYS
    assert rep["violation"] is None and rep["angular_momentum"] is None  # no constraints, fixed base
    assert rep["warnings"] == []
    assert rep["scenario"] == "double-pendulum" and rep["solver"] == "rk4" and rep["status"] == "success"
    assert rep["t1"] == 0.5 and rep["dt"] == 1e-3 and rep["steps"] == 500
    assert set(rep["energy"]) == {"quantity", "initial", "final", "max_abs_change", "max_rel_change"}
    assert rep["energy"]["max_rel_change"] < 1e-9  # RK4, dt = 1 ms, conservative system
    assert rep["wall_s"] >= 0 and rep["compile_s"] >= 0 and rep["build_s"] > 0
    assert list(rep["final"]) == ["theta1", "theta2", "theta1_dot", "theta2_dot"]

    # the CLI ran the right thing: compare with one direct simulate call
    system, params, _ = scenarios.get("double-pendulum").make({}, "none")
    ref = diffmb.simulate(system, t1=0.5, dt=1e-3, params=params)
    np.testing.assert_allclose(list(rep["final"].values()), np.asarray(ref.x_final), rtol=0, atol=1e-12)

    traj, meta = Trajectory.load(out / "double-pendulum.npz")
    assert meta["complete"] is True and meta["scenario"] == "double-pendulum"
    assert meta["parameters"]["l1"] == 1.0 and meta["t1"] == 0.5
    np.testing.assert_allclose(traj.ts[[0, -1]], [0.0, 0.5])
    csv = np.loadtxt(out / "double-pendulum.csv", delimiter=",", skiprows=1)
    assert csv.shape == (len(traj.ts), 5)
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["double-pendulum_coordinates.png", "double-pendulum_energy.png"]
    assert all((out / p).stat().st_size > 1000 for p in pngs)
    assert not (out / "double-pendulum.partial.npz").exists()


def test_no_plot_writes_no_png_and_set_changes_the_run(tmp_path):
    js = tmp_path / "p.json"
    argv = PENDULUM + ["--out", str(tmp_path), "--no-plot", "--json", str(js), "--set", "theta0=0.1"]
    assert cli.main(argv) == 0
    assert not list(tmp_path.glob("*.png"))
    assert (tmp_path / "pendulum.npz").exists() and (tmp_path / "pendulum.csv").exists()
    rep = _json(js)
    assert rep["steps"] == 400
    # E(0) of a uniform rod: -m g (l/2) cos(theta0)
    assert rep["energy"]["initial"] == pytest.approx(-9.81 * 0.5 * np.cos(0.1), rel=1e-12)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "no-such-scenario"],
        ["run", "pendulum", "--set", "unknown=1"],
        ["run", "pendulum", "--set", "l=abc"],
        ["run", "pendulum", "--set", "l"],
        ["run", "pendulum", "--set", "l=-1"],
        ["run", "pendulum", "--t1", "-1"],
        ["run", "pendulum", "--dt", "0"],
        ["run", "pendulum", "--solver", "nope"],
        ["run", "pendulum", "--stabilization", "baumgarte"],
        ["run", "pendulum", "--stabilization", "sideways"],
        ["run", "pendulum", "--segments", "0"],
        ["run", "pendulum", "--chunks", "0"],  # the deprecated spelling: still one line
        ["run", "pendulum", "--bogus"],
        ["run"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, capsys, tmp_path):
    assert cli.main(argv + ["--out", str(tmp_path)] if len(argv) > 1 else argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diffmb: error: "), err
    assert not list(tmp_path.iterdir())


def test_bad_input_messages_name_the_problem(capsys):
    cli.main(["run", "pendulum", "--set", "l=abc"])
    assert "'l'" in capsys.readouterr().err
    cli.main(["run", "pendulum", "--set", "nope=1"])
    err = capsys.readouterr().err
    assert "nope" in err and "theta0" in err  # names the settable parameters


def test_interrupt_keeps_partial_and_resume_matches(tmp_path, monkeypatch, capsys):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert cli.main(PENDULUM + ["--out", str(full)]) == 0
    ref, _ = Trajectory.load(full / "pendulum.npz")

    interrupt_after(monkeypatch, 1)  # after the 2nd segment
    assert cli.main(PENDULUM + ["--out", str(cut), "--json", str(cut / "r.json")]) == 130
    assert "--resume" in capsys.readouterr().err
    partial = cut / "pendulum.partial.npz"
    assert partial.exists() and not (cut / "pendulum.npz").exists() and not (cut / "r.json").exists()
    part, meta = Trajectory.load(partial)
    assert meta["complete"] is False and meta["segments_done"] == 2 and meta["segments"] == 4
    assert float(part.t_final) == pytest.approx(0.2, abs=1e-12)
    assert len(part.ts) == 201 and int(part.n_steps) == 200
    np.testing.assert_array_equal(part.xs, ref.xs[:201])

    monkeypatch.undo()
    assert cli.main(PENDULUM + ["--out", str(cut), "--resume", "--json", str(cut / "r.json")]) == 0
    assert not partial.exists()
    done, meta = Trajectory.load(cut / "pendulum.npz")
    assert meta["complete"] is True and int(done.n_steps) == 400 and _json(cut / "r.json")["steps"] == 400
    np.testing.assert_allclose(done.x_final, ref.x_final, rtol=0, atol=1e-12)
    np.testing.assert_allclose(done.xs, ref.xs, rtol=0, atol=1e-12)


def test_resume_with_other_parameters_is_refused_unless_discarded(tmp_path, monkeypatch, capsys):
    interrupt_after(monkeypatch, 0)
    assert cli.main(PENDULUM + ["--out", str(tmp_path)]) == 130
    monkeypatch.undo()
    capsys.readouterr()
    argv = PENDULUM + ["--out", str(tmp_path), "--resume", "--no-plot"]
    assert cli.main(argv + ["--set", "l=2"]) == 2  # --quiet or not: the refusal is said
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match" in err[0] and "parameters" in err[0] and "--discard" in err[0]
    assert (tmp_path / "pendulum.partial.npz").exists()  # the interrupted run's work is kept
    assert cli.main(argv + ["--set", "l=2", "--discard"]) == 0
    traj, meta = Trajectory.load(tmp_path / "pendulum.npz")
    assert meta["parameters"]["l"] == 2.0 and int(traj.n_steps) == 400


class _BlowUp(System):
    """x' = x^2, x(0) = 1: x = 1 / (1 - t) leaves every float before t = 1."""

    def default_params(self):
        return {"x0": jnp.ones(1)}

    def init_state(self, params):
        return params["x0"]

    def state_derivative(self, t, x, params):
        return x**2

    def diagnostics(self, x, params):
        return {"energy": x[0]}

    @property
    def state_names(self):
        return ("x",)


def test_divergence_stops_early_and_still_writes(tmp_path, monkeypatch, capsys):
    sc = scenarios.Scenario(name="blow-up", description="x' = x^2", paper="test",
                            build=lambda v, s: (_BlowUp(), _BlowUp().default_params()),
                            t1=2.0, dt=1e-3)
    monkeypatch.setitem(scenarios.REGISTRY, "blow-up", sc)
    js = tmp_path / "b.json"
    assert cli.main(["run", "blow-up", "--segments", "4", "--out", str(tmp_path), "--json", str(js), "--no-plot"]) == 1
    captured = capsys.readouterr()
    assert "diverged at t = " in captured.err
    assert "diverged" in captured.out  # the summary table
    rep = _json(js)
    assert rep["status"] == "diverged"
    traj, meta = Trajectory.load(tmp_path / "blow-up.npz")
    # RK4 steps over the pole at t = 1 with a large finite value and overflows just after:
    # the 3rd segment [1, 1.5] diverges and the 4th never runs
    assert meta["complete"] is True and meta["segments_done"] == 3
    tr = traj.trimmed()
    assert 1.0 < tr.ts[-1] < 1.1 and 1.0 < float(traj.t_final) < 1.1
    early = tr.ts < 0.9
    np.testing.assert_allclose(tr.xs[early, 0], 1 / (1 - tr.ts[early]), rtol=1e-9)
    assert rep["final"]["x"] == pytest.approx(float(tr.xs[-1, 0]))


def _synthetic(n=50):
    t = np.linspace(0.0, 1.0, n)
    xs = np.column_stack([np.sin(t), np.cos(t), np.cos(t), -np.sin(t)])
    return Trajectory(
        ts=t, xs=xs,
        diagnostics={"energy": 1.0 + 1e-9 * t, "angular_momentum": np.outer(1 + 1e-8 * t, [0, 0, 1.0])},
        violation={"position": 1e-12 * (1 + t), "velocity": np.column_stack([1e-10 * t, 2e-10 * t])},
        t_final=np.asarray(1.0), x_final=xs[-1], n_steps=np.asarray(n - 1), n_rejected=np.asarray(0),
        status_code=np.asarray(0), event_mask=np.zeros(1, bool),
        state_names=("a", "b", "a_dot", "b_dot"), coordinate_names=("a", "b"), solver="rk4",
    )


def test_json_report_with_momentum_and_violation():
    traj = _synthetic()
    cfg = SimpleNamespace(name="syn", t1=1.0, dt=None, solver="dopri5", stabilization="none")
    rep = cli.report(cfg, cli.RunResult(traj=traj, wall_s=0.1, compile_s=1.0))
    assert set(rep) == JSON_KEYS
    assert rep["dt"] is None
    assert rep["angular_momentum"]["max_abs_change"] == pytest.approx(1e-8)
    assert rep["violation"] == pytest.approx({"position_max": 2e-12, "velocity_max": 2e-10})
    json.dumps(rep)  # plain JSON types


def test_plot_trajectory_writes_all_figures(tmp_path):
    paths = plot_trajectory(_synthetic(), tmp_path, title="syn", prefix="syn_")
    names = [p.name for p in paths]
    assert names == ["syn_coordinates.png", "syn_energy.png", "syn_angular_momentum.png", "syn_violation.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_default_segments():
    assert cli.default_segments(10.0, 1e-3) == 10  # 1000 steps each
    assert cli.default_segments(0.5, 1e-3) == 1
    assert cli.default_segments(1000.0, 1e-3) == 20  # capped: 1/20 of the horizon
    assert cli.default_segments(10.0, None) == 20  # adaptive


def test_bad_input_and_version(capsys):
    """The console script and ``python -m diffmb`` themselves are run, and shown to share
    a compilation cache, by ``test_compile_cache.py``; what they print is ``cli.main``'s."""
    assert cli.main(["run", "pendulum", "--set", "l=abc"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["diffmb: error: parameter 'l': 'abc' is not a number"]
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"diffmb {diffmb.__version__}"
