"""``diffmb list``: the registered scenarios (name, description, paper)."""

from __future__ import annotations

from .. import scenarios
from ._common import table


def add_parser(sub):
    sub.add_parser("list", help="list the scenarios", description="List the registered scenarios.")


def main(args) -> int:
    rows = [(s.name, s.description, s.paper) for s in sorted(scenarios.REGISTRY.values(), key=lambda s: s.name)]
    print(table(rows, header=("NAME", "DESCRIPTION", "PAPER")))
    return 0
