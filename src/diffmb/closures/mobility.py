"""How many ways a closed chain can move from a state: its mobility, said before a run.

The closure Jacobian ``G`` (rows: the independent closure rows; columns: the joint rates
other than a floating root's six) gives the *infinitesimal* mobility ``n - rank G``. At a
singular state, and a flat crease pattern is one (every crease axis lies in one plane, so
each vertex loses a rotation row), that overcounts: a square twist has infinitesimal
motions at flat but cannot fold rigidly at all. The finite mobility is found by probing:
Gauss-Newton looks for a closed state at a small distance from it (on the sphere of that
radius about the state, from a random point of the sphere). A chain that can move has
one, on a branch, where ``G`` has its generic rank and ``n - rank G`` is the branch's
dimension; a locked chain has none (the solve stalls with the closures open). Several
probes, the largest dimension found.

This is the standard numerical test for rigid foldability (e.g. Tachi's rigid origami
simulator checks the rank of the constraint Jacobian on a folded state; at flat states the
finite probe is needed because the first-order test is inconclusive).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Probe distance [rad] and count.
STEP, PROBES = 1e-2, 3


@dataclass(frozen=True)
class Mobility:
    """``dof``: the degrees of freedom found by probing (0: locked); ``infinitesimal``:
    ``n - rank G`` at the state itself; ``rank``/``rows``: independent closure rows of the
    ``rows`` given, at a generic point; ``n``: joint rates counted."""

    dof: int
    infinitesimal: int
    rank: int
    rows: int
    n: int

    @property
    def locked(self) -> bool:
        return self.dof == 0

    def __str__(self) -> str:
        head = (f"rigidly foldable, {self.dof} dof" if self.dof else
                "locked: mobility 0 — this pattern cannot fold rigidly from here")
        if self.rank < self.rows:
            head += f"; redundant: {self.rank} of {self.rows} closure rows independent"
        return head

    def as_dict(self) -> dict:
        return {"dof": self.dof, "locked": self.locked, "infinitesimal": self.infinitesimal,
                "independent_rows": self.rank, "rows": self.rows, "text": str(self)}


#: Rows are scaled to unit norm, but none by more than ``1 / ROW_FLOOR``: a row far below
#: the largest (one that an exact geometry satisfies identically, left at 1e-8 by a
#: geometry exact to 1e-13 but rounded once) carries the round-off of a null vector at
#: its own small scale, and scaled to unit norm it would hide the motion.
ROW_FLOOR = 1e-4


def rank(G: np.ndarray, tol: float = 1e-9) -> int:
    """Numerical rank of ``G`` with rows scaled to unit norm (at most by ``1 /
    ROW_FLOOR``; singular values above ``tol`` of the largest); rows below ``tol`` of
    the largest row are zero rows (a closure row that is identically satisfied) and are
    dropped before scaling."""
    G = np.asarray(G, float)
    if G.size == 0:
        return 0
    norms = np.linalg.norm(G, axis=1)
    keep = norms > tol * max(norms.max(), 1e-300)
    G = G[keep] / np.maximum(norms[keep], ROW_FLOOR * norms.max())[:, None]
    if not len(G):
        return 0
    s = np.linalg.svd(G, compute_uv=False)
    return int((s > tol * s[0]).sum())


def landings(residual, jacobian, step_q, q0: np.ndarray, cols, qcols, *, seed: int = 0,
             probes: int = PROBES, step: float = STEP, tol: float = 1e-12, directions=()) -> list:
    """The states on the closure manifold at distance ``step`` from ``q0`` that random
    probes land on (module docstring): each probe starts ``step`` away in a random
    direction and Gauss-Newton solves the closure rows together with the sphere
    ``|q - q0| = step`` (so that a probe cannot fall back into a singular start state, as
    a plain projection does at flat). ``residual(q)``: the closure rows;
    ``jacobian(q)``: their Jacobian in joint rates; ``step_q(q, dv)``: a configuration
    moved by rates ``dv``; ``cols``: the rate columns that count (all but a floating
    root's); ``qcols``: the configuration columns of the same joints (revolute or
    prismatic: one coordinate per rate, in the same order)."""
    q0 = np.asarray(q0, float)
    cols, qcols = np.asarray(cols, int), np.asarray(qcols, int)
    rng = np.random.default_rng(seed)
    nv = np.asarray(jacobian(q0)).shape[1]
    out = []
    starts = [np.asarray(d, float) for d in directions if np.any(d)]
    for k in range(len(starts) + probes):
        u = starts[k] if k < len(starts) else rng.standard_normal(len(cols))
        dv = np.zeros(nv)
        dv[cols] = step * u / np.linalg.norm(u)
        q = np.asarray(step_q(q0, dv))
        best, since = np.inf, 0
        for _ in range(100):
            off = (q - q0)[qcols]
            r = np.append(np.asarray(residual(q)), (off @ off - step * step) / step)
            size = np.abs(r).max(initial=0.0)
            if size < tol:
                out.append(q)
                break
            best, since = (size, 0) if size < 0.5 * best else (best, since + 1)
            if since >= 10:      # stalled with the closures open: no closed state on the sphere
                break
            J = np.vstack([np.asarray(jacobian(q))[:, cols], 2 * off / step])
            d = np.zeros(nv)
            d[cols] = -np.linalg.lstsq(J, r, rcond=1e-12)[0]
            q = np.asarray(step_q(q, d))
    return out


def probe(residual, jacobian, step_q, q0: np.ndarray, cols, qcols, *, rank_tol: float = 1e-9, **kw) -> Mobility:
    """The :class:`Mobility` at ``q0`` (arguments: :func:`landings`; ``rank_tol``: of
    :func:`rank`)."""
    cols = np.asarray(cols, int)
    G0 = np.asarray(jacobian(np.asarray(q0, float)))[:, cols]
    n = len(cols)
    best, generic = 0, rank(G0, rank_tol)
    for q in landings(residual, jacobian, step_q, q0, cols, qcols, **kw):
        k = rank(np.asarray(jacobian(q))[:, cols], rank_tol)
        if n - k > best:
            best, generic = n - k, k
    return Mobility(dof=int(best), infinitesimal=int(n - rank(G0, rank_tol)), rank=int(generic),
                    rows=int(G0.shape[0]), n=int(n))


def null_space(G: np.ndarray, dof: int) -> np.ndarray:
    """``(n, dof)``: the right singular vectors of ``G`` of its ``dof`` smallest singular
    values (the tangent of a branch of that dimension)."""
    _, _, vt = np.linalg.svd(np.asarray(G, float))
    return vt[-dof:].T if dof else np.zeros((G.shape[1], 0))
