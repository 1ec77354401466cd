"""Panels that never pass through each other: a detector for every run, and two-tier
barrier contact (``docs/contact.md``).

Fulton & Schaub's model has no contact (section 4.3.1: panel sets 3-4 and 5-6 "fold
beyond 180 degrees"). :class:`PanelContact` is a :class:`~diffmb.tree.force_element.ForceElement`
of an origami :class:`~diffmb.system.TreeSystem` that

* **detects**, contact on or off, at every save point: every crease's fold angle (tree
  creases: their joint coordinate; cut creases: the signed angle between the two panels'
  normals about the crease, :meth:`PanelContact.crease_angles`) and the separating-axis
  overlap of every two panels that share no vertex (:func:`diffmb.math.geometry.overlap_depth`:
  0 for panels lying face to face, as zero-thickness stacks do, positive only where one
  passes through the other);
* with contact on, keeps them apart with potentials, so that energy and momentum stay
  conserved (the forces are internal and derive from a potential invariant under rigid
  motions of the whole structure):

  - **Tier A, crease limits.** Zero-thickness panels that share a crease lie face to face
    at ``theta = +-pi`` and pass through each other beyond it. ``U_A = kappa_A [b(pi + psi
    - theta) + b(pi + psi + theta)]`` with IPC's clamped log barrier ``b`` of reach
    ``psi_hat`` (:mod:`diffmb.math.barrier`): zero for ``|theta| <= pi`` (a folded stack
    touches without force, so the paper's stowed state at exactly ``+-pi`` is admissible),
    infinite at ``|theta| = pi + psi_hat``. Cut creases carry their unwrapped angle as a
    state of the element (the geometry gives it modulo ``2 pi`` only).
  - **Tier B, panels that share no vertex.** ``U_B = kappa_B sum b(d - xi)`` over the
    vertex-face and edge-edge distances ``d`` of every such pair (IPC's primitives, the
    edge-edge terms mollified for parallel edges), reach ``dhat``, thickness ``xi``: a
    positive gap is guaranteed. A pair that starts in contact (layers of a stowed stack,
    gap 0) is armed as soon as it has separated by ``dhat`` (its arming weight is a state
    of the element that grows only while the pair is out of the barrier's reach, so arming
    adds no energy); a broad phase keeps ``capacity`` candidate pairs (the nearest by a
    lower bound on their distance) and counts the rest (``contact_overflow``).

The default stiffnesses need no tuning: ``kappa = E / b(reach / 2)`` with ``E`` the
energy the structure can spend (its initial energy), so a motion that conserves or
dissipates energy never comes closer than half the reach: the certified margin
(:func:`certified_margin`).
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..math import barrier as br, geometry as geo, spatial as sp
from ..math.batch_cond import cond_any
from ..tree import rnea
from ..tree.force_element import ForceElement

#: Default reach of the crease barrier [rad]: a crease may fold at most this far past flat.
PSI_HAT = 1e-3
#: Default reach of the panel barrier, relative to the panels' median diameter.
DHAT_RELATIVE = 1e-3
#: Candidate pairs evaluated exactly per evaluation (the rest: a lower bound, counted).
CAPACITY = 256
#: Arming rate of a pair that started in contact, once out of the barrier's reach [1/s]:
#: its weight grows linearly to 1 in ``1 / ARMING_RATE`` seconds (no feedback on itself,
#: so the arming state adds no stiffness to an explicit solver).
ARMING_RATE = 1e3
#: The detector's pairs per save point: all of them up to this many, else the nearest.
DETECT_CAPACITY = 8192
#: Beyond this many pairs, a sweep member's save point with no armed pair within the
#: barrier's reach takes the exact distance of the nearest pair only
#: (:meth:`PanelContact._diagnosed_pairs`): a sweep of the 4x4 map fold spent half its
#: time on the exact distances of all 78 pairs at each of its 1,001 save points.
DIAGNOSED_PAIRS = 16
#: The detector: an overlap deeper than this fraction of the panel size is a crossing;
#: a crease more than this past flat [rad] (without contact; with contact, its reach).
OVERLAP_TOLERANCE = 1e-5
CREASE_TOLERANCE = 1e-4
#: The least energy budget [J] of the default stiffnesses (a structure at rest, unloaded).
MIN_BUDGET = 1e-9


@dataclasses.dataclass(frozen=True)
class ContactOptions:
    """What :func:`panel_contact` builds. ``forces``: contact on (the detector runs either
    way); ``kappa_scale``: a factor on the default stiffnesses; ``psi_hat`` [rad], ``dhat``
    [m] (None: :data:`DHAT_RELATIVE` of the panel size), ``thickness`` [m]: the barriers'
    reaches and the panels' thickness offset; ``damping`` [N s/m], ``crease_damping``
    [N m s/rad]: contact damping that only dissipates (zero outside the reach)."""

    forces: bool = True
    kappa_scale: float = 1.0
    psi_hat: float = PSI_HAT
    dhat: float | None = None
    thickness: float = 0.0
    damping: float = 0.0
    crease_damping: float = 0.0
    capacity: int = CAPACITY

    def check(self):
        for name in ("kappa_scale", "psi_hat", "thickness", "damping", "crease_damping"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"contact: {name} must be a non-negative number, got {v}")
        if self.kappa_scale <= 0 or self.psi_hat <= 0:
            raise ValueError(f"contact: kappa_scale and psi_hat must be positive, got {self.kappa_scale}, "
                             f"{self.psi_hat}")
        if self.dhat is not None and not (math.isfinite(self.dhat) and self.dhat > 0):
            raise ValueError(f"contact: dhat must be a positive number, got {self.dhat}")


class PanelContact(ForceElement):
    """The detector and, with ``forces``, two-tier barrier contact (module docstring).
    Structure (static): which body carries which panel, the pairs that share no vertex,
    the creases; numbers: :meth:`default_params`."""

    panel_names: tuple = eqx.field(static=True)
    panel_body: tuple = eqx.field(static=True)
    valid: tuple = eqx.field(static=True)            # per panel, which of the k vertex rows are real
    pairs: tuple = eqx.field(static=True)            # (i, j): panels that share no vertex
    tree_creases: tuple = eqx.field(static=True)     # (coordinate index, velocity index, label)
    cut_creases: tuple = eqx.field(static=True)      # (body a, body b, label)
    cut_folds: tuple = eqx.field(static=True)        # the cut creases' declared start folds
    forces: bool = eqx.field(static=True)
    damped: bool = eqx.field(static=True)
    capacity: int = eqx.field(static=True)
    budget_from_start: bool = eqx.field(static=True)
    numbers: dict
    #: save points with no armed pair within reach take the nearest pair's distance only
    #: (:meth:`_diagnosed_pairs`; a sweep's members, :meth:`for_batches`)
    nearest_at_saves: bool = eqx.field(static=True, default=False)

    def default_params(self):
        return self.numbers

    @property
    def applies_forces(self) -> bool:
        return self.forces

    # ------------------------------------------------------------------ geometry
    @property
    def crease_labels(self) -> tuple:
        return tuple(c[2] for c in self.tree_creases) + tuple(c[2] for c in self.cut_creases)

    @property
    def pair_labels(self) -> tuple:
        return tuple(f"{self.panel_names[i]}/{self.panel_names[j]}" for i, j in self.pairs)

    def _mask(self):
        return jnp.asarray(np.asarray(self.valid, bool))

    def _poses(self, ws):
        """Each panel's body DCM and origin (the identity and 0 for a panel on the world)."""
        b = np.asarray(self.panel_body)
        world = b < 0
        E, r = ws.rot[np.maximum(b, 0)], ws.pos[np.maximum(b, 0)]
        if world.any():
            E = jnp.where(world[:, None, None], jnp.eye(3, dtype=E.dtype)[None], E)
            r = jnp.where(world[:, None], 0.0, r)
        return E, r

    def vertices(self, ws, p):
        """World vertices of every panel, ``(n_panels, k, 3)``."""
        E, r = self._poses(ws)
        return r[:, None, :] + jnp.einsum("pji,pkj->pki", E, p["vertices"])

    def _vertex_velocities(self, ws, P):
        b = np.asarray(self.panel_body)
        vel = jnp.where((b < 0)[:, None], 0.0, ws.vel[np.maximum(b, 0)])
        w, v = vel[:, :3], vel[:, 3:]
        return v[:, None, :] + jnp.cross(w[:, None, :], P)

    def _cut_geometry(self, ws, p):
        """Per cut crease: the world crease axis (oriented so a positive angle lifts panel
        b off panel a's +z side) and both panels' normals."""
        ia = np.asarray([c[0] for c in self.cut_creases], int)
        ib = np.asarray([c[1] for c in self.cut_creases], int)
        Ea, Eb = ws.rot[ia], ws.rot[ib]
        u = sp.mtv(Ea, p["cut_axis"])
        na, nb = Ea[:, 2, :], Eb[:, 2, :]
        return u, na, nb, ia, ib

    def geometric_cut_angles(self, ws, p):
        """The cut creases' fold angles from the panels' normals, in ``(-pi, pi]``."""
        if not self.cut_creases:
            return jnp.zeros(0, ws.pos.dtype)
        u, na, nb, _, _ = self._cut_geometry(ws, p)
        return jnp.arctan2(jnp.sum(u * jnp.cross(na, nb), -1), jnp.sum(na * nb, -1))

    def crease_angles(self, ws, z, p):
        """Every crease's fold angle: tree creases' coordinates, then the cut creases'
        (when contact is on, on the branch nearest the element's state: the state is the
        angle integrated from its rate, which strays from the geometry only by the
        integration's error and the projections' corrections, far below the pi that
        would change the branch)."""
        tree = ws.q[np.asarray([c[0] for c in self.tree_creases], int)] if self.tree_creases else \
            jnp.zeros(0, ws.pos.dtype)
        cut = self.geometric_cut_angles(ws, p)
        if self.forces and self.cut_creases:
            k = jnp.round((z[: len(self.cut_creases)] - cut) / (2 * jnp.pi))
            cut = cut + 2 * jnp.pi * jax.lax.stop_gradient(k)
        return jnp.concatenate([tree, cut])

    def _cut_rates(self, ws, p):
        u, _, _, ia, ib = self._cut_geometry(ws, p)
        return jnp.sum(u * (ws.vel[ib, :3] - ws.vel[ia, :3]), -1)

    def crease_rates(self, ws, p):
        """Every crease's fold rate (tree creases', then the cut creases')."""
        tree = ws.qd[np.asarray([c[1] for c in self.tree_creases], int)] if self.tree_creases else \
            jnp.zeros(0, ws.pos.dtype)
        if not self.cut_creases:
            return tree
        return jnp.concatenate([tree, self._cut_rates(ws, p)])

    # ------------------------------------------------------------------ tier A
    def _crease_energy(self, theta, p, budget):
        psi = p["psi_hat"]
        over = jnp.pi + psi
        return crease_stiffness(p, budget) * jnp.sum(br.barrier(jnp.concatenate([over - theta, over + theta]), psi))

    def _crease_weight(self, theta, p):
        """Where the crease damping acts: 0 up to flat, rising to 1 at the reach."""
        x = jnp.clip((jnp.abs(theta) - jnp.pi) / p["psi_hat"], 0.0, 1.0)
        return x * x * (3.0 - 2.0 * x)

    # ------------------------------------------------------------------ tier B
    def _pair_bounds(self, P, p):
        """A lower bound on every pair's distance: the bounding spheres' gap, or the gap
        between one panel's plane and the other's vertices, whichever is larger. Formed
        for all panels at once as dense (panels x panels) tables, then read at the pairs:
        a few small products where a gather of every pair's vertices would cost more than
        the rest of the contact term."""
        i = np.asarray([q[0] for q in self.pairs], int)
        j = np.asarray([q[1] for q in self.pairs], int)
        m = self._mask()
        c = jnp.sum(jnp.where(m[..., None], P, 0.0), 1) / jnp.sum(m, 1).astype(P.dtype)[:, None]
        cc = jnp.sum(c * c, -1)
        # centre distances from the Gram matrix (its round-off, 1e-16 of the structure's
        # size squared, is far below any reach)
        d2 = jnp.maximum(cc[:, None] + cc[None, :] - 2.0 * c @ c.T, geo.TINY)
        sphere = jnp.sqrt(d2) - p["radius"][:, None] - p["radius"][None, :]
        n = jax.vmap(geo.polygon_normal)(P, m)
        # h[a, b, k]: vertex k of panel b above the plane of panel a; a padded vertex row
        # repeats a real vertex, so it changes neither extreme
        h = jnp.einsum("bkd,ad->abk", P, n) - jnp.sum(P[:, 0, :] * n, -1)[:, None, None]
        plane = jnp.maximum(jnp.min(h, -1), -jnp.max(h, -1))
        return jnp.maximum(sphere, jnp.maximum(plane, plane.T))[i, j]

    def _candidates(self, bound, armed):
        """The pairs evaluated exactly: all of them, or the ``capacity`` armed ones nearest
        by their lower bound."""
        n = len(self.pairs)
        if n <= self.capacity:
            return jnp.arange(n)
        return jax.lax.top_k(-jnp.where(armed > 0, bound, jnp.inf), self.capacity)[1]

    def _pair_index(self):
        return (jnp.asarray(np.asarray([q[0] for q in self.pairs], np.int32)),
                jnp.asarray(np.asarray([q[1] for q in self.pairs], np.int32)))

    def _armed(self, z, dtype):
        """Each pair's arming weight in [0, 1] (a smooth clamp of its arming state)."""
        if not self.forces:
            return jnp.ones(len(self.pairs), dtype)
        n = len(self.cut_creases)
        x = jnp.clip(z[n:n + len(self.pairs)], 0.0, 1.0)
        return x * x * (3.0 - 2.0 * x)

    def _budget(self, z):
        """The energy the default stiffnesses hold at half reach (the last own state)."""
        return z[-1]

    def _pair_distances(self, Pi, mi, Pj, mj):
        """The 24 (quad-quad) primitive distances of one pair and their weights: each
        polygon's vertices against the other polygon, and the edge-edge pairs mollified."""
        # each polygon's vertices against the other polygon, the two sides in one vmap
        # (the nearest-point search traced once: a smaller program to compile)
        sides = jax.vmap(lambda X, V, m: jax.vmap(lambda x: geo.point_polygon_distance(x, V, m))(X))(
            jnp.stack([Pi, Pj]), jnp.stack([Pj, Pi]), jnp.stack([mj, mi]))
        ai, bi = geo.edges(Pi, mi)
        aj, bj = geo.edges(Pj, mj)
        d_ee = jax.vmap(lambda a, b: jax.vmap(lambda c, e: geo.segment_distance(a, b, c, e))(aj, bj))(ai, bi)
        ei, ej = bi - ai, bj - aj
        cross2 = jnp.sum(jnp.cross(ei[:, None, :], ej[None, :, :]) ** 2, -1)
        eps = 1e-3 * jnp.sum(ei * ei, -1)[:, None] * jnp.sum(ej * ej, -1)[None, :] + 1e-300
        moll = br.mollifier(cross2, eps)
        d = jnp.concatenate([sides.reshape(-1), d_ee.reshape(-1)])
        w = jnp.concatenate([mi.astype(d.dtype), mj.astype(d.dtype),
                             (moll * (mi[:, None] & mj[None, :]).astype(d.dtype)).reshape(-1)])
        return d, w

    def _panel_terms(self, P, z, p, bound=None):
        """Tier B at vertices ``P``: ``(energy, min gap, overflow, (armed, weights, gaps))``
        over the candidate pairs' primitives (``bound``: :meth:`_pair_bounds`, if known)."""
        armed = self._armed(z, P.dtype)
        bound = jax.lax.stop_gradient(self._pair_bounds(P, p) if bound is None else bound)
        idx = self._candidates(bound, armed)
        I, J = self._pair_index()
        ii, jj = I[idx], J[idx]
        m = self._mask()
        d, w = jax.vmap(self._pair_distances)(_rows(P, ii), m[ii], _rows(P, jj), m[jj])
        gap = d - p["thickness"]
        a = armed[idx][:, None]
        energy = panel_stiffness(p, self._budget(z)) * jnp.sum(a * w * br.barrier(gap, p["dhat"]))
        in_reach = jnp.sum((armed > 0) & (bound < p["thickness"] + p["dhat"]))
        overflow = jnp.maximum(in_reach - idx.shape[0], 0)
        min_gap = jnp.min(jnp.where((a > 0) & (w > 0), gap, jnp.inf))
        return energy, min_gap, overflow, (a, w, gap)

    def _panel_dissipation(self, P, V, z, p):
        """Rayleigh's function ``1/2 c w(d) d_dot^2`` over the primitives within reach
        (``w`` rising from 0 at the reach to 1 at contact): its gradient in the vertex
        velocities ``V`` is the damping force, which only dissipates."""
        def gaps(P):
            return self._panel_terms(P, z, p)[3]

        (a, w, gap), (_, _, gap_dot) = jax.jvp(gaps, (P,), (V,))
        x = jnp.clip(1.0 - gap / p["dhat"], 0.0, 1.0)
        return 0.5 * p["damping"] * jnp.sum(a * w * x * x * (3.0 - 2.0 * x) * gap_dot**2)

    # ------------------------------------------------------------------ the element
    def energy(self, model, ws, z, p):
        if not self.forces:
            return jnp.zeros((), ws.pos.dtype)
        e = self._crease_energy(self.crease_angles(ws, z, p), p, self._budget(z))
        if self.pairs:
            e = e + self._panel_terms(self.vertices(ws, p), z, p)[0]
        return e

    def generalized_force(self, model, ws, z, p):
        return self.evaluate(model, ws, z, p)[0]

    def evaluate(self, model, ws, z, p):
        """The generalized force and the element's state rates, sharing the broad phase.
        The tree creases' barrier acts on their coordinates directly; the cut creases'
        couples and the panels' forces go through the tree's Jacobians, and only while
        one of them is within reach (a deploying fold: rarely)."""
        if not self.forces:
            return jnp.zeros(model.nv, ws.pos.dtype), jnp.zeros(0, ws.pos.dtype)
        theta = self.crease_angles(ws, z, p)
        rates = self.crease_rates(ws, p)
        # dU/dtheta, and the crease damping's -c w theta_dot folded in with its sign
        g = (jax.grad(self._crease_energy)(theta, p, self._budget(z))
             + p["crease_damping"] * self._crease_weight(theta, p) * rates)
        nt = len(self.tree_creases)
        tau = jnp.zeros(model.nv, ws.pos.dtype)
        if nt:   # onto the creases' speeds by a constant product (a scatter-add compiles into a loop)
            onto = _onto(model.nv, np.asarray([c[1] for c in self.tree_creases], int))
            tau = tau - jnp.asarray(onto, ws.pos.dtype) @ g[:nt]
        # (a crease held at flat by its stack sits at +-pi to round-off, where the force is 0)
        active = jnp.any(jnp.abs(theta[nt:]) > jnp.pi + 1e-6 * p["psi_hat"]) if self.cut_creases else \
            jnp.zeros((), bool)
        bound, P = None, None
        touching = jnp.zeros((), bool)
        if self.pairs:
            P = self.vertices(ws, p)
            bound = self._pair_bounds(P, p)
            touching = jnp.any((self._armed(z, P.dtype) > 0) & (bound < p["thickness"] + p["dhat"]))
            active = active | touching

        # Both branches take what they use as operands (cond_any: a sweep's members pay for
        # the exact distances only while some member is within reach).
        def panel_forces(o):
            ws, z, p, bound, P = o
            f = -jax.grad(lambda P: self._panel_terms(P, z, p, bound)[0])(P)
            if self.damped:
                V = self._vertex_velocities(ws, P)
                f = f - jax.grad(lambda V: self._panel_dissipation(P, V, z, p))(V)
            return f

        def through_the_tree(o):
            model, ws, z, p, g, bound, P, touching = o
            # body wrenches [moment; force] about the world origin, summed onto the bodies
            # by constant one-hot products (a scatter-add compiles into a loop on the CPU)
            moment = jnp.zeros((model.n_bodies, 3), ws.pos.dtype)
            force = jnp.zeros((model.n_bodies, 3), ws.pos.dtype)
            if self.cut_creases:  # a couple about the crease: rotating b by +phi turns theta by +phi
                u, _, _, ia, ib = self._cut_geometry(ws, p)
                onto = _onto(model.n_bodies, ia) - _onto(model.n_bodies, ib)
                moment = moment + jnp.asarray(onto, ws.pos.dtype) @ (g[nt:, None] * u)
            if self.pairs:   # the exact distances only while an armed pair is within reach
                f = cond_any(touching, panel_forces, lambda o: jnp.zeros_like(o[4]), (ws, z, p, bound, P))
                # a panel on the world takes its reaction there
                onto = jnp.asarray(_onto(model.n_bodies, np.asarray(self.panel_body)), ws.pos.dtype)
                moment = moment + onto @ jnp.sum(jnp.cross(P, f), 1)
                force = force + onto @ jnp.sum(f, 1)
            F = jnp.concatenate([moment, force], 1)
            return rnea.generalized_forces(model, ws, F)

        if self.cut_creases or self.pairs:
            tau = tau + cond_any(active, through_the_tree, lambda o: jnp.zeros(o[0].nv, o[1].pos.dtype),
                                 (model, ws, z, p, g, bound, P, touching))
        out = [self._cut_rates(ws, p)] if self.cut_creases else []
        if self.pairs:
            out.append(self._arming_rates(bound, p))
        out.append(jnp.zeros(1, ws.pos.dtype))   # the budget is constant
        return tau, jnp.concatenate(out)

    @property
    def limits_steps(self) -> bool:
        return self.forces and bool(self.pairs)

    def step_fraction(self, model, ws0, z0, ws1, p):
        """How much of a step from ``ws0`` to ``ws1`` the panels admit: each armed pair's
        distance to its barrier's reach, plus half the reach, over how far the step moves
        the two panels (the largest displacement of a vertex of each, added), the least
        over the pairs. A step admitted whole therefore carries no pair more than half a
        reach into its barrier, where the step-size control sees the force: no vertex
        jumps through a face unseen, where the distance, unsigned, would be positive
        again on the far side. (Measured between the step's two ends, as IPC's
        conservative advancement measures a linear step; in the world frame, so that a
        motion of the whole structure, which closes no gap, counts too.) Creases need no such limit:
        their barrier is one-sided in the angle (beyond its end it continues as a stiff
        quadratic, which the step's error estimate sees), so a crease resting at flat,
        as a stowed stack's do, does not hold the steps back."""
        out = jnp.asarray(jnp.inf, ws0.pos.dtype)
        if self.pairs:
            ends = jax.tree.map(lambda a, b: jnp.stack([a, b]), ws0, ws1)
            P0, P1 = jax.vmap(self.vertices, (0, None))(ends, p)   # traced once for both ends
            moved = jnp.sqrt(jnp.max(jnp.sum((P1 - P0) ** 2, -1), -1))   # per panel
            bound = self._pair_bounds(P0, p)
            free = jnp.maximum(bound - p["thickness"] - p["dhat"], 0.0) + 0.5 * p["dhat"]
            I, J = self._pair_index()
            closing = moved[I] + moved[J]
            ratio = free / jnp.maximum(closing, jnp.asarray(1e-300, ws0.pos.dtype))
            out = jnp.min(jnp.where(self._armed(z0, P0.dtype) > 0, ratio, jnp.inf))
        return out

    def _arming_rates(self, bound, p):
        """A pair's arming state grows while the pair is out of the barrier's reach."""
        x = jnp.clip((bound - p["thickness"] - p["dhat"]) / (0.5 * p["dhat"]), 0.0, 1.0)
        return ARMING_RATE * x * x * (3.0 - 2.0 * x)

    def _overlaps(self, P, p, bound=None, capacity: int = DETECT_CAPACITY):
        """The detector's exact test: ``(pick, depth)``, the pairs tested (all, or the
        ``DETECT_CAPACITY`` nearest by their lower ``bound``) and the separating-axis depth
        of each, the panels shrunk by ``p["shrink"]`` about their centroids so that shared
        edges and corners do not count."""
        m = self._mask()
        I, J = self._pair_index()
        pick = jnp.arange(len(self.pairs))
        if len(self.pairs) > capacity:   # the pairs that may touch, by a lower bound
            pick = jax.lax.top_k(-(self._pair_bounds(P, p) if bound is None else bound), capacity)[1]
        c = jnp.sum(jnp.where(m[..., None], P, 0.0), 1) / jnp.sum(m, 1).astype(P.dtype)[:, None]
        Ps = c[:, None, :] + (1.0 - p["shrink"]) * (P - c[:, None, :])
        i, j = I[pick], J[pick]
        n = jax.vmap(geo.polygon_normal)(Ps, m)          # once a panel, not once a pair
        return pick, jax.vmap(geo.overlap_depth)(Ps[i], m[i], Ps[j], m[j], n[i], n[j])

    def _primitive_forces(self, z, p, armed, weights, gaps):
        """The barrier's force along each primitive of the candidate pairs, ``kappa a w
        |b'(d)|`` (:meth:`_panel_terms`' last output)."""
        slope = jax.grad(lambda g: jnp.sum(br.barrier(g, p["dhat"])))(gaps)
        return panel_stiffness(p, self._budget(z)) * armed * weights * jnp.abs(slope)

    def detect(self, ws, z, p):
        """The detector's figures, contact on or off: ``(figures, crease angles, vertices,
        pair bounds)`` (the last two ``None`` without pairs): every crease's angle, and the
        deepest overlap of two panels that share no crease, with its pair."""
        out = {}
        theta = self.crease_angles(ws, z, p)
        if theta.shape[0]:
            out["crease_angle"] = theta
        P = bound = None
        if self.pairs:
            P = self.vertices(ws, p)
            bound = self._pair_bounds(P, p)
            if len(self.pairs) > DETECT_CAPACITY:
                out["panel_overlap_unchecked"] = jnp.sum(bound <= 0.0).astype(P.dtype) - DETECT_CAPACITY
            pick, depth = self._overlaps(P, p, bound)
            out["panel_overlap"] = jnp.max(depth)
            out["panel_overlap_pair"] = pick[jnp.argmax(depth)].astype(P.dtype)
        return out, theta, P, bound

    def diagnostics(self, model, ws, z, p):
        # one pass over the panels for the detector and the barrier's figures
        out, theta, P, bound = self.detect(ws, z, p)
        if self.forces:
            energy = jnp.zeros((), ws.pos.dtype)
            out["crease_margin"] = jnp.min(jnp.pi + p["psi_hat"] - jnp.abs(theta)) if theta.shape[0] else \
                jnp.asarray(jnp.inf, ws.pos.dtype)
            active = jnp.zeros((), bool)
            if theta.shape[0]:
                energy, torque = jax.value_and_grad(self._crease_energy)(theta, p, self._budget(z))
                out["crease_torque"] = jnp.max(jnp.abs(torque))
                active = jnp.any(jnp.abs(theta) > jnp.pi + 1e-6 * p["psi_hat"])
            if self.pairs:
                in_reach = jnp.sum((self._armed(z, P.dtype) > 0) & (bound < p["thickness"] + p["dhat"]))
                active = active | (in_reach > 0)
                panel_energy, out["contact_gap"], out["contact_force"] = self._diagnosed_pairs(
                    P, z, p, bound, in_reach)
                energy = energy + panel_energy
                candidates = min(len(self.pairs), self.capacity)   # the forces' overflow
                out["contact_overflow"] = jnp.maximum(in_reach - candidates, 0).astype(ws.pos.dtype)
            out["contact_energy"] = energy
            out["contact_active"] = active.astype(ws.pos.dtype)
        return out

    def _diagnosed_pairs(self, P, z, p, bound, in_reach):
        """Tier B's energy, least gap and largest primitive force at a save point. While
        no armed pair is within the barrier's reach (by its lower ``bound``) the energy and
        force are 0, and the least gap takes the exact distance of the pair nearest by
        its bound alone (exact unless another pair's bound is below it, then that bound):
        with :attr:`nearest_at_saves`, a pattern with more than :data:`DIAGNOSED_PAIRS`
        pairs skips the rest. Otherwise all candidates, as the forces take them
        (``cond_any``: a batch takes them all where any member or save point needs them).
        The branch costs a compile (4x4 map fold: +1.3-1.6 s to a single run's), which a
        sweep's 1,001 save points per member repay (the 4x4 map fold, 16 members: 10.7 ->
        6.7 s of run for +3.6 s of compile); a single run keeps all candidates."""
        def candidates(o):
            P, z, p, bound = o
            energy, gap, _, terms = self._panel_terms(P, z, p, bound)
            return energy, gap, jnp.max(self._primitive_forces(z, p, *terms))

        if not self.nearest_at_saves or len(self.pairs) <= DIAGNOSED_PAIRS:
            return candidates((P, z, p, bound))

        def nearest(o):
            P, z, p, bound = o
            near = jnp.where(self._armed(z, P.dtype) > 0, bound, jnp.inf)
            k = jnp.argmin(near)
            I, J = self._pair_index()
            m = self._mask()
            d, w = self._pair_distances(P[I[k]], m[I[k]], P[J[k]], m[J[k]])
            gap = jnp.where(jnp.isfinite(near[k]), jnp.min(jnp.where(w > 0, d, jnp.inf)), jnp.inf)
            others = jnp.min(jnp.where(jnp.arange(near.shape[0]) == k, jnp.inf, near))
            zero = jnp.zeros((), P.dtype)
            return zero, jnp.minimum(gap, others) - p["thickness"], zero

        return cond_any(in_reach > 0, candidates, nearest, (P, z, p, bound))

    def for_batches(self):
        return dataclasses.replace(self, nearest_at_saves=True) if self.forces else self

    def energy_and_diagnostics(self, model, ws, z, p):
        """The barriers' energy is a diagnostic already (``contact_energy``): one pass."""
        out = self.diagnostics(model, ws, z, p)
        return out.get("contact_energy", jnp.zeros((), ws.pos.dtype)), out

    def panel_fields(self, model, ws, z, p, capacity: int = DETECT_CAPACITY):
        """Per panel, for the viewer's colours: ``gap``, the signed distance to the
        nearest panel it shares no vertex with, less the thickness (negative: the depth
        to which the two pass through each other; inf: no such panel), and with contact
        on ``force``, the Tier B barrier force on it (the sum over its candidate pairs'
        primitives of ``kappa w |b'(d)|``, N). Beyond ``capacity`` pairs (the nearest by a
        lower bound are tested exactly) the rest take their lower bound, so a gap is never
        overstated."""
        dtype = ws.pos.dtype
        n = len(self.panel_names)
        out = {"gap": jnp.full(n, jnp.inf, dtype)}
        if self.forces:
            out["force"] = jnp.zeros(n, dtype)
        if not self.pairs:
            return out
        P = self.vertices(ws, p)
        m = self._mask()
        I, J = self._pair_index()
        bound = self._pair_bounds(P, p)
        pick, depth = self._overlaps(P, p, bound, capacity)
        i, j = I[pick], J[pick]
        # apart, two convex polygons are nearest at a vertex-face or an edge-edge pair;
        # an edge through the other's face is what the overlap depth measures
        d = jnp.min(jax.vmap(self._pair_distances)(P[i], m[i], P[j], m[j])[0], -1)
        exact = jnp.where(depth > 0.0, -depth, d) - p["thickness"]
        gap = (bound - p["thickness"]).at[pick].set(exact)
        out["gap"] = out["gap"].at[I].min(gap).at[J].min(gap)
        if self.forces:
            terms = self._panel_terms(P, z, p, jax.lax.stop_gradient(bound))[3]
            f = jnp.sum(self._primitive_forces(z, p, *terms), -1)
            idx = self._candidates(bound, self._armed(z, dtype))
            out["force"] = out["force"].at[I[idx]].add(f).at[J[idx]].add(f)
        return out

    # ------------------------------------------------------------------ after a run
    def unwrapped(self, theta, valid):
        """Crease angles over the save points, unwrapped in time and put on the branch of
        their start (tree creases: their coordinates'; cut creases: :attr:`cut_folds`)."""
        n = jnp.maximum(jnp.sum(valid) - 1, 0)
        theta = jnp.where(valid[:, None], theta, theta[n][None, :])   # unreached rows: the last value
        s = jnp.unwrap(theta, axis=0)
        nt = len(self.tree_creases)
        start = jnp.concatenate([theta[0, :nt], jnp.asarray(np.asarray(self.cut_folds, float), theta.dtype)])
        return s + 2 * jnp.pi * jnp.round((start - s[0]) / (2 * jnp.pi))[None, :]

    def metrics(self, diagnostics, valid, params):
        out = {}
        if "crease_angle" in diagnostics:
            s = self.unwrapped(diagnostics["crease_angle"], valid)
            worst = jnp.max(jnp.where(valid[:, None], jnp.abs(s), 0.0))
            out["max_crease_angle"] = worst
            out["crease_overfold"] = jnp.maximum(worst - jnp.pi - params["crease_tolerance"], 0.0)
        if "panel_overlap" in diagnostics:
            ov = jnp.max(jnp.where(valid, diagnostics["panel_overlap"], -jnp.inf))
            out["panel_overlap"] = jnp.maximum(ov - params["overlap_tolerance"], 0.0)
        if "contact_gap" in diagnostics:
            out["min_contact_gap"] = jnp.min(jnp.where(valid, diagnostics["contact_gap"], jnp.inf))
        if "crease_margin" in diagnostics:
            out["min_crease_margin"] = jnp.min(jnp.where(valid, diagnostics["crease_margin"], jnp.inf))
        for key, name in (("contact_force", "peak_contact_force"), ("crease_torque", "peak_crease_torque")):
            if key in diagnostics:
                out[name] = jnp.max(jnp.where(valid, diagnostics[key], 0.0))
        if "contact_active" in diagnostics:
            # an event: a save point with a barrier within reach after one without
            touching = valid & (diagnostics["contact_active"] > 0)
            dtype = diagnostics["contact_active"].dtype
            out["contact_events"] = touching[0].astype(dtype) + jnp.sum(touching[1:] & ~touching[:-1]).astype(dtype)
        if "contact_overflow" in diagnostics:
            out["contact_overflow"] = jnp.max(jnp.where(valid, diagnostics["contact_overflow"], 0.0))
        return out

    def _remedy(self, what: str) -> str:
        """What to do about a crease past flat (``what="crease"``) or panels through each
        other (``"panels"``)."""
        if not self.forces:
            return "Rerun with --set contact=1"
        if what == "crease":
            return ("Contact was on: the crease went past its barrier's reach, so the energy rose past the "
                    "barrier's budget (see the energy) or its stiffness is too low (--set contact_kappa)")
        return ("Contact was on: the barrier acts on armed pairs only, and a stack that starts at gap 0 is "
                "armed once its layers separate (docs/contact.md, 'Stow step'), so round-off (float32) can carry "
                "such layers through first; or the energy rose past the barrier's budget (see the energy)")

    def check(self, ts, diagnostics, params):
        ts = np.asarray(ts, float)
        valid = np.isfinite(ts)
        out = []
        if "crease_angle" in diagnostics and valid.any():
            s = np.asarray(self.unwrapped(jnp.asarray(diagnostics["crease_angle"]), jnp.asarray(valid)))
            over = np.where(valid[:, None], np.abs(s), 0.0) - np.pi
            tol = float(params["crease_tolerance"])
            bad = [k for k in range(s.shape[1]) if over[:, k].max() > tol]
            if bad:
                k = max(bad, key=lambda k: over[:, k].max())
                i = int(np.argmax(over[:, k] > tol))
                worst = float(np.degrees(np.abs(s[:, k]).max()))
                past = float(over[:, k].max())   # in rad: a few 1e-4 past flat reads as 180 deg in degrees
                names = ", ".join(self.crease_labels[b] for b in bad)
                out.append({"kind": "crease_overfold", "t": float(ts[i]), "crease": self.crease_labels[k],
                            "angle_deg": worst, "past_flat_rad": past, "creases": [self.crease_labels[b] for b in bad],
                            "message": (f"crease {self.crease_labels[k]} folded past 180 deg at t = {ts[i]:.6g} s "
                                        f"(by up to {past:.3g} rad, to {worst:.7g} deg): its panels pass through "
                                        f"each other (zero-thickness panels meet face to face at +-180 deg); "
                                        f"creases past it: {names}. {self._remedy('crease')}")})
        if "panel_overlap" in diagnostics and valid.any():
            ov = np.where(valid, np.asarray(diagnostics["panel_overlap"], float), -np.inf)
            tol = float(params["overlap_tolerance"])
            if ov.max() > tol:
                i = int(np.argmax(ov > tol))
                k = int(np.argmax(ov))
                pair = self.pair_labels[int(np.asarray(diagnostics["panel_overlap_pair"])[k])]
                first = self.pair_labels[int(np.asarray(diagnostics["panel_overlap_pair"])[i])]
                out.append({"kind": "panel_overlap", "t": float(ts[i]), "panels": first, "depth_m": float(ov[k]),
                            "message": (f"panels {first} pass through each other from t = {ts[i]:.6g} s "
                                        f"(deepest: {pair}, {ov[k]:.3g} m at t = {ts[k]:.6g} s). "
                                        f"{self._remedy('panels')}")})
        if "contact_gap" in diagnostics and valid.any():
            gap = np.where(valid, np.asarray(diagnostics["contact_gap"], float), np.inf)
            floor = br.FLOOR * float(params["dhat"])
            if gap.min() < floor:
                i = int(np.argmin(gap))
                out.append({"kind": "contact_floor", "t": float(ts[i]), "gap_m": float(gap[i]),
                            "message": (f"two panels came within {gap[i]:.3g} m at t = {ts[i]:.6g} s, below the "
                                        f"barrier's floor ({floor:.3g} m), where its guarantee ends: energy was "
                                        f"added (check the energy), or raise --set contact_kappa")})
        if "contact_overflow" in diagnostics and valid.any():
            over = np.where(valid, np.asarray(diagnostics["contact_overflow"], float), 0.0)
            if over.max() > 0:
                i = int(np.argmax(over))
                out.append({"kind": "contact_overflow", "t": float(ts[i]), "pairs": int(over[i]),
                            "message": (f"{int(over[i])} panel pairs within reach were not evaluated at "
                                        f"t = {ts[i]:.6g} s (candidate capacity {self.capacity})")})
        return out

    # ------------------------------------------------------------------ own states
    @property
    def state_names(self) -> tuple:
        if not self.forces:
            return ()
        return (tuple(f"crease_{c[2]}" for c in self.cut_creases)
                + tuple(f"armed_{a}" for a in self.pair_labels) + ("contact_budget",))

    def init_states(self, model, ws, p, energy):
        """The cut creases' angles on their branch, each pair's arming state (1: apart at
        the start, 0: in contact, as the layers of a stack), and the energy budget of the
        default stiffnesses: the structure's energy at the start (``energy``), or the
        number ``p["energy"]`` where one was given (:func:`free_panels`)."""
        if not self.forces:
            return jnp.zeros(0, ws.pos.dtype)
        cut = self.geometric_cut_angles(ws, p)
        folds = jnp.asarray(np.asarray(self.cut_folds, float), ws.pos.dtype) if self.cut_creases else cut
        # at +-pi the geometry cannot tell the side: the declared fold does
        cut = jnp.where(jnp.abs(jnp.abs(cut) - jnp.pi) < 1e-6, jnp.sign(folds) * jnp.pi, cut)
        armed = jnp.zeros(0, ws.pos.dtype)
        if self.pairs:
            bound = self._pair_bounds(self.vertices(ws, p), p)
            armed = (bound >= p["thickness"] + p["dhat"]).astype(ws.pos.dtype)
        budget = energy if self.budget_from_start else p["energy"]
        budget = jnp.maximum(jnp.asarray(budget, ws.pos.dtype), MIN_BUDGET)
        return jnp.concatenate([cut, armed, budget[None]])

    def state_rates(self, model, ws, z, p):
        return self.evaluate(model, ws, z, p)[1]


# ---------------------------------------------------------------------- building


def _onto(n: int, index: np.ndarray) -> np.ndarray:
    """The constant ``(n, len(index))`` matrix that adds item ``k`` onto row ``index[k]``
    (a body, or a speed; an item on the world, ``index < 0``, onto none)."""
    out = np.zeros((n, len(index)))
    k = np.flatnonzero(index >= 0)
    np.add.at(out, (index[k], k), 1.0)
    return out


def _rows(P, idx):
    """``P[idx]`` as a product with a one-hot matrix: its derivative's transpose is a
    product too, where a gather's is a scatter-add that the CPU compiles into a loop
    (the panels are few beside the candidates' primitives, so the product is cheap)."""
    onehot = (idx[:, None] == jnp.arange(P.shape[0], dtype=idx.dtype)[None, :]).astype(P.dtype)
    return (onehot @ P.reshape(P.shape[0], -1)).reshape(idx.shape + P.shape[1:])


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
        if not _convex(v):
            raise ValueError(f"contact: panel {n!r} is not convex; split it into convex panels "
                             f"(or --set contact=0)")
        if options.thickness >= inradius(v):
            raise ValueError(f"contact: thickness {options.thickness:g} m is not below the inradius of panel "
                             f"{n!r} ({inradius(v):.4g} m); thicker plates than that cannot be modelled "
                             f"as offset mid-surfaces")


def start_diagnostics(system, element: PanelContact, params) -> dict:
    """The detector's figures at the system's start state (numpy): every crease's angle,
    and the deepest overlap of two panels and its pair (:meth:`PanelContact.detect`)."""
    return jax.device_get(_start_diagnostics(system, system.elements.index(element), params))


@eqx.filter_jit
def _start_diagnostics(system, index: int, params) -> dict:
    """:func:`start_diagnostics` as one compiled program (op by op, its few hundred small
    operations would each compile on their own: 6-13 s of XLA before fold-2x4 could run)."""
    from ..tree.kinematics import kinematics

    x0 = system.init_state(params)
    q0, qd0 = system.split(x0)
    ws = kinematics(params["model"], q0, qd0)
    z = system.element_states(x0)[index]
    return system.elements[index].detect(ws, z, params["elements"][index])[0]


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


def _convex(v: np.ndarray) -> bool:
    e = np.roll(v, -1, axis=0) - v
    z = np.cross(e, np.roll(e, -1, axis=0))[:, 2]
    return bool(np.all(z >= -1e-12 * np.abs(z).max()) or np.all(z <= 1e-12 * np.abs(z).max()))


def panel_contact(panels: dict, order: tuple, origin: dict, model, tree_edges, cut_creases, hinge_axis,
                  options: ContactOptions, cut_start=None) -> PanelContact:
    """The element of a crease pattern compiled into ``model``: ``panels`` by name,
    ``order`` their bodies' order, ``origin`` each body's origin in the flat layout,
    ``tree_edges`` ``(parent, child, crease)`` of the spanning tree, ``cut_creases`` the
    creases cut into closures, ``hinge_axis(crease, child)`` the oriented crease axis,
    ``cut_start``: each cut crease's angle at the start on its branch (:func:`cut_branches`:
    ``+-pi`` for one folded flat, on the side it opens from; None: its declared fold).
    Raises ValueError naming a panel that is not convex or too thin for the thickness
    (:func:`check_panels`)."""
    check_panels(panels, options)
    names = tuple(order)
    moving = set(model.body_names)
    # a panel on a fixed root is on the world: its outline in world (flat layout) coordinates
    local = {n: np.asarray(panels[n].vertices, float) - (origin[n] if n in moving else 0.0) for n in names}
    kmax = max(len(v) for v in local.values())
    verts = np.stack([np.concatenate([v, np.repeat(v[-1:], kmax - len(v), 0)]) for v in local.values()])
    valid = tuple(tuple(i < len(local[n]) for i in range(kmax)) for n in names)
    flat = [np.asarray(panels[n].vertices, float) for n in names]
    diam = [float(np.max(np.linalg.norm(v[:, None] - v[None], axis=-1))) for v in flat]
    size = float(np.median(diam))
    pairs = tuple((i, j) for i in range(len(names)) for j in range(i + 1, len(names))
                  if not _shares_vertex(flat[i], flat[j], 1e-9 * size))
    centroid = [v.mean(0) for v in local.values()]
    radius = np.array([np.max(np.linalg.norm(v - c, axis=-1)) for v, c in zip(local.values(), centroid)])
    tree = tuple((model.coordinate_names.index(f"theta_{child}"), model.velocity_names.index(f"theta_{child}_dot"),
                  c.label) for _, child, c in tree_edges)
    cut = tuple((model.body_index(c.a), model.body_index(c.b), c.label) for c in cut_creases)
    cut_axis = np.array([hinge_axis(c, panels[c.b]) for c in cut_creases]).reshape(-1, 3)
    dhat = options.dhat if options.dhat is not None else DHAT_RELATIVE * size
    numbers = {
        "vertices": jnp.asarray(verts),
        "radius": jnp.asarray(radius),
        "cut_axis": jnp.asarray(cut_axis),
        "psi_hat": jnp.asarray(options.psi_hat),
        "kappa_scale": jnp.asarray(options.kappa_scale),
        "crease_damping": jnp.asarray(options.crease_damping),
        "dhat": jnp.asarray(dhat),
        "thickness": jnp.asarray(options.thickness),
        "damping": jnp.asarray(options.damping),
        "shrink": jnp.asarray(1e-6),
        "crease_tolerance": jnp.asarray(options.psi_hat if options.forces else CREASE_TOLERANCE),
        "overlap_tolerance": jnp.asarray(OVERLAP_TOLERANCE * size),
    }
    return PanelContact(panel_names=names, panel_body=tuple(model.body_index(n) if n in moving else -1
                                                            for n in names), valid=valid,
                        pairs=pairs, tree_creases=tree, cut_creases=cut,
                        cut_folds=tuple(float(c.fold) for c in cut_creases) if cut_start is None
                        else tuple(float(a) for a in cut_start),
                        forces=bool(options.forces),
                        damped=options.damping > 0, capacity=int(options.capacity), budget_from_start=True,
                        numbers=numbers)


def crease_stiffness(p, budget):
    """Tier A's stiffness, the default rule: the barrier holds ``kappa_scale`` times the
    energy ``budget`` [J] at half its reach."""
    return p["kappa_scale"] * budget / br.half_reach(p["psi_hat"])


def panel_stiffness(p, budget):
    """Tier B's stiffness, by the same rule as :func:`crease_stiffness`."""
    return p["kappa_scale"] * budget / br.half_reach(p["dhat"])


def certified_margin(energy, kappa, reach):
    """The smallest margin a conservative or dissipative motion can reach: the barrier
    ``kappa b`` never holds more than the energy the structure has (``energy``, its
    largest total energy over the run), so ``b(margin) <= energy / kappa``."""
    return br.barrier_inverse(jnp.maximum(energy, 0.0) / kappa, reach)


def certified_margins(element: PanelContact, p, energy: float, budget: float) -> dict:
    """What an energy bound guarantees: with at most ``energy`` [J] in the structure
    (its largest total energy over a run that conserves or dissipates it; hinge springs
    and the barriers hold no negative energy), no crease comes within
    ``certified_crease_margin_rad`` of its barrier's end (``pi + psi_hat``) and no fully
    armed pair of panels closer than ``certified_gap_m`` (thickness apart). The figures
    do not hold for a run driven by torques that add energy."""
    out = {}
    if element.tree_creases or element.cut_creases:
        out["certified_crease_margin_rad"] = float(certified_margin(energy, crease_stiffness(p, budget),
                                                                    p["psi_hat"]))
    if element.pairs:
        out["certified_gap_m"] = float(certified_margin(energy, panel_stiffness(p, budget), p["dhat"]))
    return out


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
    q0, _ = system.split(x0)
    p = element.numbers
    theta0 = np.asarray(_cut_angles(element, model, q0, p))
    folded = np.abs(np.abs(theta0) - np.pi) < 1e-6
    sides = np.sign(np.asarray(element.cut_folds))
    # the dynamics compile only where a crease starts flat (about 1 s of a build)
    qdd = np.asarray(eqx.filter_jit(system.accelerations)(0.0, x0, params)[0]) if folded.any() else 0.0
    scale = np.max(np.abs(qdd))
    if scale > 0:
        h2 = 2e-6 / scale          # moves the fastest coordinate by 1e-6
        theta = np.asarray(_cut_angles(element, model, jnp.asarray(q0) + 0.5 * h2 * jnp.asarray(qdd), p))
        moved = np.abs(np.abs(theta) - np.pi) > 1e-9
        sides = np.where(folded & moved, np.sign(theta), sides)
    # off flat, the nearest quarter turn: within an eighth of a turn of the start, so the
    # unwrapping holds, and the same for nearby starts (the element is static: a sweep over
    # a start fold keeps one program)
    quarter = np.pi / 2 * np.round(theta0 / (np.pi / 2))
    return tuple(float(np.pi * s) if f else float(a) for s, f, a in zip(sides, folded, quarter))


@eqx.filter_jit
def _cut_angles(element: PanelContact, model, q, p):
    from ..tree.kinematics import kinematics

    return element.geometric_cut_angles(kinematics(model, q), p)


def free_panels(model, panels: dict, options: ContactOptions, energy: float) -> PanelContact:
    """The element for loose panels on any tree (no creases between them): ``panels`` maps
    a body name (``"world"`` for a fixed panel) to its convex outline ``(k, 3)`` in that
    body's frame; every two panels are a pair. ``energy``: the energy the motion has to
    spend (the default stiffnesses', module docstring)."""
    options.check()
    names = tuple(panels)
    local = [np.asarray(panels[n], float) for n in names]
    kmax = max(len(v) for v in local)
    verts = np.stack([np.concatenate([v, np.repeat(v[-1:], kmax - len(v), 0)]) for v in local])
    size = float(np.median([np.max(np.linalg.norm(v[:, None] - v[None], axis=-1)) for v in local]))
    dhat = options.dhat if options.dhat is not None else DHAT_RELATIVE * size
    radius = np.array([np.max(np.linalg.norm(v - v.mean(0), axis=-1)) for v in local])
    E = max(float(energy), MIN_BUDGET)
    numbers = {
        "energy": jnp.asarray(E),
        "vertices": jnp.asarray(verts), "radius": jnp.asarray(radius), "cut_axis": jnp.zeros((0, 3)),
        "psi_hat": jnp.asarray(options.psi_hat), "kappa_scale": jnp.asarray(options.kappa_scale),
        "crease_damping": jnp.asarray(options.crease_damping), "dhat": jnp.asarray(dhat),
        "thickness": jnp.asarray(options.thickness),
        "damping": jnp.asarray(options.damping), "shrink": jnp.asarray(1e-6),
        "crease_tolerance": jnp.asarray(CREASE_TOLERANCE), "overlap_tolerance": jnp.asarray(OVERLAP_TOLERANCE * size),
    }
    bodies = tuple(-1 if n == "world" else model.body_index(n) for n in names)
    return PanelContact(panel_names=names, panel_body=bodies,
                        valid=tuple(tuple(i < len(v) for i in range(kmax)) for v in local),
                        pairs=tuple((i, j) for i in range(len(names)) for j in range(i + 1, len(names))),
                        tree_creases=(), cut_creases=(), cut_folds=(), forces=bool(options.forces),
                        damped=options.damping > 0, capacity=int(options.capacity), budget_from_start=False,
                        numbers=numbers)
