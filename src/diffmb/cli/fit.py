"""``diffmb fit SCENARIO --data A.csv [--data B.csv ...] [--sensors S.json] --params K,c[,t_offset,...]
[--shooting S] [--plot PNG] [--json PATH]`` -> fitted values with standard errors, a
residual report per record and sensor, identifiability warnings."""

from __future__ import annotations

import sys
from pathlib import Path

from .. import scenarios
from ..data import default_columns
from ..fit import fit
from ..plot import plot_fit
from ..records import Record, load_records, resolve_sensors
from ._common import UsageError, check_outputs, design_args, emit, names, one_line_errors, parse_sets, run_settings, system_of


def add_parser(sub):
    f = sub.add_parser("fit", help="fit parameters to deployment data", description=(
        "Levenberg-Marquardt fit of scenario parameters (and marker offsets, gyro biases, "
        "start times) to one or more CSV/npz deployment records."))
    design_args(f)
    f.add_argument("--data", type=Path, required=True, action="append", metavar="FILE",
                   help="a deployment record (repeat for several; '# set: NAME=VALUE' lines in a "
                        "CSV give that record's own scenario values)")
    f.add_argument("--sensors", type=Path, metavar="JSON", help="sensor declarations (markers, gyros, "
                   "accelerometers); CSV headers may also declare them on '# sensor: {...}' lines")
    f.add_argument("--params", required=True, metavar="K,c", help="parameters to fit: scenario "
                   "parameters, offset.<marker>, bias.<gyro>, t_offset")
    f.add_argument("--columns", metavar="A,B", help="data columns to fit (default: every column the "
                   "scenario's records hold, the hinge angles, or every column when sensors are declared)")
    f.add_argument("--shooting", type=int, default=1, metavar="S", help="multiple-shooting segments")
    f.add_argument("--iterations", type=int, default=30, metavar="N")
    f.add_argument("--plot", type=Path, metavar="PNG", help="measured vs fitted outputs per sensor and record")


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json, files=[("--plot", args.plot)] if args.plot else [])
    sc = scenarios.get(args.scenario)
    st = run_settings(args, sc)
    params = names(args.params)
    system = system_of(sc, args)
    records, sensors = load_records(args.data, system, args.sensors)
    if args.columns or not sensors:
        expected = names(args.columns, "--columns") if args.columns else default_columns(system)
        for rec in records:
            missing = [c for c in expected if c not in rec.data.names]
            if missing:
                raise UsageError(f"{rec.data.path}: column{'s' if len(missing) > 1 else ''} "
                                 f"{', '.join(missing)} missing (the file has {', '.join(rec.data.names)}); "
                                 f"give --columns {','.join(c for c in expected if c in rec.data.names) or 'NAMES'} "
                                 f"to fit a subset")
        records = [Record(r.data.select(expected), r.overrides, r.label) for r in records]
        sensors = tuple(s for s in sensors if set(s.columns) & set(expected))
    res = fit(sc, records, params, sensors=sensors, overrides=parse_sets(args.sets),
              stabilization=args.stabilization, dt=st["dt"], solver=st["solver"], rtol=st["rtol"],
              atol=st["atol"], shooting=args.shooting, max_iterations=args.iterations,
              callback=None if args.quiet else _progress)
    obj = {"scenario": sc.name, "data": [str(p) for p in args.data],
           "sensors": [s.to_json() for s in sensors], **res.to_json()}
    lines = [f"{n:>16} = {res.params[n]:.8g} +- {res.stderr[n]:.2g}   (start {res.initial[n]:.6g})"
             for n in res.names]
    for rep in res.records:
        lines.append(f"record {rep['label']}: rms " + ", ".join(f"{k} {v:.3g}" for k, v in rep["rms"].items()))
    lines.append(f"rms {res.rms:.3e} (start {res.initial_rms:.3e}), {res.iterations} iterations, "
                 f"{'converged' if res.converged else 'not converged'}; compile {res.compile_s:.1f} s, "
                 f"fit {res.wall_s:.1f} s")
    if args.plot:
        used = resolve_sensors(system, records, sensors)
        lines.append(f"plot: {plot_fit(res, records, used, args.plot, title=sc.name)}")
    emit(args, obj, lines)
    return 0


def _progress(k, cost, theta):
    shown = ", ".join(f"{n} {v:.5g}" for n, v in list(theta.items())[:4])
    print(f"iteration {k}: cost {cost:.4g}  {shown}{' ...' if len(theta) > 4 else ''}", file=sys.stderr, flush=True)


