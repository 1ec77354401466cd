"""``diffmb fit SCENARIO --data A.csv [--data B.csv ...] [--sensors S.json] --params K,c[,t_offset,...]
[--shooting S] [--iterations N] [--bound t_offset=S] [--plot FILE] [--json FILE]`` -> fitted
values with standard errors (noise-only and scaled by the reduced chi-square, and which is
shown), a residual report per record and sensor (in the sensors' units), a chi-square
goodness-of-fit test per sensor, and warnings where a value is not to be trusted (at a
bound, undetermined, a sensor's residual above its noise beyond chance, parameters the
data cannot tell apart). Ctrl-C stops after
the iteration in flight and keeps the values reached (printed, and in ``--json``); exit 130."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..design.data import default_columns
from ..design.fit import fit
from ..design.fit_residual import NUISANCE_BOUNDS
from ..design.goodness import p_text
from ..design.records import Record, load_records, resolve_sensors
from ._common import (
    INTERRUPTED,
    UsageError,
    check_kept,
    check_outputs,
    check_plot,
    design_args,
    emit,
    interrupts,
    names,
    one_line_errors,
    parse_sets,
    run_settings,
    scenario_of,
    stop_if_interrupted,
    system_of,
)


def add_parser(sub):
    f = sub.add_parser("fit", help="fit parameters to deployment data", description=(
        "Levenberg-Marquardt fit of scenario parameters (and marker offsets, gyro biases, "
        "start times) to one or more CSV/npz deployment records (an npz that `diffmb run` "
        "wrote is one)."))
    design_args(f, horizon=False)
    f.add_argument("--t1", type=float, help=argparse.SUPPRESS)  # refused with a reason in main
    f.add_argument("--data", type=Path, required=True, action="append", metavar="FILE",
                   help="a deployment record (repeat for several; '# set: NAME=VALUE' lines in a "
                        "CSV give that record's own scenario values)")
    f.add_argument("--sensors", type=Path, metavar="FILE", help="sensor declarations (markers, gyros, "
                   "accelerometers); CSV headers may also declare them on '# sensor: {...}' lines")
    f.add_argument("--params", required=True, metavar="K,c", help="parameters to fit: scenario "
                   "parameters, offset.<marker>, bias.<gyro>, t_offset")
    f.add_argument("--columns", metavar="A,B", help="data columns to fit (default: every column the "
                   "scenario's records hold, the hinge angles, or every column when sensors are declared)")
    f.add_argument("--shooting", type=int, default=1, metavar="N", help="multiple-shooting segments")
    f.add_argument("--iterations", type=int, default=100, metavar="N",
                   help="at most N optimiser (Levenberg-Marquardt) iterations in all, shared by the "
                        "continuation stages (default 100; the fit stops earlier once converged)")
    f.add_argument("--bound", action="append", default=[], metavar="KIND=W", dest="bounds",
                   help="half-width of a nuisance parameter's range: offset=M, bias=RAD_S, "
                        "t_offset=S (repeatable)")
    f.add_argument("--plot", type=Path, metavar="FILE", help="measured vs fitted outputs per sensor and record "
                   "(an image: .png, .pdf, .svg, ...)")


def _bounds(items) -> dict:
    out = {}
    for kind, text in parse_sets(items).items():
        if kind not in NUISANCE_BOUNDS:
            raise UsageError(f"--bound {kind}={text}: expected one of {', '.join(NUISANCE_BOUNDS)}")
        try:
            out[kind] = float(text)
        except ValueError:
            raise UsageError(f"--bound {kind}={text}: not a number") from None
        if not (math.isfinite(out[kind]) and out[kind] > 0):
            raise UsageError(f"--bound {kind}={text}: must be a positive number")
    return out


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json, files=[("--plot", args.plot)] if args.plot else [])
    if args.plot:
        check_plot("--plot", args.plot)
    check_kept(args)
    if args.t1 is not None:
        raise UsageError("--t1: fit simulates every record over its own time span; a horizon "
                         "does not apply (trim the record to fit a part of it)")
    if args.iterations < 1:
        raise UsageError(f"--iterations must be at least 1, got {args.iterations}")
    seen = {}
    for path in args.data:
        key = path.resolve()
        if key in seen:
            raise UsageError(f"--data {path}: given twice (as {seen[key]} before); a record counted "
                             f"twice would halve the standard errors")
        seen[key] = path
    bounds = _bounds(args.bounds)
    sc = scenario_of(args)
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
    stop_if_interrupted()
    with interrupts() as interrupted:
        res = fit(sc, records, params, sensors=sensors, overrides=parse_sets(args.sets),
                  stabilization=args.stabilization, dt=st["dt"], solver=st["solver"], rtol=st["rtol"],
                  atol=st["atol"], shooting=args.shooting, iterations=args.iterations, bounds=bounds,
                  callback=None if args.quiet else _progress, stop=interrupted)
    obj = {"scenario": sc.name, "data": [str(p) for p in args.data],
           "sensors": [s.to_json() for s in sensors], **res.to_json()}
    lines = [f"{n:>16} = {res.params[n]:.8g} " + (
        f"+- {res.stderr[n]:.2g} [noise-only {res.stderr_noise[n]:.2g}, scaled {res.stderr_scaled[n]:.2g}]"
        if math.isfinite(res.stderr[n]) else "(not determined)")
        + f"   (start {res.initial[n]:.6g})" for n in res.names]
    lines.append(_basis_line(res))
    lines += _goodness_lines(res.goodness)
    for rep in res.records:
        lines.append(f"record {rep['label']}: residual rms " + ", ".join(
            f"{k} {v:.3g}{_unit(rep['units'].get(k))}" for k, v in rep["rms"].items()))
    state = ("interrupted: the values reached so far" if res.interrupted else "converged" if res.converged
             else "not converged (see the warnings)" if res.warnings
             else f"not converged: the iteration limit was reached (--iterations {args.iterations})"
             if res.iterations >= args.iterations else "not converged")
    lines.append(f"{res.iterations} iterations, {state}; compile {res.compile_s:.1f} s, fit {res.wall_s:.1f} s")
    if args.plot:
        from ..viewer.plots import plot_fit  # matplotlib, loaded only when asked

        used = resolve_sensors(system, records, sensors)
        lines.append(f"plot: {plot_fit(res, records, used, args.plot, title=sc.name)}")
    emit(args, obj, lines)
    if res.interrupted:
        kept = f"; written to {args.json}" if args.json else ""
        print(f"diffmb: interrupted after {res.iterations} iterations; the values above are the best "
              f"reached{kept}", file=sys.stderr)
        return INTERRUPTED
    return 0


def _basis_line(res) -> str:
    """Which standard error follows ``+-`` above, and why."""
    total = (res.goodness or {}).get("total")
    if res.stderr_basis == "noise":
        return "standard errors shown: noise-only (every sensor's residual is its declared noise)"
    if total is None:
        return "standard errors shown: scaled (no sensor noise declared: the residual is taken as the noise)"
    return (f"standard errors shown: scaled by sqrt(reduced chi-square {total['reduced_chi2']:.3g}), as the "
            f"goodness-of-fit check failed; the noise-only ones assume a model that explains the data")


def _goodness_lines(gof) -> list:
    """The chi-square test per sensor and over the fit, one line each."""
    if not gof or gof.get("total") is None:
        return []

    def one(name, e):
        return (f"  {name}: residual rms {e['rms_over_noise']:.3g}x noise, chi-square/dof "
                f"{e['reduced_chi2']:.3g} (dof {e['dof']:.0f}), {p_text(e['p'])}"
                + ("" if e["passed"] else "  FAILS"))

    return ([f"goodness of fit (chi-square test, fails at p < {gof['alpha']:g}):"]
            + [one(k, e) for k, e in gof["sensors"].items()] + [one("whole fit", gof["total"])])


def _unit(u):
    return f" {u}" if u else ""


def _progress(k, cost, theta, horizon):
    shown = ", ".join(f"{n} {v:.5g}" for n, v in list(theta.items())[:4])
    where = (horizon if not isinstance(horizon, float) else "whole records" if horizon >= 1.0
             else f"first {horizon:.0%} of the records")
    print(f"iteration {k} ({where}): cost {cost:.4g}  {shown}{' ...' if len(theta) > 4 else ''}",
          file=sys.stderr, flush=True)
