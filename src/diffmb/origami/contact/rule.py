"""The default rule of contact's stiffnesses, and what an energy bound certifies.

The barriers need no tuning per design: each stiffness is ``kappa = kappa_scale E /
b(reach / 2)``, with ``E`` the energy the structure can spend (its energy at the start),
so a motion that conserves or dissipates energy never comes closer than half a reach
to a barrier's end (:func:`certified_margin`). The reaches: :data:`PSI_HAT` for the
creases, :data:`DHAT_RELATIVE` of the panel size for the panels.

A crease barrier that holds the whole energy within its reach is stiff where a crease
rests against it under a static load (a stacked crease pressed past flat by the stack):
it rests ~1e-6 rad in, at a contact frequency ~1,000 rad/s that bounds an explicit
solver's steps. So Tier A's certified barrier begins :func:`rest_depth` past flat, and
before it a soft term holds the loads a crease rests under (:func:`crease_rest_stiffness`)."""

from __future__ import annotations

import jax.numpy as jnp

from ...math import barrier as br

#: Default reach of the crease barrier [rad]: a crease may fold at most this far past flat.
PSI_HAT = 1e-3
#: Default reach of the panel barrier, relative to the panels' median diameter.
DHAT_RELATIVE = 1e-3
#: The least energy budget [J] of the default stiffnesses (a structure at rest, unloaded).
MIN_BUDGET = 1e-9
#: Default damping ratio of a crease resting past flat (:func:`crease_rest_damping`).
#: Undamped, a stacked crease pressed into Tier A's rest term rings at its contact
#: frequency and an adaptive solver resolves every period; at 0.5 the ringing ends within
#: about a period (the 4x4 map fold's first second: 193 steps undamped, 96 at 0.35, 92 at
#: 0.5, 111 at 0.7, 146 at 1; 51 without contact). 0: the elastic model (``docs/contact.md``).
REST_DAMPING = 0.5


def rest_depth(p):
    """How far past flat [rad] each crease rests under its share of the structure's loads
    (Tier A's soft term), and where its certified barrier begins: ``p["rest_depth"]``, the
    detector's overlap tolerance over the crease's lever (:func:`~.build.crease_levers`:
    the farthest a vertex of the sheet lies from the crease, along the sheet),
    or a quarter of the reach ``psi_hat`` where that is shorter. A crease of a
    zero-thickness stack pressed past flat by an angle moves the sheet, and carries stacked
    layers through each other, by at most that angle times its lever, so at this depth
    they cross by at most the detector's tolerance. (The crossings measured are those of
    shorter levers: 2 m on the 4x4 map fold of 2 m panels, 5 m on the 10x10, 10 m on the
    20x20.)"""
    return jnp.minimum(p["rest_depth"], 0.25 * p["psi_hat"])


def certified_reach(p):
    """The reach of Tier A's certified barrier, each crease's: from :func:`rest_depth` to ``psi_hat``."""
    return p["psi_hat"] - rest_depth(p)


def crease_stiffness(p, budget):
    """Tier A's stiffness of each crease, the default rule: its certified barrier holds
    ``kappa_scale`` times the energy ``budget`` [J] at half its reach (:func:`certified_reach`)."""
    return p["kappa_scale"] * budget / br.half_reach(certified_reach(p))


def crease_rest_stiffness(p, budget, creases: int):
    """Tier A's soft term ``k delta^3 / 3`` on a crease ``delta`` past flat (``k`` each
    crease's), the default rule: at its :func:`rest_depth` it holds ``kappa_scale`` times
    a crease's share of the budget per half turn, ``budget / (creases pi)`` [N m] (for
    hinge springs stowed at a half turn, the mean spring's torque at a quarter turn). A
    crease resting under that load sits there, at a stiffness ``2 budget / (creases pi
    rest_depth)``; a smaller load rests shallower and softer; a larger one on the
    certified barrier."""
    return p["kappa_scale"] * budget / (creases * jnp.pi * rest_depth(p) ** 2)


def crease_rest_damping(p, budget, past):
    """Each crease's damping [N m s/rad] at ``past`` [rad] past flat, the damping ratio
    ``p["rest_damping"]`` of Tier A's soft term at the crease's inertia
    (``p["crease_inertia"]``): ``2 zeta sqrt(K I)``, ``K = 2 k delta`` the soft term's
    stiffness at that depth, held at its value at :func:`rest_depth` beyond it; 0 up to
    flat. A crease resting past flat under a load otherwise rings there undamped, and an
    adaptive solver resolves every period of it (``docs/contact.md``)."""
    K = 2.0 * crease_rest_stiffness(p, budget, past.shape[0]) * jnp.clip(past, 0.0, rest_depth(p))
    KI = K * p["crease_inertia"]
    # the square root kept off 0, where its derivative is not finite
    return 2.0 * p["rest_damping"] * jnp.where(KI > 0.0, jnp.sqrt(jnp.where(KI > 0.0, KI, 1.0)), 0.0)


def panel_stiffness(p, budget):
    """Tier B's stiffness, by the same rule as :func:`crease_stiffness`."""
    return p["kappa_scale"] * budget / br.half_reach(p["dhat"])


def certified_margin(energy, kappa, reach):
    """The smallest margin a conservative or dissipative motion can reach: the barrier
    ``kappa b`` never holds more than the energy the structure has (``energy``, its
    largest total energy over the run), so ``b(margin) <= energy / kappa``."""
    return br.barrier_inverse(jnp.maximum(energy, 0.0) / kappa, reach)


def certified_margins(element, p, energy: float, budget: float) -> dict:
    """What an energy bound guarantees for ``element`` (a :class:`~diffmb.origami.contact.PanelContact`):
    with at most ``energy`` [J] in the structure (its largest total energy over a run that
    conserves or dissipates it; hinge springs and the barriers hold no negative energy),
    no crease comes within
    ``certified_crease_margin_rad`` (the least over the creases) of its barrier's end
    (``pi + psi_hat``) and no fully
    armed pair of panels closer than ``certified_gap_m`` (thickness apart). The figures
    do not hold for a run driven by torques that add energy."""
    return {k: float(v) for k, v in certified_figures(element, p, energy, budget).items()}


def certified_figures(element, p, energy, budget) -> dict:
    """:func:`certified_margins` as arrays, traceable (one program with the run's other
    figures: :func:`.report.summary`)."""
    out = {}
    if element.tree_creases or element.cut_creases:   # the least over the creases (each its own reach)
        out["certified_crease_margin_rad"] = jnp.min(certified_margin(energy, crease_stiffness(p, budget),
                                                                      certified_reach(p)))
    if element.pairs:
        out["certified_gap_m"] = certified_margin(energy, panel_stiffness(p, budget), p["dhat"])
    return out
