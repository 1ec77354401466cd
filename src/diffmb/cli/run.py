"""``diffmb run SCENARIO|MODEL-FILE [options]``: simulate, write npz / CSV / JSON / plots.

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

import contextlib
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jax
from tqdm.auto import tqdm

from .. import health, scenarios, trajectory
from ..integrate import FIXED_SOLVERS, compile_simulation, save_grid
from ..scenarios.origami import outlines
from ..system import STABILIZATIONS
from ..trajectory import Trajectory, concatenate
from . import _common
from ._common import (DEFAULT_OUT, UsageError, check_outputs, fail, finite, parse_sets, run_args,
                      run_settings, scenario_args, table, write_json)

MAX_STEPS_PER_CHUNK = 1000
MAX_DEFAULT_CHUNKS = 20
ADAPTIVE_SAVE_POINTS = 1000

#: Test seam: when set, called as ``_after_chunk(index, trajectory_so_far)`` after chunk
#: ``index`` (0-based) has been run and the partial file written.
_after_chunk: Callable | None = None


def add_parser(sub):
    r = sub.add_parser("run", help="simulate a scenario", description=(
        "Simulate a scenario (defaults from the scenario; see `diffmb list`). Writes "
        "<out>/<scenario>.npz, .csv and plots; --json writes a summary."))
    scenario_args(r)
    r.add_argument("--closures", metavar="LOOPS.json",
                   help="with a .urdf model: a loop file (closures and the initial state)")
    r.add_argument("--key", metavar="NAME", help="with an MJCF (.xml) model: the keyframe to start from "
                   "(default: the first)")
    run_args(r, help_dt="step [s] (fixed-step solvers) or first step (adaptive)")
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


def resolve(args) -> RunConfig:
    """Scenario defaults + options -> a validated RunConfig (ValueError/UsageError on bad input)."""
    sc = scenarios.get(args.scenario, closures=getattr(args, "closures", None), key=getattr(args, "key", None))
    stabilization = args.stabilization or sc.stabilization
    system, params, values = sc.make(parse_sets(args.sets), stabilization)
    st = run_settings(args, sc)
    t1, dt, solver = st["t1"], st["dt"], st["solver"]
    if args.chunks is not None and args.chunks < 1:
        raise UsageError(f"--chunks must be at least 1, got {args.chunks}")
    check_outputs(out_dir=args.out, json_path=args.json)
    chunks = args.chunks or default_chunks(t1, dt if solver in FIXED_SOLVERS else None)
    return RunConfig(
        name=sc.name, system=system, params=params, values=values, t1=t1, dt=dt,
        solver=solver, rtol=st["rtol"], atol=st["atol"], stabilization=stabilization,
        out=args.out, json_path=args.json, plot=not args.no_plot, quiet=args.quiet,
        chunks=int(chunks), chunks_given=args.chunks is not None, resume=args.resume,
        animate=bool(getattr(args, "animate", False)), discard=bool(getattr(args, "discard", False)),
        conserved=tuple(sc.conserved(values)),
    )


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
        yield lambda: bool(hits) or _common.pending_interrupt()
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
    warnings = health.check(traj, conserved, energy_name=summ.get("energy", {}).get("quantity", "energy"),
                            stabilization=cfg.stabilization, solver=cfg.solver)
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
    return finite(out)


def write_outputs(cfg: RunConfig, res: RunResult) -> tuple[dict, list[Path]]:
    """Final npz + CSV (+ plots, + JSON); removes the partial file."""
    traj = res.traj
    files = [traj.save(cfg.out / f"{cfg.name}.npz",
                       meta=cfg.meta(complete=True, chunks_done=res.chunks_done))]
    cfg.partial_path.unlink(missing_ok=True)
    files.append(traj.to_csv(cfg.out / f"{cfg.name}.csv"))
    if cfg.plot:
        from ..plot import plot_trajectory  # matplotlib, loaded only when asked

        files += plot_trajectory(traj, cfg.out, title=cfg.name, prefix=f"{cfg.name}_", system=cfg.system)
    if cfg.animate:
        panels = outlines(cfg.name, cfg.values)
        if panels is None:
            print(f"diffmb: --animate: scenario {cfg.name!r} has no panel outlines (not origami); skipped",
                  file=sys.stderr)
        else:
            from ..origami.animate import animate  # matplotlib, loaded only when asked

            files.append(animate(cfg.system, traj, panels, cfg.out / f"{cfg.name}.gif", title=cfg.name))
    obj = report(cfg, res)
    if cfg.json_path is not None:
        write_json(cfg.json_path, obj)
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
    print(table(rows, header=None))


def main(args) -> int:
    try:
        cfg = resolve(args)
        start = load_partial(cfg) if cfg.resume else (None, 0)
    except (ValueError, TypeError, UsageError) as e:
        return fail(e)
    if _common.pending_interrupt():
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


