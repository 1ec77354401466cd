"""The design commands keep what they finished: the first Ctrl-C stops ``sweep``, ``fit``
and ``tune`` after the chunk or iteration in flight, writes what is done and exits 130;
and what would throw work away is refused before any work (outputs that cannot be
written, a plot format matplotlib cannot write, ``--quiet`` with nowhere to keep the
result, a record given twice, options a command would ignore)."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from diffmb import cli
from diffmb.cli import _common


def _interrupt_after(monkeypatch, calls: int):
    """Make the command's interrupt flag read True from its ``calls``-th check on, as if
    Ctrl-C had been pressed then (the same flag a real SIGINT sets, see
    ``test_sweep_keeps_finished_members_on_ctrl_c`` for the signal itself)."""
    seen = []

    def flag():
        seen.append(1)
        return len(seen) >= calls

    monkeypatch.setattr(_common, "pending_interrupt", flag)


# slow job: a 3000-member sweep interrupted by a real SIGINT (~8 s); the default job keeps a real
# SIGINT to a run (test_cli_robustness::test_ctrl_c_while_starting_and_while_running) and a
# sweep's stop keeping its finished chunks (test_design, test_distributed_sweep)
@pytest.mark.slow
def test_sweep_keeps_finished_members_on_ctrl_c(tmp_path):
    """The issue's reproduction: SIGINT once the first chunks are done; the sweep stops
    within seconds (not at the end), exits 130, and the CSV holds the finished members."""
    out, log = tmp_path / "s.csv", tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        # chunks of 3 members over 0.5 s: the program test_design's sweep compiles (a cache hit)
        p = subprocess.Popen([sys.executable, "-m", "diffmb", "sweep", "four-bar", "--batch", "3000", "--chunk-size", "3",
                              "--set", "c=0:0.2", "--t1", "0.5", "--csv", str(out)],
                             stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not re.search(r" [1-9]\d*/3000", log.read_text()):
            assert p.poll() is None, log.read_text()
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        tic = time.monotonic()
        p.wait(timeout=60)
    err = log.read_text()
    assert p.returncode == 130, err[-2000:]
    assert time.monotonic() - tic < 30  # the chunk in flight, not the other thousand
    rows = list(csv.DictReader(out.open()))
    done = int(re.search(r"interrupted; (\d+) of 3000 members finished, kept in", err).group(1))
    assert 3 <= len(rows) == done < 3000 and done % 3 == 0
    assert [float(r["c"]) for r in rows] == pytest.approx([0.2 * i / 2999 for i in range(done)])
    assert {r["status"] for r in rows} == {"success"}


def test_fit_stops_at_the_first_interrupt_and_keeps_its_values(tmp_path, monkeypatch, capsys):
    data, js = tmp_path / "pend.csv", tmp_path / "fit.json"
    assert cli.main(["synth", "pendulum", "--set", "damping=0.05", "--t1", "1", "--dt", "0.01",
                     "--noise", "1e-3", "--seed", "2", "--csv", str(data), "--quiet"]) == 0
    # checks: once before the work, once as the first stage starts, then after each iteration
    _interrupt_after(monkeypatch, 3)
    assert cli.main(["fit", "pendulum", "--data", str(data), "--params", "g,damping", "--set", "g=8",
                     "--set", "damping=0.1", "--dt", "0.01", "--json", str(js)]) == 130
    out, err = capsys.readouterr()
    res = json.loads(js.read_text())
    assert res["interrupted"] is True and res["iterations"] == 1 and len(res["history"]) == 1
    assert res["history"][0]["horizon"] == 0.1 and "iteration 1 (first 10% of the records): cost" in err
    assert res["converged"] is False and res["params"]["g"] != 8.0  # moved, and kept
    assert f"g = {res['params']['g']:.8g}" in out and "interrupted: the values reached so far" in out
    assert "diffmb: interrupted after 1 iterations" in err and str(js) in err


@pytest.mark.slow  # a reverse-mode compile of the four-bar (~25 s), the one test_cli_tune makes
def test_tune_stops_at_the_first_interrupt_and_keeps_the_best_gains(tmp_path, monkeypatch, capsys):
    js = tmp_path / "tune.json"
    _interrupt_after(monkeypatch, 2)  # once before the work, then after every Adam step
    assert cli.main(["tune", "four-bar", "--params", "a,b", "--set", "kick=0.3", "--iterations", "3",
                     "--t1", "0.5", "--json", str(js), "--quiet"]) == 130
    res = json.loads(js.read_text())
    assert res["stopped"] == "interrupted" and len(res["history"]) == 1
    assert res["final"]["params"] == res["history"][0]["params"] or res["final"]["params"] == res["initial"]["params"]
    assert "interrupted after 1 iterations" in capsys.readouterr().err


@pytest.mark.parametrize("argv, flags", [
    (["sweep", "four-bar", "--batch", "2", "--set", "c=0:0.1"], "--json FILE or --csv FILE or --out DIR"),
    (["fit", "pendulum", "--data", "a.csv", "--params", "g"], "--json FILE"),
    (["tune", "four-bar", "--params", "a"], "--json FILE"),
    (["linearize", "tbar"], "--json FILE"),
    (["list"], "--json FILE"),
])
def test_quiet_with_nowhere_to_keep_the_result_is_refused(argv, flags, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--quiet prints nothing" in err[0] and flags in err[0]


def test_outputs_are_checked_before_the_fit(tmp_path, capsys):
    """A plot format matplotlib cannot write, a record given twice, a horizon fit would
    ignore: refused with one line before any work (no JSON appears)."""
    data = tmp_path / "d.csv"
    data.write_text("t,theta\n0,0.5\n0.1,0.45\n0.2,0.4\n")
    js = tmp_path / "f.json"
    common = ["fit", "pendulum", "--data", str(data), "--params", "g", "--json", str(js)]
    for extra, match in [(["--plot", str(tmp_path / "fit.txt")], ".txt is not an image format"),
                         (["--data", str(tmp_path / ".." / tmp_path.name / "d.csv")], "given twice"),
                         (["--t1", "2"], "--t1: fit simulates every record over its own time span"),
                         (["--bound", "t_offset=-1"], "must be a positive number"),
                         (["--solver", "rk4", "--rtol", "1e-6"], "--rtol set the error control")]:
        assert cli.main(common + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and match in err[0], (extra, err)
        assert not js.exists()


def test_tolerances_given_to_a_fixed_step_run_are_refused(tmp_path, capsys):
    assert cli.main(["run", "pendulum", "--solver", "rk4", "--atol", "1e-9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--atol set the error control of adaptive solvers; rk4 takes fixed steps" in err
    assert not list(tmp_path.iterdir())
