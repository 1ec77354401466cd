"""The ``diffmb`` console script's entry point, outside the package.

Importing :mod:`diffmb` loads JAX and XLA for a second or more. A Ctrl-C in that time
would otherwise raise inside an import (a traceback) or inside one of XLA's garbage-
collection callbacks, where Python ignores it and the run goes on. So the first Ctrl-C
only sets a flag, checked once the package is loaded and between the run's chunks
(:mod:`diffmb.cli`); a second one interrupts at once.

The environment the command line needs before JAX is imported comes from
:mod:`diffmb_env` (standard library only).
"""

import os
import signal
import sys

import diffmb_env


def main() -> int:
    hits = []

    def handler(signum, frame):
        hits.append(signum)
        if len(hits) > 1:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    os.environ.update(diffmb_env.cli_environment(warn=diffmb_env.print_warning))
    try:
        from diffmb import cli
    except KeyboardInterrupt:
        hits.append(signal.SIGINT)
    if hits:
        print("diffmb: interrupted while starting; nothing was run", file=sys.stderr)
        return 130
    cli.on_pending_interrupt(lambda: bool(hits))
    return cli.main()
