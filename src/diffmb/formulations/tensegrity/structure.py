"""The tensegrity structure (Hsu et al. section 2): nodes, bars and strings with their
masses, stiffnesses and rest lengths, fixed nodes, and the prestress that puts a
structure in equilibrium."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .closed_forms import _connectivity, closed_form_gravity

_AXES = "xyz"


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
    N = _nodes(nodes)
    n = N.shape[0]
    bars = _members(bars, n, "bar")
    strings = _members(strings, n, "string")
    _check_members(N, bars, strings, length_tol)
    fixed_mask = _fixed_mask(fixed, n)
    full = fixed_mask.all(axis=1)
    _check_bars_can_move(bars, full)
    A_lin, b_lin = _linear_constraints(N, fixed_mask, linear_constraints)
    blen, radius, bmass, bE, bnu = _bar_properties(N, bars, bar_radius, bar_density, bar_mass, bar_E, bar_nu)
    pm = _point_masses(point_masses, n)
    _check_free_nodes_have_mass(bars, pm, full)
    rest, K, EA = _string_properties(N, strings, rest_length, rest_fraction, string_stiffness, string_E,
                                     string_radius)
    c = _per_member(damping, len(strings), "string", "damping", allow_zero=True)
    g = _gravity(gravity)
    return Structure(nodes=N, bars=bars, strings=strings, fixed=fixed_mask, A_lin=A_lin,
                     b_lin=b_lin, point_mass=pm, bar_mass=bmass, bar_radius=radius,
                     bar_length=blen, bar_E=bE, bar_nu=bnu, string_K=K, string_rest=rest,
                     string_damping=c, gravity=g, string_EA=EA)


def _nodes(nodes) -> np.ndarray:
    """The nodal positions ``N`` as a finite ``(n, 3)`` array, ``n >= 2``."""
    N = np.asarray(nodes, dtype=float)
    if N.ndim != 2 or N.shape[1] != 3 or N.shape[0] < 2:
        raise ValueError(f"nodes: expected an (n, 3) array with n >= 2, got shape {N.shape}")
    if not np.all(np.isfinite(N)):
        bad = int(np.argwhere(~np.isfinite(N))[0, 0])
        raise ValueError(f"node {bad}: position is not finite ({N[bad].tolist()})")
    return N


def _check_members(N, bars, strings, length_tol):
    """No member repeated (as a bar or a string), none of zero length, no node in none."""
    n = N.shape[0]
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


def _check_bars_can_move(bars, full):
    """No bar between two fully fixed nodes (``full``: per node)."""
    for k, (i, j) in enumerate(bars):
        if full[i] and full[j]:
            raise ValueError(f"bar {k} (nodes {i}-{j}) joins two fixed nodes; it can never move "
                             f"(remove it or free a node)")


def _linear_constraints(N, fixed_mask, linear_constraints):
    """``(A_lin, b_lin)``: the fixed coordinates held at their initial values, then the
    user's rows ``(A, b)`` (which the initial nodes must satisfy); independent rows."""
    n = N.shape[0]
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
    return A_lin, b_lin


def _bar_properties(N, bars, bar_radius, bar_density, bar_mass, bar_E, bar_nu):
    """Per bar ``(length, radius, mass, E, nu)``: the mass given or ``density pi r^2 l``,
    Poisson's ratio below 0.5."""
    nb = len(bars)
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
    return blen, radius, bmass, bE, bnu


def _point_masses(point_masses, n) -> np.ndarray:
    """``L_pm``: the point mass at each node (0 where none), from ``{node: mass}`` or ``(n,)``."""
    pm = np.zeros(n)
    if point_masses is None:
        return pm
    if isinstance(point_masses, dict):
        for i, m in point_masses.items():
            if not (isinstance(i, int | np.integer) and 0 <= i < n):
                raise ValueError(f"point_masses: node {i!r} out of range 0..{n - 1}")
            if not (math.isfinite(m) and m > 0):
                raise ValueError(f"point_masses: node {i}: mass must be positive, got {m}")
            pm[i] = float(m)
        return pm
    pm = np.asarray(point_masses, float)
    if pm.shape != (n,) or np.any(pm < 0) or not np.all(np.isfinite(pm)):
        raise ValueError(f"point_masses: expected {n} non-negative values or a {{node: mass}} dict")
    return pm


def _check_free_nodes_have_mass(bars, pm, full):
    """Every node that is not fully fixed carries mass: a bar's or a point mass."""
    n = pm.shape[0]
    in_bar = np.zeros(n, bool)
    for i, j in bars:
        in_bar[i] = in_bar[j] = True
    for i in range(n):
        if not in_bar[i] and pm[i] == 0 and not full[i]:
            raise ValueError(f"node {i} is free but massless: only strings meet there; give it a "
                             f"point mass (point_masses={{{i}: m}}) or fix it")


def _string_properties(N, strings, rest_length, rest_fraction, string_stiffness, string_E, string_radius):
    """Per string ``(rest length, K, EA)``: the rest length given or a fraction of the
    initial length; ``K`` given, or ``E A / l0`` (then ``EA`` is kept, else None)."""
    ns = len(strings)
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
    return rest, K, EA


def _gravity(gravity) -> np.ndarray:
    """Gravity as 3 finite numbers (world axes, m/s^2)."""
    g = np.asarray(gravity, float)
    if g.shape != (3,) or not np.all(np.isfinite(g)):
        raise ValueError(f"gravity: expected 3 finite numbers, got {gravity!r}")
    return g


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
    ns, nb = len(s.strings), len(s.bars)
    cost, Aeq, beq, bounds = _equilibrium_programme(s, compressible, min_force_density, extra_force)
    res = linprog(cost, A_eq=Aeq, b_eq=beq, bounds=bounds, method="highs")
    if res.status != 0:
        raise ValueError(f"prestress: no string force densities >= {min_force_density:g} hold the "
                         f"initial nodes in equilibrium ({res.message.strip()}); inconsistent prestress")
    rest, K = _string_rest_lengths(s, res.x[:ns])
    out = s.replace(string_rest=rest, string_K=K)
    if compressible:
        out = out.replace(bar_length=_bar_rest_lengths(s, res.x[ns:ns + nb]))
    return out


def _member_columns(N, members, n3):
    """Per member ``(i, j)`` the column ``Y_k^T Y_k q`` (``X_k^T X_k q`` for bars): ``+d``
    at node ``j``, ``-d`` at node ``i``, ``d = N_j - N_i``."""
    cols = []
    for i, j in members:
        v = np.zeros(n3)
        d = N[j] - N[i]
        v[3 * j:3 * j + 3] += d
        v[3 * i:3 * i + 3] -= d
        cols.append(v)
    return cols


def _equilibrium_programme(s, compressible, min_force_density, extra_force):
    """``(cost, A_eq, b_eq, bounds)`` of the linear programme in force densities (string
    ``sigma``, compressible-bar ``Psi``, both ``>= min_force_density``) and constraint
    multipliers ``lambda`` (free): eq. 19 at rest (eq. 57 with compressible bars),
    minimising the total force density."""
    n3 = 3 * s.n_nodes
    N = s.nodes
    ns, nb = len(s.strings), len(s.bars)
    cols = _member_columns(N, s.strings, n3)
    Xcols = _member_columns(N, s.bars, n3)
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
    return cost, Aeq, beq, bounds


def _string_rest_lengths(s, sigma):
    """``(rest, K)`` of the strings under force densities ``sigma`` (eq. 13): ``l0 = L (1 -
    sigma / K)`` for a given stiffness, ``l0 = EA L / (EA + sigma L)`` when ``K = EA / l0``."""
    slen = s.string_lengths()
    if s.string_EA is not None:
        rest = s.string_EA * slen / (s.string_EA + sigma * slen)
        return rest, s.string_EA / rest
    K = s.string_K
    rest = slen * (1.0 - sigma / K)
    if np.any(rest <= 0):
        k = int(np.argmin(rest))
        raise ValueError(f"string {k}: prestress needs tension {sigma[k] * slen[k]:.4g} N, beyond "
                         f"K L = {K[k] * slen[k]:.4g} N (rest length would be <= 0); inconsistent prestress")
    return rest, K


def _bar_rest_lengths(s, psi):
    """Rest lengths of compressible bars under compression force densities ``psi``
    (positive): ``-psi l = EA (l - l0) / l0``, so ``l0 = EA l / (EA - psi l)``."""
    blen = s.bar_lengths()
    EA = s.bar_E * np.pi * s.bar_radius**2
    if np.any(EA - psi * blen <= 0):
        k = int(np.argmax(psi * blen - EA))
        raise ValueError(f"bar {k}: prestress compression exceeds E A; inconsistent prestress")
    return EA * blen / (EA - psi * blen)
