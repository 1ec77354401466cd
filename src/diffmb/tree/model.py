"""The rigid-body tree model: static topology + array parameters, and its builder.

A :class:`Model` is an equinox Module. Its topology (parents, joint kinds, names, the
coordinate layout) is static and hashable; every number (inertias, joint placements,
axes, spring/damper constants, gravity) is an array leaf, so ``jax.grad`` with respect to
model parameters and ``jax.vmap`` over stacked parameter sets work without recompiling.

Bodies are stored in topological order (parents before children); ``body_names`` gives
that order and per-body arrays (and ``f_ext``) follow it. The *public* coordinate order
is the order in which joints were declared (for URDF: document order of ``<joint>``
elements), which need not be topological; the algorithms permute internally.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..math import spatial as sp
from . import joints as jt
from .checks import check_tree_body, is_rotation
from .regularity import check_regular as check_regular_mass


class Model(eqx.Module):
    """A rigid-body tree (see module docstring).

    Static fields: ``body_names``, ``joint_names`` (public order), ``joint_kinds`` and
    ``parents`` (per body, topological order; parent ``-1`` is the world),
    ``body_joint`` (public joint index of each body's joint), ``frame_names`` /
    ``frame_bodies`` (frames of links merged by fixed joints).

    Array fields (per body unless noted): ``mass (N,)``, ``com (N, 3)`` in body
    coordinates, ``inertia (N, 3, 3)`` about the com in body axes, ``tree_rot (N, 3, 3)``
    DCM [J parent], ``tree_pos (N, 3)`` joint-frame origin in parent coordinates,
    ``axis``/``axis2 (N, 3)``; per generalized velocity in public order ``stiffness``,
    ``damping``, ``rest``, ``armature`` (rotor inertia added to the mass matrix's diagonal,
    as MuJoCo's ``armature``), ``effort_limit``, ``lower``, ``upper``; ``gravity (3,)`` in
    world coordinates; ``frame_rot``/``frame_pos`` placements of merged frames.
    """

    mass: jnp.ndarray
    com: jnp.ndarray
    inertia: jnp.ndarray
    tree_rot: jnp.ndarray
    tree_pos: jnp.ndarray
    axis: jnp.ndarray
    axis2: jnp.ndarray
    stiffness: jnp.ndarray
    damping: jnp.ndarray
    rest: jnp.ndarray
    armature: jnp.ndarray
    effort_limit: jnp.ndarray
    lower: jnp.ndarray
    upper: jnp.ndarray
    gravity: jnp.ndarray
    frame_rot: jnp.ndarray
    frame_pos: jnp.ndarray

    body_names: tuple = eqx.field(static=True)
    joint_names: tuple = eqx.field(static=True)
    joint_kinds: tuple = eqx.field(static=True)
    parents: tuple = eqx.field(static=True)
    body_joint: tuple = eqx.field(static=True)
    frame_names: tuple = eqx.field(static=True)
    frame_bodies: tuple = eqx.field(static=True)

    # ------------------------------------------------------------- static layout
    @property
    def n_bodies(self) -> int:
        return len(self.body_names)

    @property
    def nv_body(self) -> tuple:
        return tuple(jt.NV[k] for k in self.joint_kinds)

    @property
    def nq(self) -> int:
        return sum(self.nv_body)

    nv = nq

    @property
    def public_offsets(self) -> tuple:
        """Offset of each *public* joint's block in ``q``."""
        nv_pub = [0] * self.n_bodies
        for b, j in enumerate(self.body_joint):
            nv_pub[j] = jt.NV[self.joint_kinds[b]]
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(nv_pub)[:-1]]))

    @property
    def body_slices(self) -> tuple:
        """``(start, stop)`` of each body's joint block in the *public* ``q``."""
        off = self.public_offsets
        return tuple(
            (off[j], off[j] + jt.NV[k]) for j, k in zip(self.body_joint, self.joint_kinds)
        )

    @property
    def floating_base(self) -> bool:
        """Every root flies free (a free joint to the world): nothing holds the system, so
        its total momentum is conserved. A single tree's free root, or a forest of them
        (a servicer beside its free-flying target)."""
        return bool(self.free_roots) and len(self.free_roots) == self.parents.count(-1)

    @property
    def free_roots(self) -> tuple:
        """The bodies on a free joint (each hangs from the world)."""
        return tuple(i for i, k in enumerate(self.joint_kinds) if k == "free")

    def _names(self, single: str, multi: dict) -> tuple:
        names = []
        for j, name in enumerate(self.joint_names):
            kind = self.joint_kinds[self.body_joint.index(j)]
            names += [name + single] if jt.NV[kind] == 1 else [name + s for s in multi[kind]]
        return tuple(names)

    @property
    def hinge_coordinates(self) -> tuple:
        """Coordinate names of the revolute joints (the ``hinge`` coordinate role)."""
        return tuple(name for j, name in enumerate(self.joint_names)
                     if self.joint_kinds[self.body_joint.index(j)] == "revolute")

    @property
    def coordinate_names(self) -> tuple:
        """Names of the entries of ``q`` (public order)."""
        return self._names("", {
            "universal": ("_1", "_2"),
            "spherical": ("_sigma1", "_sigma2", "_sigma3"),
            "free": ("_sigma1", "_sigma2", "_sigma3", "_x", "_y", "_z"),
        })

    @property
    def velocity_names(self) -> tuple:
        """Names of the entries of ``qd`` (public order)."""
        return self._names("_dot", {
            "universal": ("_1_dot", "_2_dot"),
            "spherical": ("_wx", "_wy", "_wz"),
            "free": ("_wx", "_wy", "_wz", "_vx", "_vy", "_vz"),
        })

    def body_index(self, name: str) -> int:
        if name not in self.body_names:
            raise ValueError(f"unknown body {name!r}; bodies are {list(self.body_names)}")
        return self.body_names.index(name)

    def spatial_inertias(self):
        """6x6 spatial inertia of every body about its own origin, (N, 6, 6)."""
        return sp.spatial_inertia(self.mass, self.com, self.inertia)

    def neutral(self):
        """Zero configuration ``q`` (public order)."""
        return jnp.zeros(self.nq, self.mass.dtype)


# ============================================================================ builder


def _arr(x, shape, what):
    a = np.asarray(x, dtype=float)
    if a.shape != shape:
        raise ValueError(f"{what}: expected shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: contains non-finite values")
    return a


def _unit(v, what):
    v = _arr(v, (3,), what)
    n = np.linalg.norm(v)
    if n < 1e-12:
        raise ValueError(f"{what}: axis must be non-zero")
    return v / n


def _rot_from(rot, rpy, what):
    if rot is not None and rpy is not None:
        raise ValueError(f"{what}: give either rot or rpy, not both")
    if rpy is not None:
        return np.asarray(sp.rpy_dcm(jnp.asarray(_arr(rpy, (3,), what + " rpy"))))
    if rot is None:
        return np.eye(3)
    R = _arr(rot, (3, 3), what + " rot")
    if not is_rotation(R):
        raise ValueError(f"{what}: rot is not a proper rotation (DCM)")
    return R


INERTIA_POLICIES = ("warn", "error", "repair")
NO_MOVABLE_JOINTS = ("model has no movable joints: nothing moves (every body is fixed); a "
                     "floating base (load_urdf(..., floating_base=True)) makes the root a free body")


def inertia_problem(mass, inertia) -> str | None:
    """What makes ``(mass, inertia)`` physically invalid, or None.

    The tolerance is relative to the largest principal moment with an absolute floor of
    1e-18 kg m^2, so a point mass whose tensor carries a 1e-35 round-off passes.
    """
    if not np.isfinite(mass) or mass < 0:
        return f"mass must be finite and non-negative, got {mass}"
    I = np.asarray(inertia, float)
    if not np.all(np.isfinite(I)):
        return "inertia has non-finite entries"
    if not np.allclose(I, I.T, atol=1e-12 * max(1.0, np.abs(I).max())):
        return "inertia matrix is not symmetric"
    if np.allclose(I, 0):
        return None
    ev = np.linalg.eigvalsh(0.5 * (I + I.T))
    tol = 1e-9 * max(ev.max(), 0.0) + 1e-18
    # Zero principal moments are allowed (point masses, slender rods: Madonna's slider-crank).
    if ev.min() < -tol:
        return f"inertia is not positive (semi-)definite (eigenvalues {ev})"
    a, b, c = ev
    if a + b < c - tol:
        return f"principal inertias {ev} break the triangle inequality"
    return None


def check_inertia(mass, com, inertia, what):
    """Validate a rigid body's inertial data; raise ValueError naming ``what``."""
    problem = inertia_problem(mass, inertia)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")


def repair_inertia(inertia) -> np.ndarray:
    """The nearest valid inertia (Frobenius norm): negative principal moments clipped to
    0, then the triangle inequality ``a + b >= c`` restored by the Euclidean projection
    onto that half-space (``a, b`` raised and ``c`` lowered by the same third of the gap)."""
    I = 0.5 * (np.asarray(inertia, float) + np.asarray(inertia, float).T)
    ev, Q = np.linalg.eigh(I)
    ev = np.maximum(ev, 0.0)
    gap = ev[2] - ev[0] - ev[1]
    if gap > 0:
        ev = ev + np.array([gap, gap, -gap]) / 3
    return Q @ np.diag(ev) @ Q.T


@dataclass
class _Body:
    name: str
    parent: str
    kind: str
    joint_name: str
    axis: np.ndarray
    axis2: np.ndarray
    rot: np.ndarray
    pos: np.ndarray
    mass: float
    com: np.ndarray
    inertia: np.ndarray
    stiffness: np.ndarray
    damping: np.ndarray
    rest: np.ndarray
    armature: np.ndarray
    effort: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@dataclass
class ModelBuilder:
    """Builds a :class:`Model` body by body.

    >>> b = ModelBuilder(gravity=(0, 0, -9.81))
    >>> b.add_body("link1", parent="world", joint="revolute", axis=(0, 1, 0),
    ...            mass=1.0, com=(0, 0, -0.5), inertia=np.diag([0.1, 0.1, 0.01]))
    >>> model = b.build()

    ``pos``/``rot`` (or ``rpy``) place the joint frame in the parent body frame; the child
    body frame coincides with the joint frame at ``q = 0``. A ``fixed`` joint merges the
    body's inertia into its parent at build time and keeps its frame as a named frame.
    """

    gravity: tuple = (0.0, 0.0, -9.81)
    _bodies: list = field(default_factory=list)

    def add_body(
        self,
        name: str,
        parent: str = "world",
        joint: str = "revolute",
        *,
        axis=(0.0, 0.0, 1.0),
        axis2=(0.0, 1.0, 0.0),
        pos=(0.0, 0.0, 0.0),
        rot=None,
        rpy=None,
        mass: float = 0.0,
        com=(0.0, 0.0, 0.0),
        inertia=None,
        joint_name: str | None = None,
        stiffness=0.0,
        damping=0.0,
        rest=0.0,
        armature=0.0,
        effort_limit=np.inf,
        lower=-np.inf,
        upper=np.inf,
    ) -> "ModelBuilder":
        what = f"body {name!r}"
        jname = self._check_new_body(what, name, parent, joint, joint_name)
        nv = jt.NV.get(joint, 0)
        mass, com, inertia = _inertial_data(mass, com, inertia, what)
        stiffness_a, armature_a = _springs_and_rotors(stiffness, armature, joint, nv, what)
        self._bodies.append(
            _Body(
                name=name,
                parent=parent,
                kind=str(joint),
                joint_name=jname,
                axis=_unit(axis, what + " axis"),
                axis2=_unit(axis2, what + " axis2"),
                rot=_rot_from(rot, rpy, what + " joint origin"),
                pos=_arr(pos, (3,), what + " pos"),
                mass=mass,
                com=com,
                inertia=inertia,
                stiffness=stiffness_a,
                damping=_per_dof(damping, nv, "damping", what),
                rest=_per_dof(rest, nv, "rest", what),
                armature=armature_a,
                effort=_per_dof(effort_limit, nv, "effort_limit", what),
                lower=_per_dof(lower, nv, "lower", what),
                upper=_per_dof(upper, nv, "upper", what),
            )
        )
        return self

    def _check_new_body(self, what, name, parent, joint, joint_name) -> str:
        """The body's name, joint and parent checked against the bodies added so far
        (:func:`~diffmb.tree.checks.check_tree_body`); returns its joint's name."""
        if not isinstance(name, str) or not name:
            raise ValueError("body name must be a non-empty string")
        jname = joint_name or name
        check_tree_body(what, name, parent, joint, [b.name for b in self._bodies], jt.KINDS,
                        joint_name=jname, joint_names=[b.joint_name for b in self._bodies])
        return jname

    def build(self, *, inertia: str = "error", where: str = "", check_regular: bool = False) -> Model:
        """The Model. Fixed joints are merged first, then every moving body's inertia is
        validated; an invalid one (broken triangle inequality, an indefinite tensor, as
        real description files carry in placeholders) is refused (``inertia="error"``),
        kept with a warning that names the body and its merged links (``"warn"``), or
        replaced by the nearest valid inertia with a warning (``"repair"``,
        :func:`repair_inertia`). Massless bodies (virtual links between joints) are
        accepted where the mass matrix stays regular (checked when there are any, or
        always with ``check_regular``, as the file loaders ask:
        :func:`diffmb.tree.regularity.check_regular`). ``where`` prefixes messages (a file name)."""
        if inertia not in INERTIA_POLICIES:
            raise ValueError(f"inertia: one of {', '.join(INERTIA_POLICIES)}, got {inertia!r}")
        moving, by_name = _moving_bodies(self._bodies)
        inert, merged, frames = _merge_fixed(self._bodies, moving, by_name)
        placements = {b.name: _placement(b, by_name) for b in moving}
        names = [b.name for b in moving]
        _check_inertias(names, inert, merged, inertia, where)
        model = _assemble(names, by_name, inert, placements, frames, self.gravity)
        if check_regular or any(inert[n][0] == 0 and not np.any(inert[n][2]) for n in names):
            check_regular_mass(model, where)
        return model


def _inertial_data(mass, com, inertia, what):
    """``(mass, com, inertia)`` as numbers, checked as far as a body alone allows: the
    rest of the validation waits for fixed links to be merged (:meth:`ModelBuilder.build`)."""
    if inertia is None:
        inertia = np.zeros((3, 3))
    mass = float(mass)
    com = _arr(com, (3,), what + " com")
    inertia = _arr(inertia, (3, 3), what + " inertia")
    if not np.isfinite(mass) or mass < 0:
        raise ValueError(f"{what}: mass must be finite and non-negative, got {mass}")
    if not np.allclose(inertia, inertia.T, atol=1e-12 * max(1.0, np.abs(inertia).max())):
        raise ValueError(f"{what}: inertia matrix is not symmetric")
    return mass, com, inertia


def _per_dof(x, nv, field_name, what):
    """``x`` broadcast to one value per DOF of the joint (``nv`` of them); never NaN."""
    a = np.broadcast_to(np.asarray(x, float), (nv,)).copy() if nv else np.zeros(0)
    if np.any(np.isnan(a)):
        raise ValueError(f"{what}: joint {field_name} is NaN")
    return a


def _springs_and_rotors(stiffness, armature, joint, nv, what):
    """Per-DOF joint stiffness and armature: the armature finite and non-negative, springs
    only on joints of one or two DOF (MRP joints have none)."""
    stiffness_a = _per_dof(stiffness, nv, "stiffness", what)
    armature_a = _per_dof(armature, nv, "armature", what)
    if np.any(armature_a < 0) or not np.all(np.isfinite(armature_a)):
        raise ValueError(f"{what}: joint armature must be finite and non-negative, got {armature_a}")
    if joint in jt.MRP_KINDS and np.any(stiffness_a != 0):
        raise ValueError(f"{what}: joint springs are defined for 1- and 2-DOF joints only")
    return stiffness_a, armature_a


def _moving_bodies(bodies):
    """The bodies on moving joints (declaration order) and every body by name; refuses a
    model in which nothing moves."""
    if not bodies:
        raise ValueError(NO_MOVABLE_JOINTS)
    by_name = {b.name: b for b in bodies}
    moving = [b for b in bodies if b.kind != "fixed"]
    if not moving:
        raise ValueError(NO_MOVABLE_JOINTS)
    return moving, by_name


def _moving_ancestor(b, by_name):
    """``(name, E, r)``: the nearest body above ``b`` on a moving joint (or ``"world"``),
    with ``b``'s frame in that ancestor's frame, ``E = [b anc]`` and ``r`` in anc. A
    moving ``b`` is its own ancestor (identity pose)."""
    E = np.eye(3)
    r = np.zeros(3)
    while b.kind == "fixed":
        # frame b relative to its parent p: E_bp = rot, r_bp = pos
        E, r = E @ b.rot, b.pos + b.rot.T @ r
        if b.parent == "world":
            return "world", E, r
        b = by_name[b.parent]
    return b.name, E, r


def _merge_fixed(bodies, moving, by_name):
    """Fold every fixed body's mass into its moving ancestor (mass attached to the world
    has no dynamics) and keep its frame as a named frame.

    Returns ``inert`` (``{moving body: (mass, com, inertia)}`` with the fixed links
    merged), ``merged`` (``{moving body: [fixed links folded into it]}``, for messages)
    and ``frames`` (``(name, ancestor, E, r)`` per fixed body)."""
    inert = {b.name: (b.mass, b.com.copy(), b.inertia.copy()) for b in moving}
    merged = {}
    frames = []
    for b in bodies:
        if b.kind != "fixed":
            continue
        anc, E, r = _moving_ancestor(b, by_name)
        frames.append((b.name, anc, E, r))
        if b.mass == 0 and not np.any(b.inertia):
            continue
        if anc == "world":
            continue  # mass attached to the fixed world has no dynamics
        merged.setdefault(anc, []).append(b.name)
        inert[anc] = _combined_inertia(inert[anc], b, E, r)
    return inert, merged, frames


def _combined_inertia(ancestor, b, E, r):
    """``(mass, com, inertia)`` of the ``ancestor``'s inertial data with body ``b`` added,
    ``b``'s frame at ``(E, r)`` in the ancestor's (parallel-axis theorem). A massless
    ``b`` with rotational inertia (a flywheel placeholder) adds its inertia about its com."""
    m0, c0, I0 = ancestor
    c1 = r + E.T @ b.com
    I1 = E.T @ b.inertia @ E
    m = m0 + b.mass
    c = (m0 * c0 + b.mass * c1) / m if m > 0 else c0
    d0, d1 = c0 - c, c1 - c
    shift = lambda mm, d: mm * (d @ d * np.eye(3) - np.outer(d, d))
    return m, c, I0 + shift(m0, d0) + I1 + shift(b.mass, d1)


def _placement(b, by_name):
    """``(ancestor, [J anc], origin in anc)``: the moving body ``b``'s joint frame ``J``
    hung from its moving ancestor, with the fixed chain between them folded in."""
    if b.parent == "world":
        anc, Ep, rp = "world", np.eye(3), np.zeros(3)
    else:
        anc, Ep, rp = _moving_ancestor(by_name[b.parent], by_name)
    # [J anc] = rot @ Ep ; origin rp + Ep^T pos
    return anc, b.rot @ Ep, rp + Ep.T @ b.pos


def _check_inertias(names, inert, merged, policy, where):
    """Apply the inertia ``policy`` to every moving body whose merged inertia is invalid
    (:func:`inertia_problem`): raise, warn, or repair ``inert`` in place and warn."""
    for n in names:
        m, c, I = inert[n]
        problem = inertia_problem(m, I)
        if problem is None:
            continue
        what = f"body {n!r}" + (f" (with fixed links {', '.join(merged[n])} merged)" if n in merged else "")
        if policy == "error":
            raise ValueError(f"{where}{what}: {problem}; load with inertia='repair' to use the "
                             f"nearest valid inertia, or inertia='warn' to keep it as given")
        # stacklevel 4: the caller of whoever called ModelBuilder.build (a file loader's caller)
        if policy == "repair":
            inert[n] = (m, c, repair_inertia(I))
            warnings.warn(f"{where}{what}: {problem}; replaced by the nearest valid inertia "
                          f"{np.round(np.linalg.eigvalsh(inert[n][2]), 12)}", stacklevel=4)
        else:
            warnings.warn(f"{where}{what}: {problem}; kept as given (inertia='repair' replaces "
                          f"it by the nearest valid one, inertia='error' refuses it)", stacklevel=4)


def _assemble(names, by_name, inert, placements, frames, gravity) -> Model:
    """The :class:`Model` of the moving bodies ``names`` (topological order: the builder
    adds parents first; the public order is the declaration order)."""
    index = {n: i for i, n in enumerate(names)}
    parents = tuple(-1 if placements[n][0] == "world" else index[placements[n][0]] for n in names)

    def cat(attr):
        return jnp.asarray(np.concatenate([getattr(by_name[n], attr) for n in names]))

    return Model(
        mass=jnp.asarray(np.array([inert[n][0] for n in names])),
        com=jnp.asarray(np.stack([inert[n][1] for n in names])),
        inertia=jnp.asarray(np.stack([inert[n][2] for n in names])),
        tree_rot=jnp.asarray(np.stack([placements[n][1] for n in names])),
        tree_pos=jnp.asarray(np.stack([placements[n][2] for n in names])),
        axis=jnp.asarray(np.stack([by_name[n].axis for n in names])),
        axis2=jnp.asarray(np.stack([by_name[n].axis2 for n in names])),
        stiffness=cat("stiffness"),
        damping=cat("damping"),
        rest=cat("rest"),
        armature=cat("armature"),
        effort_limit=cat("effort"),
        lower=cat("lower"),
        upper=cat("upper"),
        gravity=jnp.asarray(_arr(gravity, (3,), "gravity")),
        frame_rot=jnp.asarray(np.stack([f[2] for f in frames]) if frames else np.zeros((0, 3, 3))),
        frame_pos=jnp.asarray(np.stack([f[3] for f in frames]) if frames else np.zeros((0, 3))),
        body_names=tuple(names),
        joint_names=tuple(by_name[n].joint_name for n in names),
        joint_kinds=tuple(by_name[n].kind for n in names),
        parents=parents,
        body_joint=tuple(range(len(names))),
        frame_names=tuple(f[0] for f in frames),
        frame_bodies=tuple(-1 if f[1] == "world" else index[f[1]] for f in frames),
    )


#: The Model's per-generalized-velocity arrays, in public order.
PER_DOF = ("stiffness", "damping", "rest", "armature", "effort_limit", "lower", "upper")


def reorder_joints(model: Model, joint_order) -> Model:
    """Return ``model`` with its public coordinate order set to ``joint_order`` (names).

    Used by the URDF loader so ``q`` follows the document order of ``<joint>`` elements.
    Per-DOF arrays (stiffness, damping, ...) are permuted to match.
    """
    joint_order = list(joint_order)
    if sorted(joint_order) != sorted(model.joint_names):
        raise ValueError(f"joint order {joint_order} does not name the model's joints")
    old_slices = model.body_slices
    new_pub = {name: i for i, name in enumerate(joint_order)}
    body_joint = tuple(new_pub[model.joint_names[j]] for j in model.body_joint)
    new = dataclasses.replace(model, body_joint=body_joint, joint_names=tuple(joint_order))
    # permute per-DOF arrays
    idx = np.zeros(model.nq, int)
    for b, (s, e) in enumerate(new.body_slices):
        os_, oe = old_slices[b]
        idx[s:e] = np.arange(os_, oe)
    perm = lambda a: a[idx]
    return eqx.tree_at(
        lambda m: tuple(getattr(m, f) for f in PER_DOF),
        new,
        tuple(perm(getattr(model, f)) for f in PER_DOF),
    )
