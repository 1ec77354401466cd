"""``diffmb list [--json FILE] [--quiet]``: the registered scenarios (name, description, paper)."""

from __future__ import annotations

from .. import scenarios
from ._common import check_kept, check_outputs, emit, json_arg, one_line_errors, quiet_arg, table


def add_parser(sub):
    p = sub.add_parser("list", help="list the scenarios", description="List the registered scenarios.")
    json_arg(p, "the scenarios ([{name, description, paper}])")
    quiet_arg(p, "print nothing (give --json FILE)")


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json)
    check_kept(args)
    found = sorted(scenarios.REGISTRY.values(), key=lambda s: s.name)
    rows = [(s.name, s.description, s.paper) for s in found]
    emit(args, {"scenarios": [{"name": n, "description": d, "paper": p} for n, d, p in rows]},
         [table(rows, header=("NAME", "DESCRIPTION", "PAPER"))])
    return 0
