"""``diffmb sweep SCENARIO --batch N --set K=lo:hi [--set ...] [--devices all] [--json FILE] [--csv FILE]``
-> per-member table + throughput (simulated seconds x members per wall second).
``--set NAME=lo:hi`` spreads NAME over the batch (``--sampling linspace``: all ranged names
move together from lo to hi, which is said on stderr when there are several; ``grid``:
every combination, ``NAME=lo:hi:n`` points per axis; ``random``: independent uniform
draws), ``--set NAME=v`` fixes it.

The members run in chunks of ``--chunk-size`` members, one compiled (vmapped) call each.
``--workers N`` runs the chunks on N local worker processes, ``--address HOST:PORT`` on a
running Dask cluster (:mod:`diffmb.design.distributed`); ``--out DIR`` writes every finished
chunk to a Parquet store in that folder (:mod:`diffmb.design.sweep_store`) that ``--resume``
continues, running only the chunks it lacks; ``--plot FILE`` draws ``--metric`` over the
swept parameters (:mod:`diffmb.design.sweep_report`). Workers and the store need the ``cluster``
extra.

``--json``, the store's ``summary.json`` and ``members.parquet`` (its schema metadata,
key ``diffmb``) record the run settings every member used: ``t1``, ``solver``, ``dt``,
``rtol``, ``atol``, ``stabilization`` (``diffmb view SWEEP.json --member K`` runs a
member again with them)."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

from .. import _config
from ..design import sweep_report, sweep_store
from ..design.batch import (
    METRICS,
    _devices,
    chunk_members,
    chunk_size,
    conserved_by_member,
    default_chunk,
    member_values,
    n_chunks,
    scenario_batch,
    sweep,
)
from ._common import (
    INTERRUPTED,
    UsageError,
    check_kept,
    check_outputs,
    check_plot,
    deprecated,
    design_args,
    emit,
    interrupts,
    one_line_errors,
    out_arg,
    parse_sets,
    run_settings,
    scenario_of,
    stop_if_interrupted,
    write_json,
)


def add_parser(sub):
    w = sub.add_parser("sweep", help="batch-simulate a parameter sweep", description=(
        "vmapped batch simulation over parameter ranges; per-member metrics table."))
    design_args(w)
    w.add_argument("--batch", type=int, metavar="N",
                   help="members (with --sampling grid and NAME=lo:hi:n on every axis: their product)")
    w.add_argument("--sampling", choices=("linspace", "grid", "random"), default="linspace",
                   help="how members are drawn from the ranges: linspace: ranged names move together "
                        "(the diagonal); grid: every combination; random: independent uniform draws")
    deprecated(w, "--sample", "--sampling", choices=("linspace", "grid", "random"))
    w.add_argument("--seed", type=int, default=0, metavar="N", help="the random draws' seed (--sampling random)")
    w.add_argument("--chunk-size", type=int, metavar="N",
                   help="members per compiled (vmapped) call (default 128 on a CPU, 8192 per GPU)")
    deprecated(w, "--chunk", "--chunk-size", type=int, metavar="N")
    w.add_argument("--devices", default=None, metavar="all|N", help="shard over devices")
    w.add_argument("--csv", type=Path, metavar="FILE", help="write the per-member table as CSV")
    w.add_argument("--workers", type=int, metavar="N",
                   help="run the chunks on N local worker processes (Dask; pip install 'diffmb[cluster]')")
    w.add_argument("--address", metavar="HOST:PORT", help="run the chunks on the Dask cluster whose scheduler is there")
    out_arg(w, default=None, help="output folder, a Parquet store: each finished chunk's members in "
                                  "DIR/chunks/, DIR/members.parquet and DIR/summary.json when complete "
                                  "(pip install 'diffmb[cluster]'); an empty folder or a store")
    deprecated(w, "--table", "--out", type=Path, metavar="DIR")
    w.add_argument("--resume", action="store_true",
                   help="continue the sweep in --out DIR: run only its missing chunks (refused when "
                        "the settings differ)")
    w.add_argument("--plot", type=Path, metavar="FILE",
                   help="a heat map of --metric over a 2-D grid's axes, else a scatter matrix")
    w.add_argument("--metric", metavar="NAME", help="the metric --plot shows (default: time_to_final, "
                                                     "else the first one measured)")


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


def _engine(args):
    """``{"workers": N}`` / ``{"address": A}`` for :func:`diffmb.design.distributed.sweep`, or None
    (this process); checked before any work."""
    if args.workers is None and args.address is None:
        return None
    flag = "--workers" if args.workers is not None else "--address"
    if args.workers is not None and args.address is not None:
        raise UsageError("--workers starts local workers, --address joins a running cluster: give one")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if args.devices is not None:
        raise UsageError(f"{flag}: each worker runs on its own default device; drop --devices "
                         f"(start one worker per device)")
    from ..design import distributed

    try:
        distributed.require(flag)
    except ImportError as e:
        raise UsageError(str(e)) from None
    return {"workers": args.workers} if args.workers is not None else {"address": args.address}


def store_settings(sc, args, st, ranges, fixed, members, chunk) -> dict:
    """What decides a sweep's numbers, as the store keeps it (``--resume`` compares it)."""
    h = hashlib.sha1()
    for m in members:  # one member at a time: a million members need no million-member string
        h.update(json.dumps(m, sort_keys=True).encode())
    digest = h.hexdigest()
    return {"scenario": sc.name, "stabilization": args.stabilization, "fixed": fixed,
            "ranges": {k: list(r) for k, r in ranges.items()}, "sample": args.sampling, "seed": args.seed,
            "batch": len(members), "members_sha1": digest, **st, "chunk": chunk,
            "chunks": n_chunks(len(members), chunk), "dtype": "float32" if _config.FLOAT32 else "float64"}


@one_line_errors
def main(args) -> int:
    """Check everything, draw the members, open the store, run, report: the stages below."""
    engine, devices = _check(args)
    sc = scenario_of(args)
    st = run_settings(args, sc)
    ranges, fixed, members = _members(args, sc)
    mobility = _mobility(args, sc, ranges, fixed)
    conserved = conserved_by_member(sc, members)
    store = _open_store(args, sc, st, ranges, fixed, members, conserved, engine, devices)
    res = _run(args, sc, members, conserved, store, engine, devices, st)
    cols = sweep_report.columns(res)
    report = sweep_report.summary(cols, swept=list(ranges))
    # the run settings every member used (the --json and the table's summary.json keep them):
    # `diffmb view SWEEP.json --member K` runs a member again with them
    used = {"solver": st["solver"], "dt": st["dt"], "rtol": st["rtol"], "atol": st["atol"],
            "stabilization": args.stabilization or sc.stabilization}
    plotted = _write_outputs(args, sc, res, cols, report, used, ranges)
    obj = ({"scenario": sc.name, **res.to_json(), **used, "flagged": report["flagged"], "mobility": mobility}
           if args.json is not None else None)
    lines = _report_lines(args, res, cols, report, plotted)
    if mobility is not None:
        lines.append(f"mobility: {mobility['text']}" + (" (at both ends of every range)" if ranges else ""))
    emit(args, obj, lines)
    if res.interrupted:
        kept = " and ".join(str(p) for p in (args.csv, args.json, args.out) if p is not None)
        print(f"diffmb: interrupted; {res.batch} of {res.requested} members finished"
              + (f", kept in {kept}" if kept else ", printed above")
              + ("; continue with --resume" if args.out is not None else ""), file=sys.stderr)
        return INTERRUPTED
    return 0


def _check(args):
    """Every flag checked before any work: ``(engine, devices)`` (:func:`_engine`; ``devices``
    as :func:`diffmb.design.batch.sweep` takes it)."""
    check_outputs(json_path=args.json, files=[("--csv", args.csv)])
    check_kept(args, "--csv FILE", "--out DIR")
    if args.resume and args.out is None:
        raise UsageError("--resume continues the sweep kept in --out DIR; give --out DIR")
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        if path is not None:
            try:
                sweep_store.require_pyarrow(flag) if flag == "--out" else check_plot(flag, path)
            except ImportError as e:
                raise UsageError(str(e)) from None
    engine = _engine(args)
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    if args.batch is None and not (args.sampling == "grid" and ranges_all_counted(args)):
        raise UsageError("--batch N is required (except for --sampling grid with NAME=lo:hi:n on every range)")
    if args.metric is not None and (args.metric == "status" or args.metric not in METRICS):
        raise UsageError(f"--metric {args.metric}: one of {', '.join(k for k in METRICS if k != 'status')}")
    devices = args.devices
    if devices not in (None, "all"):
        try:
            devices = int(devices)
        except ValueError:
            raise UsageError(f"--devices: 'all' or a count, got {devices!r}") from None
    return engine, devices


def _members(args, sc):
    """``(ranges, fixed, members)``: the ``--set`` ranges and fixed values, checked against
    the scenario at both ends of every range, and the members drawn from them."""
    ranges, fixed = _ranges(parse_sets(args.sets))
    for end in (0, 1):  # names and numbers, both ends of every range
        sc.resolve({**fixed, **{k: r[end] for k, r in ranges.items()}})
    fixed = {k: float(v) for k, v in fixed.items()}
    members = member_values(ranges, fixed, args.batch, sample=args.sampling, seed=args.seed)
    if args.plot is not None and not ranges:
        raise UsageError("--plot draws a metric over the swept parameters: give a range, --set NAME=lo:hi")
    if not ranges and len(members) > 1 and not args.quiet:
        print(f"diffmb: warning: no range given (--set NAME=lo:hi): the {len(members)} members are one "
              f"run repeated", file=sys.stderr)
    if len(ranges) > 1 and args.sampling == "linspace" and not args.quiet:
        print(f"diffmb: {', '.join(ranges)} vary together along the diagonal of their ranges "
              f"(--sampling grid for every combination)", file=sys.stderr)
    return ranges, fixed, members


def _mobility(args, sc, ranges, fixed) -> dict | None:
    """The closed chain's mobility at the start state (:mod:`diffmb.closures.mobility`),
    built at both ends of every range; ``None`` without closures. The builds' notes and a
    locked pattern's warning are printed here, before the sweep compiles."""
    from ..origami.start_state import LockedPattern, PatternNote
    from .run import mobility_of

    seen, found = set(), []
    for end in (0, 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PatternNote)
            system, _, _ = sc.make({**fixed, **{k: r[end] for k, r in ranges.items()}},
                                   args.stabilization or sc.stabilization)
        for w in caught:
            text = str(w.message)
            if issubclass(w.category, PatternNote) and text not in seen:
                seen.add(text)
                if w.category is LockedPattern or not args.quiet:
                    print(f"diffmb: {'warning' if w.category is LockedPattern else 'note'}: {text}", file=sys.stderr)
        found.append(mobility_of(system))
        if not ranges:
            break
    if found[0] is None:
        return None
    if any(m != found[0] for m in found):
        return {**found[0], "text": " / ".join(m["text"] for m in found) + " (the range's two ends differ)"}
    return found[0]


def _open_store(args, sc, st, ranges, fixed, members, conserved, engine, devices) -> dict:
    """``{"done", "on_chunk", "chunk"}``: with ``--out DIR``, the Parquet store opened (the
    chunks it holds already, when resuming) and a callback that writes each finished chunk
    to it; without, nothing done and no callback."""
    chunk = args.chunk_size
    if args.out is None:
        return {"done": {}, "on_chunk": None, "chunk": chunk}
    check_outputs(out_dir=args.out)
    held = sweep_store.read_meta(args.out) if args.resume else None
    if chunk is None and held is not None and isinstance(held.get("settings", {}).get("chunk"), int):
        chunk = held["settings"]["chunk"]  # --resume without --chunk-size takes the store's
    devs = _devices(devices if engine is None else None)
    chunk = chunk_size(len(members), default_chunk(devs) if chunk is None else chunk,
                       len(devs) if engine is None else 1)
    settings = store_settings(sc, args, st, ranges, fixed, members, chunk)
    if args.resume and held is None and not args.quiet:
        print(f"diffmb: --resume: no sweep in {args.out}; starting fresh", file=sys.stderr)
    done = sweep_store.open_store(args.out, settings, resume=args.resume)
    if done and not args.quiet:
        print(f"diffmb: resuming {args.out}: {len(done)} of {settings['chunks']} chunks finished, "
              f"running the other {settings['chunks'] - len(done)}", file=sys.stderr)

    def on_chunk(n, metrics):
        idx, real = chunk_members(n, chunk, len(members))
        idx = idx[real]
        sweep_store.write_chunk(args.out, n, sweep_store.chunk_columns(
            idx, metrics, [members[i] for i in idx], [conserved[i] for i in idx]))
    return {"done": done, "on_chunk": on_chunk, "chunk": chunk}


def _run(args, sc, members, conserved, store, engine, devices, st):
    """The sweep, in this process or on the Dask workers, stopped by Ctrl-C."""
    system, params = scenario_batch(sc, members, args.stabilization)
    stop_if_interrupted()
    common = dict(chunk=store["chunk"], progress=not args.quiet, members=members, conserved=conserved,
                  done=store["done"], on_chunk=store["on_chunk"], **st)
    with interrupts() as interrupted:
        if engine is None:
            return sweep(system, params, devices=devices, stop=interrupted, **common)
        from ..design import distributed

        return distributed.sweep(system, params, stop=interrupted, **engine, **common)


def _write_outputs(args, sc, res, cols, report, used, ranges):
    """The CSV, the store's consolidated table and summary, the plot; the plot's path."""
    if args.csv is not None and res.batch:
        res.write_csv(args.csv)
    if args.out is not None and not res.interrupted:
        sweep_store.consolidate(args.out, {"scenario": sc.name, "t1": res.t1, **used})
    if args.out is not None:
        write_json(args.out / "summary.json", {"scenario": sc.name, "requested": res.requested,
                                                 "finished": res.batch, "t1": res.t1, **used, **report})
    if args.plot is None or not res.batch:
        return None
    metric = sweep_report.pick_metric(cols, args.metric)
    return sweep_report.plot(cols, args.plot, swept=list(ranges), metric=metric,
                             grid=args.sampling == "grid", title=f"{sc.name}: {metric}")


def _device_kind() -> str:
    """What ran the members (``cpu``, ``NVIDIA H200``): a throughput is a figure of its device."""
    import jax

    return jax.devices()[0].device_kind


def _report_lines(args, res, cols, report, plotted) -> list:
    """The table, the throughput, the status counts and the members flagged."""
    lines = _table_lines(cols) if res.batch else []
    where = f"{res.workers} worker(s)" if res.workers else f"{res.devices} {_device_kind()} device(s)"
    ran = res.batch - res.resumed
    if ran:
        lines.append(f"{ran} members x {res.t1:g} s in {res.wall_s:.3g} s on {where} "
                     f"(+{res.compile_s:.1f} s compile): {res.throughput:.4g} member-seconds per second"
                     + (f"; {res.resumed} more read back from {args.out}" if res.resumed else ""))
    else:
        lines.append(f"{res.batch} members, all read back from {args.out}: nothing left to run")
    counts = ", ".join(f"{n} {k}" for k, n in report["status_counts"].items() if n)
    flagged = report["flagged"]
    lines.append(f"status: {counts}" + ("" if flagged else "; no member diverged or is suspect"))
    for f in flagged[:20]:
        values = ", ".join(f"{k}={v:.6g}" for k, v in f.items() if k not in ("member", "status"))
        lines.append(f"  member {f['member']}: {f['status']}" + (f" ({values})" if values else ""))
    if len(flagged) > 20:
        lines.append(f"  ... {len(flagged) - 20} more" + (f" (all in {args.out / 'summary.json'})"
                                                          if args.out is not None else ""))
    if plotted is not None:
        lines.append(f"plot: {plotted}")
    if args.out is not None:
        lines.append(f"table: {args.out / (sweep_store.MEMBERS if not res.interrupted else sweep_store.PARTS)}")
    return lines


def _table_lines(cols, n=20):
    """The first ``n`` members' rows of the table ``cols`` (its columns worth a reader's
    look: the members' values, then every metric that is a number for some member;
    ``--csv``/``--json``/``--out`` keep all of them), and the legend."""
    keys = [k for k in cols if k != "member"]
    # NaN: not measured; inf is a value (min_contact_gap: no pair armed all run)
    empty = [k for k in keys if k in METRICS and k != "status" and np.all(np.isnan(np.asarray(cols[k], float)))]
    keys = [k for k in keys if k not in empty]
    size = len(cols["member"])
    lines = ["  ".join(f"{k:>14}" for k in keys)]
    lines += ["  ".join(f"{_cell(cols[k][i]):>14}" for k in keys) for i in range(min(n, size))]
    if size > n:
        lines.append(f"  ... {size - n} more members")
    lines += [f"  {k}: {METRICS[k]}" for k in keys if k in METRICS]
    if empty:
        lines.append(f"  not shown, NaN for every member: {', '.join(empty)} "
                     f"({'; '.join(_why(k) for k in empty)})")
    return lines


def _why(key):
    return {"time_to_flat": "no member reached flat",
            "time_to_final": "the hinges still move at the end",
            "energy_drift": "no member conserves energy",
            "momentum_drift": "no member conserves angular momentum"}.get(key, "not measured")


def _cell(v):
    if isinstance(v, str):
        return v
    v = float(v)
    return "nan" if math.isnan(v) else f"{v:.6g}"
