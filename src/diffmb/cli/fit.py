"""``diffmb fit SCENARIO --data FILE --params K,c [--shooting S] [--json PATH]``
-> JSON ``{params: {...}, stderr: {...}, rms: ...}``."""

from __future__ import annotations

from pathlib import Path

from .. import scenarios
from ..data import default_columns, read_data
from ..fit import fit
from ._common import UsageError, check_outputs, design_args, emit, names, one_line_errors, parse_sets, run_settings, system_of


def add_parser(sub):
    f = sub.add_parser("fit", help="fit parameters to deployment data", description=(
        "Levenberg-Marquardt fit of scenario parameters to a CSV/npz record."))
    design_args(f)
    f.add_argument("--data", type=Path, required=True, metavar="FILE")
    f.add_argument("--params", required=True, metavar="K,c", help="parameters to fit")
    f.add_argument("--columns", metavar="A,B", help="data columns to fit (default: every column the "
                   "scenario's records hold, the hinge angles; one missing from the file is an error)")
    f.add_argument("--shooting", type=int, default=1, metavar="S", help="multiple-shooting segments")
    f.add_argument("--iterations", type=int, default=30, metavar="N")


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json)
    sc = scenarios.get(args.scenario)
    st = run_settings(args, sc)
    params = names(args.params)
    system = system_of(sc, args)
    data = read_data(args.data, system)
    expected = names(args.columns, "--columns") if args.columns else default_columns(system)
    missing = [c for c in expected if c not in data.names]
    if missing:
        raise UsageError(f"{args.data}: column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"missing (the file has {', '.join(data.names)}); give --columns "
                         f"{','.join(c for c in expected if c in data.names) or 'NAMES'} to fit a subset")
    if args.columns:
        data = data.select(expected)
    res = fit(sc, data, params, overrides=parse_sets(args.sets), stabilization=args.stabilization,
              dt=st["dt"], solver=st["solver"], rtol=st["rtol"], atol=st["atol"],
              shooting=args.shooting, max_iterations=args.iterations)
    obj = {"scenario": sc.name, "data": str(args.data), **res.to_json()}
    lines = [f"{n:>10} = {res.params[n]:.8g} +- {res.stderr[n]:.2g}   (start {res.initial[n]:.6g})"
             for n in res.names]
    lines.append(f"rms {res.rms:.3e} (start {res.initial_rms:.3e}), {res.iterations} iterations, "
                 f"{'converged' if res.converged else 'not converged'}")
    emit(args, obj, lines)
    return 0
