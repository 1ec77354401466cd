"""Files a user hands diffmb: data records for ``fit`` (CSV, npz, the npz ``diffmb run``
writes; folders and binary files refused in one line naming the file) and the example
model files the README runs (the four-bar URDF on the command line and in Python)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import diffmb
from diffmb import cli, scenarios
from diffmb.design.data import default_columns, read_data
from diffmb.design.records import load_records
from diffmb.simulation.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


# ------------------------------------------------------------------ the four-bar example
def _readme_fourbar_block() -> str:
    section = (ROOT / "README.md").read_text().split("## Your own model", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_fourbar_cli_and_readme_python_start_with_the_same_energy(tmp_path, monkeypatch):
    """``diffmb run examples/fourbar.urdf --closures ...`` and the README's Python lines
    build the same mechanism under the same gravity, in its plane (not normal to it)."""
    monkeypatch.chdir(ROOT)
    summary = tmp_path / "fourbar.json"
    code = cli.main(["run", "examples/fourbar.urdf", "--closures", "examples/fourbar_loops.json",
                     "--t1", "0.01", "--out", str(tmp_path), "--no-plot", "--quiet", "--json", str(summary)])
    assert code == 0
    e_cli = json.loads(summary.read_text())["energy"]["initial"]
    # the README's block up to the system (the simulation itself is the slow README test's)
    block = _readme_fourbar_block().split("system = diffmb.TreeSystem", 1)[0]
    env = {}
    exec(block, env)
    e_py = float(diffmb.energy(env["model"], env["q0"], env["qd0"]))
    assert e_py == pytest.approx(e_cli, rel=1e-9)
    # gravity in the plane of the linkage: the potential energy changes as the crank turns
    g = np.asarray(env["model"].gravity, float)
    axes = [np.asarray(c["axis"], float) for c in json.loads((EXAMPLES / "fourbar_loops.json").read_text())["closures"]]
    assert abs(float(np.dot(g, axes[0]))) < 1e-12 * np.linalg.norm(g), "gravity normal to the plane"
    assert e_cli == pytest.approx(39.2373, abs=1e-3)


# ------------------------------------------------------------------ data records for fit
@pytest.fixture(scope="module")
def fold_cli(tmp_path_factory):
    """``diffmb run fold-4panel`` for a short horizon: its npz, the Trajectory in it and
    what it printed."""
    import contextlib
    import io

    out, printed = tmp_path_factory.mktemp("run"), io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["run", "fold-4panel", "--t1", "0.5", "--out", str(out), "--no-plot"]) == 0
    path = out / "fold-4panel.npz"
    return path, Trajectory.load(path)[0], printed.getvalue()


@pytest.fixture(scope="module")
def fold_run(fold_cli):
    return fold_cli[:2]


def test_an_origami_runs_summary_has_its_panels_line(fold_cli):
    """The detector's line in the summary a user reads (its text: test_cli_robustness)."""
    (line,) = [ln for ln in fold_cli[2].splitlines() if ln.startswith("panels ")]
    # contact on by default: the creases' least margin to their barriers' end, and what
    # the energy certifies (the detector's text with contact off: test_cli_robustness)
    assert "largest crease 180 deg" in line and "contact on: least gap inf (no armed pair)" in line
    assert "least crease margin 0.001 rad" in line and "certified by the energy" in line


def test_the_npz_diffmb_run_writes_is_a_record(fold_run):
    path, traj = fold_run
    system, _, _ = scenarios.get("fold-4panel").make()
    records, sensors = load_records([path], system)
    (rec,) = records
    tr = traj.trimmed()
    assert rec.data.names == tuple(traj.coordinate_names)
    assert set(default_columns(system)) <= set(rec.data.names)  # what fit reads by default
    np.testing.assert_array_equal(rec.data.t, np.asarray(tr.ts))
    for j, name in enumerate(rec.data.names):
        np.testing.assert_array_equal(rec.data.values[:, j], np.asarray(tr[name]), err_msg=name)
    assert sensors == () and rec.label == "fold-4panel"


def test_a_trajectory_of_another_system_is_refused_naming_the_file(fold_run):
    path, _ = fold_run
    system, _, _ = scenarios.get("pendulum").make()
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": column 'r_free_sigma1' is not a state"):
        read_data(path, system)


def _fit_error(capsys, data) -> str:
    code = cli.main(["fit", "pendulum", "--data", str(data), "--params", "g"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_folder_given_as_data_says_it_is_a_folder(tmp_path, capsys):
    (tmp_path / "run_a.csv").write_text("t,theta\n0,1\n1,2\n")
    line = _fit_error(capsys, tmp_path)
    assert str(tmp_path) in line and "is a folder" in line and "not found" not in line
    assert "CSV or npz record" in line and "run_a.csv" in line


@pytest.mark.parametrize("name, content, words", [
    ("deploy.csv", bytes(range(128, 256)) * 4, ["binary content", "not UTF-8"]),
    ("deploy.csv", b"t,theta\n0,1\x00\x00\n", ["binary content", "NUL"]),
    ("deploy.npz", b"not a zip archive at all", ["not an npz archive"]),
    ("deploy.npz", b"PK\x03\x04 truncated", ["cannot read the npz"]),
])
def test_a_binary_file_is_one_line_naming_it(tmp_path, capsys, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    line = _fit_error(capsys, path)
    assert str(path) in line and "CSV or npz record" in line, line
    for w in words:
        assert w in line, line


# slow job: a whole fit (~8 s); the default job keeps the npz record reader
# (test_the_npz_diffmb_run_writes_is_a_record) and CLI fits (test_design, test_fit_goodness)
@pytest.mark.slow
def test_fit_reads_the_npz_of_a_run(tmp_path, capsys):
    """``diffmb fit`` on the npz ``diffmb run`` wrote (pendulum: one angle) recovers the
    run's own gravity from a start 10 % off."""
    assert cli.main(["run", "pendulum", "--t1", "1", "--out", str(tmp_path), "--no-plot", "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "fit.json"
    code = cli.main(["fit", "pendulum", "--data", str(tmp_path / "pendulum.npz"), "--params", "g",
                     "--set", "g=9.0", "--quiet", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["params"]["g"] == pytest.approx(9.81, rel=1e-4)
