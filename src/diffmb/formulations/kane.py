"""Kane's equations for constrained systems with the cut-joint approach (Madonna; Bajodah,
Hodges & Chen, JGCD 2003), and the Lagrange-multiplier DAE form of the same system.

A closed-chain mechanism is cut open at one or more joints (the *cut joints*); what is left
is a forest of rigid-body trees (one or more :class:`~diffmb.model.Model`, each with at
most one free root), whose coordinates ``q`` and generalized speeds ``u`` (``u = qd`` of
the open trees, optionally through a constant invertible map, see below) are the
unconstrained system's. At each cut joint the two *nodes* (a frame on body A, a frame on
body B) must coincide in a chosen set of rows ``(rx, ry, rz, tx, ty, tz)`` of node A's
frame: the position-level closure ``Phi(q) = 0`` (eq. 8 for the slider-crank).

Both forms share the state ``x = [q; u]`` (plus an optional mission ``clock``), the
generalized inertia forces from the tree algorithms — ``M(q)`` by the CRBA and ``nl(q, u)``
by the RNEA with zero accelerations, so ``F* = -M u_dot - nl`` (eq. 3) — and the
velocity-level closure ``C(q) u = beta = 0`` (eq. 12). Both are read from one kinematics
workspace of the forest per evaluation and the closure layer shared with the
tree-augmented systems (:mod:`diffmb.closures`): the rows of ``C`` are the two nodes'
Jacobian columns along their tree paths, and ``C_dot u`` comes from the bias
accelerations; nothing is differentiated through the kinematics.

:class:`KaneSystem` (eqs. 1-6, 13)
    The speeds are partitioned into ``p`` independent ``u_I`` and ``n - p`` dependent
    ``u_D`` ones by a column-pivoted QR factorisation of ``C(q0)`` at build time (the
    ``n - p`` pivot columns are the dependent set, so ``C_D`` is as well conditioned as a
    greedy choice can make it). Then ``A = -C_D^-1 C_I`` (eq. 13), ``u_D = A u_I`` (eq. 1,
    ``b = 0`` for cut joints), ``A1 = [-A  I]``, ``A2 = [I  A^T]`` and
    ``T u_dot = [A_dot u_I; A2 (F - nl)]`` with ``T = [A1; A2 M]`` (eq. 6), solved by LU.
    No multipliers appear. ``A_dot u_I = -C_D^-1 C_dot [u_I; A u_I]`` is obtained exactly
    from the workspace's velocity-product accelerations, evaluated with the state's ``u`` in place of
    ``[u_I; A u_I]`` (the same on ``C u = 0``): then the first block row reads
    ``C u_dot = -C_dot u`` and the second ``N^T (M u_dot + nl - F) = 0`` with
    ``N = [I; A]`` spanning the null space of ``C``, so ``u_dot`` is independent of the
    partition everywhere, off the velocity manifold (RK stages) included. With
    ``[u_I; A u_I]`` instead, RK4 stage errors near a singular ``C_D`` grow like the
    derivatives of ``A`` (measured: a slider-crank run through a singular forced partition
    drifts by O(1)). When the dependent block becomes ill-conditioned
    (reciprocal pivot ratio of its LU below ``repartition_tol``) the vector field
    re-partitions at that state by greedy column pivoting of ``C(q)``: ``u_dot`` does not
    depend on the partition (``A2^T`` spans the null space of ``C`` for any valid one), so
    switching is seamless. The reactions are recovered afterwards by back-substitution:
    ``F_cr = M u_dot + nl - F`` (eq. 7) and ``F_cr = -C^T lambda`` (eq. 10), solved on
    the dependent rows, ``lambda = -C_D^-T F_cr,D``.

:class:`MultiplierSystem` (eq. 11)
    ``[[M, D^T], [D, 0]] [u_dot; lambda] = [F - nl; gamma]`` with ``D = C`` and
    ``gamma = -C_dot u`` (eq. 9), solved by the range-space method (Cholesky of ``M``,
    then the ``(n-p) x (n-p)`` Schur complement). Optional Baumgarte terms
    ``gamma - 2 a C u - b^2 Phi``.

Drift control (both forms): ``stabilization="projection"`` applies, after every step, a
mass-weighted Gauss-Newton projection of ``q`` onto ``Phi = 0`` and then of ``u`` onto
``C u = 0`` (the same correction as :func:`diffmb.constraints.project_state`, written here
for forests and coordinate maps). The position and velocity violations are reported in
``violation``; ``diagnostics`` holds the energy, the multipliers ``reaction`` (one per
kept row, the wrench body B exerts on body A at node A, in node A's axes — Newton's third
law gives body B the opposite) and ``reaction_wrench`` (P, 6), the momentum of floating
systems, and ``repartitioned`` (1 where the build-time partition was too ill-conditioned).

Rows: each cut constrains rows of ``(rx, ry, rz, tx, ty, tz)``; rows that are
structurally redundant (a planar mechanism's out-of-plane rows) are dropped at build time
by a rank-revealing selection on ``C(q0)``, so ``C`` has full row rank ``n - p``. The
selection takes ``q0`` to be a generic configuration of the closed chain (its rank that
of nearby configurations); a ``q0`` at a singular configuration would drop a row that is
needed elsewhere.

Coordinate map: ``coordinate_map=P`` (constant, invertible, ``n x n``) makes the system's
coordinates ``q`` and speeds ``u`` related to the open trees' by ``q_tree = P q``,
``u_tree = P u`` (so ``M = P^T M_tree P``, ``nl = P^T nl_tree``), which lets a scenario
use the paper's coordinates, e.g. the slider-crank's absolute rod angle ``theta2`` where
the tree joint measures it relative to the crank.

Time: with ``clock=True`` the state carries the mission time as its last entry (named
``clock``, rate 1), and ``force_fn`` / ``outputs_fn`` are evaluated at it, so that
time-dependent controllers and their outputs (control torques, references) can be
reported by ``diagnostics`` — which sees only the state.
"""

from __future__ import annotations

import abc

from collections.abc import Callable
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from .. import closures as cl
from .. import crba, rnea, tree
from .. import joints as jt
from .. import spatial as sp
from ..closures import ROW_NAMES, Closure, LoopClosures, closure_rows, independent_rows
from ..kinematics import Kinematics, kinematics
from ..layout import layout
from ..model import Model
from ..system import System, check_stabilization

FORMULATIONS = ("kane", "dae")


# ============================================================== cut-joint description


@dataclass(frozen=True)
class Cut:
    """One cut joint: node A on ``(tree_a, body_a)``, node B on ``(tree_b, body_b)``."""

    name: str
    tree_a: int
    body_a: int
    tree_b: int
    body_b: int
    rows: tuple

    @property
    def free_rotations(self) -> tuple:
        return tuple(i for i in range(3) if i not in self.rows)


class CutJoints(eqx.Module):
    """Node placements of the cut joints (arrays) and their static description.

    ``rot_a (P, 3, 3)``: DCM [node A, body A]; ``pos_a (P, 3)``: node A's origin in body-A
    coordinates (likewise for B).
    """

    rot_a: jnp.ndarray
    pos_a: jnp.ndarray
    rot_b: jnp.ndarray
    pos_b: jnp.ndarray
    cuts: tuple = eqx.field(static=True)

    @property
    def labels(self) -> list:
        return [f"{c.name}:{ROW_NAMES[r]}" for c in self.cuts for r in range(6)]


def _locate(models, name, what):
    hits = [(k, m.body_names.index(name)) for k, m in enumerate(models) if name in m.body_names]
    if not hits:
        known = [b for m in models for b in m.body_names]
        raise ValueError(f"{what}: unknown body {name!r}; bodies are {known}")
    if len(hits) > 1:
        raise ValueError(f"{what}: body name {name!r} appears in several trees; names must be unique")
    return hits[0]


def make_cuts(models, pairs) -> CutJoints:
    """:class:`CutJoints` from pair descriptions (dicts), bodies named across the forest.

    Keys: ``name``, ``body_a``, ``body_b`` (body names), ``kind`` (``weld`` | ``point`` |
    ``hinge``, see :func:`diffmb.constraints.closure_rows`), ``axis`` (a hinge's free
    axis of node A), ``pos_a``/``pos_b`` and optional ``rot_a``/``rot_b`` (DCM [node, body]).
    """
    models = _as_models(models)
    cuts, ra, pa, rb, pb = [], [], [], [], []
    pairs = list(pairs)
    if not pairs:
        raise ValueError("make_cuts: no cut joints given")
    for k, p in enumerate(pairs):
        name = p.get("name", f"cut{k}")
        for key in ("body_a", "body_b"):
            if key not in p:
                raise ValueError(f"cut {name!r}: missing {key!r}")
        ta, ia = _locate(models, p["body_a"], f"cut {name!r} body_a")
        tb, ib = _locate(models, p["body_b"], f"cut {name!r} body_b")
        if (ta, ia) == (tb, ib):
            raise ValueError(f"cut {name!r}: both nodes are on body {p['body_a']!r}")
        rows = closure_rows(p.get("kind", "weld"), p.get("axis", 0))
        cuts.append(Cut(name, ta, ia, tb, ib, rows))
        for key, lst, shape in (("rot_a", ra, (3, 3)), ("rot_b", rb, (3, 3)),
                                ("pos_a", pa, (3,)), ("pos_b", pb, (3,))):
            default = np.eye(3) if shape == (3, 3) else np.zeros(3)
            a = np.asarray(p.get(key, default), float)
            if a.shape != shape or not np.all(np.isfinite(a)):
                raise ValueError(f"cut {name!r}: {key} must be a finite array of shape {shape}")
            if shape == (3, 3) and (not np.allclose(a @ a.T, np.eye(3), atol=1e-8) or np.linalg.det(a) < 0):
                raise ValueError(f"cut {name!r}: {key} is not a proper rotation (DCM)")
            lst.append(a)
    return CutJoints(rot_a=jnp.asarray(np.stack(ra)), pos_a=jnp.asarray(np.stack(pa)),
                     rot_b=jnp.asarray(np.stack(rb)), pos_b=jnp.asarray(np.stack(pb)),
                     cuts=tuple(cuts))


def _as_models(models) -> tuple:
    if isinstance(models, Model):
        return (models,)
    models = tuple(models)
    if not models or not all(isinstance(m, Model) for m in models):
        raise TypeError("models: expected a diffmb Model or a non-empty sequence of Models")
    return models


def _forest_loops(models, cuts) -> tuple:
    """``(closures, paths, nv)`` of the cuts with forest-global body and speed indices."""
    body0 = np.concatenate([[0], np.cumsum([m.n_bodies for m in models])]).astype(int)
    dof0 = np.concatenate([[0], np.cumsum([m.nv for m in models])]).astype(int)
    closures, paths = [], []
    for c in cuts.cuts:
        closures.append(Closure(c.name, int(body0[c.tree_a] + c.body_a),
                                int(body0[c.tree_b] + c.body_b), c.rows))
        pa = [int(dof0[c.tree_a]) + j for j in layout(models[c.tree_a]).path_dofs(c.body_a)]
        pb = [int(dof0[c.tree_b]) + j for j in layout(models[c.tree_b]).path_dofs(c.body_b)]
        if c.tree_a != c.tree_b:
            shared = set()
        else:
            shared = set(pa) & set(pb)
        path = [(j, 1.0) for j in pb if j not in shared] + [(j, -1.0) for j in pa if j not in shared]
        paths.append((tuple(j for j, _ in path), tuple(s for _, s in path)))
    return tuple(closures), tuple(paths), int(dof0[-1])


def _lu_pivot_ratio(lu):
    d = jnp.abs(jnp.diagonal(lu))
    return jnp.min(d) / jnp.maximum(jnp.max(d), 1e-300)


def _greedy_partition(C):
    """Column-pivoted Gram-Schmidt on ``C`` (m x n): ``perm`` with the ``n - m``
    independent columns first, then the ``m`` pivot (dependent) columns, both ascending."""
    m, n = C.shape
    R = C
    chosen = jnp.zeros(n, bool)
    for _ in range(m):
        norms = jnp.where(chosen, -1.0, jnp.sum(R * R, axis=0))
        j = jnp.argmax(norms)
        col = R[:, j]
        v = col / jnp.sqrt(jnp.maximum(jnp.sum(col * col), 1e-300))
        R = R - v[:, None] * (v @ R)[None, :]
        chosen = chosen.at[j].set(True)
    return jnp.argsort(chosen, stable=True)


# ===================================================================== the systems


class CutJointSystem(System):
    """Common base of :class:`KaneSystem` and :class:`MultiplierSystem` (module doc).

    ``models``: a :class:`Model` or a sequence of them (a forest; bodies named uniquely).
    ``cuts``: :class:`CutJoints` (see :func:`make_cuts`). ``q0``/``u0``: initial state in
    the system's coordinates, which must satisfy the closures (``Phi(q0) = 0``,
    ``C u0 = 0``, to ``check_tol``). ``force_fn(t, q, u, forcing) -> F`` adds generalized
    active forces (in ``u``'s components) to the trees' passive joint forces;
    ``outputs_fn(t, q, u, forcing) -> dict`` adds named diagnostics.
    ``independent``: names of the independent speeds (default: pivoted QR of ``C(q0)``).
    """

    models: tuple
    cuts: CutJoints
    q0: jnp.ndarray
    u0: jnp.ndarray
    forcing: object
    baumgarte: dict
    names: tuple = eqx.field(static=True)
    speed_names: tuple = eqx.field(static=True)
    coordinate_map: tuple | None = eqx.field(static=True)
    kept_rows: tuple = eqx.field(static=True)
    loops: tuple = eqx.field(static=True)
    perm: tuple = eqx.field(static=True)
    n_independent: int = eqx.field(static=True)
    force_fn: Callable | None = eqx.field(static=True)
    outputs_fn: Callable | None = eqx.field(static=True)
    stabilization: str = eqx.field(static=True)
    projection_iterations: int = eqx.field(static=True)
    repartition_tol: float = eqx.field(static=True)
    clock: bool = eqx.field(static=True)

    formulation = "abstract"

    def __init__(self, models, cuts: CutJoints, q0, u0, *, names=None, coordinate_map=None,
                 force_fn=None, forcing=None, outputs_fn=None, independent=None,
                 stabilization="none", baumgarte=(0.0, 0.0), projection_iterations=2,
                 repartition_tol=1e-3, clock=False, check_tol=1e-8):
        models = _as_models(models)
        if not isinstance(cuts, CutJoints):
            raise TypeError("cuts: expected CutJoints (see diffmb.formulations.kane.make_cuts)")
        for c in cuts.cuts:
            for t, b in ((c.tree_a, c.body_a), (c.tree_b, c.body_b)):
                if not (0 <= t < len(models) and 0 <= b < models[t].n_bodies):
                    raise ValueError(f"cut {c.name!r}: body index ({t}, {b}) outside the forest")
        self.models = models
        self.cuts = cuts
        n = sum(m.nq for m in models)
        dt = models[0].mass.dtype
        self.q0 = jnp.asarray(q0, dt)
        self.u0 = jnp.asarray(u0, dt)
        for nm, v in (("q0", self.q0), ("u0", self.u0)):
            if v.shape != (n,):
                raise ValueError(f"{type(self).__name__} {nm}: expected shape ({n},), got {v.shape}")
            if not np.all(np.isfinite(np.asarray(v))):
                raise ValueError(f"{type(self).__name__} {nm}: contains non-finite values")
        if names is None:
            names = tuple(x for m in models for x in m.coordinate_names)
            if coordinate_map is not None:
                raise ValueError("coordinate_map: give the mapped coordinates' names too")
            speed_names = tuple(x for m in models for x in m.velocity_names)
        else:
            speed_names = tuple(f"{x}_dot" for x in names)
        names = tuple(str(x) for x in names)
        if len(names) != n or len(set(names)) != n:
            raise ValueError(f"names: expected {n} distinct coordinate names, got {list(names)}")
        self.names = names
        self.speed_names = speed_names
        if coordinate_map is not None:
            P = np.asarray(coordinate_map, float)
            if P.shape != (n, n) or not np.all(np.isfinite(P)):
                raise ValueError(f"coordinate_map: expected a finite ({n}, {n}) matrix, got shape {P.shape}")
            if abs(np.linalg.det(P)) < 1e-12 * max(1.0, np.abs(P).max()) ** n:
                raise ValueError("coordinate_map: the matrix is singular")
            if any(k in jt.MRP_KINDS for m in models for k in m.joint_kinds):
                raise ValueError("coordinate_map: not supported with spherical/free joints (MRPs)")
            coordinate_map = tuple(tuple(float(v) for v in row) for row in P)
        self.coordinate_map = coordinate_map
        check_stabilization(stabilization)
        if stabilization == "baumgarte" and self.formulation != "dae":
            raise ValueError("stabilization 'baumgarte' is for the multiplier (DAE) form; "
                             "the Kane form uses 'none' or 'projection'")
        self.stabilization = stabilization
        self.projection_iterations = int(projection_iterations)
        if not (0.0 <= repartition_tol < 1.0):
            raise ValueError(f"repartition_tol must be in [0, 1), got {repartition_tol}")
        self.repartition_tol = float(repartition_tol)
        a, b = baumgarte
        self.baumgarte = {"a": jnp.asarray(a, dt), "b": jnp.asarray(b, dt)}
        self.force_fn = force_fn
        self.outputs_fn = outputs_fn
        self.forcing = forcing
        self.clock = bool(clock)
        # --- the cuts as loop closures of the forest (global body and speed indices)
        self.loops = _forest_loops(models, cuts)
        # --- kept rows and partition from C(q0) (plain numpy, before any tracing)
        self.kept_rows = tuple(int(6 * k + r) for k, c in enumerate(cuts.cuts) for r in c.rows)
        self.perm = tuple(range(n))
        self.n_independent = n
        params = self.default_params()
        q0n = self.q0
        phi_all = np.asarray(self._residual_all(q0n, params))
        for k, c in enumerate(cuts.cuts):
            err = np.abs(phi_all[k, list(c.rows)]).max()
            if err > check_tol:
                raise ValueError(f"cut {c.name!r}: the initial configuration q0 violates the closure by "
                                 f"{err:.3g} (rows {[ROW_NAMES[r] for r in c.rows]}); the nodes do not meet")
        C_all = np.asarray(self.constraint_jacobian(q0n, params))
        keep = independent_rows(C_all)
        if not keep:
            raise ValueError("cuts: the closure rows have no independent component at q0")
        self.kept_rows = tuple(self.kept_rows[i] for i in keep)
        C = C_all[keep]
        m = C.shape[0]
        if m >= n:
            raise ValueError(f"cuts: {m} independent closure rows leave no mobility for {n} coordinates")
        if independent is None:
            _, _, piv = scipy.linalg.qr(C, pivoting=True)
            dep = sorted(int(i) for i in piv[:m])
        else:
            independent = tuple(independent)
            bad = [x for x in independent if x not in names]
            if bad:
                raise ValueError(f"independent: unknown coordinate(s) {bad}; coordinates are {list(names)}")
            if len(set(independent)) != n - m:
                raise ValueError(f"independent: expected {n - m} distinct speeds (n = {n}, "
                                 f"{m} independent closure rows), got {len(set(independent))}")
            dep = sorted(i for i in range(n) if names[i] not in independent)
        ind = sorted(set(range(n)) - set(dep))
        sv = np.linalg.svd(C[:, dep], compute_uv=False)
        if sv.min() < 1e-9 * max(sv.max(), 1e-300):
            raise ValueError(f"partition: the dependent block C_D for {[names[i] for i in dep]} is "
                             f"singular at q0; choose other independent speeds")
        self.perm = tuple(ind + dep)
        self.n_independent = len(ind)
        vel = np.asarray(C @ np.asarray(self.u0))
        if np.abs(vel).max() > check_tol * max(1.0, np.abs(np.asarray(self.u0)).max()):
            raise ValueError(f"u0 violates the velocity closure C(q0) u0 = 0 by {np.abs(vel).max():.3g}")

    # ------------------------------------------------------------------ layout
    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def independent_names(self) -> tuple:
        return tuple(self.names[i] for i in self.perm[: self.n_independent])

    @property
    def dependent_names(self) -> tuple:
        return tuple(self.names[i] for i in self.perm[self.n_independent:])

    @property
    def velocity_names(self) -> tuple:
        """Names of the speeds ``u``: the trees' (``*_wx`` ... for free joints) or ``<name>_dot``."""
        return self.speed_names

    @property
    def state_names(self) -> tuple:
        return self.names + self.velocity_names + (("clock",) if self.clock else ())

    @property
    def coordinate_names(self) -> tuple:
        return self.names

    @property
    def reaction_labels(self) -> list:
        return [self.cuts.labels[i] for i in self.kept_rows]

    def default_params(self):
        p = {"models": self.models, "cuts": self.cuts, "q0": self.q0, "u0": self.u0,
             "forcing": self.forcing}
        if self.stabilization == "baumgarte":
            p["baumgarte"] = self.baumgarte
        return p

    def init_state(self, params):
        parts = [params["q0"], params["u0"]]
        if self.clock:
            parts.append(jnp.zeros(1, params["q0"].dtype))
        return jnp.concatenate(parts)

    def split(self, x):
        n = self.n
        t = x[2 * n] if self.clock else jnp.zeros((), x.dtype)
        return x[:n], x[n: 2 * n], t

    # --------------------------------------------------- coordinate map and forest
    def _P(self, dtype):
        return None if self.coordinate_map is None else jnp.asarray(np.asarray(self.coordinate_map), dtype)

    def _to_tree(self, v):
        P = self._P(v.dtype)
        return v if P is None else P @ v

    def _blocks(self, v, models):
        out, s = [], 0
        for m in models:
            out.append(v[s: s + m.nq])
            s += m.nq
        return out

    def rates(self, q, u, params):
        """``q_dot`` from ``u`` (identity except MRP joints, Fulton & Schaub eqs. 3-4)."""
        models = params["models"]
        qt, ut = self._to_tree(q), self._to_tree(u)
        r = jnp.concatenate([tree.coordinate_rates(m, a, b) for m, a, b in
                             zip(models, self._blocks(qt, models), self._blocks(ut, models))])
        P = self._P(q.dtype)
        return r if P is None else jnp.linalg.solve(P, r)

    def workspace(self, q, u, params) -> Kinematics:
        """The forest's kinematics workspace at ``(q, u)`` (``u`` may be ``None``): the
        trees' workspaces stacked, bodies and speeds in forest order."""
        models = params["models"]
        qt = self._blocks(self._to_tree(q), models)
        ut = [None] * len(models) if u is None else self._blocks(self._to_tree(u), models)
        wss = [kinematics(m, a, b) for m, a, b in zip(models, qt, ut)]
        if len(wss) == 1:
            return wss[0]
        return jax.tree.map(lambda *xs: jnp.concatenate(xs), *wss)

    def _tree_ws(self, ws, models):
        """Split a forest workspace back into the trees' (for their CRBA / RNEA)."""
        if len(models) == 1:
            return [ws]
        out, b0, v0 = [], 0, 0
        for m in models:
            b1, v1 = b0 + m.n_bodies, v0 + m.nv
            out.append(Kinematics(ws.rot[b0:b1], ws.pos[b0:b1], ws.inertia[b0:b1], ws.S[v0:v1],
                                  None if ws.vel is None else ws.vel[b0:b1],
                                  None if ws.acc is None else ws.acc[b0:b1],
                                  None if ws.joint_acc is None else ws.joint_acc[b0:b1]))
            b0, v0 = b1, v1
        return out

    def _map(self, M=None, v=None):
        P = self._P((M if M is not None else v).dtype)
        if P is None:
            return M if M is not None else v
        return P.T @ M @ P if M is not None else P.T @ v

    def mass_matrix(self, q, params):
        """``M(q)`` (eq. 3): block-diagonal CRBA of the trees, mapped by ``P^T M P``."""
        models = params["models"]
        return self._mass(self.workspace(q, None, params), models)

    def _mass(self, ws, models):
        blocks = [crba.mass_matrix(m, w) for m, w in zip(models, self._tree_ws(ws, models))]
        M = jax.scipy.linalg.block_diag(*blocks) if len(blocks) > 1 else blocks[0]
        return self._map(M=M)

    def _tree_forces(self, q, u, params, ws=None):
        models = params["models"]
        ws = self.workspace(q, u, params) if ws is None else ws
        nl = jnp.concatenate([rnea.bias_forces(m, w) for m, w in zip(models, self._tree_ws(ws, models))])
        qt, ut = self._to_tree(q), self._to_tree(u)
        fj = jnp.concatenate([tree.joint_forces(m, a, b) for m, a, b in
                              zip(models, self._blocks(qt, models), self._blocks(ut, models))])
        return self._map(v=nl), self._map(v=fj)

    def active_forces(self, t, q, u, params, ws=None):
        """``F`` of eq. (4): passive joint springs/dampers plus ``force_fn``."""
        F = self._tree_forces(q, u, params, ws)[1]
        if self.force_fn is not None:
            F = F + self.force_fn(t, q, u, params["forcing"])
        return F

    # -------------------------------------------------------------- closures
    def _loops(self, params) -> LoopClosures:
        cuts = params["cuts"]
        closures, paths, nv = self.loops
        return LoopClosures(cuts.rot_a, cuts.pos_a, cuts.rot_b, cuts.pos_b, closures=closures,
                            rows=self.kept_rows, paths=paths, nv=nv)

    def _residual_all(self, q, params):
        """(P, 6) residual ``(rx, ry, rz, tx, ty, tz)`` in node A's axes
        (:func:`diffmb.closures.residual` on the forest)."""
        return cl.residual(self.workspace(q, None, params), self._loops(params))

    def closure(self, q, params):
        """``Phi(q)`` (eq. 8): the kept residual rows of all cut joints."""
        return self._residual_all(q, params).reshape(-1)[np.asarray(self.kept_rows)]

    def _jacobian(self, ws, params):
        loops = self._loops(params)
        G = cl.dense_jacobian(cl.jacobian_blocks(ws, loops), loops, self.n)[np.asarray(self.kept_rows)]
        P = self._P(G.dtype)
        return G if P is None else G @ P

    def constraint_jacobian(self, q, params):
        """``C(q)`` (eq. 12): the closure rows of the two nodes' Jacobians along their tree
        paths (:func:`diffmb.closures.jacobian_blocks`), mapped by ``P``."""
        return self._jacobian(self.workspace(q, None, params), params)

    def terms(self, t, q, u, params):
        """``(workspace, M, nl, F, C)`` at one state: the inertia, nonlinear and active
        forces of eqs. (3)-(4) and the closure Jacobian of eq. (12), from one workspace."""
        ws = self.workspace(q, u, params)
        M = self._mass(ws, params["models"])
        nl, _ = self._tree_forces(q, u, params, ws)
        return ws, M, nl, self.active_forces(t, q, u, params, ws), self._jacobian(ws, params)

    def _velocity_product(self, ws, params):
        """``C_dot u`` at the workspace's state (eq. 9's ``-gamma``), from its bias accelerations."""
        return cl.velocity_product(ws, self._loops(params)).reshape(-1)[np.asarray(self.kept_rows)]

    def null_basis(self, q, params):
        """``N = [I; A]`` in the public order (n x p): ``u = N u_I`` spans ``C u = 0``, and
        ``N^T = A2`` (eq. 2) in the partition order. Uses the build-time partition."""
        p = self.n_independent
        C = self.constraint_jacobian(q, params)
        perm = np.asarray(self.perm)
        A = -jnp.linalg.solve(C[:, perm[p:]], C[:, perm[:p]])
        Np = jnp.concatenate([jnp.eye(p, dtype=q.dtype), A], axis=0)
        return jnp.zeros_like(Np).at[perm].set(Np)

    def reduced_mass_matrix(self, q, params):
        """``A2 M A2^T`` (p x p): the constrained system's mass matrix on ``u_I`` (eq. 4)."""
        N = self.null_basis(q, params)
        return N.T @ self.mass_matrix(q, params) @ N

    # ---------------------------------------------------------- the equations
    @abc.abstractmethod
    def accelerations(self, t, q, u, params):
        """``(u_dot, lambda, info)``; ``lambda`` are the multipliers of eq. (10)."""

    def reactions(self, t, q, u, params):
        """Multipliers ``lambda`` (one per kept row) of eq. (10)."""
        return self.accelerations(t, q, u, params)[1]

    def reaction_wrenches(self, lam):
        """(P, 6) wrench ``[torque; force]`` body B exerts on body A at node A, node A's axes."""
        P = len(self.cuts.cuts)
        return jnp.zeros(6 * P, lam.dtype).at[np.asarray(self.kept_rows)].set(lam).reshape(P, 6)

    def state_derivative(self, t, x, params):
        q, u, t = self.split(x)   # the clock is part of the state
        udot = self.accelerations(t, q, u, params)[0]
        parts = [self.rates(q, u, params), udot]
        if self.clock:
            parts.append(jnp.ones(1, x.dtype))
        return jnp.concatenate(parts)

    # --------------------------------------------------------- drift control
    @property
    def _mrp_slices(self):
        out, off = [], 0
        for m in self.models:
            for (s, _), k in zip(m.body_slices, m.joint_kinds):
                if k in jt.MRP_KINDS:
                    out.append((off + s, off + s + 3))
            off += m.nq
        return tuple(out)

    @property
    def has_projection(self) -> bool:
        return self.stabilization == "projection" or len(self._mrp_slices) > 0

    def project(self, x, params):
        """Mass-weighted projection onto ``Phi = 0`` then ``C u = 0``; MRP shadow switch."""
        q, u, _ = self.split(x)
        if self.stabilization == "projection":
            rows = np.asarray(self.kept_rows)

            def solve(q):
                ws = self.workspace(q, None, params)
                M = self._mass(ws, params["models"])
                C = self._jacobian(ws, params)
                L = jnp.linalg.cholesky(M)
                Y = jax.scipy.linalg.cho_solve((L, True), C.T)
                return ws, C, Y, C @ Y

            def gn(_, q):
                ws, C, Y, Lam = solve(q)
                phi = cl.residual(ws, self._loops(params)).reshape(-1)[rows]
                du = -Y @ jnp.linalg.solve(Lam, phi)
                return q + self.rates(q, du, params)

            q = jax.lax.fori_loop(0, self.projection_iterations, gn, q)
            _, C, Y, Lam = solve(q)
            u = u - Y @ jnp.linalg.solve(Lam, C @ u)
        for s, e in self._mrp_slices:
            q = q.at[s:e].set(sp.mrp_switch(q[s:e]))
        return jnp.concatenate([q, u, x[2 * self.n:]])

    # ----------------------------------------------------------- diagnostics
    def violation(self, x, params):
        q, u, _ = self.split(x)
        ws = self.workspace(q, u, params)
        loops = self._loops(params)
        rows = np.asarray(self.kept_rows)
        phi = cl.residual(ws, loops).reshape(-1)[rows]
        w = cl.velocity(ws, loops).reshape(-1)[rows]
        return {"position": jnp.max(jnp.abs(phi)), "velocity": jnp.max(jnp.abs(w))}

    def energy(self, q, u, params):
        models = params["models"]
        ws = self.workspace(q, u, params)
        qt = self._blocks(self._to_tree(q), models)
        return sum(tree.kinetic_energy_ws(w) + tree.potential_energy_ws(m, w, a)
                   for m, w, a in zip(models, self._tree_ws(ws, models), qt))

    def diagnostics(self, x, params):
        q, u, t = self.split(x)
        models = params["models"]
        udot, lam, info = self.accelerations(t, q, u, params)
        out = {"energy": self.energy(q, u, params), "reaction": lam,
               "reaction_wrench": self.reaction_wrenches(lam)}
        out.update(info)
        if any(m.floating_base for m in models):
            h = tree.spatial_momentum_ws(self.workspace(q, u, params))
            out["angular_momentum"] = h[:3]  # about the world origin
            out["linear_momentum"] = h[3:]
        if self.outputs_fn is not None:
            out.update(self.outputs_fn(t, q, u, params["forcing"]))
        return out


class KaneSystem(CutJointSystem):
    """Kane's equations for constrained systems, eq. (6): an ODE in ``u``, no multipliers.

    See the module docstring; the constructor is :class:`CutJointSystem`'s.
    """

    formulation = "kane"

    def partition(self, C):
        """``(perm, lu_piv of C_D, repartitioned)`` at the current state.

        The build-time partition is kept while its ``C_D`` pivot ratio stays above
        ``repartition_tol``; otherwise a greedy column pivoting of ``C`` picks a new one.
        """
        p = self.n_independent
        perm0 = jnp.asarray(np.asarray(self.perm))
        lu0 = jax.scipy.linalg.lu_factor(C[:, np.asarray(self.perm[p:])])
        if self.repartition_tol == 0.0:
            return perm0, lu0, jnp.zeros((), C.dtype)
        ill = _lu_pivot_ratio(lu0[0]) < self.repartition_tol

        def repartition(_):
            perm = _greedy_partition(C)
            return perm, jax.scipy.linalg.lu_factor(jnp.take(C, perm[p:], axis=1))

        perm, lu = jax.lax.cond(ill, repartition, lambda _: (perm0, lu0), None)
        return perm, lu, ill.astype(C.dtype)

    def kane_matrices(self, t, q, u, params):
        """The quantities of eqs. (2)-(6) and (13) at one state, in the partition order.

        Returns a dict: ``perm`` (independent speeds first), ``A`` (eq. 13), ``A1``
        (eq. 5), ``A2`` (eq. 2), ``T`` and ``rhs`` (eq. 6: ``T u_dot[perm] = rhs``), and
        ``M``, ``nl``, ``F``, ``lu`` (LU of ``C_D``), ``repartitioned``.
        """
        n, p = self.n, self.n_independent
        ws, M, nl, F, C = self.terms(t, q, u, params)
        perm, lu, switched = self.partition(C)
        Cp = jnp.take(C, perm, axis=1)
        A = -jax.scipy.linalg.lu_solve(lu, Cp[:, :p])                   # eq. (13)
        # A_dot u_I (eq. 5) = -C_D^-1 C_dot [u_I; A u_I]; evaluated with the state's u
        # (equal on C u = 0), which makes u_dot independent of the partition off the
        # velocity manifold too: the rows say C u_dot = -C_dot u for any partition.
        Adot_uI = -jax.scipy.linalg.lu_solve(lu, self._velocity_product(ws, params))
        eye_m = jnp.eye(n - p, dtype=q.dtype)
        A1 = jnp.concatenate([-A, eye_m], axis=1)                         # eq. (5)
        A2 = jnp.concatenate([jnp.eye(p, dtype=q.dtype), A.T], axis=1)   # eq. (2)
        Mp = jnp.take(jnp.take(M, perm, axis=0), perm, axis=1)
        rp = jnp.take(F - nl, perm)
        T = jnp.concatenate([A1, A2 @ Mp], axis=0)                        # eq. (6)
        rhs = jnp.concatenate([Adot_uI, A2 @ rp])
        return {"perm": perm, "A": A, "A1": A1, "A2": A2, "T": T, "rhs": rhs, "M": M,
                "nl": nl, "F": F, "lu": lu, "repartitioned": switched}

    def accelerations(self, t, q, u, params):
        p = self.n_independent
        k = self.kane_matrices(t, q, u, params)
        perm = k["perm"]
        udot = jnp.zeros_like(u).at[perm].set(jnp.linalg.solve(k["T"], k["rhs"]))  # eq. (6)
        # reactions on demand: eq. (7) F_cr = M u_dot + nl - F, eq. (10) F_cr = -C^T lambda
        F_cr = k["M"] @ udot + k["nl"] - k["F"]
        lam = -jax.scipy.linalg.lu_solve(k["lu"], jnp.take(F_cr, perm)[p:], trans=1)
        return udot, lam, {"repartitioned": k["repartitioned"]}


class MultiplierSystem(CutJointSystem):
    """The Lagrange-multiplier DAE form of the same system, eq. (11) (index-1 form, eq. 9)."""

    formulation = "dae"

    def accelerations(self, t, q, u, params):
        ws, M, nl, F, D = self.terms(t, q, u, params)
        gamma = -self._velocity_product(ws, params)                       # eq. (9)
        if self.stabilization == "baumgarte":
            a, b = params["baumgarte"]["a"], params["baumgarte"]["b"]
            gamma = gamma - 2.0 * a * (D @ u) - b**2 * self.closure(q, params)
        L = jnp.linalg.cholesky(M)
        sol = jax.scipy.linalg.cho_solve((L, True), jnp.concatenate([(F - nl)[:, None], D.T], axis=1))
        a_free, Y = sol[:, 0], sol[:, 1:]
        lam = jnp.linalg.solve(D @ Y, D @ a_free - gamma)                  # Schur complement of eq. (11)
        udot = a_free - Y @ lam
        return udot, lam, {}


def build(formulation: str, *args, **kwargs) -> CutJointSystem:
    """``KaneSystem`` (``"kane"``) or ``MultiplierSystem`` (``"dae"``) with the same arguments."""
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation: unknown {formulation!r}; expected one of {list(FORMULATIONS)}")
    cls = KaneSystem if formulation == "kane" else MultiplierSystem
    return cls(*args, **kwargs)
