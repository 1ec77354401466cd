"""Tensegrity dynamics in Cartesian nodal coordinates (Hsu, Tadiparthi & Bhattacharya).

Every node of the structure is a point ``n_i`` in 3-D; the coordinates are ``q = vec(N)``
(node-major: ``q[3i:3i+3] = n_i``, section 2.1). Bars are rigid (length constraints,
eq. 24) or compressible (elastic, section 3); strings are tension-only springs (eqs. 12-14)
with dampers that act only while taut (eq. 17); point masses sit on nodes (``L_pm``);
fixed coordinates and any linear constraints form ``A q = b`` (eq. 24).

How the equations are obtained
------------------------------
The kinetic energy ``T(q, qd)`` (eq. 10; section 3.1 for compressible bars, with the
``-T_f`` term and Poisson thinning of the radius) and the potential ``V(q)`` (gravity
eq. 11, strings eq. 12, bar elasticity ``V_b`` of section 3.1) are written once;
``M = d2T/dqd2``, the velocity terms of ``d/dt dT/dqd - dT/dq`` and the forces ``-dV/dq``
come from JAX. The constraint Jacobian ``R_q`` (eq. 25) and the curvature term ``xi_2``
(eq. 20) come from ``jax.jacfwd``/``jax.jvp`` of ``R(q)``. The closed forms of the paper
(:func:`closed_form_mass`, :func:`closed_form_gravity`, :func:`closed_form_string_force`,
:func:`closed_form_xi2`) exist for the tests only.

The KKT system (eq. 21) is solved by the range-space (Schur complement) method of
eqs. 22-23 with Cholesky factors: ``M~ = M + rho A^T A`` (equal to ``M`` on every
acceleration that satisfies ``A qdd = 0``, and positive definite even where a fixed node
carries no mass), then ``S = R_q M~^-1 R_q^T``.

State ``x = [q; qd; W_f]``: ``W_f`` is the work of the non-conservative forces
(external node forces and string dampers), integrated alongside (eq. 37).
``project`` is the direct correction of section 2.4 / Algorithm 1: the minimum-norm
``(dq, dqd, dW_f)`` that solves the linearised position, velocity (eq. 33) and, when
``energy_correction`` is on, energy (eq. 43) constraints (eq. 44-45), repeated while the
violation exceeds the threshold ``gamma`` (a fixed number of passes, masked, so that it
stays reverse-differentiable).

Diagnostics: ``energy`` is ``E(q, qd) - W_f``, the quantity that eq. 35 says is constant
(it is the mechanical energy when no non-conservative force acts); ``mechanical_energy``
is ``E = T + V`` (eq. 34) and ``work`` is ``W_f``. Violations: ``position`` (linear
residuals ``A q - b`` and bar-length errors ``|b_k| - l_k`` in metres), ``velocity``
(``A qd`` and ``d|b_k|/dt``), ``energy`` (``E - E0 - W_f``, eq. 35).

Node indices are 0-based in the Python API; the state names follow the paper's 1-based
numbering (``x3`` is the x coordinate of the paper's node 3).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..system import System, check_stabilization

STABILIZATIONS = ("none", "projection")  # a subset of diffmb.system.STABILIZATIONS
_AXES = "xyz"


# ============================================================================ structure
@dataclasses.dataclass(frozen=True, eq=False)
class Structure:
    """A validated tensegrity structure (section 2.1), plain numpy.

    ``nodes (n, 3)`` initial nodal positions (the columns of ``N``); ``bars``/``strings``
    tuples of 0-based ``(i, j)`` pairs (``C_b``, ``C_s`` rows with -1 at ``i`` and +1 at
    ``j``); ``fixed (n, 3)`` fixed coordinates; ``A_lin``/``b_lin`` the linear constraints
    (fixed coordinates first, then user rows); ``point_mass (n,)`` (``L_pm``, 0 where
    none); per bar ``bar_mass``, ``bar_radius``, ``bar_length`` (rigid: constrained
    length; compressible: rest length ``l_b(0)``), ``bar_E``, ``bar_nu``; per string
    ``string_K``, ``string_rest``, ``string_damping``; ``gravity (3,)``.
    """

    nodes: np.ndarray
    bars: tuple
    strings: tuple
    fixed: np.ndarray
    A_lin: np.ndarray
    b_lin: np.ndarray
    point_mass: np.ndarray
    bar_mass: np.ndarray
    bar_radius: np.ndarray
    bar_length: np.ndarray
    bar_E: np.ndarray
    bar_nu: np.ndarray
    string_K: np.ndarray
    string_rest: np.ndarray
    string_damping: np.ndarray
    gravity: np.ndarray
    string_EA: np.ndarray | None = None  # set when K comes from E*A/l0 (K follows l0)

    @property
    def n_nodes(self) -> int:
        return self.nodes.shape[0]

    @property
    def Cb(self) -> np.ndarray:
        return _connectivity(self.bars, self.n_nodes)

    @property
    def Cs(self) -> np.ndarray:
        return _connectivity(self.strings, self.n_nodes)

    @property
    def q0(self) -> np.ndarray:
        return self.nodes.reshape(-1).copy()

    def string_lengths(self) -> np.ndarray:
        return _lengths(self.nodes, self.strings)

    def bar_lengths(self) -> np.ndarray:
        return _lengths(self.nodes, self.bars)

    def replace(self, **kw) -> "Structure":
        return dataclasses.replace(self, **kw)


def _connectivity(members, n):
    C = np.zeros((len(members), n))
    for k, (i, j) in enumerate(members):
        C[k, i], C[k, j] = -1.0, 1.0
    return C


def _lengths(nodes, members):
    if not members:
        return np.zeros(0)
    ij = np.asarray(members)
    return np.linalg.norm(nodes[ij[:, 1]] - nodes[ij[:, 0]], axis=1)


def _per_member(value, count, kind, field, *, positive=True, allow_zero=False):
    """Broadcast a scalar or per-member sequence; ValueError naming member and field."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(count, float(arr))
    if arr.shape != (count,):
        raise ValueError(f"{kind} {field}: expected a number or {count} values (one per {kind}), "
                         f"got shape {arr.shape}")
    for k, v in enumerate(arr):
        bad = (not math.isfinite(v)) or (positive and (v < 0 or (v == 0 and not allow_zero)))
        if bad:
            need = "non-negative" if allow_zero else "positive"
            raise ValueError(f"{kind} {k}: {field} must be finite and {need}, got {v:g}")
    return arr


def make_structure(
    nodes,
    bars: Sequence,
    strings: Sequence,
    *,
    fixed=(),
    linear_constraints=None,
    bar_radius,
    bar_density=None,
    bar_mass=None,
    bar_E=None,
    bar_nu=0.0,
    string_stiffness=None,
    string_E=None,
    string_radius=None,
    rest_length=None,
    rest_fraction=None,
    damping=0.0,
    point_masses=None,
    gravity=(0.0, 0.0, 0.0),
    length_tol: float = 1e-9,
) -> Structure:
    """Build and validate a :class:`Structure` from node and member lists (section 2.1).

    ``nodes``: ``(n, 3)`` positions (a 2-D structure lives in a coordinate plane; fix its
    out-of-plane coordinates). ``bars``/``strings``: 0-based ``(i, j)`` pairs.
    ``fixed``: node indices fixed in all coordinates, or an ``(n, 3)`` boolean array, or
    a dict ``{node: "xyz"-subset}``. ``linear_constraints``: extra ``(A, b)`` rows.
    Bars: ``bar_radius`` and either ``bar_density`` (mass = density * pi r^2 l) or
    ``bar_mass``; ``bar_E`` and ``bar_nu`` are used by compressible bars (section 3).
    Strings: ``string_stiffness`` K [N/m] or ``string_E`` and ``string_radius`` (then
    K = E A / l0, with l0 the rest length); rest lengths as ``rest_length`` [m] or
    ``rest_fraction`` of the initial length (default 1: unstretched); ``damping`` c
    [N s/m] (eq. 15). ``point_masses``: ``{node: mass}`` or ``(n,)``.

    Raises ValueError (naming the node, member and field) for: indices out of range, a
    member joining a node to itself, duplicate members, zero-length members, dangling
    nodes (in no member), a free node without mass (only strings and no point mass), a
    bar between two fully fixed nodes, non-positive or non-finite properties, and
    inconsistent string data (both rest_length and rest_fraction, both a stiffness and a
    modulus, or neither).
    """
    N = np.asarray(nodes, dtype=float)
    if N.ndim != 2 or N.shape[1] != 3 or N.shape[0] < 2:
        raise ValueError(f"nodes: expected an (n, 3) array with n >= 2, got shape {N.shape}")
    if not np.all(np.isfinite(N)):
        bad = int(np.argwhere(~np.isfinite(N))[0, 0])
        raise ValueError(f"node {bad}: position is not finite ({N[bad].tolist()})")
    n = N.shape[0]
    bars = _members(bars, n, "bar")
    strings = _members(strings, n, "string")
    seen = {}
    for kind, members in (("bar", bars), ("string", strings)):
        for k, (i, j) in enumerate(members):
            key = (min(i, j), max(i, j))
            if key in seen:
                raise ValueError(f"{kind} {k} (nodes {i}-{j}) duplicates {seen[key]}")
            seen[key] = f"{kind} {k}"
            if np.linalg.norm(N[j] - N[i]) <= length_tol:
                raise ValueError(f"{kind} {k} (nodes {i}-{j}) has zero length")
    used = np.zeros(n, bool)
    for i, j in bars + strings:
        used[i] = used[j] = True
    if not used.all():
        raise ValueError(f"node {int(np.argmin(used))} is dangling: no bar or string connects it")

    fixed_mask = _fixed_mask(fixed, n)
    full = fixed_mask.all(axis=1)
    for k, (i, j) in enumerate(bars):
        if full[i] and full[j]:
            raise ValueError(f"bar {k} (nodes {i}-{j}) joins two fixed nodes; it can never move "
                             f"(remove it or free a node)")

    # linear constraints: fixed coordinates (to their initial values), then user rows
    rows, rhs = [], []
    for i in range(n):
        for a in range(3):
            if fixed_mask[i, a]:
                r = np.zeros(3 * n)
                r[3 * i + a] = 1.0
                rows.append(r)
                rhs.append(N[i, a])
    if linear_constraints is not None:
        A_u, b_u = linear_constraints
        A_u = np.atleast_2d(np.asarray(A_u, float))
        b_u = np.atleast_1d(np.asarray(b_u, float))
        if A_u.shape[1] != 3 * n or b_u.shape != (A_u.shape[0],):
            raise ValueError(f"linear_constraints: expected A of shape (m, {3 * n}) and b of shape "
                             f"(m,), got {A_u.shape} and {b_u.shape}")
        res = A_u @ N.reshape(-1) - b_u
        if np.max(np.abs(res)) > 1e-9 * (1 + np.max(np.abs(b_u))):
            k = int(np.argmax(np.abs(res)))
            raise ValueError(f"linear_constraints: row {k} is not satisfied by the initial nodes "
                             f"(residual {res[k]:.3g})")
        rows += list(A_u)
        rhs += list(b_u)
    A_lin = np.array(rows).reshape(-1, 3 * n)
    b_lin = np.array(rhs, float)
    if A_lin.shape[0] and np.linalg.matrix_rank(A_lin) < A_lin.shape[0]:
        raise ValueError("linear_constraints: rows are linearly dependent (or repeat fixed coordinates)")

    nb, ns = len(bars), len(strings)
    blen = _lengths(N, bars)
    radius = _per_member(bar_radius, nb, "bar", "radius")
    if (bar_density is None) == (bar_mass is None):
        if nb:
            raise ValueError("bars: give exactly one of bar_density and bar_mass")
        bmass = np.zeros(0)
    elif bar_mass is not None:
        bmass = _per_member(bar_mass, nb, "bar", "mass")
    else:
        rho = _per_member(bar_density, nb, "bar", "density")
        bmass = rho * np.pi * radius**2 * blen
    bE = _per_member(1.0 if bar_E is None else bar_E, nb, "bar", "Young's modulus")
    bnu = _per_member(bar_nu, nb, "bar", "Poisson's ratio", allow_zero=True)
    if np.any(bnu >= 0.5):
        k = int(np.argmax(bnu >= 0.5))
        raise ValueError(f"bar {k}: Poisson's ratio must be below 0.5, got {bnu[k]:g}")

    pm = np.zeros(n)
    if point_masses is not None:
        if isinstance(point_masses, dict):
            for i, m in point_masses.items():
                if not (isinstance(i, int | np.integer) and 0 <= i < n):
                    raise ValueError(f"point_masses: node {i!r} out of range 0..{n - 1}")
                if not (math.isfinite(m) and m > 0):
                    raise ValueError(f"point_masses: node {i}: mass must be positive, got {m}")
                pm[i] = float(m)
        else:
            pm = np.asarray(point_masses, float)
            if pm.shape != (n,) or np.any(pm < 0) or not np.all(np.isfinite(pm)):
                raise ValueError(f"point_masses: expected {n} non-negative values or a {{node: mass}} dict")
    in_bar = np.zeros(n, bool)
    for i, j in bars:
        in_bar[i] = in_bar[j] = True
    for i in range(n):
        if not in_bar[i] and pm[i] == 0 and not full[i]:
            raise ValueError(f"node {i} is free but massless: only strings meet there; give it a "
                             f"point mass (point_masses={{{i}: m}}) or fix it")

    slen = _lengths(N, strings)
    if rest_length is not None and rest_fraction is not None:
        raise ValueError("strings: give rest_length or rest_fraction, not both (inconsistent prestress)")
    if rest_length is not None:
        rest = _per_member(rest_length, ns, "string", "rest length")
    else:
        rest = slen * _per_member(1.0 if rest_fraction is None else rest_fraction, ns, "string",
                                  "rest fraction")
    EA = None
    if (string_stiffness is None) == (string_E is None):
        if ns:
            raise ValueError("strings: give exactly one of string_stiffness and string_E (with string_radius)")
        K = np.zeros(0)
    elif string_stiffness is not None:
        K = _per_member(string_stiffness, ns, "string", "stiffness")
    else:
        if string_radius is None:
            raise ValueError("strings: string_E needs string_radius (K = E pi r^2 / l0)")
        EA = (_per_member(string_E, ns, "string", "Young's modulus")
              * np.pi * _per_member(string_radius, ns, "string", "radius") ** 2)
        K = EA / rest
    c = _per_member(damping, ns, "string", "damping", allow_zero=True)
    g = np.asarray(gravity, float)
    if g.shape != (3,) or not np.all(np.isfinite(g)):
        raise ValueError(f"gravity: expected 3 finite numbers, got {gravity!r}")
    return Structure(nodes=N, bars=bars, strings=strings, fixed=fixed_mask, A_lin=A_lin,
                     b_lin=b_lin, point_mass=pm, bar_mass=bmass, bar_radius=radius,
                     bar_length=blen, bar_E=bE, bar_nu=bnu, string_K=K, string_rest=rest,
                     string_damping=c, gravity=g, string_EA=EA)


def _members(members, n, kind):
    out = []
    for k, m in enumerate(members):
        try:
            i, j = (int(v) for v in m)
        except (TypeError, ValueError):
            raise ValueError(f"{kind} {k}: expected a pair of node indices, got {m!r}") from None
        for v in (i, j):
            if not 0 <= v < n:
                raise ValueError(f"{kind} {k}: node {v} out of range 0..{n - 1}")
        if i == j:
            raise ValueError(f"{kind} {k} joins node {i} to itself")
        out.append((i, j))
    return tuple(out)


def _fixed_mask(fixed, n):
    mask = np.zeros((n, 3), bool)
    if isinstance(fixed, dict):
        for i, axes in fixed.items():
            if not (isinstance(i, int | np.integer) and 0 <= i < n):
                raise ValueError(f"fixed: node {i!r} out of range 0..{n - 1}")
            for a in str(axes):
                if a not in _AXES:
                    raise ValueError(f"fixed: node {i}: unknown coordinate {a!r} (use x, y, z)")
                mask[i, _AXES.index(a)] = True
        return mask
    arr = np.asarray(fixed)
    if arr.dtype == bool and arr.shape == (n, 3):
        return arr.copy()
    for i in np.atleast_1d(arr).tolist():
        if not (isinstance(i, int) and 0 <= i < n):
            raise ValueError(f"fixed: node {i!r} out of range 0..{n - 1}")
        mask[i] = True
    return mask


# ---------------------------------------------------------------------------- prestress
def prestress_to_equilibrium(structure: Structure, *, compressible: bool = False,
                             min_force_density: float = 1.0, extra_force=None) -> Structure:
    """String (and, for compressible bars, bar) rest lengths that hold the initial nodes in
    static equilibrium under gravity (and ``extra_force (n, 3)``).

    Solves the linear programme of the authors' code (STEDY ``tensegEq``): force densities
    ``sigma >= min_force_density`` with ``sum_k sigma_k Y_k^T Y_k q - R_q^T lambda = G + f``
    (eq. 19 at rest; compressible bars add ``-Psi_k X_k^T X_k q`` with ``Psi_k >=
    min_force_density`` in compression, eq. 57), minimising the total force density. Rest
    lengths follow from eq. 13: ``l0 = L (1 - sigma/K)`` for a given stiffness, ``l0 = EA L /
    (EA + sigma L)`` when ``K = EA / l0``. Raises ValueError when no such prestress
    exists (inconsistent prestress).
    """
    from scipy.optimize import linprog

    s = structure
    n3 = 3 * s.n_nodes
    N = s.nodes
    ns, nb = len(s.strings), len(s.bars)
    cols = []
    for i, j in s.strings:  # Y_k^T Y_k q: +s_k at node j, -s_k at node i
        v = np.zeros(n3)
        d = N[j] - N[i]
        v[3 * j:3 * j + 3] += d
        v[3 * i:3 * i + 3] -= d
        cols.append(v)
    Xcols = []
    for i, j in s.bars:
        v = np.zeros(n3)
        d = N[j] - N[i]
        v[3 * j:3 * j + 3] += d
        v[3 * i:3 * i + 3] -= d
        Xcols.append(v)
    L = np.array(cols).T.reshape(n3, ns)
    Rq = [s.A_lin] + ([] if compressible else [2.0 * np.array(Xcols).reshape(nb, n3)])
    Rq = np.concatenate(Rq, axis=0)
    G = closed_form_gravity(s)
    beq = G + (0.0 if extra_force is None else np.asarray(extra_force, float).reshape(-1))
    blocks = [L]
    if compressible:
        blocks.append(-np.array(Xcols).T.reshape(n3, nb))
    blocks.append(-Rq.T)
    Aeq = np.concatenate(blocks, axis=1)
    nvar = Aeq.shape[1]
    npos = ns + (nb if compressible else 0)
    cost = np.concatenate([np.ones(npos), np.zeros(nvar - npos)])
    bounds = [(min_force_density, None)] * npos + [(None, None)] * (nvar - npos)
    res = linprog(cost, A_eq=Aeq, b_eq=beq, bounds=bounds, method="highs")
    if res.status != 0:
        raise ValueError(f"prestress: no string force densities >= {min_force_density:g} hold the "
                         f"initial nodes in equilibrium ({res.message.strip()}); inconsistent prestress")
    sigma = res.x[:ns]
    slen = s.string_lengths()
    if s.string_EA is not None:
        rest = s.string_EA * slen / (s.string_EA + sigma * slen)
        K = s.string_EA / rest
    else:
        K = s.string_K
        rest = slen * (1.0 - sigma / K)
        if np.any(rest <= 0):
            k = int(np.argmin(rest))
            raise ValueError(f"string {k}: prestress needs tension {sigma[k] * slen[k]:.4g} N, beyond "
                             f"K L = {K[k] * slen[k]:.4g} N (rest length would be <= 0); inconsistent prestress")
    out = s.replace(string_rest=rest, string_K=K)
    if compressible:
        psi = res.x[ns:ns + nb]  # compression force densities (positive)
        blen = s.bar_lengths()
        EA = s.bar_E * np.pi * s.bar_radius**2
        # compression -psi*l = EA (l - l0)/l0  ->  l0 = EA l / (EA - psi l)
        if np.any(EA - psi * blen <= 0):
            k = int(np.argmax(psi * blen - EA))
            raise ValueError(f"bar {k}: prestress compression exceeds E A; inconsistent prestress")
        out = out.replace(bar_length=EA * blen / (EA - psi * blen))
    return out


# ============================================================================ forces
@dataclasses.dataclass(frozen=True)
class NodeForce:
    """External node forces ``f(t)`` (eq. 9): each entry ``(node, axis, sign)`` gets
    ``sign * amplitude * shape(t)``; ``shape``: ``sin`` (``sin(omega t)``) or ``doublet``
    (``+1`` on ``[t_start, t_start + width)``, ``-1`` on the next ``width``, else 0).
    Hashable and compared by value, so rebuilding a scenario does not recompile.
    Numbers (``amplitude``, ``omega``, ``t_start``, ``width``) live in ``params["forcing"]``.
    """

    entries: tuple
    shape: str = "sin"

    def __call__(self, t, q, forcing, n_nodes):
        if self.shape == "sin":
            s = jnp.sin(forcing["omega"] * t)
        elif self.shape == "doublet":
            t0, w = forcing["t_start"], forcing["width"]
            s = jnp.where((t >= t0) & (t < t0 + w), 1.0, jnp.where((t >= t0 + w) & (t < t0 + 2 * w), -1.0, 0.0))
        else:  # pragma: no cover - validated in __post_init__
            raise ValueError(self.shape)
        F = jnp.zeros((n_nodes, 3), q.dtype)
        for node, axis, sign in self.entries:
            F = F.at[node, axis].add(sign * forcing["amplitude"] * s)
        return F.reshape(-1)

    def jump_times(self, forcing):
        """The doublet's switching times ``t_start + (0, 1, 2) width``; ``None`` for ``sin``."""
        if self.shape != "doublet":
            return None
        return forcing["t_start"] + forcing["width"] * jnp.arange(3.0)

    def __post_init__(self):
        if self.shape not in ("sin", "doublet"):
            raise ValueError(f"NodeForce shape: expected 'sin' or 'doublet', got {self.shape!r}")


# ============================================================================ system
class TensegritySystem(System):
    """A tensegrity structure as a :class:`~diffmb.system.System` (module docstring).

    ``compressible``: bars elastic (section 3) instead of length-constrained.
    ``stabilization``: ``none`` or ``projection`` (the direct correction, Algorithm 1).
    ``energy_correction``: include the energy row (eq. 43) in the correction.
    ``force``: external node forces, a callable ``(t, q, forcing, n_nodes) -> (3n,)``
    (e.g. :class:`NodeForce`) with its numbers in ``forcing``.
    ``gamma``: correction threshold; ``correction_passes``: the most correction passes per
    step (each applied only while the violation exceeds ``gamma``).
    """

    n_nodes: int = eqx.field(static=True)
    bars: tuple = eqx.field(static=True)
    strings: tuple = eqx.field(static=True)
    compressible: bool = eqx.field(static=True)
    stabilization: str = eqx.field(static=True)
    energy_correction: bool = eqx.field(static=True)
    correction_passes: int = eqx.field(static=True)
    force: Callable | None = eqx.field(static=True)
    params0: dict

    def __init__(self, structure: Structure, *, compressible=False, stabilization="projection",
                 energy_correction=True, force=None, forcing=None, qd0=None, gamma=1e-12,
                 correction_passes=3, slack_width=0.0):
        if not isinstance(structure, Structure):
            raise TypeError(f"TensegritySystem: expected a Structure, got {type(structure).__name__}")
        check_stabilization(stabilization, STABILIZATIONS)
        if not (gamma > 0 and math.isfinite(gamma)):
            raise ValueError(f"gamma: the correction threshold must be positive, got {gamma}")
        if not (slack_width >= 0 and math.isfinite(slack_width)):
            raise ValueError(f"slack_width: must be >= 0 (0: the paper's hard switch), got {slack_width}")
        if int(correction_passes) < 1:
            raise ValueError(f"correction_passes must be at least 1, got {correction_passes}")
        s = structure
        self.n_nodes = s.n_nodes
        self.bars = s.bars
        self.strings = s.strings
        self.compressible = bool(compressible)
        self.stabilization = stabilization
        self.energy_correction = bool(energy_correction)
        self.correction_passes = int(correction_passes)
        self.force = force
        if self.compressible:
            full = s.fixed.all(axis=1)
            for k, (i, j) in enumerate(s.bars):
                if not (full[i] or full[j]) and (s.point_mass[i] == 0 or s.point_mass[j] == 0):
                    raise ValueError(
                        f"bar {k} (nodes {i}-{j}): a compressible bar with two free ends needs point "
                        f"masses on both: its symmetric stretch carries no kinetic energy in "
                        f"T = 1/2 qd^T M qd - T_f (section 3.1)")
        n3 = 3 * s.n_nodes
        qd0 = np.zeros(n3) if qd0 is None else np.asarray(qd0, float)
        if qd0.shape != (n3,):
            raise ValueError(f"qd0: expected shape ({n3},), got {qd0.shape}")
        f64 = lambda a: jnp.asarray(np.asarray(a, float))  # noqa: E731
        self.params0 = {
            "q0": f64(s.q0), "qd0": f64(qd0),
            "bar_mass": f64(s.bar_mass), "bar_radius": f64(s.bar_radius),
            "bar_length": f64(s.bar_length), "bar_E": f64(s.bar_E), "bar_nu": f64(s.bar_nu),
            "string_K": f64(s.string_K), "string_rest": f64(s.string_rest),
            "string_damping": f64(s.string_damping), "point_mass": f64(s.point_mass),
            "gravity": f64(s.gravity), "A_lin": f64(s.A_lin), "b_lin": f64(s.b_lin),
            "Z_lin": f64(null_space(s.A_lin, n3)),
            "gamma": f64(gamma), "slack_width": f64(slack_width),
            "forcing": jax.tree.map(f64, dict(forcing or {})),
        }

    # ------------------------------------------------------------------ protocol
    def default_params(self):
        return self.params0

    def init_state(self, params):
        return jnp.concatenate([params["q0"], params["qd0"], jnp.zeros(1, params["q0"].dtype)])

    @property
    def state_names(self) -> tuple:
        pos = tuple(f"{a}{i + 1}" for i in range(self.n_nodes) for a in _AXES)
        return pos + tuple("v" + p for p in pos) + ("W_f",)

    @property
    def coordinate_names(self) -> tuple:
        return self.state_names[: 3 * self.n_nodes]

    @property
    def has_projection(self) -> bool:
        return self.stabilization == "projection"

    def split(self, x):
        n3 = 3 * self.n_nodes
        return x[:n3], x[n3:2 * n3], x[2 * n3]

    # ------------------------------------------------------------------ members
    def _ij(self, members):
        if not members:
            z = np.zeros(0, int)
            return z, z
        a = np.asarray(members)
        return a[:, 0], a[:, 1]

    def _vec(self, N, members):
        i, j = self._ij(members)
        return N[j] - N[i]

    # ------------------------------------------------------------------ energies
    def kinetic(self, q, qd, p):
        """``T``: eq. 10 (rigid bars), section 3.1 (compressible: ``1/2 qd^T M qd - T_f``
        with ``I = m (3 r^2 + l^2)/12`` at the current length and Poisson radius
        ``r = r0 (l / l0)^-nu``, the solution of ``rdot = -nu r ldot / l``), plus point masses."""
        N, Nd = q.reshape(-1, 3), qd.reshape(-1, 3)
        T = 0.5 * jnp.sum(p["point_mass"] * jnp.sum(Nd * Nd, axis=1))
        if not self.bars:
            return T
        i, j = self._ij(self.bars)
        b, bd = N[j] - N[i], Nd[j] - Nd[i]
        cd = 0.5 * (Nd[i] + Nd[j])
        m = p["bar_mass"]
        trans = 0.5 * m * jnp.sum(cd * cd, axis=1)
        bd2 = jnp.sum(bd * bd, axis=1)
        if not self.compressible:
            l = p["bar_length"]
            I = m * (3.0 * p["bar_radius"] ** 2 + l**2) / 12.0
            rot = 0.5 * I / l**2 * bd2
        else:
            l2 = jnp.sum(b * b, axis=1)
            l = jnp.sqrt(l2)
            r = p["bar_radius"] * (l / p["bar_length"]) ** (-p["bar_nu"])
            I = m * (3.0 * r**2 + l2) / 12.0
            ldot = jnp.sum(b * bd, axis=1) / l
            rot = 0.5 * I / l2 * bd2 - 0.5 * I / l2 * ldot**2  # 1/2 qd^T M_b qd - T_f
        return T + jnp.sum(trans + rot)

    def _string_stretch(self, q, p):
        """``(s, |s|, effective stretch, taut weight)`` of every string (:func:`taut_stretch`)."""
        s = self._vec(q.reshape(-1, 3), self.strings)
        L = _safe_norm(s)
        eff, weight = taut_stretch(L - p["string_rest"], p["slack_width"])
        return s, L, eff, weight

    def string_force_density(self, q, p):
        """``sigma_k = K_k (1 - l_k / |s_k|)`` while taut, else 0 (eq. 13); with a
        ``slack_width`` the derivative of the smoothed ``V_s`` divided by ``|s_k|``."""
        if not self.strings:
            return jnp.zeros(0, q.dtype)
        _, L, eff, weight = self._string_stretch(q, p)
        return p["string_K"] * eff * weight / jnp.where(L > 0, L, 1.0)

    def potential(self, q, p):
        """``V = V_g + V_s (+ V_b)``: gravity (eq. 11), tension-only strings (eq. 12,
        ``1/2 K max(|s| - l0, 0)^2``), compressible bar elasticity (``K_b = E A / l0``)."""
        N = q.reshape(-1, 3)
        g = p["gravity"]
        Vg = -jnp.sum(p["point_mass"] * (N @ g))
        if self.bars:
            i, j = self._ij(self.bars)
            Vg = Vg - jnp.sum(p["bar_mass"] * (0.5 * (N[i] + N[j]) @ g))
        V = Vg
        if self.strings:
            eff = self._string_stretch(q, p)[2]
            V = V + 0.5 * jnp.sum(p["string_K"] * eff**2)
        if self.compressible and self.bars:
            l = _safe_norm(self._vec(N, self.bars))
            l0 = p["bar_length"]
            Kb = p["bar_E"] * jnp.pi * p["bar_radius"] ** 2 / l0
            V = V + 0.5 * jnp.sum(Kb * (l - l0) ** 2)
        return V

    def energy(self, q, qd, p):
        """Total mechanical energy ``E = T + V`` (eq. 34)."""
        return self.kinetic(q, qd, p) + self.potential(q, p)

    # ------------------------------------------------------------------ forces
    def damper_force(self, q, qd, p):
        """``f_d = sum_k Y_k^T f_d,k``, ``f_d,k = -c (sdot.s) s / (s.s)`` while taut (eqs. 15-17)."""
        if not self.strings:
            return jnp.zeros_like(q)
        N, Nd = q.reshape(-1, 3), qd.reshape(-1, 3)
        i, j = self._ij(self.strings)
        s, L, _, weight = self._string_stretch(q, p)
        sd = Nd[j] - Nd[i]
        coef = -weight * p["string_damping"] * jnp.sum(s * sd, axis=1) / jnp.where(L > 0, L * L, 1.0)
        fk = coef[:, None] * s
        F = jnp.zeros_like(N).at[j].add(fk).at[i].add(-fk)
        return F.reshape(-1)

    def jump_times(self, params):
        """Where the external force switches (:meth:`NodeForce.jump_times`), if anywhere."""
        if self.force is None or not hasattr(self.force, "jump_times"):
            return None
        return self.force.jump_times(params["forcing"])

    def external_force(self, t, q, p):
        if self.force is None:
            return jnp.zeros_like(q)
        return self.force(t, q, p["forcing"], self.n_nodes)

    def nonconservative_force(self, t, q, qd, p):
        """``f = f_ext + f_d`` (section 2.6, item 3)."""
        return self.external_force(t, q, p) + self.damper_force(q, qd, p)

    # ------------------------------------------------------------------ constraints
    def residual(self, q, p):
        """``R(q)`` of eq. 24: ``A q - b`` and ``|b_k|^2 - l_k^2`` (rigid bars only)."""
        parts = [p["A_lin"] @ q - p["b_lin"]]
        if not self.compressible and self.bars:
            b = self._vec(q.reshape(-1, 3), self.bars)
            parts.append(jnp.sum(b * b, axis=1) - p["bar_length"] ** 2)
        return jnp.concatenate(parts)

    def constraint_terms(self, q, qd, p):
        """``(R, R_q, xi_2)``: eq. 24, eq. 25 and ``xi_2 = [qd^T H_i qd]`` (eq. 20), by JAX."""
        R_fn = lambda x: self.residual(x, p)  # noqa: E731
        R = R_fn(q)
        Rq = jax.jacfwd(R_fn)(q)
        xi2 = jax.jvp(lambda x: jax.jvp(R_fn, (x,), (qd,))[1], (q,), (qd,))[1]
        return R, Rq, xi2

    # ------------------------------------------------------------------ dynamics
    def mass_matrix(self, q, p):
        """``M = d2T/dqd2`` (eq. 10; ``M_qdd`` of eq. 54 for compressible bars), by JAX."""
        qd = jnp.zeros_like(q)
        return jax.jacfwd(jax.grad(self.kinetic, argnums=1), argnums=1)(q, qd, p)

    def xi1(self, t, q, qd, p, dsigma=None, dpsi=None, df=None):
        """Right-hand side of eq. 19 / eq. 56 from the Lagrangian:
        ``-dV/dq + dT/dq - (d2T/dqd dq) qd + f``; ``dsigma``/``dpsi``/``df`` are additive
        perturbations of the string/bar force densities and node forces (linearisation)."""
        dTdqd = jax.grad(self.kinetic, argnums=1)
        rhs = -jax.grad(self.potential)(q, p) + self.nonconservative_force(t, q, qd, p)
        if self.compressible:
            rhs = rhs + jax.grad(self.kinetic, argnums=0)(q, qd, p)
            rhs = rhs - jax.jvp(lambda x: dTdqd(x, qd, p), (q,), (qd,))[1]
        N = q.reshape(-1, 3)
        if dsigma is not None and self.strings:
            i, j = self._ij(self.strings)
            fk = dsigma[:, None] * (N[j] - N[i])
            rhs = rhs - jnp.zeros_like(N).at[j].add(fk).at[i].add(-fk).reshape(-1)
        if dpsi is not None and self.bars:
            i, j = self._ij(self.bars)
            fk = dpsi[:, None] * (N[j] - N[i])
            rhs = rhs - jnp.zeros_like(N).at[j].add(fk).at[i].add(-fk).reshape(-1)
        if df is not None:
            rhs = rhs + df
        return rhs

    def accelerations(self, t, q, qd, p, dsigma=None, dpsi=None, df=None):
        """``(qdd, lambda)`` from the KKT system eq. 21, solved in structured form.

        The linear constraints ``A q = b`` are eliminated with the constant orthonormal
        null-space basis ``Z`` of ``A`` (``params["Z_lin"]``, ``qdd = Z ydd``; for fixed
        coordinates ``Z`` just selects the free ones), which is eq. 21 with its linear rows
        solved exactly. The rest is eqs. 22-23 by Cholesky factors of ``M_r = Z^T M Z`` and
        of the Schur complement ``R_b M_r^-1 R_b^T`` (``R_b = R_q Z``, the bar rows).
        ``lambda`` holds the bar-constraint multipliers.
        """
        M = self.mass_matrix(q, p)
        xi1 = self.xi1(t, q, qd, p, dsigma, dpsi, df)
        Z = p["Z_lin"]
        Mr = Z.T @ M @ Z
        Lm = jnp.linalg.cholesky(Mr)
        solve_m = lambda b: jax.scipy.linalg.cho_solve((Lm, True), b)  # noqa: E731
        f = Z.T @ xi1
        if self.compressible or not self.bars:
            return Z @ solve_m(f), jnp.zeros(0, q.dtype)
        Rb, xi2 = self._bar_terms(q, qd, p)
        Rr = Rb @ Z
        MiRt = solve_m(Rr.T)
        Mif = solve_m(f)
        S = Rr @ MiRt
        lam = -jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(S), True), xi2 + Rr @ Mif)  # eq. 23
        return Z @ (Mif + MiRt @ lam), lam  # eq. 22

    def _bar_terms(self, q, qd, p):
        """Bar rows of ``R_q`` (eq. 25) and of ``xi_2`` (eq. 20), by JAX from ``R``."""
        def Rb_fn(x):
            b = self._vec(x.reshape(-1, 3), self.bars)
            return jnp.sum(b * b, axis=1) - p["bar_length"] ** 2

        Rb = jax.jacfwd(Rb_fn)(q)
        xi2 = jax.jvp(lambda x: jax.jvp(Rb_fn, (x,), (qd,))[1], (q,), (qd,))[1]
        return Rb, xi2

    def state_derivative(self, t, x, params):
        q, qd, _ = self.split(x)
        qdd, _ = self.accelerations(t, q, qd, params)
        wdot = jnp.dot(self.nonconservative_force(t, q, qd, params), qd)  # eq. 37
        return jnp.concatenate([qd, qdd, wdot[None]])

    # ------------------------------------------------------------------ correction
    def _correction_system(self, q, qd, W, p):
        """``(A_c, b_c, violation norm)`` of eq. 44 (eq. 33 without the energy row), in the
        coordinates ``dq = Z dy``, ``dqd = Z dyd`` of the linear constraints' null space
        (which the integration never leaves), so the rows are the bar constraints
        (rigid bars) and the energy; ``Z`` is orthonormal, so the minimum-norm solution
        is the paper's."""
        Z = p["Z_lin"]
        nf = Z.shape[1]
        rows, rhs = [], []
        viol = jnp.zeros((), q.dtype)
        if not self.compressible and self.bars:
            def Rb_fn(x):
                bv = self._vec(x.reshape(-1, 3), self.bars)
                return jnp.sum(bv * bv, axis=1) - p["bar_length"] ** 2

            R = Rb_fn(q)
            Rq = jax.jacfwd(Rb_fn)(q) @ Z
            Q = jax.jacfwd(lambda x: jax.jvp(Rb_fn, (x,), (qd,))[1])(q) @ Z  # (dR_q/dq dq) qd = Q dq
            vel = Rq @ (Z.T @ qd)
            m = R.shape[0]
            Zm = jnp.zeros((m, nf), q.dtype)
            z1 = jnp.zeros((m, 1), q.dtype)
            rows += [jnp.concatenate([Rq, Zm, z1], axis=1), jnp.concatenate([Q, Rq, z1], axis=1)]
            rhs += [-R, -vel]
            viol = jnp.maximum(jnp.linalg.norm(R), jnp.linalg.norm(vel))
        if self.energy_correction:
            E0 = self.energy(p["q0"], p["qd0"], p)
            E = self.energy(q, qd, p)
            gq, gqd = jax.grad(self.energy, argnums=(0, 1))(q, qd, p)  # eqs. 40-42
            rows.append(jnp.concatenate([Z.T @ gq, Z.T @ gqd, -jnp.ones(1, q.dtype)])[None, :])
            de = E0 - E + W  # eq. 43
            rhs.append(de[None])
            viol = jnp.maximum(viol, jnp.abs(de))
        return jnp.concatenate(rows, axis=0), jnp.concatenate(rhs), viol

    def correct(self, q, qd, W, p):
        """Algorithm 1: up to ``correction_passes`` minimum-norm corrections (eq. 45), each
        applied only while ``max(|R|, |R_q qd|, |E - E0 - W_f|) > gamma``."""
        Z = p["Z_lin"]
        nf = Z.shape[1]
        if not self.energy_correction and (self.compressible or not self.bars):
            return q, qd, W  # nothing to correct: the linear constraints hold exactly

        def one(_, carry):
            q, qd, W = carry
            Ac, bc, viol = self._correction_system(q, qd, W, p)
            S = Ac @ Ac.T
            d = Ac.T @ jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(S), True), bc)  # eq. 45
            d = jnp.where(viol > p["gamma"], d, jnp.zeros_like(d))
            return q + Z @ d[:nf], qd + Z @ d[nf:2 * nf], W + d[2 * nf]

        return jax.lax.fori_loop(0, self.correction_passes, one, (q, qd, W))

    def project(self, x, params):
        if self.stabilization != "projection":
            return x
        q, qd, W = self.split(x)
        q, qd, W = self.correct(q, qd, W, params)
        return jnp.concatenate([q, qd, jnp.reshape(W, (1,))])

    # ------------------------------------------------------------------ outputs
    def diagnostics(self, x, params):
        q, qd, W = self.split(x)
        E = self.energy(q, qd, params)
        return {"energy": E - W, "mechanical_energy": E, "work": W,
                "bar_length": _safe_norm(self._vec(q.reshape(-1, 3), self.bars))
                if self.bars else jnp.zeros(0, q.dtype)}

    def violation(self, x, params):
        q, qd, W = self.split(x)
        A = params["A_lin"]
        pos = [A @ q - params["b_lin"]]
        vel = [A @ qd]
        if not self.compressible and self.bars:
            b = self._vec(q.reshape(-1, 3), self.bars)
            bd = self._vec(qd.reshape(-1, 3), self.bars)
            l = _safe_norm(b)
            pos.append(l - params["bar_length"])
            vel.append(jnp.sum(b * bd, axis=1) / l)
        E0 = self.energy(params["q0"], params["qd0"], params)
        return {"position": jnp.concatenate(pos), "velocity": jnp.concatenate(vel),
                "energy": (self.energy(q, qd, params) - E0 - W)[None]}


def null_space(A, n):
    """Orthonormal basis of ``{dq : A dq = 0}`` (columns); a column selection when ``A``
    fixes coordinates."""
    A = np.asarray(A, float).reshape(-1, n)
    if A.shape[0] == 0:
        return np.eye(n)
    unit = np.all((A == 0) | (A == 1), axis=1) & (np.sum(A, axis=1) == 1)
    if unit.all():
        free = np.ones(n, bool)
        free[np.argmax(A, axis=1)] = False
        return np.eye(n)[:, free]
    _, sv, Vt = np.linalg.svd(A)
    rank = int(np.sum(sv > 1e-12 * sv[0]))
    return Vt[rank:].T


def taut_stretch(stretch, width):
    """``(effective stretch, taut weight)`` of a tension-only string of ``stretch = |s| - l0``.

    ``width == 0``: ``max(stretch, 0)`` and ``[stretch > 0]``, the paper's switch (eqs. 12-17).
    It is not smooth: a damped string that goes slack switches its damping force off at
    once, so gradients of a run through such a switch miss the change of the switching time
    (a run of ``tbar-compressible``, where strings are slack a third of the time, gave d/d(amplitude)
    7 % off finite differences). ``width > 0``: ``w softplus(stretch / w)`` and its
    derivative ``sigmoid(stretch / w)``, a smooth model (``V_s = 1/2 K eff^2``, damping
    weighted alike) whose gradients are exact, equal to the switch to ``O(w)``.
    """
    smooth = width > 0
    w = jnp.where(smooth, width, 1.0)
    z = stretch / w
    eff = jnp.where(smooth, w * jax.nn.softplus(z), jnp.maximum(stretch, 0.0))
    weight = jnp.where(smooth, jax.nn.sigmoid(z), (stretch > 0).astype(stretch.dtype))
    return eff, weight


def _safe_norm(v):
    """Row norms with a finite gradient at zero (a slack bar's zero length must not put
    NaN into reverse mode)."""
    s = jnp.sum(v * v, axis=-1)
    pos = s > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, s, 1.0)), 0.0)


# ============================================================================ closed forms
def _X(members, n, k, bar=False):
    """``X_k`` (eq. 2) / ``Y_k`` (eq. 4): ``(theta_k^T C) kron I_3``; ``bar=True``: ``X-bar_k`` (eq. 3)."""
    C = _connectivity(members, n)
    row = np.abs(C[k]) * 0.5 if bar else C[k]
    return np.kron(row[None, :], np.eye(3))


def closed_form_mass(s: Structure) -> np.ndarray:
    """``M = sum_k (m_k Xbar_k^T Xbar_k + I_k/l_k^2 X_k^T X_k) + sum m_p P_k^T P_k`` (eq. 10)."""
    n = s.n_nodes
    M = np.zeros((3 * n, 3 * n))
    for k in range(len(s.bars)):
        m, r, l = s.bar_mass[k], s.bar_radius[k], s.bar_length[k]
        I = m * (3 * r**2 + l**2) / 12
        Xb, X = _X(s.bars, n, k, bar=True), _X(s.bars, n, k)
        M += m * Xb.T @ Xb + I / l**2 * X.T @ X
    for i in range(n):
        if s.point_mass[i]:
            P = np.kron(np.eye(n)[i][None, :], np.eye(3))
            M += s.point_mass[i] * P.T @ P
    return M


def closed_form_gravity(s: Structure) -> np.ndarray:
    """``G^T = g^T (sum m_k Xbar_k + sum m_p P_k)`` (eq. 11)."""
    n = s.n_nodes
    G = np.zeros(3 * n)
    for k in range(len(s.bars)):
        G += s.bar_mass[k] * _X(s.bars, n, k, bar=True).T @ s.gravity
    for i in range(n):
        G[3 * i:3 * i + 3] += s.point_mass[i] * s.gravity
    return G


def closed_form_string_force(s: Structure, q) -> np.ndarray:
    """``dV_s/dq^T = (sigma^T kron I) Y^T q = sum_k sigma_k Y_k^T Y_k q`` (eq. 18), sigma of eq. 13
    (zero for slack strings)."""
    q = np.asarray(q, float)
    n = s.n_nodes
    out = np.zeros(3 * n)
    for k in range(len(s.strings)):
        Y = _X(s.strings, n, k)
        L = np.linalg.norm(Y @ q)
        sig = s.string_K[k] * (1 - s.string_rest[k] / L) if L > s.string_rest[k] else 0.0
        out += sig * Y.T @ Y @ q
    return out


def closed_form_constraints(s: Structure, q, qd):
    """``(R_q, xi_2)``: eq. 25 and ``[0; 2 qd^T X_k^T X_k qd]`` (rigid bars)."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    n = s.n_nodes
    rows, xi2 = [s.A_lin], [np.zeros(s.A_lin.shape[0])]
    for k in range(len(s.bars)):
        X = _X(s.bars, n, k)
        rows.append((2 * q @ X.T @ X)[None, :])
        xi2.append(np.array([2 * qd @ X.T @ X @ qd]))
    return np.concatenate(rows, axis=0), np.concatenate(xi2)


def closed_form_stiffness(s: Structure, q, compressible=True) -> np.ndarray:
    """``K_sys`` of section 3.2: ``sum_k sigma_k Y_k^T Y_k + K_k l_0k / |s_k|^3 (Y_k^T Y_k q)
    (Y_k^T Y_k q)^T`` over taut strings, plus the same with ``Psi_j = K_bj (1 - l_0j / l_j)``,
    ``K_bj = E A / l_0j``, over compressible bars (full coordinates)."""
    q = np.asarray(q, float)
    n = s.n_nodes
    K = np.zeros((3 * n, 3 * n))
    terms = [(s.strings, s.string_K, s.string_rest, True)]
    if compressible:
        terms.append((s.bars, s.bar_E * np.pi * s.bar_radius**2 / s.bar_length, s.bar_length, False))
    for members, stiff, rest, tension_only in terms:
        for k in range(len(members)):
            X = _X(members, n, k)
            XX = X.T @ X
            L = np.linalg.norm(X @ q)
            if tension_only and L <= rest[k]:
                continue
            v = XX @ q
            K += stiff[k] * (1 - rest[k] / L) * XX + stiff[k] * rest[k] / L**3 * np.outer(v, v)
    return K
