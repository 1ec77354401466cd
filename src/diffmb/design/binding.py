"""Named scenario parameters as differentiable functions of a System's params.

Tuning, fitting and sweeps address parameters by the scenario's ``--set`` names (``K``,
``c``, ``a``, ``b``, ...), but a scenario's ``build`` turns those numbers into a System and
its params pytree with plain numpy (geometry, validation, rank analysis) — not something to
trace. :func:`bind` recovers a differentiable map without asking each scenario to write one:
it builds the scenario at the base values and with each named value perturbed, and reads
off how every array leaf of ``params`` moves. Parameters that enter ``params`` affinely
(stiffness, damping, gains, masses, initial angles — almost everything users tune or fit)
are then exactly ``params(v) = params(v0) + sum_k (v_k - v0_k) D_k``; the map is checked
at a second and a joint perturbation, and a parameter that enters nonlinearly (a pattern
angle that moves the geometry) is refused with a message saying so. Sweeps do not need
gradients and fall back to one build per member (:func:`build_batch`).

Besides the scenario's names, the per-coordinate parameters of
:mod:`diffmb.scenarios.coordinate_params` (``K.<coordinate>``, ``inertia_scale``,
``tape.<field>.<hinge>``, ...) are bound along their exact directions; set in ``overrides``
or bound, such a name keeps its entry of the params while the scenario's own names are
probed (``K.theta_j`` overrides ``K`` for that hinge, as in
:meth:`~diffmb.scenarios.Scenario.make`).
"""

from __future__ import annotations

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import scenarios
from ..scenarios import coordinate_params


def _split(params):
    return eqx.partition(params, eqx.is_inexact_array)


def _same_structure(p, q) -> bool:
    dp, sp_ = _split(p)
    dq, sq = _split(q)
    if jax.tree_util.tree_structure(dp) != jax.tree_util.tree_structure(dq):
        return False
    try:
        return bool(jax.tree_util.tree_structure(sp_) == jax.tree_util.tree_structure(sq)) and all(
            np.array_equal(np.asarray(a), np.asarray(b))
            for a, b in zip(jax.tree_util.tree_leaves(sp_), jax.tree_util.tree_leaves(sq)))
    except Exception:
        return False


def _leaves(params):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(_split(params)[0])]


class Binding(eqx.Module):
    """A differentiable map from named values ``theta (n,)`` to a System's params.

    ``system``: the built System; ``names``: the bound parameter names; ``values``: their
    base values; ``base``: params at the base values; ``directions``: ``d params / d v_k``
    for each name (same pytree as ``base``, zeros where a leaf does not move).
    """

    system: object
    base: object
    values: jnp.ndarray
    directions: tuple
    names: tuple = eqx.field(static=True)
    scenario: str = eqx.field(static=True)
    stabilization: str = eqx.field(static=True)

    def params(self, theta):
        """The params pytree at named values ``theta`` (traceable, differentiable); one
        program per binding structure (called outside a trace, the update of every leaf
        compiled a program of its own)."""
        return _params_at(self, jnp.asarray(theta))

    def _params_at(self, theta):
        dyn, static = _split(self.base)
        out = dyn
        for k, d in enumerate(self.directions):
            step = theta[k] - self.values[k]
            out = jax.tree_util.tree_map(lambda x, dx, s=step: x + s * dx, out, _split(d)[0])
        return eqx.combine(out, static)


@eqx.filter_jit
def _params_at(binding, theta):
    return binding._params_at(theta)


def _probe_step(v: float) -> float:
    return 0.5 * max(abs(v), 1.0)


def _probe(scenario, values, name, base, stab):
    """``(direction, params at two steps, step)``: the step shrinks (and turns) when the
    scenario rejects a probe value (a tape spring's plateau moment must stay below its
    peak), since any step reads an affine direction."""
    h0 = _probe_step(values[name])
    for h in (h0, 1e-2 * h0, -1e-2 * h0):
        try:
            d = _difference(scenario, values, {name: h}, base, stab, name)
            return d, _build(scenario, values, {name: 2 * h}, stab, name, base), h
        except NotAffine:
            raise
        except ValueError as e:
            err = e
    raise err


def bind(scenario, names, overrides=None, stabilization=None, *, rtol: float = 1e-9) -> Binding:
    """Bind scenario parameters ``names`` (its ``--set`` names, or ``K.<coordinate>`` etc.)
    at the scenario's values updated by ``overrides``. Raises ValueError naming a parameter
    that is unknown, changes the System's structure, or enters its params nonlinearly."""
    names = tuple(names)
    if not names:
        raise ValueError("no parameters given")
    if len(set(names)) != len(names):
        raise ValueError(f"parameters listed twice: {', '.join(names)}")
    values = scenario.resolve(overrides)
    system, base, _ = scenario.make(overrides, stabilization)
    stab = system.stabilization
    v0, dirs, probes = {}, {}, {}
    for name in names:
        if name in scenario.defaults:
            continue
        if not coordinate_params.is_coordinate_param(name):
            raise ValueError(
                f"scenario {scenario.name!r} has no parameter {name!r}; settable: "
                f"{', '.join(sorted(scenario.defaults))} (and {', '.join(coordinate_params.FORMS)})")
        dirs[name], v0[name] = coordinate_params.direction(name, system, base, values.get(name))
    # the bound per-coordinate names keep their entries while the scenario's names are probed
    values = {**values, **v0}
    for name in names:
        if name not in scenario.defaults:
            continue
        d, p2, h = _probe(scenario, values, name, base, stab)
        _check_affine(base, [(d, 2 * h)], p2, name, scenario.name, rtol)
        probes[name], v0[name], dirs[name] = h, values[name], d
    scen = [n for n in names if n in probes]
    if len(scen) > 1:  # joint perturbation: rules out products of two bound parameters
        pj = _build(scenario, values, probes, stab, "+".join(scen), base)
        pairs = [(dirs[n], probes[n]) for n in scen]
        _check_affine(base, pairs, pj, " and ".join(scen), scenario.name, rtol, joint=True)
    return Binding(system=system, base=base, values=jnp.asarray(np.asarray([v0[n] for n in names], float)),
                   directions=tuple(dirs[n] for n in names), names=names, scenario=scenario.name,
                   stabilization=stab)


class NotAffine(ValueError):
    """A parameter that cannot be bound as an affine direction of the params: it changes
    the structure (a structural option) or enters nonlinearly. It can still be swept with
    one build per member (:func:`build_batch`), but not tuned or fitted by gradient."""


def _build(scenario, values, delta, stab, label, base):
    v = dict(values)
    for k, h in delta.items():
        v[k] = values[k] + h
    try:
        with warnings.catch_warnings():   # a probe's notes repeat the base build's (or are of the probe's values)
            warnings.simplefilter("ignore")
            _, p = scenario.construct(v, stab)
    except ValueError as e:
        raise ValueError(f"parameter {label!r}: scenario {scenario.name!r} rejects a probe "
                         f"at {', '.join(f'{k}={v[k]:g}' for k in delta)}: {e}") from None
    if not _same_structure(base, p):
        raise NotAffine(f"parameter {label!r} changes the structure of scenario "
                        f"{scenario.name!r} (it is a structural option, not a number to tune)")
    return p


def _difference(scenario, values, delta, base, stab, name):
    (k, h), = delta.items()
    p1 = _build(scenario, values, delta, stab, name, base)
    d1, static = _split(p1)
    d0, _ = _split(base)
    # equal leaves (including the infinite joint limits) do not move: 0, not inf - inf;
    # in numpy: build-time numbers, where JAX would compile a program per leaf shape
    def diff(a, b):
        a, b = np.asarray(a), np.asarray(b)
        with np.errstate(invalid="ignore"):
            d = np.where(a == b, 0.0, (a - b) / h)
        return jnp.asarray(d.astype(a.dtype) if np.issubdtype(a.dtype, np.floating) else d)

    return eqx.combine(jax.tree_util.tree_map(diff, d1, d0), static)


#: Round-off allowed in the affine check, in units of the params' machine epsilon.
ROUNDOFF_ULPS = 64


def _check_affine(base, pairs, probe, label, scen, rtol, joint=False):
    b = _leaves(base)
    pred = [x.astype(float) for x in b]
    for d, h in pairs:
        pred = [p + h * np.asarray(x) for p, x in zip(pred, _leaves(d))]
    for p, got in zip(pred, _leaves(probe)):
        fin = np.isfinite(got)
        if not np.array_equal(fin, np.isfinite(p)) or not np.array_equal(got[~fin], p[~fin]):
            raise ValueError(f"parameter {label!r} changes which numbers of scenario {scen!r} are infinite")
        p, got = p[fin], got[fin]
        scale = max(np.max(np.abs(got), initial=0.0), np.max(np.abs(p), initial=0.0), 1e-300)
        # a float32 build rounds at 1e-7: its own round-off is not a nonlinearity (a real
        # one departs by a fraction of the probe step, far above either tolerance)
        tol = max(rtol, ROUNDOFF_ULPS * float(np.finfo(got.dtype).eps)) if got.dtype.kind == "f" else rtol
        if np.max(np.abs(p - got), initial=0.0) > tol * scale + 1e-12:
            how = "together (they multiply)" if joint else "nonlinearly"
            raise NotAffine(
                f"parameter {label!r} enters scenario {scen!r} {how}: it can be swept "
                f"(one build per member) but not tuned or fitted by gradient")


def build_batch(scenario, members, stabilization=None):
    """Stacked params of one build per member (``members``: list of override dicts).

    For parameters that enter nonlinearly (geometry); every member must keep the structure.
    Returns ``(system, params_batch)`` with a leading batch axis on every array leaf.
    """
    system, base, _ = scenario.make(members[0], stabilization)
    stab = system.stabilization
    ps = [base]
    for i, m in enumerate(members[1:], start=1):
        _, p, _ = scenario.make(m, stab)
        if not _same_structure(base, p):
            raise ValueError(f"sweep member {i} ({m}) changes the structure of scenario {scenario.name!r}")
        ps.append(p)
    dyn = [_split(p)[0] for p in ps]
    static = _split(base)[1]
    return system, eqx.combine(jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *dyn), static)


def resolve(scenario, names, overrides=None, stabilization=None, *, t1=None, dt=None, solver=None,
            rtol=None, atol=None):
    """``(binding, settings)`` for the design tools: ``scenario`` is a Scenario, its name or
    a ready :class:`Binding`; ``settings`` are the run options (:func:`run_options`)."""
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    b = scenario if isinstance(scenario, Binding) else bind(scenario, names, overrides, stabilization)
    return b, run_options(scenario, t1=t1, dt=dt, solver=solver, rtol=rtol, atol=atol)


def run_options(scenario, *, t1=None, dt=None, solver=None, rtol=None, atol=None) -> dict:
    """Run options ``t1``, ``dt``, ``solver``, ``rtol``, ``atol``: the given ones, else the
    scenario's (:meth:`~diffmb.scenarios.Scenario.run_settings`); for a bare Binding,
    dopri5 and default tolerances (``t1`` must then be given)."""
    if not isinstance(scenario, Binding):
        return scenario.run_settings(t1=t1, dt=dt, solver=solver, rtol=rtol, atol=atol)
    pick = lambda v, default: default if v is None else v
    return dict(t1=None if t1 is None else float(t1), dt=dt, solver=solver or "dopri5",
                rtol=float(pick(rtol, 1e-8)), atol=float(pick(atol, 1e-10)))
