"""Health checks of a finished run: jumps in quantities that change smoothly in physics.

A run can reach ``t1`` with a finite state and still be wrong: an RK4 step longer than
the motion's time scale, or a Baumgarte run through a kinematic singularity (a panel
passing through flat, Fulton & Schaub sec. 4.2), changes the energy by a finite amount in
one save interval. Where the physics conserves the energy (undamped, unforced; for
tensegrity the energy minus external work) or the angular momentum (free-floating, no
external torque), a change in one interval that is both large against the run's scale
and an outlier against the run's own typical interval is an impulse the model does not
contain. Driven and controlled cases are not checked: a controller switching phase
changes the energy quickly and rightly. Where every force either conserves the energy or
dissipates it (a damped fold), the energy may fall as fast as it likes (a damped latch
capturing) but not rise: there only rises are judged (``energy_falls``), by the same rules.

Rules, per save interval ``k`` with change ``d_k`` of the quantity:

* ``|d_k| > rel * scale`` (``rel`` = 1e-3; 1e-6 for the angular momentum on its
  natural scale) with ``scale = max(|q_0|, max_t |q(t) - q_0|, max_t s(t))``, and
* ``|d_k| > FLOOR`` (1e-9 in SI units), and
* ``|d_k| > outlier * median_k |d_k|`` (skipped for runs of fewer than 5 intervals,
  where ``rel`` is raised to ``rel_short``: one or two RK4 steps are judged on size alone).

``s`` is the quantity's natural scale when the system reports one: the kinetic energy
for the energy, the bodies' angular momenta by magnitude (``momentum_scale``) for the
angular momentum. ``q`` itself is no scale when it is near zero: a release from rest
has ``h = 0`` throughout, up to round-off.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

REL = 1e-3
#: the angular momentum judged on its natural scale: every formulation conserves it to
#: round-off per save interval (fold-4panel: median change 9e-16 of a scale of 1.7), so a
#: change of 1e-6 of that scale in one interval (and 100x the typical) is an impulse
REL_MOMENTUM = 1e-6
REL_SHORT = 1e-2
OUTLIER = 100.0
MIN_INTERVALS = 5
#: changes below this (J, N m s) are round-off for any structure this package models
FLOOR = 1e-9


def flagged(q, valid, natural=None, *, rel=REL, rises=False):
    """The rule on one series, traceable (the batch path applies it inside a compiled
    sweep): ``q (n, ...)`` saved values, ``valid (n,)`` the rows the run reached (a
    prefix), ``natural (n,)`` the natural scale if known; ``rises``: a scalar series that
    may only fall, judged on its rises alone (against the typical change either way).
    Returns ``(d, big, scale)``: the change ``|d_k|`` (a rise, with ``rises``) per
    interval, whether it is a jump, and the scale it is judged on."""
    q = jnp.asarray(q).reshape(jnp.shape(q)[0], -1)
    valid = jnp.asarray(valid, bool)
    rows = valid[:, None]
    q = jnp.where(rows, q, q[:1])  # unreached rows: no change, no NaN
    iv = valid[1:] & valid[:-1]
    d = jnp.where(iv, jnp.sqrt(jnp.sum(jnp.diff(q, axis=0) ** 2, axis=1)), 0.0)
    typical = jnp.nanmedian(jnp.where(iv, d, jnp.nan))
    if rises:
        d = jnp.where(iv, jnp.maximum(jnp.diff(q[:, 0]), 0.0), 0.0)
    scale = jnp.maximum(jnp.sqrt(jnp.sum(q[0] ** 2)), jnp.max(jnp.sqrt(jnp.sum((q - q[:1]) ** 2, axis=1))))
    if natural is not None:
        scale = jnp.maximum(scale, jnp.max(jnp.where(valid, jnp.abs(jnp.asarray(natural)), 0.0)))
    short = jnp.sum(iv) < MIN_INTERVALS
    big = (iv & (d > jnp.where(short, REL_SHORT, rel) * scale) & (d > FLOOR) & (scale > 0)
           & (short | (d > OUTLIER * jnp.maximum(typical, np.finfo(float).tiny))))
    return d, big, scale


def largest_jump(q, valid, natural=None, *, rel=REL, rises=False):
    """The largest jump relative to its scale (0 when none): :func:`flagged`, reduced."""
    d, big, scale = flagged(q, valid, natural, rel=rel, rises=rises)
    return jnp.max(jnp.where(big, d / jnp.where(scale > 0, scale, 1.0), 0.0))


#: :func:`flagged` as one program per series shape: the CLI checks every run on the host,
#: and op by op that compiled some thirty small programs per new length
_flagged_jit = jax.jit(flagged, static_argnames=("rel", "rises"))


def jumps(ts, q, *, natural=None, rel=REL, rises=False) -> list[dict]:
    """Save intervals where the scalar or vector series ``q(ts)`` jumps (see module doc);
    ``natural``: the series of its natural scale, if known; ``rises``: where a scalar
    series that may only fall rises. Rows with a non-finite time, value or scale are left
    out.

    Returns ``[{"t0", "t1", "change", "relative"}]``, largest first (at most 5).
    """
    ts = np.asarray(ts, float).reshape(-1)
    if len(ts) < 2:
        return []
    q = np.asarray(q, float).reshape(len(ts), -1)
    s = np.zeros(len(ts)) if natural is None else np.asarray(natural, float).reshape(len(ts))
    ok = np.all(np.isfinite(q), axis=1) & np.isfinite(ts) & np.isfinite(s)
    ts, q, s = ts[ok], q[ok], s[ok]
    if len(ts) < 2:
        return []
    d, big, scale = (np.asarray(a) for a in _flagged_jit(q, np.ones(len(ts), bool),
                                                    None if natural is None else s, rel=rel, rises=rises))
    idx = np.flatnonzero(big)
    idx = idx[np.argsort(-d[idx])][:5]
    return [{"t0": float(ts[i]), "t1": float(ts[i + 1]), "change": float(d[i]),
             "relative": float(d[i] / scale)} for i in idx]


def advice(traj, stabilization: str | None = None, solver: str | None = None) -> str:
    """What helps against a jump, for the case at hand. Under Baumgarte stabilization a
    jump at a kinematic singularity (a panel through flat) is the formulation's, not the
    step's: a smaller step makes it worse (fold-2x4: 0.59 % at 1 ms, 16 % at 0.5 ms), and
    projection onto the constraint manifold after each step removes it."""
    if traj.violation and stabilization == "baumgarte":
        return ("under Baumgarte stabilization a crossed kinematic singularity (a panel through "
                "flat) gives this, and a smaller --dt does not help: rerun with "
                "--stabilization projection")
    if solver in (None, "rk4", "euler"):
        return "the step is too long for the motion: rerun with a smaller --dt or an adaptive --solver dopri5"
    # an adaptive solver's --dt is only its first step: its tolerances set the steps
    if np.asarray(traj.xs).dtype == np.float32:
        return ("the adaptive steps were too long for the motion, and float32 holds the tolerances at 100 "
                "round-offs: rerun in float64 (without DIFFMB_FLOAT32) with a tighter --rtol and --atol")
    return "the adaptive steps were too long for the motion: rerun with a tighter --rtol and --atol"


def check(traj, conserved=("energy", "angular_momentum"), *, energy_name: str = "energy",
          stabilization: str | None = None, solver: str | None = None, system=None, params=None) -> list[dict]:
    """Warnings for a trajectory: jumps of the ``conserved`` diagnostics (``energy``,
    ``angular_momentum``; a scenario's :attr:`~diffmb.scenarios.Scenario.conserved` says
    which its physics conserves: a controller switching phase, a torque switched on, or
    a latch capturing with damping changes them quickly and rightly), and rises of the
    energy where ``conserved`` holds ``energy_falls`` (every force conserves or
    dissipates it). ``stabilization``
    and ``solver`` (the run's) choose the advice in the message (:func:`advice`).

    Each warning is ``{"kind": "energy_jump" | "energy_rise" | "momentum_jump", "t": ..., "relative": ...,
    "message": ...}`` for the largest jump of that kind. With ``system`` and its ``params``,
    each of its force elements' own checks follow (panels through each other:
    :meth:`diffmb.tree.force_element.ForceElement.check`).
    """
    tr = traj.trimmed()
    hint = advice(traj, stabilization, solver or traj.solver)
    out = []
    for key, kind, label, natural in (("energy", "energy_jump", energy_name, "kinetic_energy"),
                                      ("energy_falls", "energy_rise", energy_name, "kinetic_energy"),
                                      ("angular_momentum", "momentum_jump", "angular momentum",
                                       "momentum_scale")):
        series = "energy" if key == "energy_falls" else key
        if series not in tr.diagnostics or key not in conserved:
            continue
        scale = tr.diagnostics.get(natural)
        rel = REL_MOMENTUM if key == "angular_momentum" and scale is not None else REL
        found = jumps(tr.ts, tr.diagnostics[series], natural=scale, rel=rel, rises=key == "energy_falls")
        if found:
            j = found[0]
            what = ("rose" if key == "energy_falls" else "jumped")
            why = (", though every force of the model conserves or dissipates it" if key == "energy_falls" else "")
            out.append({"kind": kind, "t": j["t1"], "relative": j["relative"],
                        "intervals": len(found),
                        "message": (f"{label} {what} by {100 * j['relative']:.3g} % of its scale "
                                    f"between t = {j['t0']:.6g} and {j['t1']:.6g} s{why}, an impulse the "
                                    f"model does not contain; {hint}")})
    if system is not None and params is not None:
        for e, p in zip(getattr(system, "elements", ()), params.get("elements", ()) if isinstance(params, dict)
                        else ()):
            out += e.check(traj.ts, traj.diagnostics, p)
    return out
