"""``diffmb reconfig SCENARIO [--set k=v] [--json FILE] [--out DIR] [--quiet]``: the
reconfiguration graph of a Udwadia-Kalaba scenario (Shoer & Peck section IV), as GraphML
and a picture. It takes no ``--stabilization``: the explorer's problem fixes Baumgarte
(its event root finds need a dense output, which projection would snap). Ctrl-C stops
after the node being explored and writes the graph found so far (exit 130)."""

from __future__ import annotations

import sys

from .. import scenarios
from ..formulations.udwadia_kalaba import reconfig
from ._common import (
    INTERRUPTED,
    check_outputs,
    interrupts,
    json_arg,
    one_line_errors,
    out_arg,
    parse_sets,
    quiet_arg,
    scenario_args,
    stop_if_interrupted,
    table,
)


def add_parser(sub):
    rc = sub.add_parser("reconfig", help="build a reconfiguration graph (UK scenarios)", description=(
        "Explore the reconfiguration graph of a Udwadia-Kalaba scenario (Shoer & Peck section IV): "
        "writes <out>/<scenario>.graphml and .png; --json writes {nodes, edges, graph_file}."))
    scenario_args(rc)
    out_arg(rc, help="output folder: <out>/<scenario>.graphml and .png")
    json_arg(rc, "the graph")
    quiet_arg(rc, "no summary table")


@one_line_errors
def main(args) -> int:
    check_outputs(out_dir=args.out, json_path=args.json)
    sc = scenarios.get(args.scenario)
    overrides = sc.resolve(parse_sets(args.sets))
    stop_if_interrupted()
    with interrupts() as interrupted:
        obj = reconfig.run(sc, out=args.out, json_path=args.json,
                           overrides={k: overrides[k] for k in parse_sets(args.sets)}, stop=interrupted)
    if not args.quiet:
        print(table([("nodes", str(len(obj["nodes"]))), ("edges", str(len(obj["edges"]))),
                     ("rejected", ", ".join(f"{k} {v}" for k, v in obj["rejected"].items()) or "none"),
                     ("graph", str(obj["graph_file"]))]))
    if obj["unexplored"]:
        print(f"diffmb: interrupted; the graph found so far is written ({len(obj['nodes'])} nodes, "
              f"{obj['unexplored']} of them not explored)", file=sys.stderr)
        return INTERRUPTED
    return 0
