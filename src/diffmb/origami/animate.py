"""3-D animation of a folding pattern: panels (and hub) as polygons over time, to a GIF.

The panel polygons come from :class:`~diffmb.origami.pattern.OrigamiInfo`
``panel_outlines`` (vertices in each body's frame); their world positions at each saved
state come from :func:`diffmb.tree.api.forward_kinematics` (``dcm = [body world]``, so a
vertex ``v`` of body ``k`` is at ``pos[k] + dcm[k]^T v``). Written with matplotlib's
PillowWriter (Pillow ships with matplotlib); no GUI backend is touched.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from ..tree import api


def panel_polygons(system, traj, panels, max_frames: int = 150):
    """``(times (F,), polygons)``: ``polygons[f][i]`` is panel ``i``'s ``(k, 3)`` world
    vertices at frame ``f`` (at most ``max_frames`` frames, evenly spread)."""
    tr = traj.trimmed()
    ts, xs = np.asarray(tr.ts), np.asarray(tr.xs)
    if len(ts) == 0:
        raise ValueError("animate: the trajectory has no finite states")
    pick = np.unique(np.linspace(0, len(ts) - 1, min(max_frames, len(ts))).round().astype(int))
    model = system.model
    nq = model.nq
    fk = jax.jit(jax.vmap(lambda q: api.forward_kinematics(model, q)))
    dcm, pos = (np.asarray(a) for a in fk(xs[pick, :nq]))
    idx = [model.body_index(name) for name, _ in panels]
    verts = [np.asarray(v, float) for _, v in panels]
    polys = [[pos[f, b] + verts[i] @ dcm[f, b] for i, b in enumerate(idx)] for f in range(len(pick))]
    return ts[pick], polys


def animate(system, traj, panels, path, fps: int = 20, max_frames: int = 150, title: str | None = None) -> Path:
    """Write a GIF of the panels of ``system`` along ``traj`` to ``path``.

    ``panels``: ``((body name, vertices in body coordinates), ...)`` — e.g.
    ``OrigamiInfo.panel_outlines``. The first panel (the root/hub) is drawn darker.
    """
    try:
        from matplotlib.animation import PillowWriter
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from mpl_toolkits.mplot3d.art3d import Poly3DCollection
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("animation needs matplotlib: pip install 'diffmb[plot]'") from e
    ts, polys = panel_polygons(system, traj, panels, max_frames)
    allv = np.concatenate([np.concatenate(p) for p in polys])
    lo, hi = allv.min(0), allv.max(0)
    mid, half = (lo + hi) / 2, max(float((hi - lo).max()) / 2, 1e-3) * 1.05

    fig = Figure(figsize=(5.0, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(projection="3d")
    ax.set_xlim(mid[0] - half, mid[0] + half)
    ax.set_ylim(mid[1] - half, mid[1] + half)
    ax.set_zlim(mid[2] - half, mid[2] + half)
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_zlabel("z [m]")
    names = [n for n, _ in panels]
    colors = ["0.35"] + [f"C{i % 10}" for i in range(len(panels) - 1)]
    coll = Poly3DCollection(polys[0], facecolors=colors, edgecolors="k", linewidths=0.8, alpha=0.75)
    ax.add_collection3d(coll)
    label = ax.text2D(0.02, 0.95, "", transform=ax.transAxes)
    head = f"{title}: " if title else ""
    ax.set_title(f"{head}panels {', '.join(names)}", fontsize="small")

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    writer = PillowWriter(fps=fps)
    with writer.saving(fig, str(tmp), dpi=80):
        for t, frame in zip(ts, polys):
            coll.set_verts(frame)
            label.set_text(f"t = {t:.3f} s")
            writer.grab_frame()
    tmp.replace(path)
    return path
