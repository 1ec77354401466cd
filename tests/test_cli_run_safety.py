"""``diffmb run`` keeps the user's work and time (issue 31): a partial file is never
replaced without being asked, long runs say up front how long they are and stay
interruptible, the step is never changed by the segmenting, and an output from another
model or other parameters is not replaced without a word.

Runs go in-process through ``cli.main`` on the pendulum (0.4 s in 4 segments, the shape
``test_cli.py`` compiles too); refusals happen before anything compiles. Partial files are
made by a Ctrl-C after a segment: the compiled segment, monkeypatched, raises
KeyboardInterrupt when it is called for the next one.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import diffmb
from diffmb import cli, scenarios
from diffmb.simulation import resumable
from diffmb.simulation.trajectory import Trajectory
from helpers import interrupt_after

ROOT = Path(__file__).parents[1]
REAL_COMPILE = resumable.compile_simulation
PENDULUM = ["run", "pendulum", "--t1", "0.4", "--segments", "4", "--quiet", "--no-plot"]


def _partial(tmp_path, monkeypatch, argv=PENDULUM) -> Path:
    """Interrupt ``argv`` after its first segment; return its partial file."""
    interrupt_after(monkeypatch, 0)
    assert cli.main(argv + ["--out", str(tmp_path)]) == 130
    monkeypatch.setattr(resumable, "compile_simulation", REAL_COMPILE)
    name = argv[1]
    path = tmp_path / f"{name}.partial.npz"
    assert path.exists()
    return path


@pytest.fixture(scope="module")
def reference():
    """The pendulum over 0.4 s in one simulate call: 400 steps of 1 ms."""
    system, params, _ = scenarios.get("pendulum").make({}, "none")
    return diffmb.simulate(system, t1=0.4, dt=1e-3, params=params)


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diffmb: error: "), lines
    return lines[0]


# ------------------------------------------------------------------ 1. partial files
def test_a_plain_rerun_over_a_partial_file_is_refused_naming_both_ways_on(tmp_path, monkeypatch, capsys):
    partial = _partial(tmp_path, monkeypatch)
    before = partial.read_bytes()
    capsys.readouterr()
    # other settings (a new horizon), and the same settings with --resume forgotten
    lines = []
    for argv in (["run", "pendulum", "--t1", "0.2", "--segments", "4", "--no-plot"], PENDULUM):
        assert cli.main(argv + ["--out", str(tmp_path)]) == 2
        lines.append(_one_error_line(capsys))
        for word in (str(partial), "0.1 s of 0.4 s", "--resume", "--discard"):
            assert word in lines[-1], (word, lines[-1])
        assert partial.read_bytes() == before  # untouched
        assert not (tmp_path / "pendulum.npz").exists()
    assert "t1 0.4 there, 0.2 here" in lines[0]  # what keeps --resume from continuing it
    assert "there" not in lines[1]


def test_discard_alone_starts_fresh_and_replaces_the_partial(tmp_path, monkeypatch, capsys):
    partial = _partial(tmp_path, monkeypatch)
    argv = ["run", "pendulum", "--t1", "0.2", "--segments", "2", "--quiet", "--no-plot", "--out", str(tmp_path)]
    assert cli.main(argv + ["--discard"]) == 0
    assert not partial.exists()
    traj, meta = Trajectory.load(tmp_path / "pendulum.npz")
    assert meta["complete"] is True and meta["t1"] == 0.2 and int(traj.n_steps) == 200


# ------------------------------------------------------------------ 2. long runs, segments and dt
def test_segments_beyond_the_step_count_are_refused(tmp_path, capsys):
    # pendulum: dt = 1 ms by default, so 0.01 s is 10 steps; 500 segments would need 20 us steps
    assert cli.main(["run", "pendulum", "--t1", "0.01", "--segments", "500", "--out", str(tmp_path)]) == 2
    line = _one_error_line(capsys)
    assert "500" in line and "10" in line and "--segments" in line
    assert not list(tmp_path.iterdir())


def test_segments_that_do_not_divide_the_steps_keep_dt(tmp_path, monkeypatch, reference):
    """400 steps in 3 segments: segments of 133, 133 and 134 steps of exactly 1 ms (before: 3 x 134
    steps of 0.995 ms). Interrupted after the first segment and resumed, it is the same run."""
    argv = ["run", "pendulum", "--t1", "0.4", "--segments", "3", "--quiet", "--no-plot"]
    _partial(tmp_path, monkeypatch, argv)
    assert cli.main(argv + ["--out", str(tmp_path), "--resume"]) == 0
    traj, meta = Trajectory.load(tmp_path / "pendulum.npz")
    assert meta["segments"] == 3 and meta["dt"] == 1e-3 and int(traj.n_steps) == 400
    k = traj.ts / 1e-3
    np.testing.assert_allclose(k, np.round(k), rtol=0, atol=1e-9)  # every save on a step of dt
    assert np.all(np.diff(traj.ts) > 0) and traj.ts[-1] == 0.4
    np.testing.assert_allclose(traj.x_final, reference.x_final, rtol=0, atol=1e-12)
    on_grid = np.isin(np.round(reference.ts / 1e-3), np.round(k))
    np.testing.assert_allclose(traj.xs, reference.xs[on_grid], rtol=0, atol=1e-12)


def test_default_segments_bound_the_steps_per_segment_and_the_saved_points():
    steps = 10**9  # diffmb run pendulum --dt 1e-9 --t1 1
    n = cli.default_segments(1.0, 1e-9)
    assert math.ceil(steps / n) <= resumable.MAX_STEPS_PER_SEGMENT
    cfg = cli.RunConfig(name="p", system=None, params=None, values={}, t1=1.0, dt=1e-9, solver="rk4",
                        rtol=1e-8, atol=1e-10, stabilization="none", out=Path("."), json_path=None,
                        plot=False, quiet=True, segments=n, segments_given=False, resume=False)
    s = resumable.segment_settings(cfg.plan)
    assert s["saveat"] == 2  # each segment keeps its start and end only
    assert n * (s["saveat"] - 1) + 1 <= 20001  # points saved by the whole run
    assert s["max_steps"] >= math.ceil(steps / n)
    # short runs are segmented as before (about 1000 steps a segment, at most 20 segments)
    assert [cli.default_segments(t1, 1e-3) for t1 in (0.5, 10.0, 1000.0)] == [1, 10, 20]


def test_a_billion_step_run_says_so_and_stops_after_one_short_segment(tmp_path, monkeypatch, capsys):
    interrupt_after(monkeypatch, 0)
    monkeypatch.setattr(cli.run, "ESTIMATE_AFTER_S", 0.0)  # say it even when the segment is fast
    argv = ["run", "pendulum", "--dt", "1e-9", "--t1", "1", "--no-plot", "--out", str(tmp_path)]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "1,000,000,000 steps of 1e-09 s" in err
    assert "the first segment took" in err and "to go" in err
    part, meta = Trajectory.load(tmp_path / "pendulum.partial.npz")
    assert meta["segments"] * resumable.MAX_STEPS_PER_SEGMENT >= 10**9 and meta["segments_done"] == 1
    assert int(part.n_steps) == 10**9 // meta["segments"] and len(part.ts) == 2
    assert float(part.t_final) == pytest.approx(1.0 / meta["segments"], rel=1e-12)


def test_a_short_run_prints_its_step_count_but_no_estimate(tmp_path, capsys):
    assert cli.main(["run", "pendulum", "--t1", "0.4", "--segments", "4", "--no-plot", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "400 steps of 0.001 s" in err and "to go" not in err


# ------------------------------------------------------------------ 3. same-stem outputs
def test_an_output_of_other_parameters_is_replaced_with_a_warning(tmp_path, capsys):
    out = ["--out", str(tmp_path)]
    assert cli.main(PENDULUM + out) == 0
    capsys.readouterr()
    assert cli.main(PENDULUM + out + ["--set", "l=2"]) == 0
    warn = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warn) == 1 and str(tmp_path / "pendulum.npz") in warn[0] and "l=2" in warn[0], warn
    assert "--out" in warn[0]
    assert cli.main(PENDULUM + out + ["--set", "l=2"]) == 0  # the same again: quietly
    assert "warning" not in capsys.readouterr().err


def _stop_before_running(monkeypatch, capsys, seen):
    def stub(cfg, start=None):
        seen.append((capsys.readouterr().err, cfg))  # what was said before any simulation
        return cli.RunResult(interrupted=True)
    monkeypatch.setattr(cli.run, "run_segments", stub)


def _stand_in(path, meta):
    """A small trajectory file with ``meta``: what an earlier run left in the folder."""
    system, params, _ = scenarios.get("pendulum").make({}, "none")
    diffmb.simulate(system, t1=0.01, dt=1e-3, params=params, saveat=2).save(path, meta=meta)


def test_an_output_of_another_model_file_with_the_same_stem_is_warned_about(tmp_path, monkeypatch, capsys):
    urdf = ["run", str(ROOT / "examples/fourbar.urdf"), "--closures", str(ROOT / "examples/fourbar_loops.json"),
            "--out", str(tmp_path)]
    # what the URDF run writes (its RunConfig but for the built system: closing the loop
    # compiles for seconds and is not what is tested here)
    args = cli.build_parser().parse_args(urdf)
    sc = scenarios.get(args.scenario, closures=args.closures)
    cfg = cli.RunConfig(name=sc.name, system=None, params=None, values=sc.resolve({}), t1=sc.t1, dt=sc.dt,
                        solver=sc.solver, rtol=sc.rtol, atol=sc.atol, stabilization=sc.stabilization,
                        out=tmp_path, json_path=None, plot=True, quiet=False, segments=5, segments_given=False,
                        resume=False, model=cli.run.model_source(args))
    assert "fourbar.urdf" in cfg.model and "--closures" in cfg.model and "fourbar_loops.json" in cfg.model
    _stand_in(tmp_path / "fourbar.npz", cfg.meta(complete=True, segments_done=5))
    seen = []
    _stop_before_running(monkeypatch, capsys, seen)
    xml = ["run", str(ROOT / "examples/fourbar.xml"), "--out", str(tmp_path), "--quiet"]
    assert cli.main(xml) == 130
    warn = [line for line in seen[0][0].splitlines() if line.startswith("diffmb: warning: ")]
    assert len(warn) == 1, seen
    assert str(tmp_path / "fourbar.npz") in warn[0] and "fourbar.urdf" in warn[0] and "fourbar.xml" in warn[0]
    assert "another --out" in warn[0]
    _stand_in(tmp_path / "fourbar.npz", seen[0][1].meta(complete=True, segments_done=1))  # the MJCF run's
    assert cli.main(xml + ["--t1", "0.5"]) == 130  # the same model again (another horizon): no warning
    assert "warning" not in seen[1][0]


def test_an_old_partial_without_the_model_is_refused_cleanly_on_resume(tmp_path, capsys):
    argv = ["run", str(ROOT / "examples/fourbar.xml"), "--out", str(tmp_path), "--quiet", "--no-plot"]
    cfg = cli.run.resolve(cli.build_parser().parse_args(argv))
    meta = cfg.meta(complete=False, segments_done=1)
    del meta["model"]  # written before the model's file was recorded
    _stand_in(tmp_path / "fourbar.partial.npz", meta)
    assert cli.main(argv + ["--resume"]) == 2
    line = _one_error_line(capsys)
    assert "does not match" in line and "model" in line and "--discard" in line


def test_the_refusal_does_not_count_an_automatic_segment_count_as_a_difference(tmp_path, monkeypatch, capsys):
    """--resume without --segments continues with the partial's segment count, so a plain re-run
    without --segments is told that --resume would continue it."""
    _partial(tmp_path, monkeypatch)  # --segments 4; the automatic count for 0.4 s is 1
    capsys.readouterr()
    argv = ["run", "pendulum", "--t1", "0.4", "--quiet", "--no-plot", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "there" not in _one_error_line(capsys)
    assert cli.main(argv + ["--resume"]) == 0
    assert Trajectory.load(tmp_path / "pendulum.npz")[1]["segments"] == 4
