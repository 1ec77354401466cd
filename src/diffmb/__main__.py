"""``python -m diffmb``: the same as the ``diffmb`` console script."""

import sys

from .cli import main

sys.exit(main())
