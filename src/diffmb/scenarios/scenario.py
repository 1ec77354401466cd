"""A scenario: a named, parameterised case (its settable numbers, how to build its System,
its default run settings, its paper), and the registry scenarios are added to."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

#: Parameter names of quantities that cannot be negative (stiffness, damping, masses,
#: densities, lengths, stabilization gains): ``--set K=-1`` is refused, not simulated.
NONNEGATIVE = re.compile(
    r"^(K|k|c|m|l|a|b|alpha|beta|mu|EI)\d*$"  # bare names and numbered ones (K7, m2, l1)
    r"|^(K|k|c)_|_(k|c|K)$|^ts_(K|Mpeak|Mplat|damping)$"  # K_col, k_t, c_r, stop_k, stop_c
    r"|mass|density|damping|zeta|rho|inertia|length|radius|width|EI_|string_E|^side$|^gap$|_mu$|^hub_i|payload|^wn_"
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
    #: (:mod:`diffmb.health`). Default: none (damped, driven or controlled cases).
    conserved: Callable = field(default=lambda values: ())
    #: the parameters that are Baumgarte gains (``params["baumgarte"]``): tuning one of
    #: them runs with stabilization ``baumgarte`` unless another is asked for
    gains: tuple = ("a", "b")
    #: ``reconfiguration(overrides) -> diffmb.reconfig.Problem``: the scenario's
    #: reconfiguration-graph problem (``diffmb reconfig``), or ``None``.
    reconfiguration: Callable | None = None

    def resolve(self, overrides: dict | None = None) -> dict:
        """Defaults updated by ``overrides``; unknown names raise ValueError."""
        values = dict(self.defaults)
        for k, v in (overrides or {}).items():
            if k not in values:
                raise ValueError(
                    f"scenario {self.name!r} has no parameter {k!r}; "
                    f"settable: {', '.join(sorted(values)) or '(none)'}"
                )
            if isinstance(v, str) and v.strip().lower() in self.choices.get(k, {}):
                v = self.choices[k][v.strip().lower()]
            try:
                values[k] = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"parameter {k!r}: {v!r} is not a number") from None
            if not math.isfinite(values[k]):
                raise ValueError(f"parameter {k!r}: {v!r} is not a finite number")
            if values[k] < 0 and nonnegative(k):
                raise ValueError(f"parameter {k!r} = {values[k]:g}: a {_kind(k)} cannot be negative")
        return values

    def run_settings(self, *, t1=None, dt=None, solver=None, rtol=None, atol=None) -> dict:
        """``t1, dt, solver, rtol, atol``: the given ones over this scenario's defaults.
        The one place run settings are resolved (the CLI, the design tools and ``synth``
        call it); callers validate what they take from users."""
        pick = lambda v, default: default if v is None else v  # noqa: E731
        return dict(t1=float(pick(t1, self.t1)), dt=pick(dt, self.dt), solver=solver or self.solver,
                    rtol=float(pick(rtol, self.rtol)), atol=float(pick(atol, self.atol)))

    def make(self, overrides: dict | None = None, stabilization: str | None = None):
        """``(system, params, values)`` for this case (default stabilization if None)."""
        stabilization = self.stabilization if stabilization is None else stabilization
        if stabilization not in self.stabilizations:
            raise ValueError(
                f"scenario {self.name!r} supports stabilization {list(self.stabilizations)}, "
                f"not {stabilization!r}"
            )
        values = self.resolve(overrides)
        system, params = self.build(values, stabilization)
        return system, params, values


def conserves(*, momentum: bool = False, energy_unless=()) -> Callable:
    """A Scenario's ``conserved``: angular momentum always when ``momentum`` (free-floating,
    no external torque); the energy when every name of ``energy_unless`` is 0 (its
    damping, forcing, ...). ``energy_unless=None``: the energy never is."""
    def conserved(values):
        out = ("angular_momentum",) if momentum else ()
        if energy_unless is not None and all(values.get(k, 0.0) == 0 for k in energy_unless):
            out = ("energy",) + out
        return out

    return conserved


def nonnegative(name: str) -> bool:
    """Whether scenario parameter ``name`` names a quantity that cannot be negative."""
    base = name.split(".")[0]  # per-hinge names: K.theta_3
    return bool(NONNEGATIVE.search(base))


def _kind(name: str) -> str:
    base = name.split(".")[0]
    for pattern, kind in ((r"^(a|b|alpha|beta)$", "stabilization gain"),
                          (r"^(c|c_.*|.*_c|.*damping.*|zeta.*)$", "damping"),
                          (r"mass|density|rho|^m\d*$|^mu$|inertia", "mass or inertia"),
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
