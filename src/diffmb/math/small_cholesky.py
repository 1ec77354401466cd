"""The Cholesky factor of a small matrix and solves with it, written out where a library
call costs more than it computes.

A vmapped batch on a CPU runs each triangular solve of ``jax.scipy.linalg.cho_solve`` as
one LAPACK ``trsm`` call per member: for fold-4panel's ``9 x 9`` system matrix, two
kernels of 32 library calls per solve of a chunk of 32 members, and a step holds some
forty solves. Written out, forward and back substitution are chains of elementwise
operations over the batch axis that XLA fuses with their neighbours: fold-4panel's
sweep runs 1.2x faster per member (``experiments/bench_distributed.py``), its chunk
program compiles ~1 s longer. On a CPU the factorisation itself stays a LAPACK call
(written out it gained 3 % for 2.4 s more compile).

On an accelerator (the ``"device"`` form, :func:`diffmb.math.spatial.traced_as`) nothing
here is a library call: a cuSOLVER Cholesky or cuBLAS triangular solve is a fusion barrier
and keeps a loop that holds it from being captured as one device graph. Up to :data:`MAX`
rows the factor and the solves are written out entry by entry (Golub & Van Loan, alg.
4.2.1, the ``gaxpy`` Cholesky, and algs. 3.1.1-3.1.2); beyond, they are loops of known
trip count over the columns (one masked matrix-vector product per column).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from . import spatial as sp

#: Largest matrix whose factor and solves are written out entry by entry: each is ``n^2``
#: (solves) or ``n^3 / 6`` (factor) operations in the program.
MAX = 12


def written(n: int) -> bool:
    """Whether solves with an ``n x n`` factor avoid the library in the current form
    (written out or, in the ``"device"`` form beyond :data:`MAX`, looped)."""
    form = sp.contraction_form()
    return form == "device" or (n <= MAX and form == "written")


def _unbatched(*arrays) -> bool:
    return all(a.ndim == nd for a, nd in arrays)


def cholesky(A):
    """The lower Cholesky factor of ``A (n, n)``, read from its lower triangle:
    ``lax.linalg.cholesky`` except in the ``"device"`` form, where it is
    :func:`_right_looking` (up to :data:`UNROLLED_MAX` rows) or a loop over the columns."""
    if sp.contraction_form() != "device" or not _unbatched((A, 2)):
        return lax.linalg.cholesky(A, symmetrize_input=False)
    return _right_looking(A) if A.shape[-1] <= UNROLLED_MAX else _cholesky_loop(A)


def inverse_factor(A):
    """``L^-1`` of the lower Cholesky factor ``L`` of ``A (n, n)`` (its lower triangle
    read): in the ``"device"`` form the elimination of ``[A | I]`` (:func:`_eliminated_inverse`),
    so that a solve is two matrix-vector products; else :func:`lower_inverse` of
    :func:`cholesky`."""
    if sp.contraction_form() != "device" or not _unbatched((A, 2)):
        return lower_inverse(cholesky(A))
    if A.shape[-1] <= UNROLLED_MAX:
        return _eliminated_inverse(A)
    return lower_inverse(_cholesky_loop(A))


#: Largest matrix factored by :func:`_right_looking` unrolled (``O(n)`` whole-matrix
#: operations in the program); beyond, loops of known trip count.
UNROLLED_MAX = 48


def _right_looking(A):
    """``L``: the outer-product Cholesky (Golub & Van Loan alg. 4.2.2), one elementwise
    update of the whole matrix per column (XLA fuses each into a kernel or two; entry by
    entry, every division was a kernel of its own: 45 for a 9 x 9 factor)."""
    n = A.shape[-1]
    idx = jnp.arange(n)
    S = jnp.tril(A)
    cols = []
    for j in range(n):
        d = jnp.sqrt(S[j, j])
        c = jnp.where(idx >= j, S[:, j] / d, 0.0)
        cols.append(c)
        if j + 1 < n:
            S = S - c[:, None] * c[None, :]
    return jnp.stack(cols, axis=1)


def _eliminated_inverse(A):
    """``L^-1`` by Gaussian elimination of ``[A | I]`` without pivoting (``A`` symmetric
    positive definite, read from its lower triangle): column ``j`` subtracts
    ``A_ij / A_jj`` times row ``j`` from every row below it, which leaves ``[D L^T | L_1^-1]``
    with ``L = L_1 D^1/2`` (the ``L D L^T`` form of Golub & Van Loan alg. 4.1.2); the rows
    of ``L_1^-1`` scaled by ``D^-1/2`` are ``L^-1``. One whole-array update per column
    and no square root until the end: XLA fuses a column into about two kernels (batched,
    alone: 16 for a 9 x 9 matrix and 80 for a 41 x 41, where the outer-product Cholesky
    with the identity eliminated beside it took 20 and 100)."""
    n = A.shape[-1]
    S = jnp.tril(A) + jnp.tril(A, -1).T
    W = jnp.concatenate([S, jnp.eye(n, dtype=A.dtype)], axis=1)
    below = jnp.arange(n)[:, None]
    for j in range(n - 1):
        W = jnp.where(below > j, W - (W[:, j] / W[j, j])[:, None] * W[j][None, :], W)
    return W[:, n:] / jnp.sqrt(jnp.diagonal(W[:, :n]))[:, None]


def _cholesky_loop(A):
    """Column by column (left-looking): ``v = A[:, j] - L L[j]^T`` (the columns from ``j``
    on still zero), ``L[:, j] = v / sqrt(v_j)`` below the diagonal."""
    n = A.shape[-1]
    i = jnp.arange(n)

    def column(j, L):
        v = lax.dynamic_index_in_dim(A, j, 1, keepdims=False) - L @ lax.dynamic_index_in_dim(L, j, 0, False)
        d = jnp.sqrt(v[j])
        return lax.dynamic_update_index_in_dim(L, jnp.where(i > j, v / d, jnp.where(i == j, d, 0.0)), j, 1)

    return lax.fori_loop(0, n, column, jnp.zeros_like(A))


def cho_solve(L, b):
    """``(L L^T)^-1 b`` for a lower Cholesky factor ``L (n, n)`` and ``b (n,)``: forward
    and back substitution (Golub & Van Loan, algs. 3.1.1-3.1.2, the row form), written out
    (or looped, :func:`written`), else ``jax.scipy.linalg.cho_solve``."""
    n = L.shape[-1]
    if not written(n) or not _unbatched((L, 2), (b, 1)):
        return jax.scipy.linalg.cho_solve((L, True), b)
    if n > MAX:
        return _back_loop(L, _forward_loop(L, b))
    y = []
    for i in range(n):
        s = b[i]
        for k in range(i):
            s = s - L[i, k] * y[k]
        y.append(s / L[i, i])
    x = [None] * n
    for i in reversed(range(n)):
        s = y[i]
        for k in range(i + 1, n):
            s = s - L[k, i] * x[k]
        x[i] = s / L[i, i]
    return jnp.stack(x)


def _forward_loop(L, b):
    """``L^-1 b`` row by row (the entries from ``i`` on still zero)."""
    def row(i, y):
        Li = lax.dynamic_index_in_dim(L, i, 0, False)
        return y.at[i].set((b[i] - Li @ y) / Li[i])

    return lax.fori_loop(0, L.shape[-1], row, jnp.zeros_like(b))


def _back_loop(L, y):
    """``L^-T y`` from the last row up (the entries up to ``i`` still zero)."""
    n = L.shape[-1]

    def row(k, x):
        i = n - 1 - k
        Ci = lax.dynamic_index_in_dim(L, i, 1, False)
        return x.at[i].set((y[i] - Ci @ x) / Ci[i])

    return lax.fori_loop(0, n, row, jnp.zeros_like(y))


def lower_inverse(L):
    """``L^-1`` of a lower triangular ``L (n, n)``: forward substitution on the identity's
    columns in the ``"device"`` form, else ``lax.linalg.triangular_solve``."""
    n = L.shape[-1]
    eye = jnp.eye(n, dtype=L.dtype)
    if sp.contraction_form() != "device" or not _unbatched((L, 2)):
        return lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    if n > UNROLLED_MAX:
        return jax.vmap(lambda e: _forward_loop(L, e), out_axes=1)(eye)
    idx = jnp.arange(n)
    X = eye
    for j in range(n):                                       # column-oriented (alg. 3.1.4)
        yj = X[j] / L[j, j]
        below = jnp.where(idx > j, L[:, j], 0.0)
        X = jnp.where((idx == j)[:, None], yj[None, :], X - below[:, None] * yj[None, :])
    return X
