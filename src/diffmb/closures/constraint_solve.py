"""Exact constraint solves in the primal (joint) space, for many redundant closure rows.

The constrained accelerations of Fulton & Schaub (eqs. 22-25, 42-43) are the solution of
Gauss's least-constraint problem

    min_x  1/2 (x - a_f)^T M (x - a_f)   subject to   G x = b,

with ``M a_f = f`` the unconstrained (tree) dynamics. The dual route forms the
operational-space compliance ``Lambda = G M^-1 G^T`` — one row and column per closure row,
so for a 10x10 map fold a 405 x 405 matrix of rank below 100 (rigid-origami loops
over-constrain the tree, and the redundant set changes along a deployment). Here the
same problem is solved in the primal space by the method of multipliers (augmented
Lagrangian; MuJoCo's Newton solver works in the same space):

    (M + rho G^T G) x_{k+1} = f - G^T lambda_k + rho G^T b,
    lambda_{k+1} = lambda_k + rho (G x_{k+1} - b),

one ``nv x nv`` Cholesky factor per evaluation, reused by every iteration. This is the
proximal-point iteration on the dual, ``lambda_{k+1} = (Lambda + I/rho)^-1 (rhs +
lambda_k / rho)``: with ``rho = 1/mu`` two iterations are exactly the Tikhonov-regularised,
once-refined dual solve diffmb used before, and each further one multiplies the error of
a constraint direction with compliance eigenvalue ``s`` by ``1 / (1 + rho s)``. Redundant
rows need no rank decision: their multipliers stay in the range of ``G`` (the
minimum-norm multipliers), and near a fold bifurcation a direction whose eigenvalue
falls below ``1 / rho`` is enforced softly instead of exploding. ``rho`` is set relative
to the problem's own scale, ``rho = kappa mean(diag M) / max(diag G^T G)``.

``G`` is held in closure blocks (:func:`diffmb.closures.nodes.jacobian_blocks`): closure ``k``
touches only the ``L`` joints of its loop, so ``G x``, ``G^T y`` and ``G^T G`` cost
``P L`` and ``P L^2`` instead of ``P nv`` and ``P nv^2``; of ``G^T G`` only the lower
triangle is summed (all the Cholesky factorisation reads).
"""

from __future__ import annotations

import abc
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..math import block_tridiagonal as bt, small_cholesky, spatial as sp
from .nodes import buckets

#: Penalty scale ``kappa`` and number of multiplier iterations (see module docstring), by
#: precision. ``M + rho G^T G`` keeps ``M`` only to ``eps kappa``: 1e-8 in float64, but
#: float32's 7 digits would lose it entirely at 1e8. float32 takes ``kappa = 1e3`` (``M``
#: kept to 1e-4) and more iterations instead, each shrinking a constraint error by
#: ``1 / (1 + rho s)``: six of them reach float32's round-off.
KAPPA = 1e8
ITERATIONS = 3
KAPPA_FLOAT32 = 1e3
ITERATIONS_FLOAT32 = 6


def _low_precision(dtype) -> bool:
    return jnp.finfo(dtype).bits < 64


#: Closure sets with ``P * 6 * nv`` at most this are also held as a dense ``G``: products
#: with it are single matrix kernels, cheaper than gathers and scatters on small systems.
#: Measured (one map-fold vector field, 2-core CPU), dense / blocks: 18.6 / 19.1 us at
#: 3x3 (336 entries), 39.4 / 28.8 at 4x4 (1134), 111 / 70 at 6x6 (6150).
DENSE_MAX_ENTRIES = 500


def _reduced_products() -> bool:
    """Whether products with a dense ``G`` (and ``M`` beside it) are reduced elementwise
    products rather than matrix kernels: in the accelerator form
    (:func:`diffmb.math.spatial.traced_as`), where they then fuse with what feeds them
    (fold-4panel's chunk: 381.5 -> 353.5 kernels per step). On a CPU the matrix kernels
    are faster (a vmapped fold-4panel vector field: by 4-7 %)."""
    return sp.contraction_form() == "device"


class Blocks(eqx.Module):
    """``G`` in closure blocks: per bucket of closures (:func:`diffmb.closures.nodes.buckets`)
    ``(P_b, 6, L_b)`` on the joints of their loops; ``paths``/``nv`` static. ``dense``:
    the same ``G`` as a ``(P, 6, nv)`` array on small systems (else ``None``)."""

    blocks: tuple
    dense: jnp.ndarray | None
    paths: tuple = eqx.field(static=True)
    nv: int = eqx.field(static=True)

    def __init__(self, blocks, paths, nv, dense: bool | None = None):
        self.blocks, self.paths, self.nv = tuple(blocks), paths, nv
        if dense is None:
            dense = len(paths) * 6 * nv <= DENSE_MAX_ENTRIES
        self.dense = _densify(self.blocks, paths, nv) if dense else None

    @property
    def buckets(self) -> tuple:
        return _buckets(self.paths, self.nv)

    @property
    def P(self) -> int:
        return len(self.paths)

    def apply(self, x):
        """``G x`` as (P, 6)."""
        if self.dense is not None:
            if _reduced_products():
                return sp.mv(self.dense.reshape(-1, self.nv), x).reshape(-1, 6)
            return jnp.einsum("kin,n->ki", self.dense, x)
        xe = jnp.concatenate([x, jnp.zeros(1, x.dtype)])
        parts = [jnp.einsum("kil,kl->ki", B, xe[bk.dofs]) for bk, B in zip(self.buckets, self.blocks)]
        return jnp.concatenate(parts)[_closure_order(self.paths, self.nv)]

    def apply_T(self, y):
        """``G^T y`` for ``y (P, 6)``."""
        if self.dense is not None:
            if _reduced_products():
                return sp.mtv(self.dense.reshape(-1, self.nv), y.reshape(-1))
            return jnp.einsum("kin,ki->n", self.dense, y)
        c = [_per_group(bk, sp.mtv(B, y[bk.ids])).sum(1).reshape(-1) for bk, B in zip(self.buckets, self.blocks)]
        d = np.concatenate([bk.group_dofs.reshape(-1) for bk in self.buckets])
        return jnp.zeros(self.nv + 1, y.dtype).at[d].add(jnp.concatenate(c))[: self.nv]

    def gram_lower(self):
        """The lower triangle of ``G^T G (nv, nv)`` (upper triangle zero), block by block:
        only the entries a Cholesky factorisation reads are summed, by one scatter sorted
        by destination."""
        if self.dense is not None:
            G = self.dense.reshape(-1, self.nv)
            return jnp.tril(G.T @ G)
        take, into = _lower_scatter(self.paths, self.nv)
        out = jnp.zeros(self.nv * self.nv, self.blocks[0].dtype)
        out = out.at[into].add(self._gram_products()[take], indices_are_sorted=True, mode="promise_in_bounds")
        return out.reshape(self.nv, self.nv)

    def gram_values(self):
        """``G^T G`` on its nonzero lower pairs (:func:`_gram_pairs`'s order), summed by
        gathers instead of a scatter: each pair's contributions (one per loop through
        both joints) are gathered into a row of a table of their count, padded to a
        power of two, and the rows summed."""
        pos, _, _ = _lower_entries(self.paths, self.nv)
        flat = jnp.concatenate([self._gram_products()[pos], jnp.zeros(1, self.blocks[0].dtype)])
        return jnp.concatenate([flat[idx].sum(axis=1) for idx in _gram_pairs(self.paths, self.nv)[1]])

    def _gram_products(self):
        """Every closure group's ``sum_k B_k^T B_k`` on its joints, flattened and
        concatenated (:func:`_lower_entries` indexes into it)."""
        return jnp.concatenate([_gram_blocks(bk, B).reshape(-1) for bk, B in zip(self.buckets, self.blocks)])

    def gram(self):
        """``G^T G (nv, nv)``."""
        Lw = self.gram_lower()
        return Lw + Lw.T - jnp.diag(jnp.diagonal(Lw))


def _per_group(bk, a):
    """A bucket's per-closure rows ``a (P_b, ...)`` as ``(G_b, K_b, ...)`` by group (padding
    zero)."""
    G, K = bk.groups.shape
    if bk.contiguous:
        return a.reshape((G, K) + a.shape[1:])
    return jnp.concatenate([a, jnp.zeros((1,) + a.shape[1:], a.dtype)])[bk.groups]


def _gram_blocks(bk, B):
    """``sum_k B_k^T B_k (G_b, L, L)`` over each group's closures, blocks ``B (P_b, 6, L)``:
    one product over the group's ``6 K_b`` rows."""
    R = _per_group(bk, B)
    R = R.reshape(R.shape[0], -1, R.shape[-1])
    return jnp.einsum("gru,grv->guv", R, R)


def _densify(blocks, paths, nv):
    """``(P, 6, nv)`` from the bucket blocks, by products with constant one-hot matrices."""
    parts = []
    for bk, B in zip(_buckets(paths, nv), blocks):
        E = np.zeros(bk.dofs.shape + (nv + 1,))
        np.put_along_axis(E, bk.dofs[..., None], 1.0, axis=-1)
        parts.append(jnp.einsum("kil,kln->kin", B, jnp.asarray(E[..., :nv], B.dtype)))
    return jnp.concatenate(parts)[_closure_order(paths, nv)]


@functools.lru_cache(maxsize=256)
def _buckets(paths, nv):
    return buckets(paths, nv)


@functools.lru_cache(maxsize=256)
def _closure_order(paths, nv):
    ids = np.concatenate([bk.ids for bk in _buckets(paths, nv)])
    return np.argsort(ids).astype(np.int32)


@functools.lru_cache(maxsize=256)
def _lower_sel(paths, nv):
    """Per bucket the flat positions in ``(G_b, L, L)`` (:func:`_gram_blocks`) of pairs on or
    below the diagonal, and those pairs."""
    out = []
    for bk in _buckets(paths, nv):
        d = bk.group_dofs
        i, j = d[:, :, None], d[:, None, :]
        keep = (i >= j) & (i < nv) & (j < nv)
        out.append((np.flatnonzero(keep.reshape(-1)).astype(np.int32),
                    (np.broadcast_to(i, keep.shape)[keep], np.broadcast_to(j, keep.shape)[keep])))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _gram_pairs(paths, nv):
    """``(keys, tables)``: the distinct lower pairs ``(i, j)`` of ``G^T G`` as keys
    ``i (nv + 1) + j``, in the order :meth:`Blocks.gram_values` returns them, and per
    group of pairs with at most ``2^g`` contributions a ``(pairs, 2^g)`` table of their
    positions among :func:`_lower_entries` (padding: one past the end, a zero)."""
    _, rows, cols = _lower_entries(paths, nv)
    flat = rows.astype(np.int64) * (nv + 1) + cols
    uniq, inv, counts = np.unique(flat, return_inverse=True, return_counts=True)
    by_pair = np.argsort(inv, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)])
    keys, tables, lo = [], [], 0
    while lo < (counts.max() if len(counts) else 0):
        hi = max(1, 2 * lo)
        us = np.flatnonzero((counts > lo) & (counts <= hi))
        if len(us):
            table = np.full((len(us), hi), len(flat), np.int32)
            for r, u in enumerate(us):
                table[r, : counts[u]] = by_pair[starts[u]: starts[u + 1]]
            keys.append(uniq[us])
            tables.append(table)
        lo = hi
    return np.concatenate(keys) if keys else np.zeros(0, np.int64), tuple(tables)


@functools.lru_cache(maxsize=256)
def _lower_entries(paths, nv):
    """``(positions, rows, cols)``: the contributions to ``G^T G`` on or below the diagonal,
    as positions in :meth:`Blocks._gram_products` and their ``(row, column)``."""
    sizes = [bk.group_dofs.size * bk.dofs.shape[1] for bk in _buckets(paths, nv)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    pos = np.concatenate([st + sel for st, (sel, _) in zip(starts, _lower_sel(paths, nv))]).astype(np.int32)
    rows, cols = _lower_pairs(paths, nv)
    return pos, rows, cols


@functools.lru_cache(maxsize=256)
def _lower_scatter(paths, nv):
    """``(take, into)``: the lower contributions' positions in
    :meth:`Blocks._gram_products` and their flat destinations ``i nv + j``, sorted by
    destination."""
    pos, rows, cols = _lower_entries(paths, nv)
    into = rows.astype(np.int64) * nv + cols
    order = np.argsort(into, kind="stable")
    return pos[order], into[order].astype(np.int32)


@functools.lru_cache(maxsize=256)
def _lower_pairs(paths, nv):
    sel = _lower_sel(paths, nv)
    return (np.concatenate([s[1][0] for s in sel]).astype(np.int32),
            np.concatenate([s[1][1] for s in sel]).astype(np.int32))


class Factor(eqx.Module):
    """A factorisation of ``M + rho G^T G`` and what the iterations need; subclasses hold
    the factor (:class:`DenseFactor`, :class:`BandedFactor`) and apply its inverse."""

    rho: jnp.ndarray
    M: jnp.ndarray
    G: Blocks

    def solve(self, f, b, iterations: int | None = None):
        """``(x, lambda)`` of ``min 1/2 x^T M x - f^T x  s.t.  G x = b`` (``b (P, 6)``,
        zero on unconstrained rows): ``M x = f - G^T lambda``.

        Each iteration is written as a correction from residuals,
        ``x += (M + rho G^T G)^-1 (f - G^T lambda - M x - rho G^T (G x - b))``: the same
        iteration, but the right-hand side shrinks as it converges, so the round-off of
        the large penalty term (``rho |G| |b|``, which would otherwise pollute the
        unconstrained directions of ``x`` by ``eps kappa``) is refined away.
        """
        G, rho, M = self.G, self.rho, self.M
        if iterations is None:
            iterations = ITERATIONS_FLOAT32 if _low_precision(M.dtype) else ITERATIONS

        def iterate(carry):
            x, Gx, Mx, lam = carry
            x = x + self._inverse(f - G.apply_T(lam + rho * (Gx - b)) - Mx)
            Gx, Mx = self._products(x)
            return x, Gx, Mx, lam + rho * (Gx - b)

        if self._looped():
            # from x_0 = 0, lambda_0 = 0 (and their products): the first iterate is
            # A^-1 (f + rho G^T b) exactly, and the loop holds one copy of the solve
            start = (jnp.zeros_like(f), jnp.zeros_like(b), jnp.zeros_like(f), jnp.zeros_like(b))
            x, Gx, Mx, lam = self._repeat(iterations, iterate, start)
        else:  # unrolled, the zeros' products would cost 17 % of fold-4panel's run
            x = self._inverse(f + G.apply_T(rho * b))               # lambda_0 = 0, x_0 = 0
            Gx, Mx = self._products(x)
            x, Gx, Mx, lam = self._repeat(iterations - 1, iterate, (x, Gx, Mx, rho * (Gx - b)))
        # The iterates' lambda holds rho times the part of b that no x can reach (the
        # inconsistency of redundant rows: round-off, or a Baumgarte target off the
        # manifold), and rho times the round-off of G x - b. The reported multipliers
        # are instead solved from the converged dynamics, G^T lambda = f - M x, by the
        # same iteration started at zero: every update is G times a vector, so lambda
        # stays in the range of G -- the minimum-norm multipliers of redundant rows.
        # Dead code for callers that discard lambda (the vector field).
        e = f - M @ x
        lam = self._repeat(iterations, lambda lam: lam + rho * G.apply(self._inverse(e - G.apply_T(lam))),
                           jnp.zeros_like(b))
        return x, lam

    def _looped(self) -> bool:
        """Whether the iterations run in a loop, each from zero: where the solves are written
        out entry by entry (:mod:`diffmb.math.small_cholesky`), one copy of them compiles
        faster than ``iterations``."""
        return False

    @abc.abstractmethod
    def _solve(self, r):
        """``(M + rho G^T G)^-1 r`` from the factor (which carries no derivative)."""

    def _inverse(self, r):
        """``A^-1 r``, ``A = M + rho G^T G``, differentiated through ``M`` and ``G``
        (:func:`_apply_inverse`)."""
        return _apply_inverse(self, r)

    def _repeat(self, n: int, body, carry):
        """``body`` applied ``n`` times, unrolled: a small system's program is bound by its
        kernel count, not by its size."""
        for _ in range(n):
            carry = body(carry)
        return carry

    def _products(self, x):
        """``(G x (P, 6), M x)``; one matrix kernel when ``G`` is dense."""
        G = self.G
        if G.dense is None:
            return G.apply(x), self.M @ x
        P = G.P
        GM = jnp.concatenate([G.dense.reshape(6 * P, G.nv), self.M], 0)
        GM = sp.mv(GM, x) if _reduced_products() else GM @ x
        return GM[: 6 * P].reshape(P, 6), GM[6 * P:]


@jax.custom_jvp
def _apply_inverse(factor: Factor, r):
    """``A^-1 r`` with the derivative ``A^-1 (dr - dA A^-1 r)``, ``dA = dM + rho (dG^T G +
    G^T dG)``: one more solve with the factor per tangent, and products. The factor is
    built from ``stop_gradient(A)``: differentiating the Cholesky factorisation itself
    takes two triangular solves with ``nv`` right-hand sides per tangent (a 6 x 6 map
    fold's forward-mode derivative through a run took twice as long)."""
    return factor._solve(r)


@_apply_inverse.defjvp
def _apply_inverse_jvp(primals, tangents):
    factor, r = primals
    d, dr = tangents
    x = factor._solve(r)
    G, rho = factor.G, factor.rho
    dGx, dMx = d._products(x)
    dAx = dMx + rho * (d.G.apply_T(G.apply(x)) + G.apply_T(dGx))
    return x, factor._solve(dr - dAx)


class DenseFactor(Factor):
    """The dense Cholesky factor of ``M + rho G^T G``."""

    chol: jnp.ndarray
    #: ``chol`` holds ``L^-1``, not ``L`` (the ``"device"`` form: a solve is two products)
    inverted: bool = eqx.field(static=True, default=False)

    def _solve(self, r):
        if self.inverted:
            return sp.mtv(self.chol, sp.mv(self.chol, r))
        return small_cholesky.cho_solve(self.chol, r)

    def _looped(self) -> bool:
        # not with L^-1 held (the "device" form): a solve is then two products, and unrolled
        # the iterations fuse across their boundaries (fold-4panel's chunk: 461.5 -> 401.5
        # kernels per step)
        return not self.inverted and small_cholesky.written(self.chol.shape[-1])

    def _repeat(self, n: int, body, carry):
        """Unrolled, or in a loop where the solves are written out (one copy of them
        compiles faster than ``n``)."""
        if n > 1 and self._looped():
            return lax.fori_loop(0, n, lambda _, c: body(c), carry)
        return super()._repeat(n, body, carry)


class BandedFactor(Factor):
    """The block Cholesky factor of ``M + rho G^T G`` in a block-tridiagonal-with-border
    order (:mod:`diffmb.math.block_tridiagonal`)."""

    blocks: bt.Factors
    M_blocks: tuple
    plan: bt.Plan = eqx.field(static=True)

    def _solve(self, r):
        return bt.permute_out(self.plan, bt.solve(self.blocks, bt.permute_in(self.plan, r)))

    def _repeat(self, n: int, body, carry):
        """``body`` applied ``n`` times in a loop: each application holds two scans per
        solve, and one copy of them compiles faster than ``n``."""
        return lax.fori_loop(0, n, lambda _, c: body(c), carry) if n > 1 else super()._repeat(n, body, carry)

    def _products(self, x):
        """``(G x, M x)``, ``M x`` from ``M``'s blocks (its pattern is within ``A``'s)."""
        p = self.plan
        return self.G.apply(x), bt.permute_out(p, bt.matvec(*self.M_blocks, bt.permute_in(p, x)))


def _rho(M, gram_diagonal, kappa):
    if kappa is None:
        kappa = KAPPA_FLOAT32 if _low_precision(M.dtype) else KAPPA
    scale = jnp.mean(jnp.diagonal(M)) / jnp.maximum(jnp.max(gram_diagonal), 1e-300)
    return lax.stop_gradient(kappa * scale)


def factor(M, G: Blocks, kappa: float | None = None, plan: bt.Plan | None = None) -> Factor:
    """Factor ``M + rho G^T G`` with ``rho = kappa mean(diag M) / max(diag G^T G)``
    (``kappa``: :data:`KAPPA`, or :data:`KAPPA_FLOAT32` in lower precision): densely, or
    in the block order ``plan`` (:func:`plan_for`) when given."""
    if plan is not None:
        return _banded(M, G, kappa, plan)
    GtG = G.gram_lower()
    rho = _rho(M, jnp.diagonal(GtG), kappa)
    # the factorisation reads the lower triangle only, and carries no derivative (derivatives
    # go through _apply_inverse, with the full M and G)
    A = jnp.tril(M) + rho * GtG
    if sp.contraction_form() == "device" and A.ndim == 2:
        return DenseFactor(rho=rho, M=M, G=G, chol=small_cholesky.inverse_factor(lax.stop_gradient(A)), inverted=True)
    chol = small_cholesky.cholesky(lax.stop_gradient(A))
    return DenseFactor(rho=rho, M=M, G=G, chol=chol)


def _banded(M, G: Blocks, kappa, plan: bt.Plan) -> BandedFactor:
    gram = G.gram_values()
    (m_idx, g_idx), diag, pad = _storage(plan, G.paths)
    rho = _rho(M, gram[diag], kappa)
    m = jnp.concatenate([M.reshape(-1), jnp.zeros(1, M.dtype)])
    g = jnp.concatenate([gram, jnp.zeros(1, M.dtype)])
    M_blocks = tuple(m[i] for i in m_idx)
    D, E, C, B = (Mb + rho * g[j] for Mb, j in zip(M_blocks, g_idx))
    factors = bt.factor(*lax.stop_gradient((D + jnp.asarray(pad, M.dtype), E, C, B)))  # see _apply_inverse
    return BandedFactor(rho=rho, M=M, G=G, blocks=factors, M_blocks=M_blocks, plan=plan)


@functools.lru_cache(maxsize=64)
def _storage(plan: bt.Plan, paths):
    """Gather indices of the blocks ``(D, E, C, B)``: into ``M`` flattened and into
    :meth:`Blocks.gram_values` (one past the end: zero), read at ``(max(i, j), min(i,
    j))`` so that the diagonal blocks are exactly symmetric; the diagonal's positions in
    the Gram values; the padding's unit diagonal."""
    nv = plan.nv
    keys, _ = _gram_pairs(paths, nv)
    order = np.argsort(keys)
    m_idx, g_idx = [], []
    for i, j in plan.storage_pairs():
        hi, lo = np.maximum(i, j), np.minimum(i, j)
        real = hi < nv
        m_idx.append(np.where(real, hi * nv + lo, nv * nv).astype(np.int32))
        key = hi.astype(np.int64) * (nv + 1) + lo
        at = np.minimum(np.searchsorted(keys, key, sorter=order), len(keys) - 1)
        pos = order[at]
        g_idx.append(np.where(real & (keys[pos] == key), pos, len(keys)).astype(np.int32))
    diag = np.flatnonzero(keys // (nv + 1) == keys % (nv + 1)).astype(np.int32)
    return (tuple(m_idx), tuple(g_idx)), diag, plan.padding()


#: What the dense route costs per entry of an ``nv x nv`` matrix beyond its factor and
#: solves (:func:`plan_for`): the Gram's scatter into a zero matrix, ``M + rho G^T G``,
#: the dense ``M x``. Fitted on the map folds' vector fields (2-core CPU), blocks / dense:
#: 14 x 14 (nv = 201) 580-667 / 692-877 us, 20 x 20 (405) 1,500 / 2,957-3,187 us, where
#: the factor-and-solve model alone put the 14 x 14's dense route 84 us ahead.
DENSE_ENTRY_US = 4e-3


@functools.lru_cache(maxsize=64)
def plan_for(lay, paths) -> bt.Plan | None:
    """The block order of ``M + rho G^T G`` for a tree layout and its closures' loops
    (:func:`diffmb.math.block_tridiagonal.plan`), or ``None``: keep the dense factor (cached
    per structure)."""
    nv = lay.nv
    if nv < bt.MIN_NV:
        return None
    adj = lay.dof_support | lay.dof_support.T
    for dofs, _ in paths:
        d = np.asarray(dofs, np.int64)
        adj[np.ix_(d, d)] = True
    return bt.plan(adj, dense_extra_us=DENSE_ENTRY_US * nv * nv)


def numerical_rank(M, G: Blocks, tol: float = 1e-8):
    """Numerical rank of ``G`` (that of ``Lambda = G M^-1 G^T``), rows equilibrated to unit
    norm and columns scaled by ``diag(M)^-1/2``: the ``closure_rank`` diagnostic.

    Piecewise constant, so it carries no gradient; ``stop_gradient`` also keeps the
    eigenvalue derivative's ``1 / (l_i - l_j)`` of repeated eigenvalues out of reverse mode
    (it would turn the zero cotangent into NaN for every parameter).
    """
    M, blocks = lax.stop_gradient(M), lax.stop_gradient(G.blocks)
    norms = [jnp.sqrt(jnp.sum(B * B, axis=-1)) for B in blocks]
    Gn = Blocks(tuple(B / jnp.maximum(n, 1e-300)[..., None] for B, n in zip(blocks, norms)),
                G.paths, G.nv, dense=G.dense is not None)
    d = 1.0 / jnp.sqrt(jnp.diagonal(M))
    ev = jnp.linalg.eigvalsh(Gn.gram() * d[:, None] * d[None, :])
    return jnp.sum(ev > tol * jnp.max(ev)).astype(M.dtype)
