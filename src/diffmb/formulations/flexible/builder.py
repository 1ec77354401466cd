"""Building a flexible tree: validation of the bodies, constant leaf operators, the
initial state (customary rates converted to efficient speeds)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ... import spatial as sp
from .body import JOINT_DOF, METHODS, SPEEDS
from .modal import ModalData
from .system import FlexibleSystem


def _unit(v, what):
    v = np.asarray(v, float)
    if v.shape != (3,) or not np.all(np.isfinite(v)) or np.linalg.norm(v) < 1e-12:
        raise ValueError(f"{what}: expected a non-zero 3-vector, got {v!r}")
    return v / np.linalg.norm(v)


def build(bodies, *, speeds="efficient", method="recursive", gravity=(0.0, 0.0, 0.0),
                   geometric_stiffening=False, torque_fn=None, forcing=None, prescribed_params=None,
                   outputs=(), freeze_modes=False) -> FlexibleSystem:
    """Validate ``bodies`` (list of :class:`FlexBody`, parents first) and build the System.

    ``outputs``: ``(label, body name, node)`` triples: ``diagnostics[label]`` is the
    elastic displacement ``Phi_node q`` of that node (body axes). ``freeze_modes``: drop
    every elastic mode (the rigid tree with the same mass properties).
    ``torque_fn(t, forcing) -> (n_bodies, 3)``: external torques on the reference
    frames, body axes.
    """
    if speeds not in SPEEDS:
        raise ValueError(f"speeds: expected one of {SPEEDS}, got {speeds!r}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if not bodies:
        raise ValueError("flexible system: no bodies")
    names = []
    parents, kinds, n_modes, free_dofs, pres, const_leaf = [], [], [], [], [], []
    pbodies = []
    x0c, x0u = [], []
    prescribed_params = dict(prescribed_params or {})
    modals = []
    for b in bodies:
        what = f"body {b.name!r}"
        if not isinstance(b.modal, ModalData):
            raise ValueError(f"{what}: modal must be a ModalData")
        if b.name in names or b.name == "world":
            raise ValueError(f"{what}: duplicate body name")
        if b.joint not in JOINT_DOF:
            raise ValueError(f"{what}: unknown joint {b.joint!r}; expected one of {list(JOINT_DOF)}")
        if b.parent == "world":
            p = -1
        elif b.parent in names:
            p = names.index(b.parent)
        else:
            raise ValueError(f"{what}: parent {b.parent!r} is not a body listed before it")
        if b.joint == "free" and p >= 0:
            raise ValueError(f"{what}: a free joint must connect to 'world'")
        modal = b.modal.select([]) if freeze_modes else b.modal
        modals.append(modal)
        n = modal.n_modes
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
        if pd and b.name not in prescribed_params:
            prescribed_params[b.name] = {}
        fd = tuple(d for d in range(nd) if d not in pd)
        axis = _unit(b.axis, what + " axis")
        axis2 = _unit(b.axis2, what + " axis2")
        if b.joint == "universal" and abs(axis @ axis2) > 1e-9:
            raise ValueError(f"{what}: Hooke joint axes must be perpendicular (eq. 4)")
        R = np.eye(3) if b.rot is None else np.asarray(b.rot, float)
        if R.shape != (3, 3) or not np.allclose(R @ R.T, np.eye(3), atol=1e-8) or np.linalg.det(R) < 0:
            raise ValueError(f"{what}: rot is not a proper rotation (DCM)")
        if p < 0:
            pos = np.asarray(b.pos, float)
            if pos.shape != (3,) or not np.all(np.isfinite(pos)):
                raise ValueError(f"{what}: pos must be a finite 3-vector")
            phi_h = np.zeros((3, 0))
            psi_h = np.zeros((3, 0))
        else:
            if b.hinge is None:
                raise ValueError(f"{what}: give the hinge node of parent {b.parent!r}")
            pm = modals[p]
            try:
                kidx = bodies[p].modal.node_index(b.hinge)
            except ValueError as e:
                raise ValueError(f"{what}: hinge on parent {b.parent!r}: {e}") from None
            pos = pm.nodes[kidx]
            phi_h, psi_h = pm.phi[kidx], pm.psi[kidx]
        I = modal.integrals(geometric_stiffening)
        P = {"I": I, "axis": jnp.asarray(axis), "axis2": jnp.asarray(axis2), "rot": jnp.asarray(R),
             "pos": jnp.asarray(pos), "phi_h": jnp.asarray(phi_h), "psi_h": jnp.asarray(psi_h)}
        # initial state (customary rates given; converted below)
        q0 = np.zeros(len(fd)) if b.q0 is None else np.asarray(b.q0, float).reshape(-1)
        u0 = np.zeros(len(fd)) if b.u0 is None else np.asarray(b.u0, float).reshape(-1)
        if q0.shape != (len(fd),) or u0.shape != (len(fd),):
            raise ValueError(f"{what}: q0/u0 must have {len(fd)} entries (free joint DOFs)")
        e0 = np.zeros(n) if (b.eta0 is None or freeze_modes) else np.asarray(b.eta0, float).reshape(-1)
        ed0 = np.zeros(n) if (b.eta_dot0 is None or freeze_modes) else np.asarray(b.eta_dot0, float).reshape(-1)
        if e0.shape != (n,) or ed0.shape != (n,):
            raise ValueError(f"{what}: eta0/eta_dot0 must have {n} entries (modes)")
        x0c.append(np.concatenate([q0, e0]))
        x0u.append(np.concatenate([u0, ed0]))
        names.append(b.name)
        parents.append(p)
        kinds.append(b.joint)
        n_modes.append(n)
        free_dofs.append(fd)
        pres.append(tuple(sorted(pd.items(), key=lambda kv: kv[0])))
        pbodies.append(P)
    # constant-S leaves (efficient speeds): precompute D^-1 = (S^T M0 S)^-1
    for i in range(len(bodies)):
        leaf = i not in parents
        ok = speeds == "efficient" and leaf and kinds[i] in ("free", "spherical", "revolute") and not pres[i]
        const_leaf.append(bool(ok))
        if ok:
            n = n_modes[i]
            nj = JOINT_DOF[kinds[i]]
            S = np.zeros((6 + n, nj + n))
            if kinds[i] == "free":
                S[:6, :6] = np.eye(6)
            elif kinds[i] == "spherical":
                S[:3, :3] = np.eye(3)
            else:
                S[:3, 0] = np.asarray(pbodies[i]["axis"])
            S[6:, nj:] = np.eye(n)
            M0 = np.asarray(pbodies[i]["I"]["M0"])
            U = M0 @ S
            Di = np.linalg.inv(S.T @ U)
            pbodies[i].update(S=jnp.asarray(S), U=jnp.asarray(U), Dinv=jnp.asarray(Di),
                              Ia=jnp.asarray(M0 - U @ Di @ U.T))
    out_static, out_arr = [], []
    for label, bname, node in outputs:
        if bname not in names:
            raise ValueError(f"output {label!r}: unknown body {bname!r}")
        bi = names.index(bname)
        k = bodies[bi].modal.node_index(node)
        out_static.append((str(label), bi))
        out_arr.append(jnp.asarray(modals[bi].phi[k]))
    g = np.asarray(gravity, float)
    if g.shape != (3,):
        raise ValueError(f"gravity: expected a 3-vector, got shape {g.shape}")
    def make(p0, sp_):
        return FlexibleSystem(
            params0=p0, parents=tuple(parents), kinds=tuple(kinds), names=tuple(names),
            n_modes=tuple(n_modes), free_dofs=tuple(free_dofs), pres=tuple(pres),
            const_leaf=tuple(const_leaf) if sp_ == "efficient" else tuple(False for _ in const_leaf),
            outputs=tuple(out_static), speeds=sp_, method=method,
            geometric_stiffening=bool(geometric_stiffening), torque_fn=torque_fn)

    sysobj = make({}, speeds)
    params = {"bodies": pbodies, "gravity": jnp.asarray(g), "forcing": forcing,
              "prescribed": {k: v for k, v in prescribed_params.items()}, "outputs": out_arr}
    # initial speeds: given as customary rates -> convert for efficient speeds
    xc0 = jnp.asarray(np.concatenate(x0c))
    rates0 = jnp.asarray(np.concatenate(x0u))
    u0 = customary_to_speeds(sysobj, xc0, rates0, params, make({}, "customary")) \
        if speeds == "efficient" else rates0
    parts = [xc0, u0] + ([jnp.zeros(1)] if sysobj.has_clock else [])
    params["x0"] = jnp.concatenate(parts)
    return make(params, speeds)


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
