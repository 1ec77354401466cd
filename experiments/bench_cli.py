"""Benchmark: ``diffmb run`` against the library benchmark on the same model.

For map folds ``n x n`` (RK4, dt = 1 ms, ``--horizon`` seconds), each repetition runs, in
fresh processes one after the other,

* the library case of ``experiments/bench_scale.py`` (``compile_simulation``, 11 save
  points, no files), and
* the command line, ``diffmb run map-fold --set rows=n --set cols=n --t1 H --dt 0.001
  --solver rk4 --stabilization S --no-plot --quiet --json ...``: a save point per step
  (up to 1001 per chunk), diagnostics at each (energy, momenta, Phi_dot^T Phi_dot), the
  closure rank at 51 of them, the partial file after each chunk, the npz and CSV;

and reports the medians of the time per step (the CLI's ``wall_s``: its compiled chunks,
diagnostics included; compile apart) and their ratio, with compile times beside them.
The machine is shared: the two are interleaved and the CPU pressure is recorded.
Writes ``out/bench_cli.json`` and prints a table.

    python experiments/bench_cli.py                       # sizes 4 10 20, both stabilizations
    python experiments/bench_cli.py --sizes 10 --stabilizations baumgarte --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]


def library(n, stab, horizon):
    w = json.dumps({"engine": "diffmb", "kind": "map", "n": n, "stabilization": stab,
                    "horizon": horizon, "dt": 1e-3})
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench_scale.py"), "--worker", w],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["us_per_step"], r["compile_s"]


def cli(n, stab, horizon):
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "r.json"
        # (the paper's model, contact off: fixed RK4 steps of 1 ms do not resolve contact's barriers)
        subprocess.run([sys.executable, "-m", "diffmb", "run", "map-fold", "--set", "contact=0", "--set", f"rows={n}",
                        "--set", f"cols={n}", "--t1", str(horizon), "--dt", "0.001", "--solver", "rk4",
                        "--stabilization", stab, "--no-plot", "--quiet", "--out", tmp, "--json", str(js)],
                       check=True, cwd=ROOT)
        r = json.loads(js.read_text())
    return 1e6 * r["wall_s"] / r["steps"], r["compile_s"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 10, 20])
    ap.add_argument("--stabilizations", nargs="+", default=["baumgarte", "projection"])
    ap.add_argument("--horizon", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_cli.json")
    args = ap.parse_args(argv)
    rows, pressure = [], [(cpu_pressure() or "n/a")]
    for n in args.sizes:
        for stab in args.stabilizations:
            lib, com = [], []
            for _ in range(args.repeat):
                lib.append(library(n, stab, args.horizon))
                com.append(cli(n, stab, args.horizon))
            row = {"n": n, "panels": n * n, "stabilization": stab,
                   "library_us_per_step": statistics.median(x for x, _ in lib),
                   "cli_us_per_step": statistics.median(x for x, _ in com),
                   "library_compile_s": statistics.median(c for _, c in lib),
                   "cli_compile_s": statistics.median(c for _, c in com),
                   "runs": {"library": lib, "cli": com}}
            row["ratio"] = row["cli_us_per_step"] / row["library_us_per_step"]
            rows.append(row)
            print(f"map {n}x{n} {stab:10s} library {row['library_us_per_step']:8.0f} us/step "
                  f"(compile {row['library_compile_s']:.1f} s)  cli {row['cli_us_per_step']:8.0f} us/step "
                  f"(compile {row['cli_compile_s']:.1f} s)  ratio {row['ratio']:.2f}", flush=True)
    pressure.append((cpu_pressure() or "n/a"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"horizon": args.horizon, "dt": 1e-3, "solver": "rk4",
                                    "cpu_pressure": pressure, "rows": rows}, indent=1))
    print(f"\n{'case':22s} {'library us/step':>16s} {'cli us/step':>12s} {'ratio':>6s} "
          f"{'compile lib / cli s':>20s}")
    for r in rows:
        print(f"map {r['n']}x{r['n']} {r['stabilization']:12s} {r['library_us_per_step']:16.0f} "
              f"{r['cli_us_per_step']:12.0f} {r['ratio']:6.2f} "
              f"{r['library_compile_s']:9.1f} / {r['cli_compile_s']:.1f}")
    print(f"CPU pressure before: {pressure[0]}\n             after:  {pressure[1]}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
