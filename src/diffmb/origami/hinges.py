"""Hinge models for folded deployables: strain-energy tape springs and deployment stops.

Fulton & Schaub (section 2.3.2, eq. 10) apply hinge forces as generalized forces
``T(k) = H(k) f(k)``; eq. (11) is the linear torsion spring ``f = K theta``. This module
adds the nonlinear hinges the paper's self-actuated deployments call for (its section 1:
"strain energy hinges, such as high strain tape springs"), as a pure ``tau_fn`` for
:class:`~diffmb.system.TreeSystem` (``build(pattern, tau_fn=..., forcing=...,
potential_fn=...)``). Every number is an array in ``forcing`` (one entry per hinge), so
the hinge parameters can be fitted by gradient descent through ``simulate`` like any
other parameter; the structure (which hinges, which models) is static and hashable, so
rebuilding with new numbers never recompiles.

Models (``theta`` is the hinge joint angle, ``tau`` the generalized force on it):

(a) **Linear torsion spring + damper** ``tau = -K (theta - rest) - D theta_dot``
    (eq. 11): already part of the :class:`~diffmb.tree.model.Model` (``stiffness``,
    ``damping``, ``rest``; :class:`~diffmb.origami.pattern.Crease` fields), and its
    energy ``1/2 K (theta - rest)^2`` (eq. 13) is already in the energy diagnostic.

(b) **Tape spring** (strain-energy hinge). With ``u = theta - rest`` the hinge exerts
    ``tau = -M(u)``, ``M = dU/du``, where for ``u >= 0``

    .. math::

        M(u) = M_{pl} \\tanh(x) + A\\,x\\,e^{b (1 - x^2)/2}, \\qquad x = u/\\theta_p,

    with ``A = M_peak - M_pl tanh(1)`` and ``b = 1 + M_pl sech^2(1) / A``, and ``M`` odd
    (``M(-u) = -M_neg(u)``). The three user parameters per side are

    * ``K_flat``  [N m/rad]: stiffness near flat, ``M'(0) = K_flat`` (shared by both
      sides, so the curve is smooth through flat);
    * ``M_peak``  [N m]: the snap-through moment. ``M(theta_p) = M_peak`` and
      ``M'(theta_p) = 0`` exactly (``b`` is chosen for that): a local maximum at
      ``theta_p = (M_pl + A e^{b/2}) / K_flat`` (from ``M'(0) = K_flat``);
    * ``M_plateau`` [N m]: the steady moment of the buckled (folded) tape spring,
      ``M(u) -> M_plateau`` for ``u >> theta_p`` (within 0.2 % of ``M_peak`` beyond
      ``u = 5 theta_p``; the curve dips slightly below the plateau on its way there).

    Need ``M_peak > M_plateau >= 0`` and ``K_flat > 0``. The negative side
    (``u < 0``) uses ``M_peak_neg`` / ``M_plateau_neg`` — the opposite-sense /
    equal-sense asymmetry of real tape springs (equal values: symmetric). The energy
    is closed form (``tape_spring_energy``):

    .. math::

        U(u) = M_{pl}\\,\\theta_p \\log\\cosh x + A\\,\\theta_p\\,e^{b/2}\\,(1 - e^{-b x^2/2}) / b,

    with ``log cosh`` written as ``logaddexp(x, -x) - log 2`` (smooth; no NaN anywhere).
    Optional ``damping`` [N m s/rad] adds ``-c theta_dot``.

(c) **Deployment stops** (the paper's section 4.3.1: panels fold past 180 degrees
    because the model has no contact). A one-sided stiff spring beyond the limits
    ``lower <= theta <= upper`` with penetration ``d = max(0, theta - upper) +
    max(0, lower - theta)``:

    .. math::

        U_{stop} = \\tfrac12 k\\,d^2, \\qquad
        \\tau = -\\mathrm{sign}\\cdot(k\\,d + c\\,d\\,\\dot\\theta_{in}),

    i.e. a Hunt-Crossley contact: the damping ``c`` [N m s/rad^2] is proportional to the
    penetration, so the torque is continuous at the limit and purely dissipative
    (``-c d theta_dot^2 <= 0``). Exactly zero inside the limits. ``U_stop`` is C1
    (its torque is continuous, its stiffness jumps at the limit). With a switch width
    ``w > 0`` the ramp ``max(x, 0)`` becomes ``w log(1 + e^{x/w})``: smooth to all orders,
    so that a fit of ``k`` and ``c`` sees contact onset as a smooth function of them.

Use::

    plain, _ = build(pattern)          # (or: free root = coordinates 0-5, hinges 6, 7, ...)
    hs = make_hinges(hinge_indices(plain.model), plain.model.nv,
                     tape_spring=dict(K_flat=1.0, M_peak=0.3, M_plateau=0.1),
                     stops=dict(upper=np.pi, k=100.0, c=20.0))
    system, info = build(pattern, tau_fn=hs.tau_fn, forcing=hs.forcing, potential_fn=hs.potential)
    # fit: jax.grad(loss)(params) has entries params["forcing"]["tape"]["M_peak"] etc.

:func:`make_hinges` returns a :class:`HingeSet` ``(tau_fn, forcing, potential)``;
``tau_fn, forcing = hinges[:2]`` gives the ``(tau_fn, forcing_params)`` pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_LOG2 = float(np.log(2.0))
_TANH1 = float(np.tanh(1.0))
_SECH2_1 = float(1.0 - np.tanh(1.0) ** 2)

_FAR = 1e6  # [rad]: farther than any hinge turns
TAPE_KEYS = ("K_flat", "M_peak", "M_plateau", "M_peak_neg", "M_plateau_neg", "rest", "damping")
STOP_KEYS = ("lower", "upper", "k", "c", "width")


# ----------------------------------------------------------------- pure functions


def _logcosh(x):
    return jnp.logaddexp(x, -x) - _LOG2


def _shape(K_flat, M_peak, M_plateau):
    """Derived ``(A, b, theta_p)`` of one side (see the module docstring)."""
    # NaN outside the model's domain (a peak below the plateau): a fit's trial step there
    # is rejected instead of simulating a curve the model does not define
    A = jnp.where(M_peak > M_plateau, M_peak - M_plateau * _TANH1, jnp.nan)
    b = 1.0 + M_plateau * _SECH2_1 / A
    theta_p = (M_plateau + A * jnp.exp(0.5 * b)) / K_flat
    return A, b, theta_p


def _side(u, K_flat, M_peak, M_plateau, M_peak_neg, M_plateau_neg):
    pos = u >= 0
    mp = jnp.where(pos, M_peak, M_peak_neg)
    ml = jnp.where(pos, M_plateau, M_plateau_neg)
    return (K_flat, mp, ml)


def tape_spring_peak(K_flat, M_peak, M_plateau):
    """Angle ``theta_p`` (from rest) of the snap-through peak ``M(theta_p) = M_peak``."""
    return _shape(K_flat, M_peak, M_plateau)[2]


def tape_spring_moment(u, K_flat, M_peak, M_plateau, M_peak_neg=None, M_plateau_neg=None):
    """Restoring moment ``M(u) = dU/du`` of the tape spring at ``u = theta - rest``.

    Odd in ``u`` (with the ``*_neg`` parameters on the negative side; default: the
    positive ones). The hinge torque is ``-M``.
    """
    M_peak_neg = M_peak if M_peak_neg is None else M_peak_neg
    M_plateau_neg = M_plateau if M_plateau_neg is None else M_plateau_neg
    K, mp, ml = _side(u, K_flat, M_peak, M_plateau, M_peak_neg, M_plateau_neg)
    A, b, tp = _shape(K, mp, ml)
    x = u / tp
    return ml * jnp.tanh(x) + A * x * jnp.exp(0.5 * b * (1.0 - x * x))


def tape_spring_energy(u, K_flat, M_peak, M_plateau, M_peak_neg=None, M_plateau_neg=None):
    """Strain energy ``U(u)``, ``U(0) = 0``, ``dU/du = tape_spring_moment(u, ...)``."""
    M_peak_neg = M_peak if M_peak_neg is None else M_peak_neg
    M_plateau_neg = M_plateau if M_plateau_neg is None else M_plateau_neg
    K, mp, ml = _side(u, K_flat, M_peak, M_plateau, M_peak_neg, M_plateau_neg)
    A, b, tp = _shape(K, mp, ml)
    x = u / tp
    return ml * tp * _logcosh(x) + A * tp * jnp.exp(0.5 * b) * (-jnp.expm1(-0.5 * b * x * x)) / b


def _scaled(x, width):
    # x is -inf beyond an absent limit; clipped first, so that a tangent of the width
    # (0 * inf in d(x/w)) cannot make a NaN
    w = jnp.where(width > 0, width, 1.0)
    return jnp.clip(x, -_FAR, _FAR) / w, w


def _ramp(x, width):
    """``max(x, 0)``, or its smooth form ``w log(1 + e^{x/w})`` for a width ``w > 0``."""
    xs, w = _scaled(x, width)
    return jnp.where(width > 0, w * jnp.logaddexp(xs, 0.0), jnp.maximum(x, 0.0))


def _ramp_slope(x, width):
    xs, _ = _scaled(x, width)
    return jnp.where(width > 0, jax.nn.sigmoid(xs), jnp.where(x > 0, 1.0, 0.0))


def stop_penetration(theta, lower, upper, width=0.0):
    """Signed penetration: ``> 0`` beyond ``upper``, ``< 0`` below ``lower``, else 0
    (``width > 0``: the smooth switch, see :func:`stop_torque`)."""
    return _ramp(theta - upper, width) - _ramp(lower - theta, width)


def stop_energy(theta, lower, upper, k, width=0.0):
    """``1/2 k d^2`` with ``d`` the penetration beyond ``[lower, upper]`` (0 inside)."""
    d = stop_penetration(theta, lower, upper, width)
    return 0.5 * k * d * d


def stop_torque(theta, theta_dot, lower, upper, k, c=0.0, width=0.0):
    """``-k d d' - c |d| theta_dot`` (Hunt-Crossley): ``-dU/dtheta`` plus contact damping.

    ``width = 0``: the exact one-sided contact (``d' = 1`` in contact). ``width > 0`` [rad]:
    the penetration's ramp is replaced by ``w log(1 + e^{x/w})`` (a switch smooth to all
    orders, like the tensegrity strings' ``slack_width``), so the motion, and a fit of
    ``k`` and ``c``, depend smoothly on when contact begins; it adds ``k w^2 log^2 2 / 2``
    of energy at the limit and vanishes as ``w -> 0``.
    """
    d = stop_penetration(theta, lower, upper, width)
    slope = _ramp_slope(theta - upper, width) + _ramp_slope(lower - theta, width)
    return -k * d * slope - c * jnp.abs(d) * theta_dot


# ------------------------------------------------------------------------ factory


def hinge_indices(model) -> tuple:
    """Coordinate indices of the model's revolute joints (root free joint excluded).

    For revolute joints the position and velocity index coincide.
    """
    return tuple(int(s) for (s, _), k in zip(model.body_slices, model.joint_kinds) if k == "revolute")


@dataclass(frozen=True)
class HingeForces:
    """``tau_fn(t, q, qd, forcing) -> tau`` of the hinge models (static, hashable)."""

    indices: tuple
    nv: int
    tape: bool
    stops: bool

    def __call__(self, t, q, qd, forcing):
        idx = np.asarray(self.indices, dtype=int)
        th, thd = q[idx], qd[idx]
        t_h = jnp.zeros_like(th)
        if self.tape:
            f = forcing["tape"]
            u = th - f["rest"]
            t_h = t_h - tape_spring_moment(u, f["K_flat"], f["M_peak"], f["M_plateau"],
                                           f["M_peak_neg"], f["M_plateau_neg"]) - f["damping"] * thd
        if self.stops:
            s = forcing["stop"]
            t_h = t_h + stop_torque(th, thd, s["lower"], s["upper"], s["k"], s["c"], s["width"])
        return jnp.zeros(self.nv, q.dtype).at[idx].set(t_h)


@dataclass(frozen=True)
class HingePotential:
    """``potential(q, forcing) -> U``: the models' stored energy (for the energy diagnostic)."""

    indices: tuple
    tape: bool
    stops: bool

    def __call__(self, q, forcing):
        th = q[np.asarray(self.indices, dtype=int)]
        U = jnp.zeros((), q.dtype)
        if self.tape:
            f = forcing["tape"]
            U = U + jnp.sum(tape_spring_energy(th - f["rest"], f["K_flat"], f["M_peak"], f["M_plateau"],
                                               f["M_peak_neg"], f["M_plateau_neg"]))
        if self.stops:
            s = forcing["stop"]
            U = U + jnp.sum(stop_energy(th, s["lower"], s["upper"], s["k"], s["width"]))
        return U


class HingeSet(NamedTuple):
    tau_fn: HingeForces
    forcing: dict
    potential: HingePotential


def _per_hinge(name, value, n, dtype=np.float64):
    a = np.asarray(value, dtype)
    if a.ndim == 0:
        a = np.full(n, float(a), dtype)
    if a.shape != (n,):
        raise ValueError(f"hinge parameter {name!r}: expected a scalar or shape ({n},), got {a.shape}")
    if not np.all(np.isfinite(a) | (name in ("lower", "upper"))):
        raise ValueError(f"hinge parameter {name!r}: must be finite")
    return a


def tape_spring_params(n: int, *, K_flat, M_peak, M_plateau, M_peak_neg=None, M_plateau_neg=None,
                       rest=0.0, damping=0.0) -> dict:
    """Validated per-hinge tape-spring arrays (scalars broadcast to ``n`` hinges)."""
    M_peak_neg = M_peak if M_peak_neg is None else M_peak_neg
    M_plateau_neg = M_plateau if M_plateau_neg is None else M_plateau_neg
    vals = dict(K_flat=K_flat, M_peak=M_peak, M_plateau=M_plateau, M_peak_neg=M_peak_neg,
                M_plateau_neg=M_plateau_neg, rest=rest, damping=damping)
    p = {k: _per_hinge(k, v, n) for k, v in vals.items()}
    if np.any(p["K_flat"] <= 0):
        raise ValueError("tape spring: K_flat must be positive")
    for side in ("", "_neg"):
        mp, ml = p["M_peak" + side], p["M_plateau" + side]
        if np.any(ml < 0) or np.any(mp <= ml):
            raise ValueError(f"tape spring: need M_peak{side} > M_plateau{side} >= 0 "
                             f"(got {mp.tolist()} and {ml.tolist()})")
    if np.any(p["damping"] < 0):
        raise ValueError("tape spring: damping must be non-negative")
    return {k: jnp.asarray(p[k]) for k in TAPE_KEYS}


def stop_params(n: int, *, upper, lower=None, k, c=0.0, width=0.0) -> dict:
    """Validated per-hinge stop arrays; ``lower`` defaults to ``-upper`` (``|theta| <= upper``);
    ``width`` [rad]: 0 for the exact contact, > 0 for the smooth switch (:func:`stop_torque`)."""
    upper = _per_hinge("upper", upper, n)
    lower = -upper if lower is None else _per_hinge("lower", lower, n)
    p = dict(lower=lower, upper=upper, k=_per_hinge("k", k, n), c=_per_hinge("c", c, n),
             width=_per_hinge("width", width, n))
    if np.any(p["width"] < 0):
        raise ValueError("stops: width must be non-negative")
    if np.any(p["lower"] > p["upper"]):
        raise ValueError("stops: lower must not exceed upper")
    if np.any(p["k"] < 0) or np.any(p["c"] < 0):
        raise ValueError("stops: k and c must be non-negative")
    return {k_: jnp.asarray(p[k_]) for k_ in STOP_KEYS}


def make_hinges(indices, nv: int, *, tape_spring: dict | None = None, stops: dict | None = None) -> HingeSet:
    """Hinge models on the coordinates ``indices`` (see :func:`hinge_indices`) of a system
    with ``nv`` velocities.

    ``tape_spring``: keyword arguments of :func:`tape_spring_params` (scalars or per-hinge
    arrays) or ``None``; ``stops``: keyword arguments of :func:`stop_params` or ``None``.
    Returns ``HingeSet(tau_fn, forcing, potential)``: ``forcing`` is the pytree of
    per-hinge arrays ``{"tape": {...}, "stop": {...}}`` that ``tau_fn(t, q, qd, forcing)``
    and ``potential(q, forcing)`` read.
    """
    indices = tuple(int(i) for i in indices)
    if not indices:
        raise ValueError("make_hinges: no hinge coordinates given")
    if len(set(indices)) != len(indices) or min(indices) < 0 or max(indices) >= nv:
        raise ValueError(f"make_hinges: hinge indices {indices} must be distinct and in [0, {nv})")
    n = len(indices)
    forcing = {}
    if tape_spring is not None:
        forcing["tape"] = tape_spring_params(n, **tape_spring)
    if stops is not None:
        forcing["stop"] = stop_params(n, **stops)
    tape, stop = tape_spring is not None, stops is not None
    return HingeSet(HingeForces(indices, int(nv), tape, stop), forcing, HingePotential(indices, tape, stop))
