"""Solutions of Kane's equations for the flexible tree: recursive (articulated, order n)
and dense ("standard Kane"), with the internal loads of prescribed joints."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...math import spatial as sp


def articulated(system, beta, own, fu, maps, params):
    nb = system.n_bodies
    ku = [system.body_size(i) for i in range(nb)]
    off = np.concatenate([[0], np.cumsum(ku)]).astype(int)
    c = []
    for i in range(nb):
        A = maps[i][0]
        c.append(beta[i] if A is None else beta[i] - sp.mv(A, beta[system.parents[i]]))
    IA = [params["bodies"][i]["I"]["M0"] for i in range(nb)]
    pA = list(own)
    U, Dinv, uu, IAfull, pAfull = [None] * nb, [None] * nb, [None] * nb, [None] * nb, [None] * nb
    for i in reversed(range(nb)):
        A, S, _ = maps[i]
        IAfull[i], pAfull[i] = IA[i], pA[i]
        tau = fu[off[i]:off[i + 1]]
        if ku[i]:
            if system.const_leaf[i]:
                Ui, Di, Ia = params["bodies"][i]["U"], params["bodies"][i]["Dinv"], params["bodies"][i]["Ia"]
            else:
                Ui = IA[i] @ S
                D = S.T @ Ui
                # D is symmetric positive definite: its inverse by Cholesky, not by LU (whose
                # pivot permutation XLA runs as a loop on a CPU)
                Di = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(0.5 * (D + D.T)), True),
                                                jnp.eye(D.shape[0], dtype=D.dtype))
                Ia = IA[i] - Ui @ Di @ Ui.T
            U[i], Dinv[i] = Ui, Di
            uu[i] = tau - sp.mtv(S, pA[i])
            pa = pA[i] + sp.mv(Ia, c[i]) + sp.mv(Ui, sp.mv(Di, uu[i]))
        else:
            Ia = IA[i]
            pa = pA[i] + sp.mv(Ia, c[i])
        p = system.parents[i]
        if p >= 0:
            IA[p] = IA[p] + A.T @ Ia @ A
            pA[p] = pA[p] + sp.mtv(A, pa)
    a = [None] * nb
    udot = []
    for i in range(nb):
        A, S, _ = maps[i]
        p = system.parents[i]
        ap = c[i] if p < 0 else sp.mv(A, a[p]) + c[i]
        if ku[i]:
            ud = sp.mv(Dinv[i], uu[i] - sp.mtv(U[i], ap))
            a[i] = ap + sp.mv(S, ud)
            udot.append(ud)
        else:
            a[i] = ap
    loads = []
    for i in range(nb):
        Sp = maps[i][2]
        if Sp is not None:
            loads.append(sp.mtv(Sp, sp.mv(IAfull[i], a[i]) + pAfull[i]))
    ud = jnp.concatenate(udot) if udot else jnp.zeros(0)
    return ud, (jnp.concatenate(loads) if loads else jnp.zeros(0, ud.dtype))


def dense(system, xc, t, u, ws, beta, own, fu, maps, params):
    """Full mass matrix ``sum W_i^T M0_i W_i`` ("standard Kane"), Cholesky solve."""
    def wall(uu):
        return jnp.concatenate(system.kinematics(xc, t, uu, params)[0])

    W = jax.jacfwd(wall)(u)
    sizes = [6 + system.n_modes[i] for i in range(system.n_bodies)]
    o = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    M = 0.0
    rhs = fu
    for i in range(system.n_bodies):
        Wi = W[o[i]:o[i + 1]]
        M0 = params["bodies"][i]["I"]["M0"]
        M = M + Wi.T @ M0 @ Wi
        rhs = rhs - Wi.T @ (M0 @ beta[i] + own[i])
    L = jnp.linalg.cholesky(0.5 * (M + M.T))
    ud = jax.scipy.linalg.cho_solve((L, True), rhs)
    # internal loads: subtree sums projected on the prescribed partials
    wdot = [W[o[i]:o[i + 1]] @ ud + beta[i] for i in range(system.n_bodies)]
    loads = []
    for i in range(system.n_bodies):
        if maps[i][2] is None:
            continue
        dofs = [d for d, _ in system.pres[i]]
        _, thd_p = system.prescribed_values(i, t, params)
        vals = jnp.stack([thd_p[d] for d in dofs])

        def wfp(vv, i=i, dofs=dofs):
            ov = [None] * system.n_bodies
            for j in range(system.n_bodies):
                ov[j] = system.prescribed_values(j, t, params)[1]
            ov[i] = {d: vv[n] for n, d in enumerate(dofs)}
            return system.kinematics(xc, t, u, params, thd_override=ov)[0]

        Jp = jax.jacfwd(wfp)(vals)
        lam = 0.0
        for j in subtree(system, i):
            M0 = params["bodies"][j]["I"]["M0"]
            lam = lam + Jp[j].T @ (M0 @ wdot[j] + own[j])
        loads.append(lam)
    return ud, (jnp.concatenate(loads) if loads else jnp.zeros(0, ud.dtype))


def subtree(system, i):
    out = [i]
    for c in system.children(i):
        out += subtree(system, c)
    return out
