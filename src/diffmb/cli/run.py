"""``diffmb run SCENARIO|MODEL-FILE [options]``: simulate, write npz / CSV / JSON / plots.

How a run works
---------------
The horizon ``[0, t1]`` is split into ``N`` chunks. Every chunk is one jitted
:func:`~diffmb.integrate.simulate` call with the same save-point count and the same
``max_steps``; ``t0``, ``t1``, the save times and ``x0`` are passed as numbers, so only the
first chunk compiles.

Fixed-step solvers take ``n = t1 / dt`` steps of exactly ``dt`` (when ``t1`` is not a whole
number of steps: ``ceil(t1 / dt)`` equal steps of ``t1 / n``, as :func:`simulate` does).
The chunking never changes the step: chunk ``k`` holds the steps ``floor(k n / N)`` to
``floor((k+1) n / N)``, a whole number of steps, so when ``N`` does not divide ``n`` the
chunks differ by one step. ``--chunks`` above ``n`` is refused (a chunk needs a step).
Default ``N``: about ``STEPS_PER_CHUNK`` (1000) steps a chunk, at most
``MAX_DEFAULT_CHUNKS`` (20) chunks, and never more than ``MAX_STEPS_PER_CHUNK``
(50 000) steps a chunk however many chunks that takes (a count that divides ``n`` within
2x is preferred, for equal chunks). A Ctrl-C is honoured between chunks, so that bound is
the longest wait: 0.4 s of a pendulum's RK4 steps, ~10 s of a 4x4 map fold's; the
1e9 steps of ``--t1 1 --dt 1e-9`` make 20 000 chunks. Saved points: every step while the
run has at most ``SAVE_INTERVALS`` (20 000) steps; beyond that ``SAVE_INTERVALS / N``
save intervals a chunk, each a whole number of steps (equal ones when a divisor of the
chunk's steps allows), and at least the chunk's two ends: at most
``max(SAVE_INTERVALS, N) + 1`` points in all, every one at the end of a step of ``dt``.
Adaptive solvers: 20 chunks by default (their step count is not known ahead), each of
equal length with ``1000 / N + 1`` (at least 11) save points.

Before compiling, the run says (stderr, unless ``--quiet``) how many steps of which size
it takes in how many chunks; after the first chunk, when more than ``ESTIMATE_AFTER_S``
(10 s) seem to be left, how long the first chunk took and about how long the rest will.

After the first chunk, and then after any chunk that ends at least ``PARTIAL_EVERY_S``
(1 s) after the last write, the run so far is written atomically to
``<out>/<scenario>.partial.npz`` (``complete=False`` in its metadata). Ctrl-C keeps that
file, brought up to the last finished chunk (exit code 130; the chunk in flight finishes
first, a second Ctrl-C stops at once) and ``--resume`` continues from it when its
scenario, model file, parameters, solver, dt, t1 (and stabilization, rtol, atol and chunk
count) match; when they do not, ``--resume`` is refused (exit 2, naming what differs)
unless ``--discard`` is also given (then it starts fresh). A partial file is never
replaced unasked: a run into a folder that holds one, given neither ``--resume`` nor
``--discard``, is refused before any work (exit 2), naming the file, the time it holds
and both ways on; ``--discard`` alone removes it and starts fresh.

Output paths are checked before any work. At the end ``<out>/<scenario>.npz``
(``complete=True``), ``<out>/<scenario>.csv`` and the plots ``<out>/<scenario>_*.png``
are written and the partial file is removed (``--animate``: also ``<out>/<scenario>.gif``,
origami scenarios only; ``--view``: also ``<out>/<scenario>.html``, see ``diffmb view``).
When ``<out>/<scenario>.npz`` already holds the run of another
scenario, model file (two files with one stem: ``fourbar.urdf``, ``fourbar.xml``) or other
parameters, one warning line says so before any work (it is still replaced: give another
``--out`` to keep both); a re-run of the same case (whatever its t1, dt or solver)
replaces it quietly. A chunk that ends with an event or a divergence stops the run: what
was computed is kept and written as usual.

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

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from .. import health, scenarios, trajectory
from ..integrate import FIXED_SOLVERS, compile_simulation
from ..scenarios.origami import outlines
from ..system import STABILIZATIONS
from ..trajectory import Trajectory, concatenate
from . import _common
from ._common import (
    DEFAULT_OUT,
    UsageError,
    check_outputs,
    fail,
    finite,
    parse_sets,
    run_args,
    run_settings,
    scenario_args,
    table,
    write_json,
)

#: Default chunking of fixed-step runs (module docstring): about STEPS_PER_CHUNK steps a
#: chunk, at most MAX_DEFAULT_CHUNKS chunks, but never more than MAX_STEPS_PER_CHUNK steps
#: a chunk (the longest a Ctrl-C waits: 0.4 s of a pendulum's RK4 steps, ~10 s of a 4x4
#: map fold's at 0.2 ms a step, on the 2-core reference machine).
STEPS_PER_CHUNK = 1000
MAX_DEFAULT_CHUNKS = 20
MAX_STEPS_PER_CHUNK = 50_000
#: Save intervals of a whole fixed-step run (or one a chunk, when it has more chunks).
SAVE_INTERVALS = 20_000
ADAPTIVE_SAVE_POINTS = 1000
#: After the first chunk, the remaining wall time is estimated when it is at least this.
ESTIMATE_AFTER_S = 10.0
#: The partial file is rewritten after a chunk when this long has passed since the last write.
PARTIAL_EVERY_S = 1.0

#: Test seam: when set, called as ``_after_chunk(index, trajectory_so_far)`` after chunk
#: ``index`` (0-based) has been run (a KeyboardInterrupt it raises is a Ctrl-C).
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
    r.add_argument("--view", action="store_true",
                   help="write <out>/<scenario>.html, the run in 3-D as one web page (diffmb view)")
    r.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    r.add_argument("--chunks", type=int, metavar="N",
                   help="number of chunks, each a whole number of steps of dt (at most the step "
                        "count; default: automatic, at most 50000 steps a chunk)")
    r.add_argument("--resume", action="store_true",
                   help="continue from <out>/<scenario>.partial.npz; refused (exit 2) when its "
                        "settings differ from this run's (add --discard to start fresh then)")
    r.add_argument("--discard", action="store_true",
                   help="replace <out>/<scenario>.partial.npz: start fresh (with --resume: only "
                        "when it does not match). Without --resume or --discard a run into a "
                        "folder holding a partial file is refused")


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
    view: bool = False
    #: a MODEL-FILE run's source: the file's absolute path (and ``--closures``, ``--key``);
    #: None for a registered scenario
    model: str | None = None

    @property
    def partial_path(self) -> Path:
        return self.out / f"{self.name}.partial.npz"

    @property
    def fixed(self) -> bool:
        return self.dt is not None and self.solver in FIXED_SOLVERS

    @property
    def steps(self) -> int | None:
        """The fixed steps of the whole run (None for adaptive solvers)."""
        return fixed_steps(self.t1, self.dt) if self.fixed else None

    def meta(self, **extra) -> dict:
        return {"scenario": self.name, "model": self.model, "parameters": self.values,
                "solver": self.solver, "dt": self.dt, "rtol": self.rtol, "atol": self.atol,
                "t1": self.t1, "stabilization": self.stabilization, "chunks": self.chunks, **extra}


def resolve(args) -> RunConfig:
    """Scenario defaults + options -> a validated RunConfig (ValueError/UsageError on bad input)."""
    sc = scenarios.get(args.scenario, closures=getattr(args, "closures", None), key=getattr(args, "key", None))
    stabilization = args.stabilization or sc.stabilization
    system, params, values = sc.make(parse_sets(args.sets), stabilization)
    st = run_settings(args, sc)
    t1, dt, solver = st["t1"], st["dt"], st["solver"]
    if args.chunks is not None and args.chunks < 1:
        raise UsageError(f"--chunks must be at least 1, got {args.chunks}")
    fixed = dt is not None and solver in FIXED_SOLVERS
    if fixed and args.chunks is not None and args.chunks > fixed_steps(t1, dt):
        raise UsageError(f"--chunks {args.chunks} is more than the {fixed_steps(t1, dt)} steps of this run "
                         f"(t1 {t1:g} s in steps of dt {dt:g} s): a chunk holds whole steps; give at most "
                         f"--chunks {fixed_steps(t1, dt)}, or a smaller --dt")
    check_outputs(out_dir=args.out, json_path=args.json)
    chunks = args.chunks or default_chunks(t1, dt if fixed else None)
    return RunConfig(
        name=sc.name, system=system, params=params, values=values, t1=t1, dt=dt,
        solver=solver, rtol=st["rtol"], atol=st["atol"], stabilization=stabilization,
        out=args.out, json_path=args.json, plot=not args.no_plot, quiet=args.quiet,
        chunks=int(chunks), chunks_given=args.chunks is not None, resume=args.resume,
        animate=bool(getattr(args, "animate", False)), discard=bool(getattr(args, "discard", False)),
        conserved=tuple(sc.conserved(values)), model=model_source(args),
        view=bool(getattr(args, "view", False)),
    )


def model_source(args) -> str | None:
    """What a MODEL-FILE run was made from (``<abs path>[ --closures <abs path>][ --key K]``),
    recorded in the metadata; None for a registered scenario."""
    name = str(args.scenario)
    if name in scenarios.REGISTRY or not name.lower().endswith((".urdf", ".xml", ".fold")):
        return None
    closures, key = getattr(args, "closures", None), getattr(args, "key", None)
    return (os.path.abspath(name) + (f" --closures {os.path.abspath(closures)}" if closures else "")
            + (f" --key {key}" if key is not None else ""))


def fixed_steps(t1: float, dt: float) -> int:
    """Steps of a fixed-step run over ``[0, t1]``: :func:`simulate`'s count."""
    return max(1, math.ceil(t1 / dt - 1e-6))


def default_chunks(t1: float, dt: float | None) -> int:
    """About STEPS_PER_CHUNK steps a chunk and at most MAX_DEFAULT_CHUNKS chunks, but never
    more than MAX_STEPS_PER_CHUNK steps a chunk; a count that divides the steps (within
    2x) is preferred. ``dt=None`` (adaptive): MAX_DEFAULT_CHUNKS."""
    if dt is None:
        return MAX_DEFAULT_CHUNKS
    steps = fixed_steps(t1, dt)
    target = max(min(math.ceil(steps / STEPS_PER_CHUNK), MAX_DEFAULT_CHUNKS),
                 math.ceil(steps / MAX_STEPS_PER_CHUNK))
    for n in range(target, min(2 * target, target + 10_000) + 1):  # equal chunks
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


def _boundary(cfg: RunConfig, k: int) -> tuple[int | None, float]:
    """``(step index, time)`` where chunk ``k`` starts (``k = cfg.chunks``: the end, t1).
    Fixed steps: a whole number of steps of ``t1 / n`` (= dt); adaptive: ``t1 k / N``."""
    if k >= cfg.chunks:
        return cfg.steps, cfg.t1
    if not cfg.fixed:
        return None, cfg.t1 * k / cfg.chunks
    b = k * cfg.steps // cfg.chunks
    return b, b * (cfg.t1 / cfg.steps)


def _save_intervals(shortest: int, longest: int, chunks: int) -> int:
    """Save intervals a fixed-step chunk keeps (module docstring): every step while the
    run has at most SAVE_INTERVALS, else SAVE_INTERVALS / chunks (at least 1), a divisor
    of the chunk's steps when one lies within 2x below that (equal intervals)."""
    cap = max(1, SAVE_INTERVALS // chunks)
    if shortest <= cap:
        return shortest
    if shortest == longest:
        for d in range(cap, cap // 2, -1):
            if shortest % d == 0:
                return d
    return cap


def _chunk_settings(cfg: RunConfig) -> dict:
    """Save-point count and max_steps, identical for every chunk (one compilation), and
    the chunks' fixed-step counts (``steps``: the longest, ``shortest``; None if adaptive).

    Each fixed-step chunk is passed the step ``(t1_k - t0_k) / S_k`` of its own ``S_k``
    steps rather than ``dt`` itself (equal up to rounding): diffrax counts
    ``ceil((t1 - t0) / dt)`` steps, and a chunk such as ``[0.2, 0.30000000000000004]``
    with ``dt = 1e-3`` would otherwise take 101 steps of 0.99 ms.
    """
    if not cfg.fixed:
        return {"steps": None, "shortest": None, "max_steps": None,
                "saveat": max(11, ADAPTIVE_SAVE_POINTS // cfg.chunks + 1)}
    longest, shortest = -(-cfg.steps // cfg.chunks), cfg.steps // cfg.chunks
    return {"steps": longest, "shortest": shortest,
            "saveat": _save_intervals(shortest, longest, cfg.chunks) + 1,
            "max_steps": 1 << max(4, math.ceil(math.log2(longest + 2)))}


def _chunk_args(cfg, settings, k, x0) -> dict:
    (b0, t0), (b1, t1) = _boundary(cfg, k), _boundary(cfg, k + 1)
    if settings["steps"] is None:
        dt, saveat = cfg.dt, settings["saveat"]
    else:  # save times on step ends: the same count in every chunk, whatever its steps
        n = b1 - b0
        idx = np.round(np.linspace(0, n, settings["saveat"])).astype(np.int64)
        saveat = (b0 + idx) * (cfg.t1 / cfg.steps)
        saveat[0], saveat[-1] = t0, t1
        dt = (t1 - t0) / n
    return dict(t0=t0, t1=t1, x0=x0, params=cfg.params, dt=dt, solver=cfg.solver, rtol=cfg.rtol,
                atol=cfg.atol, saveat=saveat, max_steps=settings["max_steps"])


def _note(cfg: RunConfig, msg: str):
    if not cfg.quiet:
        print(f"diffmb: {msg}", file=sys.stderr)


def _peek(path: Path) -> tuple[dict, float] | None:
    """``(metadata, t_final)`` of a trajectory file, reading nothing else; None if it is
    not one."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["meta"])), float(z["t_final"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _differences(meta: dict, want: dict, keys) -> list[str]:
    return [f"{k} {meta.get(k)!r} there, {want[k]!r} here" for k in keys if meta.get(k) != want[k]]


def check_partial(cfg: RunConfig):
    """Refuse (UsageError) a run into a folder holding a partial file when neither
    ``--resume`` nor ``--discard`` says what to do with it."""
    path = cfg.partial_path
    if cfg.resume or cfg.discard or not path.exists():
        return
    peek = _peek(path)
    if peek is None:
        held, why = "an unreadable partial run", ""
    else:
        meta, t = peek
        t1 = meta.get("t1")
        held = f"an interrupted run: {t:.6g} s of {t1:.6g} s" if isinstance(t1, int | float) else \
            f"an interrupted run up to t = {t:.6g} s"
        chunks = meta.get("chunks")  # --resume without --chunks takes the partial's
        want = cfg.meta(**({"chunks": chunks} if not cfg.chunks_given and isinstance(chunks, int) else {}))
        diff = _differences(meta, want, want)
        why = f" (not with this run's settings: {', '.join(diff)})" if diff else ""
    raise UsageError(f"{path} holds {held}; add --resume to continue it{why}, or --discard to "
                     f"replace it (or give another --out to keep it)")


def _shown(model: str | None, scenario) -> str:
    if model is None:
        return f"scenario {scenario}"
    return model.replace(os.getcwd() + os.sep, "")


def warn_replaced(cfg: RunConfig):
    """One warning line when ``<out>/<name>.npz`` holds the run of another scenario, model
    file or other parameters (it will be replaced); nothing for a re-run of the same case."""
    path = cfg.out / f"{cfg.name}.npz"
    if not path.exists():
        return
    peek = _peek(path)
    if peek is None:
        there, here = "not a diffmb trajectory", f"this run of {_shown(cfg.model, cfg.name)}"
    else:
        meta, want = peek[0], cfg.meta()
        if "model" not in meta:  # written before the model file was recorded
            meta = {**meta, "model": want["model"]}
        if (meta.get("scenario"), meta.get("model")) != (want["scenario"], want["model"]):
            there = f"from {_shown(meta.get('model'), meta.get('scenario'))}"
            here = f"this run of {_shown(want['model'], want['scenario'])}"
        elif meta.get("parameters") != want["parameters"]:
            old, new = meta.get("parameters") or {}, want["parameters"]
            keys = [k for k in new if old.get(k) != new[k]] + [k for k in old if k not in new]
            show = lambda v: f"{v:g}" if isinstance(v, int | float) else repr(v)
            there = ", ".join(f"{k}={show(old.get(k))}" for k in keys)
            here = "this run with " + ", ".join(f"{k}={show(new.get(k))}" for k in keys)
        else:
            return
    print(f"diffmb: warning: {path} ({there}) will be replaced by {here}, with its .csv and plots; "
          f"give another --out to keep both", file=sys.stderr)


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
    if not cfg.chunks_given and isinstance(meta.get("chunks"), int) and meta["chunks"] >= 1:
        cfg.chunks = meta["chunks"]
    want = cfg.meta()
    diff = _differences(meta, want, want)
    done = meta.get("chunks_done")
    why = ", ".join(diff)
    if not why and (meta.get("complete") or traj.status != "success" or not isinstance(done, int)
                    or not 0 < done <= cfg.chunks):
        why = "it is not a resumable partial run"
    if not why and cfg.fixed and cfg.chunks > cfg.steps:
        why = f"its {cfg.chunks} chunks are more than the run's {cfg.steps} steps"
    if not why and abs(float(traj.t_final) - _boundary(cfg, done)[1]) > 1e-9 * cfg.t1:
        why = (f"it ends at t = {float(traj.t_final):.9g} s, not where its chunk {done} ends "
               f"(t = {_boundary(cfg, done)[1]:.9g} s): written by another chunking")
    if why:
        if not cfg.discard:
            raise UsageError(f"--resume: {path} does not match this run ({why}); run with the same "
                             f"settings, or add --discard to replace it")
        _note(cfg, f"--resume --discard: {path} does not match this run ({why}); starting fresh")
        if not cfg.chunks_given:
            cfg.chunks = default_chunks(cfg.t1, cfg.dt if cfg.fixed else None)
        return None, 0
    _note(cfg, f"resuming from {path} at t = {float(traj.t_final):.6g} s")
    return traj, done


def _progress(cfg, start_t):
    return tqdm(total=cfg.t1, initial=start_t, disable=cfg.quiet, desc=cfg.name, file=sys.stderr,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| t = {n:.4g}/{total:.4g} s "
                           "[{elapsed}<{remaining}]")


def _duration(s: float) -> str:
    return f"{s:.2g} s" if s < 90 else f"{s / 60:.2g} min" if s < 5400 else f"{s / 3600:.2g} h"


def plan(cfg: RunConfig, settings: dict) -> str:
    """What the run takes, said before it compiles."""
    n = f"{cfg.chunks:,} chunk{'s' if cfg.chunks != 1 else ''}"
    if settings["steps"] is None:
        return f"{cfg.name}: adaptive steps ({cfg.solver}) up to t = {cfg.t1:g} s in {n}"
    per = (f"{settings['steps']:,}" if settings["steps"] == settings["shortest"]
           else f"{settings['shortest']:,}-{settings['steps']:,}")
    return (f"{cfg.name}: {cfg.steps:,} steps of {cfg.t1 / cfg.steps:.6g} s ({cfg.solver}) in {n} "
            f"of {per} steps")


def run_chunks(cfg: RunConfig, start: tuple | None = None) -> RunResult:
    """Compile once ahead of time, then run the chunks, writing the partial file after the
    first and then at most every PARTIAL_EVERY_S; stops early on event/divergence, or after
    the chunk in flight when interrupted (the partial file then holds every finished chunk).
    ``start``: ``(trajectory, chunks_done)`` of a resumed run (default: read with
    :func:`load_partial` when ``cfg.resume``)."""
    res = RunResult()
    if start is None:
        start = load_partial(cfg) if cfg.resume else (None, 0)
    res.traj, res.chunks_done = start
    settings = _chunk_settings(cfg)
    parts = [] if res.traj is None else [res.traj]  # joined when written: no copy per chunk
    written, written_at = res.chunks_done, None
    bar = None
    try:
        with _common.interrupts() as interrupted:
            x0 = cfg.system.init_state(cfg.params) if res.traj is None else res.traj.x_final
            _note(cfg, plan(cfg, settings))
            bar = _progress(cfg, _boundary(cfg, res.chunks_done)[1])
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
                parts.append(tr)
                res.chunks_done = k + 1
                if written_at is None or time.perf_counter() - written_at >= PARTIAL_EVERY_S:
                    res.traj = _joined(parts)
                    save_partial(cfg, res)
                    written, written_at = res.chunks_done, time.perf_counter()
                bar.update(float(tr.t_final) - bar.n)
                if len(res.times) == 1:
                    _estimate(cfg, bar, res.times[0], cfg.chunks - res.chunks_done)
                if _after_chunk is not None:
                    _after_chunk(k, _joined(parts))
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
    res.traj = _joined(parts)
    if res.interrupted and res.chunks_done > written:
        save_partial(cfg, res)  # every finished chunk is kept
    res.wall_s = sum(res.times)
    return res


def _joined(parts: list):
    if len(parts) > 1:
        parts[:] = [concatenate(parts)]
    return parts[0] if parts else None


def _estimate(cfg, bar, first_s: float, left: int):
    """After the first chunk: how long the rest will take, when that is long."""
    rest = first_s * left
    if cfg.quiet or left < 1 or rest < ESTIMATE_AFTER_S:
        return
    steps = (f"{cfg.steps:,} steps of {cfg.t1 / cfg.steps:.6g} s" if cfg.fixed
             else f"{cfg.chunks:,} chunks of adaptive steps")
    bar.write(f"diffmb: {steps}; the first chunk took {_duration(first_s)}: about "
              f"{_duration(rest)} to go ({left:,} chunks; Ctrl-C stops after the chunk in flight)",
              file=sys.stderr)


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
    if cfg.view:
        from ..viewer import write_view

        try:
            files.append(write_view(files[0], cfg.out / f"{cfg.name}.html"))
        except ValueError as e:
            print(f"diffmb: --view: {' '.join(str(e).split())}; skipped", file=sys.stderr)
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
        check_partial(cfg)
        start = load_partial(cfg) if cfg.resume else (None, 0)
    except (ValueError, TypeError, UsageError) as e:
        return fail(e)
    warn_replaced(cfg)
    if start[0] is None and cfg.discard and cfg.partial_path.exists():
        peek = _peek(cfg.partial_path)
        _note(cfg, f"--discard: removed {cfg.partial_path}" + (f" (it held {peek[1]:.6g} s)" if peek else ""))
        cfg.partial_path.unlink()
    _common.stop_if_interrupted()
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


