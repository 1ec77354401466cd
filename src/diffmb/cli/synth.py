"""``diffmb synth SCENARIO [--set ..] [--t1 --dt --solver] --noise SIGMA [--seed N] --out FILE``:
synthetic measurements (CSV or npz by extension): the hinge angles (or ``--columns``) at
``--samples`` times, Gaussian noise of ``SIGMA`` (rad)."""

from __future__ import annotations

from pathlib import Path

from .. import scenarios
from ..data import write_data
from ..fit import synth
from ._common import check_outputs, design_args, emit, names, one_line_errors, parse_sets, run_settings, system_of


def add_parser(sub):
    s = sub.add_parser("synth", help="synthetic deployment data", description=(
        "Simulate a scenario and write sampled coordinates with Gaussian noise (CSV/npz)."))
    design_args(s)
    s.add_argument("--noise", type=float, default=0.0, metavar="SIGMA", help="noise std (rad)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--samples", type=int, metavar="N", help="sample count (default: every 10 ms, <= 1001)")
    s.add_argument("--columns", metavar="A,B", help="state names to record (default: hinge angles)")
    s.add_argument("--out", type=Path, required=True, metavar="FILE", help="data file (.csv or .npz)")


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json, files=[("--out", args.out)])
    sc = scenarios.get(args.scenario)
    st = run_settings(args, sc)
    cols = names(args.columns, "--columns") if args.columns else None
    data, tr = synth(sc, parse_sets(args.sets), stabilization=args.stabilization, columns=cols,
                     samples=args.samples, noise=args.noise, seed=args.seed, **st)
    path = write_data(args.out, data, system_of(sc, args))
    obj = {"scenario": sc.name, "file": str(path), "columns": list(data.names),
           "samples": int(data.t.size), "noise": args.noise, "seed": args.seed,
           "parameters": sc.resolve(parse_sets(args.sets))}
    emit(args, obj, [f"wrote {path}: {data.t.size} samples of {', '.join(data.names)} (noise {args.noise:g})"])
    return 0
