"""``diffmb synth | tune | fit | sweep``: the design tools on the command line.

Parameter names are the scenario's ``--set`` names, shared by run / synth / tune / fit /
sweep (fold scenarios: ``K``, ``c``, ``a``, ``b``, ...; per hinge ``K.<coordinate>``).

``diffmb synth SCENARIO [--set ..] [--t1 --dt --solver] --noise SIGMA [--seed N] --out FILE``
    synthetic measurements (CSV or npz by extension): the hinge angles (or ``--columns``)
    at ``--samples`` times, Gaussian noise of ``SIGMA`` (rad).
``diffmb tune SCENARIO --params a,b [--steps N] [--t1 S] [--loss violation|deploy] [--json PATH]``
    -> JSON ``{initial: {params, loss}, final: {params, loss}, history: [...]}``.
``diffmb fit SCENARIO --data FILE --params K,c [--shooting S] [--json PATH]``
    -> JSON ``{params: {...}, stderr: {...}, rms: ...}``.
``diffmb sweep SCENARIO --batch N --set K=lo:hi [--set ...] [--devices all] [--json PATH] [--csv PATH]``
    -> per-member table + throughput (simulated seconds x members per wall second).
    ``--set NAME=lo:hi`` spreads NAME over the batch (``--sample linspace``: all ranged
    names move together from lo to hi, which is said on stderr when there are several;
    ``grid``: every combination, ``NAME=lo:hi:n`` points per axis; ``random``: independent
    uniform draws), ``--set NAME=v`` fixes it.

Bad input (unknown scenario or parameter, bad data file) prints one line and exits with 2.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from . import scenarios
from .integrate import FIXED_SOLVERS, SOLVERS


def scenario_args(p):
    """The positional ``SCENARIO`` and the repeatable ``--set NAME=VALUE`` every command takes."""
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="sets",
                   help="override a scenario parameter (repeatable)")


def _common(p, *, run=True):
    scenario_args(p)
    p.add_argument("--stabilization", choices=("none", "baumgarte", "projection"), default=None)
    if run:
        p.add_argument("--t1", type=float, metavar="S", help="end time [s] (default: the scenario's)")
        p.add_argument("--dt", type=float, metavar="S", help="fixed step [s]")
        p.add_argument("--solver", type=str.lower, choices=SOLVERS, metavar="NAME")
        p.add_argument("--rtol", type=float, metavar="X")
        p.add_argument("--atol", type=float, metavar="X")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def add_parsers(sub):
    s = sub.add_parser("synth", help="synthetic deployment data", description=(
        "Simulate a scenario and write sampled coordinates with Gaussian noise (CSV/npz)."))
    _common(s)
    s.add_argument("--noise", type=float, default=0.0, metavar="SIGMA", help="noise std (rad)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--samples", type=int, metavar="N", help="sample count (default: every 10 ms, <= 1001)")
    s.add_argument("--columns", metavar="A,B", help="state names to record (default: hinge angles)")
    s.add_argument("--out", type=Path, required=True, metavar="FILE", help="data file (.csv or .npz)")

    t = sub.add_parser("tune", help="tune parameters by gradient descent", description=(
        "Tune scenario parameters (e.g. Baumgarte gains a,b) with Adam on a loss of the run."))
    _common(t)
    t.add_argument("--params", required=True, metavar="A,B", help="parameters to tune")
    t.add_argument("--steps", type=int, default=50, metavar="N", help="optimiser iterations")
    t.add_argument("--lr", type=float, default=0.1, help="Adam learning rate (log space)")
    t.add_argument("--loss", choices=("violation", "deploy"), default="violation")
    t.add_argument("--w-energy", type=float, default=0.0, help="weight on energy drift")
    t.add_argument("--w-momentum", type=float, default=0.0, help="weight on angular-momentum drift")

    f = sub.add_parser("fit", help="fit parameters to deployment data", description=(
        "Levenberg-Marquardt fit of scenario parameters to a CSV/npz record."))
    _common(f)
    f.add_argument("--data", type=Path, required=True, metavar="FILE")
    f.add_argument("--params", required=True, metavar="K,c", help="parameters to fit")
    f.add_argument("--columns", metavar="A,B", help="data columns to fit (default: every column the "
                   "scenario's records hold, the hinge angles; one missing from the file is an error)")
    f.add_argument("--shooting", type=int, default=1, metavar="S", help="multiple-shooting segments")
    f.add_argument("--iterations", type=int, default=30, metavar="N")

    w = sub.add_parser("sweep", help="batch-simulate a parameter sweep", description=(
        "vmapped batch simulation over parameter ranges; per-member metrics table."))
    _common(w)
    w.add_argument("--batch", type=int, metavar="N",
                   help="members (with --sample grid and NAME=lo:hi:n on every axis: their product)")
    w.add_argument("--sample", choices=("linspace", "grid", "random"), default="linspace",
                   help="linspace: ranged names move together (the diagonal); grid: every "
                        "combination; random: independent uniform draws")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--chunk", type=int, metavar="N", help="members per compiled call (default 32 on a CPU, 8192 per GPU)")
    w.add_argument("--devices", default=None, metavar="all|N", help="shard over devices")
    w.add_argument("--csv", type=Path, metavar="PATH", help="write the per-member table as CSV")


def _names(text, flag="--params"):
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not names:
        from .cli import UsageError

        raise UsageError(f"{flag}: give at least one parameter name")
    return names


def _settings(args, sc):
    from .cli import _positive

    solver = args.solver or sc.solver
    dt = _positive("dt", args.dt)
    if dt is None and solver in FIXED_SOLVERS:
        dt = float(sc.dt)
    return dict(t1=_positive("t1", args.t1 if args.t1 is not None else sc.t1), dt=dt, solver=solver,
                rtol=_positive("rtol", args.rtol if args.rtol is not None else sc.rtol),
                atol=_positive("atol", args.atol if args.atol is not None else sc.atol))


def _emit(args, obj, lines):
    from .cli import _write_json

    if args.json is not None:
        _write_json(args.json, obj)
    if not args.quiet:
        print("\n".join(lines))


def cmd_synth(args) -> int:
    from .cli import parse_sets
    from .data import write_data
    from .fit import synth

    sc = scenarios.get(args.scenario)
    st = _settings(args, sc)
    cols = _names(args.columns, "--columns") if args.columns else None
    data, tr = synth(sc, parse_sets(args.sets), stabilization=args.stabilization, columns=cols,
                     samples=args.samples, noise=args.noise, seed=args.seed, **st)
    path = write_data(args.out, data, tr_system(sc, args))
    obj = {"scenario": sc.name, "file": str(path), "columns": list(data.names),
           "samples": int(data.t.size), "noise": args.noise, "seed": args.seed,
           "parameters": sc.resolve(parse_sets(args.sets))}
    _emit(args, obj, [f"wrote {path}: {data.t.size} samples of {', '.join(data.names)} (noise {args.noise:g})"])
    return 0


def tr_system(sc, args):
    from .cli import parse_sets

    system, _, _ = sc.make(parse_sets(args.sets), args.stabilization)
    return system


def cmd_tune(args) -> int:
    from .cli import parse_sets
    from .tune import tune

    sc = scenarios.get(args.scenario)
    st = _settings(args, sc)
    if args.steps < 1:
        from .cli import UsageError

        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    names = _names(args.params)

    def show(i, loss, p):
        if not args.quiet:
            print(f"  {i:4d}  loss {loss:.6e}  " + "  ".join(f"{k}={v:.6g}" for k, v in p.items()),
                  file=sys.stderr, flush=True)

    res = tune(sc, names, overrides=parse_sets(args.sets), stabilization=args.stabilization,
               steps=args.steps, learning_rate=args.lr, loss=args.loss,
               loss_weights=({"w_energy": args.w_energy, "w_momentum": args.w_momentum}
                             if args.loss == "violation" else None), callback=show, **st)
    obj = {"scenario": sc.name, **res.to_json()}
    if res.stopped == "floor" and not res.history:
        _emit(args, obj, [f"loss {res.initial_loss:.3e} at " + _fmt(res.initial) + " is already at the "
                          f"integrator's floor ({res.floor:.3e}: the run's own step-halving error): "
                          f"the constraints are held below what the integrator resolves; nothing "
                          f"to tune (a smaller --dt lowers the floor)"])
        return 0
    ratio = res.initial_loss / res.best_loss if res.best_loss > 0 else math.inf
    why = (f"reached the integrator's floor {res.floor:.3e}" if res.stopped == "floor" else res.stopped)
    _emit(args, obj, [f"initial loss {res.initial_loss:.6e} at " + _fmt(res.initial),
                      f"best    loss {res.best_loss:.6e} at " + _fmt(res.best),
                      f"reduction {ratio:.3g}x in {len(res.history)} iterations ({why}); "
                      f"{res.wall_s:.1f} s + {res.compile_s:.1f} s compile"])
    return 0


def _fmt(d):
    return ", ".join(f"{k}={v:.6g}" for k, v in d.items())


def cmd_fit(args) -> int:
    from .cli import UsageError, parse_sets
    from .data import default_columns, read_data
    from .fit import fit

    sc = scenarios.get(args.scenario)
    st = _settings(args, sc)
    names = _names(args.params)
    system = tr_system(sc, args)
    data = read_data(args.data, system)
    expected = _names(args.columns, "--columns") if args.columns else default_columns(system)
    missing = [c for c in expected if c not in data.names]
    if missing:
        raise UsageError(f"{args.data}: column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"missing (the file has {', '.join(data.names)}); give --columns "
                         f"{','.join(c for c in expected if c in data.names) or 'NAMES'} to fit a subset")
    if args.columns:
        data = data.select(expected)
    res = fit(sc, data, names, overrides=parse_sets(args.sets), stabilization=args.stabilization,
              dt=st["dt"], solver=st["solver"], rtol=st["rtol"], atol=st["atol"],
              shooting=args.shooting, max_iterations=args.iterations)
    obj = {"scenario": sc.name, "data": str(args.data), **res.to_json()}
    lines = [f"{n:>10} = {res.params[n]:.8g} +- {res.stderr[n]:.2g}   (start {res.initial[n]:.6g})"
             for n in res.names]
    lines.append(f"rms {res.rms:.3e} (start {res.initial_rms:.3e}), {res.iterations} iterations, "
                 f"{'converged' if res.converged else 'not converged'}")
    _emit(args, obj, lines)
    return 0


def _ranges(sets):
    from .cli import UsageError

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
    from .cli import parse_sets

    ranges = _ranges(parse_sets(args.sets))[0]
    return bool(ranges) and all(len(r) == 3 for r in ranges.values())


def cmd_sweep(args) -> int:
    from .batch import member_values, scenario_batch, sweep
    from .cli import UsageError, parse_sets

    sc = scenarios.get(args.scenario)
    st = _settings(args, sc)
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
    res = sweep(system, params, chunk=args.chunk, devices=devices, progress=not args.quiet,
                members=members, **st)
    if args.csv is not None:
        res.write_csv(args.csv)
    obj = {"scenario": sc.name, **res.to_json()}
    rows = res.rows()
    keys = list(rows[0])
    head = "  ".join(f"{k:>14}" for k in keys)
    lines = [head] + ["  ".join(f"{_cell(r[k]):>14}" for k in keys) for r in rows[:20]]
    if len(rows) > 20:
        lines.append(f"  ... {len(rows) - 20} more members")
    lines.append(f"{res.batch} members x {res.t1:g} s in {res.wall_s:.3g} s on {res.devices} device(s) "
                 f"(+{res.compile_s:.1f} s compile): {res.throughput:.4g} member-seconds per second")
    counts = ", ".join(f"{n} {k}" for k, n in res.status_counts.items() if n)
    bad = res.diverged()
    lines.append(f"status: {counts}" + (f"; diverged members: {bad[:20]}{' ...' if len(bad) > 20 else ''}"
                                        if bad else "; no member diverged"))
    _emit(args, obj, lines)
    return 0


def _cell(v):
    if isinstance(v, str):
        return v
    return "nan" if not math.isfinite(v) else f"{v:.6g}"


COMMANDS = {"synth": cmd_synth, "tune": cmd_tune, "fit": cmd_fit, "sweep": cmd_sweep}


def run(command, args) -> int:
    """Run a design command, turning bad input into one line and exit code 2."""
    from .cli import UsageError, _fail, check_outputs

    try:
        check_outputs(json_path=getattr(args, "json", None),
                      files=[("--csv", getattr(args, "csv", None)),
                             ("--out", args.out if command == "synth" else None)])
        return COMMANDS[command](args)
    except (ValueError, TypeError, UsageError, json.JSONDecodeError) as e:
        return _fail(e)
