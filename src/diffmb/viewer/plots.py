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

import re
from pathlib import Path

import numpy as np

from ..design.data import unit_kinds
from ..design.goodness import p_text
from ..design.sensors import UNITS

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


#: unit groups of the coordinates plot: (kind from :func:`diffmb.design.data.unit_kinds`, label)
UNIT_GROUPS = (("angle", "angles [rad]"), ("length", "positions [m]"),
               ("none", "attitude (MRP) [-]"), ("quaternion", "attitude (quaternion) [-]"),
               ("other", "other coordinates"))

#: A body's unit quaternion as the Udwadia-Kalaba form names it (``<body>_q1`` .. ``_q4``).
_QUATERNION = re.compile(r"_q[1-4]$")


def _unit_kind(name: str, kinds: dict) -> str:
    """A coordinate's unit group: from the model's joint kinds, else from its name."""
    if name in kinds:
        return kinds[name] if kinds[name] in ("angle", "length", "none") else "other"
    low = name.lower()
    if low.startswith(("theta", "phi", "psi", "angle")) or low.endswith(("_deg", "_rad")):
        return "angle"
    if "sigma" in low or low.startswith(("q_", "quat")):
        return "none"
    if _QUATERNION.search(low):
        return "quaternion"
    if (low.endswith(("_x", "_y", "_z")) or low in ("x", "y", "z")
            or low.startswith(("x", "y", "z")) and low[1:].isdigit()):
        return "length"
    return "other"


#: Two series of a panel are drawn as one when they differ by no more than this fraction
#: of the panel's range (below a pixel); the legend says so and by how much.
SAME_CURVE = 1e-4
#: Names listed in full in a grouped curve's label; longer groups are abbreviated.
MAX_NAMES_IN_LABEL = 9
_MRP = re.compile(r"^(.*sigma)([123])$")


def mrp_switches(traj, names) -> dict:
    """``{name: indices i}`` of the attitude (MRP) series that switch to the shadow set
    between save points ``i`` and ``i + 1``: the vector ``sigma`` jumps by more than 1
    (it goes from ``|sigma| = 1`` to ``-sigma / |sigma|^2``, the same attitude). A triple
    ``<prefix>sigma1..3`` is judged as a vector, a lone series by its own jump."""
    out, triples = {}, {}
    for n in names:
        m = _MRP.match(n)
        if m:
            triples.setdefault(m.group(1), {})[m.group(2)] = n
    for members in triples.values():
        cols = [members[k] for k in sorted(members)]
        s = np.column_stack([np.asarray(traj[c], float) for c in cols])
        d = np.diff(s, axis=0)
        flip = (np.linalg.norm(d, axis=1) > 1.0) & (np.sum(s[:-1] * s[1:], axis=1) < 0)
        for c in cols:
            out[c] = np.flatnonzero(flip)
    for n in names:
        if n not in out:
            y = np.asarray(traj[n], float)
            out[n] = np.flatnonzero((np.abs(np.diff(y)) > 1.0) & (y[:-1] * y[1:] < 0))
    return out


def broken(t, y, at):
    """``(t, y)`` with a NaN point between ``i`` and ``i + 1`` for each ``i`` in ``at``, so
    matplotlib lifts the pen there (a jump that is no motion: the MRP shadow-set switch)."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    if len(at) == 0:
        return t, y
    at = np.asarray(at) + 1
    return (np.insert(t, at, 0.5 * (t[at - 1] + t[at])), np.insert(y, at, np.nan))


def same_curves(series: dict, scale: float) -> list:
    """Groups ``[(names, max difference)]`` of series that look identical on a panel of
    range ``scale`` (within :data:`SAME_CURVE` of it), first-seen order."""
    tol = SAME_CURVE * max(scale, 1e-300)
    left, groups = list(series), []
    while left:
        head = left.pop(0)
        y0 = series[head]
        same, diff = [head], 0.0
        for n in list(left):
            y = series[n]
            if y.shape != y0.shape or not np.array_equal(np.isnan(y), np.isnan(y0)):
                continue
            d = float(np.nanmax(np.abs(y - y0))) if np.isfinite(y0).any() else 0.0
            if d <= tol:
                same.append(n)
                left.remove(n)
                diff = max(diff, d)
        groups.append((same, diff))
    return groups


def group_label(names, diff, noun="coordinates", unit="", scale=1.0) -> str:
    """``a = b = c (3 hinges)``; ``~=`` with the largest difference when not equal to
    rounding (1e-12 of the panel's ``scale``)."""
    if len(names) == 1:
        return names[0]
    names = sorted(names, key=_natural)
    shown = names if len(names) <= MAX_NAMES_IN_LABEL else [*names[:4], "...", *names[-2:]]
    exact = diff <= 1e-12 * max(1.0, scale)
    sep = " = " if exact else " \u2248 "
    sizes = [3] * (len(shown) // 3) + ([len(shown) % 3] if len(shown) % 3 else [])
    if len(sizes) > 1 and sizes[-1] == 1:  # no name alone on the last line
        sizes[-2:] = [2, 2]
    starts = np.cumsum([0, *sizes])
    lines = [sep.join(shown[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    text = (sep.rstrip() + "\n").join(lines)
    within = "" if exact else f", within {diff:.1g}{' ' + unit if unit else ''}"
    return f"{text}\n({len(names)} {noun}{within})"


def _natural(name: str):
    """Sort key: by the name's numbers, then the name (``theta_2`` before ``theta_10``,
    ``x1, y1, z1`` before ``x2``)."""
    return tuple(int(p) for p in re.findall(r"\d+", name)), name


def coordinates_figure(traj, title: str | None = None, system=None):
    """Position-level coordinates vs time, one panel per unit (angles, positions, MRP,
    quaternions, other), each labelled with its unit; colours and line styles cycle so that no two
    curves of a panel look alike (legend beside the panel). Curves that coincide (flat
    hinges of a symmetric fold, the nodes a tensegrity keeps on an axis) are drawn once,
    labelled with every name they stand for; the MRP attitude is broken (NaN) where it
    switches to the shadow set, not drawn as a vertical line from +1 to -1."""
    kinds = unit_kinds(system) if system is not None else {}
    names = list(traj.coordinate_names)
    groups = {k: [n for n in names if _unit_kind(n, kinds) == k] for k, _ in UNIT_GROUPS}
    panels = [(k, label, groups[k]) for k, label in UNIT_GROUPS if groups[k]]
    fig, axes = _figure(len(panels), _title("coordinates", title))
    styles = ("-", "--", ":", "-.")
    hinges = set(dict(traj.roles).get("hinge", ()))
    ts = np.asarray(traj.ts, float)
    for ax, (kind, label, group) in zip(axes, panels):
        switches = mrp_switches(traj, group) if kind == "none" else {n: () for n in group}
        series = {n: np.asarray(traj[n], float) for n in group}
        finite = np.concatenate([y[np.isfinite(y)] for y in series.values()])
        scale = float(finite.max() - finite.min()) if finite.size else 1.0
        unit = {"angle": "rad", "length": "m"}.get(kind, "")
        curves = same_curves({n: broken(ts, series[n], switches[n])[1] for n in group}, scale or 1.0)
        for j, (same, diff) in enumerate(curves):
            noun = "hinges" if set(same) <= hinges else "coordinates"
            t_plot, y_plot = broken(ts, series[same[0]], switches[same[0]])
            ax.plot(t_plot, y_plot, label=group_label(same, diff, noun, unit, scale), color=f"C{j % 10}",
                    linestyle=styles[(j // 10) % len(styles)])
        if any(len(v) for v in switches.values()):
            ax.plot([], [], " ", label="gaps: switches to the\nshadow set (same attitude)")
        ax.set_ylabel(label)
        _legend_outside(ax, len(curves))
    return fig


def _legend_outside(ax, n: int):
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False,
              ncol=1 if n <= 12 else 2)


def energy_figure(traj, title: str | None = None):
    """Energy change ``E(t) - E(0)`` and relative change ``(E(t) - E(0)) / |E(0)|``."""
    e = np.asarray(traj.diagnostics["energy"], float)
    de = e - e[0]
    relative = abs(e[0]) > 1e-12 * max(np.abs(e).max(), 1e-300)  # E0 = 0: no relative panel
    work = "work" in traj.diagnostics  # what is conserved: the energy minus the work done on it
    base = "energy change" + (" (E - W, W: work of external forces)" if work else "")
    fig, axes = _figure(2 if relative else 1, _title(base, title))
    axes[0].plot(traj.ts, de)
    axes[0].set_ylabel(r"$(E - W)(t) - (E - W)(0)$ [J]" if work else r"$E(t) - E(0)$ [J]")
    if relative:
        axes[1].plot(traj.ts, de / abs(e[0]))
        axes[1].set_ylabel((r"$\Delta(E - W) / |E_0|$" if work else r"$(E - E_0) / |E_0|$") + " [-]")
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


#: Units of the violation levels: closure rows mix lengths and angles (a hinge's position
#: rows are a point's offset [m] and its axes' misalignment [rad]); a tensegrity's energy
#: level is the drift of E - W.
VIOLATION_UNITS = {"position": "m, rad", "velocity": "m/s, rad/s", "energy": "J"}


def violation_figure(traj, title: str | None = None):
    """Constraint violation (max abs over the rows) on a log scale, one panel per level
    (position, velocity, ...) since their units differ, each labelled with its unit. A
    panel spans its nonzero data; exact zeros (a projected state) are drawn as markers on
    the axis floor and said in the legend, never plotted as 1e-300."""
    series = {}
    order = [k for k in VIOLATION_UNITS if k in traj.violation] + \
            [k for k in traj.violation if k not in VIOLATION_UNITS]
    for name in order:
        v = np.abs(np.asarray(traj.violation[name], float))
        series[name] = v.reshape(len(v), -1).max(axis=1) if v.ndim > 1 else v
    fig, axes = _figure(max(len(series), 1), _title("constraint violation", title))
    ts = np.asarray(traj.ts)
    for j, (ax, (name, v)) in enumerate(zip(axes, series.items())):
        color = f"C{j}"
        nonzero = v[(v > 0) & np.isfinite(v)]
        lo = float(nonzero.min()) if nonzero.size else 1e-16
        hi = float(nonzero.max()) if nonzero.size else 1.0
        floor = 10 ** np.floor(np.log10(lo))
        zero = v == 0
        shown = np.where(zero, np.nan, v)
        ax.semilogy(ts, shown, color=color, label=name)
        # a nonzero value between two zeros draws no line: a dot shows it
        alone = np.isfinite(shown) & ~np.isfinite(np.r_[np.nan, shown[:-1]]) & ~np.isfinite(np.r_[shown[1:], np.nan])
        if alone.any():
            ax.plot(ts[alone], shown[alone], ".", color=color, markersize=3)
        if zero.any():
            k = int(zero.sum())
            ax.plot(ts[zero], np.full(k, floor), "|", color=color,
                    markersize=6, label=f"exactly 0 ({k} point{'s' if k > 1 else ''})")
        ax.set_ylim(floor, 10 ** np.ceil(np.log10(hi)) if hi > floor else floor * 10)
        unit = VIOLATION_UNITS.get(name)
        ax.set_ylabel(f"{name} violation" + (f" [{unit}]" if unit else "") + "\n(max abs of the rows)")
        _legend_outside(ax, 2)
    return fig


def contact_figure(traj, title: str | None = None, system=None):
    """An origami run's panels (``docs/contact.md``): the largest crease angle against
    the 180 deg where zero-thickness panels meet face to face, and the deepest crossing of
    two panels that share no vertex; with contact on, also the smallest gap, on a log
    scale. ``system`` gives the cut creases' angles unwrapped on their start branch."""
    d = traj.diagnostics
    ts = np.asarray(traj.ts)
    theta = np.asarray(d["crease_angle"], float)
    elements = getattr(system, "elements", ()) if system is not None else ()
    if elements and hasattr(elements[0], "unwrapped"):
        theta = np.asarray(elements[0].unwrapped(theta, np.ones(len(ts), bool)))
    numbers = elements[0].numbers if elements and hasattr(elements[0], "numbers") else {}
    gap = np.asarray(d["contact_gap"], float) if "contact_gap" in d else None
    fig, axes = _figure(3 if gap is not None else 2, _title("panels", title))
    axes[0].plot(ts, np.degrees(np.abs(theta).max(axis=1) - np.pi), label="largest crease, past 180 deg")
    axes[0].axhline(0.0, color="k", lw=0.8, ls="--", label="0: panels face to face")
    if "crease_tolerance" in numbers:
        axes[0].axhline(float(np.degrees(numbers["crease_tolerance"])), color="C3", lw=0.8, ls=":",
                        label="beyond: panels through each other")
    axes[0].set_ylabel("[deg]")
    _legend_outside(axes[0], 3)
    if "panel_overlap" in d:
        axes[1].plot(ts, np.maximum(np.asarray(d["panel_overlap"], float), 0.0), color="C3",
                     label="deepest overlap of two panels")
        if "overlap_tolerance" in numbers:
            axes[1].axhline(float(numbers["overlap_tolerance"]), color="C3", lw=0.8, ls=":",
                            label="beyond: a crossing")
        _legend_outside(axes[1], 2)
    axes[1].set_ylabel("[m]")
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    if gap is not None:
        shown = np.where(np.isfinite(gap) & (gap > 0), gap, np.nan)
        axes[2].semilogy(ts, shown, color="C2", label="smallest contact gap (armed pairs)")
        axes[2].set_ylabel("[m]")
        _legend_outside(axes[2], 1)
        if not np.isfinite(shown).any():   # an empty log axis would say nothing
            axes[2].text(0.5, 0.5, "no armed pair in this run:\nthe gap is infinite throughout\n(pairs stacked "
                         "at the start are armed\nonce they separate by the reach)",
                         transform=axes[2].transAxes, ha="center", va="center", fontsize=9, color="0.3")
            axes[2].set_yticks([], minor=True)
            axes[2].set_yticks([])
    return fig


def plot_trajectory(traj, out_dir, *, title: str | None = None, prefix: str = "", system=None) -> list[Path]:
    """Write the figures of ``traj`` as PNGs into ``out_dir``; returns their paths.

    Files are ``<prefix><figure>.png``: always ``coordinates``; ``energy`` when the system
    reports energy; ``angular_momentum`` when it reports angular momentum; ``violation``
    when it has constraints; ``contact`` for an origami run (:func:`contact_figure`).
    Only the rows the run reached are drawn. ``system`` (optional) gives the
    coordinates' units from its joints; without it they come from the names.
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
    if "crease_angle" in tr.diagnostics:
        figures["contact"] = contact_figure
    paths = []
    for name, make in figures.items():
        path = out_dir / f"{prefix}{name}.png"
        fig = make(tr, title, system) if name in ("coordinates", "contact") else make(tr, title)
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


#: Units a residual is shown in, a thousandth of the sensor's, when it is small: a 0.5 mm
#: marker residual reads 0.5, not 0.0005.
MILLI = {"m": "mm", "rad": "mrad", "rad/s": "mrad/s", "m/s": "mm/s", "m/s^2": "mm/s^2"}


def _sensor_unit(sensor, report: dict) -> str:
    """The unit of a sensor's columns: the fit's report, else the sensor kind's, else the
    coordinate's (an ``angle`` sensor reads a joint coordinate)."""
    unit = (report.get("units") or {}).get(sensor.name) or UNITS.get(sensor.kind)
    if unit is None and sensor.kind == "angle":
        unit = {"angle": "rad", "length": "m"}.get(_unit_kind(sensor.coordinate or sensor.name, {}), "")
    return unit or ""


def _residual_scale(unit: str, residuals) -> tuple:
    """``(factor, unit)`` to show ``residuals`` (a list of arrays) in: milli-units when they
    stay below 0.1."""
    r = np.concatenate([np.ravel(np.asarray(x, float)) for x in residuals]) if len(residuals) else np.zeros(0)
    big = float(np.nanmax(np.abs(r))) if r.size and np.isfinite(r).any() else 0.0
    if unit in MILLI and big < 0.1:
        return 1e3, MILLI[unit]
    return 1.0, unit


def fit_figure(result, records, sensors, title: str | None = None):
    """Measured (dots) against fitted (lines) outputs, and under each the residual
    (measured - fitted) on its own axis, in (milli-)units of the sensor with its RMS and
    the declared noise (band): one pair of panels per sensor, one column per record
    (``result``: a :class:`~diffmb.design.fit.FitResult`; ``sensors``: the Sensor declarations
    whose columns it fitted). A 0.5 mm marker residual is invisible on the 4 m axis of
    the motion; its own panel shows it, against time, so that structure (a drift, a
    residual oscillating with the motion: model error) stands out from white noise. With
    a declared noise the panel also gives the sensor's chi-square test
    (:mod:`diffmb.design.goodness`), in red where it fails."""
    cols = list(result.columns)
    groups = [(s, [cols.index(c) for c in s.columns if c in cols]) for s in sensors]
    groups = [(s, js) for s, js in groups if js]
    G, R = len(groups), len(records)
    fig = _new_figure((3.9 * R + 2.0, 1.0 + 2.9 * G))
    grid = fig.add_gridspec(2 * G, R, height_ratios=[2.0, 1.0] * G)
    fig.suptitle(_title("measured (dots) vs fitted (lines); residual = measured - fitted", title))
    noise = getattr(result, "noise", None) or {}
    gof = (getattr(result, "goodness", None) or {}).get("sensors") or {}

    def residuals(k, js):
        rec, n = records[k], records[k].data.t.size
        return {j: rec.data.values[:, rec.data.names.index(cols[j])] - np.asarray(result.predictions[k, :n, j])
                for j in js if cols[j] in rec.data.names}

    # one residual unit per sensor, the same in every record's column
    scales = [_residual_scale(_sensor_unit(s, result.records[0] if result.records else {}),
                              [r for k in range(R) for r in residuals(k, js).values()]) for s, js in groups]
    for k, rec in enumerate(records):
        t, n = np.asarray(rec.data.t), rec.data.t.size
        report = result.records[k] if k < len(result.records) else {}
        over = ", ".join(f"{a}={v:g}" for a, v in (rec.overrides or {}).items())
        top = None
        for g, (s, js) in enumerate(groups):
            ax = fig.add_subplot(grid[2 * g, k], sharex=top)
            top = top or ax
            rax = fig.add_subplot(grid[2 * g + 1, k], sharex=top)
            unit = _sensor_unit(s, report)
            res = residuals(k, js)
            here = list(res)
            factor, runit = scales[g]
            for i, j in enumerate(js):
                color = f"C{i % 10}"
                if j not in res:
                    continue
                fitted = np.asarray(result.predictions[k, :n, j])
                ax.plot(t, fitted, lw=1.2, color=color, label=cols[j])
                ax.plot(t, fitted + res[j], ".", ms=2.5, color=color)
                rax.plot(t, factor * res[j], ".-", ms=2.0, lw=0.5, color=color)
            sigma = {float(noise[cols[j]]) for j in here if cols[j] in noise}
            if len(sigma) == 1 and (sd := sigma.pop()) > 0:
                rax.axhspan(-factor * sd, factor * sd, color="0.85", zorder=0,
                            label=f"noise \u00b1{factor * sd:.2g}{' ' + runit if runit else ''} (1 sigma)")
            rax.axhline(0.0, color="0.4", lw=0.6)
            rms = (report.get("rms") or {}).get(s.name)
            if rms is not None:
                test = gof.get(s.name)
                rax.text(0.01, 0.96, f"rms {factor * rms:.2g} {runit}" + (_gof_text(test, R) if test else ""),
                         transform=rax.transAxes, va="top", fontsize=7,
                         color="C3" if test and not test["passed"] else "black",
                         bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1})
            ax.set_ylabel(f"{s.name} [{unit}]" if unit else s.name, fontsize=8)
            rax.set_ylabel(f"residual\n[{runit}]" if runit else "residual", fontsize=8)
            for a in (ax, rax):
                a.grid(True, alpha=0.3)
                a.tick_params(labelsize=7)
            ax.tick_params(labelbottom=False)
            if g == 0:
                ax.set_title(rec.label + (f"  ({over})" if over else ""), fontsize=9)
            if g < G - 1:
                rax.tick_params(labelbottom=False)
            else:
                rax.set_xlabel("time [s]")
            if k == R - 1:
                _legend_outside(ax, len(js))
                if rax.get_legend_handles_labels()[0]:
                    _legend_outside(rax, 1)
    return fig


def _gof_text(test: dict, records: int) -> str:
    """A sensor's goodness of fit for its residual panel (over every record)."""
    where = " (all records)" if records > 1 else ""
    return (f" = {test['rms_over_noise']:.2g}\u03c3, \u03c7\u00b2/dof {test['reduced_chi2']:.3g}, "
            f"{p_text(test['p'])}{where}" + ("" if test["passed"] else " FAILS"))


def plot_fit(result, records, sensors, path, *, title: str | None = None) -> Path:
    """Write :func:`fit_figure` as a PNG at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fit_figure(result, records, sensors, title).savefig(path, dpi=110)
    return path
