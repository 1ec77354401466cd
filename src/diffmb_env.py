"""The command line's environment, set before JAX and equinox are imported.

Standard library only: the ``diffmb`` console script (:mod:`diffmb_cli`) and
``python -m diffmb`` (through :mod:`diffmb._config`, which the package imports before
JAX) both call :func:`cli_environment`, and neither may load JAX first. What it sets:
the command line's persistent compilation cache (:mod:`diffmb.simulation.compile_cache`)
and ``EQX_ON_ERROR=nan``.
"""

import os
import sys

#: Values of ``DIFFMB_COMPILE_CACHE`` that turn the command line's cache off.
CACHE_OFF = ("0", "off", "false", "no", "none")
#: Programs that XLA compiles faster than this are not written to the cache: reading
#: one back costs about as much (fold-4panel's second run: 1.6 s at 0.1 s, 2.1 s at
#: JAX's default of 1 s, which leaves the diagnostics programs out).
CACHE_MIN_COMPILE_S = "0.1"


def default_cache_dir(environ=os.environ) -> str:
    """``$XDG_CACHE_HOME/diffmb/jax``, or ``~/.cache/diffmb/jax``."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "diffmb", "jax")


def cli_environment(environ=os.environ, warn=None) -> dict:
    """The variables the command line adds to its environment (none it would override).

    * ``JAX_COMPILATION_CACHE_DIR``: XLA programs are kept on disk between runs, so a
      second ``diffmb run`` of a structure (new ``--set`` numbers, a longer ``--t1``)
      reads its programs back instead of compiling them. The folder is
      ``DIFFMB_COMPILE_CACHE`` when that names one, else :func:`default_cache_dir`;
      ``DIFFMB_COMPILE_CACHE=off`` turns the cache off, and a ``JAX_COMPILATION_CACHE_DIR``
      of the user's own is used as it is. A folder that cannot be made or written is
      left out, said in one ``warn(message)`` line, and the command runs without a cache.
    * ``EQX_ON_ERROR=nan``: equinox's runtime checks inside diffrax (``t1 > t0``, save
      times increasing and inside the span) are host callbacks otherwise, and XLA never
      caches a program with one. :func:`diffmb.simulate` makes the same checks in Python
      before it traces, so no result changes.
    """
    choice = environ.get("DIFFMB_COMPILE_CACHE", "").strip()
    if choice.lower() in CACHE_OFF:
        return {}
    env = {}
    if not environ.get("JAX_COMPILATION_CACHE_DIR"):
        path = choice or default_cache_dir(environ)
        try:
            os.makedirs(path, exist_ok=True)
            why = None if os.access(path, os.W_OK) else "not writable"
        except OSError as e:
            why = e.strerror or str(e)
        if why is not None:
            if warn is not None:
                warn(f"compilation cache {path}: {why}; running without it (DIFFMB_COMPILE_CACHE=DIR or =off)")
            return {}
        env["JAX_COMPILATION_CACHE_DIR"] = path
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ:
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = CACHE_MIN_COMPILE_S
    if "EQX_ON_ERROR" not in environ:
        env["EQX_ON_ERROR"] = "nan"
    return env


def run_as_module(argv=None) -> bool:
    """Whether this process is ``python [options] -m diffmb ...``."""
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-mdiffmb"):
            return a == "-mdiffmb" or argv[i + 1:i + 2] == ["diffmb"]
        if not a.startswith("-") or a in ("-c", "-"):
            return False
        i += 2 if a in ("-X", "-W", "--check-hash-based-pycs") else 1
    return False


def print_warning(message: str) -> None:
    """One ``diffmb: warning:`` line on stderr, as the command line prints its warnings."""
    print(f"diffmb: warning: {message}", file=sys.stderr)
