"""The default rule of contact's stiffnesses, and what an energy bound certifies.

The barriers need no tuning per design: each stiffness is ``kappa = kappa_scale E /
b(reach / 2)``, with ``E`` the energy the structure can spend (its energy at the start),
so a motion that conserves or dissipates energy never comes closer than half a reach
to a barrier's end (:func:`certified_margin`). The reaches: :data:`PSI_HAT` for the
creases, :data:`DHAT_RELATIVE` of the panel size for the panels."""

from __future__ import annotations

import jax.numpy as jnp

from ...math import barrier as br

#: Default reach of the crease barrier [rad]: a crease may fold at most this far past flat.
PSI_HAT = 1e-3
#: Default reach of the panel barrier, relative to the panels' median diameter.
DHAT_RELATIVE = 1e-3
#: The least energy budget [J] of the default stiffnesses (a structure at rest, unloaded).
MIN_BUDGET = 1e-9


def crease_stiffness(p, budget):
    """Tier A's stiffness, the default rule: the barrier holds ``kappa_scale`` times the
    energy ``budget`` [J] at half its reach."""
    return p["kappa_scale"] * budget / br.half_reach(p["psi_hat"])


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
    ``certified_crease_margin_rad`` of its barrier's end (``pi + psi_hat``) and no fully
    armed pair of panels closer than ``certified_gap_m`` (thickness apart). The figures
    do not hold for a run driven by torques that add energy."""
    out = {}
    if element.tree_creases or element.cut_creases:
        out["certified_crease_margin_rad"] = float(certified_margin(energy, crease_stiffness(p, budget),
                                                                    p["psi_hat"]))
    if element.pairs:
        out["certified_gap_m"] = float(certified_margin(energy, panel_stiffness(p, budget), p["dhat"]))
    return out
