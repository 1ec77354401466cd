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
from diffmb.data import default_columns, read_data
from diffmb.records import load_records
from diffmb.trajectory import Trajectory

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
    exec(block, env)  # noqa: S102 - the README's own lines
    e_py = float(diffmb.energy(env["model"], env["q0"], env["qd0"]))
    assert e_py == pytest.approx(e_cli, rel=1e-9)
    # gravity in the plane of the linkage: the potential energy changes as the crank turns
    g = np.asarray(env["model"].gravity, float)
    axes = [np.asarray(c["axis"], float) for c in json.loads((EXAMPLES / "fourbar_loops.json").read_text())["closures"]]
    assert abs(float(np.dot(g, axes[0]))) < 1e-12 * np.linalg.norm(g), "gravity normal to the plane"
    assert e_cli == pytest.approx(39.2373, abs=1e-3)
