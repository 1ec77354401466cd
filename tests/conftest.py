"""Shared test configuration: pytest's, not helpers (those are in ``helpers.py``).

* One persistent XLA compilation cache for the session and its subprocesses.
* float64, strict dtype promotion and rank promotion errors, as diffrax / equinox run
  their own suites.
* The ``rng`` fixture.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# One persistent XLA compilation cache for the test session, set in the environment before
# JAX is imported, so that the subprocesses the tests start (the CLI, sharded sweeps, Dask
# workers) and pytest-xdist's workers share it: a program compiled once is read back
# everywhere else. The folder:
# * DIFFMB_TEST_JAX_CACHE when set (`.ci/run` gives both of its jobs one fresh folder, so
#   CI compiles everything once and the slow job reads back what the default job compiled);
#   DIFFMB_TEST_JAX_CACHE=off: a temporary folder, removed at exit (a cold run);
# * else a folder kept between runs, `$XDG_CACHE_HOME/diffmb/test-jax` (~/.cache/...),
#   trimmed to 1 GiB as a session starts: a contributor's next run compiles only the
#   programs their change touched (XLA's key is the program itself, its compiler flags and
#   the JAX/jaxlib versions, so a changed program is never read back).
# EQX_ON_ERROR=nan: equinox's runtime checks inside diffrax (t1 > t0, increasing save
# times: diffmb validates both in Python before tracing) would otherwise be host
# callbacks, and a program with a host callback is never written to the cache.
if os.environ.get("DIFFMB_TEST_JAX_CACHE", "").lower() in ("off", "0", "none"):
    _cache = tempfile.mkdtemp(prefix="diffmb-test-jax-cache-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
    os.environ["DIFFMB_TEST_JAX_CACHE"] = _cache
elif not os.environ.get("DIFFMB_TEST_JAX_CACHE"):
    os.environ["DIFFMB_TEST_JAX_CACHE"] = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "diffmb", "test-jax")
    os.makedirs(os.environ["DIFFMB_TEST_JAX_CACHE"], exist_ok=True)
# DIFFMB_TEST_JAX_CACHE_READ_ONLY=1 (`.ci/run`'s slow job): programs are read back, none
# is written. XLA's CPU executable serialization, which every write calls, segfaulted in
# the slow job's long-lived workers (twice, on the same test: CI and a local `.ci/run`,
# never when that test ran alone); a job that writes nothing never calls it.
os.environ.update({
    "JAX_COMPILATION_CACHE_DIR": os.environ["DIFFMB_TEST_JAX_CACHE"],
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "1e9" if os.environ.get("DIFFMB_TEST_JAX_CACHE_READ_ONLY") == "1" else "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "EQX_ON_ERROR": "nan",
})

import jax
import numpy as np
import pytest

from compile_report import (  # noqa: F401  (the --compile-report plugin's hooks)
    pytest_addoption,
    pytest_runtest_logfinish,
    pytest_runtest_protocol,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_testnodedown,
)
from diffmb.simulation import compile_cache

if "PYTEST_XDIST_WORKER" not in os.environ and os.environ["DIFFMB_TEST_JAX_CACHE"].endswith(
        os.path.join("diffmb", "test-jax")):  # the kept folder, trimmed once (not by each worker)
    compile_cache.prune(os.environ["DIFFMB_TEST_JAX_CACHE"])


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    """An xdist worker ends at once when its session is over: its results (and any
    warning), sent with ``workerfinished``, are already with the controller, which waits
    for every worker to exit before it reports. A normal exit took a worker 3-4 s of
    garbage collection over a heap of compiled programs (pytest's last look for
    unraisable exceptions, whose warnings a worker could no longer send) and of JAX's
    ``clean_up`` at exit."""
    if hasattr(config, "workerinput"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# Rank promotion raises, as in diffrax/equinox: broadcasting must be explicit.
RANK_PROMOTION = "raise"

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", RANK_PROMOTION)


@pytest.fixture(autouse=True, scope="session")
def _strict_jax():
    """Re-assert the strict configuration for the whole session (cheap, idempotent)."""
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", RANK_PROMOTION)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
