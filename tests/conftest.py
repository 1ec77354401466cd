"""Shared test configuration: pytest's, not helpers (those are in ``helpers.py``).

* One persistent XLA compilation cache for the session and its subprocesses.
* float64, strict dtype promotion and rank promotion errors, as diffrax / equinox run
  their own suites.
* The ``rng`` fixture.
"""

from __future__ import annotations

import atexit
import gc
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
os.environ.update({
    "JAX_COMPILATION_CACHE_DIR": os.environ["DIFFMB_TEST_JAX_CACHE"],
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
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


def _memory_maps() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:   # not Linux: no such limit to keep under
        return 0


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


#: A worker drops JAX's compiled programs between two test files once its memory
#: mappings pass this share of the kernel's limit (vm.max_map_count, 65,530 by default).
MAP_SHARE = 0.5
_MAP_LIMIT = _map_limit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Between two test files (after the first one's fixtures are gone), a worker whose
    memory mappings pass ``MAP_SHARE`` of the kernel's limit drops JAX's compiled
    programs (``jax.clear_caches``). XLA maps about 9 regions for every program it
    compiles on a CPU and keeps them while the program is cached, so a worker of the slow
    job reached the 65,530 of ``vm.max_map_count`` after some 7,000 programs and died in
    whatever mapped next: a segfault in a cache write, an abort in a compile (twice in
    CI and a local ``.ci/run``, in
    ``test_flexible.py::test_free_floating_chain_conserves_momentum_with_prescribed_joint``;
    the other worker had 62,176 maps). A program needed again is read back from the
    persistent cache."""
    yield
    if _MAP_LIMIT and (nextitem is None or nextitem.module is not item.module) \
            and _memory_maps() > MAP_SHARE * _MAP_LIMIT:
        jax.clear_caches()
        gc.collect()


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
