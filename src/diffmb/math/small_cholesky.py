"""Solves with the Cholesky factor of a small matrix, written out entry by entry.

A vmapped batch on a CPU runs each triangular solve of ``jax.scipy.linalg.cho_solve`` as
one LAPACK ``trsm`` call per member: for fold-4panel's ``9 x 9`` system matrix, two
kernels of 32 library calls per solve of a chunk of 32 members, and a step holds some
forty solves. Written out, forward and back substitution are chains of elementwise
operations over the batch axis that XLA fuses with their neighbours: fold-4panel's
sweep runs 1.2x faster per member (``experiments/bench_distributed.py``), its chunk
program compiles ~1 s longer. The factorisation itself stays a LAPACK call (written out
it gained 3 % for 2.4 s more compile).

Used in the ``"written"`` contraction form (:func:`diffmb.math.spatial.written_out`: CPU batch
programs) for matrices up to :data:`MAX` rows; everywhere else the library kernels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import spatial as sp

#: Largest matrix whose solves are written out: each solve is ``n^2`` operations in the
#: program.
MAX = 12


def written(n: int) -> bool:
    """Whether solves with an ``n x n`` factor are written out in the current form."""
    return n <= MAX and sp.contraction_form() == "written"


def cho_solve(L, b):
    """``(L L^T)^-1 b`` for a lower Cholesky factor ``L (n, n)`` and ``b (n,)``: forward
    and back substitution (Golub & Van Loan, algs. 3.1.1-3.1.2, the row form), written out
    when :func:`written`, else ``jax.scipy.linalg.cho_solve``."""
    n = L.shape[-1]
    if not written(n) or L.ndim != 2 or b.ndim != 1:
        return jax.scipy.linalg.cho_solve((L, True), b)
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
