"""Tree algorithms: kinematics, ABA, RNEA, CRBA, energy and momentum.

The public entry points of the recursive algorithms of Featherstone (*Rigid Body
Dynamics Algorithms*, 2008, tables 5.1, 6.2, 7.1). Each evaluates the kinematics
workspace once (:func:`diffmb.tree.kinematics.kinematics`) and hands it to the algorithm:
:mod:`diffmb.tree.aba`, :mod:`diffmb.tree.rnea`, :mod:`diffmb.tree.crba`. None loops over bodies in
Python, so the compile time does not grow with the tree (:mod:`diffmb.tree.scan`).

Public conventions (see :mod:`diffmb.tree.model`): ``q``, ``qd``, ``qdd`` and ``tau`` in the
public joint order; a free root has ``q = [sigma; p]`` and ``qd = [omega; v]`` in body
coordinates, ``tau = [torque; force]`` in body coordinates. ``f_ext`` (N, 6) is the
external spatial force on each body, in body coordinates about the body origin.
Gravity enters as a fictitious base acceleration ``-g`` (Featherstone section 5.3), which
is exact for fixed and free bases alike.

All functions take one state; ``jax.vmap`` batches them over states and/or models.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ..math import spatial as sp
from . import aba, crba, joints as jt, rnea
from .kinematics import body_velocities, kinematics
from .layout import layout
from .model import Model

# ------------------------------------------------------------------ input checking


def _vec(model: Model, x, name: str, n: int | None = None):
    n = model.nq if n is None else n
    x = jnp.asarray(x)
    if x.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) for model with bodies "
                         f"{list(model.body_names)[:4]}{'...' if model.n_bodies > 4 else ''}, "
                         f"got {x.shape}")
    return x


def _fext(model: Model, f_ext):
    if f_ext is None:
        return None
    f_ext = jnp.asarray(f_ext)
    if f_ext.shape != (model.n_bodies, 6):
        raise ValueError(f"f_ext: expected shape ({model.n_bodies}, 6), got {f_ext.shape}")
    return f_ext


# ------------------------------------------------------------------------ kinematics


def forward_kinematics(model: Model, q: ArrayLike, qd: ArrayLike | None = None) -> tuple[Array, ...]:
    """Body poses (and spatial velocities) from joint coordinates.

    Returns ``(dcm, pos)`` — ``dcm (N, 3, 3)`` is ``[body world]`` and ``pos (N, 3)`` the
    body origins in world coordinates — and, when ``qd`` is given, ``vel (N, 6)``: the
    body spatial velocities ``[omega; v]`` in body coordinates.
    """
    return _forward_kinematics(model, _vec(model, q, "q"), None if qd is None else _vec(model, qd, "qd"))


@sp.jit_per_form
def _forward_kinematics(model, q, qd):
    if qd is None:
        ws = kinematics(model, q)
        return ws.rot, ws.pos
    ws = kinematics(model, q, qd)
    return ws.rot, ws.pos, body_velocities(ws)


def frame_pose(model: Model, q: ArrayLike, name: str) -> tuple[Array, Array]:
    """World pose ``([frame world], origin)`` of a body or of a merged (fixed-joint) frame."""
    dcm, pos = forward_kinematics(model, q)
    if name in model.body_names:
        i = model.body_index(name)
        return dcm[i], pos[i]
    if name not in model.frame_names:
        raise ValueError(f"unknown frame {name!r}")
    k = model.frame_names.index(name)
    b = model.frame_bodies[k]
    Ef, rf = model.frame_rot[k], model.frame_pos[k]
    if b < 0:
        return Ef, rf
    return sp.xform_compose(Ef, rf, dcm[b], pos[b])


@sp.jit_per_form
def coordinate_rates(model: Model, q: ArrayLike, qd: ArrayLike) -> Array:
    """``q_dot`` from ``qd`` (identity except MRP joints, Fulton & Schaub eqs. 3-4)."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    parts, take = [qd], np.arange(qd.shape[-1])
    for kind, bodies, qidx in layout(model).groups:
        if kind in jt.MRP_KINDS:
            rates = jax.vmap(lambda a, b, k=kind: jt.qdot(k, a, b))(q[qidx], qd[qidx])
            take[np.asarray(qidx).reshape(-1)] = sum(p.size for p in parts) + np.arange(rates.size)
            parts.append(rates.reshape(-1))
    # one gather of known indices, not a scatter (which a CPU runs as a loop)
    return qd if len(parts) == 1 else jnp.concatenate(parts)[take]


# ---------------------------------------------------------------------------- dynamics

#: How a formulation that offers the choice computes its accelerations, the one word for
#: it everywhere (``forward_dynamics``, ``TreeSystem``, the flexible ``build``):
#: ``recursive`` (O(n), never forming the mass matrix: the articulated-body algorithm,
#: Banerjee's recursion) or ``dense`` (the mass matrix and its Cholesky factor: O(n^3) but
#: fewer, larger kernels, cheaper for one state of a small tree).
ALGORITHMS = ("recursive", "dense")
#: Values of the 0.1 keywords (``backend=``, ``dynamics=``), accepted for one release.
_OLD_ALGORITHMS = {"aba": "recursive", "crba": "dense"}


def choose_algorithm(algorithm: str, old: str | None = None, old_keyword: str = "",
                     allowed: tuple = ALGORITHMS) -> str:
    """``algorithm`` checked against ``allowed``; a value given by the 0.1 keyword
    ``old_keyword`` (``old``, e.g. ``backend="aba"``) is taken instead, with one
    DeprecationWarning."""
    if old is not None:
        warnings.warn(f"{old_keyword}={old!r} is now algorithm={_OLD_ALGORITHMS.get(old, old)!r} "
                      f"({old_keyword}= goes in diffmb 0.3)", DeprecationWarning, stacklevel=3)
        algorithm = _OLD_ALGORITHMS.get(old, old)
    if algorithm not in allowed:
        raise ValueError(f"algorithm: expected one of {', '.join(allowed)}, got {algorithm!r}")
    return algorithm


def forward_dynamics(model: Model, q: ArrayLike, qd: ArrayLike, tau: ArrayLike, f_ext: ArrayLike | None = None,
                     *, algorithm: str = "recursive", backend: str | None = None) -> Array:
    """Forward dynamics ``qdd``: the articulated-body algorithm (Featherstone table 7.1;
    Jain's ABFD), O(n), never forming the mass matrix (``algorithm="recursive"``), or the
    mass matrix and its Cholesky factor (``algorithm="dense"``, see :data:`ALGORITHMS`).
    ``tau`` is the total generalized force (add :func:`joint_forces` for springs and
    dampers). ``backend="aba"|"crba"``: the 0.1 spelling.
    """
    algorithm = choose_algorithm(algorithm, backend, "backend")
    return _forward_dynamics(model, _vec(model, q, "q"), _vec(model, qd, "qd"), _vec(model, tau, "tau"),
                             _fext(model, f_ext), algorithm)


def inverse_dynamics(model: Model, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike,
                     f_ext: ArrayLike | None = None) -> Array:
    """Recursive Newton-Euler (Featherstone table 5.1): ``tau`` for given ``qdd``."""
    return _inverse_dynamics(model, _vec(model, q, "q"), _vec(model, qd, "qd"), _vec(model, qdd, "qdd"),
                             _fext(model, f_ext))


def bias_forces(model: Model, q: ArrayLike, qd: ArrayLike, f_ext: ArrayLike | None = None) -> Array:
    """``C(q, qd)`` of eq. (8): Coriolis, centrifugal, gravity (and ``-f_ext``) terms."""
    return _bias_forces(model, _vec(model, q, "q"), _vec(model, qd, "qd"), _fext(model, f_ext))


def mass_matrix(model: Model, q: ArrayLike) -> Array:
    """Composite-rigid-body algorithm (Featherstone table 6.2): ``M(q)``, public order."""
    return crba.mass_matrix_at(model, _vec(model, q, "q"))


# The algorithms behind the entry points above, one jit each (per model structure and
# contraction form): a loop of eager calls compiles each once, not its level scans at
# every call, and inside a caller's trace they inline as any function would.


@sp.jit_per_form
def _forward_dynamics(model, q, qd, tau, f_ext, algorithm):
    ws = kinematics(model, q, qd)
    if algorithm == "recursive":
        return aba.forward_dynamics_ws(model, ws, tau, f_ext)
    M = crba.mass_matrix_ws(model, ws)
    rhs = tau - rnea.bias_forces_ws(model, ws, f_ext)
    return jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(M), True), rhs)


@sp.jit_per_form
def _inverse_dynamics(model, q, qd, qdd, f_ext):
    return rnea.inverse_dynamics_ws(model, kinematics(model, q, qd), qdd, f_ext)


@sp.jit_per_form
def _bias_forces(model, q, qd, f_ext):
    return rnea.bias_forces_ws(model, kinematics(model, q, qd), f_ext)


# --------------------------------------------------------------- energy, momentum


def joint_forces(model: Model, q: ArrayLike, qd: ArrayLike) -> Array:
    """Passive joint forces ``-K (q - rest) - D qd`` (Fulton & Schaub eq. 11)."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    return -model.stiffness * (q - model.rest) - model.damping * qd


def kinetic_energy_ws(ws):
    """``sum_k 1/2 V(k)^T M(k) V(k)`` (Fulton & Schaub eq. 12) from a workspace: the
    bodies' share (add :func:`rotor_energy` for the joints' armature)."""
    return 0.5 * jnp.sum(ws.vel * sp.mv(ws.inertia, ws.vel))


def rotor_energy(model: Model, qd):
    """``1/2 sum_j armature_j qd_j^2``: the kinetic energy of the joints' armature (the
    rotor inertia MuJoCo adds to the mass matrix's diagonal)."""
    return 0.5 * jnp.sum(model.armature * qd * qd)


def potential_energy_ws(model: Model, ws, q):
    """Gravity plus joint-spring energy ``1/2 K (q - rest)^2`` (eq. 13) from a workspace."""
    com_w = ws.pos + sp.mtv(ws.rot, model.com)
    grav = -jnp.sum(model.mass * (com_w @ model.gravity))
    spring = 0.5 * jnp.sum(model.stiffness * (q - model.rest) ** 2)
    return grav + spring


@sp.jit_per_form
def kinetic_energy(model: Model, q: ArrayLike, qd: ArrayLike) -> Array:
    """``sum_k 1/2 V(k)^T M(k) V(k)`` (Fulton & Schaub eq. 12), plus the armature's."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    return kinetic_energy_ws(kinematics(model, q, qd)) + rotor_energy(model, qd)


@sp.jit_per_form
def potential_energy(model: Model, q: ArrayLike) -> Array:
    """Gravity plus joint-spring energy ``1/2 K (q - rest)^2`` (eq. 13)."""
    q = _vec(model, q, "q")
    return potential_energy_ws(model, kinematics(model, q), q)


@sp.jit_per_form
def energy(model: Model, q: ArrayLike, qd: ArrayLike) -> Array:
    """Total mechanical energy (eq. 14)."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    ws = kinematics(model, q, qd)
    return kinetic_energy_ws(ws) + rotor_energy(model, qd) + potential_energy_ws(model, ws, q)


def center_of_mass_ws(model: Model, ws):
    com_w = ws.pos + sp.mtv(ws.rot, model.com)
    return jnp.sum(model.mass[:, None] * com_w, 0) / jnp.sum(model.mass)


@sp.jit_per_form
def center_of_mass(model: Model, q: ArrayLike) -> Array:
    """System centre of mass in world coordinates."""
    return center_of_mass_ws(model, kinematics(model, _vec(model, q, "q")))


def spatial_momentum_ws(ws, vel=None):
    """Total spatial momentum ``[angular about the world origin; linear]`` from a workspace
    (``vel``: the bodies' world velocities, for a workspace built without speeds)."""
    return jnp.sum(sp.mv(ws.inertia, ws.vel if vel is None else vel), 0)


def momentum_scale_ws(model: Model, ws):
    """``sum_k |h_k|``, each body's angular momentum about the system com (the terms of
    Fulton & Schaub eq. 16 taken by magnitude): the natural scale of the total ``h``, which
    is a sum of such terms and can be near zero (a release from rest) while they are not."""
    p = sp.mv(ws.inertia, ws.vel)
    c = jnp.broadcast_to(center_of_mass_ws(model, ws), p[:, 3:].shape)
    return jnp.sum(sp.safe_norm(p[:, :3] - sp.cross(c, p[:, 3:])))


@sp.jit_per_form
def spatial_momentum(model: Model, q: ArrayLike, qd: ArrayLike) -> Array:
    """Total spatial momentum ``[angular about the world origin; linear]``, world axes."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    return spatial_momentum_ws(kinematics(model, q, qd))


def momentum_ws(model: Model, ws):
    total = spatial_momentum_ws(ws)
    lin, ang_o = total[3:], total[:3]
    return lin, ang_o - sp.cross(center_of_mass_ws(model, ws), lin)


@sp.jit_per_form
def momentum(model: Model, q: ArrayLike, qd: ArrayLike) -> tuple[Array, Array]:
    """Total linear momentum and angular momentum about the system com, world axes.

    Fulton & Schaub eqs. (16)-(17): ``h = sum_k J(c_k) w(k) + m(k) p(c_sys, c_k) x v(c_k)``.
    Returns ``(linear (3,), angular (3,))``.
    """
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    return momentum_ws(model, kinematics(model, q, qd))
