"""``diffmb sweep SCENARIO --batch N --set K=lo:hi [--set ...] [--devices all] [--json PATH] [--csv PATH]``
-> per-member table + throughput (simulated seconds x members per wall second).
``--set NAME=lo:hi`` spreads NAME over the batch (``--sample linspace``: all ranged names
move together from lo to hi, which is said on stderr when there are several; ``grid``:
every combination, ``NAME=lo:hi:n`` points per axis; ``random``: independent uniform
draws), ``--set NAME=v`` fixes it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from .. import scenarios
from ..batch import METRICS, conserved_by_member, member_values, scenario_batch, sweep
from ._common import (INTERRUPTED, UsageError, check_kept, check_outputs, design_args, emit, interrupts,
                      one_line_errors, parse_sets, stop_if_interrupted, run_settings)


def add_parser(sub):
    w = sub.add_parser("sweep", help="batch-simulate a parameter sweep", description=(
        "vmapped batch simulation over parameter ranges; per-member metrics table."))
    design_args(w)
    w.add_argument("--batch", type=int, metavar="N",
                   help="members (with --sample grid and NAME=lo:hi:n on every axis: their product)")
    w.add_argument("--sample", choices=("linspace", "grid", "random"), default="linspace",
                   help="linspace: ranged names move together (the diagonal); grid: every "
                        "combination; random: independent uniform draws")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--chunk", type=int, metavar="N", help="members per compiled call (default 32 on a CPU, 8192 per GPU)")
    w.add_argument("--devices", default=None, metavar="all|N", help="shard over devices")
    w.add_argument("--csv", type=Path, metavar="PATH", help="write the per-member table as CSV")


def _ranges(sets):
    ranges, fixed = {}, {}
    for k, v in sets.items():
        if ":" in v:
            parts = v.split(":")
            try:
                if len(parts) not in (2, 3):
                    raise ValueError
                ranges[k] = (float(parts[0]), float(parts[1])) + ((int(parts[2]),) if len(parts) == 3 else ())
            except ValueError:
                raise UsageError(f"--set {k}={v}: expected NAME=lo:hi (or lo:hi:n for a grid) "
                                 f"with numbers") from None
        else:
            fixed[k] = v
    return ranges, fixed


def ranges_all_counted(args) -> bool:
    ranges = _ranges(parse_sets(args.sets))[0]
    return bool(ranges) and all(len(r) == 3 for r in ranges.values())


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json, files=[("--csv", args.csv)])
    check_kept(args, "--csv")
    sc = scenarios.get(args.scenario)
    st = run_settings(args, sc)
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    if args.batch is None and not (args.sample == "grid" and ranges_all_counted(args)):
        raise UsageError("--batch N is required (except for --sample grid with NAME=lo:hi:n on every range)")
    ranges, fixed = _ranges(parse_sets(args.sets))
    for end in (0, 1):  # names and numbers, both ends of every range
        sc.resolve({**fixed, **{k: r[end] for k, r in ranges.items()}})
    fixed = {k: float(v) for k, v in fixed.items()}
    members = member_values(ranges, fixed, args.batch, sample=args.sample, seed=args.seed)
    if len(ranges) > 1 and args.sample == "linspace" and not args.quiet:
        print(f"diffmb: {', '.join(ranges)} vary together along the diagonal of their ranges "
              f"(--sample grid for every combination)", file=sys.stderr)
    system, params = scenario_batch(sc, members, args.stabilization)
    devices = args.devices
    if devices not in (None, "all"):
        try:
            devices = int(devices)
        except ValueError:
            raise UsageError(f"--devices: 'all' or a count, got {devices!r}") from None
    stop_if_interrupted()
    with interrupts() as interrupted:
        res = sweep(system, params, chunk=args.chunk, devices=devices, progress=not args.quiet,
                    members=members, conserved=conserved_by_member(sc, members), stop=interrupted, **st)
    if args.csv is not None:
        res.write_csv(args.csv)
    obj = {"scenario": sc.name, **res.to_json()}
    rows = res.rows()
    keys, empty = _shown(rows)
    head = "  ".join(f"{k:>14}" for k in keys)
    lines = [head] + ["  ".join(f"{_cell(r[k]):>14}" for k in keys) for r in rows[:20]]
    if len(rows) > 20:
        lines.append(f"  ... {len(rows) - 20} more members")
    lines += [f"  {k}: {METRICS[k]}" for k in keys if k in METRICS]
    if empty:
        lines.append(f"  not shown, NaN for every member: {', '.join(empty)} "
                     f"({'; '.join(_why(k) for k in empty)})")
    lines.append(f"{res.batch} members x {res.t1:g} s in {res.wall_s:.3g} s on {res.devices} device(s) "
                 f"(+{res.compile_s:.1f} s compile): {res.throughput:.4g} member-seconds per second")
    counts = ", ".join(f"{n} {k}" for k, n in res.status_counts.items() if n)
    bad = res.diverged()
    lines.append(f"status: {counts}" + (f"; diverged members: {bad[:20]}{' ...' if len(bad) > 20 else ''}"
                                        if bad else "; no member diverged"))
    emit(args, obj, lines)
    if res.interrupted:
        kept = " and ".join(str(p) for p in (args.csv, args.json) if p is not None)
        print(f"diffmb: interrupted; {res.batch} of {res.requested} members finished"
              + (f", kept in {kept}" if kept else ", printed above"), file=sys.stderr)
        return INTERRUPTED
    return 0


def _shown(rows):
    """The columns worth a reader's look: the members' values, then every metric that
    is a number for some member (``--csv``/``--json`` keep all of them)."""
    keys = list(rows[0])
    empty = [k for k in keys if k in METRICS and k != "status"
             and all(isinstance(r[k], float) and math.isnan(r[k]) for r in rows)]
    return [k for k in keys if k not in empty], empty


def _why(key):
    return {"time_to_flat": "no member reached flat",
            "time_to_final": "the hinges still move at the end",
            "energy_drift": "no member conserves energy",
            "momentum_drift": "no member conserves angular momentum"}.get(key, "not measured")


def _cell(v):
    if isinstance(v, str):
        return v
    return "nan" if not math.isfinite(v) else f"{v:.6g}"
