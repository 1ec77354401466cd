"""Sparse Cholesky of ``M + rho G^T G`` for large closed trees: block tridiagonal plus a border.

The joint-space solve of :mod:`diffmb.closures.constraint_solve` factors ``A = M + rho G^T G``
once per evaluation. ``A`` couples two joints when one supports the other (the mass
matrix's tree pattern) or when they lie on a common loop (``G^T G``). On a large fold
that is far from dense: in a ``20 x 20`` map fold (``nv = 405``) the columns of panels
are chains hanging from a trunk, each loop joins two neighbouring columns through one
trunk hinge, and only the trunk and the root touch every column. Ordering the joints
so that the trunk comes last and the rest follow one another column by column makes
``A`` *block tridiagonal with a border*:

    [ D_0  E_0^T                C_0^T ]
    [ E_0  D_1   E_1^T          C_1^T ]
    [      E_1   D_2   ...      C_2^T ]      D_t, E_t: b x b;  C_t: w x b;  B: w x w
    [            ...   D_k-1    ...   ]
    [ C_0  C_1   C_2   ...      B     ]

and its Cholesky factor keeps that pattern (no fill outside it). The block Cholesky
(Golub & Van Loan, *Matrix Computations*, 4.5) runs down the diagonal in one
``lax.scan``:

    L_t = chol(D_t - F_{t-1} F_{t-1}^T),     F_t = E_t L_t^-T,
    W_t = (C_t - W_{t-1} F_{t-1}^T) L_t^-T,  L_B = chol(B - sum_t W_t W_t^T),

``O(k b^3 + k w b^2 + w^3)`` work instead of ``nv^3 / 3``, and the solves are two
scans of ``b x b`` triangular solves. MuJoCo factors the mass matrix along the tree
(sparse ``LDL^T``) and works in the constraint space; diffmb's primal solve needs the
factor of the sum, whose loops add fill that the tree order alone does not bound.

:func:`plan` chooses the ordering from the pattern alone, once per structure (NumPy):
for each candidate border (the ``w`` most connected joints, cut at changes of degree)
the remaining joints are ordered by reverse Cuthill-McKee and cut into blocks of their
bandwidth ``b``, which makes them block tridiagonal; the candidate with the smallest
estimated cost wins, and ``None`` (keep the dense factor) when no candidate beats it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import small_cholesky

#: Cost model, in microseconds on one CPU core (2-core AMD EPYC, fitted to the factor
#: of the map folds' block shapes and to dense factors of 100-450 unknowns): small
#: blocks run at a fifth of LAPACK's speed on a large matrix, each block step costs a
#: handful of kernels, and a dense solve pays for a copy of its factor.
FLOP_US = 3e-4
STEP_US = 19.0
SOLVE_STEP_US = 2.5
DENSE_FLOP_US = 6e-5
DENSE_SOLVE_US = 1.8e-3
#: Solves per factor in one evaluation (three multiplier iterations and the last).
SOLVES = 4
#: Below this many velocities the dense factor is kept whatever the model says: the
#: blocks' kernels cost more than they save (measured at ``nv = 113``: equal).
MIN_NV = 150


@dataclass(frozen=True, eq=False)
class Plan:
    """The block ordering of one structure: ``k`` blocks of ``b`` joints, then a border
    of ``w``. ``order (k b + w,)``: the joint at each position, ``nv`` for padding (the
    last block is padded with unit diagonal entries)."""

    nv: int
    k: int
    b: int
    w: int
    order: np.ndarray

    @property
    def positions(self) -> np.ndarray:
        """``(nv,)``: each joint's position in :attr:`order`."""
        pos = np.empty(self.nv, np.int32)
        real = self.order < self.nv
        pos[self.order[real]] = np.flatnonzero(real)
        return pos

    def storage_pairs(self):
        """``(i, j)`` joint pairs (``nv``: none) of every entry of ``(D, E, C, B)``."""
        k, b, w = self.k, self.b, self.w
        blocks = self.order[: k * b].reshape(k, b)
        border = self.order[k * b:]
        D = (blocks[:, :, None], blocks[:, None, :])
        E = (blocks[1:, :, None], blocks[:-1, None, :])
        C = (np.broadcast_to(border[None, :, None], (k, w, b)), np.broadcast_to(blocks[:, None, :], (k, w, b)))
        B = (border[:, None], border[None, :])
        return tuple(tuple(np.broadcast_arrays(*p)) for p in (D, E, C, B))

    def padding(self) -> np.ndarray:
        """``(k, b, b)``: ones on the diagonal of padded positions."""
        pad = (self.order[: self.k * self.b] >= self.nv).reshape(self.k, self.b)
        return pad[:, :, None] * np.eye(self.b)


def _cost(k: int, b: int, w: int) -> float:
    """Estimated microseconds of one factor and :data:`SOLVES` solves in blocks."""
    flops = k * (b**3 / 3 + 4 * b**3 + 3 * w * b**2) + w * w * k * b + w**3 / 3
    return FLOP_US * flops + STEP_US * k + SOLVES * (SOLVE_STEP_US * k + 2 * FLOP_US * (k * b * b * 2 + w * k * b))


def _dense_cost(n: int) -> float:
    return DENSE_FLOP_US * n**3 / 3 + SOLVES * DENSE_SOLVE_US * n**2


def _blocks(adj) -> list:
    """Block lengths that make ``adj`` (already ordered) block tridiagonal, the least
    padded work over the choice of the first block: each later block is the shortest
    that holds every neighbour of the block before it (a level structure)."""
    n = adj.shape[0]
    if n == 0:
        return []
    idx = np.arange(n)
    reach = np.where(adj, idx[None, :], -1).max(axis=1)        # last neighbour of each
    reach = np.maximum.accumulate(np.maximum(reach, idx))      # of each prefix
    best, best_cost = None, np.inf
    for first in range(1, n + 1):
        lengths, end = [first], first
        while end < n:
            nxt = max(int(reach[end - 1]) + 1, end + 1)
            lengths.append(min(nxt, n) - end)
            end = min(nxt, n)
        cost = _cost(len(lengths), max(lengths), 0)
        if cost < best_cost:
            best, best_cost = lengths, cost
        if first >= max(lengths[1:], default=first):
            break
    return best


def plan(adjacency: np.ndarray, min_nv: int = MIN_NV, dense_extra_us: float = 0.0,
         borders=None) -> Plan | None:
    """The cheapest block ordering of a symmetric pattern ``adjacency (nv, nv)``, or
    ``None`` when the dense factor is cheaper (or ``nv < min_nv``). ``dense_extra_us``:
    what the dense route costs the caller beyond its factor and solves; ``borders``: the
    border sizes to try (default: every change of degree, up to ``nv / 2``)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    adj = np.asarray(adjacency, bool)
    adj = adj | adj.T
    n = adj.shape[0]
    if n < min_nv:
        return None
    deg = adj.sum(1) - np.diag(adj)
    by_degree = np.argsort(-deg, kind="stable")
    cuts = borders if borders is not None else (
        [0] + [w for w in range(1, n // 2 + 1) if deg[by_degree[w - 1]] > deg[by_degree[w]]])
    best, best_cost = None, _dense_cost(n) + dense_extra_us
    for w in cuts:
        border = by_degree[:w]
        rest = np.setdiff1d(np.arange(n), border)
        perm = rest[reverse_cuthill_mckee(csr_matrix(adj[np.ix_(rest, rest)]), symmetric_mode=True)]
        lengths = _blocks(adj[np.ix_(perm, perm)])
        k, b = len(lengths), max(lengths)
        cost = _cost(k, b, w)
        if cost < best_cost:
            order = np.full((k, b), n, np.int32)
            at = np.cumsum([0] + lengths)
            for t in range(k):
                order[t, : lengths[t]] = perm[at[t]: at[t + 1]]
            order = np.concatenate([order.reshape(-1), border[::-1]]).astype(np.int32)  # the root last
            best, best_cost = Plan(n, k, b, w, order), cost
    return best


# ------------------------------------------------------------------ numerical part


class Factors(NamedTuple):
    """The block factor as the solves use it. With ``Li_t = L_t^-1`` (explicit: the
    solves then are products only, one per block step):

    ``Li (k, b, b)``; ``P_t = Li_t F_{t-1}`` (``P_0 = 0``); ``Q_t = Li_t^T F_t^T``
    (``Q_{k-1} = 0``); ``R_t = Li_t^T W_t^T (k, b, w)``; ``W (k, w, b)``; ``LBi = L_B^-1``.
    """

    Li: jnp.ndarray
    P: jnp.ndarray
    Q: jnp.ndarray
    R: jnp.ndarray
    W: jnp.ndarray
    LBi: jnp.ndarray


def factor(D, E, C, B) -> Factors:
    """The block Cholesky factor (module docstring) of the matrix with diagonal blocks
    ``D (k, b, b)``, sub-diagonal ``E (k-1, b, b)`` (``E_t = A[t+1, t]``), border rows
    ``C (k, w, b)`` and corner ``B (w, w)``. ``D`` and ``B`` are passed whole (both
    triangles): the Cholesky derivative rule assumes a symmetric tangent.

    One step per diagonal block, each a factor, a triangular inverse and two products
    (``F_{t-1}`` and ``W_{t-1}`` updated together, ``E_t`` and ``C_t`` mapped together):
    on a CPU a block step costs its kernels' count more than its flops.
    """
    k, b, _ = D.shape
    w = B.shape[0]
    dt = D.dtype

    def step(carry, blocks):
        FW = carry                                   # [F_{t-1}; W_{t-1}]  (b + w, b)
        Dt, ECt = blocks                             # D_t, [E_t; C_t]
        upd = FW @ FW[:b].T                          # [F F^T; W F^T]
        Li = small_cholesky.inverse_factor(Dt - upd[:b])
        ECt = ECt - jnp.concatenate([jnp.zeros((b, b), dt), upd[b:]])
        FWn = ECt @ Li.T                             # [F_t; W_t] = [E_t; C_t - W F^T] L_t^-T
        return FWn, (Li, FWn)

    EC = jnp.concatenate([jnp.concatenate([E, jnp.zeros((1, b, b), dt)]), C], axis=1)
    _, (Li, FW) = lax.scan(step, jnp.zeros((b + w, b), dt), (D, EC))
    F, W = FW[:-1, :b], FW[:, b:]
    P = jnp.concatenate([jnp.zeros((1, b, b), dt), Li[1:] @ F])
    Q = jnp.concatenate([jnp.swapaxes(F @ Li[:-1], 1, 2), jnp.zeros((1, b, b), dt)])
    R = jnp.swapaxes(W @ Li, 1, 2)
    if w:
        Wf = jnp.swapaxes(W, 0, 1).reshape(w, k * b)
        LBi = small_cholesky.inverse_factor(B - Wf @ Wf.T)
    else:
        LBi = jnp.zeros((0, 0), dt)
    return Factors(Li, P, Q, R, W, LBi)


def solve(fac: Factors, r):
    """``A^-1 r`` for ``r (k b + w,)`` in block order: ``y = L^-1 r`` forward, ``x = L^-T
    y`` backward, each one product per block step."""
    k, b, _ = fac.Li.shape
    dt = fac.Li.dtype
    rT, rB = r[: k * b].reshape(k, b), r[k * b:]
    a = jnp.einsum("tij,tj->ti", fac.Li, rT)

    def forward(y, blocks):
        Pt, at = blocks
        y = at - Pt @ y
        return y, y

    _, y = lax.scan(forward, jnp.zeros(b, dt), (fac.P, a))
    yB = fac.LBi @ (rB - jnp.einsum("twb,tb->w", fac.W, y))
    xB = fac.LBi.T @ yB
    c = jnp.einsum("tji,tj->ti", fac.Li, y) - jnp.einsum("tiw,w->ti", fac.R, xB)

    def backward(x, blocks):
        Qt, ct = blocks
        x = ct - Qt @ x
        return x, x

    _, x = lax.scan(backward, jnp.zeros(b, dt), (fac.Q, c), reverse=True)
    return jnp.concatenate([x.reshape(-1), xB])


def matvec(D, E, C, B, x):
    """The product of the matrix the blocks hold (module docstring) with ``x (k b + w,)``
    in block order: ``O(k b^2 + w k b)`` instead of ``nv^2``."""
    k, b, _ = D.shape
    xT, xB = x[: k * b].reshape(k, b), x[k * b:]
    yT = jnp.einsum("tij,tj->ti", D, xT) + jnp.einsum("twi,w->ti", C, xB)
    if k > 1:
        below = jnp.einsum("tij,tj->ti", E, xT[:-1])        # E_t x_t, into block t + 1
        above = jnp.einsum("tji,tj->ti", E, xT[1:])         # E_t^T x_{t+1}, into block t
        zero = jnp.zeros((1, b), x.dtype)
        yT = yT + jnp.concatenate([zero, below]) + jnp.concatenate([above, zero])
    yB = jnp.einsum("twi,ti->w", C, xT) + B @ xB
    return jnp.concatenate([yT.reshape(-1), yB])


def permute_in(p: Plan, r):
    """``r (nv,)`` in block order (padding zero)."""
    return jnp.concatenate([r, jnp.zeros(1, r.dtype)])[jnp.asarray(p.order)]


def permute_out(p: Plan, x):
    """Block order -> ``(nv,)``."""
    return x[jnp.asarray(p.positions)]
