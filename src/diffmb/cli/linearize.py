"""``diffmb linearize SCENARIO [--set k=v] [--stabilization S] [--json FILE] [--quiet]``: a
tensegrity scenario about its static equilibrium (Hsu et al. sections 2.5, 3.3): minimal
realization, eigenvalues, H2 and H-infinity norms."""

from __future__ import annotations

from .. import scenarios
from ..formulations.tensegrity import TensegritySystem
from ..formulations.tensegrity.linear import linearize_report
from ._common import (
    UsageError,
    check_kept,
    check_outputs,
    json_arg,
    one_line_errors,
    parse_sets,
    quiet_arg,
    scenario_args,
    stabilization_arg,
    table,
    write_json,
)


def add_parser(sub):
    lz = sub.add_parser("linearize", help="linearize a tensegrity scenario", description=(
        "Linearize a tensegrity scenario about its static equilibrium (Hsu et al. sections 2.5, "
        "3.3): minimal realization, eigenvalues, H2 and H-infinity norms."))
    scenario_args(lz)
    stabilization_arg(lz)
    json_arg(lz, "{A_shape, eigenvalues, h2_norm, hinf_norm}")
    quiet_arg(lz, "print nothing (give --json FILE)")
    # checked by tensegrity.linear.io_matrices (one list of names; an unknown one exits 2)
    lz.add_argument("--inputs", default="force_densities", metavar="force_densities|forces",
                    help="norm inputs: string/bar force densities (the paper's B_u) or node forces (B_f)")
    lz.add_argument("--outputs", default="state", metavar="state|positions",
                    help="norm outputs: the whole state (the paper's y = x) or node positions")


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json)
    check_kept(args)
    sc = scenarios.get(args.scenario)
    system, params, _ = sc.make(parse_sets(args.sets), args.stabilization)
    if not isinstance(system, TensegritySystem):
        raise UsageError(f"scenario {sc.name!r} is not a tensegrity scenario; linearize supports "
                         f"{', '.join(n for n in sorted(scenarios.REGISTRY) if 'tbar' in n or 'tensegrity' in n)}")
    obj = {"scenario": sc.name, **linearize_report(system, params, inputs=args.inputs, outputs=args.outputs)}
    if args.json is not None:
        write_json(args.json, obj)
    fmt = lambda v: "inf" if v is None else f"{v:.6g}"
    rows = [("A", f"{obj['A_shape'][0]} x {obj['A_shape'][1]} (minimal order {obj['minimal_order']})"),
            ("H2 norm", fmt(obj["h2_norm"])), ("Hinf norm", fmt(obj["hinf_norm"]))]
    if obj.get("norms_infinite_because"):
        rows.append(("why inf", obj["norms_infinite_because"]))
    if not args.quiet:
        print(table(rows))
    return 0
