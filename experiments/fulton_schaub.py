"""Fulton & Schaub (Acta Astronautica 2021): the paper's figures, Baumgarte vs projection.

Each case is run with the paper's Baumgarte stabilization (eq. 41, the paper's gains) and
with post-step projection, and every figure shows the two side by side (left column
Baumgarte, right column projection):

* ``fold-4panel`` (section 4.2, Tables 1-4; RK4, dt = 1 ms, 10 s, a = 100, b = 0):
  Fig. 8 panel angles and rates, Fig. 9 hub attitude (MRP) / position and rates,
  Fig. 10 energy and angular-momentum change, Fig. 11 ``Phi_dot^T Phi_dot`` (log),
  Fig. 12 constraint torques and forces;
* ``fold-2x4`` (section 4.3.1, Tables 5-8; 30 s, a = 40, b = 0): Figs. 14-18 likewise
  (Fig. 18: the closure between panels 1 and 2), and Fig. 19: the violation with 1, 2
  and 3 closures enforced (a closure that is not enforced is a crease dropped from the
  pattern; enforced from the top: 1-2, then 3-4, then 5-6);
* ``fold-3x3`` (Fig. 13's three-chain graph, all four closures; 30 s): Fig. 20, the
  violation with Baumgarte vs projection.

Every run is one jitted :func:`diffmb.simulation.integrate.simulate` call; it is made twice and
``compile_s`` = first - second, ``wall_s`` = second. A run that diverges keeps what it
computed (``status``). Writes PNGs and ``summary.json`` to ``--out``
(default ``out/fulton_schaub``) and prints a table.

    python experiments/fulton_schaub.py            # the paper's horizons
    python experiments/fulton_schaub.py --quick    # smoke run: short horizons
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STABS = ("baumgarte", "projection")
PAPER_WALL_S = {"fold-4panel": 281.5, "fold-2x4": 660.0}  # MATLAB, RK4 dt = 1 ms


def _figure(rows, cols=2, title=None, height=2.1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0 * cols, 1.2 + height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False)
    if title:
        fig.suptitle(title)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("time [s]")
    return fig, axes


def run_case(system, t1, dt, a_b=None):
    """Two identical simulate calls: (trajectory, wall_s, compile_s)."""
    import jax

    from diffmb.simulation.integrate import simulate

    params = system.default_params()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        tr = simulate(system, t1=t1, dt=dt, params=params, solver="rk4")
        jax.block_until_ready(tr)
        times.append(time.perf_counter() - start)
    return tr, params, times[1], max(0.0, times[0] - times[1])


def wrenches(system, params, traj):
    """Constraint wrenches (n, P, 6) ``[torque; force]`` along the saved states."""
    import jax

    tr = traj.trimmed()
    f = jax.jit(jax.vmap(lambda x: system.constraint_wrenches(0.0, x, params)))
    return np.asarray(tr.ts), np.asarray(f(np.asarray(tr.xs)))


def summarise(case, stab, traj, wall, compile_s, t1, dt):
    tr = traj.trimmed()
    s = traj.summary()
    d = tr.diagnostics
    out = {
        "case": case, "stabilization": stab, "status": traj.status,
        "t_reached": float(traj.t_final), "t1": t1, "dt": dt, "steps": int(traj.n_steps),
        "wall_s": wall, "compile_s": compile_s,
        "max_phidot_sq": float(np.nanmax(d["phidot_sq"])) if "phidot_sq" in d else None,
        "max_position_violation": s.get("violation", {}).get("position_max"),
        "energy_rel_change": s.get("energy", {}).get("max_rel_change"),
        "momentum_change": s.get("angular_momentum", {}).get("max_abs_change"),
    }
    if case in PAPER_WALL_S and abs(t1 - {"fold-4panel": 10.0, "fold-2x4": 30.0}[case]) < 1e-9:
        out["paper_wall_s"] = PAPER_WALL_S[case]
        out["speedup_vs_paper"] = PAPER_WALL_S[case] / wall if wall > 0 else None
    return out


# ----------------------------------------------------------------- figures


def _series(traj, idx):
    tr = traj.trimmed()
    return np.asarray(tr.ts), np.asarray(tr.xs)[:, idx]


def fig_panels(runs, names, out, fig_no, case):
    nq = runs[STABS[0]]["system"].model.nq
    hinge = list(range(6, nq))
    fig, axes = _figure(2, title=f"Fig. {fig_no} ({case}): panel angles and rates")
    for j, stab in enumerate(STABS):
        tr = runs[stab]["traj"]
        t, th = _series(tr, hinge)
        _, w = _series(tr, [nq + i for i in hinge])
        for k, i in enumerate(hinge):
            axes[0, j].plot(t, np.degrees(th[:, k]), label=names[i])
            axes[1, j].plot(t, np.degrees(w[:, k]), label=names[i])
        axes[0, j].set_title(stab)
        axes[0, j].set_ylabel("theta [deg]")
        axes[1, j].set_ylabel("theta_dot [deg/s]")
    axes[0, 0].legend(fontsize="x-small", ncol=4)
    return _save(fig, out, f"fig{fig_no:02d}_{case}_panels.png")


def fig_hub(runs, out, fig_no, case):
    nq = runs[STABS[0]]["system"].model.nq
    fig, axes = _figure(4, title=f"Fig. {fig_no} ({case}): hub attitude, position and rates")
    labels = [("sigma", [0, 1, 2], "MRP"), ("position", [3, 4, 5], "p [m]"),
              ("omega", [nq, nq + 1, nq + 2], "omega [rad/s]"), ("velocity", [nq + 3, nq + 4, nq + 5], "v [m/s]")]
    for j, stab in enumerate(STABS):
        tr = runs[stab]["traj"]
        for r, (_, idx, yl) in enumerate(labels):
            t, y = _series(tr, idx)
            for k in range(3):
                axes[r, j].plot(t, y[:, k], label="xyz"[k])
            axes[r, j].set_ylabel(yl)
        axes[0, j].set_title(stab)
    axes[0, 0].legend(fontsize="x-small", ncol=3)
    return _save(fig, out, f"fig{fig_no:02d}_{case}_hub.png")


def fig_conservation(runs, out, fig_no, case):
    fig, axes = _figure(2, title=f"Fig. {fig_no} ({case}): change in energy and angular momentum")
    for j, stab in enumerate(STABS):
        tr = runs[stab]["traj"].trimmed()
        t = np.asarray(tr.ts)
        e = np.asarray(tr.diagnostics["energy"])
        h = np.asarray(tr.diagnostics["angular_momentum"])
        axes[0, j].plot(t, e - e[0])
        axes[1, j].plot(t, np.linalg.norm(h - h[0], axis=-1))
        axes[0, j].set_title(stab)
        axes[0, j].set_ylabel("E - E0 [J]")
        axes[1, j].set_ylabel("|h - h0| [N m s]")
    return _save(fig, out, f"fig{fig_no:02d}_{case}_conservation.png")


def fig_violation(series, out, fig_no, case, what="Phi_dot^T Phi_dot"):
    """``series``: {stab: [(label, t, v), ...]}; log scale, the two stabilizations side by side."""
    fig, axes = _figure(1, title=f"Fig. {fig_no} ({case}): constraint violation {what}")
    for j, stab in enumerate(STABS):
        for label, t, v in series.get(stab, []):
            axes[0, j].semilogy(t, np.where(v > 0, v, np.nan), label=label)  # 0 at t = 0
        axes[0, j].set_title(stab)
        axes[0, j].set_ylabel(what)
        axes[0, j].legend(fontsize="x-small")
    return _save(fig, out, f"fig{fig_no:02d}_{case.split()[0]}_violation.png")


def fig_wrenches(wr, closure_index, closure_name, out, fig_no, case):
    fig, axes = _figure(2, title=f"Fig. {fig_no} ({case}): constraint torques and forces, closure {closure_name}")
    for j, stab in enumerate(STABS):
        t, w = wr[stab]
        for k in range(3):
            axes[0, j].plot(t, w[:, closure_index, k], label="xyz"[k])
            axes[1, j].plot(t, w[:, closure_index, 3 + k], label="xyz"[k])
        axes[0, j].set_title(stab)
        axes[0, j].set_ylabel("torque [N m]")
        axes[1, j].set_ylabel("force [N]")
        # the multipliers spike where the closure Jacobian is singular (folded flat, t ~ 0):
        # scale the axes to the 99th percentile and state the peak
        for r, sl in ((0, slice(0, 3)), (1, slice(3, 6))):
            a = np.abs(w[:, closure_index, sl])
            lim = 1.5 * float(np.nanpercentile(a, 99)) if a.size else 0.0
            if lim > 0:
                axes[r, j].set_ylim(-lim, lim)
            axes[r, j].text(0.01, 0.03, f"peak |.| = {np.nanmax(a):.3g}", transform=axes[r, j].transAxes,
                            fontsize="x-small")
    axes[0, 0].legend(fontsize="x-small", ncol=3)
    return _save(fig, out, f"fig{fig_no:02d}_{case}_wrenches.png")


def _save(fig, out, name):
    path = out / name
    fig.savefig(path, dpi=90)
    return str(path.relative_to(out))


def _viol(traj):
    tr = traj.trimmed()
    return np.asarray(tr.ts), np.asarray(tr.diagnostics["phidot_sq"])


# ----------------------------------------------------------------- cases


def drop_closures(pattern, keep):
    """The pattern with only the cut creases in ``keep`` (pairs) enforced."""
    keep = {frozenset(p) for p in keep}
    cut = {frozenset(p) for p in pattern.cut}
    pattern.creases = [c for c in pattern.creases
                       if frozenset((c.a, c.b)) not in cut or frozenset((c.a, c.b)) in keep]
    pattern.cut = tuple(p for p in pattern.cut if frozenset(p) in keep)
    return pattern


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "fulton_schaub")
    ap.add_argument("--quick", action="store_true", help="short horizons (smoke run)")
    ap.add_argument("--dt", type=float, default=1e-3)
    args = ap.parse_args(argv)

    import diffmb  # noqa: F401  (x64, XLA flags)
    from diffmb.origami import build
    from diffmb.scenarios.origami import fold_2x4, fold_3x3, fold_4panel

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    dt = args.dt
    T = ({"fold-4panel": 1.0, "fold-2x4": 1.0, "fold-3x3": 0.5} if args.quick
         else {"fold-4panel": 10.0, "fold-2x4": 30.0, "fold-3x3": 30.0})
    gains = {"fold-4panel": (100.0, 0.0), "fold-2x4": (40.0, 0.0), "fold-3x3": (40.0, 0.0)}
    rows, figures = [], {}

    def do(case, pattern_fn, label=None):
        runs = {}
        for stab in STABS:
            system, info = build(pattern_fn(), stabilization=stab, baumgarte=gains[case])
            tr, params, wall, comp = run_case(system, T[case], dt)
            row = summarise(label or case, stab, tr, wall, comp, T[case], dt)
            row["closures"] = len(info.pairs)
            rows.append(row)
            print(f"  {row['case']:<22} {stab:<10} {row['status']:<8} wall {wall:8.3f} s  "
                  f"compile {comp:6.1f} s", flush=True)
            runs[stab] = {"system": system, "params": params, "traj": tr, "info": info}
        return runs

    # ---- fold-4panel: Figs. 8-12
    case = "fold-4panel"
    runs = do(case, fold_4panel)
    names = runs["baumgarte"]["system"].model.coordinate_names
    wr = {s: wrenches(runs[s]["system"], runs[s]["params"], runs[s]["traj"]) for s in STABS}
    figures[case] = [
        fig_panels(runs, names, out, 8, case), fig_hub(runs, out, 9, case),
        fig_conservation(runs, out, 10, case),
        fig_violation({s: [("closure l-m", *_viol(runs[s]["traj"]))] for s in STABS}, out, 11, case),
        fig_wrenches(wr, 0, "l-m", out, 12, case),
    ]

    # ---- fold-2x4: Figs. 14-19
    case = "fold-2x4"
    runs = do(case, fold_2x4)
    names = runs["baumgarte"]["system"].model.coordinate_names
    wr = {s: wrenches(runs[s]["system"], runs[s]["params"], runs[s]["traj"]) for s in STABS}
    cl_names = [c.name for c in runs["baumgarte"]["params"]["closures"].closures]
    k12 = next((i for i, n in enumerate(cl_names) if set(n.split("-")) == {"1", "2"}), 0)
    figures[case] = [
        fig_panels(runs, names, out, 14, case), fig_hub(runs, out, 15, case),
        fig_conservation(runs, out, 16, case),
        fig_violation({s: [("3 closures", *_viol(runs[s]["traj"]))] for s in STABS}, out, 17, case),
        fig_wrenches(wr, k12, cl_names[k12], out, 18, case),
    ]
    fig19 = {s: [] for s in STABS}
    order = (("1", "2"), ("3", "4"), ("5", "6"))
    for n in (1, 2):
        var = do(case, lambda n=n: drop_closures(fold_2x4(), order[:n]), label=f"fold-2x4 ({n} closure{'s' * (n > 1)})")
        for s in STABS:
            fig19[s].append((f"{n} closure{'s' * (n > 1)}", *_viol(var[s]["traj"])))
    for s in STABS:
        fig19[s].append(("3 closures", *_viol(runs[s]["traj"])))
    figures[case].append(fig_violation(fig19, out, 19, case + " (1, 2, 3 closures)"))

    # ---- fold-3x3: Fig. 20
    case = "fold-3x3"
    runs = do(case, fold_3x3)
    figures[case] = [fig_violation({s: [("4 closures", *_viol(runs[s]["traj"]))] for s in STABS}, out, 20, case)]

    print()
    print(table(rows))
    summary = {"quick": args.quick, "dt": dt, "solver": "rk4", "machine": platform.platform(),
               "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(), "runs": rows,
               "figures": figures}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwrote {out}/summary.json and {sum(len(v) for v in figures.values())} figures")


def table(rows):
    head = ("case", "stabilization", "status", "t1 s", "wall s", "compile s", "max phidot^2",
            "max |phi|", "energy rel", "|dh| max")
    fmt = lambda x: "-" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))
    body = [(r["case"], r["stabilization"], r["status"], fmt(r["t1"]), fmt(r["wall_s"]), fmt(r["compile_s"]),
             fmt(r["max_phidot_sq"]), fmt(r["max_position_violation"]), fmt(r["energy_rel_change"]),
             fmt(r["momentum_change"])) for r in rows]
    w = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(n) for c, n in zip(r, w)).rstrip() for r in [head] + body)


if __name__ == "__main__":
    main()
