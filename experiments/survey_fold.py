"""Survey: do crease patterns from other tools load, build and run in diffmb?

For every ``*.fold`` and ``*.svg`` in the folders given (the FOLD specification's
examples, a crease-pattern library's test files, Origami Simulator's exports), the way a
user's ``diffmb run FILE`` would: load (the notes of what the loader did on its own),
build (the mobility at the start state, build time), run a short horizon (compile time,
run time, status, the worst closure violation). A file is *refused* when loading or
building raises, with the reason printed; *locked* files are built and run (nothing
moves) and say so. JSON to ``out/survey_fold.json`` and a printed table.

    python experiments/survey_fold.py FOLDER [FOLDER ...] [--t1 0.1] [--no-run]

With no folder, the survey writes its own small set (a degree-4 vertex flat, folded in
3-D, folded flat in 2-D, edge-only, in the x-z plane, a multi-frame file, a locked
degree-3 vertex, an SVG) into ``out/survey_fold_files/`` and surveys that.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from diffmb.origami import build
from diffmb.origami.start_state import PatternNote
from diffmb.scenarios import origami as origami_scenarios

DEFAULTS = {"density": 1.0, "K": 0.01, "c": 0.0, "hub_mass": 0.0, "closure_tol": 1e-5}


def survey_one(path: str, t1: float, run: bool) -> dict:
    row = {"file": path, "outcome": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PatternNote)
        try:
            t = time.perf_counter()
            pattern = origami_scenarios.load_pattern(path, DEFAULTS)
            row["load_s"] = time.perf_counter() - t
            row["panels"], row["creases"] = len(pattern.panels), len(pattern.creases)
            t = time.perf_counter()
            system, info = build(pattern, stabilization="projection")
            row["build_s"] = time.perf_counter() - t
        except ValueError as e:
            row.update(outcome="refused", reason=" ".join(str(e).split()))
            return row
    row["notes"] = [str(w.message) for w in caught if issubclass(w.category, PatternNote)]
    row["mobility"] = str(info.mobility)
    row["dof"] = info.mobility.dof
    row["outcome"] = "builds" if info.mobility.dof else "locked"
    if run:
        from diffmb.simulation.integrate import simulate

        t = time.perf_counter()
        traj = simulate(system, params=system.default_params(), t1=t1, dt=1e-3, solver="dopri5", rtol=1e-8,
                        atol=1e-10, saveat=5)
        row["first_run_s"] = time.perf_counter() - t      # compile + run
        t = time.perf_counter()
        traj = simulate(system, params=system.default_params(), t1=t1, dt=1e-3, solver="dopri5", rtol=1e-8,
                        atol=1e-10, saveat=5)
        row["run_s"] = time.perf_counter() - t
        row["compile_s"] = max(row["first_run_s"] - row["run_s"], 0.0)
        row["status"] = traj.status
        v = traj.summary().get("violation") or {}
        row["violation"] = v.get("position_max")
        if row["outcome"] == "builds":
            row["outcome"] = "runs" if traj.status == "success" else traj.status
    return row


def own_files(folder: str) -> list:
    """The survey's own small set of files (module docstring)."""
    from tests.test_fold_files import folded_vertex, vertex_fold

    os.makedirs(folder, exist_ok=True)
    files = {
        "vertex_flat.fold": vertex_fold(),
        "vertex_folded_3d.fold": folded_vertex(1.0),
        "degree3_locked.fold": vertex_fold(phis=(0.0, 2.0, 4.0), assign=("V", "M", "V")),
        "vertex_frames.fold": {"file_frames": [{**vertex_fold(faces=True), "frame_classes": ["creasePattern"]},
                                               {"frame_inherit": True, "frame_parent": 1,
                                                "frame_classes": ["foldedForm"],
                                                "vertices_coords": folded_vertex(0.5)["vertices_coords"]}]},
        "vertex_xz.fold": {**vertex_fold(faces=True),
                           "vertices_coords": [[x, 0.0, y] for x, y in vertex_fold()["vertices_coords"]]},
    }
    out = []
    for name, data in files.items():
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            json.dump(data, f)
        out.append(path)
    svg = os.path.join(folder, "square_diagonal.svg")
    with open(svg, "w") as f:
        f.write('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">'
                '<rect x="0" y="0" width="100" height="100" fill="none" stroke="#000000"/>'
                '<line x1="0" y1="0" x2="100" y2="100" stroke="#0000ff"/></svg>')
    return out + [svg]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--t1", type=float, default=0.1, help="run horizon [s]")
    ap.add_argument("--no-run", action="store_true", help="load and build only")
    ap.add_argument("--out", default="out/survey_fold.json")
    args = ap.parse_args(argv)
    files = (sorted(f for d in args.folders for ext in ("fold", "svg")
                    for f in glob.glob(os.path.join(d, "**", f"*.{ext}"), recursive=True))
             if args.folders else own_files(os.path.join(os.path.dirname(args.out) or ".", "survey_fold_files")))
    rows = []
    for path in files:
        row = survey_one(path, args.t1, not args.no_run)
        rows.append(row)
        fmt = lambda k: f"{row[k]:.2f}" if isinstance(row.get(k), float) else "-"
        print(f"{os.path.basename(path)[:32]:32s} {row['outcome']:8s} panels {row.get('panels', '-')!s:>4} "
              f"load {fmt('load_s')} build {fmt('build_s')} compile {fmt('compile_s')} run {fmt('run_s')} s  "
              f"{row.get('mobility') or row.get('reason', '')}", flush=True)
    counts = {k: sum(r["outcome"] == k for r in rows) for k in sorted({r["outcome"] for r in rows})}
    print("summary:", ", ".join(f"{v} {k}" for k, v in counts.items()), f"of {len(rows)} files")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"files": rows, "counts": counts, "t1": args.t1}, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
