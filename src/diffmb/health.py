"""Health checks of a finished run: jumps in quantities that change smoothly in physics.

A run can reach ``t1`` with a finite state and still be wrong: an RK4 step longer than
the motion's time scale, or a Baumgarte run through a kinematic singularity (a panel
passing through flat, Fulton & Schaub sec. 4.2), changes the energy by a finite amount in
one save interval. Where the physics conserves the energy (undamped, unforced; for
tensegrity the energy minus external work) or the angular momentum (free-floating, no
external torque), a change in one interval that is both large against the run's scale
and an outlier against the run's own typical interval is an impulse the model does not
contain. Damped, driven and controlled cases are not checked: a controller switching
phase or a damped latch capturing changes the energy quickly and rightly.

Rules, per save interval ``k`` with change ``d_k`` of the quantity:

* ``|d_k| > rel * scale`` with ``scale = max(|q_0|, max_t |q(t) - q_0|)``, and
* ``|d_k| > FLOOR`` (1e-9 in SI units), and
* ``|d_k| > outlier * median_k |d_k|`` (skipped for runs of fewer than 5 intervals,
  where ``rel`` is raised to ``rel_short``: one or two RK4 steps are judged on size alone).
"""

from __future__ import annotations

import numpy as np

REL = 1e-3
REL_SHORT = 1e-2
OUTLIER = 100.0
MIN_INTERVALS = 5
#: changes below this (J, N m s) are round-off for any structure this package models
FLOOR = 1e-9


def jumps(ts, q, *, rel=REL, outlier=OUTLIER, floor=FLOOR) -> list[dict]:
    """Save intervals where the scalar or vector series ``q(ts)`` jumps (see module doc).

    Returns ``[{"t0", "t1", "change", "relative"}]``, largest first (at most 5).
    """
    ts = np.asarray(ts, float)
    q = np.asarray(q, float).reshape(len(ts), -1)
    ok = np.all(np.isfinite(q), axis=1) & np.isfinite(ts)
    ts, q = ts[ok], q[ok]
    if len(ts) < 2:
        return []
    d = np.linalg.norm(np.diff(q, axis=0), axis=1)
    scale = max(float(np.linalg.norm(q[0])), float(np.linalg.norm(q - q[0], axis=1).max()))
    if scale <= 0:
        return []
    short = len(d) < MIN_INTERVALS
    big = (d > (REL_SHORT if short else rel) * scale) & (d > floor)
    if not short:
        big &= d > outlier * max(float(np.median(d)), np.finfo(float).tiny)
    idx = np.flatnonzero(big)
    idx = idx[np.argsort(-d[idx])][:5]
    return [{"t0": float(ts[i]), "t1": float(ts[i + 1]), "change": float(d[i]),
             "relative": float(d[i] / scale)} for i in idx]


def check(traj, conserved=("energy", "angular_momentum"), *, energy_name: str = "energy") -> list[dict]:
    hint = ("a smaller --dt, or --stabilization projection" if traj.violation else "a smaller --dt")
    """Warnings for a trajectory: jumps of the ``conserved`` diagnostics (``energy``,
    ``angular_momentum``; a scenario's :attr:`~diffmb.scenarios.Scenario.conserved` says
    which its physics conserves: a controller switching phase, a torque switched on, or
    a latch capturing with damping changes them quickly and rightly).

    Each warning is ``{"kind": "energy_jump" | "momentum_jump", "t": ..., "relative": ...,
    "message": ...}`` for the largest jump of that kind.
    """
    tr = traj.trimmed()
    out = []
    for key, kind, label in (("energy", "energy_jump", energy_name),
                             ("angular_momentum", "momentum_jump", "angular momentum")):
        if key not in tr.diagnostics or key not in conserved:
            continue
        found = jumps(tr.ts, tr.diagnostics[key])
        if found:
            j = found[0]
            out.append({"kind": kind, "t": j["t1"], "relative": j["relative"],
                        "intervals": len(found),
                        "message": (f"{label} jumped by {100 * j['relative']:.3g} % of its scale "
                                    f"between t = {j['t0']:.6g} and {j['t1']:.6g} s: an impulse the "
                                    f"model does not contain (step too long, or a kinematic "
                                    f"singularity crossed); check with {hint}")})
    return out
