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

from .data import unit_kinds
from .sensors import UNITS

MAX_LINES_PER_PANEL = 4
MAX_PANELS = 4


def _new_figure(figsize):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'diffmb[plot]'") from e
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _figure(n_panels: int = 1, title: str | None = None):
    fig = _new_figure((7.0, 2.2 + 2.0 * n_panels))
    axes = fig.subplots(n_panels, 1, sharex=True, squeeze=False)[:, 0]
    if title:
        fig.suptitle(title)
    axes[-1].set_xlabel("time [s]")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def _title(base: str, title: str | None) -> str:
    return f"{title}: {base}" if title else base


#: unit groups of the coordinates plot: (kind from :func:`diffmb.data.unit_kinds`, label)
UNIT_GROUPS = (("angle", "angles [rad]"), ("length", "positions [m]"),
               ("none", "attitude (MRP) [-]"), ("other", "other coordinates"))


def _unit_kind(name: str, kinds: dict) -> str:
    """A coordinate's unit group: from the model's joint kinds, else from its name."""
    if name in kinds:
        return kinds[name] if kinds[name] in ("angle", "length", "none") else "other"
    low = name.lower()
    if low.startswith(("theta", "phi", "psi", "angle")) or low.endswith(("_deg", "_rad")):
        return "angle"
    if "sigma" in low or low.startswith(("q_", "quat")):
        return "none"
    if low.endswith(("_x", "_y", "_z")) or low in ("x", "y", "z") or low.startswith(("x", "y", "z")) and low[1:].isdigit():
        return "length"
    return "other"


def coordinates_figure(traj, title: str | None = None, system=None):
    """Position-level coordinates vs time, one panel per unit (angles, positions, MRP,
    other), each labelled with its unit; colours and line styles cycle so that no two
    curves of a panel look alike (legend beside the panel)."""
    kinds = unit_kinds(system) if system is not None else {}
    names = list(traj.coordinate_names)
    groups = {k: [n for n in names if _unit_kind(n, kinds) == k] for k, _ in UNIT_GROUPS}
    panels = [(label, groups[k]) for k, label in UNIT_GROUPS if groups[k]]
    fig, axes = _figure(len(panels), _title("coordinates", title))
    styles = ("-", "--", ":", "-.")
    for ax, (label, group) in zip(axes, panels):
        for j, name in enumerate(group):
            ax.plot(traj.ts, np.asarray(traj[name]), label=name, color=f"C{j % 10}",
                    linestyle=styles[(j // 10) % len(styles)])
        ax.set_ylabel(label)
        _legend_outside(ax, len(group))
    return fig


def _legend_outside(ax, n: int):
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False,
              ncol=1 if n <= 12 else 2)


def energy_figure(traj, title: str | None = None):
    """Energy change ``E(t) - E(0)`` and relative change ``(E(t) - E(0)) / |E(0)|``."""
    e = np.asarray(traj.diagnostics["energy"], float)
    de = e - e[0]
    relative = abs(e[0]) > 1e-12 * max(np.abs(e).max(), 1e-300)  # E0 = 0: no relative panel
    fig, axes = _figure(2 if relative else 1, _title("energy change", title))
    axes[0].plot(traj.ts, de)
    axes[0].set_ylabel(r"$E(t) - E(0)$ [J]")
    if relative:
        axes[1].plot(traj.ts, de / abs(e[0]))
        axes[1].set_ylabel(r"$(E - E_0) / |E_0|$")
    for ax in axes:
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
    """Constraint violation (max abs over components) per level, log scale. The axis
    spans the nonzero data; exact zeros (a projected state) are drawn as markers on the
    axis floor and said in the legend, never plotted as 1e-300."""
    fig, (ax,) = _figure(1, _title("constraint violation", title))
    series = {}
    for name, v in traj.violation.items():
        v = np.abs(np.asarray(v, float))
        series[name] = v.reshape(len(v), -1).max(axis=1) if v.ndim > 1 else v
    nonzero = np.concatenate([v[(v > 0) & np.isfinite(v)] for v in series.values()] or [np.zeros(0)])
    lo = float(nonzero.min()) if nonzero.size else 1e-16
    hi = float(nonzero.max()) if nonzero.size else 1.0
    floor = 10 ** np.floor(np.log10(lo))
    for j, (name, v) in enumerate(series.items()):
        color = f"C{j}"
        zero = v == 0
        ax.semilogy(traj.ts, np.where(zero, np.nan, v), color=color, label=name)
        if zero.any():
            ax.plot(np.asarray(traj.ts)[zero], np.full(zero.sum(), floor), "|", color=color,
                    markersize=6, label=f"{name}: exactly 0 ({zero.sum()} points)")
    ax.set_ylim(floor, 10 ** np.ceil(np.log10(hi)) if hi > floor else floor * 10)
    ax.set_ylabel("violation\n(max abs of the rows)")
    _legend_outside(ax, 2 * len(series))
    return fig


def plot_trajectory(traj, out_dir, *, title: str | None = None, prefix: str = "", system=None) -> list[Path]:
    """Write the figures of ``traj`` as PNGs into ``out_dir``; returns their paths.

    Files are ``<prefix><figure>.png``: always ``coordinates``; ``energy`` when the system
    reports energy; ``angular_momentum`` when it reports angular momentum; ``violation``
    when it has constraints. Only the rows the run reached are drawn. ``system`` (optional)
    gives the coordinates' units from its joints; without it they come from the names.
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
        fig = make(tr, title, system) if name == "coordinates" else make(tr, title)
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


def fit_figure(result, records, sensors, title: str | None = None):
    """Measured (dots) against fitted (lines) outputs: one panel per sensor, one column
    per record (``result``: a :class:`~diffmb.fit.FitResult`; ``sensors``: the Sensor
    declarations whose columns it fitted)."""
    cols = list(result.columns)
    groups = [(s, [cols.index(c) for c in s.columns if c in cols]) for s in sensors]
    groups = [(s, js) for s, js in groups if js]
    fig = _new_figure((3.6 * len(records) + 1.5, 1.2 + 1.9 * len(groups)))
    axes = fig.subplots(len(groups), len(records), sharex="col", squeeze=False)
    fig.suptitle(_title("measured (dots) vs fitted (lines)", title))
    for k, rec in enumerate(records):
        t, n = rec.data.t, rec.data.t.size
        axes[0, k].set_title(f"{rec.label}: rms " + ", ".join(
            f"{name} {v:.2g}" for name, v in result.records[k]["rms"].items()), fontsize=8)
        axes[-1, k].set_xlabel("time [s]")
        for g, (s, js) in enumerate(groups):
            ax = axes[g, k]
            ax.grid(True, alpha=0.3)
            for j in js:
                if cols[j] not in rec.data.names:
                    continue
                measured = rec.data.values[:, rec.data.names.index(cols[j])]
                line, = ax.plot(t, result.predictions[k, :n, j], lw=1.2, label=cols[j])
                ax.plot(t, measured, ".", ms=2.5, color=line.get_color())
            unit = UNITS.get(s.kind, "")
            ax.set_ylabel(f"{s.name} [{unit}]" if unit else s.name, fontsize=8)
            if k == len(records) - 1:
                _legend_outside(ax, len(js))
    return fig


def plot_fit(result, records, sensors, path, *, title: str | None = None) -> Path:
    """Write :func:`fit_figure` as a PNG at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fit_figure(result, records, sensors, title).savefig(path, dpi=110)
    return path
