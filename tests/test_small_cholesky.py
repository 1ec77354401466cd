"""Solves with a small Cholesky factor written out entry by entry (diffmb.math.small_cholesky):
the substitutions of the textbook, the same solution as LAPACK's to round-off, and only
in the written-out form of CPU batch programs."""

import jax
import jax.numpy as jnp
import numpy as np

from diffmb.math import small_cholesky, spatial as sp


def _spd(rng, n, cond):
    """A symmetric positive definite matrix with condition number ``cond``."""
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T


def _primitives(f, *args):
    """Every primitive of ``f``'s jaxpr, inner jits' included (traced anew: make_jaxpr
    keeps its traces by function object, whatever the form)."""
    out, todo = set(), [jax.make_jaxpr(lambda *a: f(*a))(*args).jaxpr]
    while todo:
        for e in todo.pop().eqns:
            out.add(e.primitive.name)
            todo += [getattr(v, "jaxpr", v) for v in e.params.values() if hasattr(getattr(v, "jaxpr", v), "eqns")]
    return out


def test_written_out_solve_equals_lapacks_to_round_off():
    """Batches of n x n systems, n = 1 .. MAX, condition 1e8 (the penalty matrix
    ``M + rho G^T G`` of the closure solve has ``kappa = 1e8``): vmapped in the written
    form, the solve's residual is at round-off relative to ``|A| |x|`` (backward stable,
    as LAPACK's) and agrees with ``jax.scipy.linalg.cho_solve`` to ``cond * eps``."""
    rng = np.random.default_rng(0)
    solve = jax.jit(jax.vmap(small_cholesky.cho_solve))
    for n in range(1, small_cholesky.MAX + 1):
        A = np.stack([_spd(rng, n, 1e8) for _ in range(8)])
        b = rng.normal(size=(8, n))
        L = np.linalg.cholesky(A)
        with sp.written_out():
            x = np.asarray(solve(L, b))
        ref = np.asarray(jax.vmap(lambda L, b: jax.scipy.linalg.cho_solve((L, True), b))(L, b))
        res = np.einsum("kij,kj->ki", A, x) - b
        scale = np.abs(A).max((1, 2)) * np.abs(x).max(1)
        assert np.all(np.abs(res).max(1) <= 64 * n * np.finfo(float).eps * scale), n
        np.testing.assert_allclose(x, ref, rtol=0, atol=1e8 * 64 * np.finfo(float).eps * np.abs(ref).max())


def test_written_out_only_in_the_written_form_and_up_to_max():
    """The default form (one trajectory, accelerators) keeps the library's triangular
    solves; the written form has none up to ``MAX`` rows and keeps them above."""
    rng = np.random.default_rng(1)
    for n in (small_cholesky.MAX, small_cholesky.MAX + 1):
        L = jnp.asarray(np.linalg.cholesky(_spd(rng, n, 10.0)))
        b = jnp.ones(n)
        assert "triangular_solve" in _primitives(small_cholesky.cho_solve, L, b)
        with sp.written_out():
            written = _primitives(small_cholesky.cho_solve, L, b)
        assert ("triangular_solve" in written) == (n > small_cholesky.MAX), n
