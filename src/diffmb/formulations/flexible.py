"""Flexible multibody dynamics with efficient generalized speeds (Banerjee & Lemak).

A tree of flexible bodies (modal data: :mod:`diffmb.formulations.modal`) joined by
revolute, Hooke (universal) and spherical joints, with a free-flying or hinged root.
Each body ``i`` has a reference frame ``B_i`` and ``n_i`` modal coordinates ``q_i``.

The model (what the paper gives and what is derived here)
---------------------------------------------------------
**Velocity field, eq. (1).** With the body's *efficient* speeds ``w = [w; v; s]`` —
reference-frame angular velocity ``w`` and origin velocity ``v`` (``B`` components) and
the D'Eleuterio-Barfoot modal speeds ``s`` — a material point ``p`` moves with
``v_p = v + w x p + Phi(p) s``. The speeds ``s`` relate to the modal rates by eq. (2),
``Me (s - q_dot) = L(w, q)``, ``L_i = sum_j w . int(phi_j x phi_i dm) q_j``, i.e.
``q_dot = s - Me^-1 L``: ``Phi s`` is the mass-weighted projection of the exact
``w x Phi q + Phi q_dot`` on the modal space (the exact field differs from eq. (1) by the
component of ``w x Phi q`` orthogonal to the modes). Eq. (1) is the *model* for both
speed choices here, so the two choices describe the same system and must agree to
round-off; with eq. (1) the kinetic energy is ``T = 1/2 w^T M0 w`` with the constant
body mass matrix ``M0 = [[J, c~, Bm], [c~^T, m U, A], [Bm^T, A^T, Me]]``
(:func:`~diffmb.formulations.modal.body_mass_matrix`).

**Kane's equations, eq. (3).** ``int a . dv/du_r dm`` with ``a`` the inertial derivative
of eq. (1) gives, per body, the generalized inertia force ``-(M0 w_dot + g(w))`` on ``w``
(derived here from the lumped form; ``U`` the unit dyadic, ``N``/``d``/``G`` the modal
integrals of :mod:`~diffmb.formulations.modal`):

* ``g_w = w x (J w) + c x (w x v) + w (d . s) - (N . s) w``
* ``g_v = w x (m v + w x c) + w x (A s)``
* ``g_s = A^T (w x v) + N : (w w) - d |w|^2 + G_w s``, ``(G_w)_ij = w . int(phi_j x phi_i dm)``

``w^T g = 0`` (``G_w`` is skew), so the power of the inertia forces is ``-dT/dt``.
The generalized active forces of the potential ``P`` (elastic ``1/2 q^T K q``, gravity)
and dissipation ``D = 1/2 q_dot^T C q_dot`` are ``-(dP/dq_j + dD/dq_dot_j) dq_dot_j/du_r``
exactly as eq. (3) writes them: ``q_dot`` depends on ``w`` through eq. (2), so
elasticity, damping and geometric stiffening act on the rotational speeds as well as on
the modal ones (the paper's remark after eq. 3). They are computed as one reverse-mode
product (``vjp``) of the kinematical equations ``x_dot(x, u)`` with the cotangent
``-grad P - C q_dot - K_G(w) q``; ``T + P`` is therefore conserved to integration error
when ``C = 0`` and no input acts.

**Geometric stiffening.** The centrifugal inertia load ``-m_k W p_k``, ``W = [w~][w~]``,
produces axial forces whose geometric stiffness is ``K_G(w) = sum_ab W_ab KG[a, b]``
(Banerjee 1993, the unit-load method; ``KG`` from
:func:`~diffmb.formulations.modal.frame_modes`); it enters as the generalized force
``-K_G(w) q`` on ``q_dot`` (so also on ``w``). The loads from reference accelerations
(``a_0``, ``alpha x p``) are left out: they make the mass matrix state-dependent and are
transverse (no axial force) for radial booms. Stiffening is not derived from a potential,
so the energy check runs without it.

**Momentum.** ``diagnostics["angular_momentum"]`` is ``sum int rho x v dm`` about the
world origin with the *deformed* positions ``rho = r + E^T (p + Phi q)`` and the field
``v`` of eq. (1): ``M0[:3] w`` plus :func:`_deformation_moment` ``int (Phi q) x v dm``.
When the modal space is closed under ``w x`` (eq. 1 then is the exact velocity field)
both momenta are conserved to integration error for a floating tree, prescribed joint
motion, damping and geometric stiffening included (tests). With truncated modes (e.g.
cantilever bending modes: ``w x Phi q`` has an axial part no mode carries) eq. (1) is not
the time derivative of any position field and the paper's equations conserve no angular
momentum exactly: the change is first order in the deformation (flex-4body, 10 s: 0.085
of |h| = 53; 0.019 with EI x 4; unchanged by halving the step or dropping stiffening).
Linear momentum ``sum M0[3:6] w`` is conserved exactly.

**Hinge kinematics, eq. (4).** Body ``j`` hangs at node ``h`` of its parent ``c(j)``.
The hinge frame is carried by the parent's deformation: position ``p_h + Phi_h q``, and
rotation ``psi_h = Psi_h q`` held exactly as the MRP ``psi_h / 4``, so that its angular
velocity relative to ``B_c`` is ``T(psi_h) Psi_h q_dot = Psi_h q_dot + O(psi)`` — the
``sum phi_i q_dot_i`` of eq. (4) — and poses and velocities stay consistent. The
absolute hinge angular velocity is ``w_h = w^c + T Psi_h q_dot``; for the joint speeds:

==============  ==================================  ======================================
joint           customary ``u``                      efficient ``u`` (Mitiguy & Kane)
==============  ==================================  ======================================
revolute        ``theta_dot``                        ``w^j . h``: ``w^j = w_h.(U - hh) + u h``
Hooke           ``theta_dot_1, theta_dot_2``         ``w^j . h_k``: eq. (4), ``h1 _|_ h2``
spherical       MRP rates ``sigma_dot``              body components of ``w^j``
free (root)     ``sigma_dot``, ``r_dot`` (world)     body components of ``w``, ``v``
modal           ``q_dot``                            ``s`` of eq. (2)
==============  ==================================  ======================================

**Recursive solution** (``method="recursive"``, Banerjee 1993's block-diagonal order-n
scheme in the articulated-body form). Each body's speeds ``w_i`` (``6 + n_i``) follow from
its parent's and its own speeds ``u_i`` (free joint DOFs + modal speeds) by the linear map
``w_i = A_i w_p + S_i u_i`` (``A_i``, ``S_i`` from forward-mode derivatives of the
kinematics; the velocity-product terms ``c_i`` from one ``jvp`` of the whole kinematics
along ``x_dot``). Then: forward pass (kinematics), backward pass (articulated inertias
``IA_i = M0_i + sum A_c^T Ia_c A_c``, ``D_i = S^T IA S``, bias forces), forward pass
(``u_dot_i = D^-1 (tau - S^T p - U^T a')``). With efficient speeds the ``S_i`` of a leaf
body with a free, spherical or revolute joint is constant, so its ``D_i^-1`` (for a single
free body: ``M0^-1``) is computed once (params ``Dinv``): the constant mass matrix the
paper's efficiency rests on. With customary speeds ``S_i`` depends on the state and every
``D_i`` is rebuilt and factored at every evaluation. ``method="dense"`` (the "standard
Kane" column of the paper) forms the full mass matrix ``sum W_i^T M0_i W_i`` and solves it.

**Prescribed motion and internal loads.** Any revolute/Hooke DOF may be prescribed as
``theta(t)`` (a traceable function; rates by forward-mode differentiation). It leaves the
state; its speed is ``theta_dot(t)`` in both speed choices. The internal load is
"the augmented inertia and active forces dot-multiplied by the partial angular velocity of
the prescribed motion": ``lambda = S_p^T (IA_i w_dot_i + p_i)`` with ``S_p = dw_i/dtheta_dot``
and ``IA_i``, ``p_i`` the articulated inertia and force of the subtree (the rigid RNEA's
``tau = S^T f``). Systems with prescribed DOFs carry a ``clock`` state so diagnostics can
evaluate the loads along the run (``diagnostics["load"]``).

State ``x = [coords; speeds]`` (plus ``clock``): per body its free joint coordinates then
its modal coordinates, speeds in the same order. Attitudes are MRPs (``project`` does the
shadow-set switch, converting customary MRP rates).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import spatial as sp
from ..system import System
from .modal import ModalData

JOINT_DOF = {"free": 6, "revolute": 1, "universal": 2, "spherical": 3}
SPEEDS = ("efficient", "customary")
METHODS = ("recursive", "dense")


@dataclasses.dataclass(frozen=True, eq=False)
class FlexBody:
    """One flexible body of the tree (plain Python; validated by :func:`build_flexible`).

    ``joint``: ``free`` (root only), ``revolute``, ``universal`` (Hooke) or ``spherical``.
    ``hinge``: node (index or name) of the parent's modal data where the joint sits
    (ignored for a root). ``rot``: DCM ``[J hinge]`` of the joint frame; ``pos``: the joint
    frame origin in world coordinates for a root. ``axis``/``axis2`` as
    :mod:`diffmb.joints`. ``prescribed``: ``{dof: fn(t, p) -> angle}`` with ``p`` the
    params entry ``params["prescribed"][name]``. ``q0``/``u0``: initial joint coordinates
    (customary rates for ``u0``: ``theta_dot``, MRP rates, ``r_dot``), ``eta0``/``eta_dot0``
    initial modal coordinates/rates.
    """

    name: str
    modal: ModalData
    parent: str = "world"
    joint: str = "free"
    hinge: object = None
    axis: tuple = (0.0, 0.0, 1.0)
    axis2: tuple = (0.0, 1.0, 0.0)
    rot: object = None
    pos: tuple = (0.0, 0.0, 0.0)
    prescribed: dict = dataclasses.field(default_factory=dict)
    q0: object = None
    u0: object = None
    eta0: object = None
    eta_dot0: object = None


def _lam(G, w, q):
    """``L_i = sum_{a,j} w_a G[a, j, i] q_j`` (right side of eq. 2)."""
    return jnp.einsum("aji,a,j->i", G, w, q)


def _qdot_modal(I, w, q, s):
    """Eq. (2): ``q_dot = s - Me^-1 L(w, q)``."""
    if q.shape[0] == 0:
        return q
    return s - I["Me_inv"] @ _lam(I["G"], w, q)


def _s_from_qdot(I, w, q, qd):
    if q.shape[0] == 0:
        return qd
    return qd + I["Me_inv"] @ _lam(I["G"], w, q)


def _gyro(I, wv):
    """``g(w)`` of the module docstring (inertia force = ``-(M0 w_dot + g)``)."""
    w, v, s = wv[:3], wv[3:6], wv[6:]
    V = wv[:6]
    Isp = I["M0"][:6, :6]
    rig = sp.cross_force(V, Isp @ V)
    if s.shape[0] == 0:
        return rig
    Ns = jnp.einsum("aib,i->ab", I["N"], s)
    As = I["A"] @ s
    gw = w * jnp.dot(I["d"], s) - Ns @ w
    gv = sp.cross(w, As)
    Gw = jnp.einsum("a,aji->ij", w, I["G"])
    gs = I["A"].T @ sp.cross(w, v) + jnp.einsum("aib,a,b->i", I["N"], w, w) - I["d"] * jnp.dot(w, w) + Gw @ s
    return jnp.concatenate([rig[:3] + gw, rig[3:] + gv, gs])


def _deformation_moment(I, q, wv):
    """``int (Phi q) x v dm`` (B axes), ``v`` the field of eq. (1): the deformation's part
    of the moment of momentum about the origin of B (``M0[:3] @ w`` is ``int p x v dm``
    with the undeformed ``p``). With ``delta = Phi q``:
    ``(A q) x v + w (d . q) - (N q)^T w + sum_ij G[:, j, i] q_j s_i``.
    """
    if q.shape[0] == 0:
        return jnp.zeros(3, wv.dtype)
    w, v, s = wv[:3], wv[3:6], wv[6:]
    Nq = jnp.einsum("aib,i->ab", I["N"], q)
    return (sp.cross(I["A"] @ q, v) + w * jnp.dot(I["d"], q) - Nq.T @ w
            + jnp.einsum("aji,j,i->a", I["G"], q, s))


def _binv(sig):
    """``B(sigma)^-1 = 16 / (1 + sigma^2)^2 B^T`` (MRP kinematics, Schaub & Junkins)."""
    s2 = jnp.dot(sig, sig)
    return (16.0 / (1.0 + s2) ** 2) * sp.mrp_B(sig).T


class FlexibleSystem(System):
    """A tree of flexible bodies (see module docstring). Build with :func:`build_flexible`."""

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
    method: str = eqx.field(static=True, default="recursive")
    geometric_stiffening: bool = eqx.field(static=True, default=False)
    torque_fn: Callable | None = eqx.field(static=True, default=None)

    # ---------------------------------------------------------------- layout
    @property
    def n_bodies(self):
        return len(self.names)

    @property
    def has_clock(self):
        return any(self.pres)

    def _nc(self, i):
        return len(self.free_dofs[i]) + self.n_modes[i]

    @property
    def n_coords(self):
        return sum(self._nc(i) for i in range(self.n_bodies))

    def _offsets(self):
        off, o = [], 0
        for i in range(self.n_bodies):
            off.append(o)
            o += self._nc(i)
        return off

    def children(self, i):
        return tuple(c for c, p in enumerate(self.parents) if p == i)

    @property
    def state_names(self):
        return self.coordinate_names + self._speed_names + (("clock",) if self.has_clock else ())

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
            out += self._dof_names(i) + tuple(f"{nm}_eta{j + 1}" for j in range(self.n_modes[i]))
        return out

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

    def split(self, x):
        n = self.n_coords
        return x[:n], x[n:2 * n]

    def _blocks(self, v):
        off = self._offsets()
        out = []
        for i in range(self.n_bodies):
            nf = len(self.free_dofs[i])
            b = v[off[i]:off[i] + self._nc(i)]
            out.append((b[:nf], b[nf:]))
        return out

    # ---------------------------------------------------------------- System
    def default_params(self):
        return self.params0

    def init_state(self, params):
        return params["x0"]

    # ---------------------------------------------------------------- kinematics
    def _pres_values(self, i, t, params):
        """Prescribed ``(theta, theta_dot)`` of body ``i`` (dicts dof -> value)."""
        th, thd = {}, {}
        for dof, fn in self.pres[i]:
            p = params["prescribed"][self.names[i]]
            f = lambda tt: fn(tt, p)  # noqa: E731
            th[dof], thd[dof] = jax.jvp(f, (t,), (jnp.ones_like(t),))
        return th, thd

    def _joint_angles(self, i, qj, th_p):
        k = self.kinds[i]
        nd = JOINT_DOF[k]
        vals = [None] * nd
        for n, d in enumerate(self.free_dofs[i]):
            vals[d] = qj[n]
        for d, v in th_p.items():
            vals[d] = v
        return vals

    def _body_step(self, i, P, qj, qi, th_p, thd_p, hinge, w_p, u_i):
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
            qd_p = _qdot_modal(I_p, w_par, q_p, s_par)
            if q_p.shape[0]:
                r_h = P["pos"] + P["phi_h"] @ q_p
                sig = (P["psi_h"] @ q_p) / 4.0
                E_hp = sp.mrp_to_dcm(sig)
                w_rel = (4.0 / (1.0 + jnp.dot(sig, sig)) ** 2) * (sp.mrp_B(sig).T @ (P["psi_h"] @ qd_p))
                vh_p = v_par + sp.cross(w_par, r_h) + P["phi_h"] @ qd_p
            else:
                r_h = P["pos"]
                E_hp = jnp.eye(3, dtype=dt)
                w_rel = jnp.zeros(3, dt)
                vh_p = v_par + sp.cross(w_par, r_h)
            E_Jp = EJ @ E_hp
            wh = EJ @ (E_hp @ w_par + w_rel)
            vh = E_Jp @ vh_p
        eff = self.speeds == "efficient"
        if k == "free":
            sig = qj[:3]
            E = sp.mrp_to_dcm(sig)
            if eff:
                w, v = uj[:3], uj[3:]
                rates = jnp.concatenate([sp.mrp_B(sig) @ w, E.T @ v])
            else:
                w, v = _binv(sig) @ uj[:3], E @ uj[3:]
                rates = uj
            E_cJ = E
        elif k == "spherical":
            sig = qj
            E_cJ = sp.mrp_to_dcm(sig)
            wh_c = E_cJ @ wh
            if eff:
                w = uj
                rates = sp.mrp_B(sig) @ (uj - wh_c)
            else:
                w = wh_c + _binv(sig) @ uj
                rates = uj
            v = E_cJ @ vh
        else:
            ang = self._joint_angles(i, qj, th_p)
            a1 = P["axis"]
            if k == "revolute":
                E_cJ = sp.axis_angle_dcm(a1, ang[0])
                H = [a1]
            else:
                E1 = sp.axis_angle_dcm(a1, ang[0])
                E2 = sp.axis_angle_dcm(P["axis2"], ang[1])
                E_cJ = E2 @ E1
                H = [a1, E1.T @ P["axis2"]]
            thd = [None] * len(H)
            for d, val in thd_p.items():
                thd[d] = val
            for n, d in enumerate(self.free_dofs[i]):
                thd[d] = uj[n] - jnp.dot(H[d], wh) if eff else uj[n]
            w_J = wh
            for d in range(len(H)):
                w_J = w_J + H[d] * thd[d]
            w = E_cJ @ w_J
            v = E_cJ @ vh
            rates = jnp.stack([thd[d] for d in self.free_dofs[i]]) if self.free_dofs[i] else jnp.zeros(0, dt)
        s = ue if eff else _s_from_qdot(I, w, qi, ue)
        wi = jnp.concatenate([w, v, s])
        return wi, rates, E_cJ @ E_Jp, r_h

    def _kinematics(self, xc, t, u, params, ws_in=None, thd_override=None):
        """Forward pass: per body ``w_i``, coordinate rates, world poses.

        ``ws_in``: if given, the parent speeds are taken from it (independent inputs for
        the force ``vjp``); ``thd_override``: prescribed rates replacing ``theta_dot(t)``.
        """
        cb, ub = self._blocks(xc), self._blocks(u)
        ws, rates, poses = [], [], []
        for i in range(self.n_bodies):
            P = params["bodies"][i]
            p = self.parents[i]
            th_p, thd_p = self._pres_values(i, t, params)
            if thd_override is not None:
                thd_p = thd_override[i]
            wsrc = ws if ws_in is None else ws_in
            hinge = None if p < 0 else (cb[p][1], params["bodies"][p]["I"])
            w_p = None if p < 0 else wsrc[p]
            wi, jr, E_cp, r_h = self._body_step(i, P, cb[i][0], cb[i][1], th_p, thd_p, hinge, w_p, ub[i])
            w_own = wi if ws_in is None else ws_in[i]
            qr = _qdot_modal(P["I"], w_own[:3], cb[i][1], w_own[6:])
            ws.append(wi)
            rates.append((jr, qr))
            if p < 0:
                E_w = E_cp
                r_w = r_h + (P["rot"].T @ cb[i][0][3:] if self.kinds[i] == "free" else 0.0 * r_h)
            else:
                Ep, rp = poses[p]
                E_w = E_cp @ Ep
                r_w = rp + Ep.T @ r_h
            poses.append((E_w, r_w))
        return ws, rates, poses

    def _flat_rates(self, rates):
        return jnp.concatenate([jnp.concatenate([jr, qr]) for jr, qr in rates]) if rates else None

    # ---------------------------------------------------------------- energy
    def _gravity_potential(self, xc, t, params):
        cb = self._blocks(xc)
        _, _, poses = self._kinematics(xc, t, jnp.zeros_like(xc), params)
        g = params["gravity"]
        P = 0.0
        for i in range(self.n_bodies):
            I = params["bodies"][i]["I"]
            q = cb[i][1]
            E, r = poses[i]
            c1 = I["c"] + (I["A"] @ q if q.shape[0] else 0.0)
            P = P - jnp.dot(g, I["m"] * r + E.T @ c1)
        return P

    def potential(self, xc, t, params):
        cb = self._blocks(xc)
        P = self._gravity_potential(xc, t, params)
        for i in range(self.n_bodies):
            q = cb[i][1]
            if q.shape[0]:
                P = P + 0.5 * q @ (params["bodies"][i]["I"]["K"] @ q)
        return P

    def kinetic(self, ws, params):
        return sum(0.5 * w @ (params["bodies"][i]["I"]["M0"] @ w) for i, w in enumerate(ws))

    # ---------------------------------------------------------------- dynamics
    def _forces(self, xc, t, u, ws, rates, params):
        """Generalized active forces of P, D and K_G: on each w_i (``fw``) and u (``fu``).

        The cotangent ``-grad P - C q_dot - K_G q`` pulled back through the kinematical
        equations. Modal rates depend only on the body's own ``w_i`` (eq. 2), so their
        part is written out: ``fw_i = [-(G q)^T Me^-1 c_q; 0; c_q]``. Joint coordinate
        rates only meet the gravity cotangent (elastic, damping and stiffening forces act
        on the modal coordinates): that ``vjp`` through the kinematics, and the gradient
        of the gravity potential, run only when ``params["gravity"]`` is non-zero.
        """
        nb = self.n_bodies
        cb = self._blocks(xc)

        def grav(_):
            gP = self._blocks(jax.grad(self._gravity_potential)(xc, t, params))

            def jrates(ws_in, uu):
                _, r, _ = self._kinematics(xc, t, uu, params, ws_in=ws_in)
                return [jr for jr, _ in r]

            _, vjp = jax.vjp(jrates, ws, u)
            fwj, fuj = vjp([-gP[i][0] for i in range(nb)])
            return list(fwj), fuj, [gP[i][1] for i in range(nb)]

        def nograv(_):
            return ([jnp.zeros_like(w) for w in ws], jnp.zeros_like(u),
                    [jnp.zeros_like(cb[i][1]) for i in range(nb)])

        fwj, fu, gq = jax.lax.cond(jnp.any(params["gravity"] != 0), grav, nograv, None)
        fw = []
        for i in range(nb):
            I = params["bodies"][i]["I"]
            q = cb[i][1]
            if not self.n_modes[i]:
                fw.append(fwj[i])
                continue
            cq = -gq[i] - I["K"] @ q - I["C"] @ rates[i][1]
            if self.geometric_stiffening:
                w = ws[i][:3]
                W = jnp.outer(w, w) - jnp.dot(w, w) * jnp.eye(3, dtype=w.dtype)
                cq = cq - jnp.einsum("ab,abij->ij", W, I["KG"]) @ q
            fomega = -jnp.einsum("aji,j,i->a", I["G"], q, I["Me_inv"] @ cq)
            fw.append(fwj[i] + jnp.concatenate([fomega, jnp.zeros(3, q.dtype), cq]))
        return fw, fu

    def _ext(self, t, params):
        if self.torque_fn is None:
            return None
        return self.torque_fn(t, params["forcing"])

    def _local_maps(self, xc, t, u, ws, params):
        """``A_i``, ``S_i``, ``S_pres,i`` as forward-mode Jacobians of the body step."""
        cb, ub = self._blocks(xc), self._blocks(u)
        out = []
        for i in range(self.n_bodies):
            P = params["bodies"][i]
            p = self.parents[i]
            th_p, thd_p = self._pres_values(i, t, params)
            hinge = None if p < 0 else (cb[p][1], params["bodies"][p]["I"])

            def f(w_p, uu, td, i=i, P=P, hinge=hinge, th_p=th_p):
                return self._body_step(i, P, cb[i][0], cb[i][1], th_p, td, hinge, w_p, uu)[0]

            w_p = None if p < 0 else ws[p]
            uflat = jnp.concatenate([ub[i][0], ub[i][1]])
            nf = len(self.free_dofs[i])

            def fu(uf, f=f, w_p=w_p, thd_p=thd_p, nf=nf):
                return f(w_p, (uf[:nf], uf[nf:]), thd_p)

            if self.const_leaf[i]:
                S = P["S"]
            else:
                S = jax.jacfwd(fu)(uflat) if uflat.shape[0] else None
            A = None if p < 0 else jax.jacfwd(lambda wp, f=f, thd_p=thd_p, i=i: f(wp, ub[i], thd_p))(w_p)
            Sp = None
            if self.pres[i]:
                dofs = [d for d, _ in self.pres[i]]
                vals = jnp.stack([thd_p[d] for d in dofs])

                def fp(vv, f=f, w_p=w_p, dofs=dofs, i=i):
                    return f(w_p, ub[i], {d: vv[n] for n, d in enumerate(dofs)})

                Sp = jax.jacfwd(fp)(vals)
            out.append((A, S, Sp))
        return out

    def _bias(self, xc, t, u, xdot, params):
        """Total velocity-product accelerations ``d w_i/dt`` at ``u_dot = 0`` (one jvp)."""
        def wfun(xx, tt):
            return self._kinematics(xx, tt, u, params)[0]

        _, beta = jax.jvp(wfun, (xc, t), (xdot, jnp.ones_like(t)))
        return beta

    def solve(self, t, x, params):
        """``(u_dot, x_dot (coords), loads)`` at state ``x``."""
        xc, u = self.split(x)
        t = jnp.asarray(t, x.dtype)
        ws, rates, _ = self._kinematics(xc, t, u, params)
        xdot = self._flat_rates(rates)
        fw, fu = self._forces(xc, t, u, ws, rates, params)
        beta = self._bias(xc, t, u, xdot, params)
        tau_ext = self._ext(t, params)
        nb = self.n_bodies
        own = []  # body bias force p_i = g - f
        for i in range(nb):
            I = params["bodies"][i]["I"]
            pi = _gyro(I, ws[i]) - fw[i]
            if tau_ext is not None:
                pi = pi.at[:3].add(-tau_ext[i])
            own.append(pi)
        fu_flat = fu
        maps = self._local_maps(xc, t, u, ws, params)
        if self.method == "dense":
            return self._solve_dense(xc, t, u, ws, beta, own, fu_flat, maps, params) + (xdot,)
        return self._solve_aba(beta, own, fu_flat, maps, params) + (xdot,)

    def _solve_aba(self, beta, own, fu, maps, params):
        nb = self.n_bodies
        ku = [self._nc(i) for i in range(nb)]
        off = np.concatenate([[0], np.cumsum(ku)]).astype(int)
        c = []
        for i in range(nb):
            A = maps[i][0]
            c.append(beta[i] if A is None else beta[i] - A @ beta[self.parents[i]])
        IA = [params["bodies"][i]["I"]["M0"] for i in range(nb)]
        pA = list(own)
        U, Dinv, uu, IAfull, pAfull = [None] * nb, [None] * nb, [None] * nb, [None] * nb, [None] * nb
        for i in reversed(range(nb)):
            A, S, _ = maps[i]
            IAfull[i], pAfull[i] = IA[i], pA[i]
            tau = fu[off[i]:off[i + 1]]
            if ku[i]:
                if self.const_leaf[i]:
                    Ui, Di, Ia = params["bodies"][i]["U"], params["bodies"][i]["Dinv"], params["bodies"][i]["Ia"]
                else:
                    Ui = IA[i] @ S
                    D = S.T @ Ui
                    Di = jnp.linalg.inv(0.5 * (D + D.T))
                    Ia = IA[i] - Ui @ Di @ Ui.T
                U[i], Dinv[i] = Ui, Di
                uu[i] = tau - S.T @ pA[i]
                pa = pA[i] + Ia @ c[i] + Ui @ (Di @ uu[i])
            else:
                Ia = IA[i]
                pa = pA[i] + Ia @ c[i]
            p = self.parents[i]
            if p >= 0:
                IA[p] = IA[p] + A.T @ Ia @ A
                pA[p] = pA[p] + A.T @ pa
        a = [None] * nb
        udot = []
        for i in range(nb):
            A, S, _ = maps[i]
            p = self.parents[i]
            ap = c[i] if p < 0 else A @ a[p] + c[i]
            if ku[i]:
                ud = Dinv[i] @ (uu[i] - U[i].T @ ap)
                a[i] = ap + S @ ud
                udot.append(ud)
            else:
                a[i] = ap
        loads = []
        for i in range(nb):
            Sp = maps[i][2]
            if Sp is not None:
                loads.append(Sp.T @ (IAfull[i] @ a[i] + pAfull[i]))
        ud = jnp.concatenate(udot) if udot else jnp.zeros(0)
        return ud, (jnp.concatenate(loads) if loads else jnp.zeros(0, ud.dtype))

    def _solve_dense(self, xc, t, u, ws, beta, own, fu, maps, params):
        """Full mass matrix ``sum W_i^T M0_i W_i`` ("standard Kane"), Cholesky solve."""
        def wall(uu):
            return jnp.concatenate(self._kinematics(xc, t, uu, params)[0])

        W = jax.jacfwd(wall)(u)
        sizes = [6 + self.n_modes[i] for i in range(self.n_bodies)]
        o = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        M = 0.0
        rhs = fu
        for i in range(self.n_bodies):
            Wi = W[o[i]:o[i + 1]]
            M0 = params["bodies"][i]["I"]["M0"]
            M = M + Wi.T @ M0 @ Wi
            rhs = rhs - Wi.T @ (M0 @ beta[i] + own[i])
        L = jnp.linalg.cholesky(0.5 * (M + M.T))
        ud = jax.scipy.linalg.cho_solve((L, True), rhs)
        # internal loads: subtree sums projected on the prescribed partials
        wdot = [W[o[i]:o[i + 1]] @ ud + beta[i] for i in range(self.n_bodies)]
        loads = []
        for i in range(self.n_bodies):
            if maps[i][2] is None:
                continue
            dofs = [d for d, _ in self.pres[i]]
            _, thd_p = self._pres_values(i, t, params)
            vals = jnp.stack([thd_p[d] for d in dofs])

            def wfp(vv, i=i, dofs=dofs):
                ov = [None] * self.n_bodies
                for j in range(self.n_bodies):
                    ov[j] = self._pres_values(j, t, params)[1]
                ov[i] = {d: vv[n] for n, d in enumerate(dofs)}
                return self._kinematics(xc, t, u, params, thd_override=ov)[0]

            Jp = jax.jacfwd(wfp)(vals)
            lam = 0.0
            for j in self._subtree(i):
                M0 = params["bodies"][j]["I"]["M0"]
                lam = lam + Jp[j].T @ (M0 @ wdot[j] + own[j])
            loads.append(lam)
        return ud, (jnp.concatenate(loads) if loads else jnp.zeros(0, ud.dtype))

    def _subtree(self, i):
        out = [i]
        for c in self.children(i):
            out += self._subtree(c)
        return out

    def state_derivative(self, t, x, params):
        ud, _, xdot = self.solve(t, x, params)
        parts = [xdot, ud]
        if self.has_clock:
            parts.append(jnp.ones(1, x.dtype))
        return jnp.concatenate(parts)

    # ---------------------------------------------------------------- projection
    @property
    def has_projection(self):
        return any(k in ("free", "spherical") for k in self.kinds)

    def project(self, x, params):
        xc, u = self.split(x)
        off = self._offsets()
        n = self.n_coords
        for i, k in enumerate(self.kinds):
            if k not in ("free", "spherical"):
                continue
            s = off[i]
            sig = x[s:s + 3]
            new = sp.mrp_switch(sig)
            x = x.at[s:s + 3].set(new)
            if self.speeds == "customary":
                rate = x[n + s:n + s + 3]
                w = _binv(sig) @ rate
                x = x.at[n + s:n + s + 3].set(sp.mrp_B(new) @ w)
        return x

    # ---------------------------------------------------------------- diagnostics
    def _time(self, x):
        return x[-1] if self.has_clock else jnp.zeros((), x.dtype)

    def diagnostics(self, x, params):
        xc, u = self.split(x)
        t = self._time(x)
        ws, _, poses = self._kinematics(xc, t, u, params)
        out = {"energy": self.kinetic(ws, params) + self.potential(xc, t, params)}
        if self.kinds[0] == "free":
            h = 0.0
            cb = self._blocks(xc)
            for i, w in enumerate(ws):
                E, r = poses[i]
                I = params["bodies"][i]["I"]
                hb = I["M0"][:6] @ w + jnp.concatenate([_deformation_moment(I, cb[i][1], w), jnp.zeros(3, w.dtype)])
                h = h + sp.xform_force_T(E, r, hb)
            out["angular_momentum"] = h[:3]
            out["linear_momentum"] = h[3:]
            sig = xc[:3]
            out["attitude_angle"] = 4.0 * jnp.arctan(sp.safe_norm(sig))
        cb = self._blocks(xc)
        for n, (label, b) in enumerate(self.outputs):
            out[label] = params["outputs"][n] @ cb[b][1]
        if self.has_clock:
            out["load"] = self.solve(t, x, params)[1]
        return out


# ============================================================================ builder
def _unit(v, what):
    v = np.asarray(v, float)
    if v.shape != (3,) or not np.all(np.isfinite(v)) or np.linalg.norm(v) < 1e-12:
        raise ValueError(f"{what}: expected a non-zero 3-vector, got {v!r}")
    return v / np.linalg.norm(v)


def build_flexible(bodies, *, speeds="efficient", method="recursive", gravity=(0.0, 0.0, 0.0),
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
                raise ValueError(f"{what}: prescribed motion is supported for revolute and Hooke joints, not {b.joint!r}")
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
    ws = customary._kinematics(xc, t, rates, params)[0]
    cb = system._blocks(xc)
    u = []
    for i in range(system.n_bodies):
        w = ws[i]
        k = system.kinds[i]
        if k == "free":
            uj = w[:6]
        elif k == "spherical":
            uj = w[:3]
        else:  # u_k = w^j . h_k, hinge axes in child axes
            th_p, _ = system._pres_values(i, t, params)
            ang = system._joint_angles(i, cb[i][0], th_p)
            P = params["bodies"][i]
            if k == "revolute":
                Hc = [P["axis"]]
            else:
                Hc = [sp.axis_angle_dcm(P["axis2"], ang[1]) @ P["axis"], P["axis2"]]
            fd = system.free_dofs[i]
            uj = jnp.stack([jnp.dot(Hc[d], w[:3]) for d in fd]) if fd else jnp.zeros(0, xc.dtype)
        u.append(jnp.concatenate([uj, w[6:]]))
    return jnp.concatenate(u)
