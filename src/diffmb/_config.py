"""Process-wide numeric configuration, applied on ``import diffmb``.

* float64 is on by default (``jax_enable_x64``). Set ``DIFFMB_FLOAT32=1`` before importing
  diffmb to keep JAX's float32 default for large batch runs. Matrix products then run at
  full float32 precision (``jax_default_matmul_precision = "highest"``) unless the user set
  ``JAX_DEFAULT_MATMUL_PRECISION``: by default a GPU multiplies float32 matrices in
  TensorFloat-32 (a 10-bit mantissa), in which the penalised closure solve
  ``M + rho G^T G`` (:mod:`diffmb.closures.constraint_solve`) loses every digit; on an H200 every
  fold-4panel member at RK4 1 ms under Baumgarte diverged at once. CPUs have no such mode.
* jaxlib 0.10's XLA CPU fusion emitters make deep unrolled recursions compile to code whose
  run time grows exponentially with chain depth (seen with MJX); we switch them off unless
  the user already set ``XLA_FLAGS`` themselves. This only takes effect if it happens before
  JAX initialises its CPU backend, which importing diffmb first guarantees. Later jaxlibs
  dropped the flag (XLA aborts on an unknown flag), so it is set for jaxlib 0.10 only.
* XLA's CPU matrix products run on one thread (``--xla_cpu_multi_thread_eigen=false``)
  unless the user's ``XLA_FLAGS`` says how they are threaded. For diffmb's small
  matrices one thread is faster (a 10x10 map fold's RK4 run: 0.46-0.49 s against
  0.59-0.62 s on two cores), and it is what a sweep's local workers, a chunk on a core
  each, need; they inherit this process's flags, so the programs they compile are this
  process's own: a sweep on workers equals the in-process sweep bit for bit
  (``docs/distributed-sweeps.md``, "Bit for bit"). Like the flag above it takes effect
  only if diffmb is imported before JAX starts its CPU backend.

* ``python -m diffmb`` gets the command line's environment here, before JAX and equinox
  are imported (the console script sets it itself): its persistent compilation cache
  (:func:`diffmb_env.cli_environment`, standard library only, outside the package).

It also holds the package version (from the installed metadata), so modules that record
it (saved trajectories) need not import the package itself. It imports nothing of diffmb:
it is the floor every layer stands on.
"""

import os
from importlib import metadata

try:
    __version__ = metadata.version("diffmb")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

_FLAG = "--xla_cpu_use_fusion_emitters=false"
#: XLA's CPU matrix products on one thread (see the module docstring).
SINGLE_THREADED_PRODUCTS = "--xla_cpu_multi_thread_eigen=false"


def _jaxlib_minor():
    try:
        major, minor = metadata.version("jaxlib").split(".")[:2]
        return int(major), int(minor)
    except (metadata.PackageNotFoundError, ValueError):
        return None


if _jaxlib_minor() == (0, 10) and "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + SINGLE_THREADED_PRODUCTS).strip()

try:
    import diffmb_env
except ImportError:  # the package installed without its top-level helper module
    diffmb_env = None
if diffmb_env is not None and diffmb_env.run_as_module():
    os.environ.update(diffmb_env.cli_environment(warn=diffmb_env.print_warning))

import jax  # noqa: E402

FLOAT32 = os.environ.get("DIFFMB_FLOAT32", "") not in ("", "0", "false", "False")
jax.config.update("jax_enable_x64", not FLOAT32)
if FLOAT32 and "JAX_DEFAULT_MATMUL_PRECISION" not in os.environ:
    jax.config.update("jax_default_matmul_precision", "highest")
