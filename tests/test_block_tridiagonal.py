"""The block-tridiagonal-with-border factor of ``M + rho G^T G``
(:mod:`diffmb.math.block_tridiagonal`) against dense linear algebra: random matrices of its
pattern, the plan against the pattern of real map folds, and the constrained dynamics of
a map fold (values and derivatives) against the dense factor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.closures import constraint_solve, dynamics as cs
from diffmb.math import block_tridiagonal as bt
from diffmb.scenarios import get
from diffmb.tree import crba, rnea
from diffmb.tree.kinematics import kinematics
from diffmb.tree.layout import layout


def _dense(D, E, C, B, p):
    """The matrix the blocks hold, ``(nv, nv)`` in joint order."""
    n = p.k * p.b + p.w
    A = np.zeros((n + 1, n + 1))
    for (i, j), v in zip(p.storage_pairs(), (D, E, C, B)):
        i, j = np.where(i < p.nv, i, n), np.where(j < p.nv, j, n)
        A[i, j] = v
        A[j, i] = v
    return A[: p.nv, : p.nv]


def _random(k, b, w, pad, seed=0):
    """A random SPD matrix of the block pattern, its blocks and a plan whose last block has
    ``pad`` padded positions (the joints shuffled)."""
    rng = np.random.default_rng(seed)
    nv = k * b + w - pad
    order = rng.permutation(nv)
    order = np.concatenate([order[: k * b - pad], np.full(pad, nv), order[k * b - pad:]]).astype(np.int32)
    p = bt.Plan(nv, k, b, w, order)
    D = rng.normal(size=(k, b, b))
    D = np.einsum("kij,klj->kil", D, D) + 3 * b * np.eye(b)
    E, C = rng.normal(size=(k - 1, b, b)), rng.normal(size=(k, w, b))
    B = rng.normal(size=(w, w))
    B = B @ B.T + 10 * (k * b + w) * np.eye(w)
    real = (order < nv)
    D = D * real[: k * b].reshape(k, b)[:, :, None] * real[: k * b].reshape(k, b)[:, None, :]
    E = E * real[b: k * b].reshape(k - 1, b)[:, :, None] if k > 1 else E
    C = C * real[: k * b].reshape(k, b)[:, None, :]
    return p, D, E, C, B


@pytest.mark.parametrize("k,b,w,pad", [(5, 4, 3, 2), (4, 3, 0, 1), (1, 6, 2, 0)])
def test_block_factor_solves_the_matrix_it_holds(k, b, w, pad):
    """Solve and product in blocks equal dense linear algebra on the matrix they hold."""
    p, D, E, C, B = _random(k, b, w, pad)
    A = _dense(D, E, C, B, p)
    r = np.random.default_rng(1).normal(size=p.nv)
    x = jax.jit(lambda D, E, C, B, r: bt.permute_out(p, bt.solve(bt.factor(D, E, C, B), bt.permute_in(p, r))))(
        D + p.padding(), E, C, B, r)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, r), rtol=1e-12, atol=1e-14)
    Ar = jax.jit(lambda D, E, C, B, r: bt.permute_out(p, bt.matvec(D, E, C, B, bt.permute_in(p, r))))(D, E, C, B, r)
    np.testing.assert_allclose(np.asarray(Ar), A @ r, rtol=1e-13, atol=1e-12)


def _pattern(model, nodes):
    lay = layout(model)
    need = lay.dof_support | lay.dof_support.T
    for dofs, _ in nodes.paths:
        need[np.ix_(dofs, dofs)] = True
    return need


def _fold(n):
    sc = get("map-fold")
    return sc.build(sc.resolve({"rows": float(n), "cols": float(n)}), "baumgarte")


@pytest.fixture(scope="module")
def map6():
    """A 6 x 6 map fold (nv = 41) and a block plan forced on it, with the root's and the
    trunk's 11 joints as its border (the automatic choice keeps it dense): the same code
    as the large folds, at a size that compiles fast."""
    system, params = _fold(6)
    p = bt.plan(_pattern(params["model"], params["closures"]), min_nv=0, dense_extra_us=1e9, borders=[11])
    assert p is not None and p.k > 1 and p.w > 0, p
    return system, params, p


def _assert_holds_pattern(p, model, nodes):
    real = p.order[p.order < p.nv]
    assert sorted(real.tolist()) == list(range(model.nv))
    stored = np.zeros((model.nv + 1, model.nv + 1), bool)
    for i, j in p.storage_pairs():
        stored[i, j] = stored[j, i] = True
    missing = _pattern(model, nodes) & ~stored[: model.nv, : model.nv]
    assert not missing.any(), np.argwhere(missing)[:5]


def test_plan_holds_every_entry_of_the_pattern(map6):
    """Every pair of joints that ``M`` or a loop couples lies in a stored block (so the
    factor has no fill outside them), each joint once."""
    _, params, p = map6
    _assert_holds_pattern(p, params["model"], params["closures"])


@pytest.mark.slow  # ~18 s (builds the large folds); test_plan_holds_every_entry_of_the_pattern covers the plan
def test_large_folds_take_the_blocks_and_small_ones_stay_dense(map6):
    """The automatic choice: a 14 x 14 map fold (nv = 201) is factored in blocks (columns
    of panels, the trunk and the root as the border), a 6 x 6 one densely."""
    _, params, _ = map6
    assert cs.plan(params["model"], params["closures"]) is None
    _, big = _fold(14)
    p = cs.plan(big["model"], big["closures"])
    assert p is not None and p.k * p.b + p.w < 1.2 * big["model"].nv, p
    _assert_holds_pattern(p, big["model"], big["closures"])


@pytest.fixture(scope="module")
def problem6(map6):
    """``(M, G, f, b)`` of the 6 x 6 map fold at a generic state (a Baumgarte target,
    off the manifold)."""
    system, params, _ = map6
    model, nodes = params["model"], params["closures"]
    rng = np.random.default_rng(3)
    q0, _ = system.split(system.init_state(params))
    q = q0 + 0.2 * jnp.asarray(rng.normal(size=model.nv))
    qd = 0.3 * jnp.asarray(rng.normal(size=model.nv))

    @jax.jit
    def problem(q, qd):
        ws = kinematics(model, q, qd)
        f = 0.1 * jnp.ones(model.nv) - rnea.bias_forces_ws(model, ws)
        return crba.mass_matrix_ws(model, ws), cs.blocks(ws, nodes, model.nv), f, cs.acceleration_target(ws, nodes, (5.0, 5.0))

    return problem(q, qd)


def _assert_close(dense, blocks, rtol):
    for a, b in zip(dense, blocks):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= rtol * np.abs(a).max(), np.abs(a - b).max() / np.abs(a).max()


def test_block_factor_gives_the_dense_dynamics(map6, problem6):
    """Accelerations and multipliers by the block factor equal the dense factor's to
    1e-12 relative."""
    p = map6[2]
    dense, blocks = jax.jit(lambda a: [constraint_solve.factor(*a[:2], plan=plan).solve(*a[2:]) for plan in (None, p)])(problem6)
    _assert_close(dense, blocks, 1e-12)


def test_the_solves_derivative_equals_central_differences(problem6):
    """The derivative of the accelerations and multipliers along a direction of ``M``
    (symmetric), ``G``, ``f`` and ``b``, by ``A^-1``'s rule (no derivative of the
    factorisation, :func:`diffmb.closures.constraint_constraint_solve._apply_inverse`), equals central
    differences of the same solve to 1e-7 (they agree to 1-1.5e-9, the differences'
    round-off at h = 1e-6). One program gives both: the differences read its values."""
    rng = np.random.default_rng(5)
    tangents = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)), problem6)
    tangents = ((tangents[0] + tangents[0].T) / 2,) + tuple(tangents[1:])
    jvp = jax.jit(lambda prim, tan: jax.jvp(lambda M, G, f, b: constraint_solve.factor(M, G).solve(f, b), prim, tan))
    h = 1e-6
    shifted = [jax.tree.map(lambda a, t, s=s: a + s * h * t, problem6, tangents) for s in (1, -1)]
    (_, derivative), (plus, _), (minus, _) = (jvp(p, tangents) for p in [problem6, *shifted])
    differences = [(a - b) / (2 * h) for a, b in zip(plus, minus)]
    _assert_close(derivative, differences, 1e-7)


@pytest.mark.slow
def test_block_factor_gives_the_dense_derivatives(map6, problem6):
    """Derivatives of the accelerations and multipliers along a direction of ``M``,
    ``G``, ``f`` and ``b`` (through the block Cholesky's scans) equal the dense factor's
    to 1e-12 relative. ``M``'s direction is symmetric and has ``M``'s pattern, as every
    derivative of a mass matrix has (the blocks hold only that pattern)."""
    _, params, p = map6
    rng = np.random.default_rng(4)
    tangents = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)), problem6)
    support = layout(params["model"]).dof_support
    tangents = ((tangents[0] + tangents[0].T) * (support | support.T).astype(float),) + tuple(tangents[1:])

    def dynamics(M, G, f, b, plan):
        return constraint_solve.factor(M, G, plan=plan).solve(f, b)

    both = jax.jit(lambda prim, tan: [jax.jvp(lambda *a: dynamics(*a, plan), prim, tan)[1] for plan in (None, p)])
    dense, blocks = both(problem6, tangents)
    _assert_close(dense, blocks, 1e-12)
