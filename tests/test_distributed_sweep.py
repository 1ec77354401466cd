"""Sweeps over worker processes (issue 25, item 1): on two local Dask workers a sweep equals
the one-process sweep bit for bit, a worker killed mid-sweep loses nothing, Ctrl-C keeps
the finished chunks, and ``diffmb sweep --table DIR --resume`` runs only the missing
chunks and refuses other settings. The cluster is two worker processes on 127.0.0.1,
started here and stopped at the end; the pendulum over fractions of a second keeps every
test within seconds on a 2-core machine (the workers read the session's compilation
cache, see conftest). The dev extra installs the cluster extra: these tests never skip."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from diffmb import cli, scenarios
from diffmb.design import distributed, sweep_store
from diffmb.design.batch import conserved_by_member, member_values, scenario_batch, sweep

RUN = scenarios.get("pendulum").run_settings(t1=0.3, dt=0.01)  # what the CLI runs below
CHUNK, BATCH = 3, 17  # six chunks, the last padded with two copies
ARGS = ["sweep", "pendulum", "--batch", str(BATCH), "--chunk", str(CHUNK), "--set", "l=0.5:2", "--set",
        "damping=0:0.5", "--sampling", "random", "--t1", "0.3", "--dt", "0.01"]


@pytest.fixture(scope="module")
def case():
    sc = scenarios.get("pendulum")
    members = member_values({"l": (0.5, 2.0), "damping": (0.0, 0.5)}, {}, BATCH, sample="random")
    system, params = scenario_batch(sc, members)
    conserved = conserved_by_member(sc, members)
    kw = dict(members=members, conserved=conserved, chunk=CHUNK, **RUN)
    return system, params, kw, sweep(system, params, **kw)


@pytest.fixture(scope="module")
def long_case(case):
    """60 members in 20 chunks of the same shape (the same compiled program): more chunks
    than the driver hands out at once (2 x 2 workers + 2), so chunks are still out when
    the first comes back, however fast the workers are."""
    kw = case[2]
    sc = scenarios.get("pendulum")
    members = member_values({"l": (0.5, 2.0), "damping": (0.0, 0.5)}, {}, 60, sample="random", seed=1)
    system, params = scenario_batch(sc, members)
    kw = {**kw, "members": members, "conserved": conserved_by_member(sc, members)}
    return system, params, kw, sweep(system, params, **kw)


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    cluster = distributed.local_cluster(2)
    c = Client(cluster)
    c.wait_for_workers(2)
    yield c
    c.close()
    cluster.close()


def same(a, b):
    """Two results hold the same members with the same numbers, bit for bit."""
    assert list(a.member_index()) == list(b.member_index())
    assert a.members == b.members and a.table.keys() == b.table.keys()
    for k in a.table:
        x, y = np.asarray(a.table[k]), np.asarray(b.table[k])
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), k
    return True


def test_two_workers_equal_the_one_process_sweep_bit_for_bit(case, client):
    system, params, kw, ref = case
    res = distributed.sweep(system, params, client=client, **kw)
    assert same(res, ref) and res.batch == BATCH and not res.interrupted and res.chunks == 6
    # both workers were handed chunks and began them; whose result came back first varies:
    # a worker still compiling may see its chunks taken by the other (work stealing, or the
    # straggler's second copy), so res.workers, the workers whose results were taken, is 1
    # or 2 (CI's machine under load gave 1)
    held = client.run(lambda: list(distributed._PROGRAMS))
    assert len(held) == 2 and all(len(t) == 1 for t in held.values()) and len({t[0] for t in held.values()}) == 1
    assert res.workers in (1, 2)


def test_a_worker_killed_mid_sweep_loses_nothing(long_case, client):
    """SIGKILL, as the first chunk comes back, to a worker that holds a chunk the driver
    has not taken yet (running it, or its result in memory): the scheduler has that chunk
    run again elsewhere, and the result is complete and identical."""
    system, params, kw, ref = long_case
    killed = []

    def kill_one(n, metrics):
        if killed:
            return
        keys = {w: [*client.processing().get(w, ()), *client.has_what().get(w, ())] for w in client.run(os.getpid)}
        held = [w for w, ks in keys.items() if any(str(k).startswith("diffmb-chunk") for k in ks)]
        pids = client.run(os.getpid)
        victim = (held or list(pids))[0]
        os.kill(pids[victim], signal.SIGKILL)
        killed.append((victim, bool(held)))

    res = distributed.sweep(system, params, client=client, on_chunk=kill_one, **kw)
    assert killed == [(killed[0][0], True)]  # it held a chunk
    assert same(res, ref) and res.batch == 60 and not res.interrupted


def test_ctrl_c_keeps_the_finished_chunks(long_case, client):
    system, params, kw, ref = long_case
    seen = []
    res = distributed.sweep(system, params, client=client, stop=lambda: bool(seen),
                            on_chunk=lambda n, m: seen.append(n), **kw)
    assert res.interrupted and res.requested == 60 and 0 < res.batch < 60
    idx = res.member_index()
    assert sorted(set(seen)) == sorted({int(i) // CHUNK for i in idx})
    for k in ref.table:
        assert np.array_equal(res.table[k], np.asarray(ref.table[k])[idx], equal_nan=True), k


def _interrupt_after(monkeypatch, calls):
    from diffmb.cli import _common

    seen = []

    def flag():
        seen.append(1)
        return len(seen) >= calls

    monkeypatch.setattr(_common, "pending_interrupt", flag)


def test_resume_runs_only_the_missing_chunks_on_the_cluster(case, client, tmp_path, monkeypatch, capsys):
    """Ctrl-C in this process while its two threads run chunks 1 and 2 (exit 130, chunks
    0-2 on disk: the running ones are kept), then ``--resume --address`` finishes the
    other three on the workers: the table equals the one-process sweep, and the parts
    written first are left as they were."""
    from diffmb.design import batch

    *_, ref = case
    table = tmp_path / "t"
    monkeypatch.setattr(batch, "chunk_threads", lambda devices: 2)  # as on any 2-core machine
    # checks: once while starting, then before every chunk handed to a thread; the third
    # comes after chunk 0 (run alone: it compiles) and one of chunks 1 and 2 came back
    _interrupt_after(monkeypatch, 3)
    assert cli.main(ARGS + ["--table", str(table), "--quiet"]) == 130
    assert sweep_store.finished(table) == [0, 1, 2]
    first = {n: sweep_store.part_path(table, n).stat().st_mtime_ns for n in (0, 1, 2)}
    monkeypatch.undo()
    address = client.scheduler.address
    assert cli.main(ARGS + ["--table", str(table), "--resume", "--address", address, "--plot",
                            str(tmp_path / "p.png")]) == 0
    out, err = capsys.readouterr()
    assert "3 of 6 chunks finished, running the other 3" in err
    assert re.search(r"8 members x 0.3 s in .* on [12] worker\(s\)", out) and "9 more read back from" in out
    assert {n: sweep_store.part_path(table, n).stat().st_mtime_ns for n in (0, 1, 2)} == first
    cols = sweep_store.read_table(table)
    assert list(cols["member"]) == list(range(BATCH)) and (tmp_path / "p.png").stat().st_size > 0
    for k in ref.table:
        want = np.asarray(ref.table[k])
        got = cols["status_code"] if k == "status" else cols[k]
        if k in ("energy_drift",):  # NaN in the table where the member is damped
            keep = np.isfinite(got)
            got, want = got[keep], want[keep]
        assert np.array_equal(got.astype(want.dtype), want, equal_nan=True), k


def test_resume_with_other_settings_is_refused_naming_them(tmp_path, capsys):
    table = tmp_path / "t"
    sweep_store.open_store(table, {"t1": 0.3, "chunk": 3, "chunks": 6}, resume=False)
    sweep_store.write_chunk(table, 0, {"member": np.arange(3)})
    held = sweep_store.read_meta(table)["settings"]
    assert sweep_store.differences(held, {"t1": 0.5, "chunk": 3, "chunks": 6}) == ["t1 0.3 there, 0.5 here"]
    # the CLI compares every setting (members, run settings, chunk): a real store
    full = tmp_path / "full"
    assert cli.main(ARGS[:2] + ["--batch", "2", "--set", "l=0.5:2", "--t1", "0.05", "--dt", "0.01",
                                "--table", str(full), "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(ARGS[:2] + ["--batch", "2", "--set", "l=0.5:3", "--t1", "0.1", "--dt", "0.01",
                                "--table", str(full), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ranges {'l': [0.5, 2.0]} there, {'l': [0.5, 3.0]} here" in err
    assert "t1 0.05 there, 0.1 here" in err
    assert cli.main(ARGS[:2] + ["--batch", "2", "--set", "l=0.5:2", "--t1", "0.05", "--dt", "0.01",
                                "--table", str(full), "--quiet"]) == 2
    assert "add --resume to continue it" in capsys.readouterr().err


@pytest.mark.parametrize("module, flag, extra", [("distributed", ["--workers", "2"], "--workers"),
                                                 ("pyarrow", ["--table", "DIR"], "--table")])
def test_without_the_cluster_extra_a_one_line_error(monkeypatch, capsys, tmp_path, module, flag, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    monkeypatch.setitem(sys.modules, module + ".parquet", None)
    flag = [str(tmp_path / "t") if f == "DIR" else f for f in flag]
    assert cli.main(ARGS + flag) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and extra in err and "pip install 'diffmb[cluster]'" in err


@pytest.mark.slow  # starts its own two-worker cluster (~8 s); the default job sweeps on the module's
# cluster (test_two_workers_equal_the_one_process_sweep_bit_for_bit); --workers without the
# cluster extra stays there too
def test_workers_flag_starts_and_stops_a_local_cluster(tmp_path, case, capsys):
    """``--workers 2`` end to end: two local worker processes, the CSV equal to the
    one-process sweep's rows."""
    *_, ref = case
    out = tmp_path / "s.csv"
    assert cli.main(ARGS + ["--workers", "2", "--csv", str(out), "--quiet"]) == 0
    import csv

    rows = list(csv.DictReader(out.open()))
    assert [float(r["l"]) for r in rows] == [m["l"] for m in ref.members]
    assert [float(r["peak_hinge_rate"]) for r in rows] == [float(v) for v in ref.table["peak_hinge_rate"]]


@pytest.mark.slow  # two console-script sweeps of a closed chain (~40 s); the default job checks the
# pendulum bit for bit in this process (test_two_workers_equal_the_one_process_sweep_bit_for_bit)
def test_console_script_workers_equal_one_process_bit_for_bit_on_a_closed_chain(tmp_path):
    """Issue 57: ``diffmb sweep fold-4panel ... --workers 2`` writes the byte-identical CSV of
    the same sweep in one process (pinned, single-threaded workers differed in the last
    digits of six columns: XLA compiled them other programs). The closure solve's dense
    algebra is what the pendulum lacks."""
    import shutil
    import subprocess

    script = shutil.which("diffmb", path=str(Path(sys.executable).parent)) or shutil.which("diffmb")
    argv = [script, "sweep", "fold-4panel", "--batch", "6", "--set", "K=0.05:0.2", "--set", "c=0:0.05",
            "--sampling", "random", "--seed", "3", "--t1", "0.3", "--chunk-size", "3", "--quiet"]
    # no compilation cache: the workers must compile the driver's program, not read it back
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["DIFFMB_COMPILE_CACHE"] = "off"
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    for out, extra in ((one, []), (two, ["--workers", "2"])):
        r = subprocess.run(argv + ["--csv", str(out)] + extra, capture_output=True, text=True, timeout=300,
                           env=env)
        assert r.returncode == 0, r.stderr
    rows = one.read_text().splitlines()
    assert len(rows) == 7 and "peak_hinge_rate" in rows[0]
    assert one.read_bytes() == two.read_bytes()


def test_a_chunk_out_far_longer_than_the_others_gets_a_second_copy_on_an_idle_worker():
    """Once every chunk is handed out: chunk 7, out for 30 s where chunks take 2 s, is run
    again on the idle worker; chunk 8 (1 s) is not, nor a chunk already copied, nor any
    while both workers are busy or before a chunk has come back."""
    f = {n: object() for n in (7, 8, 9)}
    started = {f[7]: 0.0, f[8]: 29.0, f[9]: 0.0}
    pending = {f[7]: 7, f[8]: 8}
    assert distributed.stragglers(pending, started, [2.0, 2.1, 1.9], set(), 3, 30.0) == [7]
    assert distributed.stragglers(pending, started, [2.0, 2.1, 1.9], {7}, 3, 30.0) == []
    assert distributed.stragglers(pending, started, [2.0, 2.1, 1.9], set(), 2, 30.0) == []
    assert distributed.stragglers(pending, started, [], set(), 3, 30.0) == []


def test_a_chunk_waiting_behind_another_on_a_busy_worker_is_copied_to_an_idle_one():
    """Once every chunk is handed out: a worker holding chunks 2 and 5 (a killed worker's
    replacement, still compiling, given the lost chunk and the next) while another holds
    none: chunk 5, handed out last, gets a copy for the idle worker; nothing while no worker
    is idle, nor a chunk copied already; the longest queue first, one per idle worker."""
    order = {n: n for n in range(10)}
    assert distributed.queued_behind({"a": [2, 5], "b": []}, order, set()) == [5]
    assert distributed.queued_behind({"a": [2, 5], "b": [7]}, order, set()) == []
    assert distributed.queued_behind({"a": [2, 5], "b": []}, order, {5}) == []
    assert distributed.queued_behind({"a": [5], "b": []}, order, set()) == []
    held = {"a": [2, 5], "c": [6, 8, 7], "b": [], "d": []}
    assert distributed.queued_behind(held, order, set()) == [8, 5]
    assert distributed.queued_behind({**held, "d": [9]}, order, set()) == [8]


def test_a_chunk_queued_behind_others_is_timed_from_when_it_began_running():
    """Six chunks handed out at once to two workers: the third and later are timed from
    when a chunk before them came back, not from the hand-out, so at the sweep's tail a
    chunk that ran 2 s of a 2 s chunk time is no straggler (from the hand-out it would
    look 8 s old and get a copy); a chunk that ran 30 s still is."""
    f = [object() for _ in range(6)]
    r = distributed.RunningSince()
    for g in f:
        r.handed_out(g, 0.0, 2)
    assert set(r.since) == {f[0], f[1]}
    for t, done in zip((2.0, 2.1, 4.0, 4.1), f[:4]):
        r.came_back(done, t, 2)
    assert r.since == {f[4]: 4.0, f[5]: 4.1}
    pending = {f[5]: 5}
    r.came_back(f[4], 6.0, 2)
    assert r.since == {f[5]: 4.1}
    assert distributed.stragglers(pending, r.since, [2.0, 1.9, 2.1, 2.0, 2.0], set(), 2, 6.1) == []
    assert distributed.stragglers(pending, r.since, [2.0, 1.9, 2.1, 2.0, 2.0], set(), 2, 34.1) == [5]
    # a chunk cancelled while queued (its twin came back) frees no running slot
    q = distributed.RunningSince()
    for g in f[:3]:
        q.handed_out(g, 0.0, 2)
    q.came_back(f[2], 1.0, 2)
    assert set(q.since) == {f[0], f[1]}


def _first_chunk(case):
    """What a sweep's task carries for its first chunk: the member run, the static params,
    the chunk's slice of the rest, its initial states; and the task's token and job."""
    import hashlib

    import cloudpickle
    import equinox as eqx
    import jax

    from diffmb.design.batch import _take, chunk_members, member_runner

    system, params, kw, _ = case
    dyn, static = eqx.partition(params, eqx.is_array)
    member = member_runner(system, t1=kw["t1"], dt=kw["dt"], solver=kw["solver"], rtol=1e-8, atol=1e-10,
                           saveat=1001, max_violation=1.0, flat_tol_deg=1.0, with_x0=False)
    idx, _ = chunk_members(0, CHUNK, BATCH)
    dyn_c, x0_c = _take(jax.tree_util.tree_map(np.asarray, dyn), idx), np.zeros((CHUNK, 1))
    job = cloudpickle.dumps((member, static))
    return member, static, dyn_c, x0_c, hashlib.sha1(job).hexdigest()[:16] + "-test", job


def test_a_program_exported_by_one_worker_runs_in_another_untraced_and_bit_for_bit(case, monkeypatch):
    """The chunk program a worker exports (issue 25: a killed worker's replacement, or a
    late one, compiles it instead of tracing the run again) gives the one-process sweep's
    numbers bit for bit, and loading it never calls the member run."""
    from diffmb.design import exported_program
    from diffmb.design.batch import run_chunk

    member, static, dyn_c, x0_c, _, _ = _first_chunk(case)
    first = exported_program.build(member, static, dyn_c, x0_c)
    assert first.how == "exported" and len(first.exported) > 1000

    def never(*args):
        raise AssertionError("the shipped program was traced again")

    second = exported_program.build(never, static, dyn_c, x0_c, shipped=first.exported)
    assert second.how == "shipped"
    direct = run_chunk(None, member, static, dyn_c, x0_c)[0]
    for out in (first.program(dyn_c, x0_c), second.program(dyn_c, x0_c)):
        assert out.keys() == direct.keys()
        for k in direct:
            assert out[k].dtype == direct[k].dtype and np.array_equal(out[k], direct[k], equal_nan=True), k
    # bytes that do not load (another jaxlib's, a cut transfer): the worker traces itself
    third = exported_program.build(member, static, dyn_c, x0_c, shipped=first.exported[:100])
    assert third.how == "exported"
    # a program jax.export cannot carry (no flatbuffers, a host callback): as the
    # one-process sweep compiles it, with nothing to ship
    def cannot(*args, **kwargs):
        raise ImportError("Please install 'flatbuffers' in order to use Exported serialization")

    monkeypatch.setattr(exported_program.jax.export, "export", cannot)
    fourth = exported_program.build(member, static, dyn_c, x0_c)
    assert fourth.how == "traced" and fourth.exported is None
    out = fourth.program(dyn_c, x0_c)
    assert all(np.array_equal(out[k], direct[k], equal_nan=True) for k in direct)


def test_a_worker_without_the_program_takes_the_published_one(case, client):
    """The protocol the driver and its workers follow: a task asked for the program
    returns the bytes its worker exported; once they are published, a worker without the
    program compiles them (``how == "shipped"``) and gives the same numbers."""
    from diffmb.design import exported_program  # noqa: F401  (what the workers run)

    _, _, dyn_c, x0_c, token, job = _first_chunk(case)
    a, b = sorted(client.scheduler_info()["workers"])
    run = lambda on, want: client.submit(distributed._run_task, token, job, distributed._dtype(), dyn_c, x0_c,
                                         want, workers=[on], pure=False).result(timeout=120)
    first = run(a, True)
    assert first[5] is not None
    client.publish_dataset(client.scatter(first[5], broadcast=True, hash=False),
                           name=distributed._program_name(token))
    try:
        second = run(b, False)
    finally:
        client.unpublish_dataset(distributed._program_name(token))
    assert second[5] is None  # not asked for, not made there
    how = client.run(lambda: {t: e[2].how for t, e in distributed._PROGRAMS.items()})
    assert how[a][token] == "exported" and how[b][token] == "shipped"
    for k in first[0]:
        assert np.array_equal(first[0][k], second[0][k], equal_nan=True), k


def test_local_workers_are_pinned_with_the_drivers_xla_flags_and_share_a_compilation_cache():
    """What ``--workers 2`` starts on this 2-core machine: each worker process, all its
    threads, on a core of its own; the driver's XLA flags, no others (a single-threaded
    XLA compiled other programs: issue 57); one persistent compilation cache
    (a temporary folder unless JAX_COMPILATION_CACHE_DIR names one, as the test session's
    does) and EQX_ON_ERROR=nan, without which XLA caches none of diffrax's programs; each
    worker forked from a server that has imported diffmb (multiprocessing's forkserver), not
    a spawned interpreter importing it again."""
    from distributed import Client

    cores = sorted(os.sched_getaffinity(0))
    cluster = distributed.local_cluster(2)
    try:
        with Client(cluster) as c:
            assert distributed.pin_workers(c) == (len(cores) >= 2)
            got = c.run(lambda: ({frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")},
                                 os.environ["EQX_ON_ERROR"], os.environ["XLA_FLAGS"],
                                 os.environ["JAX_COMPILATION_CACHE_DIR"],
                                 open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\0", b" ")))
    finally:
        cluster.close()
    (a, *ra), (b, *rb) = got.values()
    assert ra == rb and ra[0] == "nan" and ra[1] == os.environ.get("XLA_FLAGS", "")
    assert ra[2] == os.environ["JAX_COMPILATION_CACHE_DIR"]
    assert b"forkserver" in ra[3] and b"diffmb.design.distributed" in ra[3], ra[3]
    if len(cores) >= 2:
        assert len(a) == len(b) == 1 and a != b and {next(iter(a)), next(iter(b))} <= {frozenset({x}) for x in cores}
    env, made = distributed.worker_env()
    assert made is None  # the session's cache folder is named, so none is made


#: A driver as users write it: diffmb imported at the top of the main module, which every
#: spawned worker imports again, before Dask hands it its environment.
_DRIVER = """
import gc, os, signal, sys, time
import diffmb
from diffmb.design import distributed


def seen():
    import equinox._config, jax
    return os.getpid(), equinox._config.EQX_ON_ERROR, jax.config.jax_compilation_cache_dir


if __name__ == "__main__":
    from distributed import Client

    cluster = distributed.local_cluster(1)
    client = Client(cluster)
    (pid, *first), = client.run(seen).values()
    os.kill(pid, signal.SIGKILL)
    end = time.time() + 60
    while time.time() < end:
        time.sleep(0.1)
        try:
            got = list(client.run(seen).values())
        except Exception:
            continue
        if got and got[0][0] != pid:
            break
    (_, *again), = got
    client.close()
    cluster.close()
    del cluster
    gc.collect()
    # a second cluster in the same process: its workers fork from the same server, whose
    # JAX read the cache folder once; the folder is the same and still there
    cluster = distributed.local_cluster(1)
    client = Client(cluster)
    (_, *second), = client.run(seen).values()
    client.close()
    cluster.close()
    print(first == again == second, os.path.isdir(first[1]), *first, os.environ.get("EQX_ON_ERROR"))
"""


@pytest.mark.slow  # a driver process and its cluster (~7 s); the default job checks the settings
# on the module's workers (test_local_workers_are_pinned_single_threaded_and_share_a_compilation_cache)
def test_workers_import_with_their_settings_replacements_too(tmp_path):
    """JAX reads its cache folder and equinox ``EQX_ON_ERROR`` when imported, and a spawned
    worker imports the driver's main module (diffmb with it) before Dask's ``env`` reaches
    it: given only that way, no worker wrote a chunk's program to the cache (equinox's
    checks stayed host callbacks) and a killed worker's replacement compiled it again
    (9 s for fold-4panel's chunk; 3.8 s read back). A driver without either setting, the
    worker and its replacement after SIGKILL (forked from a server that imported diffmb,
    :func:`distributed._fork_workers`), a second cluster's worker, and the driver's
    environment as it was once the clusters are gone."""
    import subprocess

    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("EQX_ON_ERROR", "JAX_COMPILATION_CACHE_DIR")}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    same, there, on_error, cache, driver_after = r.stdout.split()
    assert same == there == "True" and on_error == "nan" and "diffmb-sweep-jax-cache-" in cache
    assert driver_after == "None"


@pytest.mark.slow  # the CLI's Ctrl-C on a cluster (~4 s); Ctrl-C keeping the finished chunks is
# checked in the default job on the cluster (test_ctrl_c_keeps_the_finished_chunks) and in the CLI
def test_ctrl_c_on_the_cluster_exits_130_keeping_the_finished_chunks(client, tmp_path, monkeypatch, capsys):
    """The CLI's Ctrl-C path with workers: the flag is seen between waits, the queued
    chunks are cancelled, the finished ones are in the table, exit 130."""
    table = tmp_path / "t"
    _interrupt_after(monkeypatch, 3)  # once while starting, then at the driver's second check
    args = [a if a != str(BATCH) else "60" for a in ARGS]  # 20 chunks: more than are out at once
    assert cli.main(args + ["--table", str(table), "--address", client.scheduler.address]) == 130
    err = capsys.readouterr().err
    assert "interrupted;" in err and "continue with --resume" in err
    done = sweep_store.finished(table)
    assert len(done) < 20
    for n in done:
        assert list(sweep_store.read_chunk(table, n)["status"]) == [0] * CHUNK
