"""The ``diffmb`` command line: list scenarios, run one, write npz / CSV / JSON / plots.

``diffmb list``
    The registered scenarios (name, description, paper).
``diffmb run SCENARIO [options]``
    Simulate a scenario with its default settings, overridden by options and
    ``--set NAME=VALUE``. See ``diffmb run --help``.
``diffmb synth | tune | fit | sweep SCENARIO ...``
    The design tools (:mod:`diffmb.cli_design`).

How a run works
---------------
The horizon ``[0, t1]`` is split into ``N`` chunks of equal length. Every chunk is one
jitted :func:`~diffmb.integrate.simulate` call with the same save-grid length and the same
``max_steps``; ``t0``, ``t1`` and ``x0`` are passed as numbers, so only the first chunk
compiles. Default ``N``: the fewest chunks such that every chunk covers at most ~1000
fixed steps or at most 1/20 of the horizon (so at most 20 chunks; a count that divides
the number of steps is preferred, keeping chunk ends on step ends); 20 chunks for
adaptive solvers.

After every chunk the run so far is written atomically to ``<out>/<scenario>.partial.npz``
(``complete=False`` in its metadata). Ctrl-C keeps that file (exit code 130; the chunk
in flight finishes first, a second Ctrl-C stops at once) and ``--resume`` continues from
it when its scenario, parameters, solver, dt, t1 (and stabilization, rtol, atol and
chunk count) match; when they do not, ``--resume`` is refused (exit 2, naming what
differs) unless ``--discard`` is given. Output paths are checked before any work. At the end ``<out>/<scenario>.npz``
(``complete=True``), ``<out>/<scenario>.csv`` and the plots ``<out>/<scenario>_*.png``
are written and the partial file is removed (``--animate``: also ``<out>/<scenario>.gif``,
origami scenarios only). A chunk that ends with an event or a
divergence stops the run: what was computed is kept and written as usual.

Timing: ``compile_s`` is the ahead-of-time compile of the chunk (trace, lower, XLA
compile: :func:`~diffmb.integrate.compile_simulation`), done once before the first
chunk; ``wall_s`` is the time of the compiled chunks, i.e. the simulation alone. Nothing
is run twice. File writing and plotting are not included. After ``--resume`` both cover
only this process, while ``steps`` counts the whole trajectory.

Status: ``success`` (reached ``t1``), ``suspect`` (reached ``t1``, but the energy or
angular momentum jumped in one save interval: :mod:`diffmb.health`; the JSON's
``warnings`` say where and by how much, and they are printed), ``event`` (a termination event stopped it) or
``diverged`` (non-finite state, violation above bound, step-size collapse — and also
diffrax's ``max_steps``, which a fixed-step chunk never reaches and an adaptive chunk
reaches only when its step size has collapsed). Exit code 0 for ``success``,
``suspect`` and ``event``, 1 for ``diverged``, 2 for bad input, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jax
from tqdm.auto import tqdm

from . import __version__, cli_design, health, scenarios
from .integrate import FIXED_SOLVERS, SOLVERS, compile_simulation, save_grid
from . import trajectory
from .trajectory import Trajectory, concatenate

DEFAULT_OUT = "out"
STABILIZATIONS = ("none", "baumgarte", "projection")
MAX_STEPS_PER_CHUNK = 1000
MAX_DEFAULT_CHUNKS = 20
ADAPTIVE_SAVE_POINTS = 1000

#: Test seam: when set, called as ``_after_chunk(index, trajectory_so_far)`` after chunk
#: ``index`` (0-based) has been run and the partial file written.
_after_chunk: Callable | None = None

#: Set by the console script: whether a Ctrl-C arrived before the run's own handler was
#: in place (its first Ctrl-C only sets a flag, see ``diffmb_cli``).
_pending_interrupt: Callable = lambda: False  # noqa: E731


class UsageError(Exception):
    """Bad command-line input: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message
        raise UsageError(message)


# --------------------------------------------------------------------------- parsing
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="diffmb", description="Differentiable multibody dynamics: run the papers' cases.")
    p.add_argument("--version", action="version", version=f"diffmb {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("list", help="list the scenarios", description="List the registered scenarios.")
    r = sub.add_parser("run", help="simulate a scenario", description=(
        "Simulate a scenario (defaults from the scenario; see `diffmb list`). Writes "
        "<out>/<scenario>.npz, .csv and plots; --json writes a summary."))
    cli_design.scenario_args(r)
    r.add_argument("--closures", metavar="LOOPS.json",
                   help="with a .urdf model: a loop file (closures and the initial state)")
    r.add_argument("--key", metavar="NAME", help="with an MJCF (.xml) model: the keyframe to start from "
                   "(default: the first)")
    r.add_argument("--t1", type=float, metavar="S", help="end time [s]")
    r.add_argument("--dt", type=float, metavar="S",
                   help="step [s] (fixed-step solvers) or first step (adaptive)")
    r.add_argument("--solver", type=str.lower, choices=SOLVERS, metavar="NAME",
                   help=f"one of {', '.join(SOLVERS)}")
    r.add_argument("--rtol", type=float, metavar="X", help="relative tolerance (adaptive)")
    r.add_argument("--atol", type=float, metavar="X", help="absolute tolerance (adaptive)")
    r.add_argument("--stabilization", choices=STABILIZATIONS, default=None,
                   help="constraint stabilization (scenarios with loop closures; default: the scenario's)")
    r.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), metavar="DIR",
                   help=f"output folder (default: {DEFAULT_OUT})")
    r.add_argument("--json", type=Path, metavar="PATH", help="write a JSON summary here")
    r.add_argument("--no-plot", action="store_true", help="do not write plots")
    r.add_argument("--animate", action="store_true",
                   help="write <out>/<scenario>.gif, a 3-D animation (origami scenarios)")
    r.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    r.add_argument("--chunks", type=int, metavar="N", help="number of chunks (default: automatic)")
    r.add_argument("--resume", action="store_true",
                   help="continue from <out>/<scenario>.partial.npz; refused (exit 2) when its "
                        "settings differ from this run's")
    r.add_argument("--discard", action="store_true",
                   help="with --resume: start fresh when the partial file does not match "
                        "(it is replaced)")
    lz = sub.add_parser("linearize", help="linearize a tensegrity scenario", description=(
        "Linearize a tensegrity scenario about its static equilibrium (Hsu et al. sections 2.5, "
        "3.3): minimal realization, eigenvalues, H2 and H-infinity norms."))
    cli_design.scenario_args(lz)
    lz.add_argument("--json", type=Path, metavar="PATH", help="write {A_shape, eigenvalues, h2_norm, hinf_norm} here")
    # checked by tensegrity_linear.io_matrices (one list of names; an unknown one exits 2)
    lz.add_argument("--inputs", default="force_densities", metavar="force_densities|forces",
                    help="norm inputs: string/bar force densities (the paper's B_u) or node forces (B_f)")
    lz.add_argument("--outputs", default="state", metavar="state|positions",
                    help="norm outputs: the whole state (the paper's y = x) or node positions")
    cli_design.add_parsers(sub)
    rc = sub.add_parser("reconfig", help="build a reconfiguration graph (UK scenarios)", description=(
        "Explore the reconfiguration graph of a Udwadia-Kalaba scenario (Shoer & Peck section IV): "
        "writes <out>/<scenario>.graphml and .png; --json writes {nodes, edges, graph_file}."))
    cli_design.scenario_args(rc)
    rc.add_argument("--json", type=Path, metavar="PATH", help="write the graph as JSON here")
    rc.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), metavar="DIR",
                    help=f"output folder (default: {DEFAULT_OUT})")
    return p


def parse_sets(items) -> dict:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"--set {item!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


# --------------------------------------------------------------------------- resolve
@dataclass
class RunConfig:
    name: str
    system: object
    params: object
    values: dict
    t1: float
    dt: float | None
    solver: str
    rtol: float
    atol: float
    stabilization: str
    out: Path
    json_path: Path | None
    plot: bool
    quiet: bool
    chunks: int
    chunks_given: bool
    resume: bool
    animate: bool = False
    discard: bool = False
    conserved: tuple | None = None  # diagnostics the physics conserves (health checks)

    @property
    def partial_path(self) -> Path:
        return self.out / f"{self.name}.partial.npz"

    def meta(self, **extra) -> dict:
        return {"scenario": self.name, "parameters": self.values, "solver": self.solver,
                "dt": self.dt, "rtol": self.rtol, "atol": self.atol, "t1": self.t1,
                "stabilization": self.stabilization, "chunks": self.chunks, **extra}


def _positive(name, v):
    if v is not None and not (math.isfinite(v) and v > 0):
        raise UsageError(f"--{name} must be a positive number, got {v:g}")
    return v


def resolve(args) -> RunConfig:
    """Scenario defaults + options -> a validated RunConfig (ValueError/UsageError on bad input)."""
    sc = scenarios.get(args.scenario, closures=getattr(args, "closures", None), key=getattr(args, "key", None))
    stabilization = args.stabilization or sc.stabilization
    system, params, values = sc.make(parse_sets(args.sets), stabilization)
    solver = args.solver or sc.solver
    t1 = _positive("t1", args.t1 if args.t1 is not None else sc.t1)
    dt = _positive("dt", args.dt)
    if dt is None and solver in FIXED_SOLVERS:
        dt = float(sc.dt)
    rtol = _positive("rtol", args.rtol if args.rtol is not None else sc.rtol)
    atol = _positive("atol", args.atol if args.atol is not None else sc.atol)
    if dt is not None and dt > t1:
        raise UsageError(f"--dt {dt:g} s is longer than the run (--t1 {t1:g} s): one step would "
                         f"span the whole motion; give a step well below t1")
    if args.chunks is not None and args.chunks < 1:
        raise UsageError(f"--chunks must be at least 1, got {args.chunks}")
    check_outputs(out_dir=args.out, json_path=args.json)
    chunks = args.chunks or default_chunks(t1, dt if solver in FIXED_SOLVERS else None)
    return RunConfig(
        name=sc.name, system=system, params=params, values=values, t1=float(t1), dt=dt,
        solver=solver, rtol=float(rtol), atol=float(atol), stabilization=stabilization,
        out=args.out, json_path=args.json, plot=not args.no_plot, quiet=args.quiet,
        chunks=int(chunks), chunks_given=args.chunks is not None, resume=args.resume,
        animate=bool(getattr(args, "animate", False)), discard=bool(getattr(args, "discard", False)),
        conserved=tuple(sc.conserved(values)),
    )


def check_outputs(*, out_dir: Path | None = None, json_path: Path | None = None, files=()):
    """Refuse, before any work, output paths that cannot be written (UsageError).

    ``out_dir`` must be a folder (it is created) that accepts files; ``json_path`` and
    every ``(flag, path)`` of ``files`` must not be a folder, and their folder must
    accept files.
    """
    def writable_dir(d: Path, flag: str):
        if d.exists() and not d.is_dir():
            raise UsageError(f"{flag} {d}: exists and is not a folder")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{flag} {d}: cannot create the folder ({e.strerror or e})") from None
        if not os.access(d, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {d}: the folder is not writable")

    if out_dir is not None:
        writable_dir(Path(out_dir), "--out")
    for flag, path in ([("--json", json_path)] + list(files)):
        if path is None:
            continue
        path = Path(path)
        if path.is_dir():
            raise UsageError(f"{flag} {path}: is a folder; give a file name inside it")
        writable_dir(path.parent, flag)
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: the file exists and is not writable")


def default_chunks(t1: float, dt: float | None) -> int:
    """Fewest chunks with each <= ~MAX_STEPS_PER_CHUNK steps or <= 1/20 of the horizon."""
    if dt is None:
        return MAX_DEFAULT_CHUNKS
    steps = max(1, round(t1 / dt))
    target = min(math.ceil(steps / MAX_STEPS_PER_CHUNK), MAX_DEFAULT_CHUNKS)
    for n in range(target, 2 * target + 1):  # prefer chunk ends on step ends
        if steps % n == 0:
            return n
    return target


# --------------------------------------------------------------------------- run
@dataclass
class RunResult:
    traj: object = None
    chunks_done: int = 0
    times: list = field(default_factory=list)
    compile_s: float = 0.0
    wall_s: float = 0.0
    interrupted: bool = False


def _chunk_settings(cfg: RunConfig) -> dict:
    """Steps, save-point count and max_steps, identical for every chunk (one compilation).

    Fixed-step chunks take ``S = ceil(L / dt)`` equal steps of ``(t1_k - t0_k) / S`` (what
    diffrax's ConstantStepSize does for one run of length ``L``). Passing that step rather
    than ``dt`` itself matters: diffrax counts ``ceil((t1 - t0) / nextafter(dt))`` steps,
    and a chunk such as ``[0.2, 0.30000000000000004]`` with ``dt = 1e-3`` would otherwise
    take 101 steps of 0.99 ms.
    """
    length = cfg.t1 / cfg.chunks
    if cfg.dt is None or cfg.solver not in FIXED_SOLVERS:
        return {"steps": None, "saveat": max(11, ADAPTIVE_SAVE_POINTS // cfg.chunks + 1),
                "max_steps": None}
    steps = max(1, math.ceil(length / cfg.dt * (1 - 1e-12)))
    return {"steps": steps, "saveat": int(save_grid(0.0, length, length / steps, None).size),
            "max_steps": 1 << max(4, math.ceil(math.log2(steps + 2)))}


def _note(cfg: RunConfig, msg: str):
    if not cfg.quiet:
        print(f"diffmb: {msg}", file=sys.stderr)


def load_partial(cfg: RunConfig):
    """``(trajectory, chunks_done)`` from a matching partial file, else ``(None, 0)``."""
    path = cfg.partial_path
    if not path.exists():
        _note(cfg, f"--resume: no partial file {path}; starting fresh")
        return None, 0
    try:
        traj, meta = Trajectory.load(path)
    except ValueError as e:
        _note(cfg, f"--resume: {e}; starting fresh")
        return None, 0
    if not cfg.chunks_given and isinstance(meta.get("chunks"), int):
        cfg.chunks = meta["chunks"]
    want = cfg.meta()
    diff = [k for k in want if meta.get(k) != want[k]]
    done = meta.get("chunks_done")
    if diff or meta.get("complete") or traj.status != "success" or not isinstance(done, int):
        why = (", ".join(f"{k} {meta.get(k)!r} there, {want[k]!r} here" for k in diff) if diff
               else "it is not a resumable partial run")
        if not cfg.discard:
            raise UsageError(f"--resume: {path} does not match this run ({why}); run with the same "
                             f"settings, or add --discard to replace it")
        _note(cfg, f"--resume --discard: {path} does not match this run ({why}); starting fresh")
        return None, 0
    _note(cfg, f"resuming from {path} at t = {float(traj.t_final):.6g} s")
    return traj, done


def _chunk_args(cfg, settings, k, x0) -> dict:
    t0, t1 = cfg.t1 * k / cfg.chunks, cfg.t1 * (k + 1) / cfg.chunks
    dt = cfg.dt if settings["steps"] is None else (t1 - t0) / settings["steps"]
    return dict(t0=t0, t1=t1, x0=x0, params=cfg.params, dt=dt, solver=cfg.solver, rtol=cfg.rtol,
                atol=cfg.atol, saveat=settings["saveat"], max_steps=settings["max_steps"])


def _progress(cfg, start_t):
    return tqdm(total=cfg.t1, initial=start_t, disable=cfg.quiet, desc=cfg.name, file=sys.stderr,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| t = {n:.4g}/{total:.4g} s "
                           "[{elapsed}<{remaining}]")


def run_chunks(cfg: RunConfig, start: tuple | None = None) -> RunResult:
    """Compile once ahead of time, then run the chunks, saving the partial file after each;
    stops early on event/divergence, or after the chunk in flight when interrupted.
    ``start``: ``(trajectory, chunks_done)`` of a resumed run (default: read with
    :func:`load_partial` when ``cfg.resume``)."""
    res = RunResult()
    if start is None:
        start = load_partial(cfg) if cfg.resume else (None, 0)
    res.traj, res.chunks_done = start
    settings = _chunk_settings(cfg)
    bar = None
    try:
        with _interrupts() as interrupted:
            x0 = cfg.system.init_state(cfg.params) if res.traj is None else res.traj.x_final
            bar = _progress(cfg, cfg.t1 * res.chunks_done / cfg.chunks)
            run = None
            for k in range(res.chunks_done, cfg.chunks):
                args = _chunk_args(cfg, settings, k, x0)
                if run is None:
                    run, res.compile_s = compile_simulation(cfg.system, **args)
                if interrupted():
                    raise KeyboardInterrupt
                start = time.perf_counter()
                tr = jax.block_until_ready(run(**args))
                res.times.append(time.perf_counter() - start)
                res.traj = tr if res.traj is None else concatenate([res.traj, tr])
                res.chunks_done = k + 1
                save_partial(cfg, res)
                bar.update(float(tr.t_final) - bar.n)
                if _after_chunk is not None:
                    _after_chunk(k, res.traj)
                if interrupted():
                    raise KeyboardInterrupt
                if tr.status != "success":
                    break
                x0 = tr.x_final
    except KeyboardInterrupt:
        res.interrupted = True
    finally:
        if bar is not None:
            bar.close()
    res.wall_s = sum(res.times)
    return res


@contextlib.contextmanager
def _interrupts():
    """Ctrl-C sets a flag checked between chunks (a signal that arrives while XLA runs is
    otherwise delivered inside a host callback, where it can be swallowed); a second
    Ctrl-C interrupts at once."""
    hits = []

    def handler(signum, frame):
        hits.append(signum)
        if len(hits) > 1:
            raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield lambda: False
        return
    try:
        yield lambda: bool(hits) or _pending_interrupt()
    finally:
        signal.signal(signal.SIGINT, old)


def save_partial(cfg: RunConfig, res: RunResult):
    res.traj.save(cfg.partial_path, meta=cfg.meta(complete=False, chunks_done=res.chunks_done))


# --------------------------------------------------------------------------- outputs
def json_status(traj, warnings=()) -> str:
    """``success`` | ``suspect`` (reached t1, but a health check failed: see ``warnings``)
    | ``event`` | ``diverged`` (diffrax's max_steps counts as diverged)."""
    s = traj.status
    if s == "success" and warnings:
        return "suspect"
    return s if s in ("success", "event") else "diverged"


def report(cfg: RunConfig, res: RunResult) -> dict:
    """The ``--json`` object (see the module docstring). Every key is always present:
    ``null`` where it does not apply (no momentum, no constraints) or is not a finite
    number (a diverged state)."""
    traj = res.traj
    summ = traj.summary()
    conserved = getattr(cfg, "conserved", None) or ()
    warnings = health.check(traj, conserved, energy_name=summ.get("energy", {}).get("quantity", "energy"))
    v = summ.get("violation")
    out = {
        "scenario": cfg.name,
        "t1": cfg.t1,
        "dt": cfg.dt,
        "solver": cfg.solver,
        "steps": int(traj.n_steps),
        "wall_s": res.wall_s,
        "compile_s": res.compile_s,
        "energy": summ.get("energy"),
        "angular_momentum": ({"max_abs_change": summ["angular_momentum"]["max_abs_change"]}
                             if "angular_momentum" in summ else None),
        "violation": (None if v is None else
                      {"position_max": v.get("position_max"), "velocity_max": v.get("velocity_max")}),
        "final": traj.final,
        "status": json_status(traj, warnings),
        "warnings": warnings,
    }
    return _finite(out)


def _finite(obj):
    """``obj`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _write_json(path: Path, obj: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(obj), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def write_outputs(cfg: RunConfig, res: RunResult) -> tuple[dict, list[Path]]:
    """Final npz + CSV (+ plots, + JSON); removes the partial file."""
    traj = res.traj
    files = [traj.save(cfg.out / f"{cfg.name}.npz",
                       meta=cfg.meta(complete=True, chunks_done=res.chunks_done))]
    cfg.partial_path.unlink(missing_ok=True)
    files.append(traj.to_csv(cfg.out / f"{cfg.name}.csv"))
    if cfg.plot:
        from .plot import plot_trajectory

        files += plot_trajectory(traj, cfg.out, title=cfg.name, prefix=f"{cfg.name}_", system=cfg.system)
    if cfg.animate:
        from .origami.animate import animate_scenario

        files += [p for p in [animate_scenario(cfg.name, cfg.values, cfg.system, traj, cfg.out)] if p]
    obj = report(cfg, res)
    if cfg.json_path is not None:
        _write_json(cfg.json_path, obj)
        files.append(cfg.json_path)
    return obj, files


def print_summary(cfg: RunConfig, res: RunResult, obj: dict, files: list[Path]):
    traj = res.traj
    e, v = obj.get("energy"), obj.get("violation")
    rows = [
        ("status", f"{obj['status']} ({traj.message})"),
        ("t reached", f"{float(traj.t_final):.6g} s of {cfg.t1:.6g} s"),
        ("steps", f"{obj['steps']} ({cfg.solver}, dt = {cfg.dt if cfg.dt is not None else 'adaptive'}, "
                  f"{res.chunks_done} chunk{'s' if res.chunks_done != 1 else ''})"),
        ("wall", f"{res.wall_s:.3g} s simulation"),
        ("compile", f"{res.compile_s:.3g} s"),
        ("energy", "n/a" if e is None else
         f"max |E - E0| = {e['max_abs_change']:.3g}" + (
             f" (relative {e['max_rel_change']:.3g})" if e["max_rel_change"] is not None else
             " (E0 = 0: no relative change)") + (
             f"; tracked: {e['quantity']}" if e["quantity"] != trajectory.ENERGY else "")),
    ]
    if obj["angular_momentum"] is not None:
        rows.append(("momentum", f"max |h - h0| = {obj['angular_momentum']['max_abs_change']:.3g}"))
    rows.append(("violation", "no constraints" if v is None else
                 ", ".join(f"{k} {x:.3g}" for k, x in v.items() if x is not None)))
    rows += [("warning", w["message"]) for w in obj["warnings"]]
    rows.append(("files", f"{cfg.out}/: " + ", ".join(
        str(p.relative_to(cfg.out)) if p.is_relative_to(cfg.out) else str(p) for p in files)))
    print(_table(rows, header=None))


def _table(rows, header=None) -> str:
    rows = ([header] if header else []) + [tuple(r) for r in rows]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + str(r[-1]) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


# --------------------------------------------------------------------------- commands
def cmd_list() -> int:
    rows = [(s.name, s.description, s.paper) for s in sorted(scenarios.REGISTRY.values(), key=lambda s: s.name)]
    print(_table(rows, header=("NAME", "DESCRIPTION", "PAPER")))
    return 0


def cmd_run(args) -> int:
    try:
        cfg = resolve(args)
        start = load_partial(cfg) if cfg.resume else (None, 0)
    except (ValueError, TypeError, UsageError) as e:
        return _fail(e)
    if _pending_interrupt():
        raise KeyboardInterrupt
    res = run_chunks(cfg, start)
    if res.interrupted:
        where = (f"partial results up to t = {float(res.traj.t_final):.6g} s kept in {cfg.partial_path}; "
                 f"continue with --resume") if res.traj is not None else "nothing was saved"
        print(f"diffmb: interrupted; {where}", file=sys.stderr)
        return 130
    obj, files = write_outputs(cfg, res)
    if obj["status"] == "suspect":
        for w in obj["warnings"]:
            print(f"diffmb: warning: {w['message']}", file=sys.stderr)
    elif obj["status"] != "success":
        print(f"diffmb: {res.traj.message}", file=sys.stderr)
    if not cfg.quiet:
        print_summary(cfg, res, obj, files)
    return 1 if obj["status"] == "diverged" else 0


def cmd_linearize(args) -> int:
    """``diffmb linearize SCENARIO [--set k=v] [--json PATH]`` (tensegrity scenarios)."""
    from .formulations.tensegrity import TensegritySystem
    from .formulations.tensegrity_linear import linearize_report

    try:
        check_outputs(json_path=args.json)
        sc = scenarios.get(args.scenario)
        system, params, _ = sc.make(parse_sets(args.sets))
        if not isinstance(system, TensegritySystem):
            raise UsageError(f"scenario {sc.name!r} is not a tensegrity scenario; linearize supports "
                             f"{', '.join(n for n in sorted(scenarios.REGISTRY) if 'tbar' in n or 'tensegrity' in n)}")
        obj = {"scenario": sc.name, **linearize_report(system, params, inputs=args.inputs,
                                                         outputs=args.outputs)}
    except (ValueError, TypeError, UsageError) as e:
        return _fail(e)
    if args.json is not None:
        _write_json(args.json, obj)
    fmt = lambda v: "inf" if v is None else f"{v:.6g}"  # noqa: E731
    rows = [("A", f"{obj['A_shape'][0]} x {obj['A_shape'][1]} (minimal order {obj['minimal_order']})"),
            ("H2 norm", fmt(obj["h2_norm"])), ("Hinf norm", fmt(obj["hinf_norm"]))]
    if obj.get("norms_infinite_because"):
        rows.append(("why inf", obj["norms_infinite_because"]))
    print(_table(rows))
    return 0


def cmd_reconfig(args) -> int:
    """``diffmb reconfig SCENARIO [--set k=v] [--json PATH] [--out DIR]`` (UK scenarios)."""
    from . import reconfig

    try:
        check_outputs(out_dir=args.out, json_path=args.json)
        sc = scenarios.get(args.scenario)
        overrides = sc.resolve(parse_sets(args.sets))
        obj = reconfig.run(sc.name, out=args.out, json_path=args.json,
                           overrides={k: overrides[k] for k in parse_sets(args.sets)})
    except (ValueError, TypeError, UsageError) as e:
        return _fail(e)
    print(_table([("nodes", str(len(obj["nodes"]))), ("edges", str(len(obj["edges"]))),
                  ("rejected", ", ".join(f"{k} {v}" for k, v in obj["rejected"].items()) or "none"),
                  ("graph", str(obj["graph_file"]))]))
    return 0


def _fail(err) -> int:
    msg = " ".join(str(err).split()) or type(err).__name__
    print(f"diffmb: error: {msg}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    """Entry point of the ``diffmb`` console script; returns the exit code (130 on Ctrl-C).
    Warnings (a model file's notes, inertia placeholders) print as one line each."""
    fmt = warnings.formatwarning
    warnings.formatwarning = lambda message, *args, **kwargs: f"diffmb: warning: {message}\n"
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("diffmb: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = fmt


def _main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        return _fail(e)
    except SystemExit as e:  # --help / --version
        return e.code if isinstance(e.code, int) else 0
    if args.command == "list":
        return cmd_list()
    if args.command == "run":
        return cmd_run(args)
    if args.command == "linearize":
        return cmd_linearize(args)
    if args.command == "reconfig":
        return cmd_reconfig(args)
    if args.command in cli_design.COMMANDS:
        return cli_design.run(args.command, args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
