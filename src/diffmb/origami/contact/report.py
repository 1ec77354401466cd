"""The detector's report after a run: every crease's angle unwrapped in time onto its
start branch, the run's figures (the largest crease angle, the deepest overlap, the
least gaps, the peak forces, the contact events) and the warnings that make a run
``suspect``, each naming the crease or the panels, the time and the depth.

The figures come from :meth:`~diffmb.origami.contact.PanelContact.diagnostics` at every
save point; ``element`` is the :class:`~diffmb.origami.contact.PanelContact` of the run."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ...math import barrier as br
from .rule import certified_figures

#: The detector: an overlap deeper than this fraction of the panel size is a crossing;
#: a crease more than this past flat [rad] (without contact; with contact, its reach).
OVERLAP_TOLERANCE = 1e-5
CREASE_TOLERANCE = 1e-4


def unwrapped(element, theta, valid):
    """Crease angles over the save points, unwrapped in time and put on the branch of
    their start (tree creases: their coordinates'; cut creases: :attr:`cut_folds`)."""
    n = jnp.maximum(jnp.sum(valid) - 1, 0)
    theta = jnp.where(valid[:, None], theta, theta[n][None, :])   # unreached rows: the last value
    s = jnp.unwrap(theta, axis=0)
    nt = len(element.tree_creases)
    start = jnp.concatenate([theta[0, :nt], jnp.asarray(np.asarray(element.cut_folds, float), theta.dtype)])
    return s + 2 * jnp.pi * jnp.round((start - s[0]) / (2 * jnp.pi))[None, :]


def metrics(element, diagnostics, valid, params):
    out = {}
    if "crease_angle" in diagnostics:
        s = unwrapped(element, diagnostics["crease_angle"], valid)
        worst = jnp.max(jnp.where(valid[:, None], jnp.abs(s), 0.0))
        out["max_crease_angle"] = worst
        out["crease_overfold"] = jnp.maximum(worst - jnp.pi - params["crease_tolerance"], 0.0)
    if "panel_overlap" in diagnostics:
        ov = jnp.max(jnp.where(valid, diagnostics["panel_overlap"], -jnp.inf))
        out["panel_overlap"] = jnp.maximum(ov - params["overlap_tolerance"], 0.0)
    if "contact_gap" in diagnostics:
        out["min_contact_gap"] = jnp.min(jnp.where(valid, diagnostics["contact_gap"], jnp.inf))
    if "crease_margin" in diagnostics:
        out["min_crease_margin"] = jnp.min(jnp.where(valid, diagnostics["crease_margin"], jnp.inf))
    for key, name in (("contact_force", "peak_contact_force"), ("crease_torque", "peak_crease_torque")):
        if key in diagnostics:
            out[name] = jnp.max(jnp.where(valid, diagnostics[key], 0.0))
    if "contact_active" in diagnostics:
        # an event: a save point with a barrier within reach after one without
        touching = valid & (diagnostics["contact_active"] > 0)
        dtype = diagnostics["contact_active"].dtype
        out["contact_events"] = touching[0].astype(dtype) + jnp.sum(touching[1:] & ~touching[:-1]).astype(dtype)
    if "contact_overflow" in diagnostics:
        out["contact_overflow"] = jnp.max(jnp.where(valid, diagnostics["contact_overflow"], 0.0))
    return out


@eqx.filter_jit
def summary(element, diagnostics, valid, params, z0):
    """A run's :func:`metrics` and, with contact on, its certified margins
    (:func:`.rule.certified_figures`: from the run's largest energy and the energy budget,
    the last of the element's start states ``z0``) in one program. Op by op, their few
    dozen small operations each compiled a program of their own."""
    certified = {}
    if element.forces and "energy" in diagnostics:
        certified = certified_figures(element, params, jnp.nanmax(diagnostics["energy"]), z0[-1])
    return metrics(element, diagnostics, valid, params), certified


#: :func:`unwrapped` as one program (op by op after a run, a dozen small ones)
unwrapped_program = eqx.filter_jit(unwrapped)


def remedy(element, what: str) -> str:
    """What to do about a crease past flat (``what="crease"``) or panels through each
    other (``"panels"``)."""
    if not element.forces:
        return "Rerun with --set contact=1"
    if what == "crease":
        return ("Contact was on: the crease went past its barrier's reach, so the energy rose past the "
                "barrier's budget (see the energy) or its stiffness is too low (--set contact_kappa)")
    return ("Contact was on: the barrier acts on armed pairs only, and a stack that starts at gap 0 is "
            "armed once its layers separate (docs/contact.md, 'Stow step'), so round-off (float32) can carry "
            "such layers through first; or the energy rose past the barrier's budget (see the energy)")


def check(element, ts, diagnostics, params):
    ts = np.asarray(ts, float)
    valid = np.isfinite(ts)
    out = []
    if "crease_angle" in diagnostics and valid.any():
        s = np.asarray(unwrapped_program(element, np.asarray(diagnostics["crease_angle"]), valid))
        over = np.where(valid[:, None], np.abs(s), 0.0) - np.pi
        tol = float(params["crease_tolerance"])
        bad = [k for k in range(s.shape[1]) if over[:, k].max() > tol]
        if bad:
            k = max(bad, key=lambda k: over[:, k].max())
            i = int(np.argmax(over[:, k] > tol))
            worst = float(np.degrees(np.abs(s[:, k]).max()))
            past = float(over[:, k].max())   # in rad: a few 1e-4 past flat reads as 180 deg in degrees
            names = ", ".join(element.crease_labels[b] for b in bad)
            out.append({"kind": "crease_overfold", "t": float(ts[i]), "crease": element.crease_labels[k],
                        "angle_deg": worst, "past_flat_rad": past, "creases": [element.crease_labels[b] for b in bad],
                        "message": (f"crease {element.crease_labels[k]} folded past 180 deg at t = {ts[i]:.6g} s "
                                    f"(by up to {past:.3g} rad, to {worst:.7g} deg): its panels pass through "
                                    f"each other (zero-thickness panels meet face to face at +-180 deg); "
                                    f"creases past it: {names}. {remedy(element, 'crease')}")})
    if "panel_overlap" in diagnostics and valid.any():
        ov = np.where(valid, np.asarray(diagnostics["panel_overlap"], float), -np.inf)
        tol = float(params["overlap_tolerance"])
        if ov.max() > tol:
            i = int(np.argmax(ov > tol))
            k = int(np.argmax(ov))
            pair = element.pair_labels[int(np.asarray(diagnostics["panel_overlap_pair"])[k])]
            first = element.pair_labels[int(np.asarray(diagnostics["panel_overlap_pair"])[i])]
            out.append({"kind": "panel_overlap", "t": float(ts[i]), "panels": first, "depth_m": float(ov[k]),
                        "message": (f"panels {first} pass through each other from t = {ts[i]:.6g} s "
                                    f"(deepest: {pair}, {ov[k]:.3g} m at t = {ts[k]:.6g} s). "
                                    f"{remedy(element, 'panels')}")})
    if "contact_gap" in diagnostics and valid.any():
        gap = np.where(valid, np.asarray(diagnostics["contact_gap"], float), np.inf)
        floor = br.FLOOR * float(params["dhat"])
        if gap.min() < floor:
            i = int(np.argmin(gap))
            out.append({"kind": "contact_floor", "t": float(ts[i]), "gap_m": float(gap[i]),
                        "message": (f"two panels came within {gap[i]:.3g} m at t = {ts[i]:.6g} s, below the "
                                    f"barrier's floor ({floor:.3g} m), where its guarantee ends: energy was "
                                    f"added (check the energy), or raise --set contact_kappa")})
    if "contact_overflow" in diagnostics and valid.any():
        over = np.where(valid, np.asarray(diagnostics["contact_overflow"], float), 0.0)
        if over.max() > 0:
            i = int(np.argmax(over))
            out.append({"kind": "contact_overflow", "t": float(ts[i]), "pairs": int(over[i]),
                        "message": (f"{int(over[i])} panel pairs within reach were not evaluated at "
                                    f"t = {ts[i]:.6g} s (candidate capacity {element.capacity})")})
    return out
