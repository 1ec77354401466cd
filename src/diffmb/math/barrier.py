"""The clamped log barrier of incremental potential contact, finite everywhere.

IPC (Li et al., *Incremental Potential Contact*, ACM TOG 2020, eq. 6) keeps two bodies
apart with the potential ``kappa b(d)`` on their distance ``d``:

    b(d) = -(d - dhat)^2 ln(d / dhat)   for 0 < d < dhat,   b(d) = 0 for d >= dhat,

which is C2 at ``dhat`` (``b = b' = b'' = 0`` there) and grows without bound as ``d -> 0``:
an energy-conserving (or dissipating) motion can never reach ``d = 0``. Below a floor
``d_floor`` (a small fraction of ``dhat``) the barrier continues as its second-order
Taylor expansion at the floor, so that an adaptive solver's rejected trial stage, a
vmapped batch member that has gone wrong, or reverse-mode autodiff never meets ``log 0``,
an infinity or a NaN: the continuation is C2 at the floor and finite for every ``d``. A
state below the floor is one the guarantee does not cover, and the contact diagnostics
say so (:mod:`diffmb.origami.contact`).

Every function here is elementwise and pure, and takes arrays (``jax.vmap`` and
``jax.grad`` through them are exact; no ``where`` branch sees an argument that would make
its derivative NaN).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: ``d_floor = FLOOR * dhat``: where the barrier turns into its quadratic continuation.
FLOOR = 1e-3


def _b(d, dhat):
    return -((d - dhat) ** 2) * jnp.log(d / dhat)


def _db(d, dhat):
    return -2.0 * (d - dhat) * jnp.log(d / dhat) - (d - dhat) ** 2 / d


def _d2b(d, dhat):
    return -2.0 * jnp.log(d / dhat) - 4.0 * (d - dhat) / d + (d - dhat) ** 2 / d**2


def barrier(d, dhat, floor=FLOOR):
    """``b(d)``: the clamped log barrier of reach ``dhat`` (see module docstring), with its
    quadratic continuation below ``floor * dhat``. ``d`` and ``dhat`` broadcast."""
    d = jnp.asarray(d)
    f = floor * dhat
    inside = d < dhat
    # arguments every branch can take without a NaN in value or derivative
    dc = jnp.where(inside, jnp.maximum(d, f), 0.5 * dhat)
    log_part = _b(dc, dhat)
    fb, f1, f2 = _b(f, dhat), _db(f, dhat), _d2b(f, dhat)
    below = fb + f1 * (d - f) + 0.5 * f2 * (d - f) ** 2
    return jnp.where(inside, jnp.where(d < f, below, log_part), 0.0)


def half_reach(dhat):
    """``b(dhat / 2) = dhat^2 ln(2) / 4``: the barrier at half its reach, in closed form."""
    return 0.25 * jnp.log(2.0) * dhat**2


def barrier_inverse(energy, dhat, iterations: int = 60):
    """The distance ``d`` in ``(0, dhat]`` with ``b(d) = energy`` (``energy >= 0``), by
    bisection on the monotone branch; the certified gap of an energy bound: a motion that
    has at most ``E`` to spend on a primitive with stiffness ``kappa`` never comes closer
    than ``barrier_inverse(E / kappa, dhat)``."""
    energy = jnp.asarray(energy)

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        above = _b(jnp.maximum(mid, 1e-300), dhat) > energy
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    # a loop, not unrolled: the bisection is a small program (a run's summary compiled
    # 0.3 s more with its 60 steps written out)
    bracket = (jnp.zeros_like(energy) + 0.0 * dhat, jnp.zeros_like(energy) + dhat)
    return jax.lax.fori_loop(0, iterations, halve, bracket)[1]


def mollifier(x, eps):
    """IPC's edge-edge mollifier (Li et al. 2020, eq. 12): ``(2 - x / eps) x / eps`` for
    ``x < eps``, 1 beyond, with ``x = |e1 x e2|^2``: the energy of two nearly parallel edges
    goes smoothly to zero, where their closest points stop being unique."""
    r = x / eps
    return jnp.where(x < eps, (2.0 - r) * r, 1.0)
