"""Figures of a run: coordinates, energy drift, momentum drift, constraint violation.

The figures Fulton & Schaub show for their test cases (Figs. 7-9 style): the motion itself,
then the conservation checks — energy change ``E(t) - E(0)`` (absolute and relative),
angular momentum change ``|h(t) - h(0)|`` for floating-base systems, and the constraint
violation on a log scale for systems with loop closures.

matplotlib is imported lazily (it is an optional dependency: ``pip install diffmb[plot]``).
Figures are built with :class:`matplotlib.figure.Figure` and written by the Agg canvas, so
no GUI backend (and no display) is ever touched and pyplot's global state is left alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MAX_LINES_PER_PANEL = 4
MAX_PANELS = 4


def _figure(n_panels: int = 1, title: str | None = None):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'diffmb[plot]'") from e
    fig = Figure(figsize=(7.0, 2.2 + 2.0 * n_panels), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_panels, 1, sharex=True, squeeze=False)[:, 0]
    if title:
        fig.suptitle(title)
    axes[-1].set_xlabel("time [s]")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def _title(base: str, title: str | None) -> str:
    return f"{title}: {base}" if title else base


def coordinates_figure(traj, title: str | None = None):
    """Position-level coordinates vs time; several panels when there are many."""
    names = list(traj.coordinate_names)
    groups = [names[i : i + MAX_LINES_PER_PANEL] for i in range(0, len(names), MAX_LINES_PER_PANEL)]
    if len(groups) > MAX_PANELS:  # many coordinates: spread them evenly over MAX_PANELS
        groups = [list(g) for g in np.array_split(names, MAX_PANELS)]
    fig, axes = _figure(len(groups), _title("coordinates", title))
    for ax, group in zip(axes, groups):
        for name in group:
            ax.plot(traj.ts, np.asarray(traj[name]), label=name)
        ax.legend(loc="upper right", fontsize="small", ncol=min(len(group), 4))
    axes[0].set_ylabel("coordinate")
    return fig


def energy_figure(traj, title: str | None = None):
    """Energy change ``E(t) - E(0)`` and relative change ``(E(t) - E(0)) / |E(0)|``."""
    e = np.asarray(traj.diagnostics["energy"], float)
    de = e - e[0]
    fig, (ax_abs, ax_rel) = _figure(2, _title("energy change", title))
    ax_abs.plot(traj.ts, de)
    ax_abs.set_ylabel(r"$E(t) - E(0)$ [J]")
    ax_rel.plot(traj.ts, de / max(abs(e[0]), 1e-300))
    ax_rel.set_ylabel(r"$(E - E_0) / |E_0|$")
    for ax in (ax_abs, ax_rel):
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    return fig


def angular_momentum_figure(traj, title: str | None = None):
    """Angular momentum change ``|h(t) - h(0)|``."""
    h = np.asarray(traj.diagnostics["angular_momentum"], float)
    dh = np.linalg.norm(h - h[0], axis=-1)
    fig, (ax,) = _figure(1, _title("angular momentum change", title))
    ax.plot(traj.ts, dh)
    ax.set_ylabel(r"$|h(t) - h(0)|$ [N m s]")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    return fig


def violation_figure(traj, title: str | None = None):
    """Constraint violation (max abs over components) per level, log scale."""
    fig, (ax,) = _figure(1, _title("constraint violation", title))
    for name, v in traj.violation.items():
        v = np.abs(np.asarray(v, float))
        v = v.reshape(len(v), -1).max(axis=1) if v.ndim > 1 else v
        ax.semilogy(traj.ts, np.maximum(v, 1e-300), label=name)
    ax.set_ylabel("violation (max abs)")
    ax.legend(loc="upper right", fontsize="small")
    return fig


def plot_trajectory(traj, out_dir, *, title: str | None = None, prefix: str = "") -> list[Path]:
    """Write the figures of ``traj`` as PNGs into ``out_dir``; returns their paths.

    Files are ``<prefix><figure>.png``: always ``coordinates``; ``energy`` when the system
    reports energy; ``angular_momentum`` when it reports angular momentum; ``violation``
    when it has constraints. Only the rows the run reached are drawn.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tr = traj.trimmed()
    if len(tr.ts) == 0:
        return []
    figures = {"coordinates": coordinates_figure}
    if "energy" in tr.diagnostics:
        figures["energy"] = energy_figure
    if "angular_momentum" in tr.diagnostics:
        figures["angular_momentum"] = angular_momentum_figure
    if tr.violation:
        figures["violation"] = violation_figure
    paths = []
    for name, make in figures.items():
        path = out_dir / f"{prefix}{name}.png"
        make(tr, title).savefig(path, dpi=110)
        paths.append(path)
    return paths
