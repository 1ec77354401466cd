"""The command line's persistent compilation cache (``diffmb_env.cli_environment``,
:mod:`diffmb.simulation.compile_cache`): a second run of a structure reads its programs back, gives
the same numbers bit for bit, and the cache is off, elsewhere or the user's own on request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

import diffmb_env
from diffmb.simulation import compile_cache
from diffmb.simulation.trajectory import Trajectory

SCRIPT = shutil.which("diffmb", path=os.path.dirname(sys.executable)) or shutil.which("diffmb")
#: What the test session sets for itself (tests/conftest.py) and a user's shell does not.
SESSION_KEYS = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "EQX_ON_ERROR", "DIFFMB_COMPILE_CACHE")


def test_the_environment_the_command_line_adds(tmp_path):
    xdg = str(tmp_path / "xdg")
    env = diffmb_env.cli_environment({"HOME": "/home/u", "XDG_CACHE_HOME": xdg})
    assert env == {"JAX_COMPILATION_CACHE_DIR": os.path.join(xdg, "diffmb", "jax"),
                   "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": diffmb_env.CACHE_MIN_COMPILE_S,
                   "EQX_ON_ERROR": "nan"}
    assert os.path.isdir(env["JAX_COMPILATION_CACHE_DIR"])
    mine = str(tmp_path / "c")
    assert diffmb_env.cli_environment({"XDG_CACHE_HOME": xdg, "DIFFMB_COMPILE_CACHE": mine}
                                      )["JAX_COMPILATION_CACHE_DIR"] == mine
    for off in ("off", "0", "OFF", "false"):
        assert diffmb_env.cli_environment({"DIFFMB_COMPILE_CACHE": off, "XDG_CACHE_HOME": xdg}) == {}
    # the user's own settings are kept as they are
    own = {"JAX_COMPILATION_CACHE_DIR": "/mine", "EQX_ON_ERROR": "raise",
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}
    assert diffmb_env.cli_environment(own) == {}


def test_a_folder_that_cannot_be_made_is_one_warning_and_no_cache(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    said = []
    assert diffmb_env.cli_environment({"DIFFMB_COMPILE_CACHE": str(blocker / "jax")}, warn=said.append) == {}
    assert len(said) == 1 and str(blocker / "jax") in said[0] and "running without it" in said[0]


def test_python_dash_m_diffmb_is_recognised_by_its_command_line():
    yes = (["py", "-m", "diffmb", "run"], ["py", "-X", "dev", "-W", "error", "-m", "diffmb"],
           ["py", "-mdiffmb"], ["py", "-u", "-m", "diffmb"])
    no = (["py", "-m", "pytest", "-k", "diffmb"], ["py", "script.py", "-m", "diffmb"],
          ["py", "-c", "pass", "-m", "diffmb"], ["py"], ["py", "-m"])
    assert all(diffmb_env.run_as_module(a) for a in yes)
    assert not any(diffmb_env.run_as_module(a) for a in no)


def test_prune_removes_the_oldest_programs_first(tmp_path):
    now = time.time()
    for k in range(5):  # 100 bytes each, k = 0 the oldest
        f = tmp_path / f"p{k}-cache"
        f.write_bytes(b"x" * 100)
        os.utime(f, (now - 100 + k, now - 100 + k))
    assert compile_cache.prune(tmp_path, max_bytes=250) == 300
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p3-cache", "p4-cache"]
    assert compile_cache.prune(tmp_path, max_bytes=250) == 0


def test_a_second_run_reads_its_programs_back_with_the_same_numbers(tmp_path):
    """The console script, then ``python -m diffmb``, as a user's shell starts them (the
    suite's test that both entry points run): the first compiles and writes the cache
    under ``XDG_CACHE_HOME``, the second reads the simulation and diagnostics programs
    back and ends with the same states bit for bit."""
    assert SCRIPT is not None, "console script 'diffmb' missing: install with pip install -e ."
    env = {k: v for k, v in os.environ.items() if k not in SESSION_KEYS}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    runs = []
    for k, head in enumerate(([SCRIPT], [sys.executable, "-m", "diffmb"])):
        out = tmp_path / f"run{k}"
        r = subprocess.run([*head, "run", "double-pendulum", "--t1", "0.2", "--out", str(out),
                            "--json", str(out / "run.json"), "--no-plot"],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append((json.loads((out / "run.json").read_text()), Trajectory.load(out / "double-pendulum.npz")[0], r))
    (first, traj0, _), (second, traj1, r1) = runs
    assert first["compile_cached"] == 0
    assert second["compile_cached"] >= 2, second  # the solve and the diagnostics
    assert "read from the compilation cache" in r1.stdout
    assert any((tmp_path / "xdg" / "diffmb" / "jax").iterdir())
    np.testing.assert_array_equal(np.asarray(traj1.xs), np.asarray(traj0.xs))
