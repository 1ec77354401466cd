"""A scenario: a named, parameterised case (its settable numbers, how to build its System,
its default run settings, its paper), and the registry scenarios are added to."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from . import coordinate_params

#: Parameter names of quantities that cannot be negative (stiffness, damping, masses,
#: densities, lengths, stabilization gains): ``--set K=-1`` is refused, not simulated.
NONNEGATIVE = re.compile(
    r"^(K|k|c|m|l|a|b|alpha|beta|mu|EI)\d*$"  # bare names and numbered ones (K7, m2, l1)
    r"|^(K|k|c)_|_(k|c|K)$|^ts_(K|Mpeak|Mplat|damping)$"  # K_col, k_t, c_r, stop_k, stop_c
    r"|mass|density|damping|stiffness|armature|zeta|rho|inertia|length|radius|width|EI_|string_E|^side$|^gap$"
    r"|_mu$|^hub_i|payload|^wn_"
    r"|^M_(peak|plateau)"  # a tape spring's moments, per hinge: tape.M_peak.theta_j
)


@dataclass(frozen=True)
class Scenario:
    """A named case: ``build(values, stabilization) -> (system, params)``.

    ``defaults`` holds every settable parameter with its default value; ``t1``, ``dt``,
    ``solver``, ``rtol``, ``atol`` are the default run settings; ``paper`` names the
    source of the case.
    """

    name: str
    description: str
    paper: str
    build: Callable
    defaults: dict = field(default_factory=dict)
    t1: float = 10.0
    dt: float = 1e-3
    solver: str = "rk4"
    rtol: float = 1e-8
    atol: float = 1e-10
    stabilizations: tuple = ("none",)
    stabilization: str = "none"
    #: optional named values: ``{parameter: {name: number}}`` (e.g. ``material=hdpe``)
    choices: dict = field(default_factory=dict)
    #: ``conserved(values) -> names``: the diagnostics (``energy``, ``angular_momentum``)
    #: that the physics conserves with these values; a run's jumps in them are flagged
    #: (:mod:`diffmb.simulation.health`). Default: none (damped, driven or controlled cases).
    conserved: Callable = field(default=lambda values: ())
    #: the parameters that are Baumgarte gains (``params["baumgarte"]``): tuning one of
    #: them runs with stabilization ``baumgarte`` unless another is asked for
    gains: tuple = ("a", "b")
    #: ``reconfiguration(overrides) -> diffmb.formulations.udwadia_kalaba.reconfig.Problem``: the scenario's
    #: reconfiguration-graph problem (``diffmb reconfig``), or ``None``.
    reconfiguration: Callable | None = None
    #: ``{name: loss(trajectory, params) -> scalar}``: losses of this case for
    #: :func:`diffmb.design.tune.tune` beside the general ones (e.g. ``solar-sail-slew``'s
    #: ``slew``: the pointing error left at the end of a slew)
    losses: dict = field(default_factory=dict)

    def resolve(self, overrides: dict | None = None) -> dict:
        """Defaults updated by ``overrides``, plus the per-coordinate parameters
        (:mod:`diffmb.scenarios.coordinate_params`: ``K.theta_j``, ...) these set; unknown names,
        values that are not finite numbers (or one of the parameter's ``choices``) and
        negative values of a non-negative quantity raise ValueError. Which coordinates
        exist is checked by :meth:`make`, once the System is built."""
        values = dict(self.defaults)
        for k, v in (overrides or {}).items():
            if k not in values and not coordinate_params.is_coordinate_param(k):
                raise ValueError(
                    f"scenario {self.name!r} has no parameter {k!r}; "
                    f"settable: {', '.join(sorted(self.defaults)) or '(none)'} "
                    f"(and {', '.join(coordinate_params.FORMS)})"
                )
            named = self.choices.get(k, {})
            if isinstance(v, str) and v.strip().lower() in named:
                v = named[v.strip().lower()]
            try:
                values[k] = float(v)
            except (TypeError, ValueError):
                what = f"neither a number nor one of {', '.join(named)}" if named else "not a number"
                raise ValueError(f"parameter {k!r}: {v!r} is {what}") from None
            if not math.isfinite(values[k]):
                raise ValueError(f"parameter {k!r}: {v!r} is not a finite number")
            if values[k] < 0 and nonnegative(k):
                raise ValueError(f"parameter {k!r} = {values[k]:g}: a {_kind(k)} cannot be negative")
        return values

    def run_settings(self, *, t1=None, dt=None, solver=None, rtol=None, atol=None) -> dict:
        """``t1, dt, solver, rtol, atol``: the given ones over this scenario's defaults.
        The one place run settings are resolved (the CLI, the design tools and ``synth``
        call it); callers validate what they take from users."""
        pick = lambda v, default: default if v is None else v
        return dict(t1=float(pick(t1, self.t1)), dt=pick(dt, self.dt), solver=solver or self.solver,
                    rtol=float(pick(rtol, self.rtol)), atol=float(pick(atol, self.atol)))

    def make(self, overrides: dict | None = None, stabilization: str | None = None):
        """``(system, params, values)`` for this case (default stabilization if None);
        ``values`` as :meth:`resolve` returns them, per-coordinate ones included."""
        stabilization = self.stabilization if stabilization is None else stabilization
        if stabilization not in self.stabilizations:
            raise ValueError(
                f"scenario {self.name!r} supports stabilization {list(self.stabilizations)}, "
                f"not {stabilization!r}"
            )
        values = self.resolve(overrides)
        system, params = self.construct(values, stabilization)
        return system, params, values

    def construct(self, values: dict, stabilization: str):
        """``(system, params)`` from resolved ``values``: ``build`` with the scenario's own
        numbers, then the per-coordinate entries set in the params
        (:func:`diffmb.scenarios.coordinate_params.apply`: ``K.theta_j`` overrides ``K`` for that
        hinge). ValueError naming the coordinates for one that addresses none."""
        own = {k: v for k, v in values.items() if k in self.defaults}
        system, params = self.build(own, stabilization)
        per = {k: v for k, v in values.items() if k not in self.defaults}
        return system, coordinate_params.apply(system, params, per) if per else params


def set_anywhere(values: dict, name: str) -> bool:
    """Whether ``name`` is nonzero in ``values``, or for any one coordinate
    (``c.theta_j``: one hinge's damping makes the structure damped)."""
    return values.get(name, 0.0) != 0 or any(v != 0 for k, v in values.items() if k.startswith(name + "."))


def conserves(*, momentum: bool = False, energy_unless=()) -> Callable:
    """A Scenario's ``conserved``: angular momentum always when ``momentum`` (free-floating,
    no external torque); the energy when every name of ``energy_unless`` is 0 (its
    damping, forcing, ...). ``energy_unless=None``: the energy never is."""
    def conserved(values):
        out = ("angular_momentum",) if momentum else ()
        if energy_unless is not None and not any(set_anywhere(values, k) for k in energy_unless):
            out = ("energy",) + out
        return out

    return conserved


def nonnegative(name: str) -> bool:
    """Whether scenario parameter ``name`` names a quantity that cannot be negative."""
    return bool(NONNEGATIVE.search(_base(name)))


def _base(name: str) -> str:
    """The quantity a name sets: ``K`` of ``K.theta_3``, ``M_peak`` of ``tape.M_peak.theta_j``."""
    head, _, rest = name.partition(".")
    if head in coordinate_params.HINGE_GROUPS and rest:
        return rest.partition(".")[0]
    return head


def _kind(name: str) -> str:
    """What a non-negative parameter is, for messages (first match; else a stiffness)."""
    base = _base(name)
    for pattern, kind in ((r"^(a|b|alpha|beta)$", "stabilization gain"),
                          (r"^(c|c_.*|.*_c|.*damping.*|zeta.*)$", "damping"),
                          (r"^ts_M|^M_", "moment"),  # a tape spring's peak and plateau
                          (r"^wn_", "natural frequency"),
                          (r"force_density", "force density"),  # a tensegrity string's
                          (r"_ratio$", "ratio"),
                          (r"^string_E$", "Young's modulus"),
                          (r"mass|density|rho|^m\d*$|^mu$|_mu$|inertia|^hub_i|payload", "mass or inertia"),
                          (r"length|radius|width|^side$|^gap$|^l\d*$", "length")):
        if re.search(pattern, base):
            return kind
    return "stiffness"


REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if scenario.name in REGISTRY:
        raise ValueError(f"scenario {scenario.name!r} registered twice")
    REGISTRY[scenario.name] = scenario
    return scenario
