"""``diffmb synth SCENARIO [--set ..] [--t1 --dt --solver] [--sensors S.json] [--noise SIGMA]
[--t-offset S] [--seed N] --csv FILE | --npz FILE``: a synthetic deployment record (``--csv``,
``--npz`` or both): the sensors' outputs (markers, gyros, ...) and/or coordinates (``--columns``,
default the hinge angles) at ``--points`` times, with Gaussian noise (``SIGMA`` on every
column, else each sensor's declared ``sigma``). A CSV carries the sensor declarations and
the record's own values (``--record NAME=VALUE``) in its header."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..design.data import state_units, write_data
from ..design.fit import default_t_offset_bound, synth
from ..design.sensors import column_units, read_sensors
from ._common import (
    UsageError,
    check_outputs,
    deprecated,
    design_args,
    emit,
    names,
    one_line_errors,
    parse_sets,
    run_settings,
    scenario_of,
    system_of,
)


def add_parser(sub):
    s = sub.add_parser("synth", help="synthetic deployment data", description=(
        "Simulate a scenario and write sampled sensor outputs or coordinates with Gaussian noise (CSV/npz)."))
    design_args(s)
    s.add_argument("--sensors", type=Path, metavar="FILE", help="sensor declarations to record")
    s.add_argument("--noise", type=float, default=None, metavar="SIGMA",
                   help="noise std on every column (default: each sensor's sigma; 0 for coordinates)")
    s.add_argument("--t-offset", type=float, default=0.0, metavar="S", dest="t_offset",
                   help="the record's clock at release [s] (it rests before)")
    s.add_argument("--record", action="append", default=[], metavar="NAME=VALUE", dest="record_sets",
                   help="a value of this record only (its initial fold, tip-off spin), written to the "
                        "CSV header as '# set:' for fit to apply (repeatable)")
    s.add_argument("--seed", type=int, default=0, metavar="N", help="the noise's seed")
    s.add_argument("--points", type=int, metavar="N",
                   help="time points in the record (default: every 10 ms, at most 1001)")
    deprecated(s, "--samples", "--points", type=int, metavar="N")
    s.add_argument("--columns", metavar="A,B", help="coordinates to record (default without "
                   "--sensors: the hinge angles)")
    s.add_argument("--csv", type=Path, metavar="FILE", help="write the record as CSV (units and the "
                   "sensor declarations in its header)")
    s.add_argument("--npz", type=Path, metavar="FILE", help="write the record as npz (one array a column)")
    deprecated(s, "--out", "--csv", type=Path, metavar="FILE", route=_route_out)


def _route_out(path):
    """The old ``--out FILE``: npz or CSV by extension, as it wrote."""
    return ("--npz", "npz") if str(path).lower().endswith(".npz") else ("--csv", "csv")


def _targets(args) -> list:
    """``[(flag, path)]`` of the record's files, checked: at least one, each named for its format."""
    if args.csv is None and args.npz is None:
        raise UsageError("give --csv FILE or --npz FILE (or both): where the record is written")
    if args.csv is not None and args.csv.suffix.lower() == ".npz":
        raise UsageError(f"--csv {args.csv}: an .npz name for a CSV file; give --npz {args.csv} for npz")
    if args.npz is not None and args.npz.suffix.lower() != ".npz":
        raise UsageError(f"--npz {args.npz}: expected a .npz file name")
    return [(flag, path) for flag, path in (("--csv", args.csv), ("--npz", args.npz)) if path is not None]


@one_line_errors
def main(args) -> int:
    targets = _targets(args)
    check_outputs(json_path=args.json, files=targets)
    sc = scenario_of(args)
    st = run_settings(args, sc)
    system = system_of(sc, args)
    sensors = read_sensors(args.sensors, system) if args.sensors else ()
    cols = names(args.columns, "--columns") if args.columns else None
    sets = parse_sets(args.sets)
    own = parse_sets(args.record_sets)
    data, _ = synth(sc, {**sets, **own}, stabilization=args.stabilization, columns=cols, sensors=sensors,
                    samples=args.points, noise=args.noise, t_offset=args.t_offset, seed=args.seed, **st)
    comments = [f"sensor: {json.dumps(s.to_json())}" for s in sensors]
    if own:
        comments.append("set: " + " ".join(f"{k}={v}" for k, v in own.items()))
    paths = [write_data(path, data, system, units=column_units(sensors, state_units(system)), comments=comments)
             for _, path in targets]
    obj = {"scenario": sc.name, "file": str(paths[0]), "files": [str(p) for p in paths], "columns": list(data.names),
           "samples": int(data.t.size), "noise": args.noise, "t_offset": args.t_offset, "seed": args.seed,
           "sensors": [s.to_json() for s in sensors], "record": own,
           "parameters": sc.resolve({**sets, **own})}
    bound = default_t_offset_bound(float(data.t[-1] - data.t[0]))
    if abs(args.t_offset) > bound:
        print(f"diffmb: warning: --t-offset {args.t_offset:g} s is beyond the +-{bound:g} s within which "
              f"`diffmb fit` looks for this record's start time by default; fit it with "
              f"--bound t_offset={abs(args.t_offset) * 1.5:.3g}", file=sys.stderr)
    noise = "each sensor's sigma" if args.noise is None and sensors else f"{args.noise or 0:g}"
    emit(args, obj, [f"wrote {' and '.join(map(str, paths))}: {data.t.size} samples of {', '.join(data.names)} "
                     f"(noise {noise})"])
    return 0
