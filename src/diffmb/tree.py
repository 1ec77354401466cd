"""Tree algorithms: kinematics, ABA, RNEA, CRBA, energy and momentum.

These are the recursive algorithms of Featherstone (*Rigid Body Dynamics Algorithms*,
2008, tables 5.1, 6.2, 7.1) written as small per-body functions run by one sweep over
the static topology (:mod:`diffmb.treesweep`). In the notation of Fulton & Schaub
(section 2.2): a base-to-tip sweep for velocities and Coriolis terms, a tip-to-base sweep
for articulated-body inertias and corrections, a base-to-tip sweep for accelerations.

Public conventions (see :mod:`diffmb.model`): ``q``, ``qd``, ``qdd`` and ``tau`` in the
public joint order; a free root has ``q = [sigma; p]`` and ``qd = [omega; v]`` in body
coordinates, ``tau = [torque; force]`` in body coordinates. ``f_ext`` (N, 6) is the
external spatial force on each body, in body coordinates about the body origin.
Gravity enters as a fictitious base acceleration ``-g`` (Featherstone section 5.3), which
is exact for fixed and free bases alike.

All functions take one state; ``jax.vmap`` batches them over states and/or models.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import joints as jt
from . import spatial as sp
from . import treesweep
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


def _block(model: Model, x, i):
    s, e = model.body_slices[i]
    return x[s:e]


def _scatter(model: Model, blocks):
    """Assemble per-body blocks into a public-order vector."""
    order = sorted(range(model.n_bodies), key=lambda i: model.body_slices[i][0])
    return jnp.concatenate([blocks[i] for i in order])


# ------------------------------------------------------------------------ kinematics


def joint_transforms(model: Model, q):
    """Per body ``(E, r)``: motion transform parent -> body (joint placement x joint)."""
    out = []
    for i, kind in enumerate(model.joint_kinds):
        EJ, rJ = jt.transform(kind, model.axis[i], model.axis2[i], _block(model, q, i))
        out.append(sp.xform_compose(EJ, rJ, model.tree_rot[i], model.tree_pos[i]))
    return out


def _velocities(model: Model, q, qd, X):
    """Body spatial velocities (body coords) and the velocity-product terms ``c_i``."""
    v, c, vJ = [], [], []
    for i, kind in enumerate(model.joint_kinds):
        qi, qdi = _block(model, q, i), _block(model, qd, i)
        vj = jt.motion(kind, model.axis[i], model.axis2[i], qi, qdi)
        p = model.parents[i]
        vi = vj if p < 0 else sp.xform_motion(*X[i], v[p]) + vj
        ci = jt.bias(kind, model.axis[i], model.axis2[i], qi, qdi) + sp.cross_motion(vi, vj)
        v.append(vi)
        c.append(ci)
        vJ.append(vj)
    return v, c


def world_transforms(model: Model, q):
    """Per body ``(E, r)`` world -> body: ``E = [body world]``, ``r`` = origin in world."""
    X = joint_transforms(model, q)
    out = []
    for i, p in enumerate(model.parents):
        out.append(X[i] if p < 0 else sp.xform_compose(*X[i], *out[p]))
    return out


def forward_kinematics(model: Model, q, qd=None):
    """Body poses (and spatial velocities) from joint coordinates.

    Returns ``(dcm, pos)`` — ``dcm (N, 3, 3)`` is ``[body world]`` and ``pos (N, 3)`` the
    body origins in world coordinates — and, when ``qd`` is given, ``vel (N, 6)``: the
    body spatial velocities ``[omega; v]`` in body coordinates.
    """
    q = _vec(model, q, "q")
    Xw = world_transforms(model, q)
    dcm = jnp.stack([x[0] for x in Xw])
    pos = jnp.stack([x[1] for x in Xw])
    if qd is None:
        return dcm, pos
    qd = _vec(model, qd, "qd")
    v, _ = _velocities(model, q, qd, joint_transforms(model, q))
    return dcm, pos, jnp.stack(v)


def frame_pose(model: Model, q, name: str):
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


def coordinate_rates(model: Model, q, qd):
    """``q_dot`` from ``qd`` (identity except MRP joints, Fulton & Schaub eqs. 3-4)."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    blocks = [
        jt.qdot(kind, _block(model, q, i), _block(model, qd, i))
        for i, kind in enumerate(model.joint_kinds)
    ]
    return _scatter(model, blocks)


# ---------------------------------------------------------------------------- ABA


def _gravity_accel(model: Model):
    return jnp.concatenate([jnp.zeros(3, model.gravity.dtype), -model.gravity])


def forward_dynamics(model: Model, q, qd, tau, f_ext=None, *, backend: str = "auto"):
    """Articulated-body algorithm (Featherstone table 7.1; Jain's ABFD): ``qdd``, O(n).

    ``tau`` is the total generalized force (add :func:`joint_forces` for springs and
    dampers). Never forms the mass matrix.

    ``backend`` picks the sweep (:mod:`diffmb.treesweep`): ``"unroll"`` (Python loop over
    bodies, fastest run time), ``"scan"`` (``lax.scan`` over runs of same-kind bodies,
    flat compile time) or ``"auto"`` (unroll up to ``treesweep.UNROLL_MAX`` bodies).
    All give the same result to rounding.
    """
    q, qd, tau = _vec(model, q, "q"), _vec(model, qd, "qd"), _vec(model, tau, "tau")
    f_ext = _fext(model, f_ext)
    return treesweep.aba(model, q, qd, tau, f_ext, backend=backend)


# --------------------------------------------------------------------------- RNEA


def inverse_dynamics(model: Model, q, qd, qdd, f_ext=None):
    """Recursive Newton-Euler (Featherstone table 5.1): ``tau`` for given ``qdd``."""
    q, qd, qdd = _vec(model, q, "q"), _vec(model, qd, "qd"), _vec(model, qdd, "qdd")
    f_ext = _fext(model, f_ext)
    N = model.n_bodies
    X = joint_transforms(model, q)
    v, c = _velocities(model, q, qd, X)
    Ib = model.spatial_inertias()
    a0 = _gravity_accel(model)
    a, f = [None] * N, [None] * N
    for i in range(N):
        p = model.parents[i]
        kind = model.joint_kinds[i]
        qi = _block(model, q, i)
        aJ = jt.motion(kind, model.axis[i], model.axis2[i], qi, _block(model, qdd, i))
        a[i] = sp.xform_motion(*X[i], a0 if p < 0 else a[p]) + aJ + c[i]
        fi = sp.mv(Ib[i], a[i]) + sp.cross_force(v[i], sp.mv(Ib[i], v[i]))
        f[i] = fi if f_ext is None else fi - f_ext[i]
    tau = [None] * N
    for i in reversed(range(N)):
        kind = model.joint_kinds[i]
        tau[i] = jt.project_force(kind, model.axis[i], model.axis2[i], _block(model, q, i), f[i])
        p = model.parents[i]
        if p >= 0:
            f[p] = f[p] + sp.xform_force_T(*X[i], f[i])
    return _scatter(model, tau)


def bias_forces(model: Model, q, qd, f_ext=None):
    """``C(q, qd)`` of eq. (8): Coriolis, centrifugal, gravity (and ``-f_ext``) terms."""
    return inverse_dynamics(model, q, qd, jnp.zeros_like(jnp.asarray(qd)), f_ext)


# --------------------------------------------------------------------------- CRBA


def mass_matrix(model: Model, q):
    """Composite-rigid-body algorithm (Featherstone table 6.2): ``M(q)``, public order."""
    q = _vec(model, q, "q")
    N = model.n_bodies
    X = joint_transforms(model, q)
    Ic = [I for I in model.spatial_inertias()]
    for i in reversed(range(N)):
        p = model.parents[i]
        if p >= 0:
            Ic[p] = Ic[p] + sp.inertia_to_parent(*X[i], Ic[i])
    S = [
        jt.subspace(k, model.axis[i], model.axis2[i], _block(model, q, i))
        for i, k in enumerate(model.joint_kinds)
    ]
    M = jnp.zeros((model.nq, model.nq), q.dtype)
    sl = model.body_slices
    for i in range(N):
        F = sp.mm(Ic[i], S[i])
        si, ei = sl[i]
        M = M.at[si:ei, si:ei].set(sp.mm(S[i].T, F))
        j = i
        while model.parents[j] >= 0:
            F = sp.mm(sp.xform_matrix(*X[j]).T, F)
            j = model.parents[j]
            sj, ej = sl[j]
            blk = sp.mm(S[j].T, F)
            M = M.at[sj:ej, si:ei].set(blk)
            M = M.at[si:ei, sj:ej].set(blk.T)
    return M


# --------------------------------------------------------------- energy, momentum


def joint_forces(model: Model, q, qd):
    """Passive joint forces ``-K (q - rest) - D qd`` (Fulton & Schaub eq. 11)."""
    q, qd = _vec(model, q, "q"), _vec(model, qd, "qd")
    return -model.stiffness * (q - model.rest) - model.damping * qd


def kinetic_energy(model: Model, q, qd):
    """``sum_k 1/2 V(k)^T M(k) V(k)`` (Fulton & Schaub eq. 12)."""
    _, _, v = forward_kinematics(model, q, qd)
    Ib = model.spatial_inertias()
    return 0.5 * jnp.sum(v * sp.mv(Ib, v))


def potential_energy(model: Model, q):
    """Gravity plus joint-spring energy ``1/2 K (q - rest)^2`` (eq. 13)."""
    q = _vec(model, q, "q")
    dcm, pos = forward_kinematics(model, q)
    com_w = pos + sp.mtv(dcm, model.com)
    grav = -jnp.sum(model.mass * (com_w @ model.gravity))
    spring = 0.5 * jnp.sum(model.stiffness * (q - model.rest) ** 2)
    return grav + spring


def energy(model: Model, q, qd):
    """Total mechanical energy (eq. 14)."""
    return kinetic_energy(model, q, qd) + potential_energy(model, q)


def center_of_mass(model: Model, q):
    """System centre of mass in world coordinates."""
    dcm, pos = forward_kinematics(model, q)
    com_w = pos + sp.mtv(dcm, model.com)
    return jnp.sum(model.mass[:, None] * com_w, 0) / jnp.sum(model.mass)


def spatial_momentum(model: Model, q, qd):
    """Total spatial momentum ``[angular about the world origin; linear]``, world axes."""
    dcm, pos, v = forward_kinematics(model, q, qd)
    Ib = model.spatial_inertias()
    h_body = sp.mv(Ib, v)  # about each body origin, body axes
    return jnp.sum(sp.xform_force_T(dcm, pos, h_body), 0)


def momentum(model: Model, q, qd):
    """Total linear momentum and angular momentum about the system com, world axes.

    Fulton & Schaub eqs. (16)-(17): ``h = sum_k J(c_k) w(k) + m(k) p(c_sys, c_k) x v(c_k)``.
    Returns ``(linear (3,), angular (3,))``.
    """
    total = spatial_momentum(model, q, qd)
    lin, ang_o = total[3:], total[:3]
    c = center_of_mass(model, q)
    return lin, ang_o - sp.cross(c, lin)
