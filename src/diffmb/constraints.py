"""Loop closures on a tree: residuals, multipliers, Baumgarte, projection.

The tree-augmented approach of Fulton & Schaub (section 4.1): cutting the closed chains
leaves a tree, and every cut edge becomes a pair of *closure nodes* — a frame on body A
and a frame on body B — that must coincide in a chosen set of relative spatial DOFs (the
paper's Q matrix: all 6 for a weld, 3 translations for a point contact, 5 for a hinge).

Rows are expressed in node A's frame and ordered ``(rx, ry, rz, tx, ty, tz)``:

* velocity level (eqs. 30, 34): ``w = [omega_B - omega_A; v_nB - v_nA]`` (node B's spatial
  velocity re-expressed in node A's axes), linear in ``qd``: ``w = G(q) qd``;
* acceleration level (eqs. 33, 36-39): ``w_dot = G qdd + g(q, qd)``, with the velocity
  product term ``g`` obtained exactly by forward-mode differentiation of ``w`` along
  ``(q_dot, 0)`` — the paper's ``U`` vector, for any Q;
* position level: the node-B origin relative to node A in A's axes, and the attitude
  error from the DCM ``C = [B A]``: ``1/2 vee(C^T - C)`` for a weld, or for a hinge with
  free axis ``f`` the misalignment of B's ``f`` axis in A's axes (whose rates are the
  constrained components of ``omega_B - omega_A``, so Gauss-Newton on it is consistent).

Multipliers (eqs. 22-25, 42-43): with ``Y = M^{-1} G^T`` obtained by ABA solves (one per
row, vmapped; the mass matrix is never formed) — or, for trees of at most
:data:`DENSE_MAX_NV` coordinates where it is measurably cheaper, by a Cholesky factor of
the CRBA mass matrix — ``Lambda = G Y`` is the operational-space
compliance of the pairs and ``lambda = Lambda^{-1} (w_dot_free + 2 a w + b^2 phi)``;
``qdd = qdd_free - Y lambda``. The wrench that body B exerts on body A at node A (in
A's axes, free rows zero) is ``Q^T lambda`` (the paper's ``-f_c``, Figs. 12 and 18).

Redundant closures (rigid-origami loops over-constrain the tree) make ``Lambda`` rank
deficient, and *which* rows are redundant changes along a deployment: a map fold's
folded-flat state is where a branch that unfolds the columns meets one that unfolds the
rows, with different ranks. So the run-time solve is a regularised least-squares one
(:func:`_damped_solve`: Cholesky with a ``1e-8`` relative Tikhonov term, refined) that
never fails or returns NaN, and the rank is *reported*: once at build time
(:func:`analyse`: the rank of ``G`` at a generic point of the constraint manifold near the
initial state and the names of the redundant rows) and along the run
(:func:`numerical_rank`, the ``closure_rank`` diagnostic).
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import spatial as sp
from . import tree
from .model import Model

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

    @property
    def free_rotations(self) -> tuple:
        return tuple(i for i in range(3) if i not in self.rows)


def closure_rows(kind: str, axis: int = 0) -> tuple:
    """Rows of a ``weld``, ``point`` or ``hinge`` closure (hinge free about node ``axis``)."""
    if kind == "hinge":
        if axis not in (0, 1, 2):
            raise ValueError(f"hinge axis must be 0, 1 or 2 (x, y, z), got {axis!r}")
        return tuple(i for i in range(6) if i != axis)
    if kind not in KINDS:
        raise ValueError(f"unknown closure kind {kind!r}; expected weld, point or hinge")
    return KINDS[kind]


# ---------------------------------------------------------------- node kinematics


def _bodies(nodes):
    return (np.array([c.body_a for c in nodes.closures], dtype=int),
            np.array([c.body_b for c in nodes.closures], dtype=int))


def _node_frames(model: Model, q, nodes):
    """World DCMs and origins of both nodes of every pair: ``(Ea, pa, Eb, pb)``."""
    dcm, pos = tree.forward_kinematics(model, q)
    ia, ib = _bodies(nodes)
    Ea = sp.mm(nodes.rot_a, dcm[ia])
    Eb = sp.mm(nodes.rot_b, dcm[ib])
    pa = pos[ia] + sp.mtv(dcm[ia], nodes.pos_a)
    pb = pos[ib] + sp.mtv(dcm[ib], nodes.pos_b)
    return Ea, pa, Eb, pb


def relative_velocity(model: Model, q, qd, nodes):
    """``w`` (P, 6): node B's spatial velocity minus node A's, in node A's axes (eqs. 30, 34)."""
    dcm, pos, vel = tree.forward_kinematics(model, q, qd)
    ia, ib = _bodies(nodes)
    va = sp.xform_motion(nodes.rot_a, nodes.pos_a, vel[ia])
    vb = sp.xform_motion(nodes.rot_b, nodes.pos_b, vel[ib])
    Ea = sp.mm(nodes.rot_a, dcm[ia])
    Eb = sp.mm(nodes.rot_b, dcm[ib])
    C = sp.mm(Eb, jnp.swapaxes(Ea, -1, -2))  # [B A]
    wb = jnp.concatenate([sp.mtv(C, vb[:, :3]), sp.mtv(C, vb[:, 3:])], -1)
    return wb - va


def _vee_error(C):
    """``1/2 vee(C^T - C)``: the small rotation of B relative to A for ``C = [B A]``."""
    D = jnp.swapaxes(C, -1, -2) - C
    return 0.5 * jnp.stack([D[..., 2, 1], D[..., 0, 2], D[..., 1, 0]], -1)


def position_residual(model: Model, q, nodes):
    """Position-level residual of every pair, (P, 6) in node A's axes (free rows unused)."""
    closures = nodes.closures
    Ea, pa, Eb, pb = _node_frames(model, q, nodes)
    lin = sp.mv(Ea, pb - pa)
    C = sp.mm(Eb, jnp.swapaxes(Ea, -1, -2))
    ang = _vee_error(C)
    rows = []
    for k, c in enumerate(closures):
        free = c.free_rotations
        if len(free) == 1:
            f = free[0]
            g, h = (f + 1) % 3, (f + 2) % 3
            fb = C[k, f, :]  # B's f axis in A components
            a = jnp.zeros(3, q.dtype).at[g].set(-fb[h]).at[h].set(fb[g])
        else:
            a = ang[k]
        rows.append(jnp.concatenate([a, lin[k]]))
    return jnp.stack(rows)


# ------------------------------------------------------------------ row bookkeeping


def row_index(closures) -> np.ndarray:
    """Flat indices into the (P, 6) residual of every constrained row."""
    return np.array([6 * k + r for k, c in enumerate(closures) for r in c.rows], dtype=int)


def row_labels(closures) -> list:
    return [f"{c.name}:{ROW_NAMES[r]}" for c in closures for r in c.rows]


def mass_solve(model: Model, q, tau):
    """``M(q)^{-1} tau`` by the articulated-body algorithm (zero rates, no gravity)."""
    still = jnp.zeros_like(q)
    return tree.forward_dynamics(_weightless(model), q, still, tau)


def _weightless(model: Model) -> Model:
    return eqx.tree_at(lambda m: m.gravity, model, jnp.zeros_like(model.gravity))


def jacobian(model: Model, q, nodes, rows=None):
    """``G(q)``: constrained rows of ``w`` w.r.t. ``qd`` (nrows, nv); kept rows by default."""
    rows = np.asarray(nodes.rows if rows is None else rows)
    f = lambda qd: relative_velocity(model, q, qd, nodes).reshape(-1)[rows]  # noqa: E731
    return jax.jacfwd(f)(jnp.zeros_like(q))


REGULARIZATION = 1e-8


def _damped_solve(Lam, rhs):
    """Regularised least-squares multipliers: ``(Lambda + mu I)^{-1} rhs`` with
    ``mu = 1e-8 max(diag Lambda)``, refined once against the unregularised matrix.

    Redundant rows (rigid-origami loops over-constrain the tree; the rank changes where
    fold branches meet) give zero eigenvalues of ``Lambda``; rows that are redundant by
    construction come out of the Jacobian as round-off (1e-13). ``mu`` keeps their
    multipliers at round-off size too, so they act on nothing, the solve never fails or
    returns NaN, and the equal-and-opposite closure wrenches keep the total momentum.
    Near a fold bifurcation it acts like a very stiff compliance instead of exploding.
    On well-conditioned rows (eigenvalue ``s``) the refined solve is exact to
    ``(mu / s)^2``.
    """
    n = Lam.shape[0]
    mu = REGULARIZATION * jnp.max(jnp.diagonal(Lam))
    A = Lam + mu * jnp.eye(n, dtype=Lam.dtype)
    L = jnp.linalg.cholesky(A)
    y = jax.scipy.linalg.cho_solve((L, True), rhs)
    return y + jax.scipy.linalg.cho_solve((L, True), rhs - Lam @ y)


def numerical_rank(Lam, tol: float = 1e-8):
    """Numerical rank of the equilibrated compliance ``Lambda`` (a diagnostic).

    Piecewise constant, so it carries no gradient; ``stop_gradient`` also keeps the
    eigenvalue derivative's ``1 / (l_i - l_j)`` of repeated eigenvalues out of reverse mode
    (it would turn the zero cotangent into NaN for every parameter).
    """
    Lam = jax.lax.stop_gradient(Lam)
    d = jnp.diagonal(Lam)
    d = jnp.maximum(d, 1e-300 + 1e-14 * jnp.max(d))
    s = 1.0 / jnp.sqrt(d)
    ev = jnp.linalg.eigvalsh(Lam * s[:, None] * s[None, :])
    return jnp.sum(ev > tol * jnp.max(ev)).astype(Lam.dtype)


#: Trees with at most this many velocity coordinates use the dense path (CRBA + Cholesky);
#: larger ones the O(n) ABA solves. Measured (experiments/bench_origami.py, 2-core CPU,
#: single trajectory): dense 8.5 / 26 / 25 / 577 us per vector field vs ABA solves
#: 21 / 70 / 80 / 592 us for the 4-panel / 2x4 / 3x3 / 6x6 folds (nv 9, 13, 14, 41),
#: compiling 2.5x faster.
DENSE_MAX_NV = 64


def _operators(model, q, qd, tau, G):
    """``(qdd_free, Y = M^{-1} G^T as rows)``: dense for small trees, ABA solves otherwise."""
    if model.nv <= DENSE_MAX_NV:
        M = tree.mass_matrix(model, q)
        L = jnp.linalg.cholesky(M)
        rhs = jnp.concatenate([(tau - tree.bias_forces(model, q, qd))[:, None], G.T], axis=1)
        sol = jax.scipy.linalg.cho_solve((L, True), rhs)
        return sol[:, 0], sol[:, 1:].T
    qdd_f = tree.forward_dynamics(model, q, qd, tau)
    return qdd_f, jax.vmap(lambda g: mass_solve(model, q, g))(G)


def constrained_acceleration(model, q, qd, tau, nodes, gains=None):
    """Tree-augmented forward dynamics: ``(qdd, lambda)``.

    ``gains``: ``None`` (no stabilization) or ``(a, b)`` for Baumgarte's
    ``w_dot + 2 a w + b^2 phi = 0`` (eq. 41), scalars or one value per row.
    """
    rows = np.asarray(nodes.rows)
    G = jacobian(model, q, nodes)
    qdd_f, Y = _operators(model, q, qd, tau, G)  # Y: (nrows, nv), rows of M^-1 G^T
    Lam = G @ Y.T
    qdot = tree.coordinate_rates(model, q, qd)
    w_fn = lambda q_, qd_: relative_velocity(model, q_, qd_, nodes).reshape(-1)[rows]  # noqa: E731
    w, bias = jax.jvp(w_fn, (q, qd), (qdot, jnp.zeros_like(qd)))
    rhs = G @ qdd_f + bias
    if gains is not None:
        a, b = gains
        phi = position_residual(model, q, nodes).reshape(-1)[rows]
        rhs = rhs + 2.0 * a * w + b**2 * phi
    lam = _damped_solve(Lam, rhs)
    return qdd_f - Y.T @ lam, lam


def project_state(model, q, qd, nodes, iterations: int = 3):
    """Mass-weighted projection onto the position and velocity constraint manifolds.

    Gauss-Newton: ``dnu = -M^{-1} G^T Lambda^{-1} phi`` mapped to coordinate increments by
    the kinematic map (MRPs, eq. 3), ``iterations`` times; then the velocity projection
    ``qd <- qd - M^{-1} G^T Lambda^{-1} G qd`` (exact: the constraint is linear in qd).
    Both corrections are constraint impulses, so they conserve total momentum.
    """

    rows = np.asarray(nodes.rows)
    zero = jnp.zeros_like(qd)

    def solve_step(q):
        G = jacobian(model, q, nodes)
        _, Y = _operators(_weightless(model), q, zero, zero, G)
        return G, Y, G @ Y.T

    def gn(_, q):
        G, Y, Lam = solve_step(q)
        phi = position_residual(model, q, nodes).reshape(-1)[rows]
        dnu = -Y.T @ _damped_solve(Lam, phi)
        return q + tree.coordinate_rates(model, q, dnu)

    q = jax.lax.fori_loop(0, iterations, gn, q)
    G, Y, Lam = solve_step(q)
    qd = qd - Y.T @ _damped_solve(Lam, G @ qd)
    return q, qd


# ------------------------------------------------------------ build-time analysis


@dataclass(frozen=True)
class RankReport:
    """Outcome of the redundancy analysis of a closure set."""

    n_rows: int
    rank: int
    kept: tuple
    redundant: tuple  # labels of the dropped rows

    def __str__(self):
        red = ", ".join(self.redundant) if self.redundant else "none"
        return f"{self.n_rows} closure rows, numerical rank {self.rank}; redundant: {red}"


def independent_rows(G: np.ndarray, tol: float = 1e-9) -> list:
    """Greedy rank-revealing selection (Gram-Schmidt in row order) of independent rows."""
    basis, keep = [], []
    scale = max(np.abs(G).max(), 1e-300)
    for i, g in enumerate(G):
        r = g.astype(float).copy()
        for b in basis:
            r -= (r @ b) * b
        n = np.linalg.norm(r)
        if n > tol * scale:
            basis.append(r / n)
            keep.append(i)
    return keep


def analyse(model: Model, q0, nodes, *, seed: int = 0, check_tol: float = 1e-6) -> RankReport:
    """Check the initial configuration closes and find redundant rows (see module doc).

    Raises ValueError naming the closure whose residual at ``q0`` exceeds ``check_tol``.
    """
    closures = nodes.closures
    rows = row_index(closures)
    labels = row_labels(closures)
    q0 = jnp.asarray(q0)
    phi0 = np.asarray(position_residual(model, q0, nodes))
    for k, c in enumerate(closures):
        err = np.abs(phi0[k, list(c.rows)]).max()
        if err > check_tol:
            raise ValueError(
                f"closure {c.name!r}: initial configuration violates it by {err:.3g} "
                f"(rows {[ROW_NAMES[r] for r in c.rows]}); the nodes do not meet"
            )
    # Move to a generic point of the manifold near q0 (flat states are singular).
    rng = np.random.default_rng(seed)
    phi_fn = jax.jit(lambda q: position_residual(model, q, nodes).reshape(-1)[rows])
    jac_fn = jax.jit(lambda q: jacobian(model, q, nodes, rows))
    rate_fn = jax.jit(lambda q, v: tree.coordinate_rates(model, q, v))
    q = np.asarray(q0) + 1e-2 * rng.standard_normal(q0.shape)
    for _ in range(50):
        phi = np.asarray(phi_fn(q))
        if np.abs(phi).max() < 1e-13:
            break
        G = np.asarray(jac_fn(q))
        dnu = -np.linalg.lstsq(G, phi, rcond=1e-10)[0]
        q = q + np.asarray(rate_fn(q, dnu))
    G = np.asarray(jac_fn(q))
    keep = independent_rows(G)
    return RankReport(
        n_rows=len(rows),
        rank=len(keep),
        kept=tuple(int(rows[i]) for i in keep),
        redundant=tuple(labels[i] for i in range(len(rows)) if i not in keep),
    )


class LoopClosures(eqx.Module):
    """A set of closure-node pairs: node placements are arrays (differentiable), the
    pairs, their constrained rows and the rows kept after the redundancy analysis static.

    ``rot_a (P, 3, 3)`` is the DCM [node A, body A] and ``pos_a (P, 3)`` node A's origin
    in body-A coordinates (likewise for B).
    """

    rot_a: jnp.ndarray
    pos_a: jnp.ndarray
    rot_b: jnp.ndarray
    pos_b: jnp.ndarray
    closures: tuple = eqx.field(static=True)
    rows: tuple = eqx.field(static=True)
    report: RankReport | None = eqx.field(static=True, default=None)

    @property
    def labels(self) -> list:
        return [l for l, i in zip(row_labels(self.closures), row_index(self.closures)) if i in self.rows]


def make_closures(model: Model, q0, pairs, *, analyse_rank: bool = True) -> LoopClosures:
    """Build :class:`LoopClosures` from pair descriptions and check them at ``q0``.

    Each pair is a dict: ``name``, ``body_a``, ``body_b`` (body names), ``kind``
    (``hinge`` | ``weld`` | ``point``), ``axis`` (free axis of a hinge, 0/1/2 of node A),
    ``pos_a``/``pos_b`` (node origins in body coordinates) and optional ``rot_a``/``rot_b``
    (DCM [node, body], identity by default).
    """
    closures, ra, pa, rb, pb = [], [], [], [], []
    for k, p in enumerate(pairs):
        name = p.get("name", f"closure{k}")
        for key in ("body_a", "body_b"):
            if key not in p:
                raise ValueError(f"closure {name!r}: missing {key!r}")
        a, b = model.body_index(p["body_a"]), model.body_index(p["body_b"])
        if a == b:
            raise ValueError(f"closure {name!r}: both nodes are on body {p['body_a']!r}")
        rows = closure_rows(p.get("kind", "weld"), p.get("axis", 0))
        closures.append(Closure(name, a, b, rows))
        ra.append(np.asarray(p.get("rot_a", np.eye(3)), float))
        rb.append(np.asarray(p.get("rot_b", np.eye(3)), float))
        pa.append(np.asarray(p.get("pos_a", np.zeros(3)), float))
        pb.append(np.asarray(p.get("pos_b", np.zeros(3)), float))
    if not closures:
        raise ValueError("no closure pairs given")
    closures = tuple(closures)
    nodes = LoopClosures(
        rot_a=jnp.asarray(np.stack(ra)), pos_a=jnp.asarray(np.stack(pa)),
        rot_b=jnp.asarray(np.stack(rb)), pos_b=jnp.asarray(np.stack(pb)),
        closures=closures, rows=tuple(int(i) for i in row_index(closures)),
    )
    if not analyse_rank:
        return nodes
    report = analyse(model, q0, nodes)
    return LoopClosures(nodes.rot_a, nodes.pos_a, nodes.rot_b, nodes.pos_b,
                        closures=closures, rows=nodes.rows, report=report)
