"""Building a flexible tree: validation of the bodies, constant leaf operators, the
initial state (customary rates converted to efficient speeds)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ...math import spatial as sp
from ...system import clock_entry
from ...tree.api import choose_algorithm
from ...tree.checks import check_tree_body, is_rotation
from .body import JOINT_DOF, SPEEDS
from .modal import ModalData
from .system import FlexibleSystem


def _unit(v, what):
    v = np.asarray(v, float)
    if v.shape != (3,) or not np.all(np.isfinite(v)) or np.linalg.norm(v) < 1e-12:
        raise ValueError(f"{what}: expected a non-zero 3-vector, got {v!r}")
    return v / np.linalg.norm(v)


@dataclasses.dataclass
class _Tree:
    """What :func:`build` gathers body by body (parents first)."""

    names: list = dataclasses.field(default_factory=list)
    parents: list = dataclasses.field(default_factory=list)
    kinds: list = dataclasses.field(default_factory=list)
    n_modes: list = dataclasses.field(default_factory=list)
    free_dofs: list = dataclasses.field(default_factory=list)
    pres: list = dataclasses.field(default_factory=list)
    pbodies: list = dataclasses.field(default_factory=list)
    modals: list = dataclasses.field(default_factory=list)
    x0c: list = dataclasses.field(default_factory=list)
    x0u: list = dataclasses.field(default_factory=list)


def build(bodies, *, speeds="efficient", algorithm="recursive", gravity=(0.0, 0.0, 0.0),
          geometric_stiffening=False, torque_fn=None, forcing=None, prescribed_params=None,
          outputs=(), freeze_modes=False, method=None) -> FlexibleSystem:
    """Validate ``bodies`` (list of :class:`FlexBody`, parents first) and build the System.

    ``outputs``: ``(label, body name, node)`` triples: ``diagnostics[label]`` is the
    elastic displacement ``Phi_node q`` of that node (body axes). ``freeze_modes``: drop
    every elastic mode (the rigid tree with the same mass properties).
    ``torque_fn(t, forcing) -> (n_bodies, 3)``: external torques on the reference
    frames, body axes. ``algorithm``: ``recursive`` (Banerjee's order-n recursion) or
    ``dense`` (:data:`diffmb.tree.api.ALGORITHMS`; ``method=`` is the 0.1 spelling).
    """
    algorithm = choose_algorithm(algorithm, method, "method")
    _check_options(speeds, bodies)
    prescribed_params = dict(prescribed_params or {})
    tree = _Tree()
    for b in bodies:
        _add_body(tree, b, bodies, prescribed_params, freeze_modes, geometric_stiffening)
    const_leaf = _constant_leaves(tree, speeds)
    out_static, out_arr = _outputs(tree, bodies, outputs)
    g = _gravity(gravity)

    def make(p0, sp_):
        return FlexibleSystem(
            params0=p0, parents=tuple(tree.parents), kinds=tuple(tree.kinds), names=tuple(tree.names),
            n_modes=tuple(tree.n_modes), free_dofs=tuple(tree.free_dofs), pres=tuple(tree.pres),
            const_leaf=tuple(const_leaf) if sp_ == "efficient" else tuple(False for _ in const_leaf),
            outputs=tuple(out_static), speeds=sp_, algorithm=algorithm,
            geometric_stiffening=bool(geometric_stiffening), torque_fn=torque_fn)

    params = {"bodies": tree.pbodies, "gravity": jnp.asarray(g), "forcing": forcing,
              "prescribed": {k: v for k, v in prescribed_params.items()}, "outputs": out_arr}
    params["x0"] = _initial_state(tree, make, params, speeds)
    return make(params, speeds)


def _check_options(speeds, bodies):
    """The speed choice is known, and there is a body."""
    if speeds not in SPEEDS:
        raise ValueError(f"speeds: expected one of {SPEEDS}, got {speeds!r}")
    if not bodies:
        raise ValueError("flexible system: no bodies")


def _add_body(tree, b, bodies, prescribed_params, freeze_modes, geometric_stiffening):
    """Validate body ``b`` against the bodies before it and append its data to ``tree``:
    its leaf parameters (modal integrals, joint axes and frame, hinge node) and its
    initial coordinates and rates."""
    what = f"body {b.name!r}"
    if not isinstance(b.modal, ModalData):
        raise ValueError(f"{what}: modal must be a ModalData")
    p = check_tree_body(what, b.name, b.parent, b.joint, tree.names, JOINT_DOF, joint_word="joint",
                        listed="listed")
    modal = b.modal.select([]) if freeze_modes else b.modal
    tree.modals.append(modal)
    pd = _prescribed(b, what)
    if pd and b.name not in prescribed_params:
        prescribed_params[b.name] = {}
    fd = tuple(d for d in range(JOINT_DOF[b.joint]) if d not in pd)
    axis, axis2, R = _joint_frame(b, what)
    pos, phi_h, psi_h = _hinge(b, what, p, bodies, tree.modals)
    P = {"I": modal.integrals(geometric_stiffening), "axis": jnp.asarray(axis), "axis2": jnp.asarray(axis2),
         "rot": jnp.asarray(R), "pos": jnp.asarray(pos), "phi_h": jnp.asarray(phi_h), "psi_h": jnp.asarray(psi_h)}
    xc, xu = _initial_values(b, what, len(fd), modal.n_modes, freeze_modes)
    tree.x0c.append(xc)
    tree.x0u.append(xu)
    tree.names.append(b.name)
    tree.parents.append(p)
    tree.kinds.append(b.joint)
    tree.n_modes.append(modal.n_modes)
    tree.free_dofs.append(fd)
    tree.pres.append(tuple(sorted(pd.items(), key=lambda kv: kv[0])))
    tree.pbodies.append(P)


def _prescribed(b, what) -> dict:
    """``{dof: fn}`` of ``b``'s prescribed joint motion, checked: revolute and Hooke joints
    only, dofs in range, callables."""
    nd = JOINT_DOF[b.joint]
    pd = dict(b.prescribed or {})
    for d, fn in pd.items():
        if b.joint not in ("revolute", "universal"):
            raise ValueError(f"{what}: prescribed motion is supported for revolute and Hooke joints, "
                             f"not {b.joint!r}")
        if not (isinstance(d, int) and 0 <= d < nd):
            raise ValueError(f"{what}: prescribed dof {d!r} out of range for a {b.joint} joint")
        if not callable(fn):
            raise ValueError(f"{what}: prescribed dof {d}: expected a callable fn(t, p)")
    return pd


def _joint_frame(b, what):
    """``(axis, axis2, R)``: the unit joint axes (perpendicular for a Hooke joint, eq. 4)
    and the joint frame's DCM ``[J hinge]``."""
    axis = _unit(b.axis, what + " axis")
    axis2 = _unit(b.axis2, what + " axis2")
    if b.joint == "universal" and abs(axis @ axis2) > 1e-9:
        raise ValueError(f"{what}: Hooke joint axes must be perpendicular (eq. 4)")
    R = np.eye(3) if b.rot is None else np.asarray(b.rot, float)
    if R.shape != (3, 3) or not is_rotation(R):
        raise ValueError(f"{what}: rot is not a proper rotation (DCM)")
    return axis, axis2, R


def _hinge(b, what, p, bodies, modals):
    """``(pos, phi_h, psi_h)``: where body ``b`` is joined to its parent ``p`` — the
    parent's hinge node and its mode shapes there (a root: its world position, no modes)."""
    if p < 0:
        pos = np.asarray(b.pos, float)
        if pos.shape != (3,) or not np.all(np.isfinite(pos)):
            raise ValueError(f"{what}: pos must be a finite 3-vector")
        return pos, np.zeros((3, 0)), np.zeros((3, 0))
    if b.hinge is None:
        raise ValueError(f"{what}: give the hinge node of parent {b.parent!r}")
    pm = modals[p]
    try:
        kidx = bodies[p].modal.node_index(b.hinge)
    except ValueError as e:
        raise ValueError(f"{what}: hinge on parent {b.parent!r}: {e}") from None
    return pm.nodes[kidx], pm.phi[kidx], pm.psi[kidx]


def _initial_values(b, what, n_free, n, freeze_modes):
    """Body ``b``'s initial coordinates ``[q0; eta0]`` and customary rates
    ``[u0; eta_dot0]`` (``n_free`` free joint DOFs, ``n`` modes; zeros where not given)."""
    q0 = np.zeros(n_free) if b.q0 is None else np.asarray(b.q0, float).reshape(-1)
    u0 = np.zeros(n_free) if b.u0 is None else np.asarray(b.u0, float).reshape(-1)
    if q0.shape != (n_free,) or u0.shape != (n_free,):
        raise ValueError(f"{what}: q0/u0 must have {n_free} entries (free joint DOFs)")
    e0 = np.zeros(n) if (b.eta0 is None or freeze_modes) else np.asarray(b.eta0, float).reshape(-1)
    ed0 = np.zeros(n) if (b.eta_dot0 is None or freeze_modes) else np.asarray(b.eta_dot0, float).reshape(-1)
    if e0.shape != (n,) or ed0.shape != (n,):
        raise ValueError(f"{what}: eta0/eta_dot0 must have {n} entries (modes)")
    return np.concatenate([q0, e0]), np.concatenate([u0, ed0])


def _constant_leaves(tree, speeds) -> list:
    """Which bodies are constant-``S`` leaves (efficient speeds; free, spherical or
    revolute joint, no prescribed motion); for those ``D^-1 = (S^T M0 S)^-1`` and the
    other articulated-body constants are precomputed into their leaf parameters."""
    const_leaf = []
    for i in range(len(tree.names)):
        leaf = i not in tree.parents
        ok = speeds == "efficient" and leaf and tree.kinds[i] in ("free", "spherical", "revolute") \
            and not tree.pres[i]
        const_leaf.append(bool(ok))
        if ok:
            tree.pbodies[i].update(_leaf_constants(tree.kinds[i], tree.n_modes[i], tree.pbodies[i]))
    return const_leaf


def _leaf_constants(kind, n, P) -> dict:
    """``S``, ``U = M0 S``, ``Dinv = (S^T U)^-1`` and ``Ia = M0 - U Dinv U^T`` of a
    constant-``S`` leaf with ``n`` modes and leaf parameters ``P``."""
    nj = JOINT_DOF[kind]
    S = np.zeros((6 + n, nj + n))
    if kind == "free":
        S[:6, :6] = np.eye(6)
    elif kind == "spherical":
        S[:3, :3] = np.eye(3)
    else:
        S[:3, 0] = np.asarray(P["axis"])
    S[6:, nj:] = np.eye(n)
    M0 = np.asarray(P["I"]["M0"])
    U = M0 @ S
    Di = np.linalg.inv(S.T @ U)
    return dict(S=jnp.asarray(S), U=jnp.asarray(U), Dinv=jnp.asarray(Di), Ia=jnp.asarray(M0 - U @ Di @ U.T))


def _outputs(tree, bodies, outputs):
    """``(label, body index)`` and the mode shapes ``Phi_node`` of the requested outputs."""
    out_static, out_arr = [], []
    for label, bname, node in outputs:
        if bname not in tree.names:
            raise ValueError(f"output {label!r}: unknown body {bname!r}")
        bi = tree.names.index(bname)
        k = bodies[bi].modal.node_index(node)
        out_static.append((str(label), bi))
        out_arr.append(jnp.asarray(tree.modals[bi].phi[k]))
    return out_static, out_arr


def _gravity(gravity):
    """Gravity as a 3-vector (world axes)."""
    g = np.asarray(gravity, float)
    if g.shape != (3,):
        raise ValueError(f"gravity: expected a 3-vector, got shape {g.shape}")
    return g


def _initial_state(tree, make, params, speeds):
    """``x0 = [coordinates; speeds (; clock)]``: the rates are given as customary ones and
    converted for efficient speeds (:func:`customary_to_speeds`); ``make(params0, speeds)``
    makes the System."""
    system = make({}, speeds)
    xc0 = jnp.asarray(np.concatenate(tree.x0c))
    rates0 = jnp.asarray(np.concatenate(tree.x0u))
    u0 = customary_to_speeds(system, xc0, rates0, params, make({}, "customary")) \
        if speeds == "efficient" else rates0
    return jnp.concatenate([xc0, u0] + clock_entry(system.has_clock, 0.0, xc0.dtype))


def customary_to_speeds(system: FlexibleSystem, xc, rates, params, customary: FlexibleSystem, t=0.0):
    """Efficient speeds ``u`` whose coordinate rates are ``rates`` (customary speeds)."""
    t = jnp.asarray(t, xc.dtype)
    ws = customary.kinematics(xc, t, rates, params)[0]
    cb = system.blocks(xc)
    u = []
    for i in range(system.n_bodies):
        w = ws[i]
        k = system.kinds[i]
        if k == "free":
            uj = w[:6]
        elif k == "spherical":
            uj = w[:3]
        else:  # u_k = w^j . h_k, hinge axes in child axes
            th_p, _ = system.prescribed_values(i, t, params)
            ang = system.joint_angles(i, cb[i][0], th_p)
            P = params["bodies"][i]
            if k == "revolute":
                Hc = [P["axis"]]
            else:
                Hc = [sp.axis_angle_dcm(P["axis2"], ang[1]) @ P["axis"], P["axis2"]]
            fd = system.free_dofs[i]
            uj = jnp.stack([jnp.dot(Hc[d], w[:3]) for d in fd]) if fd else jnp.zeros(0, xc.dtype)
        u.append(jnp.concatenate([uj, w[6:]]))
    return jnp.concatenate(u)
