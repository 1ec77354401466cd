"""Sweeps over worker processes and hosts with Dask distributed.

:func:`sweep` runs :func:`diffmb.design.batch.sweep`'s chunks as Dask tasks: each task is one
chunk (:func:`diffmb.design.batch.chunk_members`: members ``n * chunk`` up to ``(n + 1) *
chunk``, the last padded), run vmapped on the worker's own default device (CPU or GPU)
with the same compiled program the one-process sweep uses, so a sweep on any number of
workers equals the one-process sweep member for member (bit for bit on the same backend
and dtype). What a task carries: the pickled per-member run (the System and the static
part of the params, a few kB; unpickled and compiled once per worker process and kept for
the sweep's later chunks) and its chunk's slice of the params. The first worker to compile
the chunk program exports it; the driver publishes those bytes, and a worker that starts
later (a replacement, a late joiner) compiles them instead of tracing the run again
(:mod:`diffmb.design.exported_program`).

A worker that dies (a killed process, a lost node) loses only the chunk it was running:
the scheduler hands that chunk to another worker; and once every chunk is handed out, a
chunk out for much longer than the others (:func:`stragglers`: its worker's replacement
still compiling, a slow node) gets a second copy on an idle worker, the first result to
come back counting (both are the same numbers). The driver writes every chunk as it
arrives (``on_chunk``, :mod:`diffmb.design.sweep_store`), so a driver that dies loses nothing
finished either. At most ``2 x workers + 2`` chunks are queued at a time, so a sweep of
a million members never holds its whole params on the scheduler, and Ctrl-C (``stop``)
cancels only a few.

``workers=N`` starts a local cluster of N single-threaded worker processes on
127.0.0.1 for the sweep, forked from a server that has imported diffmb, each pinned to a
core of its own and all reading one compilation cache (:func:`local_cluster`,
:func:`_fork_workers`, :func:`pin_workers`), and stops it after;
``address="HOST:PORT"`` joins a running scheduler (``dask scheduler`` and ``dask worker`` on a cluster, see
``docs/distributed-sweeps.md``). A script that calls :func:`sweep` with ``workers`` keeps
the ``if __name__ == "__main__":`` guard (where workers are spawned, off Unix, they import
the main module).
Needs the ``cluster`` extra (``pip install 'diffmb[cluster]'``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import hashlib
import importlib
import logging
import os
import shutil
import tempfile
import time
import uuid
import warnings
import weakref
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _config
from . import exported_program
from .batch import _batch_size, _take, assemble, chunk_members, chunk_size, default_chunk, member_runner, n_chunks

EXTRA = "cluster"

#: Per worker process: the sweeps it has run chunks of (token -> [member, static, its
#: :class:`~diffmb.design.exported_program.Built` program]); the two most recent are kept.
_PROGRAMS: dict = {}


def require(flag: str = "--workers"):
    """Import Dask distributed, or raise ImportError in one line saying which extra brings it."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ImportError(f"{flag} runs the sweep on Dask distributed, which is not installed: "
                          f"pip install 'diffmb[{EXTRA}]'") from None


def _dtype():
    return "float32" if _config.FLOAT32 else "float64"


def worker_chunk() -> int:
    """Run on a worker: its default members per compiled call (:func:`default_chunk`)."""
    return default_chunk([jax.devices()[0]])


@functools.cache
def code_fingerprint() -> str:
    """A digest of this process's diffmb source files (read once per process, when first
    asked): a worker whose diffmb differs from the driver's unpickles the System into other
    classes."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha1()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


@functools.cache
def machine() -> str:
    """What XLA compiles a CPU program for: the cores this process may use (before any
    pinning, :func:`_every_core`), the CPU model and jaxlib. Programs, and their round-off,
    are the same where this is (``docs/distributed-sweeps.md``, "Bit for bit")."""
    cores = len(_PINNED[0][1]) if _PINNED else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count()
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{cores} cores, {model}, jaxlib {metadata.version('jaxlib')}"


def _run_task(token, job, dtype, dyn_chunk, x0_chunk, want_program=False):
    """One chunk on a worker: ``(metrics, compile_s, run_s, worker id, its diffmb's
    code_fingerprint, the chunk program's exported bytes if ``want_program`` or this worker
    has just exported them, else None, its :func:`machine`)``.
    A worker without the program compiles the one another worker exported
    (:mod:`diffmb.design.exported_program`, :func:`_shipped`) instead of tracing it again:
    a retried task (its first worker died) finds it too."""
    if dtype != _dtype():
        raise ValueError(f"this worker computes in {_dtype()}, the sweep in {dtype}: start the workers "
                         f"with the driver's DIFFMB_FLOAT32 setting")
    entry = _PROGRAMS.get(token)
    if entry is None:
        import pickle

        member, static = pickle.loads(job)
        entry = [member, static, None]
        while len(_PROGRAMS) >= 2:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[token] = entry
    tic = time.perf_counter()
    compile_s, made = 0.0, False
    if entry[2] is None:
        with _every_core():
            entry[2] = exported_program.build(entry[0], entry[1], dyn_chunk, x0_chunk, _shipped(token))
        compile_s, made = entry[2].compile_s, entry[2].how == "exported"
    out = entry[2].program(dyn_chunk, x0_chunk)
    return (out, compile_s, time.perf_counter() - tic - compile_s, _worker_id(), code_fingerprint(),
            entry[2].exported if made or want_program else None, machine())


def _program_name(token) -> str:
    """The name of the Dask dataset through which the driver shares a sweep's exported
    chunk program (a future of its bytes, held on the workers) with workers that lack it."""
    return f"diffmb-chunk-program-{token}"


#: How long a worker waits for a published program's bytes before tracing its own.
SHIPPED_WAIT_S = 30.0


def _shipped(token) -> bytes | None:
    """Run on a worker: the exported program of the sweep ``token`` when the driver has
    published one (another worker's), else None. A fetch that has not come back within
    :data:`SHIPPED_WAIT_S` counts as none: the worker traces the program itself (a
    gather from inside a task once hung a test worker for 10 minutes)."""
    from distributed import get_client

    try:
        found = get_client().get_dataset(_program_name(token), default=None)
    except ValueError:  # not on a worker
        return None
    if found is None:
        return None
    try:
        return found.result(timeout=SHIPPED_WAIT_S)
    except TimeoutError:
        return None


#: a chunk out for longer than this many times the median chunk (plus :data:`SLACK_S`)
#: while a worker is idle and no chunk is left to hand out gets a second copy
STRAGGLER = 2.0
SLACK_S = 1.0


def stragglers(pending: dict, started: dict, runs: list, backed: set, workers: int, now: float) -> list:
    """The chunks to run a second copy of: when every chunk has been handed out (``pending``:
    future -> chunk, ``started``: future -> when it began running, :class:`RunningSince`)
    and fewer chunks are out than there are ``workers``, those running for longer than
    :data:`STRAGGLER` times the median of the chunk times ``runs`` so far (oldest first, at
    most one per idle worker, none twice: ``backed``). A chunk whose worker died and whose
    replacement is still starting (importing JAX, compiling) is one; so is a chunk on a
    slow node."""
    out_now = set(pending.values())
    idle = workers - len(out_now)
    if idle <= 0 or not runs:
        return []
    limit = STRAGGLER * float(np.median(runs)) + SLACK_S
    old = sorted((started[f], n) for f, n in pending.items()
                 if f in started and n not in backed and now - started[f] > limit)
    return list(dict.fromkeys(n for _, n in old))[:idle]


def queued_behind(held: dict, order: dict, backed: set) -> list:
    """The chunks to run a second copy of on the idle workers once every chunk is handed out
    (``held``: worker -> the chunks the scheduler has given it, ``[]`` for an idle one;
    ``order``: chunk -> when it was handed out; ``backed``: chunks copied already): from each
    worker that holds two or more, the one handed out last, which is waiting behind the
    others there (most held first, at most one per idle worker). Dask hands a worker its
    chunks as they are submitted and does not always move them to a worker that falls idle:
    a killed worker's replacement, still compiling, was given the lost chunk and the one
    after it, while the other worker sat idle for the sweep's last 5 s."""
    idle = sum(1 for chunks in held.values() if not chunks)
    queues = sorted((set(chunks) for chunks in held.values() if len(set(chunks)) >= 2), key=len, reverse=True)
    last = [max(chunks, key=lambda n: order.get(n, 0)) for chunks in queues]
    return list(dict.fromkeys(n for n in last if n not in backed))[:idle]


class RunningSince:
    """When each chunk out began running, estimated by the driver without asking the
    workers: the first ``workers`` chunks out from when they are handed out, each later one
    from when a chunk before it comes back (the scheduler runs them in the order handed
    out). Timed from the hand-out instead, a chunk that queued behind others looked like a
    straggler at a sweep's tail and got a second copy, whose worker, busy with it after it
    was cancelled (a running task is not interrupted), started the next sweep late.
    ``since``: future -> when it began running."""

    def __init__(self):
        self.since, self._queued = {}, []

    def handed_out(self, f, now: float, workers: int):
        if len(self.since) < workers:
            self.since[f] = now
        else:
            self._queued.append(f)

    def came_back(self, f, now: float, workers: int):
        self.since.pop(f, None)
        self._queued = [g for g in self._queued if g is not f]
        while self._queued and len(self.since) < workers:
            self.since[self._queued.pop(0)] = now


def _worker_id():
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return "local"


def local_cluster(workers: int):
    """A Dask cluster of ``workers`` single-threaded worker processes on 127.0.0.1 (the
    scheduler's HTTP endpoint on a free port there, none on the workers; no memory limit:
    a worker's compiled programs are its working set), sharing one JAX compilation cache
    (:func:`worker_env`), forked from a server that has imported diffmb
    (:func:`_fork_workers`)."""
    from distributed import LocalCluster

    env, _ = worker_env()
    restores = [_add_to_environment(env), _fork_workers()]

    def restore():
        for r in restores:
            r()

    try:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", worker_dashboard_address=None, memory_limit=0,
                               silence_logs=logging.ERROR, env=env)
    except BaseException:
        restore()
        raise
    close = cluster.close

    def close_and_restore(*args, **kwargs):
        try:
            return close(*args, **kwargs)
        finally:
            restore()

    cluster.close = close_and_restore
    weakref.finalize(cluster, restore)
    return cluster


def _fork_workers():
    """Have this process's Dask nannies fork their workers from a server process that has
    imported diffmb (multiprocessing's forkserver, diffmb preloaded) instead of spawning
    interpreters that import it again; returns what restores Dask's setting. A spawned
    worker took 1.5-1.6 s to register and then 1.2-1.6 s to import JAX and diffmb before
    it could read its first task: what a killed worker's replacement cost the sweep beyond
    its lost chunk. The server imports diffmb with the workers' environment already in
    place (:func:`_add_to_environment`), and importing it starts none of JAX's threads (no
    backend until a worker computes), so forking from it is safe. Unix only: elsewhere
    the workers are spawned as before."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return lambda: None
    import dask
    from distributed.utils import get_mp_context

    setting = dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    # Dask sets its own preload list at its first call; ours replaces it (a server already
    # running keeps the one it started with)
    get_mp_context().set_forkserver_preload(["distributed", __name__])
    done = []

    def restore():
        if not done:
            done.append(True)
            setting.__exit__(None, None, None)

    return restore


def _add_to_environment(env: dict):
    """Add ``env`` to this process's environment, for as long as its local cluster lives;
    returns what restores it. The cluster's Nannies run in this process and start the
    workers, replacements too, from a server that imports diffmb, and with it JAX and
    equinox, when the first worker starts (:func:`_fork_workers`; a spawned worker imports
    the driver's main module likewise), before Dask's ``env`` reaches a worker's
    ``os.environ``; JAX reads the cache folder and equinox ``EQX_ON_ERROR`` at import.
    Given only through Dask's ``env``, neither took effect: no worker wrote a chunk's
    program to the cache, and a killed worker's replacement compiled it again (9 s for
    fold-4panel's chunk, against 3.8 s read back). Inherited, they are in place before any
    import. Restored when the cluster is closed (or collected); restoring twice is
    harmless."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    done = []

    def restore():
        if done:
            return
        done.append(True)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    return restore


_MADE_CACHE: list = []


def worker_env() -> tuple[dict, str | None]:
    """``(environment of the local workers, the cache folder made for them or None)``.

    * One persistent JAX compilation cache: the folder ``JAX_COMPILATION_CACHE_DIR`` names,
      or else a temporary one, one for all the local clusters this process starts (their
      workers fork from one server, :func:`_fork_workers`, whose JAX read it once),
      removed when this process exits. A worker that replaces a killed one, or joins
      late, reads a chunk's program back instead of compiling it again (fold-4panel's
      chunk: about 10 s), so a lost worker costs little more than its in-flight chunk.
    * ``EQX_ON_ERROR=nan``: equinox's runtime checks inside diffrax are host callbacks
      otherwise, and XLA never caches a program with one. What they check (``t1 > t0``,
      increasing save times) :func:`diffmb.simulate` checks before tracing, so no result
      changes; a check failing in a chunk would give its members NaN (status diverged)
      instead of failing the chunk.
    * The driver's XLA flags, and no others: XLA's CPU programs depend on the threads they
      may use. With ``--xla_cpu_multi_thread_eigen=false``, which the workers had until
      0.2 to keep XLA's thread pool off the other workers' cores, every closed-chain
      member differed from the one-process sweep in its last digits. The workers are
      pinned to a core each instead (:func:`pin_workers`), after XLA's client exists, and
      compile with every core in view (:func:`_every_core`)."""
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    made = None
    if not cache:
        if not _MADE_CACHE:
            _MADE_CACHE.append(tempfile.mkdtemp(prefix="diffmb-sweep-jax-cache-"))
            atexit.register(shutil.rmtree, _MADE_CACHE[0], ignore_errors=True)
        cache = made = _MADE_CACHE[0]
    flags = os.environ.get("XLA_FLAGS", "")
    return {"JAX_COMPILATION_CACHE_DIR": cache, "EQX_ON_ERROR": "nan", "XLA_FLAGS": flags}, made


def pin_workers(client) -> bool:
    """Pin each worker of a local cluster, all its threads, to a core of its own (worker
    ``k`` to the ``k``-th core this process may run on, as ``taskset`` or a SLURM
    allocation allows; a replacement for a killed worker keeps its name, so its core),
    when there are no more workers than those cores; returns whether it did. Left to the
    operating system, two workers on a 2-core machine ran each chunk 1.3x slower than one
    worker alone (they migrate between the cores and their caches go cold); pinned, 1.03x."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    cores = sorted(os.sched_getaffinity(0))
    if len(client.scheduler_info().get("workers", {})) > len(cores):
        return False
    client.register_plugin(_pin_plugin(tuple(cores)), name="diffmb-pin-to-core")
    return True


#: ``(core, the cores the worker started with)`` once :func:`_pin_process` has pinned it
_PINNED: list = []


def _pin_process(core: int):
    """Every thread of this process on ``core`` (threads started later inherit it); the
    cores it could run on before are kept for :func:`_every_core`."""
    if not _PINNED:
        _PINNED.append((core, frozenset(os.sched_getaffinity(0))))
    _set_affinity({core})


def _set_affinity(cores):
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that has just ended
            pass


@contextlib.contextmanager
def _every_core():
    """A pinned worker compiles with the cores it started with in view, as the driver
    compiles, and runs on its own core again after. XLA's CPU compiler shapes a program
    by the cores it may use (fold-4panel's chunk compiled on one core of two gave other
    round-off than on both: 0.14613449688619484 against ...493 for a hinge rate), so a
    program compiled pinned would not be the one-process sweep's."""
    if not _PINNED:
        yield
        return
    core, cores = _PINNED[0]
    _set_affinity(cores)
    try:
        yield
    finally:
        _set_affinity({core})


def _pin_plugin(cores: tuple):
    """A Dask worker plugin (set up on every worker, those that join later too) that pins
    the local worker named ``k`` to ``cores[k]``. Defined here, not at import: Dask
    distributed is an optional extra."""
    from distributed import WorkerPlugin

    class PinToCore(WorkerPlugin):
        def setup(self, worker):
            name = worker.name
            if isinstance(name, int) and 0 <= name < len(cores):
                import jax

                # XLA's CPU client, and its thread pool, first, with every core in view: the
                # pool's size shapes a program's numbers as the cores at compile time do
                jax.devices()
                _pin_process(cores[name])

    return PinToCore()


def connect(address: str):
    """A Dask client of the scheduler at ``HOST:PORT`` (or a full ``tcp://`` address)."""
    from distributed import Client

    return Client(address if "://" in address else f"tcp://{address}", timeout="30s")


def sweep(system, params_batch, *, t1, workers=None, address=None, client=None, dt=None, solver="rk4",
          rtol=1e-8, atol=1e-10, x0_batch=None, saveat=1001, chunk=None, max_violation=1.0,
          flat_tol_deg=1.0, progress=False, members=None, conserved=None, stop=None, done=None,
          on_chunk=None, poll_s=0.2):
    """:func:`diffmb.design.batch.sweep` over Dask workers: ``workers`` local processes, or the
    cluster at ``address``, or an open ``client``. Same members, chunks and result; the
    result's ``workers`` counts the worker processes that ran chunks, ``compile_s`` is the
    longest compile of any worker and ``wall_s`` the elapsed time less that (the workers
    compile at the same time). ``chunk`` defaults to a worker's :func:`default_chunk`.
    ``done``/``on_chunk``/``stop`` as for :func:`diffmb.design.batch.sweep`; ``stop`` is checked
    every ``poll_s`` seconds, and on True the queued chunks are cancelled."""
    require()
    if sum(x is not None for x in (workers, address, client)) != 1:
        raise ValueError("give one of workers, address or client")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    cluster = None
    if client is None:
        if address is not None:
            client = connect(address)
        else:
            from distributed import Client

            cluster = local_cluster(int(workers))
            client = Client(cluster)
            pin_workers(client)
    run = dict(t1=t1, dt=dt, solver=solver, rtol=rtol, atol=atol, saveat=saveat, max_violation=max_violation,
               flat_tol_deg=flat_tol_deg)
    try:
        job = _job(client, system, params_batch, x0_batch, chunk, run)
        scheduler = _Scheduler(client, job, dict(done or {}), on_chunk=on_chunk, poll_s=poll_s)
        return scheduler.run(progress=progress, stop=stop, members=members, conserved=conserved)
    finally:
        if cluster is not None or address is not None:
            client.close()
        if cluster is not None:
            cluster.close()


class _Job(NamedTuple):
    """What every task of one sweep shares: the pickled per-member run and its token, the
    members' params (numpy, sliced per chunk) and initial states, their count, the chunk."""

    member: bytes
    token: str
    dyn: object
    x0: np.ndarray
    batch: int
    chunk: int
    t1: float


def _job(client, system, params_batch, x0_batch, chunk, run) -> _Job:
    """The sweep as tasks carry it: :func:`diffmb.design.batch.member_runner` pickled (a few kB),
    the params' arrays as numpy, and the chunk (a worker's default when not given)."""
    import cloudpickle

    dyn, static = eqx.partition(params_batch, eqx.is_array)
    B = _batch_size(dyn, x0_batch)
    if chunk is None:
        chunk = client.submit(worker_chunk, pure=False).result()
    member = member_runner(system, **run, with_x0=x0_batch is not None)
    blob = cloudpickle.dumps((member, static))
    return _Job(member=blob, token=hashlib.sha1(blob).hexdigest()[:16],
                dyn=jax.tree_util.tree_map(np.asarray, dyn),
                x0=np.asarray(jnp.zeros((B, 1)) if x0_batch is None else x0_batch),
                batch=B, chunk=chunk_size(B, int(chunk)), t1=run["t1"])


class _Scheduler:
    """The driver's loop over one sweep's chunks: keep a few queued per worker
    (:meth:`_submit_more`), back up stragglers, take what comes back (:meth:`_take`)."""

    def __init__(self, client, job: _Job, pieces: dict, *, on_chunk, poll_s):
        self.client, self.job, self.pieces = client, job, pieces
        self.on_chunk, self.poll_s = on_chunk, poll_s
        self.todo = collections.deque(n for n in range(n_chunks(job.batch, job.chunk)) if n not in pieces)
        self.run_id, self.code, self.machine = uuid.uuid4().hex[:8], code_fingerprint(), machine()
        self.pending, self.running, self.order = {}, RunningSince(), {}
        self.seen, self.other, self.machines, self.runs, self.backed = set(), set(), set(), [], set()
        self.compile_s = 0.0
        self.shipped = False  # whether the exported program is published to the workers
        self.workers = 1
        self.bar = None

    def run(self, *, progress, stop, members, conserved):
        """Every chunk not in ``pieces`` run on the workers; the assembled sweep result."""
        job, done = self.job, list(self.pieces)
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=job.batch, initial=sum(len(p["status"]) for p in self.pieces.values()),
                            desc="sweep", unit="member")
        self.client.run(importlib.import_module, __name__)  # every worker imports JAX and diffmb first
        tic = time.perf_counter()
        interrupted = False
        try:
            while True:
                self.workers = max(len(self.client.scheduler_info().get("workers", {})), 1)
                self._submit_more()
                if not self.pending:
                    break
                if stop is not None and stop():
                    interrupted = True
                    break
                self._take()
        finally:
            self._close()
        elapsed = time.perf_counter() - tic
        return assemble(self.pieces, batch=job.batch, chunk=job.chunk, t1=job.t1,
                        wall_s=max(elapsed - self.compile_s, 0.0), compile_s=self.compile_s,
                        devices=max(len(self.seen), 1), members=members, conserved=conserved,
                        interrupted=interrupted and len(self.pieces) < n_chunks(job.batch, job.chunk),
                        workers=len(self.seen), resumed=done, busy_s=float(sum(self.runs)))

    def _submit(self, n, key, on=None):
        job = self.job
        idx, _ = chunk_members(n, job.chunk, job.batch)
        f = self.client.submit(_run_task, job.token, job.member, _dtype(), _take(job.dyn, idx), job.x0[idx],
                               not self.shipped, key=key, pure=False, workers=on,
                               allow_other_workers=on is not None)
        self.pending[f] = n
        self.order.setdefault(n, len(self.order))
        self.running.handed_out(f, time.perf_counter(), self.workers)

    def _held(self):
        """worker -> the chunks the scheduler has given it (a round trip: asked at the tail only)."""
        chunk_of = {f.key: n for f, n in self.pending.items()}
        return {w: [chunk_of[k] for k in keys if k in chunk_of] for w, keys in self.client.processing().items()}

    def _submit_more(self):
        """Chunks queued up to ``2 x workers + 2``; at the tail, second copies of stragglers
        and of chunks queued behind a busy worker, for idle workers."""
        while len(self.pending) < 2 * self.workers + 2 and self.todo:
            n = self.todo.popleft()
            self._submit(n, f"diffmb-chunk-{self.run_id}-{n}")
        if not self.pending:
            return
        copies = [(n, None) for n in stragglers(self.pending, self.running.since, self.runs, self.backed,
                                                 self.workers, time.perf_counter())]
        if self.runs and not self.todo and len(set(self.pending.values())) >= self.workers:
            now_held = self._held()
            idle = [w for w, chunks in now_held.items() if not chunks]
            copies += zip(queued_behind(now_held, self.order, self.backed | {n for n, _ in copies}), idle)
        for n, on in copies:
            self.backed.add(n)  # a second copy, for an idle worker: the first result to come back counts
            self._submit(n, f"diffmb-chunk-{self.run_id}-{n}-again", None if on is None else [on])

    def _take(self):
        """Wait up to ``poll_s`` for chunks; keep each one that finished first (cancelling
        its second copy), publish the exported program once, report each chunk."""
        from distributed import wait

        try:
            finished = wait(list(self.pending), timeout=self.poll_s, return_when="FIRST_COMPLETED").done
        except TimeoutError:
            return
        for f in finished:
            if f not in self.pending:  # the other copy of a chunk that has just been taken
                continue
            n = self.pending.pop(f)
            self.running.came_back(f, time.perf_counter(), self.workers)
            out, took, ran, worker, theirs, blob, where = f.result()  # a chunk that raised raises here
            f.release()  # the worker may drop it now
            if blob is not None and not self.shipped:
                # held on every worker there is: one that joins later fetches it from one of them
                self.client.publish_dataset(self.client.scatter(blob, broadcast=True, hash=False),
                                            name=_program_name(self.job.token), override=True)
                self.shipped = True
            twins = [g for g, m in self.pending.items() if m == n]
            if twins:
                self.client.cancel(twins)
                for g in twins:
                    self.pending.pop(g)
                    self.running.came_back(g, time.perf_counter(), self.workers)
            if where != self.machine and where not in self.machines:
                self.machines.add(where)
                warnings.warn(f"worker {worker} compiles for {where}, this process for {self.machine}: "
                              f"its members equal a one-process sweep's to round-off, not bit for bit "
                              f"(docs/distributed-sweeps.md)", stacklevel=3)
            if theirs != self.code and theirs not in self.other:
                self.other.add(theirs)
                warnings.warn(f"worker {worker} runs other diffmb source files ({theirs}) than this "
                              f"process ({self.code}): install the same diffmb everywhere, or its numbers "
                              f"may differ", stacklevel=3)
            self.compile_s = max(self.compile_s, took)
            self.runs.append(ran)
            self.seen.add(worker)
            real = chunk_members(n, self.job.chunk, self.job.batch)[1]
            self.pieces[n] = {k: v[real] for k, v in out.items()}
            if self.on_chunk is not None:
                self.on_chunk(n, self.pieces[n])
            if self.bar is not None:
                self.bar.update(int(real.sum()))

    def _close(self):
        if self.pending:
            self.client.cancel(list(self.pending))
        if self.shipped:
            self.client.unpublish_dataset(_program_name(self.job.token))
        if self.bar is not None:
            self.bar.close()
