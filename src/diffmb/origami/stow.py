"""A stowed state that contact admits: the closures kept, the layers apart in their order.

Fulton & Schaub start every fold stowed, each crease at exactly ``+-pi`` (their Tables 4
and 8): zero-thickness panels lie face to face in one plane, every gap 0. A distance
barrier is infinite there. :mod:`diffmb.origami.contact` admits that state as it is (a
pair that starts in contact is armed only once it has separated), and :func:`stow`
offers the alternative the barrier literature asks for (IPC needs a strictly positive
initial gap): the nearest state to the paper's that

* satisfies every loop closure (eq. 19) to round-off,
* keeps every crease, tree and cut, within ``[-pi, pi]``,
* and leaves every two stacked panels that share no vertex at least ``gap`` apart
  (thickness included), in the stack's own layer order.

**Layer order.** At ``+-pi`` the geometry holds no order: it is in how the stack was
folded. A tree crease keeps it in the sign of its angle (``+pi`` opens towards
``+pi - e``), so the order of two stacked panels is the sign of their separation when
every folded tree crease is opened by a small angle ``e`` towards flat, the closures set
aside (:func:`layer_order`: ``e`` is small enough that the order is that of first
order). A pair the opening does not separate has no order in its creases; :func:`stow`
refuses it, naming the pair.

**The solve.** Minimise ``|theta - theta_0|^2`` over the tree creases (the free hub
held) subject to each stacked pair's signed separation at the corners of its overlap
``>= gap`` and each crease's margin to flat ``>= 0``, on the closures: sequential
quadratic programming in the closures' tangent directions (the null space of their
Jacobian, so redundant rows, which a stack has, cost nothing), each step closed again by
Gauss-Newton (:func:`~diffmb.closures.assembly.assemble`) and kept if it lowers a merit
with a trust region (:func:`_on_the_closures`; exact Jacobians by ``jax.jacfwd``), started
from every folded crease opened by ``gap / L`` and closed; then every gap is checked
again. Pairs already apart but nearer than ``gap`` count as stacked too. A square map vertex is not rigidly
foldable in both directions at once, so the closed states near the stowed one form
branches (the 2 x 4 map: the column crease opening, or the accordion); the solve
picks the nearest that separates the layers.

How it changes the paper's initial conditions: each crease moves by about
``gap / L`` rad (``L`` the panel size: about 2.8e-3 rad for the 2 m panels of fold-2x4 at
``gap = 2 dhat``); the rates are unchanged (zero, or the rigid spin). The hinge springs
start with that much less energy, and a pattern whose deployment passes a branch point
(fold-2x4, whose z-folded pairs wait at flat for crease 7) may start on another branch
than the paper's.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..closures.assembly import assemble
from ..closures.nodes import position_residual, row_index
from ..math import geometry as geo
from ..tree.kinematics import kinematics

#: The layer order is read at this opening of every folded tree crease [rad].
OPENING = 1e-4
#: A pair whose separation at that opening is below this fraction of ``OPENING x size``
#: has no order in its creases.
TIE = 1e-3
#: Two panels are stacked when their planes are this close (relative to the size) and
#: their outlines overlap by more than this fraction of the smaller one's area.
STACKED_PLANE, STACKED_AREA = 1e-6, 1e-6
#: The solve's trust region [rad] and the weight of a violated gap in its merit.
TRUST, MERIT = 0.05, 10.0


@dataclasses.dataclass(frozen=True)
class Stowed:
    """What :func:`stow` did. ``q``: the stowed coordinates; ``min_gap`` [m]: the
    smallest separation of two stacked panels that share no vertex; ``pairs``: the
    stacked pairs (labels ``"a/b"``); ``layers``: each stack's panels from bottom to top
    along the root panel's normal; ``moved``: each tree crease's change [rad];
    ``closure``: the largest closure residual [m]."""

    q: np.ndarray
    gap: float
    min_gap: float
    pairs: tuple
    layers: tuple
    moved: dict
    closure: float

    def summary(self) -> str:
        if not self.pairs:
            return "stow: no two panels that share no vertex lie stacked; the start state is kept"
        big = sorted(self.moved.items(), key=lambda kv: -abs(kv[1]))[:4]
        shown = ", ".join(f"{k} {math.degrees(v):+.3g} deg" for k, v in big if abs(v) > 0) or "no crease"
        stacks = "; ".join(" < ".join(s) for s in self.layers)
        return (f"stowed with gaps >= {self.gap:.3g} m between {len(self.pairs)} stacked pairs (smallest "
                f"{self.min_gap:.4g} m; closures to {self.closure:.1e} m): moved {shown}; layers bottom to top: "
                f"{stacks}")


def _clip(subject: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman: the convex polygon ``subject`` (2-D) clipped by the convex
    polygon ``clip`` (counter-clockwise)."""
    out = subject
    for a, b in zip(clip, np.roll(clip, -1, 0)):
        if not len(out):
            break
        e = b - a
        side = lambda x: e[0] * (x[1] - a[1]) - e[1] * (x[0] - a[0])
        kept = []
        for s, t in zip(out, np.roll(out, -1, 0)):
            fs, ft = side(s), side(t)
            if fs >= 0:
                kept.append(s)
            if fs * ft < 0:
                kept.append(s + (t - s) * fs / (fs - ft))
        out = np.asarray(kept).reshape(-1, 2)
    return out


def _ccw(v: np.ndarray) -> np.ndarray:
    area = 0.5 * np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
    return v if area >= 0 else v[::-1]


def _area(v: np.ndarray) -> float:
    if len(v) < 3:
        return 0.0
    return abs(0.5 * np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1]))


def stacked_pairs(element, P: np.ndarray, size: float, within: float | None = None) -> list:
    """``[(pair index, overlap corners (n, 3) in world)]``: the element's pairs (panels
    that share no vertex) lying in one plane, or within ``within`` [m] of it, with
    overlapping outlines (seen along the first panel's normal), at world vertices ``P``
    (``(panels, k, 3)``)."""
    within = STACKED_PLANE * size if within is None else max(within, STACKED_PLANE * size)
    out = []
    valid = np.asarray(element.valid, bool)
    normals = _normals(P, valid)
    for k, (i, j) in enumerate(element.pairs):
        Vi, Vj = P[i][valid[i]], P[j][valid[j]]
        n = normals[i]
        if np.max(np.abs((Vj - Vi[0]) @ n)) > within:
            continue
        e1 = (Vi[1] - Vi[0]) / np.linalg.norm(Vi[1] - Vi[0])
        e2 = np.cross(n, e1)
        to2 = lambda V: np.stack([(V - Vi[0]) @ e1, (V - Vi[0]) @ e2], -1)
        a, b = _ccw(to2(Vi)), _ccw(to2(Vj))
        o = _clip(a, b)
        if _area(o) <= STACKED_AREA * min(_area(a), _area(b)):
            continue
        out.append((k, Vi[0] + o[:, :1] * e1 + o[:, 1:] * e2))
    return out


def _normals(P: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Every panel's unit normal at world vertices ``P`` (numpy in, numpy out)."""
    return np.asarray(_normals_program(jnp.asarray(P), jnp.asarray(valid)))


#: one program for all panels' normals (op by op, each call compiled a dozen small ones)
_normals_program = jax.jit(jax.vmap(geo.polygon_normal))


@eqx.filter_jit
def _panels_at(element, model, q, p):
    """``(E, r, P, cut)`` at coordinates ``q``: each panel's body DCM and origin, the world
    vertices and the cut creases' angles, one program (op by op, the kinematics and the
    vertices compiled a few hundred small programs: a stow of the 4 x 1 map fold took
    5.3 s, nearly all of it compiling)."""
    ws = kinematics(model, q)
    E, r = element._poses(ws)
    return E, r, element.vertices(ws, p), element.geometric_cut_angles(ws, p)


def _local(E: np.ndarray, r: np.ndarray, panel: int, X: np.ndarray) -> np.ndarray:
    """World points ``X`` as material points of ``panel`` (its body DCM ``E[panel]`` and
    origin ``r[panel]``)."""
    return (X - r[panel]) @ E[panel].T


def _rows(rows) -> tuple:
    """``(a, x, b)`` arrays of separation rows ``(panel a, material point on a, panel b)``."""
    return (np.asarray([r[0] for r in rows], int), np.stack([r[1] for r in rows]),
            np.asarray([r[2] for r in rows], int))


def _separations(element, p, a, x, b):
    """``h(ws)``: per row ``(panel a[i], material point x[i] on it, panel b[i])``
    (:func:`_rows`), the height of the point above panel b's plane (signed along b's
    normal)."""
    valid = jnp.asarray(np.asarray(element.valid, bool))

    def h(ws):
        E, r = element._poses(ws)
        X = r[a] + jnp.einsum("nji,nj->ni", E[a], x)
        P = element.vertices(ws, p)
        n = jax.vmap(geo.polygon_normal)(P[b], valid[b])
        return jnp.sum(n * (X - P[b, 0]), -1)

    return h


def _separations_at(element, model, p, rows, q) -> np.ndarray:
    """:func:`_separations` at coordinates ``q`` (numpy), one program for any rows of a
    count (the layer order's and the stowed state's)."""
    a, x, b = (jnp.asarray(v) for v in _rows(rows))
    return np.asarray(_separation_program(element, model, p, a, x, b, jnp.asarray(q)))


@eqx.filter_jit
def _separation_program(element, model, p, a, x, b, q):
    """:func:`_separations` at coordinates ``q``, compiled."""
    return _separations(element, p, a, x, b)(kinematics(model, q))


def layer_order(element, model, q0, p, hinge_cols, size: float, stacked: list, opening: float = OPENING):
    """``(rows, signs, ties)``: the separation rows of every stacked pair (each overlap
    corner on either panel against the other's plane), the sign each row has in the
    stack's order (its sign when every folded tree crease opens by ``opening``), and the
    labels of pairs the opening does not separate."""
    E, r = (np.asarray(v) for v in _panels_at(element, model, jnp.asarray(q0), p)[:2])
    rows, owner = [], []
    for k, X in stacked:
        i, j = element.pairs[k]
        for a, b in ((i, j), (j, i)):
            for x in _local(E, r, a, X):
                rows.append((a, x, b))
                owner.append(k)
    q = np.asarray(q0, float).copy()
    th = q[hinge_cols]
    folded = np.abs(np.abs(th) - np.pi) < 1e-6
    q[hinge_cols] = np.where(folded, th - np.sign(th) * opening, th)
    h = _separations_at(element, model, p, rows, q)
    owner = np.asarray(owner)
    ties = [element.pair_labels[k] for k in sorted(set(owner.tolist()))
            if np.max(np.abs(h[owner == k])) < TIE * opening * size]
    return rows, np.sign(h), ties


def _cut_margins(element, p, ws, sides):
    """Each cut crease folded flat at the start: its margin to flat, ``>= 0`` while it
    has not passed (``sides``: the side, +-1, it started folded on)."""
    theta = element.geometric_cut_angles(ws, p)
    w = jnp.mod(sides * jnp.pi - theta + jnp.pi, 2 * jnp.pi) - jnp.pi
    return sides * w


def stow(system, params, gap: float, *, max_iter: int = 200) -> Stowed:
    """The stowed state nearest the system's start with every two stacked panels that
    share no vertex at least ``gap`` [m] apart in their layer order (module docstring).
    ``system``: an origami :class:`~diffmb.system.TreeSystem` built with contact (its
    :class:`~diffmb.origami.contact.PanelContact` element names the panels and pairs);
    ``params``: its parameters (``q0`` the start). Raises ValueError naming a pair whose
    order the creases do not say, or one the closures do not let apart."""
    from .contact import PanelContact

    if not (math.isfinite(gap) and gap > 0):
        raise ValueError(f"stow: gap must be a positive number of metres, got {gap!r}")
    elements = [e for e in system.elements if isinstance(e, PanelContact)]
    if not elements:
        raise ValueError("stow: the system has no panel contact element (build the pattern with contact)")
    element = elements[0]
    p = params["elements"][system.elements.index(element)]
    model = params["model"]
    q0 = np.asarray(params["q0"], float)
    hinge_cols = np.asarray([c[0] for c in element.tree_creases], int)
    size = float(np.median([np.max(np.linalg.norm(v[:, None] - v[None], axis=-1))
                            for v in np.asarray(p["vertices"])]))
    _, _, P0, cut_theta = (np.asarray(v) for v in _panels_at(element, model, jnp.asarray(q0), p))
    stacked = stacked_pairs(element, P0, size, within=gap)
    labels = tuple(element.pair_labels[k] for k, _ in stacked)
    th0 = q0[hinge_cols]
    moved0 = {c[2]: 0.0 for c in element.tree_creases}
    if not stacked:
        return Stowed(q0, gap, math.inf, (), (), moved0, 0.0)
    rows, signs, ties = layer_order(element, model, q0, p, hinge_cols, size, stacked)
    if ties:
        raise ValueError(f"stow: the creases do not say which of panels {', '.join(ties[:6])} lies on top "
                         "(opening every folded crease does not separate them)")
    sep = _separations(element, p, *_rows(rows))
    closures = system.closures
    res_rows = row_index(closures.closures) if closures is not None else np.zeros(0, int)
    cut_flat = np.abs(np.abs(cut_theta) - np.pi) < 1e-6
    cut_sides = jnp.asarray(np.where(cut_flat, np.sign(np.asarray(element.cut_folds) + 1e-300), 0.0))
    tree_flat = np.abs(np.abs(th0) - np.pi) < 1e-6
    signs = jnp.asarray(signs)

    def q_of(x):
        return jnp.asarray(q0).at[hinge_cols].set(x)

    def equalities(x):
        if closures is None:
            return jnp.zeros(0)
        return position_residual(model, q_of(x), closures).reshape(-1)[res_rows] / size

    def inequalities(x):
        ws = kinematics(model, q_of(x))
        gaps = (signs * sep(ws) - gap) / size
        cut = _cut_margins(element, p, ws, cut_sides)[np.flatnonzero(cut_flat)]
        return jnp.concatenate([gaps, cut])

    ineq = jax.jit(inequalities)
    deq, dineq = jax.jit(jax.jacfwd(equalities)), jax.jit(jax.jacfwd(inequalities))
    margin = 1e-3 * gap / size      # aimed a little beyond the gap, for the closing below
    hold = [n for n in model.joint_names if n not in {f"theta_{n}" for n in element.panel_names}]
    x = _opened_start(model, closures, q0, hinge_cols, tree_flat, gap / size, hold)

    def close(x):
        if closures is None:
            return x
        return np.asarray(assemble(model, closures, q_of(x), fixed=hold)[0])[hinge_cols]

    x = _on_the_closures(x, th0, lambda x: np.asarray(ineq(x)) - margin, lambda x: np.asarray(dineq(x)),
                         None if closures is None else (lambda x: np.asarray(deq(x))), close, tree_flat, max_iter)
    q = np.asarray(q0, float).copy()
    q[hinge_cols] = x
    if closures is not None:
        q = np.array(assemble(model, closures, q, fixed=hold)[0])
        q[hinge_cols] = np.clip(q[hinge_cols], -math.pi, math.pi)
    h = np.asarray(signs) * _separations_at(element, model, p, rows, q)
    owner = np.repeat(np.arange(len(stacked)), [2 * len(X) for _, X in stacked])
    closure = float(np.max(np.abs(np.asarray(jax.jit(equalities)(q[hinge_cols]))))) * size \
        if closures is not None else 0.0
    short = [k for k in range(len(stacked)) if np.min(h[owner == k]) < gap * (1 - 1e-6)]
    closed = max(1e-9, 100 * float(jnp.finfo(jnp.asarray(params['q0']).dtype).eps)) * size   # float32 too
    if short or closure > closed:
        short = short or list(range(len(stacked)))
        named = ", ".join(labels[k] for k in short[:6]) + (f" and {len(short) - 6} more" if len(short) > 6 else "")
        raise ValueError(
            f"stow: no rigid folded state near the stowed one puts panels {named} {gap:.3g} m apart: the loop "
            "closures do not let these layers apart (a zero-thickness map fold, for one, opens only along the "
            "fold made last, and its other layers stay touching until that fold is flat); --set contact_stow=0 "
            "starts from the stack as it is, where contact arms each pair once its layers have separated")
    return Stowed(q, gap, float(np.min(h)), labels,
                  _stacks(element, stacked, np.asarray(_panels_at(element, model, jnp.asarray(q), p)[2])),
                  {c[2]: float(q[c[0]] - q0[c[0]]) for c in element.tree_creases}, closure)


def _on_the_closures(x, th0, ineq, dineq, deq, close, flat, iters: int) -> np.ndarray:
    """Sequential quadratic programming on the closure manifold: each step minimises
    ``|x + N y - th0|^2 / 2`` over the closures' tangent directions ``N`` (the null space
    of their Jacobian ``deq``) subject to the inequalities linearised (``ineq >= 0``, a
    slack that costs far more than any move keeps the subproblem feasible), the creases
    that start flat-folded within ``[-pi, pi]`` and a trust region; the step is closed
    again (``close``: Gauss-Newton onto the closures) and kept if it lowers the merit
    ``|x - th0|^2 / 2 + MERIT x (the inequalities' worst violation)``."""
    from scipy.optimize import minimize

    def merit(x):
        return 0.5 * float(np.sum((x - th0) ** 2)) + MERIT * max(0.0, -float(np.min(ineq(x))))

    radius, phi = TRUST, merit(x)
    F = np.flatnonzero(flat)
    for _ in range(iters):
        c, A = ineq(x), dineq(x)
        if deq is None:
            N = np.eye(len(x))
        else:
            J = deq(x)
            _, sv, Vt = np.linalg.svd(J)
            rank = int(np.sum(sv > 1e-9 * max(sv[0], 1e-300))) if len(sv) else 0
            N = Vt[rank:].T
        if N.shape[1] == 0:
            break
        m = N.shape[1]
        AN = A @ N
        g0 = x - th0

        def f(v):
            y, s = v[:m], v[m]
            r = g0 + N @ y
            return 0.5 * float(r @ r) + MERIT * s, np.concatenate([N.T @ r, [MERIT]])

        cons = [{"type": "ineq", "fun": lambda v: c + AN @ v[:m] + v[m],
                 "jac": lambda v: np.hstack([AN, np.ones((len(c), 1))])}]
        if len(F):
            lim = lambda v: np.concatenate([np.pi - (x[F] + N[F] @ v[:m]), np.pi + (x[F] + N[F] @ v[:m])])
            cons.append({"type": "ineq", "fun": lim, "jac": lambda v: np.hstack(
                [np.vstack([-N[F], N[F]]), np.zeros((2 * len(F), 1))])})
        v0 = np.concatenate([np.zeros(m), [max(0.0, -float(np.min(c)))]])
        bounds = [(-radius, radius)] * m + [(0.0, None)]
        y = minimize(f, v0, jac=True, method="SLSQP", bounds=bounds, constraints=cons,
                     options={"maxiter": 200, "ftol": 1e-20}).x[:m]
        try:
            x_new = close(x + N @ y)
        except ValueError:
            radius /= 4
            continue
        phi_new = merit(x_new)
        if phi_new < phi - 1e-16:
            x, phi = x_new, phi_new
            radius = min(4 * radius, TRUST)
            if np.max(np.abs(N @ y)) < 1e-12:
                break
        else:
            radius /= 4
            if radius < 1e-12:
                break
    return x


def _opened_start(model, closures, q0, hinge_cols, folded, opening: float, hold) -> np.ndarray:
    """The solve's first guess: every folded crease opened by ``opening`` towards flat
    and the closures solved from there (the stowed state itself is a kinematic
    singularity, where the closures' linearisation says nothing), or the stowed angles
    where that does not close."""
    q = np.asarray(q0, float).copy()
    th = q[hinge_cols]
    q[hinge_cols] = np.where(folded, th - np.sign(th) * opening, th)
    if closures is not None:
        try:
            q = np.asarray(assemble(model, closures, q, fixed=hold)[0])
        except ValueError:
            return np.asarray(q0, float)[hinge_cols]
    return np.clip(q[hinge_cols], -math.pi, math.pi)


def _stacks(element, stacked, P) -> tuple:
    """Each group of mutually stacked panels, bottom to top along the first one's normal."""
    import networkx as nx

    g = nx.Graph()
    g.add_edges_from(element.pairs[k] for k, _ in stacked)
    out = []
    valid = np.asarray(element.valid, bool)
    normals = _normals(P, valid)
    for comp in nx.connected_components(g):
        comp = sorted(comp)
        n = normals[comp[0]]
        height = {i: float(np.mean(P[i][valid[i]] @ n)) for i in comp}
        out.append(tuple(element.panel_names[i] for i in sorted(comp, key=height.get)))
    return tuple(out)
