"""Force elements: force models of a tree beyond its joints' springs and dampers.

A :class:`ForceElement` adds generalized forces to a :class:`~diffmb.system.TreeSystem`
that depend on the bodies' poses and velocities, read from the evaluation's kinematics
workspace (:mod:`diffmb.tree.kinematics`): panel contact (:mod:`diffmb.origami.contact`).
Like everything else in diffmb its structure is static and its numbers are parameters
(``params["elements"][k]``, the element's :meth:`ForceElement.default_params`), so new
numbers never recompile and ``jax.grad`` reaches them.

An element that derives from a potential reports it (:meth:`ForceElement.energy`): the
system adds it to the energy it conserves. An element may carry states of its own,
integrated with the tree's (``x = [q; qd; z_1; ...]``, :meth:`ForceElement.state_rates`)
and left alone by the projection: panel contact keeps the unwrapped angle of every cut
crease, whose branch its geometry alone cannot tell.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp


class ForceElement(eqx.Module):
    """Abstract base (see module docstring). ``ws``: the kinematics workspace of the state
    (with velocities); ``z``: the element's own states (empty when it has none);
    ``params``: its numbers."""

    @abc.abstractmethod
    def default_params(self):
        """The element's numbers (a pytree of arrays)."""

    @property
    def applies_forces(self) -> bool:
        """Whether the element acts on the motion (a detector that only reports does not:
        the system's equations are then exactly those without it)."""
        return True

    @abc.abstractmethod
    def generalized_force(self, model, ws, z, params):
        """``tau (nv,)``: the element's generalized force (public joint order)."""

    def energy(self, model, ws, z, params):
        """The potential the element's force derives from (0: it has none)."""
        return jnp.zeros((), ws.pos.dtype)

    def diagnostics(self, model, ws, z, params) -> dict:
        """Quantities recorded at every save point (names distinct from the system's)."""
        return {}

    def start_report(self, ws, z, params) -> dict:
        """What the element checks at the start state before a run (panel contact: the
        crease angles and the deepest panel overlap), computed in the same program as the
        start state itself (:meth:`~diffmb.system.TreeSystem.start`). ``{}``: nothing."""
        return {}

    @property
    def state_names(self) -> tuple:
        """Names of the element's own states (``()``: none)."""
        return ()

    @property
    def unweighted_states(self) -> tuple:
        """Indices of the own states the step-size control's error norm leaves out: those
        whose rate is always zero (switched only at step ends, or constant), which carry
        no integration error (averaged in, their zeros loosen the tolerance by the square
        root of their share), and those whose error does not matter to the motion.
        ``()`` by default."""
        return ()

    def init_states(self, model, ws, params, energy):
        """The element's states at the initial state ``ws``; ``energy``: the structure's
        energy there (kinetic and potential, the elements' own excluded)."""
        return jnp.zeros(0, ws.pos.dtype)

    def state_rates(self, model, ws, z, params):
        """``dz/dt``."""
        return jnp.zeros(0, ws.pos.dtype)

    @property
    def switches_at_step_end(self) -> bool:
        """Whether :meth:`at_step_end` changes the element's states (False by default)."""
        return False

    def at_step_end(self, model, ws, z, params):
        """The element's states after an accepted step (``ws``: the step end's kinematics,
        positions only). A state that switches (contact's arming) jumps here instead of
        evolving: its rate is zero, so a step's interpolation and its error estimate hold
        it constant, and the jump is exact. ``z`` by default."""
        return z

    @property
    def plans_steps(self) -> bool:
        """Whether the element's stages read a plan made once a step (:meth:`step_end`)."""
        return False

    def step_end(self, model, ws, z, params):
        """``(own states after an accepted step, the next step's plan)`` at the step end's
        kinematics ``ws`` (positions only): :meth:`at_step_end`, and with
        :attr:`plans_steps` a pytree that every stage of the next step finds in its
        parameters as ``"step_plan"`` (where a solver makes one; elsewhere it is absent),
        so that what does not change within a step is computed once (contact: the
        panels' distance bounds). A run's first step reads the plan made here at its start
        state (:meth:`~diffmb.system.System.start_plan`)."""
        return self.at_step_end(model, ws, z, params), None

    def blank_plan(self, dtype):
        """A plan not made: :meth:`step_end`'s structure, saying so (the stages then compute
        what they need; a counted loop's save interval starts with it)."""
        return None

    @property
    def limits_steps(self) -> bool:
        """Whether :meth:`step_fraction` bounds the steps of an adaptive solver (an element
        that does plans its steps too, :attr:`plans_steps`: the fraction reads the plans
        made at a step's two ends)."""
        return False

    def limits_steps_at(self, z0, params):
        """Whether :meth:`step_fraction` may limit a step from own states ``z0`` (a traced
        bool; a system skips the step check while no element's does). ``True`` by default."""
        return jnp.asarray(True)

    def step_fraction(self, plan0, plan1, z0, params):
        """How much of a step the element admits, from the plans :meth:`step_end` made at
        its start (``plan0``, own states ``z0``) and at its candidate end (``plan1``): at
        least 1 admits it whole; below 1, that fraction of it, so that no step jumps over
        the element's forces (contact: no step carries two panels together by more than
        their distance to the barrier's reach). ``inf`` by default."""
        return jnp.asarray(jnp.inf, z0.dtype)

    def evaluate(self, model, ws, z, params):
        """``(generalized force, dz/dt)`` together (an element may share work between them)."""
        return self.generalized_force(model, ws, z, params), self.state_rates(model, ws, z, params)

    def energy_and_diagnostics(self, model, ws, z, params):
        """``(energy, diagnostics)`` together, for the save points (an element may share
        work between them)."""
        return self.energy(model, ws, z, params), self.diagnostics(model, ws, z, params)

    def for_batches(self) -> "ForceElement":
        """The element as a sweep's members compute it (their save points' diagnostics
        may take a branch a single run's compile would not pay for); itself by default."""
        return self

    def metrics(self, diagnostics: dict, valid, params) -> dict:
        """Scalars a sweep member reports from its save points' :meth:`diagnostics`
        (traced; ``valid`` the save points the run reached). A metric named in
        :data:`SUSPECT_METRICS` above 0 makes a run that reached its end ``suspect``."""
        return {}

    def check(self, ts, diagnostics: dict, params) -> list:
        """Warnings about a finished run (``{"kind", "t", "message", ...}``), as
        :func:`diffmb.simulation.health.check` makes them."""
        return []


#: Metrics (:meth:`ForceElement.metrics`) whose positive value makes a run ``suspect``: a
#: state that cannot happen (panels through each other).
SUSPECT_METRICS = ("crease_overfold", "panel_overlap", "contact_overflow")
