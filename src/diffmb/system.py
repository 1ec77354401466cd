"""The System contract, and :class:`TreeSystem` for open trees of rigid bodies.

Every formulation in diffmb compiles down to a :class:`System`. The contract is the set
of public members declared on :class:`System` below, abstract or with a default; nothing
outside it is read by ``simulate`` (:mod:`diffmb.simulation.integrate`) or by the design tools,
sensors and the viewer. ``docs/architecture.md`` tabulates the same members, and
``tests/test_system_contract.py`` keeps the table and the class equal.

Static structure lives in the System's static fields; every number lives in ``params``,
so new numbers never recompile and ``jax.grad`` w.r.t. ``params`` differentiates the whole
run.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .closures import constraint_solve, dynamics as cs, nodes as cl
from .math import spatial as sp
from .math.batch_cond import cond_any
from .math.tracing import outside_any_trace
from .tree import aba, api, crba, joints as jt, rnea
from .tree.body_frames import BodyFrames, from_kinematics
from .tree.kinematics import Kinematics, kinematics, poses as body_poses
from .tree.model import Model

#: Trees with at most this many velocity coordinates use CRBA + Cholesky by default, larger
#: ones the ABA. Measured (one state, revolute chain, 2-core CPU): CRBA + Cholesky 11 / 49
#: / 208 us against the ABA's 20 / 75 / 161 us at 16 / 64 / 128 bodies.
DENSE_MAX_NV = 96

#: The ``closure_rank`` diagnostic (an eigenvalue decomposition of size ``nv`` per sampled
#: save point) is reported for trees up to this many velocity coordinates; above, it
#: would cost more than the simulation (10 ms per point at ``nv = 405``).
RANK_DIAGNOSTIC_MAX_NV = 200


class System(eqx.Module):
    """Abstract base of every formulation: the contract (see module docstring).

    Two members are plain values a formulation may keep as fields: ``stabilization``
    (one of :data:`STABILIZATIONS`, ``"none"`` unless the System has constraints it
    stabilizes) and ``body_names`` (the bodies :meth:`body_frames` reports, ``()`` when
    the System reports none)."""

    stabilization: ClassVar[str] = "none"
    body_names: ClassVar[tuple] = ()

    @abc.abstractmethod
    def default_params(self):
        """The system's numeric parameters (a pytree)."""

    @abc.abstractmethod
    def init_state(self, params):
        """Initial state ``x0`` as a flat array."""

    def vector_field(self, t, x, params):
        """``dx/dt``: :meth:`state_derivative` through one inner jit per structure. Solvers trace
        the vector field several times (stage loop, checkpointing, dense output); the jit
        traces the dynamics once, so every formulation compiles its equations once."""
        return _jitted_state_derivative(self, t, x, params)

    @abc.abstractmethod
    def state_derivative(self, t, x, params):
        """``dx/dt``, the equations of motion: what a formulation implements."""

    def project(self, x, params):
        """Post-step correction onto the state manifold; identity unless overridden."""
        return x

    def project_interpolated(self, x, params):
        """:meth:`project` for a state already on the manifold to an adaptive solver's
        tolerance (a save point inside a step, from the dense output between two projected
        step ends): a formulation may correct it with fewer iterations. :meth:`project`
        unless overridden."""
        return self.project(x, params)

    @property
    def has_projection(self) -> bool:
        """Whether :meth:`project` may change the state (lets solvers skip it)."""
        return type(self).project is not System.project

    def diagnostics(self, x, params) -> dict:
        """Quantities reported at every save point (energy, momentum, ...)."""
        return {}

    def sampled_diagnostics(self, x, params) -> dict:
        """Costly quantities reported at a sample of the save points only (at most
        :data:`~diffmb.simulation.integrate.SAMPLED_POINTS`, evenly spaced; NaN between), such as the
        closure rank, an eigenvalue decomposition per point."""
        return {}

    @property
    @abc.abstractmethod
    def state_names(self) -> tuple:
        """One name per entry of the state vector."""

    @property
    def coordinate_names(self) -> tuple:
        return self.state_names

    def split(self, x):
        """``(coordinates, speeds)``: the position-level part of the state (one entry per
        ``coordinate_names``) and as many speeds after it, in every formulation; what a
        formulation keeps beyond them (a clock, the work of forces) follows."""
        n = len(self.coordinate_names)
        return x[:n], x[n:2 * n]

    @property
    def coordinate_roles(self) -> dict:
        """Roles the design tools read (time to flat, deployment and vibration losses,
        default data columns, peak hub rate), declared by the system's builder or derived
        from its structure, never guessed from names: ``{"hinge": coordinate names of the
        hinge angles, "hub_rate": the three state names of the hub's body angular rate,
        "hub_attitude": the three coordinate names of the hub's attitude MRPs, "elastic":
        coordinate names of elastic (modal) amplitudes, "position": coordinate names of
        Cartesian positions}``; a role not declared is absent. The per-hinge arrays of a
        system's hinge models (``params["forcing"][model][field]``) follow the ``hinge``
        order."""
        return {}

    def body_frames(self, x, params) -> BodyFrames:
        """Every body's pose and rates at state ``x``, in ``body_names`` order
        (:class:`~diffmb.tree.body_frames.BodyFrames`): what sensors and the viewer read."""
        raise ValueError(f"{type(self).__name__} has no body frames: its body_names is empty")

    @property
    def tree_models(self) -> tuple:
        """The rigid-body tree :class:`~diffmb.tree.model.Model` s the System is assembled
        from, in ``body_names`` order (their geometry and visuals), or ``()``."""
        return ()

    def violation(self, x, params) -> dict:
        """Constraint violation ``{"position": ..., "velocity": ...}``; empty when unconstrained."""
        return {}

    def jump_times(self, params):
        """Times where :meth:`vector_field` is discontinuous in ``t`` (a 1-D array), or
        ``None``. Adaptive solvers then end a step just before each and start the next just
        after, so no step straddles a jump: the run is cheaper (no rejected steps homing in
        on it) and its parameter gradients are those of the true solution (a straddling step
        differentiates a local error the controller cannot see)."""
        return None

    @property
    def limits_steps(self) -> bool:
        """Whether :meth:`step_fraction` bounds an adaptive solver's steps (False by
        default; a system whose steps are limited plans them, :attr:`plans_steps`)."""
        return False

    @property
    def plans_steps(self) -> bool:
        """Whether a step's stages read a plan made at its start (:meth:`step_plan`):
        False by default."""
        return False

    def step_plan(self, params):
        """A plan not made yet (:meth:`planned` parameters; ``None`` by default), with which
        a step's stages compute for themselves what a plan would give them. Each step's
        end makes the next step's plan (:meth:`project_and_plan`): what does not change
        within a step is computed once a step instead of once a stage (contact: the
        panels' distance bounds); the first step reads :meth:`start_plan`'s."""
        return None

    def start_plan(self, x, params):
        """The plan made at the state ``x``, which a run's first step reads (``None`` by
        default)."""
        return None

    def start_and_plan(self, params):
        """``(x0, plan)``: :meth:`init_state` and :meth:`start_plan` there."""
        x0 = self.init_state(params)
        return x0, self.start_plan(x0, params)

    def planned(self, params, plan):
        """``params`` carrying ``plan`` (:meth:`step_plan`) to a step's stages."""
        return params

    def plan_of(self, params):
        """The plan that :meth:`planned` parameters carry (``None`` by default)."""
        return None

    def project_and_plan(self, x, params):
        """:meth:`project` at a step's end, and the next step's plan there."""
        return self.project(x, params), self.step_plan(params)

    def step_fraction(self, plan0, plan1, x0, params):
        """How much of an adaptive solver's step from ``x0`` may be taken, from the plans
        made at its start (``plan0``) and at its candidate end (``plan1``,
        :meth:`project_and_plan`): at least 1, all of it; below 1, the step is rejected
        and retried at that fraction of its length. A contact barrier is invisible to the
        step-size control until a step lands inside its reach, so a long step through
        free flight could jump over it (a contact element admits no step that carries two
        panels together by more than their distance to the barrier's reach). ``inf`` by
        default."""
        return jnp.asarray(jnp.inf, x0.dtype)


#: Constraint stabilization, one vocabulary for every formulation (each accepts the
#: subset that applies to it): ``baumgarte`` feeds the violation back into the
#: acceleration-level constraint with gains ``a``, ``b`` (params ``["baumgarte"]``);
#: ``projection`` corrects positions and velocities onto the constraint manifold after
#: each step (the tensegrity formulation's direct correction).
STABILIZATIONS = ("none", "baumgarte", "projection")


#: The coordinate roles a System may declare (see :attr:`System.coordinate_roles`).
ROLES = ("hinge", "hub_rate", "hub_attitude", "elastic", "position")


def clock_entry(on: bool, value: float, dtype) -> list:
    """The mission-clock entry a System appends to its state (value 0) and to its rate
    (value 1) when it carries one (``on``), else nothing: ``[x; clock]``, named
    :data:`CLOCK_NAMES`, so that time-dependent forcing reads time from the state."""
    return [jnp.full(1, value, dtype)] if on else []


#: The state names of the clock entry (see :func:`clock_entry`).
CLOCK_NAMES = ("clock",)


def declare_roles(system, roles) -> tuple:
    """``roles`` (a dict, see :attr:`System.coordinate_roles`) checked against the
    system's names, as the hashable tuple a System stores."""
    out = []
    for role, names in (roles or {}).items():
        if role not in ROLES:
            raise ValueError(f"roles: unknown role {role!r}; expected one of {list(ROLES)}")
        names = tuple(names)
        where = "state" if role == "hub_rate" else "coordinate"
        known = system.state_names if role == "hub_rate" else system.coordinate_names
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"roles: {role} names {missing} are not in the system's {where} names")
        if role in ("hub_rate", "hub_attitude") and len(names) != 3:
            raise ValueError(f"roles: {role} takes three names, got {names}")
        out.append((role, names))
    return tuple(out)


def check_stabilization(name, allowed=STABILIZATIONS) -> str:
    """``name`` if it is one of ``allowed``, else ValueError listing them."""
    if name not in allowed:
        raise ValueError(f"stabilization: unknown {name!r}; expected one of {list(allowed)}")
    return name


class TreeSystem(System):
    """A tree of rigid bodies (ABA), optionally closed by loop-closure constraints.

    State ``x = [q; qd]`` in the model's public order. Parameters (a dict):
    ``model`` (the :class:`~diffmb.tree.model.Model`, whose arrays are the numbers),
    ``q0``/``qd0`` (initial state), ``forcing`` (anything ``tau_fn`` needs) and, with
    closures, ``closures`` (:class:`~diffmb.closures.nodes.LoopClosures`, node placements)
    and ``baumgarte`` (``{"a": ..., "b": ...}``, eq. 41).

    ``tau_fn(t, q, qd, forcing) -> tau`` adds generalized forces (hinge models, actuation)
    to the passive joint forces ``-K (q - rest) - D qd`` (Fulton & Schaub eq. 11);
    ``potential_fn(q, forcing) -> U`` (optional) is its potential, added to the energy
    diagnostic (e.g. :mod:`diffmb.origami.hinges`).
    ``wrench_fn(t, frames, model, forcing) -> (N, 6)`` (optional) adds state-dependent
    wrenches ``[torque; force]`` on the bodies, in body axes about each body's origin, from
    their :class:`~diffmb.tree.body_frames.BodyFrames` (fluid drag: :mod:`diffmb.tree.fluid`).
    ``elements``: :class:`~diffmb.tree.force_element.ForceElement` s (panel contact), their
    numbers ``params["elements"]``, their potentials in the energy, their diagnostics
    beside the system's and their own states after ``[q; qd]``.
    ``stabilization``: ``none``, ``baumgarte`` (gains in params) or ``projection`` (after
    every step, :func:`~diffmb.closures.dynamics.project_state`). ``project`` also performs the
    MRP shadow-set switch of spherical/free joints (section 2.1) — never the vector field.
    """

    model: Model
    q0: jnp.ndarray
    qd0: jnp.ndarray
    forcing: object
    closures: object
    baumgarte: dict
    tau_fn: Callable | None = eqx.field(static=True, default=None)
    potential_fn: Callable | None = eqx.field(static=True, default=None)
    wrench_fn: Callable | None = eqx.field(static=True, default=None)
    stabilization: str = eqx.field(static=True, default="none")
    roles: tuple = eqx.field(static=True, default=())
    projection_iterations: int = eqx.field(static=True, default=3)
    algorithm: str = eqx.field(static=True, default="auto")
    elements: tuple = ()

    def __init__(self, model: Model, q0=None, qd0=None, *, tau_fn=None, forcing=None,
                 closures=None, stabilization="none", baumgarte=(0.0, 0.0),
                 projection_iterations=3, algorithm="auto", potential_fn=None, roles=None, wrench_fn=None,
                 elements=(), dynamics=None):
        self.model = model
        dt = model.mass.dtype
        self.q0 = model.neutral() if q0 is None else jnp.asarray(q0, dt)
        self.qd0 = jnp.zeros(model.nv, dt) if qd0 is None else jnp.asarray(qd0, dt)
        for name, v in (("q0", self.q0), ("qd0", self.qd0)):
            if v.shape != (model.nq,):
                raise ValueError(f"TreeSystem {name}: expected shape ({model.nq},), got {v.shape}")
        check_stabilization(stabilization)
        if closures is None and stabilization != "none":
            raise ValueError(f"stabilization {stabilization!r} needs loop closures; this system has none")
        self.tau_fn = tau_fn
        self.potential_fn = potential_fn
        self.wrench_fn = wrench_fn
        self.forcing = forcing
        self.closures = closures
        a, b = baumgarte
        self.baumgarte = {"a": jnp.asarray(a, dt), "b": jnp.asarray(b, dt)}
        self.stabilization = stabilization
        self.projection_iterations = int(projection_iterations)
        self.algorithm = api.choose_algorithm(algorithm, dynamics, "dynamics", ("auto",) + api.ALGORITHMS)
        self.elements = tuple(elements)
        self.roles = declare_roles(self, roles)

    def default_params(self):
        p = {"model": self.model, "q0": self.q0, "qd0": self.qd0, "forcing": self.forcing}
        if self.closures is not None:
            p["closures"] = self.closures
            p["baumgarte"] = self.baumgarte
        if self.elements:
            p["elements"] = tuple(e.default_params() for e in self.elements)
        return p

    def init_state(self, params):
        if self._element_states:   # the elements' states, one compiled program (not op by op)
            return _jitted_start(self, params)[0]
        return jnp.concatenate([params["q0"], params["qd0"]])

    def start(self, params) -> tuple:
        """``(x0, reports)``: the start state and each element's
        :meth:`~diffmb.tree.force_element.ForceElement.start_report` there, as one
        compiled program: the build's start checks and the run's start state share it
        (with contact on, 0.42 + 0.42 s of XLA in two programs became 0.62 s in one on a
        10 x 10 map fold; the first step's plan comes from it too, :meth:`start_and_plan`)."""
        return _jitted_start(self, params)[:2]

    def _init_state(self, params, ws):
        """``[q0; qd0]`` and the elements' start states (their energy budget included);
        ``ws``: the kinematics at ``q0, qd0``."""
        model, q, qd = params["model"], params["q0"], params["qd0"]
        energy = self._energy(model, ws, q, qd, params)
        return jnp.concatenate([q, qd] + [e.init_states(model, ws, p, energy)
                                          for e, p in zip(self.elements, params["elements"])])

    def _energy(self, model, ws, q, qd, params):
        """Kinetic and potential energy, the hinge models' included, the elements' not."""
        energy = api.kinetic_energy_ws(ws) + api.rotor_energy(model, qd) + api.potential_energy_ws(model, ws, q)
        if self.potential_fn is not None:  # stored energy of the tau_fn hinge models
            energy = energy + self.potential_fn(q, params["forcing"])
        return energy

    def split(self, x):
        n, v = self.model.nq, self.model.nv
        return x[:n], x[n:n + v]

    def element_states(self, x) -> tuple:
        """Each element's own states (after ``[q; qd]``)."""
        start, out = self.model.nq + self.model.nv, []
        for e in self.elements:
            k = len(e.state_names)
            out.append(x[start:start + k])
            start += k
        return tuple(out)

    def _elements_force(self, model, ws, x, params):
        tau = jnp.zeros(model.nv, ws.pos.dtype)
        for e, z, p in zip(self.elements, self.element_states(x), params["elements"]):
            if e.applies_forces:
                tau = tau + e.generalized_force(model, ws, z, p)
        return tau

    @property
    def _acting(self) -> bool:
        return any(e.applies_forces for e in self.elements)

    @property
    def _element_states(self) -> bool:
        return any(e.state_names for e in self.elements)

    @property
    def body_names(self) -> tuple:
        return tuple(self.model.body_names)

    @property
    def tree_models(self) -> tuple:
        return (self.model,)

    @property
    def coordinate_roles(self) -> dict:
        return {k: tuple(v) for k, v in self.roles}

    @sp.jit_per_form
    def body_frames(self, x, params) -> BodyFrames:
        q, qd = self.split(x)
        return from_kinematics(kinematics(params["model"], q, qd))

    def generalized_force(self, t, q, qd, params, ws=None):
        """Passive joint forces, ``tau_fn``'s and the ``wrench_fn`` wrenches' (``ws``: the
        state's kinematics, when the caller has them)."""
        model = params["model"]
        tau = api.joint_forces(model, q, qd)
        if self.tau_fn is not None:
            tau = tau + self.tau_fn(t, q, qd, params["forcing"])
        if self.wrench_fn is not None:
            ws = kinematics(model, q, qd) if ws is None else ws
            f = self.wrench_fn(t, from_kinematics(ws), model, params["forcing"])
            tau = tau + rnea.generalized_forces(model, ws, rnea.external_forces_world(ws, f))
        return tau

    def accelerations(self, t, x, params):
        """``(qdd, lambda)``; ``lambda`` (on the kept closure rows) is empty without closures."""
        model = params["model"]
        q, qd = self.split(x)
        return self._accelerations(t, x, params, kinematics(model, q, qd))

    @property
    def limits_steps(self) -> bool:
        return any(e.limits_steps for e in self.elements)

    def step_fraction(self, plan0, plan1, x0, params):
        """The least of the elements' :meth:`~diffmb.tree.force_element.ForceElement.step_fraction`,
        from the step's two plans: no forward kinematics of its own (the plans hold the
        vertices). Skipped while no element may limit the step (``cond_any``: a contact
        element with no armed pair)."""
        limiting = [k for k, e in enumerate(self.elements) if e.limits_steps]

        def check(o):
            plan0, plan1, x0, params = o
            zs, out = self.element_states(x0), jnp.asarray(jnp.inf, x0.dtype)
            for k in limiting:
                out = jnp.minimum(out, self.elements[k].step_fraction(plan0[k], plan1[k], zs[k], params["elements"][k]))
            return out

        zs, ps = self.element_states(x0), params["elements"]
        may = functools.reduce(jnp.logical_or, [jnp.asarray(self.elements[k].limits_steps_at(zs[k], ps[k]))
                                                for k in limiting], jnp.asarray(False))
        return cond_any(may, check, lambda o: jnp.asarray(jnp.inf, o[2].dtype), (plan0, plan1, x0, params))

    @property
    def plans_steps(self) -> bool:
        return any(e.plans_steps for e in self.elements)

    def step_plan(self, params):
        """Each element's plan not made yet (:meth:`~diffmb.tree.force_element.ForceElement.blank_plan`),
        ``None`` for an element that makes none."""
        if not self.plans_steps:
            return None
        dtype = params["q0"].dtype
        return tuple(e.blank_plan(dtype) if e.plans_steps else None for e in self.elements)

    def start_plan(self, x, params):
        """Each element's plan made at ``x``. Outside a trace, by the start program at
        ``x``'s coordinates: a run compiles it for its start state anyway, and a plan reads
        the poses alone, not the element states the program sets up (a program of its own
        cost the command line's runs with contact, whose segments each start from a given
        state, 0.4 s of compile on the 10x10 map fold). Inside a trace, the poses alone
        (inlined)."""
        if not self.plans_steps:
            return None
        if outside_any_trace():
            q, qd = self.split(jnp.asarray(x))
            return _jitted_start(self, {**params, "q0": q, "qd0": qd})[2]
        return _jitted_plan(self, x, params)

    def start_and_plan(self, params):
        if not self.plans_steps:
            return self.init_state(params), None
        x0, _, plan = _jitted_start(self, params)   # the start program has the poses
        return x0, plan

    def _plans_at(self, x, params, ws):
        return tuple(e.step_end(params["model"], ws, z, p)[1] if e.plans_steps else None
                     for e, z, p in zip(self.elements, self.element_states(x), params["elements"]))

    def planned(self, params, plan):
        if plan is None:
            return params
        elements = [p if k is None else {**p, "step_plan": k} for p, k in zip(params["elements"], plan)]
        return {**params, "elements": elements}

    def plan_of(self, params):
        if not self.plans_steps:
            return None
        return tuple(p.get("step_plan") if e.plans_steps else None for e, p in zip(self.elements, params["elements"]))

    def project_and_plan(self, x, params):
        return self._project(x, params, self.projection_iterations, plan=True)

    def _accelerations(self, t, x, params, ws, element_tau=None):
        model = params["model"]
        q, qd = self.split(x)
        tau = self.generalized_force(t, q, qd, params, ws)
        if element_tau is not None:
            tau = tau + element_tau
        elif self._acting:
            tau = tau + self._elements_force(model, ws, x, params)
        if self.closures is None:
            if self._dense:
                M = crba.mass_matrix_ws(model, ws)
                rhs = tau - rnea.bias_forces_ws(model, ws)
                qdd = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(M), True), rhs)
            else:
                qdd = aba.forward_dynamics_ws(model, ws, tau)
            return qdd, jnp.zeros(0, q.dtype)
        gains = None
        if self.stabilization == "baumgarte":
            gains = (params["baumgarte"]["a"], params["baumgarte"]["b"])
        nodes = params["closures"]
        qdd, lam = cs.constrained_dynamics(model, ws, tau, nodes, gains)
        return qdd, lam.reshape(-1)[np.asarray(nodes.rows)]

    def state_derivative(self, t, x, params):
        model = params["model"]
        q, qd = self.split(x)
        ws = kinematics(model, q, qd)
        if not self._element_states:
            qdd, _ = self._accelerations(t, x, params, ws)
            return jnp.concatenate([api.coordinate_rates(model, q, qd), qdd])
        tau, rates = jnp.zeros(model.nv, ws.pos.dtype), []
        for e, z, p in zip(self.elements, self.element_states(x), params["elements"]):
            f, r = e.evaluate(model, ws, z, p)
            tau, rates = (tau + f if e.applies_forces else tau), rates + [r]
        qdd, _ = self._accelerations(t, x, params, ws, tau)
        return jnp.concatenate([api.coordinate_rates(model, q, qd), qdd] + rates)

    @property
    def _dense(self) -> bool:
        """CRBA + Cholesky instead of the ABA (one trajectory of a tree of moderate size:
        a few large kernels beat the ABA's level-by-level sweep), for ``algorithm="auto"``;
        ``"recursive"`` forces the ABA (vmapped batch sweeps), ``"dense"`` the CRBA."""
        if self.algorithm == "auto":
            return self.model.nv <= DENSE_MAX_NV
        return self.algorithm == "dense"

    def project(self, x, params):
        return self._project(x, params, self.projection_iterations)

    def project_interpolated(self, x, params):
        """Two Gauss-Newton iterations, the velocity projected with the second's factor: from
        a violation ``e`` at the solver's tolerance that leaves ``O(e^4)`` in position and
        ``O(e^2 |qd|)`` in velocity (one iteration would leave ``O(e |qd|)``: its factor is
        taken before the correction), with two linearisations instead of
        ``projection_iterations`` (3)."""
        return self._project(x, params, min(2, self.projection_iterations), step_end=False)

    def _project(self, x, params, iterations, step_end=True, plan=False):
        """The projection; at a step's end, the elements' switches (and with ``plan``,
        ``(x, the next step's plan)``)."""
        model = params["model"]
        q, qd = self.split(x)
        planning = plan and self.plans_steps
        switching = step_end and (planning or any(e.switches_at_step_end for e in self.elements))
        ws = None
        if self.stabilization == "projection":
            # the elements' own states pass unchanged (contact's cut-crease angles: only
            # their branch is read, which the projection's small move never changes)
            q, qd, *rest = cs.project_state(model, q, qd, params["closures"], iterations,
                                            keep_momentum=model.floating_base, with_kinematics=switching)
            ws = rest[0] if rest else None
            x = jnp.concatenate([q, qd, x[q.shape[0] + qd.shape[0]:]])
        plans = None
        if switching:
            ws = kinematics(model, q) if ws is None else ws
            ends = [e.step_end(model, ws, z, p) if e.switches_at_step_end or (planning and e.plans_steps)
                    else (z, None) for e, z, p in zip(self.elements, self.element_states(x), params["elements"])]
            x = jnp.concatenate([x[:model.nq + model.nv], *(z for z, _ in ends)])
            plans = tuple(k if e.plans_steps else None for e, (_, k) in zip(self.elements, ends))
        x = sp.mrp_switch_at(x, jt.mrp_starts(self.model))
        return (x, plans) if plan else x

    @property
    def has_projection(self) -> bool:
        return (len(jt.mrp_starts(self.model)) > 0 or self.stabilization == "projection"
                or any(e.state_names for e in self.elements))

    @sp.jit_per_form
    def violation(self, x, params):
        if self.closures is None:
            return {}
        model, nodes = params["model"], params["closures"]
        q, qd = self.split(x)
        ws = kinematics(model, q, qd)
        rows = np.asarray(nodes.rows)
        phi = cl.residual(ws, nodes).reshape(-1)[rows]
        w = cl.velocity(ws, nodes).reshape(-1)[rows]
        return {"position": jnp.max(jnp.abs(phi)), "velocity": jnp.max(jnp.abs(w))}

    def constraint_wrenches(self, t, x, params):
        """Wrench (P, 6) ``[torque; force]`` body B exerts on body A at node A, in A's axes."""
        _, lam = self.accelerations(t, x, params)
        nodes = params["closures"]
        P = len(nodes.closures)
        return jnp.zeros(6 * P, x.dtype).at[np.asarray(nodes.rows)].set(lam).reshape(P, 6)

    @sp.jit_per_form
    def diagnostics(self, x, params):
        model = params["model"]
        q, qd = self.split(x)
        ws = kinematics(model, q, qd)
        out = {"energy": self._energy(model, ws, q, qd, params),
               "kinetic_energy": api.kinetic_energy_ws(ws) + api.rotor_energy(model, qd)}
        for e, z, p in zip(self.elements, self.element_states(x), params.get("elements", ())):
            energy, diagnostics = e.energy_and_diagnostics(model, ws, z, p)
            if e.applies_forces:
                out["energy"] = out["energy"] + energy
            out.update(diagnostics)
        if model.floating_base:
            lin, ang = api.momentum_ws(model, ws)
            out["angular_momentum"] = ang
            out["linear_momentum"] = lin
            out["momentum_scale"] = api.momentum_scale_ws(model, ws)
        if self.closures is not None:
            nodes = params["closures"]
            rows = np.asarray(nodes.rows)
            w = cl.velocity(ws, nodes).reshape(-1)[rows]
            out["phidot_sq"] = jnp.dot(w, w)  # the paper's Phi_dot^T Phi_dot (Figs. 11, 17)
        return out

    def sampled_diagnostics(self, x, params):
        model = params["model"]
        if self.closures is None or model.nv > RANK_DIAGNOSTIC_MAX_NV:
            return {}
        ws = kinematics(model, self.split(x)[0])
        M = crba.mass_matrix_ws(model, ws)
        return {"closure_rank": constraint_solve.numerical_rank(M, cs.blocks(ws, params["closures"], model.nv))}

    @property
    def coordinate_names(self):
        return self.model.coordinate_names

    @property
    def state_names(self):
        extra = tuple(n for e in self.elements for n in e.state_names)
        return self.model.coordinate_names + self.model.velocity_names + extra


@sp.jit_per_form
def _jitted_state_derivative(system, t, x, params):
    return system.state_derivative(t, x, params)


@sp.jit_per_form
def _jitted_start(system, params):
    """``(x0, the elements' start reports, the first step's plan)``: one program."""
    ws = kinematics(params["model"], params["q0"], params["qd0"])   # once, for all three
    x0 = system._init_state(params, ws) if system._element_states else jnp.concatenate([params["q0"], params["qd0"]])
    zs, ps = system.element_states(x0), params.get("elements", ())
    plan = system._plans_at(x0, params, ws) if system.plans_steps else None
    return x0, tuple(e.start_report(ws, z, p) for e, z, p in zip(system.elements, zs, ps)), plan


@sp.jit_per_form
def _jitted_plan(system, x, params):
    model = params["model"]
    rot, pos = body_poses(model, system.split(x)[0])
    return system._plans_at(x, params, Kinematics(rot, pos, None, None))


