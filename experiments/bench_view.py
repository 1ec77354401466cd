"""Benchmark: the size and frame rate of ``diffmb view`` pages (docs/viewer.md).

For an ``n x n`` map fold over ``--t1`` seconds, a run file of its states along a
prescribed unfolding (``tests/viewer_runs.py``: the page's size and speed depend only on
frames x bodies, not on how the states were computed), its page at the default
decimation (25 frames per simulated second), then in headless Chromium (software WebGL,
``tests/browser.py``): the JavaScript time of one frame update (interpolating the poses,
transforming every vertex, colouring), and the frames per second while playing (at 1x,
or slower where the run is shorter than the measurement) in a 1200x800 and a 500x420
window, drawn at full resolution and with the page's adaptive resolution (fewer pixels
while moving until frames come at 30 per second; the resolution it settled at is
reported). Writes ``out/bench_view.json`` and prints it.

    python experiments/bench_view.py                  # 20x20 over 10 s, and the 4-panel fold
    python experiments/bench_view.py --size 10 --t1 30
    python experiments/bench_view.py --run out/real20/map-fold.npz   # a real run's page

``--run RUN.npz`` measures the page of a run file that ``diffmb run`` wrote (an
integrated run) instead, and writes ``out/bench_view_run.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser import browser, console_errors, open_page  # noqa: E402
from diffmb.viewer import saved, scene_of  # noqa: E402
from diffmb.viewer.page import write  # noqa: E402
from viewer_runs import fold_run  # noqa: E402

MEASURE = """
const v = window.diffmbViewer, n = 200, t0 = performance.now();
for (let i = 0; i < n; i++) v.setTime(v.t0 + (v.t1 - v.t0) * i / n);
return (performance.now() - t0) / n;"""


def playing_fps(drv, seconds: float, adaptive: bool = True) -> tuple[float, float]:
    """Frames drawn per second while playing, and the resolution drawn at by the end
    (the fraction of the full pixel ratio; 1 without adaptive resolution)."""
    drv.execute_script(f"window.diffmbViewer.setAdaptive({'true' if adaptive else 'false'})")
    # at 1x, or slower where the run would end before the measurement does (then the page
    # stops drawing, and the count would mean nothing)
    drv.execute_script("const v = window.diffmbViewer; v.setTime(v.t0); "
                       f"v.setSpeed(Math.min(1, (v.t1 - v.t0) / {seconds + 3.0})); v.play()")
    time.sleep(2.0)  # the resolution settles in the first second or two
    r0 = drv.execute_script("return [window.diffmbViewer.renders, performance.now()]")
    time.sleep(seconds)
    r1 = drv.execute_script("return [window.diffmbViewer.renders, performance.now(), window.diffmbViewer.resolution()]")
    drv.execute_script("window.diffmbViewer.pause(); window.diffmbViewer.setAdaptive(true)")
    return round((r1[0] - r0[0]) / (r1[1] - r0[1]) * 1000, 1), round(r1[2], 2)


def measure(drv, page: Path) -> dict:
    start = time.perf_counter()
    open_page(drv, page, timeout=120)
    out = {"page": str(page), "size_MB": round(page.stat().st_size / 1e6, 2),
           "load_s": round(time.perf_counter() - start, 2),
           "update_ms": round(drv.execute_script(MEASURE), 3)}
    out["fps_1200x800_full_resolution"], _ = playing_fps(drv, 4.0, adaptive=False)
    out["fps_1200x800"], out["resolution_1200x800"] = playing_fps(drv, 4.0)
    drv.set_window_size(500, 420)
    time.sleep(0.5)
    out["fps_500x420_full_resolution"], _ = playing_fps(drv, 3.0, adaptive=False)
    out["fps_500x420"], out["resolution_500x420"] = playing_fps(drv, 3.0)
    drv.set_window_size(1200, 800)
    out["console_errors"] = len(console_errors(drv))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=20)
    p.add_argument("--t1", type=float, default=10.0)
    p.add_argument("--run", type=Path, metavar="RUN.npz", help="measure the page of this run file instead")
    args = p.parse_args()
    folder = ROOT / "out" / "bench_view"
    folder.mkdir(parents=True, exist_ok=True)
    if args.run is not None:
        cases = [(args.run.stem + "-run", None)]
    else:
        cases = [("map-fold", dict(name="map-fold", t1=args.t1, n=int(100 * args.t1) + 1,
                                   overrides={"rows": args.size, "cols": args.size})),
                 ("fold-4panel", dict(name="fold-4panel", t1=2.0, n=81))]
    pages = []
    for label, kw in cases:
        start = time.perf_counter()
        run = args.run if kw is None else fold_run(folder / f"{label}.npz", **kw)
        sc = scene_of(saved.load(run))
        pages.append((write(sc, folder / f"{label}.html"), len(sc.times), len(sc.body_names),
                      time.perf_counter() - start))
    results = []
    with browser() as drv:
        for page, frames, bodies, made_s in pages:
            results.append({"frames": frames, "bodies": bodies, "made_s": round(made_s, 1), **measure(drv, page)})
    if args.run is not None:
        results[0]["run"] = str(args.run)
    name = "bench_view_run.json" if args.run is not None else "bench_view.json"
    (ROOT / "out" / name).write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
