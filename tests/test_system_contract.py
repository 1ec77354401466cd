"""The System contract across formulations, one scenario each.

Numbers have one home: a System's evaluations read every number from ``params``.

Systems may keep their default numbers (what ``default_params`` returns), but the vector
field, the projection and the diagnostics must never read them: with every float array
stored on the System replaced by NaN, each evaluation is unchanged, bit for bit.

The state splits the same way everywhere: ``split(x)`` is ``(coordinates, speeds)``, the
coordinates named by ``coordinate_names``, their speeds right after them."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import scenarios

CASES = [("fold-4panel", {}), ("four-bar", {}), ("slider-crank", {}), ("slider-crank", {"formulation": "dae"}),
         ("uk-hinged-cubes", {}), ("tbar", {}), ("solar-sail-slew", {"n_elements": 4}), ("flex-4body", {})]


def _poison(system):
    return jax.tree_util.tree_map(lambda a: a * jnp.nan if eqx.is_inexact_array(a) else a, system)


@eqx.filter_jit
def _evaluate(system, params, x):
    return (system.state_derivative(0.3, x, params), system.project(x, params),
            system.diagnostics(x, params))


@pytest.mark.parametrize("name, overrides", CASES, ids=[f"{n}{'-' + '-'.join(o) if o else ''}" for n, o in CASES])
def test_evaluations_read_numbers_only_from_params(name, overrides):
    system, params, _ = scenarios.get(name).make(overrides)
    x = system.init_state(params)
    stored = [a for a in jax.tree_util.tree_leaves(system) if eqx.is_inexact_array(a)]
    assert stored, "the check needs a System that stores its defaults"
    clean, poisoned = _evaluate(system, params, x), _evaluate(_poison(system), params, x)
    for a, b in zip(jax.tree_util.tree_leaves(clean), jax.tree_util.tree_leaves(poisoned)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.all(np.isfinite(np.asarray(clean[0])))


@pytest.mark.parametrize("name, overrides", CASES, ids=[f"{n}{'-' + '-'.join(o) if o else ''}" for n, o in CASES])
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
