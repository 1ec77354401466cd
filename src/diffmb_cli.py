"""The ``diffmb`` console script's entry point, outside the package.

Importing :mod:`diffmb` loads JAX and XLA for a second or more; a Ctrl-C in that time
would otherwise print a traceback from inside an import. This module imports nothing
heavy itself, so the guard is in place before the package loads.
"""

import sys


def main() -> int:
    try:
        from diffmb.cli import main as cli_main
    except KeyboardInterrupt:
        print("diffmb: interrupted while starting; nothing was run", file=sys.stderr)
        return 130
    return cli_main()
