"""Batch sweeps: one System simulated for a whole batch of parameter sets at once.

:func:`sweep` vmaps :func:`~diffmb.simulation.integrate.simulate` over a batch of params (and
optionally initial states) and reduces every member's trajectory to summary metrics inside
the compiled call, so a batch costs memory for its states, not for its trajectories. A
batch larger than ``chunk`` runs in pieces (the last one padded to the same shape, so one
compilation serves all) with a progress bar; on one CPU device as many pieces at once as
the process has cores (:func:`chunk_threads`). With more than one device the members of each
chunk are sharded across them (``jax.sharding.Mesh`` over a ``batch`` axis,
``NamedSharding``): XLA runs each device's share of the vmapped loop. On CPU this is
exercised with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``; on a cluster, call
``jax.distributed.initialize()`` in every process first and pass ``devices="all"`` — the
mesh then spans every process's devices (see README).

Metrics per member (``SweepResult.table``; :data:`METRICS` says what each column is, and
the CLI prints that under its table):

``status``           success / event / diverged / max_steps
``t_final``          where the run stopped [s]
``time_to_flat``     first save time at which every hinge (the system's ``hinge`` role) is
                     within ``flat_tol_deg`` of 0 (flat), NaN if never
``time_to_final``    first save time from which every hinge stays within ``flat_tol_deg``
                     of its angle at the end of the run and slower than ``flat_tol_deg``
                     per second (when the motion is over), NaN unless that holds through
                     the last 10 % of the run (still moving at the end)
``peak_hinge_rate``  largest ``|d theta / dt|`` of any hinge [rad/s]
``peak_hub_rate``    largest ``|omega|`` of the hub (role ``hub_rate``) [rad/s]
``peak_hub_angle``   largest rotation of the hub from its initial attitude (role
                     ``hub_attitude``) [rad]: how far deployment turns the spacecraft
``max_violation``    largest position-level constraint violation
``energy_drift``     largest ``|E - E0| / |E0|``: an integration error where the physics
                     conserves the energy; in :meth:`SweepResult.rows` NaN for a member
                     whose physics does not (damped, driven: see ``energy_dissipated``)
``energy_dissipated`` ``E0 - E(t_final)`` [J]: what damping took out (or, negative, what
                     forcing put in)
``momentum_drift``   largest ``|H - H0|`` of the angular momentum [N m s]; in ``rows`` NaN
                     for a member whose physics does not conserve it
``energy_jump``, ``momentum_jump``  the largest jump in one save interval relative to
                     the quantity's natural scale, 0 if none (:mod:`diffmb.simulation.health`'s rule);
                     where the member's physics conserves the quantity (``conserved``), a
                     jump makes a member that reached ``t1`` ``suspect``
``energy_rise``      the largest rise of the energy in one save interval, by the same rule
                     (0 if none): where every force of the member conserves or dissipates
                     it (``energy_falls`` in ``conserved``: a damped fold), a rise makes it
                     ``suspect``
"""

from __future__ import annotations

import csv
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import scenarios
from ..math import spatial as sp
from ..simulation import health
from ..simulation.integrate import RunSettings
from ..simulation.trajectory import STATUS_CODES, STATUS_NAMES
from ..tree.force_element import SUSPECT_METRICS
from .binding import NotAffine, bind, build_batch

if TYPE_CHECKING:
    from jax.typing import ArrayLike

    from ..simulation.integrate import PyTree
    from ..system import System

#: Members per compiled call on a CPU, where a chunk's program is traced with the small
#: products written out (:func:`_on_cpu`). Measured on fold-4panel (2-core CPU, quiet,
#: 256-512 members), member-seconds per second at chunks of 32 / 128 / 256 / 512:
#: RK4 1 ms + Baumgarte 46.9 / 49.4 / 59.0 / 59.6 (34.6 at 32 before the written-out
#: form); the scenario's defaults (Dopri5 + projection, 10 s) 263 / 305 at 32 / 128
#: (248 before). A chunk of 128 keeps most of the gain and the progress, resume and
#: worker granularity of small chunks. With the solves written out and the projection
#: stopping at round-off, one core at RK4 1 ms + projection: 56.2 / 60.7 at 32 / 128.
DEFAULT_CHUNK = 128
#: Members per compiled call and accelerator (GPU/TPU) when the device's memory is not
#: known, where a step of a small system is a few hundred kernel launches whatever the
#: batch: on an H200, fold-4panel ran 1073 member-seconds per second in chunks of 1024 and
#: 4252 in one chunk of 8192. Where it is known the chunk fills it (:func:`filling_chunk`).
ACCELERATOR_CHUNK = 8192
#: The largest chunk on an accelerator: MJX's batches saturate an H200 at 32k-64k members.
MAX_ACCELERATOR_CHUNK = 65536
#: The share of the device's memory a chunk's program may take (the rest: XLA's own
#: buffers, the inputs of the next chunk).
MEMORY_SHARE = 0.5
#: Members of the program compiled to measure one member's footprint (:func:`member_bytes`).
PROBE_MEMBERS = 256

#: the metric column of each conserved diagnostic (and of an energy that may only fall)
_JUMP = {"energy": "energy_jump", "energy_falls": "energy_rise", "angular_momentum": "momentum_jump"}


def default_chunk(devices, member_bytes: float | None = None) -> int:
    """Members per compiled call for ``devices`` (a list of jax devices): on a CPU
    :data:`DEFAULT_CHUNK`; on accelerators the chunk that fills each device's memory
    (:func:`filling_chunk`, from ``member_bytes``, one member's footprint), or
    :data:`ACCELERATOR_CHUNK` per device where either is unknown."""
    if not devices or devices[0].platform == "cpu":
        return DEFAULT_CHUNK
    limit = (devices[0].memory_stats() or {}).get("bytes_limit") if hasattr(devices[0], "memory_stats") else None
    if not limit or not member_bytes:
        return ACCELERATOR_CHUNK * len(devices)
    return filling_chunk(limit, member_bytes) * len(devices)


def filling_chunk(device_bytes: float, member_bytes: float, cap: int = MAX_ACCELERATOR_CHUNK) -> int:
    """The largest power of two of members, at most ``cap``, whose program takes at most
    :data:`MEMORY_SHARE` of ``device_bytes`` at ``member_bytes`` per member (at least 1)."""
    fit = MEMORY_SHARE * float(device_bytes) / max(float(member_bytes), 1.0)
    if fit < 1:
        return 1
    return int(min(cap, 1 << int(math.floor(math.log2(fit)))))


def member_bytes(compiled, members: int) -> float:
    """One member's share of a compiled chunk program's memory (arguments, outputs and
    temporaries, ``compiled.memory_analysis()``) at ``members`` members; NaN where the
    backend does not say."""
    try:
        m = compiled.memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
    except Exception:  # a backend without memory analysis
        return math.nan
    return total / max(members, 1)


#: What each metric column is, with its unit (module docstring): the CLI's legend.
METRICS = {
    "status": "how the run ended (success, suspect: a conserved quantity jumped or panels passed through "
              "each other, event, diverged)",
    "t_final": "where the run stopped [s]",
    "time_to_flat": "first time every hinge is within 1 deg of flat [s]",
    "time_to_final": "first time from which every hinge stays within 1 deg of its final angle [s] "
                     "(NaN: still moving at the end)",
    "peak_hinge_rate": "largest hinge rate [rad/s]",
    "peak_hub_rate": "largest hub angular rate [rad/s]",
    "peak_hub_angle": "largest hub rotation from its initial attitude [rad]",
    "max_violation": "largest position-level constraint violation",
    "energy_drift": "largest |E - E0| / |E0| where the physics conserves energy (an integration error)",
    "energy_dissipated": "E0 - E(t_final): energy taken out by damping [J]",
    "momentum_drift": "largest |H - H0| where the physics conserves angular momentum [N m s]",
    "energy_jump": "largest one-interval energy jump, relative to the motion's scale (0: none)",
    "momentum_jump": "largest one-interval momentum jump, relative to the motion's scale (0: none)",
    "energy_rise": "largest one-interval energy rise, relative to the motion's scale (0: none; a damped "
                   "member's energy may only fall)",
    "max_crease_angle": "largest crease fold angle, unwrapped from the start [rad] (origami)",
    "crease_overfold": "how far a crease folded past 180 deg beyond the detector's tolerance: its panels pass "
                       "through each other [rad] (0: none; above 0: suspect)",
    "panel_overlap": "how deep two panels that share no vertex overlap beyond the detector's tolerance: a "
                     "crossing [m] (0: none; above 0: suspect)",
    "min_contact_gap": "smallest gap between two armed panels that share no vertex, with contact [m] "
                       "(inf: no pair armed, e.g. layers stacked all run)",
    "min_crease_margin": "smallest margin of a crease to its barrier's wall, with contact [rad]",
    "peak_contact_force": "largest force of one panel contact primitive, with contact [N]",
    "peak_crease_torque": "largest torque of a crease barrier, with contact [N m]",
    "contact_events": "save points with a barrier within reach after one without (the first counts), with contact",
    "contact_overflow": "candidate pairs within reach beyond the broad phase's capacity (above 0: suspect)",
}


def _last(x, valid):
    """The value at the last valid save point (valid points are a prefix)."""
    n = jnp.maximum(jnp.sum(valid) - 1, 0)
    return x[n]


#: The trailing part of a run through which the hinges must be still for it to have
#: shown its final state (``time_to_final``); a turning point of a swing is not one.
STILL_FOR = 0.1


def _time_to_final(tr, hinge, rates, valid, tol):
    """First save time from which every hinge stays within ``tol`` of its final angle
    and (where the state has their ``rates``) slower than ``tol`` per second; NaN when
    that is not the whole last :data:`STILL_FOR` of the run (still moving at the end)."""
    q = tr.xs[:, hinge]
    off = jnp.any(jnp.abs(q - _last(q, valid)[None, :]) > tol, axis=1)
    if rates.size:
        off = off | jnp.any(jnp.abs(tr.xs[:, rates]) > tol, axis=1)
    idx = jnp.arange(q.shape[0])
    first = jnp.max(jnp.where(valid & off, idx, -1)) + 1
    t_first, t_end = tr.ts[jnp.minimum(first, q.shape[0] - 1)], _last(tr.ts, valid)
    still = (first < jnp.sum(valid)) & (t_end - t_first >= STILL_FOR * (t_end - tr.ts[0]))
    return jnp.where(still, t_first, jnp.nan)


def _metrics(tr, flat_tol):
    valid = jnp.isfinite(tr.ts)
    out = {"status": tr.status_code, "t_final": tr.t_final}
    hinge = tr.role_columns("hinge")
    if hinge.size:
        flat = valid & jnp.all(jnp.abs(tr.xs[:, hinge]) <= flat_tol, axis=1)
        first = jnp.argmax(flat)
        out["time_to_flat"] = jnp.where(jnp.any(flat), tr.ts[first], jnp.nan)
        names = list(tr.state_names)
        rates = np.asarray([names.index(names[i] + "_dot") for i in hinge if names[i] + "_dot" in names], int)
        out["time_to_final"] = _time_to_final(tr, hinge, rates, valid, flat_tol)
        if rates.size:
            out["peak_hinge_rate"] = jnp.max(jnp.where(valid[:, None], jnp.abs(tr.xs[:, rates]), 0.0))
    hub = tr.role_columns("hub_rate")
    if hub.size:
        w = jnp.where(valid[:, None], tr.xs[:, hub], 0.0)
        out["peak_hub_rate"] = jnp.sqrt(jnp.max(jnp.sum(w * w, -1)))
    att = tr.role_columns("hub_attitude")
    if att.size:
        q = sp.mrp_to_quat(tr.xs[:, att])           # any MRP shadow set gives the same angle
        out["peak_hub_angle"] = jnp.max(jnp.where(valid, sp.quat_angle(q, q[:1]), 0.0))
    if "position" in tr.violation:   # a series of the worst row (trees) or of every row (tensegrity)
        v = jnp.abs(tr.violation["position"]).reshape(valid.shape[0], -1)
        out["max_violation"] = jnp.max(jnp.where(valid[:, None], v, 0.0))
    if "energy" in tr.diagnostics:
        e = tr.diagnostics["energy"]
        rel = jnp.abs(e - e[0]) / jnp.maximum(jnp.abs(e[0]), 1e-300)
        out["energy_drift"] = jnp.max(jnp.where(valid, rel, 0.0))
        out["energy_dissipated"] = e[0] - _last(e, valid)
        out["energy_jump"] = health.largest_jump(e, valid, tr.diagnostics.get("kinetic_energy"))
        out["energy_rise"] = health.largest_jump(e, valid, tr.diagnostics.get("kinetic_energy"), rises=True)
    if "angular_momentum" in tr.diagnostics:
        h = tr.diagnostics["angular_momentum"]
        dh = jnp.sqrt(jnp.sum((h - h[:1]) ** 2, -1))
        out["momentum_drift"] = jnp.max(jnp.where(valid, dh, 0.0))
        scale = tr.diagnostics.get("momentum_scale")
        out["momentum_jump"] = health.largest_jump(
            h, valid, scale, rel=health.REL if scale is None else health.REL_MOMENTUM)
    return out


#: The drift column of each conserved quantity: NaN in ``rows`` where not conserved.
_DRIFT = {"energy": "energy_drift", "angular_momentum": "momentum_drift"}


class _Member(eqx.Module):
    """One member's run, reduced to metrics (vmapped over params / x0)."""

    system: object
    settings: RunSettings
    flat_tol: float = eqx.field(static=True)
    with_x0: bool = eqx.field(static=True)

    def __call__(self, params, x0):
        tr = self.settings.run(self.system, params, x0 if self.with_x0 else None)
        out = _metrics(tr, self.flat_tol)
        valid = jnp.isfinite(tr.ts)
        for e, p in zip(getattr(self.system, "elements", ()), params.get("elements", ())
                        if isinstance(params, dict) else ()):
            out.update(e.metrics(tr.diagnostics, valid, p))
        return out


def _on_cpu(tree) -> bool:
    """Whether the arrays of ``tree`` live on CPU devices: there a chunk's program is traced
    with the small products written out (:func:`diffmb.math.spatial.written_out`: 2x per member
    for fold-4panel at chunks of 512); accelerators get the ``"device"`` form (no library calls)."""
    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "devices")]
    devices = leaves[0].devices() if leaves else jax.devices()
    return all(d.platform == "cpu" for d in devices)


#: compiled chunk programs of this process, by structure and chunk shape (most recent last)
_PROGRAMS: OrderedDict = OrderedDict()
_KEEP = 16
_PROGRAMS_LOCK = threading.Lock()


def _program_key(static, dyn, x0, form):
    """What a chunk program depends on: the sweep's structure (everything but its arrays:
    the system, the run settings), the arrays' shapes, dtypes and placement, and the form
    the products are traced in. ``None`` where the structure cannot be hashed."""
    def aval(a):
        return (tuple(a.shape), str(a.dtype), getattr(a, "sharding", None))

    leaves, structure = jax.tree.flatten(static)
    key = (structure, tuple(leaves), jax.tree.structure(dyn), tuple(aval(a) for a in jax.tree.leaves(dyn)),
           aval(x0), form)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _compiled(member, params, x0, form: str | None = None):
    """Ahead-of-time compiled ``vmap(member)`` for one chunk shape, and its compile time
    (so the first chunk is run once, not once to compile and once to time). A later sweep
    of the same structure and chunk shape in this process reuses the program (compile
    time 0): new numbers, no recompilation. ``form``: the form the program is traced in
    (default :func:`diffmb.math.spatial.batch_form` of where the arrays live)."""
    dyn, static = eqx.partition((member, params), eqx.is_array)
    form = form or sp.batch_form(_on_cpu(dyn))
    key = _program_key(static, dyn, x0, form)
    with _PROGRAMS_LOCK:
        compiled = None if key is None else _PROGRAMS.get(key)
        if compiled is not None:
            _PROGRAMS.move_to_end(key)
    compile_s = 0.0
    if compiled is None:
        def run(dyn, x0):
            m, p = eqx.combine(dyn, static)
            return jax.vmap(m)(p, x0)

        tic = time.perf_counter()
        with sp.traced_as(form):
            compiled = jax.jit(run).lower(dyn, x0).compile()
        compile_s = time.perf_counter() - tic
        if key is not None:
            with _PROGRAMS_LOCK:
                _PROGRAMS[key] = compiled
                while len(_PROGRAMS) > _KEEP:
                    _PROGRAMS.popitem(last=False)
    return (lambda m, p, x: compiled(eqx.partition((m, p), eqx.is_array)[0], x)), compile_s, compiled


@dataclass
class SweepResult:
    """Per-member metrics (``table``: name -> array of length B) and run statistics."""

    table: dict
    batch: int
    t1: float
    wall_s: float
    compile_s: float
    devices: int
    chunks: int
    members: list = field(default_factory=list)  # per-member parameter values (dicts)
    #: per member, the quantities its physics conserves (``Scenario.conserved``): their
    #: jumps make it ``suspect``; empty: not judged
    conserved: list = field(default_factory=list)
    #: the members asked for (``batch`` is those finished: fewer when ``interrupted``)
    requested: int | None = None
    interrupted: bool = False
    #: the member indices of the rows, when not all of ``0 .. requested - 1`` finished
    #: (an interrupted sweep; with workers, the finished chunks need not be the first)
    index: list | None = None
    #: worker processes that ran chunks (0: this process, :mod:`diffmb.design.distributed`)
    workers: int = 0
    #: members finished by an earlier run (``done``: read back, not run here)
    resumed: int = 0
    #: seconds spent running chunks (compilation excluded), summed over the processes
    #: that ran them: ``workers x wall_s - busy_s`` is what the distribution cost
    busy_s: float = 0.0

    def statuses(self) -> list:
        """Per member: ``success`` | ``suspect`` (reached ``t1``, but a conserved quantity
        jumped, or it reached a state that cannot happen: a crease past 180 deg, panels
        through each other) | ``event`` | ``diverged`` | ``max_steps``."""
        none = np.zeros(self.batch)
        out = []
        for i, c in enumerate(np.asarray(self.table["status"]).astype(int)):
            kept = self.conserved[i] if i < len(self.conserved) else ()
            jumped = any(self.table.get(_JUMP[k], none)[i] > 0 for k in kept if k in _JUMP)
            jumped = jumped or any(self.table.get(k, none)[i] > 0 for k in SUSPECT_METRICS)
            name = STATUS_NAMES[int(c)]
            out.append("suspect" if name == "success" and jumped else name)
        return out

    @property
    def throughput(self) -> float:
        """Simulated seconds x members per wall second (compilation excluded) of the
        members run here (not those ``resumed``); NaN when none was."""
        ran = self.batch - self.resumed
        return ran * self.t1 / max(self.wall_s, 1e-12) if ran else math.nan

    @property
    def status_counts(self) -> dict:
        """Members per run status (``success``, ``suspect``, ``diverged``, ...), every status listed."""
        names = self.statuses()
        order = ["success", "suspect"] + [n for _, n in sorted(STATUS_NAMES.items()) if n != "success"]
        return {n: names.count(n) for n in order}

    def diverged(self) -> list:
        """Indices of the members that diverged (non-finite state or violation past the bound)."""
        codes = np.asarray(self.table["status"]).astype(int)
        return [int(i) for i in self.member_index()[codes == STATUS_CODES["diverged"]]]

    def rows(self) -> list:
        """Per member: its parameter values and metrics (:data:`METRICS`). Where the
        member's physics does not conserve a quantity (``conserved`` known), its drift is
        NaN: a damped member's energy change is dissipation, not an error."""
        out = []
        names = self.statuses()
        for i in range(self.batch):
            row = dict(self.members[i]) if self.members else {}
            kept = self.conserved[i] if i < len(self.conserved) else None
            for k in sorted(self.table, key=lambda k: list(METRICS).index(k) if k in METRICS else len(METRICS)):
                row[k] = names[i] if k == "status" else float(self.table[k][i])
            if kept is not None:
                for q, col in _DRIFT.items():
                    if col in row and q not in kept:
                        row[col] = math.nan
            out.append(row)
        return out

    def member_index(self) -> np.ndarray:
        """The member index (in the sweep asked for) of each row."""
        return np.arange(self.batch) if self.index is None else np.asarray(self.index, int)

    def to_json(self) -> dict:
        rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                for r in self.rows()]
        return {"batch": self.batch, "requested": self.requested or self.batch, "resumed": self.resumed,
                "interrupted": self.interrupted, "t1": self.t1, "wall_s": self.wall_s, "compile_s": self.compile_s,
                "devices": self.devices, "chunks": self.chunks,
                "throughput_member_s_per_s": self.throughput, "status_counts": self.status_counts,
                "diverged_members": self.diverged(), "members": rows,
                **({} if self.index is None else {"member_index": list(self.index)})}

    def write_csv(self, path):
        rows = self.rows()
        os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        return path

def _devices(devices):
    if devices is None:
        return [jax.devices()[0]]
    if devices == "all":
        return list(jax.devices())
    if isinstance(devices, int):
        avail = jax.devices()
        if not 1 <= devices <= len(avail):
            raise ValueError(f"devices: asked for {devices}, {len(avail)} available")
        return list(avail[:devices])
    return list(devices)


def _batch_size(params, x0):
    sizes = {np.shape(x)[0] for x in jax.tree_util.tree_leaves(eqx.filter(params, eqx.is_array))
             if np.ndim(x) > 0}
    if x0 is not None:
        sizes.add(np.shape(x0)[0])
    if len(sizes) != 1:
        raise ValueError(f"params_batch / x0_batch: every array needs the same leading batch size, got {sorted(sizes)}")
    return sizes.pop()


def _take(tree, idx):
    return jax.tree_util.tree_map(lambda x: x[idx] if eqx.is_array(x) else x, tree)


def chunk_size(batch: int, chunk: int, n_devices: int = 1) -> int:
    """Members per compiled call of a sweep of ``batch`` members asked to run in chunks of
    ``chunk`` over ``n_devices``: at most the batch, rounded up to a multiple of the
    devices (each gets an equal share)."""
    if chunk < 1:
        raise ValueError(f"chunk must be positive, got {chunk}")
    chunk = min(int(chunk), batch)
    return int(math.ceil(chunk / n_devices) * n_devices)


def chunk_members(n: int, chunk: int, batch: int):
    """``(idx, real)`` of chunk ``n``: the member index of each of its ``chunk`` rows and
    which rows are real; the last chunk is padded with copies of the last member, so every
    chunk has one shape and one compilation serves all. The assignment depends on nothing
    else, so any process running chunk ``n`` computes the same members."""
    idx = np.arange(n * chunk, (n + 1) * chunk)
    real = idx < batch
    return np.where(real, idx, batch - 1), real


def n_chunks(batch: int, chunk: int) -> int:
    """How many chunks of ``chunk`` members cover ``batch``."""
    return -(-batch // chunk)


def member_runner(system, *, t1, dt=None, solver="rk4", rtol=1e-8, atol=1e-10, saveat=1001,
                  max_violation=1.0, flat_tol_deg=1.0, with_x0=False):
    """The per-member run of a sweep (vmapped over a chunk's params and initial states):
    :func:`~diffmb.simulation.integrate.simulate` reduced to the metrics of :data:`METRICS`."""
    settings = RunSettings(t1=float(t1), dt=dt, solver=solver, rtol=float(rtol), atol=float(atol),
                           saveat=int(saveat),
                           max_violation=None if max_violation is None else float(max_violation))
    if getattr(system, "elements", ()):   # the elements as a batch computes them
        system = eqx.tree_at(lambda s: s.elements, system, tuple(e.for_batches() for e in system.elements))
    return _Member(system=system, settings=settings, flat_tol=math.radians(flat_tol_deg), with_x0=with_x0)


def run_chunk(program, member, static, dyn_chunk, x0_chunk):
    """One chunk's metrics (name -> array over its rows, padding included): ``program`` is
    ``None`` or the compiled call of an earlier chunk of the same sweep (same shapes);
    returns ``(metrics, program, compile_s)``."""
    p = eqx.combine(dyn_chunk, static)
    compile_s = 0.0
    if program is None:
        program, compile_s, _ = _compiled(member, p, x0_chunk)
    out = jax.block_until_ready(program(member, p, x0_chunk))
    return {k: np.asarray(v) for k, v in out.items()}, program, compile_s


def assemble(pieces: dict, *, batch: int, chunk: int, t1, wall_s, compile_s, devices, members=None,
             conserved=None, interrupted=False, workers=0, resumed=(), busy_s=None) -> SweepResult:
    """The :class:`SweepResult` of the finished chunks ``pieces`` (chunk index -> metrics of
    its real members), in member order; ``resumed``: the chunks of them an earlier run
    finished."""
    order = sorted(pieces)
    if not order:  # stopped before any chunk came back
        table, index = {"status": np.zeros(0, np.int32)}, np.zeros(0, int)
    else:
        # a chunk a store kept from an earlier version may lack a newer column: NaN there
        names = dict.fromkeys(k for n in order for k in pieces[n])
        table = {k: np.concatenate([np.asarray(pieces[n][k]) if k in pieces[n]
                                    else np.full(len(pieces[n]["status"]), np.nan) for n in order])
                 for k in names}
        index = np.concatenate([np.arange(n * chunk, min((n + 1) * chunk, batch)) for n in order])
    members, conserved = list(members or []), list(conserved or [])
    return SweepResult(table=table, batch=len(index), t1=float(t1), wall_s=wall_s, compile_s=compile_s,
                       devices=devices, chunks=len(order),
                       members=[members[i] for i in index] if members else [],
                       conserved=[conserved[i] for i in index] if conserved else [],
                       requested=batch, interrupted=interrupted,
                       index=None if len(index) == batch else [int(i) for i in index], workers=workers,
                       resumed=sum(len(pieces[n]["status"]) for n in resumed if n in pieces),
                       busy_s=wall_s if busy_s is None else busy_s)


def sweep(system: System, params_batch: PyTree, *, t1: float, dt: float | None = None, solver: str = "rk4",
          rtol: float = 1e-8, atol: float = 1e-10, x0_batch: ArrayLike | None = None, saveat: int = 1001,
          chunk: int | None = None, devices: str | int | Sequence | None = None, max_violation: float = 1.0,
          flat_tol_deg: float = 1.0, progress: bool = False, members: Sequence[dict] | None = None,
          conserved: Sequence | None = None, stop: Callable[[], bool] | None = None, done: dict | None = None,
          on_chunk: Callable | None = None, threads: int | None = None) -> SweepResult:
    """Simulate ``system`` for every member of ``params_batch`` (its params pytree with a
    leading batch axis on every array leaf) and optional ``x0_batch (B, nx)``; see module
    docstring. ``chunk``: members per compiled call (default :func:`default_chunk`). ``devices``: ``None``
    (default device), ``"all"``, a count, or a list of devices to shard each chunk over.
    ``max_violation``: a member whose violation exceeds it stops as diverged.
    ``conserved``: per member, the quantities its physics conserves (see
    :meth:`SweepResult.statuses`). ``stop()``: checked after every chunk; when it returns
    True the sweep ends there and the result holds the members finished so far
    (``interrupted``, ``requested`` the batch asked for).
    ``done``: chunks finished earlier (chunk index -> metrics of its real members, as
    :mod:`diffmb.design.sweep_store` reads them back), not run again; ``on_chunk(n, metrics)`` is
    called as chunk ``n`` finishes (the store writes it then). Chunk ``n`` holds members
    ``n * chunk`` up to ``(n + 1) * chunk`` (:func:`chunk_members`). ``threads``: chunks
    run at once (default :func:`chunk_threads`: one per core on a CPU); the numbers do not
    depend on it.
    """
    dyn, static = eqx.partition(params_batch, eqx.is_array)
    B = _batch_size(dyn, x0_batch)
    devs = _devices(devices)
    nd = len(devs)
    member = member_runner(system, t1=t1, dt=dt, solver=solver, rtol=rtol, atol=atol, saveat=saveat,
                           max_violation=max_violation, flat_tol_deg=flat_tol_deg, with_x0=x0_batch is not None)
    x0 = x0_batch if x0_batch is not None else jnp.zeros((B, 1))
    probe_s = 0.0
    if chunk is None:
        footprint = None
        if devs[0].platform != "cpu" and B > ACCELERATOR_CHUNK:
            # one member's footprint from a small program (compiled, not run), so the chunk fills the device
            probe = np.arange(min(PROBE_MEMBERS, B))
            _, probe_s, probed = _compiled(member, eqx.combine(_take(dyn, probe), static), x0[probe])
            footprint = member_bytes(probed, probe.size)
        chunk = default_chunk(devs, footprint)
    chunk = chunk_size(B, int(chunk), nd)
    sharding = None
    if nd > 1:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        sharding = NamedSharding(Mesh(np.array(devs), ("batch",)), PartitionSpec("batch"))
    pieces = dict(done or {})
    todo = [n for n in range(n_chunks(B, chunk)) if n not in pieces]
    bar = None
    if progress and len(todo) > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=B, initial=B - sum(int(chunk_members(n, chunk, B)[1].sum()) for n in todo),
                   desc="sweep", unit="member")
    state = {"program": None, "compile_s": 0.0, "busy_s": 0.0}

    def inputs(n):
        idx, real = chunk_members(n, chunk, B)
        dc, xc = _take(dyn, idx), x0[idx]
        if sharding is not None:
            dc, xc = jax.device_put(dc, sharding), jax.device_put(xc, sharding)
        return dc, xc, real

    def work(n):
        dc, xc, real = inputs(n)
        tic = time.perf_counter()
        out, _, _ = run_chunk(state["program"], member, static, dc, xc)
        return n, {k: v[real] for k, v in out.items()}, time.perf_counter() - tic

    if todo:  # one program for every chunk, compiled before any runs
        dc, xc, _ = inputs(todo[0])
        state["program"], state["compile_s"], _ = _compiled(member, eqx.combine(dc, static), xc)

    def finished(n, metrics, ran):
        state["busy_s"] += ran
        pieces[n] = metrics
        if on_chunk is not None:
            on_chunk(n, metrics)
        if bar is not None:
            bar.update(len(metrics["status"]))

    tic = time.perf_counter()
    interrupted = _run_chunks(todo, work, finished, stop, chunk_threads(devs) if threads is None else threads)
    if bar is not None:
        bar.close()
    if not interrupted and stop is not None and stop():
        interrupted = len(pieces) < n_chunks(B, chunk)
    compile_s = state["compile_s"] + probe_s  # before the clock started
    return assemble(pieces, batch=B, chunk=chunk, t1=t1, wall_s=time.perf_counter() - tic, compile_s=compile_s,
                    devices=nd, members=members, conserved=conserved, interrupted=interrupted,
                    resumed=list(done or ()), busy_s=state["busy_s"])


def chunk_threads(devices) -> int:
    """Chunks run at once in one process: on a single CPU device, one per core this process
    may use (two chunks on two cores: 1.4-2.1x the member-seconds per second of one after
    another, fold-4panel, the same numbers bit for bit); else 1 (accelerators, and a
    chunk sharded over several devices, are busy with one)."""
    if len(devices) != 1 or devices[0].platform != "cpu":
        return 1
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return max(1, len(cores))


def _run_chunks(todo: list, work: Callable, finished: Callable, stop: Callable | None, threads: int) -> bool:
    """``work(n) -> (n, metrics, ...)`` for every chunk of ``todo`` on ``threads`` threads
    (XLA runs a compiled program on the calling thread, with the GIL released), and
    ``finished(*that)`` on this thread as each comes back. ``stop()`` is checked after every
    chunk that comes back, before the next is handed out: none is after it says True, the
    ones running are kept. Returns whether it stopped the sweep."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    queue, stopped = list(todo), False
    with ThreadPoolExecutor(max(1, min(threads, len(queue)))) as pool:
        running = {pool.submit(work, queue.pop(0)) for _ in range(min(threads, len(queue)))}
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: f.result()[0]):
                finished(*f.result())
                stopped = stopped or (stop is not None and stop())
                if not stopped and queue:
                    running.add(pool.submit(work, queue.pop(0)))
    return stopped and bool(queue)


SAMPLES = ("linspace", "grid", "random")


def member_values(ranges: dict, fixed: dict, n: int | None, *, sample="linspace", seed=0) -> list:
    """Member override dicts: ``ranges`` ``{name: (lo, hi)}`` (or ``(lo, hi, count)`` for
    a grid axis) spread over ``n`` members, ``fixed`` added to all.

    ``linspace``: member i at ``lo + (hi - lo) i / (n - 1)`` for every ranged name together
    (the diagonal); ``grid``: every combination, ``count`` points per axis (an axis
    without a count gets the integer root of ``n``; ``n`` must then be that power, or
    ``None`` when every axis has its count), the first name varying slowest;
    ``random``: independent uniform draws from ``seed``.
    """
    if sample not in SAMPLES:
        raise ValueError(f"sample: one of {', '.join(SAMPLES)}, got {sample!r}")
    counts = {k: (int(r[2]) if len(r) > 2 else None) for k, r in ranges.items()}
    if sample != "grid" and any(c is not None for c in counts.values()):
        raise ValueError("a point count per range (lo:hi:n) is for --sample grid")
    if sample == "grid":
        return _grid(ranges, counts, fixed, n)
    if n is None or n < 1:
        raise ValueError(f"batch size must be positive, got {n}")
    rng = np.random.default_rng(seed)
    cols = {}
    for name, (lo, hi, *_) in ranges.items():
        cols[name] = np.linspace(lo, hi, n) if sample == "linspace" else rng.uniform(lo, hi, n)
    return [{**fixed, **{k: float(v[i]) for k, v in cols.items()}} for i in range(n)]


def _grid(ranges, counts, fixed, n):
    free = [k for k, c in counts.items() if c is None]
    given = int(np.prod([c for c in counts.values() if c is not None] or [1]))
    if free:
        if n is None or n < 1 or n % given:
            raise ValueError(f"grid: batch {n} is not a multiple of the {given} points given per axis")
        per = round((n // given) ** (1 / len(free)))
        if per**len(free) * given != n:
            near = max(per, 1) ** len(free) * given
            raise ValueError(f"grid: batch {n} is not {given} x a {len(free)}-th power for "
                             f"{', '.join(free)}; use --batch {near} or {(per + 1) ** len(free) * given}, "
                             f"or give each axis its count as NAME=lo:hi:n")
        counts = {k: (per if c is None else c) for k, c in counts.items()}
    elif n is not None and n != given:
        raise ValueError(f"grid: the axes give {given} points, but batch is {n}")
    if any(c < 1 for c in counts.values()):
        raise ValueError(f"grid: every axis needs at least 1 point, got {counts}")
    axes = [np.linspace(lo, hi, counts[k]) for k, (lo, hi, *_) in ranges.items()]
    mesh = [a.ravel() for a in np.meshgrid(*axes, indexing="ij")] if axes else []
    size = mesh[0].size if mesh else 1
    return [{**fixed, **{k: float(m[i]) for k, m in zip(ranges, mesh)}} for i in range(size)]


def sweep_scenario(scenario, ranges: dict, fixed: dict | None = None, n: int | None = None, *,
                   sample="linspace", seed=0, stabilization=None, **run) -> SweepResult:
    """Sweep a scenario over parameter ranges (:func:`member_values`), members' values in
    the result's ``rows()``; ``run``: :func:`sweep`'s options (``t1``, ``dt``, ``solver``,
    ``rtol``, ``atol`` default to the scenario's)."""
    sc = scenarios.get(scenario) if isinstance(scenario, str) else scenario
    given = {k: run.pop(k) for k in ("t1", "dt", "solver", "rtol", "atol") if k in run}
    run = {**sc.run_settings(**given), **run}
    members = member_values(ranges, dict(fixed or {}), n, sample=sample, seed=seed)
    system, params = scenario_batch(sc, members, stabilization)
    return sweep(system, params, members=members, conserved=conserved_by_member(sc, members), **run)


def conserved_by_member(scenario, members: list) -> list:
    """What each member's physics conserves (a damped member keeps no energy)."""
    return [tuple(scenario.conserved(scenario.resolve(m))) for m in members]


def scenario_batch(scenario, members: list, stabilization=None):
    """``(system, params_batch)`` for a list of member override dicts of one scenario.

    Parameters that enter the params affinely (:mod:`diffmb.design.binding`) are stacked from one
    build; others (geometry) fall back to one build per member.
    """

    keys = sorted({k for m in members for k in m})
    if any(set(m) != set(keys) for m in members):
        raise ValueError("every sweep member must set the same parameters")
    names = [k for k in keys if any(m[k] != members[0][k] for m in members)]
    if not names:
        system, p, _ = scenario.make(members[0], stabilization)
        return system, jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x, (len(members),) + jnp.shape(x)) if eqx.is_array(x) else x, p)
    try:
        b = bind(scenario, names, members[0], stabilization)
    except NotAffine:
        return build_batch(scenario, members, stabilization)
    theta = jnp.asarray(np.array([[m[k] for k in b.names] for m in members], float))
    return b.system, eqx.filter_vmap(b.params)(theta)
