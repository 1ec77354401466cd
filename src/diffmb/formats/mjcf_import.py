"""MJCF import through MuJoCo's own compiler: ``load_mjcf(path) -> MjcfModel``.

MuJoCo compiles the file (defaults, ``<include>``, inertias from geoms, ``childclass``,
angle units), so what diffmb reads is exactly the model MuJoCo simulates. From the compiled
``mujoco.MjModel``:

* bodies become diffmb bodies with their mass, centre of mass and full inertia
  (``body_ipos``, ``body_iquat``, ``body_inertia``); gravity is ``opt.gravity``;
* joints ``hinge`` -> revolute, ``slide`` -> prismatic, ``ball`` -> spherical, ``free`` ->
  free (on any body of the world: several free bodies make a forest); a body with no
  joint is welded to its parent; a body with several joints becomes a chain of massless
  bodies, one joint each, composed in MuJoCo's order about each joint's own anchor
  (``jnt_pos``); ``dof_damping`` and ``dof_armature`` (rotor inertia on the mass matrix's
  diagonal), ``jnt_stiffness`` (about ``qpos_spring``) and ``jnt_range`` of limited
  joints are kept;
* equality constraints ``connect`` -> a point closure, ``weld`` -> a weld closure (between
  bodies, or MuJoCo 3's ``site1``/``site2`` form: the sites' origins or frames coincide),
  ``joint`` -> a coordinate coupling ``q1 = a0 + a1 q2 + ... + a4 q2^4`` (``polycoef``;
  diffmb's coordinates are MuJoCo's ``qpos - qpos0``, so MuJoCo's reference offsets are
  built in), all exact (diffmb does not soften them: ``solref``/``solimp`` are ignored);
  ``tendon`` between fixed tendons of one joint each -> the same coordinate coupling;
  inactive ones are skipped;
* fixed tendons' springs (with MuJoCo's dead band) and dampers as generalized forces
  (:mod:`diffmb.tree.tendons`, the system's ``tau_fn``);
* fluid forces (``<option density viscosity wind>``) with MuJoCo's inertia-box model
  (:mod:`diffmb.tree.fluid`, the system's ``wrench_fn``);
* ``<flag>``s that disable gravity, springs, dampers, frictionloss, limits or equalities
  take them out here too;
* a ``<keyframe>`` gives the initial state (``key``: a name or index; default the first
  key, else ``qpos0`` at rest). A state that violates the equalities (MuJoCo pulls it in
  softly) is moved onto them, positions by minimum-norm Gauss-Newton and velocities by
  the minimum-norm correction, and a note says by how much.

Not carried over (said in :attr:`MjcfModel.notes`, by name): contacts, actuators, spatial
tendons, tendon limits, frictionloss, the ellipsoid fluid model (``fluidshape``). The body frame of a body whose joint
has an anchor off its origin is moved onto the anchor (diffmb's body frame is its joint
frame); positions are converted accordingly, names stay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..closures.assembly import assemble
from ..closures.couplings import coupling
from ..closures.nodes import jacobian, loop_closures, position_residual
from ..math import spatial as sp
from ..system import TreeSystem
from ..tree import fluid as fl, joints as jt, tendons as tn
from ..tree.model import Model, ModelBuilder

_KIND = {0: "free", 1: "spherical", 2: "prismatic", 3: "revolute"}


@dataclass
class MjcfModel:
    """What :func:`load_mjcf` returns: the model, its exact closures (or None) and the
    initial state of the chosen keyframe, in diffmb's conventions."""

    model: Model
    closures: object
    q0: jnp.ndarray
    qd0: jnp.ndarray
    notes: list = field(default_factory=list)
    #: per MuJoCo joint: (diffmb body index, kind) for state conversion
    joint_bodies: tuple = ()
    #: the fixed tendons with a spring or a damper (:class:`~diffmb.tree.tendons.FixedTendons`), or None
    tendons: object = None
    #: the medium's drag (:class:`~diffmb.tree.fluid.InertiaBoxFluid`), or None
    fluid: object = None

    def system(self, *, stabilization=None, baumgarte=(0.0, 0.0)):
        """A :class:`~diffmb.system.TreeSystem` at the keyframe state: the tendons' forces
        its ``tau_fn``, the fluid's drag its ``wrench_fn``, their numbers its ``forcing``
        (``{"tendons": ..., "fluid": ...}``)."""
        if stabilization is None:
            stabilization = "projection" if self.closures is not None else "none"
        forcing, kw = {}, {}
        if self.tendons is not None:
            forcing["tendons"] = self.tendons
            kw.update(tau_fn=tn.TendonForces(), potential_fn=tn.TendonEnergy())
        if self.fluid is not None:
            forcing["fluid"] = self.fluid
            kw.update(wrench_fn=fl.FluidWrenches())
        return TreeSystem(self.model, self.q0, self.qd0, closures=self.closures, forcing=forcing or None,
                          stabilization=stabilization, baumgarte=baumgarte, **kw)


def quat_dcm(q):
    """DCM ``R`` (child -> parent components) of a MuJoCo quaternion ``(w, x, y, z)``."""
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def velocity_map(m, qpos) -> np.ndarray:
    """``T (nv, nv)`` with diffmb's ``qd = T qvel`` at MuJoCo's ``qpos``: identity but for
    each free joint, whose ``[v_world; w_body]`` becomes ``[w_body; v_body]`` (hinge, slide
    and ball rates are the same in both)."""
    T = np.eye(m.nv)
    for j in range(m.njnt):
        if m.jnt_type[j] == 0:
            v, a = m.jnt_dofadr[j], m.jnt_qposadr[j]
            T[v:v + 6, v:v + 6] = 0.0
            T[v:v + 3, v + 3:v + 6] = np.eye(3)
            T[v + 3:v + 6, v:v + 3] = quat_dcm(qpos[a + 3:a + 7]).T
    return T


def _mujoco():
    try:
        import mujoco
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError("MJCF import compiles the file with MuJoCo: pip install 'diffmb[mujoco]'") from None
    return mujoco


def _compile(source):
    mujoco = _mujoco()

    if isinstance(source, str) and source.lstrip().startswith("<"):
        where = "MJCF string"
        try:
            return mujoco.MjModel.from_xml_string(source), where
        except ValueError as e:
            raise ValueError(f"{where}: MuJoCo's compiler: {' '.join(str(e).split())}") from None
    path = os.fspath(source)
    where = f"MJCF file {path!r}"
    if not os.path.isfile(path):
        raise ValueError(f"{where} not found (looked for {os.path.abspath(path)})")
    try:
        return mujoco.MjModel.from_xml_path(path), where
    except ValueError as e:
        raise ValueError(f"{where}: MuJoCo's compiler: {' '.join(str(e).split())}") from None


def load_mjcf(source: str | os.PathLike, *, key: str | int | None = None) -> MjcfModel:
    """Import an MJCF file (or XML string) compiled by MuJoCo; see the module docstring."""
    mujoco = _mujoco()

    m, where = _compile(source)
    name = lambda kind, i: mujoco.mj_id2name(m, kind, i) or f"{kind.name.split('_')[-1].lower()}{i}"
    OBJ = mujoco.mjtObj
    _apply_disable_flags(m)
    b = ModelBuilder(gravity=tuple(float(g) for g in m.opt.gravity))
    offset = {0: np.zeros(3)}      # MuJoCo body -> origin of its diffmb frame in MuJoCo body coords
    last = {0: "world"}            # MuJoCo body -> name of its diffmb body (the last of its chain)
    joints, notes = [], []
    for i in range(1, m.nbody):
        bname = name(OBJ.mjOBJ_BODY, i)
        parent = int(m.body_parentid[i])
        R = quat_dcm(m.body_quat[i])                      # body -> parent
        pos = m.body_pos[i] - offset[parent]               # in the parent's diffmb frame
        Ri = quat_dcm(m.body_iquat[i])
        inertia = Ri @ np.diag(m.body_inertia[i]) @ Ri.T
        adr, num = int(m.body_jntadr[i]), int(m.body_jntnum[i])
        mass = float(m.body_mass[i])
        if num == 0:
            b.add_body(bname, last[parent], "fixed", pos=pos, rot=R.T, mass=mass,
                       com=m.body_ipos[i], inertia=inertia)
            offset[i], last[i] = np.zeros(3), bname
            continue
        prev_anchor, up = None, last[parent]
        for k in range(num):
            j = adr + k
            kind = _KIND[int(m.jnt_type[j])]
            jname = name(OBJ.mjOBJ_JOINT, j)
            anchor = np.zeros(3) if kind == "free" else np.asarray(m.jnt_pos[j], float)
            final = k == num - 1
            body = bname if final else f"{bname}/{jname}"
            if kind == "free":
                if parent != 0 or num != 1:
                    raise ValueError(f"{where}: joint {jname!r}: a free joint must be the only joint of a "
                                     f"body of the world")
                jpos, jrot = np.zeros(3), np.eye(3)
            elif prev_anchor is None:
                jpos, jrot = pos + R @ anchor, R.T
            else:
                jpos, jrot = anchor - prev_anchor, np.eye(3)
            numbers, joint_notes = _joint_numbers(m, j, kind, jname)
            notes += joint_notes
            b.add_body(body, up, kind, joint_name=jname, axis=m.jnt_axis[j] if jt.NV[kind] == 1 else (0, 0, 1),
                       pos=jpos, rot=jrot,
                       mass=mass if final else 0.0, com=(m.body_ipos[i] - anchor) if final else (0, 0, 0),
                       inertia=inertia if final else None, **numbers)
            joints.append((j, body, kind))
            prev_anchor, up = anchor, body
        offset[i], last[i] = prev_anchor, bname
    try:
        model = b.build(inertia="warn", where=f"{where}: ", check_regular=True)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if m.nu:
        notes.append(f"{m.nu} actuator(s) not carried over (drive the joints with tau_fn)")
    tendons = _tendons(m, model, joints, name, where, notes)
    fluid = _fluid(m, model, offset, last, name, notes)
    contacts_off = m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT
                                            | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
    if m.ngeom and np.any(m.geom_contype | m.geom_conaffinity) and not contacts_off:
        notes.append("contacts not simulated (diffmb has no contact model)")
    closures = _equalities(m, model, offset, last, joints, name, where)
    q0, qd0 = _state(m, model, joints, key, where, name)
    if closures is not None:
        q0, qd0 = _consistent(model, closures, q0, qd0, notes)
    return MjcfModel(model=model, closures=closures, q0=q0, qd0=qd0, notes=notes, tendons=tendons, fluid=fluid,
                     joint_bodies=tuple((j, model.body_index(body), kind) for j, body, kind in joints))


_MINVAL = 1e-15  # mjMINVAL: MuJoCo's "zero" (a body lighter than it feels no fluid)


def _fluid(m, model, offset, last, name, notes):
    """MuJoCo's inertia-box fluid model (:mod:`diffmb.tree.fluid`) for every moving body of the
    file with mass, or None without a medium. A body whose geoms ask for the ellipsoid
    model (``fluidshape``) is left out, with a note naming it."""
    import mujoco

    if not (m.opt.density > 0 or m.opt.viscosity > 0):
        return None
    frames = {n: k for k, n in enumerate(model.frame_names)}
    rows = []
    for i in range(1, m.nbody):
        if m.body_mass[i] < _MINVAL:
            continue
        geoms = range(int(m.body_geomadr[i]), int(m.body_geomadr[i]) + int(m.body_geomnum[i]))
        if any(m.geom_fluid[g, 0] > 0 for g in geoms):
            notes.append(f"body {name(mujoco.mjtObj.mjOBJ_BODY, i)!r}: the ellipsoid fluid model (fluidshape) "
                         f"is not carried over; this body moves without fluid forces")
            continue
        Ri = quat_dcm(m.body_iquat[i])                      # principal -> MuJoCo body
        if last[i] in frames:                                # welded: a frame of a moving body
            k = frames[last[i]]
            body = int(model.frame_bodies[k])
            if body < 0:
                continue                                     # welded to the world: never moves
            E, r = np.asarray(model.frame_rot[k]), np.asarray(model.frame_pos[k])
            center, axes = r + E.T @ m.body_ipos[i], Ri.T @ E
        else:
            body, center, axes = model.body_index(last[i]), m.body_ipos[i] - offset[i], Ri.T
        rows.append((body, m.body_mass[i], m.body_inertia[i], center, axes))
    if not rows:
        return None
    body, mass, moments, center, axes = (np.array(c) for c in zip(*rows))
    arr = lambda x: jnp.asarray(np.asarray(x, float))
    return fl.InertiaBoxFluid(density=arr(m.opt.density), viscosity=arr(m.opt.viscosity), wind=arr(m.opt.wind),
                              box=fl.box_edges(arr(mass), arr(moments)), center=arr(center), axes=arr(axes),
                              body=tuple(int(b) for b in body))


_WRAP_JOINT = 1  # mjWRAP_JOINT: a fixed tendon's term


def _tendon_terms(m, t):
    """``[(joint, coef)]`` of fixed tendon ``t``, or None for a spatial one (sites, wrapping)."""
    adr, num = int(m.tendon_adr[t]), int(m.tendon_num[t])
    if any(int(m.wrap_type[w]) != _WRAP_JOINT for w in range(adr, adr + num)):
        return None
    return [(int(m.wrap_objid[w]), float(m.wrap_prm[w])) for w in range(adr, adr + num)]


def _tendons(m, model, joints, name, where, notes):
    """The fixed tendons with a spring or a damper (:mod:`diffmb.tree.tendons`), or None; notes
    for what is not carried over (spatial tendons, tendon limits, armature, friction)."""
    import mujoco

    keep = []
    for t in range(m.ntendon):
        tname = name(mujoco.mjtObj.mjOBJ_TENDON, t)
        terms = _tendon_terms(m, t)
        if terms is None:
            notes.append(f"tendon {tname!r}: spatial tendon not carried over (diffmb has no tendon "
                         f"path geometry; only fixed tendons are)")
            continue
        for what, value in (("limit", m.tendon_limited[t]),
                            ("armature", getattr(m, "tendon_armature", [0] * m.ntendon)[t]),
                            ("frictionloss", m.tendon_frictionloss[t])):
            if value:
                notes.append(f"tendon {tname!r}: {what} not carried over")
        if m.tendon_stiffness[t] or m.tendon_damping[t]:
            coef = np.zeros(model.nv)
            for j, c in terms:
                coef[_coordinate(m, model, joints, j, f"tendon {tname!r}", where, name)] += c
            keep.append((tname, coef, float(m.tendon_length0[t]), float(m.tendon_stiffness[t]),
                         float(m.tendon_damping[t]), *map(float, m.tendon_lengthspring[t])))
    if not keep:
        return None
    cols = list(zip(*keep))
    arr = lambda x: jnp.asarray(np.array(x, float))
    return tn.FixedTendons(coef=arr(cols[1]), length0=arr(cols[2]), stiffness=arr(cols[3]),
                           damping=arr(cols[4]), lower=arr(cols[5]), upper=arr(cols[6]),
                           names=tuple(cols[0]))


def _free_dofs(x):
    """A free joint's per-dof MuJoCo numbers ``(v_world, w_body)`` in diffmb's order
    ``(w_body, v_body)``, or None where the linear part is not isotropic (then it is not
    the same on body-axis velocities)."""
    x = np.asarray(x, float)
    return None if np.ptp(x[:3]) > 0 else np.concatenate([x[3:], x[:3]])


def _joint_numbers(m, j, kind, jname):
    """diffmb's per-dof numbers of MuJoCo joint ``j`` (``ModelBuilder.add_body`` keywords)
    and the notes for what is not carried over. Damping (``dof_damping``) and armature
    (``dof_armature``, added to the mass matrix's diagonal as MuJoCo does) act on the joint
    velocities, which are diffmb's too (a ball's and a free joint's angular rate in body
    axes; a free joint's linear velocity only where the number is the same on all three
    axes); stiffness about ``qpos_spring`` and the range only on hinge and slide joints."""
    dof, a, nd = int(m.jnt_dofadr[j]), int(m.jnt_qposadr[j]), jt.NV[kind]
    notes, out = [], {}
    for number, values in (("damping", m.dof_damping[dof:dof + nd]), ("armature", m.dof_armature[dof:dof + nd])):
        x = _free_dofs(values) if kind == "free" else np.asarray(values, float)
        if x is None:
            notes.append(f"joint {jname!r}: free joint {number} differs between the linear axes; not carried over")
        else:
            out[number] = x
    if nd == 1:
        limited = bool(m.jnt_limited[j])
        out.update(stiffness=m.jnt_stiffness[j], rest=m.qpos_spring[a] - m.qpos0[a],
                   lower=m.jnt_range[j][0] - m.qpos0[a] if limited else -np.inf,
                   upper=m.jnt_range[j][1] - m.qpos0[a] if limited else np.inf)
    elif m.jnt_stiffness[j]:
        notes.append(f"joint {jname!r}: {kind} stiffness not carried over")
    if np.any(m.dof_frictionloss[dof:dof + nd]):
        notes.append(f"joint {jname!r}: frictionloss not carried over (diffmb has no dry friction)")
    return out, notes


def _apply_disable_flags(m):
    """Zero in the compiled model what its ``<flag ... ="disable"/>`` switches off, so the
    numbers read below are the ones MuJoCo simulates: gravity, springs, dampers (fluid
    forces with both, as MuJoCo skips all passive forces then), frictionloss, limits,
    equalities (also with all constraints off)."""
    import mujoco

    off = lambda bit: bool(m.opt.disableflags & int(bit))
    D = mujoco.mjtDisableBit
    if off(D.mjDSBL_GRAVITY):
        m.opt.gravity[:] = 0.0
    if off(D.mjDSBL_SPRING):
        m.jnt_stiffness[:] = 0.0
        m.tendon_stiffness[:] = 0.0
    if off(D.mjDSBL_DAMPER):
        m.dof_damping[:] = 0.0
        m.tendon_damping[:] = 0.0
    if off(D.mjDSBL_SPRING) and off(D.mjDSBL_DAMPER):
        m.opt.density, m.opt.viscosity = 0.0, 0.0
    if off(D.mjDSBL_FRICTIONLOSS) or off(D.mjDSBL_CONSTRAINT):
        m.dof_frictionloss[:] = 0.0
        m.tendon_frictionloss[:] = 0.0
    if off(D.mjDSBL_LIMIT) or off(D.mjDSBL_CONSTRAINT):
        m.jnt_limited[:] = 0
        m.tendon_limited[:] = 0
    if off(D.mjDSBL_EQUALITY) or off(D.mjDSBL_CONSTRAINT):
        m.eq_active0[:] = 0


def _coordinate(m, model, joints, j, ename, where, name):
    """diffmb coordinate of MuJoCo joint ``j`` (hinge or slide) for a joint equality."""
    import mujoco

    for jj, body, kind in joints:
        if jj == j:
            if kind not in ("revolute", "prismatic"):
                raise ValueError(f"{where}: equality {ename!r}: joint {name(mujoco.mjtObj.mjOBJ_JOINT, j)!r} "
                                 f"is a {kind} joint; joint equalities couple hinge or slide joints")
            return model.body_slices[model.body_index(body)][0]
    raise ValueError(f"{where}: equality {ename!r}: joint {j} not found")  # pragma: no cover


def _equalities(m, model, offset, last, joints, name, where):
    import mujoco

    pairs = []
    for e in range(m.neq):
        ename = name(mujoco.mjtObj.mjOBJ_EQUALITY, e)
        etype = int(m.eq_type[e])
        if not m.eq_active0[e]:
            continue
        if etype == int(mujoco.mjtEq.mjEQ_JOINT):
            y = _coordinate(m, model, joints, int(m.eq_obj1id[e]), ename, where, name)
            j2 = int(m.eq_obj2id[e])
            x = None if j2 < 0 else _coordinate(m, model, joints, j2, ename, where, name)
            pairs.append(coupling(ename, y, x, np.asarray(m.eq_data[e][:5], float)))
            continue
        if etype == int(mujoco.mjtEq.mjEQ_TENDON):
            pairs.append(_tendon_coupling(m, model, joints, e, ename, where, name))
            continue
        if etype not in (int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD)):
            kind = mujoco.mjtEq(etype).name.replace("mjEQ_", "").lower()
            raise ValueError(f"{where}: equality {ename!r}: {kind} equalities are not supported (diffmb's "
                             f"closures join bodies or joints: use connect, weld or joint, or remove it)")
        if int(m.eq_objtype[e]) == int(mujoco.mjtObj.mjOBJ_SITE):
            pairs.append(_site_closure(m, model, offset, last, e, ename, etype == int(mujoco.mjtEq.mjEQ_WELD)))
            continue
        b1, b2 = int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
        ia = -1 if b1 == 0 else model.body_index(last[b1])
        ib = -1 if b2 == 0 else model.body_index(last[b2])
        d = np.asarray(m.eq_data[e], float)
        if etype == int(mujoco.mjtEq.mjEQ_CONNECT):
            pairs.append(dict(name=ename, body_a=ia, body_b=ib, kind="point", axis=0, rot_a=np.eye(3),
                              pos_a=d[0:3] - offset[b1], rot_b=np.eye(3), pos_b=d[3:6] - offset[b2]))
        else:  # weld: body2's pose in body1's frame is relpose (position d[3:6], quaternion d[6:10])
            Rrel = quat_dcm(d[6:10])
            pairs.append(dict(name=ename, body_a=ia, body_b=ib, kind="weld", axis=0, rot_a=Rrel.T,
                              pos_a=d[3:6] - offset[b1], rot_b=np.eye(3), pos_b=-offset[b2]))
    return loop_closures(model, pairs) if pairs else None


def _tendon_coupling(m, model, joints, e, ename, where, name):
    """A tendon equality ``L1 - L1_0 = p(L2 - L2_0)`` as a coordinate coupling, where one
    exists: between fixed tendons of one joint each, ``L_i - L_i0 = c_i q_i``, it is
    ``q_1 = sum_k a_k c_2^k q_2^k / c_1``; a lone tendon over two joints held at
    ``c_1 q_1 + c_2 q_2 = a_0`` (a gripper's coupled fingers) is ``q_1 = (a_0 - c_2 q_2) / c_1``.
    Other tendons are refused by name (a coupling holds one coordinate to a polynomial in
    one other)."""
    import mujoco

    t1, t2 = int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
    a = np.asarray(m.eq_data[e][:5], float)
    terms = []
    for t in (t1, t2) if t2 >= 0 else (t1,):
        got = _tendon_terms(m, t)
        tname = name(mujoco.mjtObj.mjOBJ_TENDON, t)
        allowed = 2 if t2 < 0 else 1
        if got is None or len(got) > allowed:
            raise ValueError(f"{where}: equality {ename!r}: tendon {tname!r} "
                             + ("is a spatial tendon" if got is None else f"spans {len(got)} joints")
                             + "; tendon equalities are carried over between fixed tendons of one joint "
                               "each, or for one tendon over at most two joints")
        terms.append([(_coordinate(m, model, joints, j, ename, where, name), c) for j, c in got])
    if t2 >= 0:
        (y, c1), = terms[0]
        (x, c2), = terms[1]
        return coupling(ename, y, x, a * c2 ** np.arange(5) / c1)
    if len(terms[0]) == 1:
        (y, c1), = terms[0]
        return coupling(ename, y, None, [a[0] / c1])
    (y, c1), (x, c2) = terms[0]
    return coupling(ename, y, x, [a[0] / c1, -c2 / c1])


def _site_closure(m, model, offset, last, e, ename, weld):
    """A site-based ``connect`` (the two sites' origins coincide) or ``weld`` (their
    frames coincide; MuJoCo ignores ``relpose`` and ``anchor`` then), MuJoCo 3's form."""
    ends = []
    for site in (int(m.eq_obj1id[e]), int(m.eq_obj2id[e])):
        b = int(m.site_bodyid[site])
        ends.append((-1 if b == 0 else model.body_index(last[b]), m.site_pos[site] - offset[b],
                     quat_dcm(m.site_quat[site]).T if weld else np.eye(3)))
    (ia, pa, Ra), (ib, pb, Rb) = ends
    return dict(name=ename, body_a=ia, body_b=ib, kind="weld" if weld else "point", axis=0,
                rot_a=Ra, pos_a=pa, rot_b=Rb, pos_b=pb)


@eqx.filter_jit
def _residual_and_jacobian(model, q, closures):
    """The closures' kept residual rows and Jacobian at ``q``, in one compiled call (run
    eagerly, the two kinematics passes cost seconds at load time)."""
    rows = np.asarray(closures.rows)
    return position_residual(model, q, closures).reshape(-1)[rows], jacobian(model, q, closures)


def _consistent(model, closures, q, qd, notes, tol=1e-9):
    """``(q, qd)`` moved onto the closures where they violate them, with a note."""
    phi, G = (np.asarray(a) for a in _residual_and_jacobian(model, q, closures))
    if np.abs(phi).max() > tol:
        bad = sorted({closures.labels[i].split(":")[0] for i in np.flatnonzero(np.abs(phi) > tol)})
        q, _ = assemble(model, closures, np.asarray(q))
        notes.append(f"the initial state violated equality {', '.join(map(repr, bad))} by "
                     f"{np.abs(phi).max():.3g}; moved onto it (minimum-norm change)")
        G = np.asarray(_residual_and_jacobian(model, q, closures)[1])
    w = G @ np.asarray(qd)
    if np.abs(w).max() > tol * max(1.0, np.abs(np.asarray(qd)).max()):
        qd = jnp.asarray(np.asarray(qd) - np.linalg.lstsq(G, w, rcond=1e-10)[0])
        notes.append(f"the initial velocities violated the equalities by {np.abs(w).max():.3g}; "
                     f"minimum-norm correction applied")
    return q, qd


def _state(m, model, joints, key, where, name):
    import mujoco

    if m.nkey == 0 and key is not None:
        raise ValueError(f"{where}: key {key!r} asked for, but the file has no <keyframe>")
    if m.nkey:
        if key is None:
            k = 0
        elif isinstance(key, int) or str(key).isdigit():
            k = int(key)
        else:
            k = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, str(key))
        if not 0 <= k < m.nkey:
            names = [name(mujoco.mjtObj.mjOBJ_KEY, i) for i in range(m.nkey)]
            raise ValueError(f"{where}: no key {key!r}; keys: {', '.join(names)}")
        qpos, qvel = np.asarray(m.key_qpos[k], float), np.asarray(m.key_qvel[k], float)
    else:
        qpos, qvel = np.asarray(m.qpos0, float), np.zeros(m.nv)
    q, qd = np.zeros(model.nq), np.zeros(model.nv)
    for j, body, kind in joints:
        s, e = model.body_slices[model.body_index(body)]
        a, v = int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j])
        if kind == "free":
            R = quat_dcm(qpos[a + 3:a + 7])               # body -> world
            q[s:s + 3] = np.asarray(sp.dcm_to_mrp(jnp.asarray(R.T)))
            q[s + 3:e] = qpos[a:a + 3]
            qd[s:s + 3] = qvel[v + 3:v + 6]                 # omega, body axes
            qd[s + 3:e] = R.T @ qvel[v:v + 3]               # v: world -> body axes
        elif kind == "spherical":
            q0 = quat_dcm(m.qpos0[a:a + 4])
            R = q0.T @ quat_dcm(qpos[a:a + 4])             # relative to the reference
            q[s:e] = np.asarray(sp.dcm_to_mrp(jnp.asarray(R.T)))
            qd[s:e] = qvel[v:v + 3]
        else:
            q[s] = qpos[a] - m.qpos0[a]
            qd[s] = qvel[v]
    return jnp.asarray(q), jnp.asarray(qd)
