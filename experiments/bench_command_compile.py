"""Benchmark: every program a ``diffmb run`` compiles, contact off beside on.

A run's ``compile_s`` is its solve's. The command compiles more: the build's start checks,
the start program, the diagnostics programs and what its summary computes. Each
repetition runs the command twice in fresh processes, ``--set contact=0`` then ``1``, each
with a fresh compilation cache (``DIFFMB_COMPILE_CACHE``) and ``JAX_LOG_COMPILES=1``, and
sums JAX's own log per program: tracing, lowering to MLIR and XLA's compile. Reports the
medians per program, off and on, the difference, the command's wall time and
``compile_s``. The machine is shared: off and on alternate and the CPU pressure is
recorded. Writes ``out/bench_command_compile.json`` and prints a table.

    python experiments/bench_command_compile.py                        # the 10x10 map fold, 0.5 s
    python experiments/bench_command_compile.py --case fold-2x4 --repeat 3 --args --t1 1
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]
#: One line of JAX's compile log: the stage, the program and its seconds.
LOG = re.compile(r"Finished (tracing|jaxpr to MLIR module conversion|XLA compilation)(?: stage)? "
                 r"(?:for |of )?(\S+).* in ([0-9.e+-]+) sec")


def programs(log: str) -> dict:
    """Seconds per program (``jit(f)`` and ``f`` as ``f``), its three stages summed; the
    programs of single operations (op by op) together as ``(single operations)``."""
    out = collections.Counter()
    for line in log.splitlines():
        m = LOG.match(line)
        if m:
            out[m.group(2).removeprefix("jit(").removesuffix(")")] += float(m.group(3))
    return dict(out)


def command(case: str, contact: int, extra: list) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "r.json"
        env = dict(os.environ, DIFFMB_COMPILE_CACHE=str(Path(tmp) / "cache"), JAX_LOG_COMPILES="1")
        tic = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "diffmb", "run", case, *extra, "--set", f"contact={contact}",
                            "--no-plot", "--quiet", "--out", tmp, "--json", str(js)],
                           capture_output=True, text=True, cwd=ROOT, env=env)
        wall = time.perf_counter() - tic
        if r.returncode != 0:
            raise SystemExit(f"diffmb run {case} contact={contact}: exit {r.returncode}: {r.stderr[-500:]}")
        res = json.loads(js.read_text())
    return {"wall_s": wall, "compile_s": res["compile_s"], "status": res["status"],
            "programs": programs(r.stderr + r.stdout)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="map-fold")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=10, help="programs printed, by their difference")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_command_compile.json")
    ap.add_argument("--args", nargs=argparse.REMAINDER, default=None,
                    help="the command's own arguments (default for map-fold: rows=cols=10, --t1 0.5)")
    args = ap.parse_args(argv)
    extra = args.args if args.args is not None else (
        ["--set", "rows=10", "--set", "cols=10", "--t1", "0.5"] if args.case == "map-fold" else [])
    pressure = [cpu_pressure() or "n/a"]
    runs = {0: [], 1: []}
    for k in range(args.repeat):
        for contact in (0, 1):
            r = command(args.case, contact, extra)
            runs[contact].append(r)
            print(f"{k + 1}/{args.repeat} contact={contact}: every program {sum(r['programs'].values()):.2f} s, "
                  f"compile_s {r['compile_s']:.2f} s, wall {r['wall_s']:.1f} s, {r['status']}", flush=True)
    pressure.append(cpu_pressure() or "n/a")

    def median(contact, pick):
        return statistics.median(pick(r) for r in runs[contact])

    names = set().union(*(r["programs"] for c in runs for r in runs[c]))
    table = {n: [median(c, lambda r, n=n: r["programs"].get(n, 0.0)) for c in (0, 1)] for n in names}
    rows = sorted(table.items(), key=lambda kv: -(kv[1][1] - kv[1][0]))
    summary = {key: [median(c, pick) for c in (0, 1)] for key, pick in (
        ("every_program_s", lambda r: sum(r["programs"].values())), ("compile_s", lambda r: r["compile_s"]),
        ("wall_s", lambda r: r["wall_s"]))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"case": args.case, "args": extra, "repeat": args.repeat, "cpu_pressure": pressure,
                                    "medians": summary, "programs": table, "runs": runs}, indent=1))
    print(f"\n{args.case} {' '.join(extra)}: medians of {args.repeat}, seconds (trace + lower + XLA)")
    print(f"{'program':34s} {'off':>7s} {'on':>7s} {'on - off':>9s}")
    for name, (off, on) in rows[:args.top]:
        print(f"{name[:34]:34s} {off:7.2f} {on:7.2f} {on - off:+9.2f}")
    for key, (off, on) in summary.items():
        print(f"{key:34s} {off:7.2f} {on:7.2f} {on - off:+9.2f}")
    print(f"CPU pressure before: {pressure[0]}\n             after:  {pressure[1]}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
