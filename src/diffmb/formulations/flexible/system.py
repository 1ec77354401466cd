"""The flexible tree as a :class:`~diffmb.system.System`: layout, kinematics, energy.

Eq. (1) velocity field and eq. (4) hinge kinematics per body (:meth:`FlexibleSystem.body_step`);
the equations of motion are assembled in :meth:`FlexibleSystem.solve` from
:mod:`.forces` and solved by :mod:`.solve` (see the package docstring).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from ...math import spatial as sp
from ...system import CLOCK_NAMES, System, clock_entry
from ...tree import joints as jt
from .body import JOINT_DOF
from .forces import active_forces, local_maps, velocity_products
from .solve import articulated, dense
from .speeds import binv, deformation_moment, gyro, qdot_modal, s_from_qdot


class FlexibleSystem(System):
    """A tree of flexible bodies (see module docstring). Build with
    :func:`~diffmb.formulations.flexible.builder.build`."""

    params0: dict
    parents: tuple = eqx.field(static=True)
    kinds: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    n_modes: tuple = eqx.field(static=True)
    free_dofs: tuple = eqx.field(static=True)  # per body: tuple of free joint dof indices
    pres: tuple = eqx.field(static=True)  # per body: tuple of (dof, fn)
    const_leaf: tuple = eqx.field(static=True)  # per body: Dinv precomputed
    outputs: tuple = eqx.field(static=True)  # (label, body) of node deflection outputs
    speeds: str = eqx.field(static=True, default="efficient")
    algorithm: str = eqx.field(static=True, default="recursive")
    geometric_stiffening: bool = eqx.field(static=True, default=False)
    torque_fn: Callable | None = eqx.field(static=True, default=None)

    # ---------------------------------------------------------------- layout
    @property
    def n_bodies(self):
        return len(self.names)

    @property
    def has_clock(self):
        return any(self.pres)

    def body_size(self, i):
        return len(self.free_dofs[i]) + self.n_modes[i]

    @property
    def n_coords(self):
        return sum(self.body_size(i) for i in range(self.n_bodies))

    def offsets(self):
        off, o = [], 0
        for i in range(self.n_bodies):
            off.append(o)
            o += self.body_size(i)
        return off

    def children(self, i):
        return tuple(c for c, p in enumerate(self.parents) if p == i)

    @property
    def state_names(self):
        return self.coordinate_names + self._speed_names + (CLOCK_NAMES if self.has_clock else ())

    def _dof_names(self, i):
        k = self.kinds[i]
        nm = self.names[i]
        if k == "free":
            return tuple(f"{nm}_{s}" for s in ("sigma1", "sigma2", "sigma3", "x", "y", "z"))
        if k == "spherical":
            return tuple(f"{nm}_sigma{d + 1}" for d in self.free_dofs[i])
        if k == "universal":
            return tuple(f"{nm}_theta{d + 1}" for d in self.free_dofs[i])
        return tuple(f"{nm}_theta" for d in self.free_dofs[i])

    @property
    def coordinate_names(self):
        out = ()
        for i, nm in enumerate(self.names):
            out += self._dof_names(i) + self._mode_names(i)
        return out

    def _mode_names(self, i):
        return tuple(f"{self.names[i]}_eta{j + 1}" for j in range(self.n_modes[i]))

    @property
    def coordinate_roles(self) -> dict:
        """From the structure: hinges are the free revolute and Hooke angles, elastic the
        modal amplitudes, the hub the free root (its MRPs; its body rate with efficient
        speeds)."""
        hinge, elastic = (), ()
        for i in range(self.n_bodies):
            if self.kinds[i] in ("revolute", "universal"):
                hinge += self._dof_names(i)
            elastic += self._mode_names(i)
        roles = {"hinge": hinge, "elastic": elastic}
        if self.kinds[0] == "free":
            roles["hub_attitude"] = self._dof_names(0)[:3]
        if self.kinds[0] == "free" and self.speeds == "efficient":
            roles["hub_rate"] = tuple(f"{self.names[0]}_w{a}" for a in "xyz")
        return {k: v for k, v in roles.items() if v}

    @property
    def _speed_names(self):
        out = ()
        for i, nm in enumerate(self.names):
            k = self.kinds[i]
            if self.speeds == "efficient" and k == "free":
                js = tuple(f"{nm}_{s}" for s in ("wx", "wy", "wz", "vx", "vy", "vz"))
            elif self.speeds == "efficient" and k == "spherical":
                js = tuple(f"{nm}_w{a}" for a in "xyz")
            elif self.speeds == "efficient":
                js = tuple(f"{nm}_u{d + 1}" for d in self.free_dofs[i])
            else:
                js = tuple(n + "_dot" for n in self._dof_names(i))
            ms = "_s" if self.speeds == "efficient" else "_eta_dot"
            out += js + tuple(f"{nm}{ms}{j + 1}" for j in range(self.n_modes[i]))
        return out

    def blocks(self, v):
        off = self.offsets()
        out = []
        for i in range(self.n_bodies):
            nf = len(self.free_dofs[i])
            b = v[off[i]:off[i] + self.body_size(i)]
            out.append((b[:nf], b[nf:]))
        return out

    # ---------------------------------------------------------------- System
    def default_params(self):
        return self.params0

    def init_state(self, params):
        return params["x0"]

    # ---------------------------------------------------------------- kinematics
    def prescribed_values(self, i, t, params):
        """Prescribed ``(theta, theta_dot)`` of body ``i`` (dicts dof -> value)."""
        th, thd = {}, {}
        for dof, fn in self.pres[i]:
            p = params["prescribed"][self.names[i]]
            f = lambda tt: fn(tt, p)
            th[dof], thd[dof] = jax.jvp(f, (t,), (jnp.ones_like(t),))
        return th, thd

    def joint_angles(self, i, qj, th_p):
        k = self.kinds[i]
        nd = JOINT_DOF[k]
        vals = [None] * nd
        for n, d in enumerate(self.free_dofs[i]):
            vals[d] = qj[n]
        for d, v in th_p.items():
            vals[d] = v
        return vals

    def body_step(self, i, P, qj, qi, th_p, thd_p, hinge, w_p, u_i):
        """Body ``i``: ``(w_i, joint coordinate rates, E [child parent-or-world], r_h)``.

        ``hinge`` = ``(q_p, I_p)`` of a flexible parent (``None`` for the world); ``w_p``
        the parent's speeds; ``u_i`` = ``(joint speeds, modal speeds)``; ``thd_p`` the
        prescribed rates (dict).
        """
        k = self.kinds[i]
        I = P["I"]
        uj, ue = u_i
        dt = qi.dtype if qi.shape[0] else qj.dtype if qj.shape[0] else P["axis"].dtype
        EJ = P["rot"]
        if hinge is None:
            E_Jp = EJ
            r_h = P["pos"]
            wh = jnp.zeros(3, dt)  # hinge angular velocity, J axes
            vh = jnp.zeros(3, dt)
        else:
            q_p, I_p = hinge
            w_par, v_par, s_par = w_p[:3], w_p[3:6], w_p[6:]
            qd_p = qdot_modal(I_p, w_par, q_p, s_par)
            if q_p.shape[0]:
                r_h = P["pos"] + sp.mv(P["phi_h"], q_p)
                sig = sp.mv(P["psi_h"], q_p) / 4.0
                E_hp = sp.mrp_to_dcm(sig)
                w_rel = (4.0 / (1.0 + jnp.dot(sig, sig)) ** 2) * sp.mtv(sp.mrp_B(sig), sp.mv(P["psi_h"], qd_p))
                vh_p = v_par + sp.cross(w_par, r_h) + sp.mv(P["phi_h"], qd_p)
            else:
                r_h = P["pos"]
                E_hp = jnp.eye(3, dtype=dt)
                w_rel = jnp.zeros(3, dt)
                vh_p = v_par + sp.cross(w_par, r_h)
            E_Jp = EJ @ E_hp
            wh = sp.mv(EJ, sp.mv(E_hp, w_par) + w_rel)
            vh = sp.mv(E_Jp, vh_p)
        eff = self.speeds == "efficient"
        if k == "free":
            sig = qj[:3]
            E = sp.mrp_to_dcm(sig)
            if eff:
                w, v = uj[:3], uj[3:]
                rates = jnp.concatenate([sp.mv(sp.mrp_B(sig), w), sp.mtv(E, v)])
            else:
                w, v = sp.mv(binv(sig), uj[:3]), sp.mv(E, uj[3:])
                rates = uj
            E_cJ = E
        elif k == "spherical":
            sig = qj
            E_cJ = sp.mrp_to_dcm(sig)
            wh_c = sp.mv(E_cJ, wh)
            if eff:
                w = uj
                rates = sp.mv(sp.mrp_B(sig), uj - wh_c)
            else:
                w = wh_c + sp.mv(binv(sig), uj)
                rates = uj
            v = sp.mv(E_cJ, vh)
        else:
            ang = self.joint_angles(i, qj, th_p)
            a1 = P["axis"]
            if k == "revolute":
                E_cJ = sp.axis_angle_dcm(a1, ang[0])
                H = [a1]
            else:
                E1 = sp.axis_angle_dcm(a1, ang[0])
                E2 = sp.axis_angle_dcm(P["axis2"], ang[1])
                E_cJ = E2 @ E1
                H = [a1, sp.mtv(E1, P["axis2"])]
            thd = [None] * len(H)
            for d, val in thd_p.items():
                thd[d] = val
            for n, d in enumerate(self.free_dofs[i]):
                thd[d] = uj[n] - jnp.dot(H[d], wh) if eff else uj[n]
            w_J = wh
            for d in range(len(H)):
                w_J = w_J + H[d] * thd[d]
            w = sp.mv(E_cJ, w_J)
            v = sp.mv(E_cJ, vh)
            rates = jnp.stack([thd[d] for d in self.free_dofs[i]]) if self.free_dofs[i] else jnp.zeros(0, dt)
        s = ue if eff else s_from_qdot(I, w, qi, ue)
        wi = jnp.concatenate([w, v, s])
        return wi, rates, E_cJ @ E_Jp, r_h

    def kinematics(self, xc, t, u, params, ws_in=None, thd_override=None):
        """Forward pass: per body ``w_i``, coordinate rates, world poses.

        ``ws_in``: if given, the parent speeds are taken from it (independent inputs for
        the force ``vjp``); ``thd_override``: prescribed rates replacing ``theta_dot(t)``.
        """
        cb, ub = self.blocks(xc), self.blocks(u)
        ws, rates, poses = [], [], []
        for i in range(self.n_bodies):
            P = params["bodies"][i]
            p = self.parents[i]
            th_p, thd_p = self.prescribed_values(i, t, params)
            if thd_override is not None:
                thd_p = thd_override[i]
            wsrc = ws if ws_in is None else ws_in
            hinge = None if p < 0 else (cb[p][1], params["bodies"][p]["I"])
            w_p = None if p < 0 else wsrc[p]
            wi, jr, E_cp, r_h = self.body_step(i, P, cb[i][0], cb[i][1], th_p, thd_p, hinge, w_p, ub[i])
            w_own = wi if ws_in is None else ws_in[i]
            qr = qdot_modal(P["I"], w_own[:3], cb[i][1], w_own[6:])
            ws.append(wi)
            rates.append((jr, qr))
            if p < 0:
                E_w = E_cp
                r_w = r_h + (sp.mtv(P["rot"], cb[i][0][3:]) if self.kinds[i] == "free" else 0.0 * r_h)
            else:
                Ep, rp = poses[p]
                E_w = E_cp @ Ep
                r_w = rp + sp.mtv(Ep, r_h)
            poses.append((E_w, r_w))
        return ws, rates, poses

    def _flat_rates(self, rates):
        return jnp.concatenate([jnp.concatenate([jr, qr]) for jr, qr in rates]) if rates else None

    # ---------------------------------------------------------------- energy
    def gravity_potential(self, xc, t, params):
        cb = self.blocks(xc)
        _, _, poses = self.kinematics(xc, t, jnp.zeros_like(xc), params)
        g = params["gravity"]
        P = 0.0
        for i in range(self.n_bodies):
            I = params["bodies"][i]["I"]
            q = cb[i][1]
            E, r = poses[i]
            c1 = I["c"] + (sp.mv(I["A"], q) if q.shape[0] else 0.0)
            P = P - jnp.dot(g, I["m"] * r + sp.mtv(E, c1))
        return P

    def potential(self, xc, t, params):
        cb = self.blocks(xc)
        P = self.gravity_potential(xc, t, params)
        for i in range(self.n_bodies):
            q = cb[i][1]
            if q.shape[0]:
                P = P + 0.5 * sp.vdot(q, sp.mv(params["bodies"][i]["I"]["K"], q))
        return P

    def kinetic(self, ws, params):
        return sum(0.5 * sp.vdot(w, sp.mv(params["bodies"][i]["I"]["M0"], w)) for i, w in enumerate(ws))

    # ---------------------------------------------------------------- dynamics
    def _ext(self, t, params):
        if self.torque_fn is None:
            return None
        return self.torque_fn(t, params["forcing"])

    def solve(self, t, x, params):
        """``(u_dot, x_dot (coords), loads)`` at state ``x``."""
        xc, u = self.split(x)
        t = jnp.asarray(t, x.dtype)
        ws, rates, _ = self.kinematics(xc, t, u, params)
        xdot = self._flat_rates(rates)
        fw, fu = active_forces(self, xc, t, u, ws, rates, params)
        beta = velocity_products(self, xc, t, u, xdot, params)
        tau_ext = self._ext(t, params)
        nb = self.n_bodies
        own = []  # body bias force p_i = g - f
        for i in range(nb):
            I = params["bodies"][i]["I"]
            pi = gyro(I, ws[i]) - fw[i]
            if tau_ext is not None:
                pi = pi.at[:3].add(-tau_ext[i])
            own.append(pi)
        fu_flat = fu
        maps = local_maps(self, xc, t, u, ws, params)
        if self.algorithm == "dense":
            return dense(self, xc, t, u, ws, beta, own, fu_flat, maps, params) + (xdot,)
        return articulated(self, beta, own, fu_flat, maps, params) + (xdot,)

    def state_derivative(self, t, x, params):
        ud, _, xdot = self.solve(t, x, params)
        return jnp.concatenate([xdot, ud] + clock_entry(self.has_clock, 1.0, x.dtype))

    # ---------------------------------------------------------------- projection
    @property
    def _mrp_starts(self) -> tuple:
        return tuple(s for s, k in zip(self.offsets(), self.kinds) if k in jt.MRP_KINDS)

    @property
    def has_projection(self):
        return len(self._mrp_starts) > 0

    def project(self, x, params):
        """The MRP shadow-set switch; customary speeds (MRP rates) are converted to the
        new set through the body rate they encode."""
        new = sp.mrp_switch_at(x, self._mrp_starts)
        if self.speeds == "customary":
            n = self.n_coords
            for s in self._mrp_starts:
                w = binv(x[s:s + 3]) @ x[n + s:n + s + 3]
                new = new.at[n + s:n + s + 3].set(sp.mrp_B(new[s:s + 3]) @ w)
        return new

    # ---------------------------------------------------------------- diagnostics
    def clock_time(self, x):
        return x[-1] if self.has_clock else jnp.zeros((), x.dtype)

    @sp.jit_per_form
    def diagnostics(self, x, params):
        xc, u = self.split(x)
        t = self.clock_time(x)
        ws, _, poses = self.kinematics(xc, t, u, params)
        out = {"energy": self.kinetic(ws, params) + self.potential(xc, t, params)}
        if self.kinds[0] == "free":
            h, scale = 0.0, 0.0
            cb = self.blocks(xc)
            for i, w in enumerate(ws):
                E, r = poses[i]
                I = params["bodies"][i]["I"]
                hb = sp.mv(I["M0"][:6], w) + jnp.concatenate([deformation_moment(I, cb[i][1], w),
                                                              jnp.zeros(3, w.dtype)])
                hk = sp.xform_force_T(E, r, hb)
                h, scale = h + hk, scale + sp.safe_norm(hk[:3])
            out["angular_momentum"] = h[:3]
            out["linear_momentum"] = h[3:]
            # the bodies' angular momenta by magnitude: the natural scale of their sum
            out["momentum_scale"] = scale
            sig = xc[:3]
            out["attitude_angle"] = 4.0 * jnp.arctan(sp.safe_norm(sig))
        cb = self.blocks(xc)
        for n, (label, b) in enumerate(self.outputs):
            out[label] = sp.mv(params["outputs"][n], cb[b][1])
        if self.has_clock:
            out["load"] = self.solve(t, x, params)[1]
        return out
