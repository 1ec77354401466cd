"""``CutJointSystem``: the forest of trees closed by cut joints, its kinematics, mass
matrix, forces, closure rows and their Jacobian, shared by Kane's and the multiplier
form."""


from __future__ import annotations

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ...closures import nodes as cl
from ...closures.nodes import ROW_NAMES, LoopClosures, independent_rows
from ...math import spatial as sp
from ...system import CLOCK_NAMES, System, check_stabilization, clock_entry
from ...tree import api, crba, joints as jt, rnea
from ...tree.body_frames import BodyFrames, from_kinematics
from ...tree.kinematics import Kinematics, kinematics
from .cuts import CutJoints, _as_models, _forest_loops


def _check_cuts(models, cuts):
    if not isinstance(cuts, CutJoints):
        raise TypeError("cuts: expected CutJoints (see diffmb.formulations.kane.make_cuts)")
    for c in cuts.cuts:
        for t, b in ((c.tree_a, c.body_a), (c.tree_b, c.body_b)):
            if not (0 <= t < len(models) and 0 <= b < models[t].n_bodies):
                raise ValueError(f"cut {c.name!r}: body index ({t}, {b}) outside the forest")


def _initial_state(owner: str, models, q0, u0):
    """``(q0, u0)`` as finite arrays of the forest's size and dtype."""
    n, dt = sum(m.nq for m in models), models[0].mass.dtype
    out = jnp.asarray(q0, dt), jnp.asarray(u0, dt)
    for nm, v in zip(("q0", "u0"), out):
        if v.shape != (n,):
            raise ValueError(f"{owner} {nm}: expected shape ({n},), got {v.shape}")
        if not np.all(np.isfinite(np.asarray(v))):
            raise ValueError(f"{owner} {nm}: contains non-finite values")
    return out


def _coordinate_names(models, names, coordinate_map) -> tuple:
    """``(names, speed_names)``: the trees' own, or ``names`` (and ``<name>_dot``) given
    for mapped coordinates."""
    n = sum(m.nq for m in models)
    if names is None:
        if coordinate_map is not None:
            raise ValueError("coordinate_map: give the mapped coordinates' names too")
        names = tuple(x for m in models for x in m.coordinate_names)
        speed_names = tuple(x for m in models for x in m.velocity_names)
    else:
        speed_names = tuple(f"{x}_dot" for x in names)
    names = tuple(str(x) for x in names)
    if len(names) != n or len(set(names)) != n:
        raise ValueError(f"names: expected {n} distinct coordinate names, got {list(names)}")
    return names, speed_names


def _coordinate_map(models, coordinate_map):
    """``coordinate_map`` as a hashable tuple of rows, checked: a finite, regular ``(n, n)``
    matrix, on trees without MRP joints."""
    if coordinate_map is None:
        return None
    n = sum(m.nq for m in models)
    P = np.asarray(coordinate_map, float)
    if P.shape != (n, n) or not np.all(np.isfinite(P)):
        raise ValueError(f"coordinate_map: expected a finite ({n}, {n}) matrix, got shape {P.shape}")
    if abs(np.linalg.det(P)) < 1e-12 * max(1.0, np.abs(P).max()) ** n:
        raise ValueError("coordinate_map: the matrix is singular")
    if any(k in jt.MRP_KINDS for m in models for k in m.joint_kinds):
        raise ValueError("coordinate_map: not supported with spherical/free joints (MRPs)")
    return tuple(tuple(float(v) for v in row) for row in P)


@eqx.filter_jit
def _closure_at(system, q, params):
    """``(residual (P, 6), C (all rows))`` at ``q`` as one program, for the build's checks:
    evaluated operation by operation they compiled a program per operation (dual-arm-grasp's
    build: ~300 of them, 14 of its 20 s); jitted on the system's structure, a second build
    of the same structure compiles nothing."""
    return system._residual_all(q, params), system.constraint_jacobian(q, params)


def _check_closed(cuts, phi_all, check_tol):
    """ValueError naming the first cut whose closure residual at ``q0`` exceeds ``check_tol``."""
    for k, c in enumerate(cuts.cuts):
        err = np.abs(phi_all[k, list(c.rows)]).max()
        if err > check_tol:
            raise ValueError(f"cut {c.name!r}: the initial configuration q0 violates the closure by "
                             f"{err:.3g} (rows {[ROW_NAMES[r] for r in c.rows]}); the nodes do not meet")


def _dependent_speeds(C, independent, names) -> list:
    """Indices of the dependent speeds: the pivots of ``C``'s QR, or all but the named
    ``independent`` ones; ValueError when the dependent block ``C_D`` is singular."""
    n, m = len(names), C.shape[0]
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
    sv = np.linalg.svd(C[:, dep], compute_uv=False)
    if sv.min() < 1e-9 * max(sv.max(), 1e-300):
        raise ValueError(f"partition: the dependent block C_D for {[names[i] for i in dep]} is "
                         f"singular at q0; choose other independent speeds")
    return dep


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
        _check_cuts(models, cuts)
        self.models, self.cuts = models, cuts
        self.q0, self.u0 = _initial_state(type(self).__name__, models, q0, u0)
        self.names, self.speed_names = _coordinate_names(models, names, coordinate_map)
        self.coordinate_map = _coordinate_map(models, coordinate_map)
        self.stabilization = self._checked_stabilization(stabilization)
        self.projection_iterations = int(projection_iterations)
        if not (0.0 <= repartition_tol < 1.0):
            raise ValueError(f"repartition_tol must be in [0, 1), got {repartition_tol}")
        self.repartition_tol = float(repartition_tol)
        a, b = baumgarte
        self.baumgarte = {"a": jnp.asarray(a, self.q0.dtype), "b": jnp.asarray(b, self.q0.dtype)}
        self.force_fn, self.outputs_fn, self.forcing = force_fn, outputs_fn, forcing
        self.clock = bool(clock)
        self.loops = _forest_loops(models, cuts)    # the cuts as loop closures of the forest
        self.kept_rows, self.perm, self.n_independent = self._partition(independent, check_tol)

    def _checked_stabilization(self, stabilization) -> str:
        check_stabilization(stabilization)
        if stabilization == "baumgarte" and self.formulation != "dae":
            raise ValueError("stabilization 'baumgarte' is for the multiplier (DAE) form; "
                             "the Kane form uses 'none' or 'projection'")
        return stabilization

    def _partition(self, independent, check_tol) -> tuple:
        """``(kept_rows, perm, n_independent)`` from ``C(q0)`` in plain numpy, before any
        tracing: the independent closure rows, and the speeds ordered independent first
        (pivoted QR of ``C(q0)`` unless ``independent`` names them). Checks that ``q0``
        closes every cut and ``u0`` the velocity closure, to ``check_tol`` (and at least 100
        round-offs of the coordinates' dtype: a float32 slider-crank closes to 6e-8)."""
        n = len(self.names)
        self.kept_rows = tuple(int(6 * k + r) for k, c in enumerate(self.cuts.cuts) for r in c.rows)
        self.perm, self.n_independent = tuple(range(n)), n
        phi_all, C_all = (np.asarray(a) for a in _closure_at(self, self.q0, self.default_params()))
        q0 = np.asarray(self.q0)
        check_tol = max(check_tol, 100 * float(np.finfo(q0.dtype).eps) * max(1.0, float(np.abs(q0).max())))
        _check_closed(self.cuts, phi_all, check_tol)
        keep = independent_rows(C_all)
        if not keep:
            raise ValueError("cuts: the closure rows have no independent component at q0")
        C = C_all[keep]
        if C.shape[0] >= n:
            raise ValueError(f"cuts: {C.shape[0]} independent closure rows leave no mobility for {n} coordinates")
        dep = _dependent_speeds(C, independent, self.names)
        ind = sorted(set(range(n)) - set(dep))
        vel = np.asarray(C @ np.asarray(self.u0))
        if np.abs(vel).max() > check_tol * max(1.0, np.abs(np.asarray(self.u0)).max()):
            raise ValueError(f"u0 violates the velocity closure C(q0) u0 = 0 by {np.abs(vel).max():.3g}")
        return tuple(self.kept_rows[i] for i in keep), tuple(ind + dep), len(ind)

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
        return self.names + self.velocity_names + (CLOCK_NAMES if self.clock else ())

    @property
    def coordinate_names(self) -> tuple:
        return self.names

    @property
    def coordinate_roles(self) -> dict:
        """Hinges: the coordinates that move revolute joints only (through the
        ``coordinate_map`` ``q_tree = P q`` when there is one)."""
        tree = tuple(x for m in self.models for x in m.coordinate_names)
        revolute = {x for m in self.models for x in m.hinge_coordinates}
        is_rev = np.array([x in revolute for x in tree])
        P = np.eye(len(tree)) if self.coordinate_map is None else np.asarray(self.coordinate_map)
        hinges = tuple(nm for j, nm in enumerate(self.names)
                       if np.any(P[:, j] != 0) and np.all(is_rev[P[:, j] != 0]))
        return {"hinge": hinges} if hinges else {}

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
        return jnp.concatenate([params["q0"], params["u0"]] + clock_entry(self.clock, 0.0, params["q0"].dtype))

    def unpack(self, x):
        """``(q, u, t)``: coordinates, speeds and the clock (zero without one)."""
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
        r = jnp.concatenate([api.coordinate_rates(m, a, b) for m, a, b in
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

    @property
    def tree_models(self) -> tuple:
        return tuple(self.models)

    @property
    def body_names(self) -> tuple:
        return tuple(n for m in self.models for n in m.body_names)

    @sp.jit_per_form
    def body_frames(self, x, params) -> BodyFrames:
        """Every body's pose and rates at state ``x`` (:mod:`diffmb.tree.body_frames`), forest order."""
        q, u, _ = self.unpack(x)
        return from_kinematics(self.workspace(q, u, params))

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
        blocks = [crba.mass_matrix_ws(m, w) for m, w in zip(models, self._tree_ws(ws, models))]
        M = jax.scipy.linalg.block_diag(*blocks) if len(blocks) > 1 else blocks[0]
        return self._map(M=M)

    def _tree_forces(self, q, u, params, ws=None):
        models = params["models"]
        ws = self.workspace(q, u, params) if ws is None else ws
        nl = jnp.concatenate([rnea.bias_forces_ws(m, w) for m, w in zip(models, self._tree_ws(ws, models))])
        qt, ut = self._to_tree(q), self._to_tree(u)
        fj = jnp.concatenate([api.joint_forces(m, a, b) for m, a, b in
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
        (:func:`diffmb.closures.nodes.residual` on the forest)."""
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
        paths (:func:`diffmb.closures.nodes.jacobian_blocks`), mapped by ``P``."""
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
        """``A2 M A2^T`` (p x p): the constrained system's mass matrix on ``u_I`` (eq. 4);
        one program per system structure."""
        return _reduced_mass_matrix(self, q, params)

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
        q, u, t = self.unpack(x)   # the clock is part of the state
        udot = self.accelerations(t, q, u, params)[0]
        return jnp.concatenate([self.rates(q, u, params), udot] + clock_entry(self.clock, 1.0, x.dtype))

    # --------------------------------------------------------- drift control
    @property
    def _mrp_starts(self) -> tuple:
        offsets = np.cumsum([0] + [m.nq for m in self.models])
        return sum((jt.mrp_starts(m, int(o)) for m, o in zip(self.models, offsets)), ())

    @property
    def has_projection(self) -> bool:
        return self.stabilization == "projection" or len(self._mrp_starts) > 0

    def project(self, x, params):
        """Mass-weighted projection onto ``Phi = 0`` then ``C u = 0``; MRP shadow switch."""
        q, u, _ = self.unpack(x)
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
        q = sp.mrp_switch_at(q, self._mrp_starts)
        return jnp.concatenate([q, u, x[2 * self.n:]])

    # ----------------------------------------------------------- diagnostics
    @sp.jit_per_form
    def violation(self, x, params):
        q, u, _ = self.unpack(x)
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
        return sum(api.kinetic_energy_ws(w) + api.potential_energy_ws(m, w, a)
                   for m, w, a in zip(models, self._tree_ws(ws, models), qt))

    @sp.jit_per_form
    def diagnostics(self, x, params):
        q, u, t = self.unpack(x)
        models = params["models"]
        udot, lam, info = self.accelerations(t, q, u, params)
        out = {"energy": self.energy(q, u, params), "reaction": lam,
               "reaction_wrench": self.reaction_wrenches(lam)}
        out.update(info)
        if any(m.floating_base for m in models):
            ws = self.workspace(q, u, params)
            h = api.spatial_momentum_ws(ws)
            out["angular_momentum"] = h[:3]  # about the world origin
            out["linear_momentum"] = h[3:]
            # the bodies' angular momenta by magnitude: the natural scale of their sum
            out["momentum_scale"] = jnp.sum(sp.safe_norm(sp.mv(ws.inertia, ws.vel)[:, :3]))
        if self.outputs_fn is not None:
            out.update(self.outputs_fn(t, q, u, params["forcing"]))
        return out


@eqx.filter_jit
def _reduced_mass_matrix(system, q, params):
    N = system.null_basis(q, params)
    return N.T @ system.mass_matrix(q, params) @ N
