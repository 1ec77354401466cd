"""The nearest rigidly foldable geometry of a pattern that its file's rounding locked.

A rigidly foldable pattern is a special geometry: a generic perturbation of a Miura-ori's
vertices locks it (its degree-4 vertices each keep one degree of freedom, but the loops
between them no longer agree). Files round their coordinates (Origami Simulator's
``miura-ori.svg`` holds them to 1e-3 px, and its vertices drift by 2e-3 px from the
exact Miura), so such a file builds as locked: that is the rank of the geometry it
holds, not the pattern its author drew.

:func:`nearest_rigid` moves the flat vertices as little as it can to a geometry that has
folded states at several fold depths. The unknowns (all flat vertices shared between panels):

* ``X`` — the flat vertex positions (``m x 2``);
* one folded state per depth — each panel's rotation ``R_p`` and translation ``t_p``,
  with a vertex ``x`` of panel ``p`` at ``R_p (x - o_p) + t_p``.

The equations: in every state every vertex lands at one point from every panel that
holds it (the closures, in the form of a vertex model rather than the tree's); each
state's fold angles lie on the sphere ``sum theta^2 = rho^2`` of its depth (so it can
neither fall back to flat, where every geometry closes, nor drift to another depth); and
an interior vertex that meets Kawasaki's condition as drawn (to ``KAWASAKI_TOL``) keeps
meeting it. One folded state is not enough: a geometry moved to close at one depth
closes there alone (measured on Origami Simulator's Miura, 156 panels: a geometry
mobile at 5 % misses closing at 10 % by 3e-9 m, at 30 % by 3e-8 m). Held at three
depths, it closes at the depths between and beyond them (tested), and the build's own
probe of the repaired pattern (:mod:`diffmb.closures.mobility`) then says whether it folds.

The solve: Levenberg-Marquardt for each folded state at the file's geometry (its
residual is what the rounding costs), then Gauss-Newton for the point of the solution
set nearest to the file's vertices. Each step eliminates the states exactly: with
``J_p`` a state's Jacobian in its poses, only the part of its equations outside the
range of ``J_p`` constrains ``X``; the step in ``X`` is the minimum-norm correction of
``X - X0`` within those, and each state then follows by least squares.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.spatial import cKDTree

from .polygon import polygon_signed_area

#: The fold depths of the folded states: each as if every crease were at
#: ``fraction * pi`` on its assignment's side, in the root-mean-square sense.
FRACTIONS = (0.05, 0.15, 0.3)
#: An interior vertex whose alternate sector angles sum to pi within this [rad] as
#: drawn is flat-foldable as meant, and the repair keeps it so (Kawasaki's condition).
KAWASAKI_TOL = 1e-4


@dataclass(frozen=True)
class Repair:
    """``vertices``: each panel's new flat outline ``(k, 3)`` (a list, in the panels'
    order); ``moved``: the largest vertex move [m]; ``residual``: the folded states'
    largest closure residual at the file's geometry [m] (what the rounding costs);
    ``folds``: each folded state's angle of every crease [rad] (by crease index), the
    shallowest first. :meth:`point` moves a crease end."""

    vertices: list
    moved: float
    residual: float
    folds: tuple
    _tree: cKDTree
    _new: np.ndarray

    def point(self, p) -> np.ndarray:
        """The repaired position of flat point ``p`` (a panel vertex or crease end)."""
        p = np.asarray(p, float)
        return np.r_[self._new[self._tree.query(p[:2])[1]], p[2:]]


def _sector(X, s) -> float:
    """The angle at ``s[0]`` from ``s[1]`` counter-clockwise to ``s[2]``, in ``(0, 2 pi)``."""
    v, a, b = s
    u, w = X[a] - X[v], X[b] - X[v]
    return float(np.arctan2(u[0] * w[1] - u[1] * w[0], u @ w)) % (2 * np.pi)


def _skew(v: np.ndarray) -> np.ndarray:
    """``[v]x`` for an ``(..., 3)`` array."""
    z = np.zeros(v.shape[:-1])
    x, y, w = v[..., 0], v[..., 1], v[..., 2]
    return np.stack([np.stack([z, -w, y], -1), np.stack([w, z, -x], -1), np.stack([-y, x, z], -1)], -2)


def _rot(w: np.ndarray) -> np.ndarray:
    """Rodrigues: the rotations of rotation vectors ``(..., 3)``."""
    th = np.linalg.norm(w, axis=-1)[..., None, None]
    K = _skew(w)
    small = th < 1e-12
    s = np.where(small, 1.0, np.sin(th) / np.where(small, 1.0, th))
    c = np.where(small, 0.5, (1 - np.cos(th)) / np.where(small, 1.0, th) ** 2)
    return np.eye(3) + s * K + c * (K @ K)


class _Problem:
    """The vertex model of a pattern (module docstring), with its residual and Jacobian.
    ``creases``: ``(a, b, axis, mid)``, the panels' indices, the crease direction that a
    positive angle turns ``b`` about, and a point of it."""

    def __init__(self, outlines: list, creases: list, root: int):
        allv = np.concatenate([np.asarray(v, float)[:, :2] for v in outlines])
        self.size = float(np.linalg.norm(np.ptp(allv, axis=0)))
        self.tree = cKDTree(allv)
        g = nx.Graph()
        g.add_nodes_from(range(len(allv)))
        g.add_edges_from(self.tree.query_pairs(1e-9 * self.size))
        comp = np.empty(len(allv), int)
        for k, c in enumerate(nx.connected_components(g)):
            comp[list(c)] = k
        self.comp, self.m = comp, int(comp.max()) + 1
        self.X0 = np.zeros((self.m, 2))
        np.add.at(self.X0, comp, allv)
        self.X0 /= np.bincount(comp, minlength=self.m)[:, None]
        owner, first = {}, 0
        for p, v in enumerate(outlines):
            for j in range(len(v)):
                owner.setdefault(int(comp[first + j]), []).append(p)
            first += len(v)
        rows = [(v, ps[0], q) for v, ps in owner.items() for q in ps[1:]]
        self.rv, self.rp, self.rq = (np.array(c, int) for c in zip(*rows)) if rows else (np.zeros(0, int),) * 3
        self.P, self.root = len(outlines), root
        self.origin = np.array([np.r_[np.asarray(v, float)[:, :2].mean(0), 0.0] for v in outlines])
        self.ca = np.array([c[0] for c in creases], int)
        self.cb = np.array([c[1] for c in creases], int)
        self.axis = np.array([c[2] for c in creases], float).reshape(-1, 3)
        self.mid = np.array([c[3] for c in creases], float).reshape(-1, 3)   # a point on each crease line
        self.free = np.array([p for p in range(self.P) if p != root], int)
        self.col = -np.ones(self.P, int)
        self.col[self.free] = np.arange(len(self.free))
        self.sectors = self._flat_foldable(outlines)

    def _flat_foldable(self, outlines) -> list:
        """The interior vertices that meet Kawasaki's condition as drawn (to
        ``KAWASAKI_TOL``): each as its sectors ``(v, a, b)`` in cyclic order, ``a`` and
        ``b`` the vertices on either side, counter-clockwise from ``a`` to ``b``."""
        by_vertex, first = {}, 0
        for v in outlines:
            idx = self.comp[first:first + len(v)]
            first += len(v)
            ccw = polygon_signed_area(self.X0[idx]) > 0
            for j in range(len(idx)):
                a, b = idx[j - 1], idx[(j + 1) % len(idx)]
                by_vertex.setdefault(int(idx[j]), []).append((int(idx[j]), int(b), int(a)) if ccw else
                                                             (int(idx[j]), int(a), int(b)))
        out = []
        for v, secs in by_vertex.items():
            ang = np.array([_sector(self.X0, s) for s in secs])
            if len(secs) < 4 or len(secs) % 2 or abs(ang.sum() - 2 * np.pi) > 1e-6:
                continue
            start = [np.arctan2(*(self.X0[s[1]] - self.X0[v])[::-1]) for s in secs]
            secs = [secs[k] for k in np.argsort(start)]
            ang = np.array([_sector(self.X0, s) for s in secs])
            if abs(ang[::2].sum() - np.pi) < KAWASAKI_TOL:
                out.append(secs)
        return out

    def kawasaki(self, X) -> np.ndarray:
        return np.array([sum((-1) ** i * _sector(X, s) for i, s in enumerate(secs)) for secs in self.sectors])

    def kawasaki_jacobian(self, X) -> np.ndarray:
        J = np.zeros((len(self.sectors), 2 * self.m))
        for r, secs in enumerate(self.sectors):
            for i, (v, a, b) in enumerate(secs):
                u, w = X[a] - X[v], X[b] - X[v]
                da = -np.array([-u[1], u[0]]) / (u @ u)
                db = np.array([-w[1], w[0]]) / (w @ w)
                for k, d in ((a, da), (b, db), (v, -da - db)):
                    J[r, 2 * k:2 * k + 2] += (-1) ** i * d
        return J

    # state: X (m,2), R (P,3,3), t (P,3), w (P,3), v (P,3); the root's pose fixed, its twist 0
    def _arms(self, X, R, p):
        xbar = np.concatenate([X[self.rv], np.zeros((len(self.rv), 1))], 1)
        return np.einsum("nij,nj->ni", R[p], xbar - self.origin[p])

    def thetas(self, R):
        Rrel = np.einsum("nji,njk->nik", R[self.ca], R[self.cb])
        w = 0.5 * np.stack([Rrel[:, 2, 1] - Rrel[:, 1, 2], Rrel[:, 0, 2] - Rrel[:, 2, 0],
                            Rrel[:, 1, 0] - Rrel[:, 0, 1]], 1)
        return np.arctan2(np.sum(w * self.axis, 1), (np.trace(Rrel, axis1=1, axis2=2) - 1) / 2)

    def _world_axis(self, R):
        return np.einsum("nij,nj->ni", R[self.ca], self.axis)

    def residual(self, X, R, t, rho2) -> np.ndarray:
        """One state's closure rows (3 per shared vertex incidence) and its sphere row."""
        pos = self._arms(X, R, self.rp) + t[self.rp] - self._arms(X, R, self.rq) - t[self.rq]
        th = self.thetas(R)
        return np.concatenate([pos.ravel(), [self.size * (th @ th - rho2) / (2 * rho2)]])

    def jacobians(self, X, R, rho2) -> tuple:
        """``(J_X, J_p)``: one state's rows in the flat vertices and in its free panels'
        poses (per panel a rotation ``dR`` applied on the left, then ``dt``)."""
        n, F = len(self.rv), len(self.free)
        JX = np.zeros((3 * n + 1, 2 * self.m))
        Jp = np.zeros((3 * n + 1, 6 * F))
        ap, aq = self._arms(X, R, self.rp), self._arms(X, R, self.rq)
        rows3 = 3 * np.arange(n)[:, None] + np.arange(3)
        cx = 2 * self.rv[:, None] + np.arange(2)
        np.add.at(JX, (rows3[:, :, None], cx[:, None, :]), R[self.rp][:, :, :2] - R[self.rq][:, :, :2])
        eye = np.broadcast_to(np.eye(3), (n, 3, 3))
        for panels, block, M in ((self.rp, 0, -_skew(ap)), (self.rq, 0, _skew(aq)),
                                 (self.rp, 1, eye), (self.rq, 1, -eye)):
            ok = self.col[panels] >= 0
            c = 6 * self.col[panels[ok]] + 3 * block
            np.add.at(Jp, (rows3[ok][:, :, None], (c[:, None] + np.arange(3))[:, None, :]), M[ok])
        th, aw = self.thetas(R), self._world_axis(R)
        for panels, sign in ((self.ca, -1.0), (self.cb, 1.0)):
            ok = self.col[panels] >= 0
            c = 6 * self.col[panels[ok]]
            np.add.at(Jp, (3 * n, c[:, None] + np.arange(3)), self.size * sign * th[ok, None] * aw[ok] / rho2)
        return JX, Jp

    def moved(self, R, t, d) -> tuple:
        """A state moved by pose steps ``d`` (``6`` per free panel)."""
        R, t = R.copy(), t.copy()
        d = d.reshape(len(self.free), 2, 3)
        R[self.free] = _rot(d[:, 0]) @ R[self.free]
        t[self.free] += d[:, 1]
        return R, t


def _guess(prob: _Problem, signs: np.ndarray, fraction: float):
    """Poses from the spanning tree with every crease at ``fraction * pi`` on its side."""
    R = np.repeat(np.eye(3)[None], prob.P, 0)
    t = prob.origin.copy()
    g = nx.Graph()
    g.add_nodes_from(range(prob.P))
    for k, (a, b) in enumerate(zip(prob.ca, prob.cb)):
        g.add_edge(int(a), int(b), k=k)
    for parent, child in nx.bfs_edges(g, prob.root):
        k = g[parent][child]["k"]
        a = prob.axis[k] if prob.cb[k] == child else -prob.axis[k]   # lifts the child for a positive angle
        mid = prob.mid[k]
        Rr = _rot(a * fraction * np.pi * signs[k])
        R[child] = R[parent] @ Rr
        t[child] = R[parent] @ (Rr @ (prob.origin[child] - mid) + mid - prob.origin[parent]) + t[parent]
    return R, t


def _levenberg_marquardt(prob, R, t, rho2, *, iterations=200):
    """The folded state nearest the guess at the file's geometry (poses only)."""
    X = prob.X0
    r = prob.residual(X, R, t, rho2)
    cost, lam = r @ r, 1e-3
    for _ in range(iterations):
        J = prob.jacobians(X, R, rho2)[1]
        A, g = J.T @ J, J.T @ r
        while lam < 1e10:
            d = -np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), g)
            R1, t1 = prob.moved(R, t, d)
            r1 = prob.residual(X, R1, t1, rho2)
            if r1 @ r1 < cost:
                R, t, r, cost, lam = R1, t1, r1, r1 @ r1, max(lam / 10, 1e-12)
                break
            lam *= 10
        if lam >= 1e10 or np.abs(r).max() < 1e-13 * prob.size or np.linalg.norm(d) < 1e-14:
            break
    return R, t, float(np.abs(r).max())


def _range(J: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the column space of ``J``."""
    U, sv, _ = np.linalg.svd(J, full_matrices=False)
    return U[:, sv > 1e-10 * sv[0]] if len(sv) and sv[0] > 0 else U[:, :0]


def _nearest(prob, X, states, *, iterations=30):
    """Gauss-Newton to the solution set's point nearest ``X0`` (module docstring)."""
    for _ in range(iterations):
        rs = [prob.residual(X, R, t, rho2) for R, t, rho2 in states]
        kaw = prob.kawasaki(X) if prob.sectors else np.zeros(0)
        if max(np.abs(np.concatenate([*rs, prob.size * kaw])).max(), 0.0) < 1e-13 * prob.size:
            return X, states, True
        rows, rhs, parts = [], [], []
        for (R, t, rho2), r in zip(states, rs):
            JX, Jp = prob.jacobians(X, R, rho2)
            Q = _range(Jp)
            rows.append(JX - Q @ (Q.T @ JX))
            rhs.append(-(r - Q @ (Q.T @ r)))
            parts.append((JX, Jp))
        if prob.sectors:
            rows.append(prob.size * prob.kawasaki_jacobian(X))
            rhs.append(-prob.size * kaw)
        A, b = np.vstack(rows), np.concatenate(rhs)
        c = (X - prob.X0).ravel()
        # singular values below 1e-10 of the largest are the gauge (a rigid motion of the
        # sheet) and round-off: a step along them would be unbounded
        dX = np.linalg.lstsq(A, b + A @ c, rcond=1e-10)[0] - c
        new = []
        for (R, t, rho2), r, (JX, Jp) in zip(states, rs, parts):
            d = np.linalg.lstsq(Jp, -r - JX @ dX, rcond=None)[0]
            new.append((*prob.moved(R, t, d), rho2))
        X, states = X + dX.reshape(-1, 2), new
    rs = [prob.residual(X, R, t, rho2) for R, t, rho2 in states]
    return X, states, bool(max(np.abs(r).max() for r in rs) < 1e-11 * prob.size)


def nearest_rigid(outlines: list, creases: list, root: int, *, fractions=FRACTIONS) -> Repair | None:
    """The nearest geometry with folded states at the depths ``fractions`` (module
    docstring), or None if the solve finds none. ``outlines``: each panel's flat
    vertices ``(k, 3)``; ``creases``: ``(a, b, p1, p2, side)`` with panel indices, the
    crease's ends and the sign (+-1, 0) its assignment folds it to; ``root``: the held
    panel's index."""
    lines = [(a, b, np.asarray(p1, float), np.asarray(p2, float)) for a, b, p1, p2, _ in creases]
    axes = []
    for a, b, p1, p2 in lines:
        e = (p2 - p1) / np.linalg.norm(p2 - p1)
        d = np.r_[np.asarray(outlines[b], float)[:, :2].mean(0), 0.0] - (p1 + p2) / 2
        axes.append(e if np.cross(e, d)[2] > 0 else -e)
    prob = _Problem(outlines, [(a, b, ax, (p1 + p2) / 2) for (a, b, p1, p2), ax in zip(lines, axes)], root)
    signs = np.array([c[4] for c in creases], float)
    if not np.any(signs):
        return None
    # deepest first, each shallower state guessed from the one before it scaled down: near
    # flat the branches of every vertex meet, and a guess of equal angles can land a
    # state with some creases on another branch (a Miura's rows at 5 %)
    states, residual, angles, last = [], 0.0, signs * np.pi, 1.0
    for f in sorted(fractions, reverse=True):
        R, t = _guess(prob, angles / np.pi, f / last)
        th = prob.thetas(R)
        rho2 = float(th @ th)
        R, t, r = _levenberg_marquardt(prob, R, t, rho2)
        states.insert(0, (R, t, rho2))
        residual, angles, last = max(residual, r), prob.thetas(R), f
    X, states, ok = _nearest(prob, prob.X0.copy(), states)
    if not ok:
        return None
    first, vertices = 0, []
    for v in outlines:
        v = np.asarray(v, float)
        idx = prob.comp[first:first + len(v)]
        vertices.append(np.concatenate([X[idx], v[:, 2:]], 1))
        first += len(v)
    return Repair(vertices=vertices, moved=float(np.linalg.norm(X - prob.X0, axis=1).max()), residual=residual,
                  folds=tuple(tuple(float(x) for x in prob.thetas(R)) for R, _, _ in states),
                  _tree=prob.tree, _new=X[prob.comp])
