"""Building the contact element of a crease pattern (:func:`panel_contact`) or of loose
panels (:func:`free_panels`), and the checks before anything is compiled: what contact
cannot model (a panel that is not convex, a thickness too large for the panels:
:func:`check_panels`) and a start state that already intersects (:func:`check_start`),
each refused naming the panel, crease or pair. :func:`cut_branches` puts each cut crease
on the branch its start state is on."""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..polygon import polygon_area, polygon_is_convex
from .element import PanelContact
from .report import CREASE_TOLERANCE, OVERLAP_TOLERANCE
from .rule import DHAT_RELATIVE, MIN_BUDGET, PSI_HAT, REST_DAMPING

#: Candidate pairs evaluated exactly per evaluation (the rest: a lower bound, counted).
CAPACITY = 256


@dataclasses.dataclass(frozen=True)
class ContactOptions:
    """What :func:`panel_contact` builds. ``forces``: contact on (the detector runs either
    way); ``kappa_scale``: a factor on the default stiffnesses; ``psi_hat`` [rad], ``dhat``
    [m] (None: :data:`DHAT_RELATIVE` of the panel size), ``thickness`` [m]: the barriers'
    reaches and the panels' thickness offset; ``damping`` [N s/m], ``crease_damping``
    [N m s/rad]: contact damping that only dissipates (zero outside the reach);
    ``rest_damping``: the damping ratio of a crease resting past flat on Tier A's soft
    term, at its inertia (:func:`.rule.crease_rest_damping`; :data:`.rule.REST_DAMPING` by
    default; 0: elastic)."""

    forces: bool = True
    kappa_scale: float = 1.0
    psi_hat: float = PSI_HAT
    dhat: float | None = None
    thickness: float = 0.0
    damping: float = 0.0
    crease_damping: float = 0.0
    rest_damping: float = REST_DAMPING
    capacity: int = CAPACITY

    def check(self):
        for name in ("kappa_scale", "psi_hat", "thickness", "damping", "crease_damping", "rest_damping"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"contact: {name} must be a non-negative number, got {v}")
        if self.kappa_scale <= 0 or self.psi_hat <= 0:
            raise ValueError(f"contact: kappa_scale and psi_hat must be positive, got {self.kappa_scale}, "
                             f"{self.psi_hat}")
        if self.dhat is not None and not (math.isfinite(self.dhat) and self.dhat > 0):
            raise ValueError(f"contact: dhat must be a positive number, got {self.dhat}")


def _shares_vertex(a: np.ndarray, b: np.ndarray, tol: float) -> bool:
    return bool(np.any(np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1) < tol))


def inradius(v: np.ndarray) -> float:
    """The distance from a convex polygon's vertex centroid to its nearest edge line."""
    c = v.mean(0)
    e = np.roll(v, -1, axis=0) - v
    r = c - v
    along = np.sum(r * e, -1) / np.sum(e * e, -1)
    return float(np.min(np.linalg.norm(r - along[:, None] * e, axis=-1)))


def check_panels(panels: dict, options: ContactOptions) -> None:
    """Refuse, before anything is compiled, what contact cannot model: a panel that is
    not convex, or a thickness that is not small beside every panel. A plate of
    thickness ``xi`` is modelled by its mid-surface offset by ``xi`` (Tier B); that
    needs ``xi`` below the smallest panel's inradius, or flat neighbours that share no
    vertex would start inside each other's offset. Raises ValueError naming the panel."""
    options.check()
    if not options.forces:
        return
    for n, panel in panels.items():
        v = np.asarray(panel.vertices, float)
        if not polygon_is_convex(v):
            raise ValueError(f"contact: panel {n!r} is not convex; split it into convex panels "
                             f"(or --set contact=0)")
        if options.thickness >= inradius(v):
            raise ValueError(f"contact: thickness {options.thickness:g} m is not below the inradius of panel "
                             f"{n!r} ({inradius(v):.4g} m); thicker plates than that cannot be modelled "
                             f"as offset mid-surfaces")


def start_diagnostics(system, element: PanelContact, params) -> dict:
    """The detector's figures at the system's start state (numpy): every crease's angle,
    and the deepest overlap of two panels and its pair (:meth:`PanelContact.detect`).
    One compiled program, the one that computes the run's start state
    (:meth:`~diffmb.system.TreeSystem.start`): op by op, its few hundred small operations
    would each compile on their own (6-13 s of XLA before fold-2x4 could run)."""
    return jax.device_get(system.start(params)[1][system.elements.index(element)])


def check_start(system, element: PanelContact, params) -> None:
    """Refuse a start state that already intersects: a crease folded past flat, or two
    panels that share no vertex passing through each other (the barriers would start at
    infinite energy). Raises ValueError naming the crease or the panels and the depth."""
    p = params["elements"][system.elements.index(element)]
    d = start_diagnostics(system, element, params)
    if "crease_angle" in d:
        over = np.abs(np.asarray(d["crease_angle"])) - np.pi
        k = int(np.argmax(over))
        if over[k] > float(p["crease_tolerance"]):
            raise ValueError(f"contact: the start state folds crease {element.crease_labels[k]} past 180 deg "
                             f"(to {np.degrees(np.pi + over[k]):.6g} deg): its panels start through each other")
    if "panel_overlap" in d and float(d["panel_overlap"]) > float(p["overlap_tolerance"]):
        pair = element.pair_labels[int(d["panel_overlap_pair"])]
        raise ValueError(f"contact: the start state has panels {pair} passing through each other "
                         f"({float(d['panel_overlap']):.3g} m deep)")


def panel_contact(panels: dict, order: tuple, origin: dict, model, tree_edges, cut_creases, hinge_axis,
                  options: ContactOptions, cut_start=None, crease_inertia=None) -> PanelContact:
    """The element of a crease pattern compiled into ``model``: ``panels`` by name,
    ``order`` their bodies' order, ``origin`` each body's origin in the flat layout,
    ``tree_edges`` ``(parent, child, crease)`` of the spanning tree, ``cut_creases`` the
    creases cut into closures, ``hinge_axis(crease, child)`` the oriented crease axis,
    ``cut_start``: each cut crease's angle at the start on its branch (:func:`cut_branches`:
    ``+-pi`` for one folded flat, on the side it opens from; None: its declared fold),
    ``crease_inertia``: each crease's inertia at the start (:func:`crease_inertias`; None: 1).
    Raises ValueError naming a panel that is not convex or too thin for the thickness
    (:func:`check_panels`)."""
    check_panels(panels, options)
    names = tuple(order)
    moving = set(model.body_names)
    # a panel on a fixed root is on the world: its outline in world (flat layout) coordinates
    local = [np.asarray(panels[n].vertices, float) - (origin[n] if n in moving else 0.0) for n in names]
    cut_axis = np.array([hinge_axis(c, panels[c.b]) for c in cut_creases]).reshape(-1, 3)
    flat = [np.asarray(panels[n].vertices, float) for n in names]
    numbers, valid, size = _numbers(local, cut_axis, options,
                                    crease_tolerance=options.psi_hat if options.forces else CREASE_TOLERANCE)
    # Tier A's rest depths, the tree creases' then the cut creases' (the order of their angles)
    creases = [c for _, _, c in tree_edges] + list(cut_creases)
    segments = np.array([[c.p1, c.p2] for c in creases], float).reshape(-1, 2, 3)
    levers = crease_levers(flat, segments, offset=any(c.height != 0.0 for c in creases))
    numbers["rest_depth"] = jnp.asarray(OVERLAP_TOLERANCE * size / levers)
    pairs = tuple((i, j) for i in range(len(names)) for j in range(i + 1, len(names))
                  if not _shares_vertex(flat[i], flat[j], 1e-9 * size))
    tree = tuple((model.coordinate_names.index(f"theta_{child}"), model.velocity_names.index(f"theta_{child}_dot"),
                  c.label) for _, child, c in tree_edges)
    cut = tuple((model.body_index(c.a), model.body_index(c.b), c.label) for c in cut_creases)
    numbers["crease_inertia"] = jnp.asarray(np.ones(len(tree) + len(cut)) if crease_inertia is None
                                            else np.asarray(crease_inertia, float))
    return PanelContact(panel_names=names, panel_body=tuple(model.body_index(n) if n in moving else -1
                                                            for n in names), valid=valid,
                        pairs=pairs, tree_creases=tree, cut_creases=cut,
                        cut_folds=tuple(float(c.fold) for c in cut_creases) if cut_start is None
                        else tuple(float(a) for a in cut_start),
                        forces=bool(options.forces),
                        damped=options.damping > 0, capacity=int(options.capacity), budget_from_start=True,
                        numbers=numbers)


def _diameter(points: np.ndarray) -> float:
    """The largest distance between two of ``points`` (a panel's few vertices)."""
    return float(np.max(np.linalg.norm(points[:, None] - points[None], axis=-1)))


def _box_diagonal(points: np.ndarray) -> float:
    """The diagonal of ``points``' bounding box: at least their diameter (equal for a
    rectangular sheet), linear in their number where the diameter's pairs are quadratic
    (a 50 x 50 pattern has 10,000 vertices)."""
    return float(np.linalg.norm(np.ptp(points, axis=0)))


def _convex_corners(flat: list):
    """The corners of the flat sheet (each panel's outline, ``z = 0``) where it is convex,
    its panels covering their convex hull once (their areas add up to the hull's: no
    notch, no hole, no two panels laid over each other); None where it is not."""
    from scipy.spatial import ConvexHull

    points = np.concatenate(flat)
    hull = ConvexHull(points[:, :2])
    area = sum(polygon_area(v) for v in flat)
    return points[hull.vertices] if abs(area - hull.volume) <= 1e-9 * hull.volume else None


def crease_levers(flat: list, segments: np.ndarray, offset: bool = False) -> np.ndarray:
    """Each crease's lever [m]: how far a crease turned past flat by ``delta`` moves a
    point of the sheet, at most, per radian. ``flat``: each panel's outline in the flat
    layout; ``segments (n, 2, 3)``: each crease's segment there; ``offset``: some hinge
    lies off the layout plane (thick panels), where folding does not keep the
    mid-surface's lengths, and every crease takes the diagonal below.

    A point turned about the crease's axis moves ``delta`` times its distance from the
    axis, and folding keeps the sheet's lengths, so that distance is at most the point's
    distance along the sheet to the crease's segment; on a convex sheet that is the
    straight distance in the flat layout, largest at one of the sheet's corners. On the
    4x4 map fold of 2 m panels: 5.7 m for a crease at the centre, 8.5 m at a corner,
    against the sheet's diagonal of 11.3 m. A sheet that is not convex, or ``offset``,
    keeps the diagonal of its bounding box for every crease, the rule for every sheet
    before: there a path along the sheet may be longer than the flat distance, and the
    diagonal is a scale, not a bound."""
    corners = None if offset else _convex_corners(flat)
    if corners is None:
        return np.full(len(segments), _box_diagonal(np.concatenate(flat)))
    a, b = segments[:, None, 0], segments[:, None, 1]          # (n, 1, 3)
    ab = b - a
    t = np.clip(np.sum((corners[None] - a) * ab, -1) / np.maximum(np.sum(ab * ab, -1), 1e-300), 0.0, 1.0)
    return np.max(np.linalg.norm(corners[None] - (a + t[..., None] * ab), axis=-1), axis=1)


def _numbers(local: list, cut_axis: np.ndarray, options: ContactOptions, crease_tolerance: float) -> tuple:
    """``(numbers, valid, size)``: the element's numbers from each panel's outline in its
    body's frame (``local``; the rows padded to the most vertices by repeating the last,
    ``valid`` saying which are real) and ``options``; ``size`` the panels' median
    diameter, which sets the default panel reach and the detector's overlap tolerance
    (Tier A's rest depths, from it and each crease's lever: :func:`panel_contact`)."""
    kmax = max(len(v) for v in local)
    verts = np.stack([np.concatenate([v, np.repeat(v[-1:], kmax - len(v), 0)]) for v in local])
    valid = tuple(tuple(i < len(v) for i in range(kmax)) for v in local)
    size = float(np.median([_diameter(v) for v in local]))
    radius = np.array([np.max(np.linalg.norm(v - v.mean(0), axis=-1)) for v in local])
    numbers = {
        "vertices": jnp.asarray(verts),
        "radius": jnp.asarray(radius),
        "cut_axis": jnp.asarray(cut_axis),
        "psi_hat": jnp.asarray(options.psi_hat),
        "kappa_scale": jnp.asarray(options.kappa_scale),
        "crease_damping": jnp.asarray(options.crease_damping),
        "rest_damping": jnp.asarray(options.rest_damping),
        "dhat": jnp.asarray(options.dhat if options.dhat is not None else DHAT_RELATIVE * size),
        "thickness": jnp.asarray(options.thickness),
        "damping": jnp.asarray(options.damping),
        "shrink": jnp.asarray(1e-6),
        "crease_tolerance": jnp.asarray(crease_tolerance),
        "overlap_tolerance": jnp.asarray(OVERLAP_TOLERANCE * size),
    }
    return numbers, valid, size


def cut_branches(system, element: PanelContact, params) -> tuple:
    """Each cut crease's angle at the start, on its branch: the geometric angle, and for
    one folded flat (``+-pi``) the side it opens from.

    At ``theta = +-pi`` two zero-thickness panels lie face to face, and which of the two
    is on top, the layer order, is not in the geometry: only in how the stack was folded.
    A tree crease keeps it in its coordinate (``+pi`` opens towards ``+pi - e``). A cut
    crease's angle comes from the geometry, so its side is taken from the motion the
    structure starts with: the first-order opening under its own constrained dynamics
    (``q(h) = q0 + h^2 qdd0 / 2``, a step too small to leave the branch). Where the start
    does not move a crease, its declared fold decides. (The map-fold generator's folds of
    the cut creases are not flat-foldable in general, Maekawa's ``|M - V| = 2`` fails at
    its vertices: the fold-4panel's map has two of each; the motion's sides are.) A cut
    crease that does not start flat is referred to the quarter turn nearest its geometric
    angle: its declared fold may be a guess the closure solve moved (``--fold-fraction``),
    and unwrapping the run's angles about a reference half a turn away would add a full
    turn."""
    x0 = system.init_state(params)
    model = params["model"]
    q0, qd0 = system.split(x0)
    p = element.numbers
    theta0 = np.asarray(_start_geometry(element, model, q0, qd0, p)[0])
    folded = np.abs(np.abs(theta0) - np.pi) < 1e-6
    sides = np.sign(np.asarray(element.cut_folds))
    # the dynamics compile only where a crease starts flat (about 1 s of a build)
    qdd = np.asarray(eqx.filter_jit(system.accelerations)(0.0, x0, params)[0]) if folded.any() else 0.0
    scale = np.max(np.abs(qdd))
    if scale > 0:
        h2 = 2e-6 / scale          # moves the fastest coordinate by 1e-6
        theta = np.asarray(_start_geometry(element, model, jnp.asarray(q0) + 0.5 * h2 * jnp.asarray(qdd), qd0, p)[0])
        moved = np.abs(np.abs(theta) - np.pi) > 1e-9
        sides = np.where(folded & moved, np.sign(theta), sides)
    # off flat, the nearest quarter turn: within an eighth of a turn of the start, so the
    # unwrapping holds, and the same for nearby starts (the element is static: a sweep over
    # a start fold keeps one program)
    quarter = np.pi / 2 * np.round(theta0 / (np.pi / 2))
    return tuple(float(np.pi * s) if f else float(a) for s, f, a in zip(sides, folded, quarter))


def crease_inertias(system, element: PanelContact, params) -> np.ndarray:
    """Each crease's inertia at the start [kg m^2]: ``1 / (a M^-1 a^T)``, ``a`` the row of
    the crease's fold rate in the speeds and ``M`` the tree's mass matrix (the closures
    left out: the inertia a torque on that crease alone meets, a lower bound of the
    closed structure's). It scales :func:`.rule.crease_rest_damping`, a damping ratio:
    an inertia off by a factor changes the ratio by its square root only."""
    x0 = system.init_state(params)
    q0, qd0 = system.split(x0)
    return np.asarray(_start_geometry(element, params["model"], q0, qd0, element.numbers)[1])


@eqx.filter_jit
def _start_geometry(element: PanelContact, model, q, qd, p):
    """``(cut crease angles, crease inertias)`` at ``q``: one program, one pose pass, for
    :func:`cut_branches` and :func:`crease_inertias` (the inertias only with contact on,
    else None); each of its own compiled the kinematics again (10x10 map fold: 0.3 s)."""
    from ...tree import crba
    from ...tree.kinematics import kinematics, world_velocities

    ws = kinematics(model, q)
    if not element.forces:
        return element.geometric_cut_angles(ws, p), None
    # the rates' rows from the velocity sums alone (linear in the speeds)
    rates = lambda v: element.crease_rates(dataclasses.replace(ws, vel=world_velocities(model, ws, v), qd=v), p)
    A = jax.jacfwd(rates)(qd)
    inertias = 1.0 / jnp.einsum("ij,ji->i", A, jnp.linalg.solve(crba.mass_matrix_ws(model, ws), A.T))
    return element.geometric_cut_angles(ws, p), inertias


def free_panels(model, panels: dict, options: ContactOptions, energy: float) -> PanelContact:
    """The element for loose panels on any tree (no creases between them): ``panels`` maps
    a body name (``"world"`` for a fixed panel) to its convex outline ``(k, 3)`` in that
    body's frame; every two panels are a pair. ``energy``: the energy the motion has to
    spend (the default stiffnesses: :mod:`.rule`)."""
    options.check()
    names = tuple(panels)
    local = [np.asarray(panels[n], float) for n in names]
    numbers, valid, _ = _numbers(local, np.zeros((0, 3)), options, crease_tolerance=CREASE_TOLERANCE)
    numbers["rest_depth"] = jnp.zeros(0)   # no creases
    numbers["energy"] = jnp.asarray(max(float(energy), MIN_BUDGET))
    numbers["crease_inertia"] = jnp.zeros(0)
    bodies = tuple(-1 if n == "world" else model.body_index(n) for n in names)
    return PanelContact(panel_names=names, panel_body=bodies, valid=valid,
                        pairs=tuple((i, j) for i in range(len(names)) for j in range(i + 1, len(names))),
                        tree_creases=(), cut_creases=(), cut_folds=(), forces=bool(options.forces),
                        damped=options.damping > 0, capacity=int(options.capacity), budget_from_start=False,
                        numbers=numbers)
