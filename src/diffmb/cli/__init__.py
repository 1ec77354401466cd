"""The ``diffmb`` command line, one module per command.

``diffmb list``                      the registered scenarios (:mod:`.listing`)
``diffmb run SCENARIO|FILE ...``     simulate in resumable segments (:mod:`diffmb.simulation.resumable`);
                                     npz / CSV / JSON / plots (:mod:`.run`)
``diffmb linearize SCENARIO``        a tensegrity's linearization and norms (:mod:`.linearize`)
``diffmb synth | tune | fit | sweep`` the design tools (:mod:`.synth`, :mod:`.tune`,
                                     :mod:`.fit`, :mod:`.sweep`)
``diffmb reconfig SCENARIO``         a reconfiguration graph (:mod:`.reconfig`)
``diffmb view RUN.npz``              a run in 3-D, one self-contained web page (:mod:`.view`)

Each command module has ``add_parser(sub)`` and ``main(args) -> exit code``; what they
share (one-line errors, ``--set`` parsing, output checks, the run-settings resolver, the
common flags and the vocabulary they follow, the deprecated spellings) is in
:mod:`._common`. Bad input is one line on stderr and exit code 2; warnings print as one
line each; Ctrl-C exits 130.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable

from .._config import __version__
from ..simulation import compile_cache
from . import _common, fit, linearize, listing, reconfig, run, sweep, synth, tune, view
from ._common import Parser, UsageError, fail
from .run import RunConfig, RunResult, default_segments, report  # noqa: F401  (the run's public pieces)

#: In ``diffmb --help`` order.
COMMANDS = {"list": listing, "run": run, "linearize": linearize, "synth": synth, "tune": tune,
            "fit": fit, "sweep": sweep, "reconfig": reconfig, "view": view}


def on_pending_interrupt(flag: Callable[[], bool]) -> None:
    """Set by the console script: ``flag()`` says whether a Ctrl-C arrived before a run's
    own handler was in place (its first Ctrl-C only sets a flag, see ``diffmb_cli``)."""
    _common.pending_interrupt = flag


def build_parser() -> Parser:
    p = Parser(prog="diffmb", description="Differentiable multibody dynamics: run the papers' cases.")
    p.add_argument("--version", action="version", version=f"diffmb {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        module.add_parser(sub)
    return p


def main(argv=None) -> int:
    """Entry point of the ``diffmb`` console script; returns the exit code (130 on Ctrl-C).
    Warnings (a model file's notes, inertia placeholders) print as one line each, each
    text once: a fit or a sweep builds its model more than once (a fit of a map fold said
    its start state's note four times)."""
    fmt, show = warnings.formatwarning, warnings.showwarning
    warnings.formatwarning = lambda message, *args, **kwargs: f"diffmb: warning: {message}\n"
    shown = set()

    def once(message, category, *args, **kwargs):
        if (category, str(message)) not in shown:
            shown.add((category, str(message)))
            show(message, category, *args, **kwargs)

    warnings.showwarning = once
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("diffmb: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning, warnings.showwarning = fmt, show


def _main(argv=None) -> int:
    compile_cache.prune_own()
    parser = build_parser()
    _common.take_deprecations()  # this command line's own
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        return fail(e)
    except SystemExit as e:  # --help / --version
        return e.code if isinstance(e.code, int) else 0
    if args.command not in COMMANDS:
        parser.print_help(sys.stderr)
        return 2
    try:
        return COMMANDS[args.command].main(args)
    finally:
        _common.say_deprecations()  # unless an error line said them
