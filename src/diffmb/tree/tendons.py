"""Fixed tendons: a length that is a linear combination of joint coordinates, with a
spring and a damper along it (MuJoCo's ``<tendon><fixed>``; a cable over pulleys, a
differential, a coupled finger).

``L(q) = L_0 + c . q`` (``q`` diffmb's coordinates, ``L_0`` the length at ``q = 0``); the
tendon pulls with

    f = k (clip(L, lower, upper) - L) - d c . qd

(a spring with a dead band ``[lower, upper]``, MuJoCo's ``springlength`` pair, and a
viscous damper), which acts on the joints as ``tau = c f`` (the tendon Jacobian is
``c``). Its stored energy is ``1/2 k (L - clip(L, lower, upper))^2``.

:class:`FixedTendons` holds the numbers (arrays, so they are parameters to fit, sweep or
differentiate); :class:`TendonForces` and :class:`TendonEnergy` are the static
``tau_fn`` / ``potential_fn`` a :class:`~diffmb.system.TreeSystem` takes, with the tendons
as its ``forcing["tendons"]``.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp


class FixedTendons(eqx.Module):
    """Per tendon: ``coef (T, nv)`` (the Jacobian ``dL/dq``), ``length0 (T,)`` (``L`` at
    ``q = 0``), ``stiffness``, ``damping``, and the spring's dead band ``lower``,
    ``upper`` (equal for a plain spring)."""

    coef: jnp.ndarray
    length0: jnp.ndarray
    stiffness: jnp.ndarray
    damping: jnp.ndarray
    lower: jnp.ndarray
    upper: jnp.ndarray
    names: tuple = eqx.field(static=True, default=())


def lengths(tendons: FixedTendons, q):
    """``L(q) = L_0 + c . q`` for every tendon."""
    return tendons.length0 + tendons.coef @ q


def _stretch(tendons, q):
    L = lengths(tendons, q)
    return L - jnp.clip(L, tendons.lower, tendons.upper)


def generalized_forces(tendons: FixedTendons, q, qd):
    """``tau = c^T f`` with ``f = -k stretch - d c . qd`` (module docstring)."""
    f = -tendons.stiffness * _stretch(tendons, q) - tendons.damping * (tendons.coef @ qd)
    return tendons.coef.T @ f


def energy(tendons: FixedTendons, q):
    """The springs' stored energy ``sum 1/2 k stretch^2``."""
    return 0.5 * jnp.sum(tendons.stiffness * _stretch(tendons, q) ** 2)


class TendonForces(eqx.Module):
    """``tau_fn(t, q, qd, forcing)`` of :class:`~diffmb.system.TreeSystem`: the forces of
    ``forcing["tendons"]``."""

    def __call__(self, t, q, qd, forcing):
        return generalized_forces(forcing["tendons"], q, qd)


class TendonEnergy(eqx.Module):
    """``potential_fn(q, forcing)`` of :class:`~diffmb.system.TreeSystem`: the springs'
    energy of ``forcing["tendons"]``."""

    def __call__(self, q, forcing):
        return energy(forcing["tendons"], q)
