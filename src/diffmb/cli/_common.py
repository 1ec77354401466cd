"""What every command shares: one-line errors, ``--set`` parsing, output checks, JSON
writing, the run-settings resolver, the common flags and the deprecated spellings.

Bad input is a :class:`UsageError` (or a ``ValueError`` from the library) reported as one
line on stderr with exit code 2 (:func:`fail`, :func:`one_line_errors`); one raised inside
JAX is a defect, said as such with exit code 1 (``DIFFMB_TRACEBACK=1``: the traceback).

The vocabulary every command speaks (a flag means one thing wherever it is accepted):

``--out DIR``          an output folder (run, reconfig: default ``out``; sweep: its Parquet store)
``--json FILE``        the result as JSON (every command)
``--csv FILE``, ``--npz FILE``, ``--html FILE``, ``--plot FILE``, ...  one output file, named by its format
``--quiet``            print nothing but warnings and errors (every command)
``--stabilization``    the constraint stabilization, wherever a command builds a System
``--set``, ``--closures``, ``--key``   the scenario (or model file) and its values
``--iterations N``     at most N optimiser iterations, fewer once converged (tune: Adam, default 50;
                       fit: Levenberg-Marquardt over all its stages, default 100)
``--points N``         time points of a record (synth)
``--batch N``, ``--sampling MODE``   how many sweep members, and how they are drawn (sweep)
``--segments N``       a run split into N resumable time segments (run)
``--chunk-size N``     members per compiled batch call (sweep)
``--resume``           continue what ``--out DIR`` holds (run, sweep)

Old spellings stay one release (:func:`deprecated`): they still work and say, once, on
stderr, which spelling replaces them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..simulation.integrate import FIXED_SOLVERS, SOLVERS
from ..system import STABILIZATIONS

DEFAULT_OUT = "out"

#: Set by the console script: whether a Ctrl-C arrived before the run's own handler was
#: in place (its first Ctrl-C only sets a flag, see ``diffmb_cli``).
pending_interrupt: Callable = lambda: False


@contextlib.contextmanager
def interrupts():
    """Yields ``interrupted()``: whether a Ctrl-C arrived. The first Ctrl-C only sets the
    flag, which long commands check between segments, chunks, iterations or optimiser steps (a
    signal that arrives while XLA runs is otherwise delivered inside a host callback,
    where it can be swallowed); they then stop, keep what they finished and exit 130. A
    second Ctrl-C interrupts at once."""
    hits = []

    def handler(signum, frame):
        hits.append(signum)
        if len(hits) > 1:
            raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield lambda: False
        return
    try:
        yield lambda: bool(hits) or pending_interrupt()
    finally:
        signal.signal(signal.SIGINT, old)


#: Exit code of a command stopped by Ctrl-C (what it finished is kept).
INTERRUPTED = 130


def stop_if_interrupted():
    """Raise KeyboardInterrupt when a Ctrl-C arrived while the command was starting."""
    if pending_interrupt():
        raise KeyboardInterrupt


class UsageError(Exception):
    """Bad command-line input: reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, with errors as :class:`UsageError` and flags spelled whole: a prefix
    (``--out`` for linearize's ``--outputs``, ``--chunk`` for run's old ``--chunks``) would
    give a word two meanings."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line instead of usage + message
        raise UsageError(message)


def fail(err) -> int:
    """Print ``err`` as one line (``diffmb: error: ...``, with any deprecated spelling the
    command line used said at its end); exit code 2."""
    msg = " ".join(str(err).split()) or type(err).__name__
    notes = take_deprecations()
    if notes:
        msg += " [" + "; ".join(f"DeprecationWarning: {n}" for n in notes) + "]"
    print(f"diffmb: error: {msg}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------- deprecated spellings
#: The deprecated spellings this command line used, said once: at the end of the error
#: line when the command fails (bad input stays one line, whenever it is found), else on
#: stderr, one line each, when the command ends.
_deprecations: list[str] = []


def take_deprecations() -> list[str]:
    notes = list(dict.fromkeys(_deprecations))
    _deprecations.clear()
    return notes


def say_deprecations():
    """Print the deprecated spellings used so far, one line each (even with ``--quiet``)."""
    for note in take_deprecations():
        print(f"diffmb: DeprecationWarning: {note}", file=sys.stderr)


class Deprecated(argparse.Action):
    """An old spelling, kept one release: stores its value where the new spelling does and
    notes ``OLD is deprecated, use NEW``. ``route(value) -> (new flag, dest)`` picks the
    new spelling by the value (``synth --out X.npz`` is ``--npz X.npz``)."""

    def __init__(self, option_strings, dest, *, new: str, route: Callable | None = None, **kwargs):
        kwargs.setdefault("default", argparse.SUPPRESS)  # the new spelling's default stands
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.route = new, route

    def __call__(self, parser, namespace, values, option_string=None):
        new, dest = self.route(values) if self.route is not None else (self.new, self.dest)
        _deprecations.append(f"{option_string} is deprecated, use {new} (the old spelling goes in the "
                             f"next release)")
        setattr(namespace, dest, values)


def deprecated(p, old: str, new: str, *, dest: str | None = None, route: Callable | None = None, **kwargs):
    """Accept ``old`` as a hidden alias of ``new`` (dest: ``new``'s unless given)."""
    dest = dest or new.lstrip("-").replace("-", "_")
    p.add_argument(old, action=Deprecated, new=new, dest=dest, route=route, help=argparse.SUPPRESS, **kwargs)


#: Libraries that only ever see arrays diffmb built: a ValueError or TypeError raised inside
#: one of them (a shape that does not broadcast, a dtype it refuses) is a defect of diffmb's,
#: not bad input, since every input is checked before it reaches them.
_INTERNAL = ("jax", "jaxlib", "diffrax", "equinox", "optax", "lineax", "optimistix")

#: Set to 1 to see the traceback of any error a command would print as one line.
TRACEBACK_ENV = "DIFFMB_TRACEBACK"


def _raised_inside(err: BaseException) -> str | None:
    """The library of :data:`_INTERNAL` whose code raised ``err`` (its innermost frame),
    or ``None``."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    module = tb.tb_frame.f_globals.get("__name__", "")
    top = module.partition(".")[0]
    return top if top in _INTERNAL else None


def _internal(err: BaseException) -> str | None:
    """Where a defect was raised, or ``None`` for bad input: a numerical failure in
    diffmb's own arithmetic (:class:`FloatingPointError`, numpy's ``LinAlgError``: the
    matrices are diffmb's, built from input already checked), or a ValueError or
    TypeError inside a library of :data:`_INTERNAL`."""
    if isinstance(err, FloatingPointError):
        return "diffmb"
    if isinstance(err, np.linalg.LinAlgError):
        return "numpy"
    return None if isinstance(err, (UsageError, json.JSONDecodeError)) else _raised_inside(err)


def internal_error(err: BaseException, library: str) -> int:
    """Print a defect as one line that says it is one (exit code 1, not bad input's 2)."""
    msg = " ".join(str(err).split()) or type(err).__name__
    print(f"diffmb: internal error: {type(err).__name__} raised inside {library}: {msg} (not a problem "
          f"with the input: a defect in diffmb; rerun with {TRACEBACK_ENV}=1 for the traceback and "
          f"report it)", file=sys.stderr)
    return 1


def one_line_errors(command: Callable) -> Callable:
    """A command whose bad input (UsageError, ValueError, TypeError, bad JSON) exits 2 with
    one line instead of a traceback. A ValueError or TypeError raised inside JAX or one of
    its libraries, or a numerical failure (:func:`_internal`), is a defect, said as such
    (exit 1); ``DIFFMB_TRACEBACK=1`` shows the traceback of either."""
    @functools.wraps(command)
    def guarded(args) -> int:
        try:
            return command(args)
        except (ValueError, TypeError, UsageError, json.JSONDecodeError, FloatingPointError) as e:
            if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
                raise
            return internal_error(e, library) if (library := _internal(e)) else fail(e)
    return guarded


def parse_sets(items) -> dict:
    """``--set NAME=VALUE`` items -> ``{name: value string}``."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"--set {item!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def names(text, flag="--params") -> list:
    """Comma-separated names of a flag (at least one)."""
    out = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not out:
        raise UsageError(f"{flag}: give at least one parameter name")
    return out


def positive(name, v):
    if v is not None and not (math.isfinite(v) and v > 0):
        raise UsageError(f"--{name} must be a positive number, got {v:g}")
    return v


def run_settings(args, sc) -> dict:
    """``t1, dt, solver, rtol, atol`` of a command: its options over the scenario's defaults
    (:meth:`~diffmb.scenarios.Scenario.run_settings`), checked; ``dt`` is ``None`` for
    adaptive solvers unless given (the solver picks its first step). Tolerances given to
    a fixed-step solver are refused: they would be ignored."""
    given = {name: getattr(args, name, None) for name in ("t1", "dt", "rtol", "atol")}
    for name, v in given.items():
        positive(name, v)
    st = sc.run_settings(solver=args.solver, **given)
    positive("t1", st["t1"])
    if st["solver"] in FIXED_SOLVERS:
        tols = [f"--{k}" for k in ("rtol", "atol") if given[k] is not None]
        if tols:
            raise UsageError(f"{' and '.join(tols)} set the error control of adaptive solvers; "
                             f"{st['solver']} takes fixed steps (--dt), so it would ignore them "
                             f"(give --solver {ADAPTIVE_EXAMPLE} to use them)")
    if given["dt"] is None and st["solver"] not in FIXED_SOLVERS:
        st["dt"] = None
    if st["dt"] is not None and st["dt"] > st["t1"]:
        raise UsageError(f"--dt {st['dt']:g} s is longer than the run (--t1 {st['t1']:g} s): one step would "
                         f"span the whole motion; give a step well below t1")
    return st


ADAPTIVE_EXAMPLE = "dopri5"


def check_plot(flag: str, path: Path):
    """Refuse, before any work, a plot path whose format matplotlib cannot write (or a
    plot when matplotlib is missing)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(f"{flag} {path}: plots need matplotlib (pip install 'diffmb[plot]')") from None
    kinds = Figure().canvas.get_supported_filetypes()
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in kinds:
        raise UsageError(f"{flag} {path}: {'.' + ext if ext else 'no extension'} is not an image format "
                         f"matplotlib writes; use one of {', '.join('.' + k for k in sorted(kinds))}")


def check_kept(args, *flags: str):
    """Refuse ``--quiet`` when nothing would keep the result: it prints nothing, so the
    command needs ``--json`` or one of ``flags`` (``"--csv FILE"``, ``"--out DIR"``)."""
    if not getattr(args, "quiet", False) or getattr(args, "json", None) is not None:
        return
    if any(getattr(args, f.split()[0].lstrip("-").replace("-", "_"), None) is not None for f in flags):
        return
    ways = " or ".join(("--json FILE",) + flags)
    raise UsageError(f"--quiet prints nothing, and without {ways} the result would be thrown away; "
                     f"give {ways}, or drop --quiet")


def check_outputs(*, out_dir: Path | None = None, json_path: Path | None = None, files=()):
    """Refuse, before any work, output paths that cannot be written (UsageError).

    ``out_dir`` must be a folder (it is created) that accepts files; ``json_path`` and
    every ``(flag, path)`` of ``files`` must not be a folder, and their folder must
    accept files.
    """
    def writable_dir(d: Path, flag: str):
        if d.exists() and not d.is_dir():
            raise UsageError(f"{flag} {d}: exists and is not a folder")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{flag} {d}: cannot create the folder ({e.strerror or e})") from None
        if not os.access(d, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {d}: the folder is not writable")

    if out_dir is not None:
        writable_dir(Path(out_dir), "--out")
    for flag, path in ([("--json", json_path)] + list(files)):
        if path is None:
            continue
        path = Path(path)
        if path.is_dir():
            raise UsageError(f"{flag} {path}: is a folder; give a file name inside it")
        writable_dir(path.parent, flag)
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: the file exists and is not writable")


def finite(obj):
    """``obj`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, obj: dict):
    """Strict JSON (non-finite numbers as ``null``), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(finite(obj), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def table(rows, header=None) -> str:
    rows = ([header] if header else []) + [tuple(r) for r in rows]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + str(r[-1]) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def scenario_args(p, *, model_files: bool = False):
    """The positional ``SCENARIO`` and the repeatable ``--set NAME=VALUE`` every command takes
    (``model_files``: SCENARIO may be a .urdf / MJCF .xml / .fold file: ``--closures``, ``--key``)."""
    p.add_argument("scenario", metavar="SCENARIO|MODEL-FILE" if model_files else "SCENARIO")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="sets",
                   help="override a scenario parameter (repeatable)")
    if model_files:
        p.add_argument("--closures", metavar="LOOPS.json",
                       help="with a .urdf model: a loop file (closures and the initial state)")
        p.add_argument("--key", metavar="NAME", help="with an MJCF (.xml) model: the keyframe to start from "
                       "(default: the first)")
        p.add_argument("--frame", type=int, metavar="K", help="with a crease pattern (.fold): start from frame K "
                       "of the file (a folded state)")
        p.add_argument("--fold-fraction", type=float, metavar="FRACTION", help="with a crease pattern: start "
                       "folded, the "
                       "driving creases at FRACTION of 180 deg (M negative, V positive), the rest closed by the "
                       "loop-closure solve")
        p.add_argument("--drive", metavar="e<i>,...", help="with --fold-fraction: the driving creases "
                       "(default: one per degree of freedom, those that move most as the pattern folds)")


def scenario_of(args):
    """The command's scenario (or model file, with ``--closures`` / ``--key``)."""
    from .. import scenarios

    start = {"frame": getattr(args, "frame", None), "fold": getattr(args, "fold_fraction", None),
             "drive": getattr(args, "drive", None)}
    return scenarios.get(args.scenario, closures=getattr(args, "closures", None), key=getattr(args, "key", None),
                         start=start)


def run_args(p, *, help_dt="fixed step [s]", horizon=True):
    """``--t1 --dt --solver --rtol --atol`` (``horizon=False``: no ``--t1``)."""
    if horizon:
        p.add_argument("--t1", type=float, metavar="S", help="end time [s] (default: the scenario's)")
    p.add_argument("--dt", type=float, metavar="S", help=help_dt)
    p.add_argument("--solver", type=str.lower, choices=SOLVERS, metavar="NAME",
                   help=f"one of {', '.join(SOLVERS)}")
    p.add_argument("--rtol", type=float, metavar="X", help="relative tolerance (adaptive)")
    p.add_argument("--atol", type=float, metavar="X", help="absolute tolerance (adaptive)")


def stabilization_arg(p):
    """``--stabilization``: every command that builds a System."""
    p.add_argument("--stabilization", choices=STABILIZATIONS, default=None,
                   help="constraint stabilization (scenarios with constraints; default: the scenario's)")


def out_arg(p, *, default: str | None = DEFAULT_OUT, help: str = "output folder"):
    """``--out DIR``: a command's output folder."""
    p.add_argument("--out", type=Path, default=None if default is None else Path(default), metavar="DIR",
                   help=help + (f" (default: {default})" if default is not None else ""))


def json_arg(p, what: str = "the result"):
    """``--json FILE``: every command."""
    p.add_argument("--json", type=Path, metavar="FILE", help=f"write {what} as JSON")


def quiet_arg(p, what: str = "no progress output, no summary"):
    """``--quiet``: every command (warnings and errors are still said)."""
    p.add_argument("--quiet", action="store_true", help=what)


def design_args(p, *, run=True, horizon=True):
    """What the design commands (synth, tune, fit, sweep) share (``horizon=False``: no
    ``--t1``, for fit, whose horizon is the records')."""
    scenario_args(p, model_files=True)
    stabilization_arg(p)
    if run:
        run_args(p, horizon=horizon)
    json_arg(p)
    quiet_arg(p)


def emit(args, obj, lines):
    """Write ``obj`` to ``--json`` and print ``lines`` (unless ``--quiet``)."""
    if args.json is not None:
        write_json(args.json, obj)
    if not args.quiet:
        print("\n".join(lines))


def system_of(sc, args):
    """The scenario's System for the command's ``--set`` values and stabilization."""
    system, _, _ = sc.make(parse_sets(args.sets), args.stabilization)
    return system
