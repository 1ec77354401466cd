"""Benchmark: what the two task engines considered for distributed sweeps cost on their own
(no JAX): Dask distributed and Ray, each with two local worker processes.

Per engine: the time to start the cluster and run a first task, the time per task when
200 tasks (each a 32 x 40 float array summed, the size of a fold-4panel chunk's params)
are submitted at once, the round trip of one task at a time, and the time to stop. Run
each engine in its own process (``python experiments/bench_engines.py dask``, then
``ray``; Ray is not a diffmb dependency: ``pip install ray``). Prints one JSON line.
The numbers in docs/distributed-sweeps.md came from two runs of each on the 2-core
development machine.
"""

import json
import sys
import time

import numpy as np


def task(x):
    return x.sum()


def dask_costs():
    from distributed import Client, LocalCluster

    t = time.perf_counter()
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                           host="127.0.0.1")
    client = Client(cluster)
    client.submit(task, np.ones(3)).result()
    start = time.perf_counter() - t
    a = np.ones((32, 40))
    t = time.perf_counter()
    client.gather([client.submit(task, a, pure=False) for _ in range(200)])
    batched = (time.perf_counter() - t) / 200
    t = time.perf_counter()
    for _ in range(50):
        client.submit(task, a, pure=False).result()
    roundtrip = (time.perf_counter() - t) / 50
    t = time.perf_counter()
    client.close()
    cluster.close()
    return start, batched, roundtrip, time.perf_counter() - t


def ray_costs():
    import ray

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(task)
    ray.get(remote.remote(np.ones(3)))
    start = time.perf_counter() - t
    a = np.ones((32, 40))
    t = time.perf_counter()
    ray.get([remote.remote(a) for _ in range(200)])
    batched = (time.perf_counter() - t) / 200
    t = time.perf_counter()
    for _ in range(50):
        ray.get(remote.remote(a))
    roundtrip = (time.perf_counter() - t) / 50
    t = time.perf_counter()
    ray.shutdown()
    return start, batched, roundtrip, time.perf_counter() - t


if __name__ == "__main__":
    engine = sys.argv[1] if len(sys.argv) > 1 else "dask"
    start, batched, roundtrip, stop = dask_costs() if engine == "dask" else ray_costs()
    print(json.dumps({"engine": engine, "start_s": start, "per_task_batched_ms": batched * 1e3,
                      "roundtrip_ms": roundtrip * 1e3, "stop_s": stop}))
