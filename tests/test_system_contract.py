"""The System contract across formulations, one scenario each.

The contract is written once, as the members declared on ``System``;
docs/architecture.md's table names exactly those members.

Numbers have one home: a System's evaluations read every number from ``params``.

Systems may keep their default numbers (what ``default_params`` returns), but the vector
field, the projection and the diagnostics must never read them: with every float array
stored on the System replaced by NaN, each evaluation is unchanged, bit for bit.

The state splits the same way everywhere: ``split(x)`` is ``(coordinates, speeds)``, the
coordinates named by ``coordinate_names``, their speeds right after them."""

from __future__ import annotations

import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import scenarios
from diffmb.system import ROLES, STABILIZATIONS, System
from diffmb.tree.body_frames import BodyFrames
from diffmb.tree.model import Model

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

CASES = [("fold-4panel", {}), ("four-bar", {}), ("slider-crank", {}), ("slider-crank", {"formulation": "dae"}),
         ("uk-hinged-cubes", {}), ("tbar", {}), ("solar-sail-slew", {"n_elements": 4}), ("flex-4body", {})]
IDS = [f"{n}{'-' + '-'.join(o) if o else ''}" for n, o in CASES]


@eqx.filter_jit
def _poison(system):
    return jax.tree_util.tree_map(lambda a: a * jnp.nan if eqx.is_inexact_array(a) else a, system)


@eqx.filter_jit
def _evaluate(system, params, x):
    return (system.state_derivative(0.3, x, params), system.project(x, params),
            system.diagnostics(x, params))


# flex-4body's evaluation programs (~11 s) in the slow job: solar-sail-slew checks the same
# flexible formulation in the default job
@pytest.mark.parametrize("name, overrides", [
    pytest.param(n, o, id=i, marks=pytest.mark.slow if n == "flex-4body" else ()) for (n, o), i in zip(CASES, IDS)])
def test_evaluations_read_numbers_only_from_params(name, overrides):
    system, params, _ = scenarios.get(name).make(overrides)
    x = system.init_state(params)
    stored = [a for a in jax.tree_util.tree_leaves(system) if eqx.is_inexact_array(a)]
    assert stored, "the check needs a System that stores its defaults"
    clean, poisoned = _evaluate(system, params, x), _evaluate(_poison(system), params, x)
    for a, b in zip(jax.tree_util.tree_leaves(clean), jax.tree_util.tree_leaves(poisoned)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.all(np.isfinite(np.asarray(clean[0])))


@pytest.mark.parametrize("name, overrides", CASES, ids=IDS)
def test_split_is_coordinates_then_their_speeds(name, overrides):
    system, params, _ = scenarios.get(name).make(overrides)
    x = np.asarray(system.init_state(params))
    names = system.state_names
    q, v = map(np.asarray, system.split(x))
    n = len(system.coordinate_names)
    assert names[:n] == system.coordinate_names and q.shape == v.shape == (n,)
    np.testing.assert_array_equal(q, x[:n])
    np.testing.assert_array_equal(v, x[n:2 * n])
    assert len(names) >= 2 * n


def _documented_members() -> set:
    """The members docs/architecture.md's contract table names (first column)."""
    text = DOC.read_text()
    section = text[text.index("## The System contract"):]
    section = section[:section.index("\n## ", 1)]
    out = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            out |= set(re.findall(r"`([a-z_]+)", line.split("|")[1]))
    return out


def test_the_documented_contract_is_the_declared_one():
    declared = {n for n in set(dir(System)) - set(dir(eqx.Module)) if not n.startswith("_")}
    assert _documented_members() == declared


@pytest.mark.parametrize("name, overrides", CASES, ids=IDS)
def test_members_the_tools_read_hold_what_they_promise(name, overrides):
    system, params, _ = scenarios.get(name).make(overrides)
    assert system.stabilization in STABILIZATIONS
    for role, names in system.coordinate_roles.items():
        assert role in ROLES
        known = system.state_names if role == "hub_rate" else system.coordinate_names
        assert set(names) <= set(known), role
    assert all(isinstance(m, Model) for m in system.tree_models)
    x = system.init_state(params)
    if system.body_names:
        frames = system.body_frames(x, params)
        assert isinstance(frames, BodyFrames) and frames.rot.shape == (len(system.body_names), 3, 3)
        assert sum(len(m.body_names) for m in system.tree_models) in (0, len(system.body_names))
    else:
        with pytest.raises(ValueError, match=type(system).__name__):
            system.body_frames(x, params)


@pytest.mark.parametrize("name", ["fold-4panel", "fold-2x4"])
def test_hinge_models_follow_the_hinge_role_order(name):
    """``tape.<field>.<hinge>`` parameters index the hinge models' arrays by the ``hinge``
    role: both must name the same coordinates in the same order."""
    system, params, _ = scenarios.get(name).make({"hinge": 1.0})
    names = system.model.coordinate_names
    assert system.coordinate_roles["hinge"] == tuple(names[i] for i in system.tau_fn.indices)
