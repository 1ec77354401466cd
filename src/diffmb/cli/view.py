"""``diffmb view RUN.npz [--html FILE.html] [--json FILE]``: a run in 3-D, one self-contained web page.

The page (:mod:`diffmb.viewer`) opens offline in any current browser: play/pause, speed,
a time slider with the time, orbit/pan/zoom, follow-the-hub, colour by a quantity with
its legend and a synchronised plot, world axes, grid and scale bar. ``RUN.npz`` is what
``diffmb run`` writes; its scenario or model file is rebuilt from the metadata.

A sweep keeps no trajectories: ``diffmb view SWEEP.json --member K`` runs member ``K`` of a
``diffmb sweep --json`` file again (its values, the sweep's horizon, solver, step,
tolerances and stabilization as its JSON records them) into ``<page>_run/`` and shows it;
``--member K,L,M`` shows a few side by side.

Also: ``--fold FILE.fold`` (origami runs) the frames as a multi-frame FOLD file,
``--gltf FILE.gltf`` / ``--obj FILE.obj`` one frame (``--at T``, default the last) as a
mesh; ``--json FILE`` what was written (files, frames, bodies, times). Bad input (a
missing file, a file that is not a run, an unknown scenario in its metadata) is one line
on stderr naming the file or field, exit code 2.
"""

from __future__ import annotations

from pathlib import Path

from ._common import (
    Parser,
    UsageError,
    check_outputs,
    deprecated,
    json_arg,
    one_line_errors,
    positive,
    quiet_arg,
    write_json,
)


def _run_parser() -> Parser:
    """``diffmb run``'s parser alone, to run a sweep member again as ``diffmb run`` would."""
    from . import run

    p = Parser(prog="diffmb")
    run.add_parser(p.add_subparsers(dest="command"))
    return p


def add_parser(sub):
    v = sub.add_parser("view", help="write a run as an interactive 3-D web page", description=(
        "Write RUN.npz (from diffmb run) as one self-contained HTML page (no network needed): "
        "3-D bodies over time with play, scrub, orbit, colour by a quantity."))
    v.add_argument("run", metavar="RUN.npz", type=Path,
                   help="a run written by diffmb run, or a sweep's --json with --member K")
    v.add_argument("--member", metavar="K[,K...]",
                   help="with a sweep's JSON: show member K (0-based row), simulated again; "
                        "several (K,L,M: at most 6) side by side")
    v.add_argument("--html", type=Path, metavar="FILE.html", help="the page (default: RUN.html beside RUN.npz)")
    deprecated(v, "--out", "--html", type=Path, metavar="FILE.html")
    v.add_argument("--fps", type=float, default=None, metavar="N",
                   help="frames kept per simulated second (default 25; the page interpolates between them)")
    v.add_argument("--max-frames", type=int, default=None, metavar="N", help="at most N frames (default 400)")
    v.add_argument("--fold", type=Path, metavar="FILE.fold",
                   help="also write the frames as a multi-frame FOLD file (origami runs)")
    v.add_argument("--gltf", type=Path, metavar="FILE.gltf", help="also write one frame as glTF 2.0")
    v.add_argument("--obj", type=Path, metavar="FILE.obj", help="also write one frame as Wavefront OBJ")
    v.add_argument("--at", type=float, metavar="T", help="the time of the --gltf / --obj frame [s] "
                   "(default: the last frame)")
    json_arg(v, "what was written (files, frames, bodies, times)")
    quiet_arg(v, "print nothing")


MAX_MEMBERS = 6


def _members(text: str) -> list:
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        raise UsageError(f"--member {text}: expected a row number or numbers separated by commas") from None
    if not 1 <= len(ks) <= MAX_MEMBERS or len(set(ks)) != len(ks):
        raise UsageError(f"--member {text}: give 1 to {MAX_MEMBERS} different rows")
    return ks


def _simulate_member(args, out: Path, k: int) -> Path:
    """Run member ``k`` of the sweep again (``diffmb run`` with its values and the sweep's
    horizon and run settings, the scenario's where the JSON has none) into
    ``<out stem>_run/member<k>/``; its npz."""
    from .. import scenarios
    from ..simulation.integrate import ADAPTIVE_SOLVERS
    from ..viewer.sweep_member import member
    from . import run

    name, values, t1, st = member(args.run, k)
    folder = out.with_name(out.stem + "_run") / f"member{k}"
    argv = [name, "--out", str(folder), "--no-plot", "--quiet", "--discard"]  # run's --out: a folder
    argv += [f"--set={k}={v!r}" for k, v in values.items()] + (["--t1", repr(t1)] if t1 else [])
    solver = st.get("solver") or scenarios.get(name).solver
    # tolerances only for an adaptive solver (a fixed-step one refuses them: it ignores them)
    argv += [f"--{o}={st[o]}" if isinstance(st[o], str) else f"--{o}={st[o]!r}"
             for o in ("solver", "dt", "stabilization") + (("rtol", "atol") if solver in ADAPTIVE_SOLVERS else ())
             if o in st]
    parsed = _run_parser().parse_args(["run"] + argv)
    code = run.main(parsed)
    if code not in (0, 1):
        raise UsageError(f"--member {k}: running it again failed (exit code {code})")
    return folder / f"{name}.npz"


@one_line_errors
def main(args) -> int:
    from .. import viewer
    from ..viewer import saved
    from ..viewer.page import write

    fps = positive("fps", args.fps) or viewer.FPS
    if args.max_frames is not None and args.max_frames < 2:
        raise UsageError(f"--max-frames must be at least 2, got {args.max_frames}")
    max_frames = args.max_frames or viewer.MAX_FRAMES
    for flag, path, ext in (("--html", args.html, ".html"), ("--fold", args.fold, ".fold"),
                            ("--gltf", args.gltf, ".gltf"), ("--obj", args.obj, ".obj")):
        if path is not None and path.suffix.lower() != ext:
            raise UsageError(f"{flag} {path}: expected a {ext} file name")
    if args.at is not None and args.gltf is None and args.obj is None:
        raise UsageError("--at picks the frame of --gltf / --obj; give one of them")
    if not args.run.is_file():
        raise UsageError(f"{args.run}: no such file" if not args.run.exists() else f"{args.run}: not a file")
    is_sweep = args.run.suffix.lower() == ".json"
    if is_sweep != (args.member is not None):
        raise UsageError(f"{args.run}: give --member K to pick a member of a sweep's JSON" if is_sweep else
                         "--member applies to a sweep's JSON (diffmb sweep --json), not to a run file")
    ks = _members(args.member) if is_sweep else []
    if len(ks) > 1 and args.fold is not None:
        raise UsageError(f"--fold {args.fold}: a FOLD file holds one member; give one --member")
    tag = "-".join(str(k) for k in ks)
    default = args.run.with_suffix(f".member{tag}.html" if is_sweep else ".html")
    out = args.html if args.html is not None else default
    check_outputs(json_path=args.json, files=[("--html", out), ("--fold", args.fold), ("--gltf", args.gltf),
                                              ("--obj", args.obj)])
    runs = [saved.load(_simulate_member(args, out, k)) for k in ks] if is_sweep else [saved.load(args.run)]
    scenes = [viewer.scene_of(r, fps, max_frames) for r in runs]
    run = runs[0]
    if len(scenes) > 1:
        from ..viewer.compose import side_by_side

        scene = side_by_side(scenes, [f"member {k}" for k in ks], f"{args.run.stem}: members {', '.join(map(str, ks))}")
    else:
        scene = scenes[0]
    if args.fold is not None and scene.kind != "origami":
        raise UsageError(f"--fold {args.fold}: {args.run} is not an origami run (scenario {run.name!r}); "
                         f"a FOLD file holds crease patterns")
    if args.gltf is not None or args.obj is not None:
        from ..viewer import mesh

        mesh.frame_at(scene, args.at)  # an --at outside the run is refused before any file is written
    files = [write(scene, out)]
    if args.fold is not None:
        from ..viewer.fold_frames import write_fold_frames

        files.append(write_fold_frames(run, args.fold, fps=fps, max_frames=max_frames))
    if args.gltf is not None or args.obj is not None:
        for path, writer in ((args.gltf, mesh.write_gltf), (args.obj, mesh.write_obj)):
            if path is not None:
                files.append(writer(scene, path, args.at))
    if args.json is not None:
        write_json(args.json, {"files": [str(f) for f in files], "frames": len(scene.times),
                               "bodies": list(scene.body_names), "t0": float(scene.times[0]),
                               "t1": float(scene.times[-1])})
    if not args.quiet:
        for f in files:
            print(f"{f} ({f.stat().st_size / 1e3:,.0f} kB)")
        print(f"{len(scene.times)} frames of {len(scene.body_names)} bodies, t = {float(scene.times[0]):g} "
              f"to {float(scene.times[-1]):g} s")
    return 0
