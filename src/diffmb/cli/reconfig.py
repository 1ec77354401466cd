"""``diffmb reconfig SCENARIO [--set k=v] [--json PATH] [--out DIR]``: the reconfiguration
graph of a Udwadia-Kalaba scenario (Shoer & Peck section IV), as GraphML and a picture.
Ctrl-C stops after the node being explored and writes the graph found so far (exit 130)."""

from __future__ import annotations

import sys
from pathlib import Path

from .. import reconfig, scenarios
from ._common import (
    DEFAULT_OUT,
    INTERRUPTED,
    check_outputs,
    interrupts,
    one_line_errors,
    parse_sets,
    scenario_args,
    stop_if_interrupted,
    table,
)


def add_parser(sub):
    rc = sub.add_parser("reconfig", help="build a reconfiguration graph (UK scenarios)", description=(
        "Explore the reconfiguration graph of a Udwadia-Kalaba scenario (Shoer & Peck section IV): "
        "writes <out>/<scenario>.graphml and .png; --json writes {nodes, edges, graph_file}."))
    scenario_args(rc)
    rc.add_argument("--json", type=Path, metavar="PATH", help="write the graph as JSON here")
    rc.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), metavar="DIR",
                    help=f"output folder (default: {DEFAULT_OUT})")


@one_line_errors
def main(args) -> int:
    check_outputs(out_dir=args.out, json_path=args.json)
    sc = scenarios.get(args.scenario)
    overrides = sc.resolve(parse_sets(args.sets))
    stop_if_interrupted()
    with interrupts() as interrupted:
        obj = reconfig.run(sc, out=args.out, json_path=args.json,
                           overrides={k: overrides[k] for k in parse_sets(args.sets)}, stop=interrupted)
    print(table([("nodes", str(len(obj["nodes"]))), ("edges", str(len(obj["edges"]))),
                 ("rejected", ", ".join(f"{k} {v}" for k, v in obj["rejected"].items()) or "none"),
                 ("graph", str(obj["graph_file"]))]))
    if obj["unexplored"]:
        print(f"diffmb: interrupted; the graph found so far is written ({len(obj['nodes'])} nodes, "
              f"{obj['unexplored']} of them not explored)", file=sys.stderr)
        return INTERRUPTED
    return 0
