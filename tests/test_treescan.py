"""The tree sweeps (diffmb.tree.scan) and the algorithms built on them.

Every sweep has a small-tree form (dense ancestor products, unrolled pose composition)
and a large-tree form (pointer doubling); both are checked against plain loops over the
parent array and against each other on the full dynamics, and the traced graph is
checked not to grow with the number of bodies (what keeps compile time flat).
"""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.math import spatial as sp
from diffmb.tree import aba, crba, rnea, scan
from diffmb.tree.kinematics import kinematics
from diffmb.tree.layout import layout
from helpers import make_random_model, random_state


def _loop_ancestors(parents, x):
    y = np.array(x, float)
    for i, p in enumerate(parents):
        if p >= 0:
            y[i] = y[i] + y[p]
    return y


def _loop_subtree(parents, x):
    y = np.array(x, float)
    for i in reversed(range(len(parents))):
        if parents[i] >= 0:
            y[parents[i]] = y[parents[i]] + y[i]
    return y


@pytest.fixture(params=["small-tree forms", "doubling", "small-tree forms, accelerator form"])
def sweep_path(request, monkeypatch):
    if request.param == "doubling":
        monkeypatch.setattr(scan, "DENSE_MAX_BODIES", 0)
        monkeypatch.setattr(scan, "UNROLL_MAX_BODIES", 0)
    else:
        monkeypatch.setattr(scan, "DENSE_MAX_BODIES", 10_000)
        monkeypatch.setattr(scan, "UNROLL_MAX_BODIES", 10_000)
    if "accelerator" in request.param:  # sums along the tree by reduced products, not matrix kernels
        monkeypatch.setattr(sp, "contraction_form", lambda: "device")
    return request.param


@pytest.mark.parametrize("n_bodies", [1, 7, 23])
def test_sweeps_match_loops(sweep_path, n_bodies):
    model = make_random_model(3, n_bodies=n_bodies, with_fixed=False)
    lay = layout(model)
    rng = np.random.default_rng(n_bodies)
    x = rng.standard_normal((model.n_bodies, 6, 2))
    np.testing.assert_allclose(scan.ancestors_sum(lay, jnp.asarray(x)),
                               _loop_ancestors(model.parents, x), atol=1e-13)
    np.testing.assert_allclose(scan.subtree_sum(lay, jnp.asarray(x)),
                               _loop_subtree(model.parents, x), atol=1e-13)
    E = np.stack([np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(model.n_bodies)])
    r = rng.standard_normal((model.n_bodies, 3))
    Ew, rw = scan.compose_poses(lay, jnp.asarray(E), jnp.asarray(r))
    for i, p in enumerate(model.parents):
        if p < 0:
            np.testing.assert_allclose(Ew[i], E[i], atol=1e-14)
            np.testing.assert_allclose(rw[i], r[i], atol=1e-14)
        else:  # X_i = X_loc,i after X_p: E_i = E_loc E_p, r_i = r_p + E_p^T r_loc
            np.testing.assert_allclose(Ew[i], E[i] @ np.asarray(Ew[p]), atol=1e-12)
            np.testing.assert_allclose(rw[i], np.asarray(rw[p]) + np.asarray(Ew[p]).T @ r[i], atol=1e-12)


def _dynamics(model, q, qd, tau):
    ws = kinematics(model, q, qd)
    return (ws.rot, ws.pos, ws.vel, ws.acc, crba.mass_matrix_ws(model, ws), rnea.bias_forces_ws(model, ws),
            aba.forward_dynamics_ws(model, ws, tau))


# the free base (~4 s) in the slow job: the default job keeps the fixed base, and a free root
# past the small-tree limits (test_articulated_body_algorithm_inverts_the_rnea_on_large_trees)
@pytest.mark.parametrize("base", [pytest.param("free", marks=pytest.mark.slow), "fixed"])
def test_small_tree_forms_and_doubling_give_the_same_dynamics(base, monkeypatch):
    model = make_random_model(11, n_bodies=14, base=base)
    q, qd = random_state(model, 4)
    tau = np.random.default_rng(5).standard_normal(model.nv)
    # one program per form (a new function each, so the second is traced with the patched
    # limits), instead of some 250 operations compiled one by one
    form = lambda: jax.jit(lambda q, qd, tau: _dynamics(model, q, qd, tau))(q, qd, tau)
    small = form()
    monkeypatch.setattr(scan, "DENSE_MAX_BODIES", 0)
    monkeypatch.setattr(scan, "UNROLL_MAX_BODIES", 0)
    doubled = form()
    for a, b in zip(small, doubled):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    M, C, qdd = (np.asarray(x) for x in small[4:])
    np.testing.assert_allclose(M @ qdd, tau - C, atol=1e-9 * max(1.0, np.abs(tau - C).max()))


def _chain(n, kind="revolute", branch=False):
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_body("b0", "world", "free", mass=2.0, inertia=np.diag([0.2, 0.3, 0.4]))
    for i in range(1, n):
        parent = f"b{(i - 1) // 2 if branch else i - 1}"
        b.add_body(f"b{i}", parent, kind, axis=(np.cos(i), np.sin(i), 0.3), pos=(0.3, 0.1 * (i % 3), 0.0),
                   mass=1.0, com=(0.15, 0.0, 0.0), inertia=np.diag([0.01, 0.02, 0.02]))
    return b.build()


@pytest.mark.parametrize("branch", [False, True])
def test_articulated_body_algorithm_inverts_the_rnea_on_large_trees(branch):
    model = _chain(60, branch=branch)
    q, qd = random_state(model, 1, scale=0.5)
    tau = np.random.default_rng(2).standard_normal(model.nv)
    qdd = diffmb.forward_dynamics(model, q, qd, tau)
    np.testing.assert_allclose(diffmb.inverse_dynamics(model, q, qd, qdd), tau, atol=1e-9)
    qdd_crba = diffmb.forward_dynamics(model, q, qd, tau, algorithm="dense")
    # The two algorithms' round-off differs by cond(M) eps times the solution's norm, not
    # each entry's size (cond(M) = 6e6 for the 60-body chain): measured 4.1e-11 (4.6e-11
    # with X^T I X for the world inertias) of the largest acceleration; branched (cond 2e4)
    # 1.2e-14.
    scale = np.abs(np.asarray(qdd_crba)).max()
    np.testing.assert_allclose(qdd, qdd_crba, rtol=0, atol=1e-10 * scale)


def _n_eqns(model):
    q = jnp.zeros(model.nv)

    def f(q, qd, tau):
        return (diffmb.forward_dynamics(model, q, qd, tau), diffmb.inverse_dynamics(model, q, qd, tau),
                diffmb.mass_matrix(model, q))

    jaxpr = jax.make_jaxpr(f)(q, q, q)

    def count(jp):
        n = len(jp.eqns)
        for e in jp.eqns:
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                n += count(sub)
        return n

    return count(jaxpr.jaxpr)


def test_traced_graph_does_not_grow_with_the_tree():
    """The compile cost follows the traced graph: trees of 128 and 512 bodies (both past the
    small-tree forms) must trace to about the same number of operations (pointer doubling
    adds a few per extra round: log2 depth)."""
    assert scan.DENSE_MAX_BODIES < 128 and scan.UNROLL_MAX_BODIES < 128
    small, large = _n_eqns(_chain(128, branch=True)), _n_eqns(_chain(512, branch=True))
    assert large < 1.15 * small, (small, large)
    chain_small, chain_large = _n_eqns(_chain(128)), _n_eqns(_chain(512))
    assert chain_large < 1.15 * chain_small, (chain_small, chain_large)
