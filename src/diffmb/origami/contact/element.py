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
    at ``theta = +-pi`` and pass through each other beyond it. With ``delta = |theta| -
    pi`` past flat and ``psi = psi_hat - delta`` the margin to the barrier's end, ``U_A =
    k delta^3 / 3 + kappa_A b(psi)`` (``delta > 0``), with IPC's clamped log barrier ``b``
    (:mod:`diffmb.math.barrier`) of reach ``psi_hat - delta_0``: zero for ``|theta| <= pi``
    (a folded stack touches without force, so the paper's stowed state at exactly
    ``+-pi`` is admissible), a soft cubic that holds a resting crease's load by
    ``delta_0``, then the log barrier, infinite at ``|theta| = pi + psi_hat``. Cut creases
    carry their unwrapped angle as a state of the element (the geometry gives it modulo
    ``2 pi`` only).
  - **Tier B, panels that share no vertex.** ``U_B = kappa_B sum b(d - xi)`` over the
    vertex-face and edge-edge distances ``d`` of every such pair (IPC's primitives, the
    edge-edge terms mollified for parallel edges), reach ``dhat``, thickness ``xi``: a
    positive gap is guaranteed. A pair that starts in contact (layers of a stowed stack,
    gap 0) is armed as soon as it has separated by ``dhat``: its arming flag, a bit of
    one of the element's states (which have no rate), switches on at the end of the first
    accepted step that finds the pair out of the barrier's reach (:meth:`PanelContact.at_step_end`), so
    arming adds no energy; a broad phase keeps ``capacity`` candidate pairs (the nearest by a
    lower bound on their distance) and counts the rest (``contact_overflow``).

The default stiffnesses need no tuning (:mod:`.rule`); the broad and narrow phases are
:mod:`.pairs`, the report after a run :mod:`.report`, the element's construction :mod:`.build`.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...math import barrier as br, geometry as geo, spatial as sp
from ...math.batch_cond import cond_any
from ...tree import rnea
from ...tree.force_element import ForceElement
from . import pairs as pr, report
from .rule import (
    MIN_BUDGET,
    certified_reach,
    crease_rest_damping,
    crease_rest_stiffness,
    crease_stiffness,
    panel_stiffness,
)

#: Pairs' arming flags held in one state, as the bits of an integer: exact in float32
#: too (integers to 2^24), so that a state of the solver holds them. A flag a state per
#: pair made the 20x20 map fold's state 79,490 long against 810 for its mechanics, and
#: every stage of a step moved it (``docs/benchmarks.md``).
ARMING_BITS = 23
_SHIFTS = np.arange(ARMING_BITS, dtype=np.int32)
_BIT_VALUES = np.exp2(_SHIFTS)


def _bits(flags):
    """0/1 (or boolean) ``flags (m,)`` as ``ceil(m / ARMING_BITS)`` int32 words (summed
    as floats, exact below 2^24: an integer sum of shifted bits took five times as long
    on a CPU: the 10x10 map fold's 4,608 pairs, 20 us against 4)."""
    m = flags.shape[0]
    w = -(-m // ARMING_BITS)
    b = jnp.pad(flags.astype(jnp.float32), (0, w * ARMING_BITS - m)).reshape(w, ARMING_BITS)
    return jnp.sum(b * jnp.asarray(_BIT_VALUES, jnp.float32)[None, :], -1).astype(jnp.int32)


def pack_flags(flags):
    """0/1 ``flags (m,)`` as ``ceil(m / ARMING_BITS)`` integers (in ``flags``' dtype), flag
    ``i`` the bit ``i % ARMING_BITS`` of number ``i // ARMING_BITS`` (exact: integers below
    2^23). A discrete state: no derivative passes."""
    return _bits(jax.lax.stop_gradient(flags)).astype(flags.dtype)


def unpack_flags(words, m: int):
    """The ``m`` 0/1 flags :func:`pack_flags` packed into ``words``."""
    bits = jax.lax.stop_gradient(words).astype(jnp.int32)
    return ((bits[:, None] >> _SHIFTS[None, :]) & 1).reshape(-1)[:m].astype(words.dtype)


#: The detector's pairs per save point: all of them up to this many, else the nearest.
DETECT_CAPACITY = 8192
#: Beyond this many pairs, a sweep member's save point with no armed pair within the
#: barrier's reach takes the exact distance of the nearest pair only
#: (:meth:`PanelContact._diagnosed_pairs`): a sweep of the 4x4 map fold spent half its
#: time on the exact distances of all 78 pairs at each of its 1,001 save points.
DIAGNOSED_PAIRS = 16


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
        margin = jnp.pi + p["psi_hat"] - jnp.abs(theta)
        past = jnp.maximum(p["psi_hat"] - margin, 0.0)   # how far past flat
        soft = jnp.sum(crease_rest_stiffness(p, budget, theta.shape[0]) * past**3) / 3.0
        return soft + jnp.sum(crease_stiffness(p, budget) * br.barrier(margin, certified_reach(p)))

    def _crease_weight(self, theta, p):
        """Where the crease damping acts: 0 up to flat, rising to 1 at the reach."""
        x = jnp.clip((jnp.abs(theta) - jnp.pi) / p["psi_hat"], 0.0, 1.0)
        return x * x * (3.0 - 2.0 * x)

    # ------------------------------------------------------------------ tier B
    def _pair_bounds(self, P, p):
        """A lower bound on every pair's distance (:func:`.pairs.pair_bounds`)."""
        I = np.asarray([q[0] for q in self.pairs], int)
        J = np.asarray([q[1] for q in self.pairs], int)
        return pr.pair_bounds(P, self._mask(), p["radius"], I, J)

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

    @property
    def _arming_words(self) -> int:
        """How many states hold the pairs' arming flags (:data:`ARMING_BITS` a state)."""
        return -(-len(self.pairs) // ARMING_BITS) if self.forces else 0

    def _armed(self, z, dtype):
        """Each pair's arming flag: 1 armed, 0 not yet (:meth:`at_step_end`), read off the
        bits of the element's arming states."""
        if not self.forces:
            return jnp.ones(len(self.pairs), dtype)
        n = len(self.cut_creases)
        return unpack_flags(z[n:n + self._arming_words], len(self.pairs)).astype(dtype)

    def _words(self, z):
        """The arming states as int32 words (:func:`pack_flags`): tested and updated by
        bitwise operations, without unpacking a flag per pair at every stage."""
        n = len(self.cut_creases)
        return jax.lax.stop_gradient(z[n:n + self._arming_words]).astype(jnp.int32)

    def armed_pairs(self, z):
        """Each pair's arming flag (0 or 1) in the element's states ``z``, contact on."""
        return self._armed(z, z.dtype)

    def _budget(self, z):
        """The energy the default stiffnesses hold at half reach (the last own state)."""
        return z[-1]

    def _panel_terms(self, P, z, p, bound=None):
        """Tier B at vertices ``P``: ``(energy, min gap, overflow, (armed, weights, gaps))``
        over the candidate pairs' primitives (``bound``: :meth:`_pair_bounds`, if known)."""
        armed = self._armed(z, P.dtype)
        bound = jax.lax.stop_gradient(self._pair_bounds(P, p) if bound is None else bound)
        idx = self._candidates(bound, armed)
        I, J = self._pair_index()
        ii, jj = I[idx], J[idx]
        m = self._mask()
        d, w = pr.pair_distances(pr.rows(P, ii), m[ii], pr.rows(P, jj), m[jj])
        gap = d - p["thickness"]
        a = armed[idx][:, None]
        energy = panel_stiffness(p, self._budget(z)) * jnp.sum(a * w * br.barrier(gap, p["dhat"]))
        in_reach = jnp.sum((armed > 0) & (bound < p["thickness"] + p["dhat"]))
        overflow = jnp.maximum(in_reach - idx.shape[0], 0)
        min_gap = jnp.min(jnp.where((a > 0) & (w > 0), gap, jnp.inf))
        return energy, min_gap, overflow, (a, w, gap)

    def _panel_wrenches(self, ws, P, z, p, bound):
        """Tier B's wrench on every panel, ``(moment, force)`` about the world origin,
        ``(n_panels, 3)`` each: the barrier's push ``-kappa a w b'(d)`` of each candidate
        pair's primitive along its nearest points' direction, at those points
        (:func:`.pairs.pair_primitives`; by the envelope theorem the exact gradient of
        :meth:`_panel_terms`' energy for rigid panels), the couples of the mollified
        edge-edge weights, and with ``damped`` Rayleigh's ``1/2 c w(d) d_dot^2`` (``w`` rising
        from 0 at the reach to 1 at contact), whose force only dissipates."""
        dtype = P.dtype
        armed = self._armed(z, dtype)
        idx = self._candidates(bound, armed)
        I, J = self._pair_index()
        ii, jj = I[idx], J[idx]
        m = self._mask()
        Pi, Pj = pr.rows(P, ii), pr.rows(P, jj)
        d, w, ci, cj, couple = pr.pair_primitives(Pi, m[ii], Pj, m[jj])
        gap = d - p["thickness"]
        a = armed[idx][:, None]
        kappa = panel_stiffness(p, self._budget(z))
        b, slope = jax.jvp(lambda g: br.barrier(g, p["dhat"]), (gap,), (jnp.ones_like(gap),))
        u = (ci - cj) / jnp.where(d > 0.0, d, 1.0)[..., None]
        push = -kappa * a * w * slope                       # >= 0: panel i along u, j against it
        if self.damped:
            body = np.asarray(self.panel_body)
            vel = jnp.where((body < 0)[:, None], 0.0, ws.vel[np.maximum(body, 0)])
            at = lambda v, c: v[:, None, 3:] + jnp.cross(v[:, None, :3], c)   # a body point's velocity
            gap_dot = jnp.sum(u * (at(pr.rows(vel, ii), ci) - at(pr.rows(vel, jj), cj)), -1)
            x = jnp.clip(1.0 - gap / p["dhat"], 0.0, 1.0)
            push = push - p["damping"] * a * w * x * x * (3.0 - 2.0 * x) * gap_dot
        F = push[..., None] * u
        fi = jnp.sum(F, 1)
        # the edge-edge weights turn with the edges: an internal couple
        turn = jnp.sum((kappa * a * b)[:, -couple.shape[1]:, None] * couple, 1)
        mi = jnp.sum(jnp.cross(ci, F), 1) + turn
        mj = -jnp.sum(jnp.cross(cj, F), 1) - turn
        fj = -fi
        # onto the panels by one-hot products (a scatter-add is a loop on a CPU)
        n = len(self.panel_names)
        hot = lambda k: (k[:, None] == jnp.arange(n, dtype=k.dtype)[None, :]).astype(dtype)
        Hi, Hj = hot(ii), hot(jj)
        return Hi.T @ mi + Hj.T @ mj, Hi.T @ fi + Hj.T @ fj

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
             + (p["crease_damping"] * self._crease_weight(theta, p)
                + crease_rest_damping(p, self._budget(z), jnp.abs(theta) - jnp.pi)) * rates)
        nt = len(self.tree_creases)
        tau = jnp.zeros(model.nv, ws.pos.dtype)
        if nt:   # onto the creases' speeds by a constant product (a scatter-add compiles into a loop)
            onto = pr.onto(model.nv, np.asarray([c[1] for c in self.tree_creases], int))
            tau = tau - jnp.asarray(onto, ws.pos.dtype) @ g[:nt]
        # (a crease held at flat by its stack sits at +-pi to round-off, where the force is 0)
        active = jnp.any(jnp.abs(theta[nt:]) > jnp.pi + 1e-6 * p["psi_hat"]) if self.cut_creases else \
            jnp.zeros((), bool)
        bound, P = None, None
        touching = jnp.zeros((), bool)
        if self.pairs:
            P = self.vertices(ws, p)
            words = self._words(z)

            # the broad phase only once a pair is armed: a stowed stack's layers lie in
            # contact, unarmed, through the first second of a map fold's deployment
            bound, touching = self._near(P, words, p)
            active = active | touching

        # Both branches take what they use as operands (cond_any: a sweep's members pay for
        # the exact distances only while some member is within reach).
        def panel_wrenches(o):
            ws, z, p, bound, P = o
            return self._panel_wrenches(ws, P, z, p, bound)

        def through_the_tree(o):
            model, ws, z, p, g, bound, P, touching = o
            # body wrenches [moment; force] about the world origin, summed onto the bodies
            # by constant one-hot products (a scatter-add compiles into a loop on the CPU)
            moment = jnp.zeros((model.n_bodies, 3), ws.pos.dtype)
            force = jnp.zeros((model.n_bodies, 3), ws.pos.dtype)
            if self.cut_creases:  # a couple about the crease: rotating b by +phi turns theta by +phi
                u, _, _, ia, ib = self._cut_geometry(ws, p)
                onto = pr.onto(model.n_bodies, ia) - pr.onto(model.n_bodies, ib)
                moment = moment + jnp.asarray(onto, ws.pos.dtype) @ (g[nt:, None] * u)
            if self.pairs:   # the exact distances only while an armed pair is within reach
                onto = jnp.asarray(pr.onto(model.n_bodies, np.asarray(self.panel_body)), ws.pos.dtype)
                zero = lambda o: (jnp.zeros((len(self.panel_names), 3), o[4].dtype),) * 2
                pm, pf = cond_any(touching, panel_wrenches, zero, (ws, z, p, bound, P))
                # a panel on the world takes its reaction there
                moment = moment + onto @ pm
                force = force + onto @ pf
            F = jnp.concatenate([moment, force], 1)
            return rnea.generalized_forces(model, ws, F)

        if self.cut_creases or self.pairs:
            tau = tau + cond_any(active, through_the_tree, lambda o: jnp.zeros(o[0].nv, o[1].pos.dtype),
                                 (model, ws, z, p, g, bound, P, touching))
        out = [self._cut_rates(ws, p)] if self.cut_creases else []
        if self.pairs:
            out.append(jnp.zeros(self._arming_words, ws.pos.dtype))   # arming switches at step ends
        out.append(jnp.zeros(1, ws.pos.dtype))   # the budget is constant
        return tau, jnp.concatenate(out)

    @property
    def limits_steps(self) -> bool:
        return self.forces and bool(self.pairs)

    def limits_steps_at(self, z0, p):
        """Only an armed pair limits a step (:meth:`step_fraction` is ``inf`` without one)."""
        return jnp.any(self._words(z0) > 0) if self.pairs else jnp.asarray(False)

    def step_fraction(self, plan0, plan1, z0, p):
        """How much of a step the panels admit, from the plans made at its two ends
        (:meth:`step_end`: the vertices and pair bounds there): each armed pair's
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
        as a stowed stack's do, does not hold the steps back. The plans' vertices and
        bounds carry their derivatives (a limited step ends where the geometry says, as
        an event would); no forward kinematics of its own (the step's plans have it)."""
        if not self.pairs:
            return jnp.asarray(jnp.inf, z0.dtype)
        P0, P1 = plan0["vertices"], plan1["vertices"]
        # square roots and quotients kept off 0, where their derivatives are not finite
        # (a step-size controller differentiates the fraction; a panel that has not
        # moved has a zero displacement)
        moved2 = jnp.max(jnp.sum((P1 - P0) ** 2, -1), -1)   # per panel
        moved = jnp.where(moved2 > 0.0, jnp.sqrt(jnp.where(moved2 > 0.0, moved2, 1.0)), 0.0)
        free = jnp.maximum(plan0["bound"] - p["thickness"] - p["dhat"], 0.0) + 0.5 * p["dhat"]
        I, J = self._pair_index()
        closing = moved[I] + moved[J]
        apart = closing > 0.0
        ratio = jnp.where(apart, free / jnp.where(apart, closing, 1.0), jnp.inf)
        return jnp.min(jnp.where(self._armed(z0, P0.dtype) > 0, ratio, jnp.inf))

    @property
    def switches_at_step_end(self) -> bool:
        return self.forces and bool(self.pairs)

    def _apart(self, ws, p):
        """Each pair out of the barrier's reach (its lower bound at least ``thickness +
        dhat``): True. Such a pair is armed, at the start and at a step's end."""
        bound = self._pair_bounds(self.vertices(ws, p), p)
        return bound >= p["thickness"] + p["dhat"]

    @property
    def plans_steps(self) -> bool:
        return self.forces and bool(self.pairs)

    def _moved_bounds(self, P, plan):
        """Every pair's distance bound at vertices ``P``, from the step's plan (its start's
        vertices and bounds, :meth:`step_end`): the start's bound less the largest
        displacement of a vertex of each panel (a rigid panel's points move no farther
        than its farthest vertex, so a distance shrinks by no more than the two panels'
        largest vertex displacements). Within a step, where panels move little against
        the barrier's reach, nearly as sharp as the bound formed there, for a subtraction
        and a gather per pair instead of the bound's tables at every stage."""
        P0, bound0 = jax.lax.stop_gradient((plan["vertices"], plan["bound"]))   # read to decide
        moved2 = jnp.max(jnp.sum((jax.lax.stop_gradient(P) - P0) ** 2, -1), -1)
        moved = jnp.sqrt(jnp.maximum(moved2, geo.TINY))
        I, J = self._pair_index()
        return bound0 - moved[I] - moved[J]

    def _near(self, P, words, p):
        """``(bounds, whether an armed pair is within reach)`` at a stage (``inf`` and False
        while no pair is armed). With a made plan, its bounds first
        (:meth:`_moved_bounds`); the stage forms its own only where they put an armed pair
        within reach, and its own decide (a pair armed at the step's end lies just beyond
        the reach, where the plan's bound, less any motion, puts it within: by the plan
        alone, a batch whose members arm pairs at different steps took the exact
        distances at nearly every step, and a 16-member sweep of the 4x4 map fold ran at
        0.38 of the sweep without contact instead of 0.55). Two ``cond_any`` in turn,
        the costlier branch taken: in a batch it runs, for every member, only where some
        member needs it."""
        def own(o):
            P, words, p, _ = o
            bound = self._pair_bounds(P, p)
            return bound, jnp.any((words & _bits(bound < p["thickness"] + p["dhat"])) != 0)

        def far(o):
            return jnp.full(len(self.pairs), jnp.inf, o[0].dtype), jnp.zeros((), bool)

        plan = p.get("step_plan")
        if plan is None:
            return cond_any(jnp.any(words > 0), own, far, (P, words, p, None))

        def planned(o):
            P, words, p = o
            moved = self._moved_bounds(P, p["step_plan"])
            doubt = jnp.any((words & _bits(moved < p["thickness"] + p["dhat"])) != 0)
            return moved, ~p["step_plan"]["made"] | doubt

        # (branches take all they read as operands: a traced value closed over is an
        # error in cond_any's batch rule)
        moved, doubt = cond_any(jnp.any(words > 0), planned, far, (P, words, p))
        return cond_any(doubt, own, lambda o: (o[3], jnp.zeros((), bool)), (P, words, p, moved))

    def blank_plan(self, dtype):
        k = len(self.valid[0])
        return {"vertices": jnp.zeros((len(self.panel_names), k, 3), dtype),
                "bound": jnp.zeros(len(self.pairs), dtype), "made": jnp.asarray(False)}

    def step_end(self, model, ws, z, p):
        """A pair not yet armed is armed at the end of an accepted step that finds it out of
        the barrier's reach (its lower bound at least ``thickness + dhat`` apart), where its
        barrier is zero: arming adds no energy. A jump, not a rate: an arming state that
        grew (at 1e3 /s while the pair was out of reach) held Dopri5 to short steps where
        the broad phase's bound has a kink, and relaxing its error control let a save
        point's interpolation arm a stacked pair at gap 0 (``docs/benchmarks.md``). The
        same bounds, with the vertices, are the next step's plan (:meth:`_moved_bounds`):
        one broad phase a step, not one a stage."""
        n, w = len(self.cut_creases), self._arming_words
        # (differentiable: the step check reads them, :meth:`step_fraction`; the stages
        # read them only to decide)
        P = self.vertices(ws, p)
        bound = self._pair_bounds(P, p)
        words = self._words(z) | _bits(jax.lax.stop_gradient(bound) >= p["thickness"] + p["dhat"])
        plan = {"vertices": P, "bound": bound, "made": jnp.asarray(True)}
        return jnp.concatenate([z[:n], words.astype(z.dtype), z[n + w:]]), plan

    def at_step_end(self, model, ws, z, p):
        return self.step_end(model, ws, z, p)[0]

    def _overlaps(self, P, p, bound=None, capacity: int = DETECT_CAPACITY):
        """The detector's exact test over the pairs (:func:`.pairs.overlaps`)."""
        I, J = self._pair_index()
        bound = self._pair_bounds(P, p) if bound is None and len(self.pairs) > capacity else bound
        return pr.overlaps(P, self._mask(), I, J, p["shrink"], bound, capacity)

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

    def start_report(self, ws, z, p) -> dict:
        return self.detect(ws, z, p)[0]

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
            d, w = pr.pair_distances(P[I[k]], m[I[k]], P[J[k]], m[J[k]])
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
        d = jnp.min(pr.pair_distances(P[i], m[i], P[j], m[j])[0], -1)
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
        return report.unwrapped_program(self, theta, valid)

    def metrics(self, diagnostics, valid, params):
        return report.metrics(self, diagnostics, valid, params)

    def check(self, ts, diagnostics, params):
        return report.check(self, ts, diagnostics, params)

    def summary(self, diagnostics, valid, params, z0):
        """:meth:`metrics` and the certified margins of a run, one program (:func:`.report.summary`)."""
        return report.summary(self, diagnostics, valid, params, z0)

    # ------------------------------------------------------------------ own states
    @property
    def state_names(self) -> tuple:
        if not self.forces:
            return ()
        return (tuple(f"crease_{c[2]}" for c in self.cut_creases)
                + tuple(f"contact_arming_{k}" for k in range(self._arming_words)) + ("contact_budget",))

    @property
    def unweighted_states(self) -> tuple:
        """All of them. The arming flags and the energy budget have no rate. The cut
        creases' angles only pick each crease's branch (:meth:`crease_angles` rounds their
        difference from the geometry to whole turns), so an error far below pi does not
        matter: weighed, they took fold-2x4's README run 233 steps instead of 194 (190
        without contact)."""
        return tuple(range(len(self.state_names)))

    def init_states(self, model, ws, p, energy):
        """The cut creases' angles on their branch, the pairs' arming flags (1: apart at
        the start, 0: in contact, as the layers of a stack; :func:`pack_flags`), and the energy budget of the
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
            armed = _bits(self._apart(ws, p)).astype(ws.pos.dtype)
        budget = energy if self.budget_from_start else p["energy"]
        budget = jnp.maximum(jnp.asarray(budget, ws.pos.dtype), MIN_BUDGET)
        return jnp.concatenate([cut, armed, budget[None]])

    def state_rates(self, model, ws, z, p):
        return self.evaluate(model, ws, z, p)[1]
