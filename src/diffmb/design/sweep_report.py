"""What a sweep found, for a reader: the status summary, the members to look at, and a
figure of one metric over the swept parameters.

* :func:`summary`: members per status and the flagged ones (diverged, suspect, out of
  steps) with their parameter values.
* :func:`plot`: for a 2-D grid, a heat map of a metric over the two swept axes; for any
  other sampling, a scatter matrix of the swept parameters and the metric (colour: the
  metric), at most :data:`SCATTER_POINTS` members drawn (an even stride through them).

Both take columns (name -> numpy array over members, as :meth:`columns` or
:func:`diffmb.design.sweep_store.read_table` give them), so a million-member table is plotted
without building a Python row per member.
"""

from __future__ import annotations

import math

import numpy as np

from .batch import _DRIFT, METRICS, SweepResult

#: statuses a reader should look at
FLAGGED = ("diverged", "suspect", "max_steps")
#: at most this many members in a scatter matrix
SCATTER_POINTS = 20000
#: the metric a figure shows unless told: the first of these that some member has
DEFAULT_METRICS = ("time_to_final", "time_to_flat", "energy_dissipated", "peak_hinge_rate", "max_violation",
                   "t_final")


def columns(res: SweepResult) -> dict:
    """The result's table as columns, the same values as :meth:`SweepResult.rows` without
    a Python row per member: ``member``, its parameter values, ``status`` (names) and every
    metric (drifts NaN where the member's physics does not conserve the quantity)."""
    n = res.batch
    out = {"member": res.member_index().astype(np.int64)}
    for k in (res.members[0] if res.members else {}):
        vals = [m[k] for m in res.members]
        out[k] = np.asarray(vals, dtype=object if isinstance(vals[0], str) else float)
    for k in sorted(res.table, key=lambda k: list(METRICS).index(k) if k in METRICS else len(METRICS)):
        out[k] = (np.asarray(res.statuses(), dtype=object) if k == "status"
                  else np.array(res.table[k], dtype=float))
    if res.conserved:
        for q, col in _DRIFT.items():
            if col in out:
                kept = np.array([i >= len(res.conserved) or q in res.conserved[i] for i in range(n)], bool)
                out[col][~kept] = np.nan
    return out


def summary(cols: dict, swept=()) -> dict:
    """``{"status_counts": {status: members}, "flagged": [{member, status, <swept
    values>}...]}`` over the table ``cols``; flagged are the members whose status is one of
    :data:`FLAGGED`, in member order."""
    status = np.asarray(cols.get("status", []), dtype=object)
    names, counts = np.unique(status, return_counts=True) if status.size else ([], [])
    counts = {str(n): int(c) for n, c in zip(names, counts)}
    order = ["success", "suspect", "event", "diverged", "max_steps"]
    counts = {k: counts.get(k, 0) for k in order} | {k: v for k, v in counts.items() if k not in order}
    bad = np.flatnonzero(np.isin(status, FLAGGED))
    flagged = [{"member": int(cols["member"][i]), "status": str(status[i]),
                **{k: float(cols[k][i]) for k in swept}} for i in bad]
    return {"status_counts": counts, "flagged": flagged}


def pick_metric(cols: dict, metric: str | None = None) -> str:
    """``metric`` (checked: a numeric metric of the table), else the first of
    :data:`DEFAULT_METRICS` that some member has."""
    if metric is not None:
        if metric == "status" or metric not in METRICS:
            raise ValueError(f"--metric {metric}: one of {', '.join(k for k in METRICS if k != 'status')}")
        if metric not in cols:
            raise ValueError(f"--metric {metric}: this scenario's sweep does not measure it")
        return metric
    for k in DEFAULT_METRICS:
        if k in cols and np.any(np.isfinite(np.asarray(cols[k], float))):
            return k
    return "t_final"


def plot(cols: dict, path, *, swept, metric: str, grid: bool, title: str = ""):
    """Write the figure of ``metric`` over the ``swept`` parameters to ``path``: a heat map
    when ``grid`` and there are two swept parameters, else a scatter matrix."""
    from matplotlib.figure import Figure

    swept = list(swept)
    if not swept:
        raise ValueError("--plot: nothing is swept (give a range, --set NAME=lo:hi)")
    z = np.asarray(cols[metric], float)
    if grid and len(swept) == 2:
        fig = _heat_map(Figure(figsize=(6.4, 5.2)), cols, swept, z, metric)
    else:
        fig = _scatter_matrix(Figure(figsize=(2.6 * (len(swept) + 1),) * 2), cols, swept, z, metric)
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120)
    return path


def grid_of(cols: dict, swept, z):
    """``(xs, ys, Z)``: the two swept axes' values and ``z`` over them (``Z[i, j]`` at
    ``xs[i]``, ``ys[j]``; NaN where no finished member sits)."""
    xs, ys = (np.unique(np.asarray(cols[k], float)) for k in swept)
    grid = np.full((len(xs), len(ys)), np.nan)
    grid[np.searchsorted(xs, np.asarray(cols[swept[0]], float)),
         np.searchsorted(ys, np.asarray(cols[swept[1]], float))] = z
    return xs, ys, grid


def _heat_map(fig, cols, swept, z, metric):
    xs, ys, grid = grid_of(cols, swept, z)
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(_edges(ys), _edges(xs), np.ma.masked_invalid(grid), shading="flat")
    fig.colorbar(mesh, ax=ax, label=_label(metric))
    ax.set_xlabel(swept[1])
    ax.set_ylabel(swept[0])
    ax.set_title(f"{metric} ({np.isfinite(grid).sum()} of {grid.size} members with a value)", fontsize=9)
    return fig


def _edges(v):
    """Cell edges around the grid values ``v`` (midpoints; a single value gets a unit cell)."""
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])


def _scatter_matrix(fig, cols, swept, z, metric):
    step = max(1, math.ceil(len(z) / SCATTER_POINTS))
    names = swept + [metric]
    data = {k: np.asarray(cols[k], float)[::step] for k in swept} | {metric: z[::step]}
    colour = data[metric]
    n = len(names)
    sc = None
    for i, yi in enumerate(names):
        for j, xj in enumerate(names):
            ax = fig.add_subplot(n, n, i * n + j + 1)
            if i == j:
                v = data[xj][np.isfinite(data[xj])]
                if v.size:
                    ax.hist(v, bins=30, color="0.5")
                ax.set_yticks([])  # counts: the histogram's own scale, not the row's
            else:
                sc = ax.scatter(data[xj], data[yi], c=colour, s=4, cmap="viridis", plotnonfinite=False)
            if i == n - 1:
                ax.set_xlabel(xj, fontsize=8)
            else:
                ax.set_xticklabels([])
            if j == 0:
                ax.set_ylabel(yi, fontsize=8)
            ax.tick_params(labelsize=7)
    if sc is not None:
        fig.colorbar(sc, ax=fig.axes, label=_label(metric), shrink=0.8)
    drawn = len(z[::step])
    fig.text(0.01, 0.01, f"{drawn} of {len(z)} members drawn" if step > 1 else f"{len(z)} members", fontsize=8)
    return fig


def _label(metric):
    text = METRICS.get(metric, metric)
    return metric + (f" {text[text.rfind('['):text.rfind(']') + 1]}" if "[" in text else "")
