"""Closed chains on a loaded model: closures named by link/frame, a consistent initial
state by Gauss-Newton, the loop file, against the four-bar's one-coordinate model."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.formats import loops as loop_file
from diffmb.scenarios.fourbar import G, assemble as fourbar_positions
from test_closures import one_dof_reference as _reference

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
URDF = EXAMPLES / "fourbar.urdf"
LOOPS = EXAMPLES / "fourbar_loops.json"


def _model():
    return diffmb.load_urdf(URDF, gravity=(0.0, 0.0, -G))  # the example linkage lies in the x-z plane


# slow job: a second model of the four-bar check (~8 s); the default job keeps
# test_closures::test_fourbar_matches_minimal_coordinates and this loop file's assembly
# (test_data_files, test_couplings)
@pytest.mark.slow
def test_loop_file_four_bar_matches_the_one_coordinate_model():
    model = _model()
    system = loop_file.closed_system(model, LOOPS)
    phi, psi = fourbar_positions(0.3)
    # assembled onto the branch of the guess: the hand position analysis
    np.testing.assert_allclose(np.asarray(system.q0), [0.3, phi - 0.3, psi], atol=1e-12)
    assert float(system.qd0[0]) == 2.0
    tr = diffmb.simulate(system, t1=3.0, solver="dopri8", rtol=1e-11, atol=1e-12, saveat=31)
    ref = _reference(0.3, 2.0)
    np.testing.assert_allclose(np.asarray(tr.xs[:, 0]), np.asarray(ref.xs[:, 0]), atol=1e-7)
    np.testing.assert_allclose(np.asarray(tr.xs[:, 3]), np.asarray(ref.xs[:, 1]), atol=1e-7)
    assert tr.summary()["violation"]["position_max"] < 1e-9


def test_a_loop_closed_to_the_ground():
    """The same mechanism as one open chain crank-coupler-rocker, its rocker's far end
    pinned to the ground at (D, 0, 0): a node on the world."""
    from diffmb.scenarios.fourbar import M1, M2, M3, A, B, C, D

    def rod(m, l):
        return np.diag([1e-6 * m, m * l * l / 12, m * l * l / 12])

    b = diffmb.ModelBuilder(gravity=(0.0, -G, 0.0))
    b.add_body("crank", "world", "revolute", axis=(0, 0, 1), mass=M1, com=(A / 2, 0, 0), inertia=rod(M1, A))
    b.add_body("coupler", "crank", "revolute", axis=(0, 0, 1), pos=(A, 0, 0), mass=M2,
               com=(B / 2, 0, 0), inertia=rod(M2, B))
    # the rocker hangs from the coupler's tip, its frame pointing from the tip to the ground pivot
    b.add_body("rocker", "coupler", "revolute", axis=(0, 0, 1), pos=(B, 0, 0), mass=M3,
               com=(C / 2, 0, 0), inertia=rod(M3, C))
    model = b.build()
    loops = diffmb.close_loops(model, [{"kind": "revolute", "a": "rocker", "b": "world",
                                        "point": [C, 0, 0], "point_b": [D, 0, 0], "axis": [0, 0, 1]}])
    phi, psi = fourbar_positions(0.3)
    guess = {"crank": 0.3, "coupler": phi - 0.3 + 0.05, "rocker": psi + np.pi - phi - 0.05}
    q0, qd0 = diffmb.assemble(model, loops, guess, fixed=["crank"], rates={"crank": 2.0})
    np.testing.assert_allclose(np.asarray(q0), [0.3, phi - 0.3, psi + np.pi - phi], atol=1e-10)
    system = diffmb.TreeSystem(model, q0, qd0, closures=loops, stabilization="projection")
    tr = diffmb.simulate(system, t1=3.0, solver="dopri8", rtol=1e-11, atol=1e-12, saveat=31)
    ref = _reference(0.3, 2.0)
    np.testing.assert_allclose(np.asarray(tr.xs[:, 0]), np.asarray(ref.xs[:, 0]), atol=1e-7)


def test_slider_closure_frees_the_axis_translation_only():
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_body("x", "world", "prismatic", axis=(1, 0, 0), mass=1.0, inertia=np.eye(3) * 0.1)
    b.add_body("y", "x", "prismatic", axis=(0, 1, 0), mass=1.0, inertia=np.eye(3) * 0.1)
    model = b.build()
    loops = diffmb.close_loops(model, [{"kind": "prismatic", "a": "world", "b": "y", "axis": [1, 0, 0]}])
    res = lambda q: np.asarray(diffmb.closures.nodes.position_residual(model, jnp.asarray(q), loops))
    rows = list(loops.closures[0].rows)
    assert np.abs(res([0.7, 0.0])[0, rows]).max() < 1e-15  # sliding along x: closed
    assert np.abs(res([0.0, 0.3])[0, rows]).max() == pytest.approx(0.3)  # off the axis: open


@pytest.mark.parametrize("spec, words", [
    ({"kind": "revolute", "a": "coupler_tip", "b": "rocker", "axis": [0, 0, 1], "pnt": [0, 0, 0]},
     ["unknown key", "'pnt'", "point"]),
    ({"kind": "hinged", "a": "coupler_tip", "b": "rocker"}, ["kind 'hinged'", "revolute"]),
    ({"kind": "revolute", "a": "coupler_tipp", "b": "rocker", "axis": [0, 0, 1]},
     ["'coupler_tipp'", "links: crank", "frames: coupler_tip"]),
    ({"kind": "revolute", "a": "coupler_tip", "b": "rocker"}, ["needs 'axis'"]),
    ({"kind": "revolute", "a": "coupler_tip", "b": "rocker", "axis": [0, 0]}, ["'axis' must be 3"]),
    ({"kind": "revolute", "a": "coupler_tip", "b": "coupler", "axis": [0, 0, 1]}, ["same body"]),
    ({"kind": "point", "a": "coupler_tip", "b": "rocker", "axis": [0, 0, 1]}, ["has no axis"]),
    ({"a": "coupler_tip", "b": "rocker"}, ["missing 'kind'"]),
])
def test_closure_keys_are_validated(spec, words):
    with pytest.raises(ValueError) as e:
        diffmb.close_loops(_model(), [spec])
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_assemble_says_which_loop_stays_open():
    model = _model()
    loops = diffmb.close_loops(model, [{"name": "far", "kind": "point", "a": "coupler_tip", "b": "rocker",
                                        "point_b": [20.0, 0, 0]}])  # 20 m away: cannot close
    with pytest.raises(ValueError, match="closure\\(s\\) 'far' stay open"):
        diffmb.assemble(model, loops, {"crank": 0.3}, fixed=["crank"])


def test_loop_file_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "loops.json"
    bad.write_text(json.dumps({"closures": [], "intial": {}}))
    with pytest.raises(ValueError, match="loops.json: unknown key.*'intial'"):
        loop_file.read_loops(bad)
    with pytest.raises(ValueError, match="loop file not found"):
        loop_file.read_loops(tmp_path / "nope.json")


@pytest.mark.slow
def test_readme_your_own_model_section_runs(tmp_path, monkeypatch):
    """The README's "Your own model" Python block and commands, as written."""
    import re
    import shutil
    import subprocess
    import sys

    root = EXAMPLES.parent
    text = (root / "README.md").read_text()
    section = text.split("## Your own model", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(root)
    env = {}
    exec(block, env)
    assert env["traj"].status == "success"
    assert env["traj"].summary()["violation"]["position_max"] < 1e-9
    script = shutil.which("diffmb", path=str(Path(sys.executable).parent)) or shutil.which("diffmb")
    for line in re.search(r"```bash\n(.*?)```", section, re.S).group(1).strip().splitlines():
        argv = line.split("#")[0].split()
        assert argv[0] == "diffmb"
        r = subprocess.run([script, *argv[1:], "--out", str(tmp_path), "--no-plot", "--quiet"], cwd=root,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (line, r.stderr)
