"""Generalized active forces and the per-body speed maps (Banerjee & Lemak eq. 3).

The forces of the potential, damping and geometric stiffening pulled back through the
kinematical equations; ``local_maps`` gives ``w_i = A_i w_p + S_i u_i`` (the recursive
solution's operators); ``velocity_products`` the accelerations at ``u_dot = 0``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...math import spatial as sp


def active_forces(system, xc, t, u, ws, rates, params):
    """Generalized active forces of P, D and K_G: on each w_i (``fw``) and u (``fu``).

    The cotangent ``-grad P - C q_dot - K_G q`` pulled back through the kinematical
    equations. Modal rates depend only on the body's own ``w_i`` (eq. 2), so their
    part is written out: ``fw_i = [-(G q)^T Me^-1 c_q; 0; c_q]``. Joint coordinate
    rates only meet the gravity cotangent (elastic, damping and stiffening forces act
    on the modal coordinates): that ``vjp`` through the kinematics, and the gradient
    of the gravity potential, run only when ``params["gravity"]`` is non-zero.
    """
    nb = system.n_bodies
    cb = system.blocks(xc)

    def grav(_):
        gP = system.blocks(jax.grad(system.gravity_potential)(xc, t, params))

        def jrates(ws_in, uu):
            _, r, _ = system.kinematics(xc, t, uu, params, ws_in=ws_in)
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
        if not system.n_modes[i]:
            fw.append(fwj[i])
            continue
        cq = -gq[i] - sp.mv(I["K"], q) - sp.mv(I["C"], rates[i][1])
        if system.geometric_stiffening:
            w = ws[i][:3]
            W = jnp.outer(w, w) - jnp.dot(w, w) * jnp.eye(3, dtype=w.dtype)
            cq = cq - sp.mv(jnp.einsum("ab,abij->ij", W, I["KG"]), q)
        fomega = -jnp.einsum("aji,j,i->a", I["G"], q, sp.mv(I["Me_inv"], cq))
        fw.append(fwj[i] + jnp.concatenate([fomega, jnp.zeros(3, q.dtype), cq]))
    return fw, fu


def local_maps(system, xc, t, u, ws, params):
    """``A_i``, ``S_i``, ``S_pres,i`` as forward-mode Jacobians of the body step."""
    cb, ub = system.blocks(xc), system.blocks(u)
    out = []
    for i in range(system.n_bodies):
        P = params["bodies"][i]
        p = system.parents[i]
        th_p, thd_p = system.prescribed_values(i, t, params)
        hinge = None if p < 0 else (cb[p][1], params["bodies"][p]["I"])

        def f(w_p, uu, td, i=i, P=P, hinge=hinge, th_p=th_p):
            return system.body_step(i, P, cb[i][0], cb[i][1], th_p, td, hinge, w_p, uu)[0]

        w_p = None if p < 0 else ws[p]
        uflat = jnp.concatenate([ub[i][0], ub[i][1]])
        nf = len(system.free_dofs[i])

        def fu(uf, f=f, w_p=w_p, thd_p=thd_p, nf=nf):
            return f(w_p, (uf[:nf], uf[nf:]), thd_p)

        if system.const_leaf[i]:
            S = P["S"]
        else:
            S = jax.jacfwd(fu)(uflat) if uflat.shape[0] else None
        A = None if p < 0 else jax.jacfwd(lambda wp, f=f, thd_p=thd_p, i=i: f(wp, ub[i], thd_p))(w_p)
        Sp = None
        if system.pres[i]:
            dofs = [d for d, _ in system.pres[i]]
            vals = jnp.stack([thd_p[d] for d in dofs])

            def fp(vv, f=f, w_p=w_p, dofs=dofs, i=i):
                return f(w_p, ub[i], {d: vv[n] for n, d in enumerate(dofs)})

            Sp = jax.jacfwd(fp)(vals)
        out.append((A, S, Sp))
    return out


def velocity_products(system, xc, t, u, xdot, params):
    """Total velocity-product accelerations ``d w_i/dt`` at ``u_dot = 0`` (one jvp)."""
    def wfun(xx, tt):
        return system.kinematics(xx, tt, u, params)[0]

    _, beta = jax.jvp(wfun, (xc, t), (xdot, jnp.ones_like(t)))
    return beta
