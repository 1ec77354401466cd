"""Benchmark: fold-design sweeps on Dask workers against issue 25's distributed targets.

A fold-4panel sweep of ``--batch`` members (default 256: K 0.05-0.2, c 0-0.05, random),
RK4 at dt = 1 ms over ``--t1`` seconds, in chunks of ``--chunk`` (default 32), run as

``inproc-pinned``   :func:`diffmb.design.batch.sweep` in one process pinned to core 0 (taskset)
``inproc``          the same, unpinned
``1w-pinned``       one Dask worker process pinned to core 0
``1w``              one Dask worker as ``diffmb sweep --workers 1`` starts it
``2w``              two Dask workers as ``diffmb sweep --workers 2`` starts them (each pinned
                    to a core of its own by the worker itself, XLA on one thread)
``2w-pinned``       two ``dask worker`` processes pinned to cores 0 and 1 by ``taskset``

The ``dask worker`` processes get the environment the local cluster gives its workers
(:func:`diffmb.design.distributed.worker_env`).

Every mode compiles first (one untimed sweep; the processes share one persistent
compilation cache) and is then timed ``--repeats`` times: the in-process sweeps' own
``wall_s`` (compilation excluded), the distributed ones from submitting the first chunk
to receiving the last (scheduling, transfers and the driver's work included). Reported
per mode: the median member-seconds per second, and for the workers the overhead per
chunk two ways: against the in-process sweep with the same pinning (a baseline taken
minutes apart, so other load on the machine shows in it), and inside the same sweep, as
the workers' time not spent running a chunk (``workers x elapsed - busy_s``, per chunk and
relative to a chunk's run time: scheduling, transfers, the driver, idle tails). ``--kill`` adds one two-worker
run in which one worker is killed (SIGKILL) as the first chunk comes back: the time it
costs against the median two-worker run, and the chunk time for comparison.
``/proc/pressure/cpu`` is read before and after each mode (other work on the machine
shows there).

Targets (issue 25): 2 workers >= 1.8x one worker pinned to one core; overhead per chunk
<= 5 % at chunk 32; a killed worker costs at most its in-flight chunk's time.

Writes ``out/bench_distributed.json`` and prints a table.

    python experiments/bench_distributed.py --t1 2 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]
MODES = ("inproc-pinned", "inproc", "1w-pinned", "1w", "2w", "2w-pinned")
WORKERS = {"1w-pinned": ["0"], "1w": [None], "2w": [None, None], "2w-pinned": ["0", "1"]}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def case(args):
    from diffmb import scenarios
    from diffmb.design.batch import member_values, scenario_batch

    members = member_values({"K": (0.05, 0.2), "c": (0.0, 0.05)}, {}, args.batch, sample="random", seed=0)
    system, params = scenario_batch(scenarios.get("fold-4panel"), members)
    return system, params, dict(t1=args.t1, dt=1e-3, solver="rk4", chunk=args.chunk)


def inprocess(args) -> dict:
    """This process: one untimed sweep, then ``repeats`` timed ones (their wall_s)."""
    from diffmb.design.batch import sweep

    system, params, run = case(args)
    first = sweep(system, params, **run)
    walls = [sweep(system, params, **run).wall_s for _ in range(args.repeats)]
    return {"walls_s": walls, "compile_s": first.compile_s, "chunks": first.chunks}


def run_inprocess(args, pinned: bool) -> dict:
    """:func:`inprocess` in a fresh process, pinned to core 0 or not."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = ([ "taskset", "-c", "0"] if pinned else []) + [
        sys.executable, __file__, "--inprocess-to", out, "--batch", str(args.batch), "--t1", str(args.t1),
        "--chunk", str(args.chunk), "--repeats", str(args.repeats)]
    subprocess.run(cmd, check=True)
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    return res


def run_workers(args, cores, kill=False, local=False) -> dict:
    """Dask workers (``cores``: a core to pin each to with ``taskset``, or None; ``local``:
    :func:`diffmb.design.distributed.local_cluster` of that many, pinned by
    :func:`~diffmb.design.distributed.pin_workers`) on a local scheduler: one
    untimed sweep, then ``repeats`` timed ones; with ``kill`` one more in which a worker
    is killed as the first chunk comes back."""
    from distributed import Client, LocalCluster

    from diffmb.design import distributed

    system, params, run = case(args)
    procs = []
    if local:  # what `diffmb sweep --workers N` starts
        cluster = distributed.local_cluster(len(cores))
        client = Client(cluster)
        distributed.pin_workers(client)
    else:
        cluster = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)
    try:
        env = dict(os.environ, **distributed.worker_env()[0])  # the local workers' settings
        for core in [] if local else cores:
            cmd = (["taskset", "-c", core] if core is not None else []) + [
                sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--nthreads", "1",
                "--nworkers", "1", "--memory-limit", "0", "--no-dashboard"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        client.wait_for_workers(len(cores), timeout=120)
        tic = time.perf_counter()
        distributed.sweep(system, params, client=client, **run)
        warm = time.perf_counter() - tic
        elapsed, busy = [], []
        for _ in range(args.repeats):
            tic = time.perf_counter()
            res = distributed.sweep(system, params, client=client, **run)
            elapsed.append(time.perf_counter() - tic)
            busy.append(res.busy_s)
        # what the distribution cost, measured inside the same sweep (no baseline taken at
        # another time, under other load): the workers' time not spent running a chunk
        idle = [(len(cores) * e - b) / res.chunks for e, b in zip(elapsed, busy)]
        out = {"elapsed_s": elapsed, "busy_s": busy, "first_sweep_s": warm, "chunks": res.chunks,
               "workers": res.workers, "not_running_per_chunk_s": idle,
               "not_running_per_chunk_rel": [i / (b / res.chunks) for i, b in zip(idle, busy)]}
        if kill:
            hit = []

            def kill_one(n, metrics):
                if not hit:
                    busy = [w for w, keys in client.processing().items() if keys]
                    pids = client.run(os.getpid)
                    victim = (busy or list(pids))[0]
                    os.kill(pids[victim], signal.SIGKILL)
                    hit.append(bool(busy))

            tic = time.perf_counter()
            res = distributed.sweep(system, params, client=client, on_chunk=kill_one, **run)
            out["killed_elapsed_s"] = time.perf_counter() - tic
            out["killed_worker_held_a_chunk"] = hit[0]
            out["killed_complete"] = res.batch == args.batch
        return out
    finally:
        client.close()
        cluster.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--t1", type=float, default=2.0)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--kill", action="store_true", help="one extra two-worker run that loses a worker")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_distributed.json")
    ap.add_argument("--inprocess-to", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inprocess_to is not None:
        import diffmb

        args.inprocess_to.write_text(json.dumps(inprocess(args)))
        return
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="bench-distributed-jax-"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    import diffmb  # noqa: F401  (XLA flags before JAX starts; the workers inherit them)

    member_s = args.batch * args.t1
    modes = {}
    for mode in args.modes:
        log(f"{mode} ...")
        before = cpu_pressure()
        if mode.startswith("inproc"):
            r = run_inprocess(args, mode == "inproc-pinned")
            times = r["walls_s"]
        else:
            r = run_workers(args, WORKERS[mode], kill=args.kill and mode == "2w", local=mode in ("1w", "2w"))
            times = r["elapsed_s"]
        med = statistics.median(times)
        modes[mode] = {**r, "median_s": med, "member_s_per_s": member_s / med, "pressure_before": before,
                       "pressure_after": cpu_pressure()}
        log(f"  {mode}: median {med:.3f} s, {member_s / med:.4g} member-s/s")
    chunks = -(-args.batch // args.chunk)
    for mode, base in (("1w-pinned", "inproc-pinned"), ("1w", "inproc"), ("2w-pinned", "inproc-pinned")):
        if mode in modes and base in modes:
            per_chunk = modes[base]["median_s"] / chunks
            over = (modes[mode]["median_s"] * len(WORKERS[mode]) - modes[base]["median_s"]) / chunks
            modes[mode]["overhead_per_chunk_s"] = over
            modes[mode]["overhead_per_chunk_rel"] = over / per_chunk
    ratios = {}
    if "1w-pinned" in modes:
        for m in ("1w", "2w", "2w-pinned"):
            if m in modes:
                ratios[f"{m} / 1w-pinned"] = modes[m]["member_s_per_s"] / modes["1w-pinned"]["member_s_per_s"]
    if args.kill and "2w" in modes and "killed_elapsed_s" in modes["2w"]:
        k = modes["2w"]
        k["kill_cost_s"] = k["killed_elapsed_s"] - k["median_s"]
        k["chunk_s_per_worker"] = k["median_s"] * 2 / chunks
    result = {"scenario": "fold-4panel", "batch": args.batch, "t1": args.t1, "dt": 1e-3, "solver": "rk4",
              "chunk": args.chunk, "repeats": args.repeats, "cpus": os.cpu_count(), "modes": modes,
              "ratios": ratios}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"fold-4panel, {args.batch} members x {args.t1:g} s, RK4 dt 1 ms, chunks of {args.chunk}, "
          f"median of {args.repeats}")
    print(f"{'mode':<14}{'median s':>10}{'member-s/s':>12}{'vs in-process':>22}{'not running':>22}"
          f"  pressure (some avg10) before/after")
    for mode, m in modes.items():
        over = m.get("overhead_per_chunk_s")
        over = f"{over * 1e3:.0f} ms ({m['overhead_per_chunk_rel']:.1%})/chunk" if over is not None else ""
        if "not_running_per_chunk_s" in m:
            idle = statistics.median(m["not_running_per_chunk_s"])
            rel = statistics.median(m["not_running_per_chunk_rel"])
            over += f"{f'{idle * 1e3:.0f} ms ({rel:.1%})/chunk':>22}"
        pb = (m["pressure_before"] or "").split(" ")[1] if m["pressure_before"] else "-"
        pa = (m["pressure_after"] or "").split(" ")[1] if m["pressure_after"] else "-"
        print(f"{mode:<14}{m['median_s']:>10.3f}{m['member_s_per_s']:>12.4g}{over:>44}  {pb} / {pa}")
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    if "kill_cost_s" in modes.get("2w", {}):
        k = modes["2w"]
        print(f"2w with a worker killed at the first chunk: +{k['kill_cost_s']:.2f} s against the median "
              f"(a chunk takes {k['chunk_s_per_worker']:.2f} s on one worker); complete: {k['killed_complete']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
