"""Loop closures on a tree: node pairs, their residuals, Jacobians and velocity products.

The tree-augmented approach of Fulton & Schaub (section 4.1): cutting the closed chains
leaves a tree, and every cut edge becomes a pair of *closure nodes* — a frame on body A
and a frame on body B — that must coincide in a chosen set of relative spatial DOFs (the
paper's Q matrix: all 6 for a weld, 3 translations for a point contact, 5 for a hinge).

Rows are expressed in node A's frame and ordered ``(rx, ry, rz, tx, ty, tz)``. Every
quantity below is read off the kinematics workspace (:mod:`diffmb.tree.kinematics`); nothing
is differentiated through the kinematics:

* velocity level (eqs. 30, 34): ``w = X_A (v_B - v_A)``, the spatial velocity of body B
  relative to body A measured at node A's origin, in node A's axes (``X_A`` the motion
  transform from world-origin coordinates to node A). Linear in ``qd``: ``w = G(q) qd``
  with the rows of ``G`` the two bodies' Jacobian columns along their root paths,
  ``G = X_A (sum_{j in path(B)} s_j e_j^T - sum_{j in path(A)} s_j e_j^T)``; the joints the
  two paths share cancel exactly, so each closure touches only the joints of its own loop
  (:func:`jacobian_blocks`, closures grouped by loop length into :func:`buckets`);
* acceleration level (eqs. 33, 36-39): ``w_dot = G qdd + g`` with the velocity-product
  term ``g = X_A (a_B - a_A) - (X_A v_A) x w`` from the workspace's bias accelerations
  (:func:`velocity_product`), the paper's ``U`` vector for any Q;
* position level: the node-B origin relative to node A in A's axes, and the attitude
  error from the DCM ``C = [B A]``: ``1/2 vee(C^T - C)`` for a weld, or for a hinge with
  free axis ``f`` the misalignment of B's ``f`` axis in A's axes (whose rates are the
  constrained components of ``omega_B - omega_A``, so Gauss-Newton on it is consistent).

Coordinate couplings (:mod:`diffmb.closures.couplings`: a MuJoCo joint equality, a URDF
``<mimic>``, a gear) are one-row pairs held in the same pairs, rows and blocks.

Measuring both bodies' velocities at the same point makes ``w`` differ from the time
derivative of the position residual only by terms of second order in the violation (and
makes the shared joints cancel); on the constraint manifold the two coincide.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..math import spatial as sp
from ..tree.api import coordinate_rates
from ..tree.kinematics import kinematics, point_frames
from ..tree.layout import layout
from ..tree.model import Model
from . import couplings as cp, mobility

ROW_NAMES = ("rx", "ry", "rz", "tx", "ty", "tz")
KINDS = {
    "weld": (0, 1, 2, 3, 4, 5),
    "point": (3, 4, 5),
}


@dataclass(frozen=True)
class Closure:
    """One cut edge: node A on ``body_a``, node B on ``body_b``, constrained ``rows``.

    ``rows`` index ``(rx, ry, rz, tx, ty, tz)`` of node A's frame. A hinge whose free axis
    is node A's ``x`` constrains ``(1, 2, 3, 4, 5)``.
    """

    name: str
    body_a: int
    body_b: int
    rows: tuple
    #: a coordinate coupling's coordinates ``(y,)`` or ``(y, x)`` (:mod:`diffmb.closures.couplings`);
    #: empty for node pairs
    coords: tuple = ()

    @property
    def free_rotations(self) -> tuple:
        return tuple(i for i in range(3) if i not in self.rows)


def closure_rows(kind: str, axis: int = 0) -> tuple:
    """Rows of a ``weld``, ``point``, ``hinge`` (rotation about node ``axis`` free) or
    ``slider`` (translation along node ``axis`` free) closure."""
    if kind in ("hinge", "slider"):
        if axis not in (0, 1, 2):
            raise ValueError(f"{kind} axis must be 0, 1 or 2 (x, y, z), got {axis!r}")
        free = axis if kind == "hinge" else 3 + axis
        return tuple(i for i in range(6) if i != free)
    if kind not in KINDS:
        raise ValueError(f"unknown closure kind {kind!r}; expected weld, point, hinge or slider")
    return KINDS[kind]


def row_index(closures) -> np.ndarray:
    """Flat indices into the (P, 6) residual of every constrained row."""
    return np.array([6 * k + r for k, c in enumerate(closures) for r in c.rows], dtype=int)


def row_labels(closures) -> list:
    return [f"{c.name}:{cp.COUPLING_LABEL if c.coords else ROW_NAMES[r]}" for c in closures for r in c.rows]


def row_mask(closures) -> np.ndarray:
    """(P, 6) boolean: the constrained rows."""
    mask = np.zeros((len(closures), 6), bool)
    for k, c in enumerate(closures):
        mask[k, list(c.rows)] = True
    return mask


def loop_paths(lay, closures) -> tuple:
    """Per closure the velocity indices of its loop and their signs: ``((dofs, signs), ...)``.

    ``+1`` on body B's path only, ``-1`` on body A's only; joints on both paths are left
    out (they move both nodes together).
    """
    out = []
    for c in closures:
        if c.coords:
            out.append((tuple(c.coords), (1.0, -1.0)[: len(c.coords)]))
            continue
        pa, pb = lay.path_dofs(c.body_a), lay.path_dofs(c.body_b)
        sa, sb = set(pa), set(pb)
        path = [(j, 1.0) for j in pb if j not in sa] + [(j, -1.0) for j in pa if j not in sb]
        out.append((tuple(j for j, _ in path), tuple(s for _, s in path)))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Bucket:
    """Closures ``ids (P_b,)`` in groups that share one list of joints, padded to one
    length: ``dofs (P_b, L)`` the joints of each closure's group (padding ``nv``, a zero
    column), ``signs (P_b, L)`` the closure's own signs on them (0 off its loop), and
    ``groups (G_b, K_b)`` each group's rows in the bucket (padding ``P_b``, a zero block),
    in order: ``contiguous`` when they are ``arange(P_b).reshape(G_b, K_b)``."""

    ids: np.ndarray
    dofs: np.ndarray
    signs: np.ndarray
    groups: np.ndarray

    @property
    def contiguous(self) -> bool:
        return self.groups.size == len(self.ids) and bool((self.groups.reshape(-1) == np.arange(len(self.ids))).all())

    @property
    def group_dofs(self) -> np.ndarray:
        """``(G_b, L)``: each group's joints."""
        return self.dofs[self.groups[:, 0]]


MAX_BUCKETS = 4


@functools.lru_cache(maxsize=256)
def loop_groups(paths: tuple) -> tuple:
    """Closures whose loops lie within a longer loop's joints, grouped with it: ``((leader,
    members), ...)``, the leader's joints the group's (each member's block spans them).
    ``G^T G`` is summed per group, one product over the group's rows, before its entries
    are added into the matrix: a group of nested loops (the nine closures of one column
    pair of a 10 x 10 map fold) adds its lower triangle once instead of once per loop
    (1,710 entries against 6,426). Measured per RK4 step against MuJoCo in the same runs,
    every nested loop grouped / only those covering half the group's joints / none:
    10 x 10 0.79-0.80x / 0.89-0.92x / 1.05-1.18x, 20 x 20 0.70-0.72x / 0.65-0.74x /
    0.92-0.93x."""
    sets = [frozenset(d) for d, _ in paths]
    order = sorted(range(len(paths)), key=lambda k: (-len(paths[k][0]), k))
    groups = []
    for k in order:
        for lead, members in groups:
            if sets[k] <= sets[lead]:
                members.append(k)
                break
        else:
            groups.append((k, [k]))
    return tuple((lead, tuple(members)) for lead, members in groups)


@functools.lru_cache(maxsize=256)
def buckets(paths: tuple, nv: int) -> tuple:
    """Closure groups (:func:`loop_groups`) by length into at most :data:`MAX_BUCKETS`
    buckets, choosing the split (of the groups sorted by length) that minimises the padded
    work ``sum_b G_b K_b L_b^2`` (the cost of ``G^T G``)."""
    groups = loop_groups(paths)
    L = np.array([max(1, len(paths[lead][0])) for lead, _ in groups])
    K = np.array([len(m) for _, m in groups])
    order = np.argsort(L, kind="stable")
    Ls, Ks, n = L[order], K[order], len(groups)

    # dp[b][u]: least padded work of the first u groups (by length) in b buckets
    INF = float("inf")
    dp = [[INF] * (n + 1) for _ in range(MAX_BUCKETS + 1)]
    cut = [[0] * (n + 1) for _ in range(MAX_BUCKETS + 1)]
    dp[0][0] = 0.0
    for b in range(1, MAX_BUCKETS + 1):
        for u in range(1, n + 1):
            depth = 0
            for v in range(u - 1, -1, -1):
                depth = max(depth, int(Ks[v]))
                c = dp[b - 1][v] + (u - v) * depth * float(Ls[u - 1]) ** 2
                if c < dp[b][u]:
                    dp[b][u], cut[b][u] = c, v
    b = min(range(1, MAX_BUCKETS + 1), key=lambda k: (dp[k][n], k))
    edges, u = [], n
    while b > 0:
        v = cut[b][u]
        edges.append((v, u))
        u, b = v, b - 1
    out = []
    for v, u in reversed(edges):
        members = [groups[g] for g in order[v:u]]
        width, depth = int(Ls[u - 1]), int(Ks[v:u].max())
        ids = np.array([k for _, m in members for k in m], np.int32)
        dofs = np.full((len(ids), width), nv, np.int32)
        signs = np.zeros((len(ids), width))
        table = np.full((len(members), depth), len(ids), np.int32)
        r = 0
        for g, (lead, m) in enumerate(members):
            lead_dofs = paths[lead][0]
            place = {j: c for c, j in enumerate(lead_dofs)}
            for i, k in enumerate(m):
                dofs[r, : len(lead_dofs)] = lead_dofs
                for j, sg in zip(*paths[k]):
                    signs[r, place[j]] = sg
                table[g, i] = r
                r += 1
        out.append(Bucket(ids, dofs, signs, table))
    return tuple(out)


class LoopClosures(eqx.Module):
    """A set of closure-node pairs: node placements are arrays (differentiable), the
    pairs, their constrained rows, the loops' joints and the redundancy report static.

    ``rot_a (P, 3, 3)`` is the DCM [node A, body A] and ``pos_a (P, 3)`` node A's origin
    in body-A coordinates (likewise for B). ``paths``: :func:`loop_paths`; ``nv``: the
    tree's number of velocities. ``coef (P, 5)``: the polynomial of each coordinate
    coupling (zero rows for node pairs), ``None`` when there are none.
    """

    rot_a: jnp.ndarray
    pos_a: jnp.ndarray
    rot_b: jnp.ndarray
    pos_b: jnp.ndarray
    closures: tuple = eqx.field(static=True)
    rows: tuple = eqx.field(static=True)
    paths: tuple = eqx.field(static=True, default=())
    nv: int = eqx.field(static=True, default=0)
    report: object = eqx.field(static=True, default=None)
    coef: jnp.ndarray | None = None

    @property
    def labels(self) -> list:
        return [l for l, i in zip(row_labels(self.closures), row_index(self.closures)) if i in self.rows]

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def buckets(self) -> tuple:
        return buckets(self.paths, self.nv)

    def mask(self) -> np.ndarray:
        return row_mask(self.closures)


def _bodies(nodes):
    return (np.array([c.body_a for c in nodes.closures], dtype=np.int32),
            np.array([c.body_b for c in nodes.closures], dtype=np.int32))


def _motion(a, idx):
    """Rows ``idx`` of a per-body motion array; a node on the world (``-1``) is at rest."""
    rows = a[np.maximum(idx, 0)]
    world = idx < 0
    return jnp.where(world[:, None], 0.0, rows) if world.any() else rows


def _frames(ws, idx, rot, pos):
    """:func:`~diffmb.tree.kinematics.point_frames` with ``-1`` meaning the world frame."""
    world = idx < 0
    if not world.any():
        return point_frames(ws, idx, rot, pos)
    E = jnp.where(world[:, None, None], jnp.eye(3, dtype=ws.rot.dtype), ws.rot[np.maximum(idx, 0)])
    p = jnp.where(world[:, None], 0.0, ws.pos[np.maximum(idx, 0)])
    return sp.mm(rot, E), p + sp.mtv(E, pos)


# ---------------------------------------------------------------- node kinematics


def node_frames(ws, nodes):
    """World DCMs and origins of both nodes of every pair: ``(Ea, pa, Eb, pb)``."""
    ia, ib = _bodies(nodes)
    Ea, pa = _frames(ws, ia, nodes.rot_a, nodes.pos_a)
    Eb, pb = _frames(ws, ib, nodes.rot_b, nodes.pos_b)
    return Ea, pa, Eb, pb


def _vee_error(C):
    """``1/2 vee(C^T - C)``: the small rotation of B relative to A for ``C = [B A]``."""
    D = jnp.swapaxes(C, -1, -2) - C
    return 0.5 * jnp.stack([D[..., 2, 1], D[..., 0, 2], D[..., 1, 0]], -1)


def residual(ws, nodes):
    """Position-level residual of every pair, (P, 6) in node A's axes (free rows unused)."""
    Ea, pa, Eb, pb = node_frames(ws, nodes)
    lin = sp.mv(Ea, pb - pa)
    C = sp.mm(Eb, jnp.swapaxes(Ea, -1, -2))
    free = [c.free_rotations for c in nodes.closures]
    hinge = np.array([len(f) == 1 for f in free])
    f = np.array([fr[0] if len(fr) == 1 else 0 for fr in free])
    g, h = (f + 1) % 3, (f + 2) % 3
    P = len(free)
    fb = C[np.arange(P), f, :]                             # B's f axis in A components
    fb_g = jnp.take_along_axis(fb, g[:, None], axis=1)
    fb_h = jnp.take_along_axis(fb, h[:, None], axis=1)
    eg, eh = (jnp.asarray(np.eye(3)[i], C.dtype) for i in (g, h))
    ang_hinge = -fb_h * eg + fb_g * eh
    ang = jnp.where(hinge[:, None], ang_hinge, _vee_error(C))
    return cp.with_residual(ws, nodes, jnp.concatenate([ang, lin], -1))


def _to_node_a(ws, nodes, m):
    """World-origin motion vectors ``m (P, 6)`` in node A's coordinates at its origin."""
    ia, _ = _bodies(nodes)
    Ea, pa = _frames(ws, ia, nodes.rot_a, nodes.pos_a)
    return sp.xform_motion(Ea, pa, m), (Ea, pa)


def velocity(ws, nodes):
    """``w (P, 6)``: body B's velocity relative to body A at node A, node A's axes."""
    ia, ib = _bodies(nodes)
    return cp.with_rate(ws, nodes, _to_node_a(ws, nodes, _motion(ws.vel, ib) - _motion(ws.vel, ia))[0])


def velocity_product(ws, nodes):
    """``g (P, 6)`` with ``w_dot = G qdd + g`` (eqs. 36-39): from the bias accelerations."""
    ia, ib = _bodies(nodes)
    va_w = _motion(ws.vel, ia)
    w, (Ea, pa) = _to_node_a(ws, nodes, _motion(ws.vel, ib) - va_w)
    dacc = sp.xform_motion(Ea, pa, _motion(ws.acc, ib) - _motion(ws.acc, ia))
    va = sp.xform_motion(Ea, pa, va_w)
    return cp.with_product(ws, nodes, dacc - sp.cross_motion(va, w))


def jacobian_blocks(ws, nodes) -> tuple:
    """Per bucket (``nodes.buckets``) ``(P_b, 6, L)``: each closure's rows of ``G`` on its
    loop's joints; unconstrained rows are zero."""
    ia, _ = _bodies(nodes)
    dt = ws.S.dtype
    Ea, pa = _frames(ws, ia, nodes.rot_a, nodes.pos_a)
    X = sp.xform_matrix(Ea, pa) * jnp.asarray(nodes.mask()[..., None], dt)   # (P, 6, 6)
    S = jnp.concatenate([ws.S, jnp.zeros((1, 6), dt)], 0)
    slopes = cp.slopes(ws, nodes)
    out = []
    for bk in nodes.buckets:
        cols = S[bk.dofs] * jnp.asarray(bk.signs[..., None], dt)              # (P_b, L, 6)
        rows = sp.mm(X[bk.ids], jnp.swapaxes(cols, -1, -2))
        out.append(cp.with_jacobian_rows(nodes, bk, rows, slopes))
    return tuple(out)


# ------------------------------------------------------------------ model-level API


def position_residual(model: Model, q, nodes):
    """Position-level residual (P, 6) at ``q``."""
    return residual(kinematics(model, q), nodes)


def relative_velocity(model: Model, q, qd, nodes):
    """``w`` (P, 6) at ``(q, qd)``: see :func:`velocity`."""
    return velocity(kinematics(model, q, qd), nodes)


def dense_jacobian(blocks, nodes, nv):
    """``G (P*6, nv)`` from :func:`jacobian_blocks` (free rows zero)."""
    P = len(nodes.closures)
    G = jnp.zeros((P, 6, nv + 1), blocks[0].dtype)
    for bk, B in zip(nodes.buckets, blocks):
        kk = bk.ids[:, None, None]
        rr = np.arange(6)[None, :, None]
        G = G.at[kk, rr, bk.dofs[:, None, :]].add(B)
    return G[..., :nv].reshape(P * 6, nv)


def jacobian(model: Model, q, nodes, rows=None):
    """``G(q)``: constrained rows of ``w`` w.r.t. ``qd`` (nrows, nv); kept rows by default."""
    rows = np.asarray(nodes.rows if rows is None else rows)
    ws = kinematics(model, q)
    return dense_jacobian(jacobian_blocks(ws, nodes), nodes, model.nv)[rows]


# ------------------------------------------------------------ build-time analysis
# Module-level jits, the model and closures as arguments: building the same structure
# again (another size parameter, another test) reuses the compiled programs.


@eqx.filter_jit
def _residual_at(model, nodes, q):
    return position_residual(model, q, nodes)


@eqx.filter_jit
def _jacobian_at(model, nodes, rows: tuple, q):
    return jacobian(model, q, nodes, np.asarray(rows, dtype=int))


@eqx.filter_jit
def _rates_at(model, q, v):
    return coordinate_rates(model, q, v)


@dataclass(frozen=True)
class RankReport:
    """Outcome of the redundancy analysis of a closure set."""

    n_rows: int
    rank: int
    kept: tuple
    redundant: tuple  # labels of the dropped rows
    mobility: object = None  # a diffmb.closures.mobility.Mobility: the dof at the start state

    def __str__(self):
        red = ", ".join(self.redundant) if self.redundant else "none"
        return (f"{self.n_rows} closure rows, numerical rank {self.rank}; redundant: {red}"
                + (f"; {self.mobility}" if self.mobility is not None else ""))


def independent_rows(G: np.ndarray, tol: float = 1e-9) -> list:
    """Greedy rank-revealing selection of independent rows, in row order (Gram-Schmidt,
    orthogonalised twice against the basis so far)."""
    G = np.asarray(G, float)
    scale = max(np.abs(G).max(initial=0.0), 1e-300)
    basis = np.zeros((0, G.shape[1]))
    keep = []
    for i, g in enumerate(G):
        r = g - basis.T @ (basis @ g)
        r = r - basis.T @ (basis @ r)
        n = np.linalg.norm(r)
        if n > tol * scale:
            basis = np.vstack([basis, r / n])
            keep.append(i)
    return keep


def analyse(model: Model, q0, nodes, *, seed: int = 0, check_tol: float = 1e-6, direction=None) -> RankReport:
    """Check the initial configuration closes and find redundant rows.

    The rank is taken at a generic point of the constraint manifold near ``q0`` (flat
    origami states are singular). Raises ValueError naming the closure whose residual at
    ``q0`` exceeds ``check_tol`` (at least 100 round-offs of the working precision: a
    float32 10x10 map fold closes its 19-joint loops to 1e-6). ``direction``: a first
    mobility probe (:func:`start_mobility`).
    """
    closures = nodes.closures
    rows = row_index(closures)
    labels = row_labels(closures)
    q0 = jnp.asarray(q0)
    check_tol = max(check_tol, 100 * float(jnp.finfo(q0.dtype).eps))
    phi0 = np.asarray(_residual_at(model, nodes, q0))
    for k, c in enumerate(closures):
        err = np.abs(phi0[k, list(c.rows)]).max()
        if err > check_tol:
            raise ValueError(
                f"closure {c.name!r}: initial configuration violates it by {err:.3g} "
                f"(rows {[ROW_NAMES[r] for r in c.rows]}); the nodes do not meet"
            )
    rng = np.random.default_rng(seed)
    key = tuple(int(r) for r in rows)
    q = np.asarray(q0) + 1e-2 * rng.standard_normal(q0.shape)
    for _ in range(50):
        phi = np.asarray(_residual_at(model, nodes, q)).reshape(-1)[rows]
        if np.abs(phi).max() < 1e-13:
            break
        G = np.asarray(_jacobian_at(model, nodes, key, q))
        dnu = -np.linalg.lstsq(G, phi, rcond=1e-10)[0]
        q = q + np.asarray(_rates_at(model, q, dnu))
    G = np.asarray(_jacobian_at(model, nodes, key, q))
    keep = independent_rows(G)
    return RankReport(
        n_rows=len(rows),
        rank=len(keep),
        kept=tuple(int(rows[i]) for i in keep),
        redundant=tuple(labels[i] for i in range(len(rows)) if i not in keep),
        mobility=start_mobility(model, nodes, q0, seed=seed, direction=direction),
    )


def start_mobility(model: Model, nodes, q0, *, seed: int = 0, direction=None):
    """The :class:`~diffmb.closures.mobility.Mobility` of the chain at ``q0`` (a floating
    root's six rates not counted). A float32 build (``DIFFMB_FLOAT32``) is probed in
    float64 with tolerances of float32's precision: its geometry is rounded to float32, which
    makes a rigidly foldable pattern (a Miura-ori) over-constrained by that much.
    ``direction`` (rates, ``model.nv``): probed first (:func:`~diffmb.closures.mobility.landings`)."""
    eps = float(jnp.finfo(jnp.asarray(q0).dtype).eps)
    if eps > 1e-10:
        # the geometry itself is rounded to float32: closed and ranked to that precision, a
        # step long enough for the branch's own singular values to stand above it
        with jax.enable_x64(True):
            up = lambda x: jnp.asarray(x, jnp.float64) if eqx.is_inexact_array(x) else x
            return _probe(jax.tree.map(up, model), jax.tree.map(up, nodes), np.asarray(q0, np.float64), seed,
                          tol=100 * eps, rank_tol=1e4 * eps, step=0.1, direction=direction)
    return _probe(model, nodes, q0, seed, direction=direction)


def _probe(model, nodes, q0, seed, direction=None, **kw):
    rows = row_index(nodes.closures)
    key = tuple(int(r) for r in rows)
    free = {i for b in model.free_roots for i in range(*model.body_slices[b])}
    cols = np.array([i for i in range(model.nv) if i not in free], dtype=int)
    return mobility.probe(lambda q: np.asarray(_residual_at(model, nodes, jnp.asarray(q))).reshape(-1)[rows],
                          lambda q: np.asarray(_jacobian_at(model, nodes, key, jnp.asarray(q))),
                          lambda q, dv: np.asarray(q) + np.asarray(_rates_at(model, jnp.asarray(q), jnp.asarray(dv))),
                          np.asarray(q0, float), cols, cols, seed=seed,
                          directions=() if direction is None else (np.asarray(direction, float)[cols],), **kw)


def loop_closures(model: Model, pairs) -> LoopClosures:
    """:class:`LoopClosures` from node placements in body coordinates: dicts with ``name,
    body_a, body_b`` (body indices, ``-1`` the world), ``kind, axis`` (:func:`closure_rows`)
    and ``rot_a, pos_a, rot_b, pos_b`` (DCM [node, body] and node origin in the body), or
    coordinate couplings (:func:`coupling`)."""
    items = tuple(Closure(p["name"], p["body_a"], p["body_b"], cp.COUPLING_ROWS, tuple(p["coords"]))
                  if p["kind"] == "coupling" else
                  Closure(p["name"], p["body_a"], p["body_b"], closure_rows(p["kind"], p["axis"])) for p in pairs)
    stack = lambda key: jnp.asarray(np.stack([np.asarray(p[key], float) for p in pairs]))
    coef = None
    if any(c.coords for c in items):
        coef = jnp.asarray(np.stack([np.asarray(p.get("coef", np.zeros(5)), float) for p in pairs]))
    return LoopClosures(rot_a=stack("rot_a"), pos_a=stack("pos_a"), rot_b=stack("rot_b"), pos_b=stack("pos_b"),
                        closures=items, rows=tuple(int(i) for i in row_index(items)),
                        paths=loop_paths(layout(model), items), nv=model.nv, coef=coef)


def make_closures(model: Model, q0, pairs, *, analyse_rank: bool = True) -> LoopClosures:
    """Build :class:`LoopClosures` from pair descriptions and check them at ``q0``.

    Each pair is a dict: ``name``, ``body_a``, ``body_b`` (body names), ``kind``
    (``hinge`` | ``weld`` | ``point``), ``axis`` (free axis of a hinge, 0/1/2 of node A),
    ``pos_a``/``pos_b`` (node origins in body coordinates) and optional ``rot_a``/``rot_b``
    (DCM [node, body], identity by default).
    """
    out = []
    for k, p in enumerate(pairs):
        name = p.get("name", f"closure{k}")
        for key in ("body_a", "body_b"):
            if key not in p:
                raise ValueError(f"closure {name!r}: missing {key!r}")
        a, b = model.body_index(p["body_a"]), model.body_index(p["body_b"])
        if a == b:
            raise ValueError(f"closure {name!r}: both nodes are on body {p['body_a']!r}")
        out.append(dict(name=name, body_a=a, body_b=b, kind=p.get("kind", "weld"), axis=p.get("axis", 0),
                        rot_a=p.get("rot_a", np.eye(3)), pos_a=p.get("pos_a", np.zeros(3)),
                        rot_b=p.get("rot_b", np.eye(3)), pos_b=p.get("pos_b", np.zeros(3))))
    if not out:
        raise ValueError("no closure pairs given")
    nodes = loop_closures(model, out)
    if not analyse_rank:
        return nodes
    return dataclasses.replace(nodes, report=analyse(model, q0, nodes))
