"""``math.batch_cond.cond_any``: a branch that stays a branch in a batch (a sweep's
members pay for the contact forces only while some member is within reach), with
``lax.cond``'s values and derivatives."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmb.math.batch_cond import cond_any


def _on(o):
    x, y = o
    return jnp.sin(x) * y ** 2


def _off(o):
    return jnp.zeros_like(o[0])


def _ours(x, y):
    return cond_any(x > 0.5, _on, _off, (x, y))


def _cond(x, y):
    return jax.lax.cond(x > 0.5, _on, _off, (x, y))


XS, YS = jnp.linspace(0.0, 1.0, 7), jnp.linspace(1.0, 2.0, 7)


def test_values_and_derivatives_are_lax_conds_in_and_out_of_a_batch():
    for f in (lambda g: g, jax.grad, jax.jacfwd):
        for axes in ((0, 0), (0, None), (None, 0)):
            y = YS if axes[1] == 0 else 1.5
            x = XS if axes[0] == 0 else 0.7
            np.testing.assert_array_equal(jax.vmap(f(_ours), axes)(x, y), jax.vmap(f(_cond), axes)(x, y))
    np.testing.assert_array_equal(_ours(0.7, 2.0), _cond(0.7, 2.0))
    # reverse mode through a whole batch, the batch's shared argument differentiated
    g = jax.grad(lambda y: jnp.sum(jax.vmap(_ours, (0, None))(XS, y)))(1.5)
    assert g == jax.grad(lambda y: jnp.sum(jax.vmap(_cond, (0, None))(XS, y)))(1.5)


def test_a_batch_keeps_the_branch_where_vmap_of_cond_selects():
    ours = jax.jit(jax.vmap(_ours)).lower(XS, YS).as_text()
    theirs = jax.jit(jax.vmap(_cond)).lower(XS, YS).as_text()
    assert ours.count("stablehlo.case") == 1 and theirs.count("stablehlo.case") == 0


def test_a_batch_of_batches_keeps_the_branch_too():
    """A sweep's diagnostics: members around save points, two vmaps. Each level's rule
    branches again, so neither turns the expensive branch into a select."""
    X, Y = jnp.stack([XS, 0.5 * XS]), jnp.stack([YS, YS])   # the second member never takes it
    nested = lambda f: jax.vmap(jax.vmap(f))
    assert jax.jit(nested(_ours)).lower(X, Y).as_text().count("stablehlo.case") >= 1
    assert jax.jit(nested(_cond)).lower(X, Y).as_text().count("stablehlo.case") == 0
    for f in (lambda g: g, jax.grad, jax.jacfwd):
        np.testing.assert_array_equal(nested(f(_ours))(X, Y), nested(f(_cond))(X, Y))


def test_a_batch_of_panels_near_and_far_gets_each_members_own_contact_force():
    """Two free panels, members apart (no force) and within the barrier's reach: the
    batched accelerations equal each member's own, and only the near ones are pushed."""
    from test_contact import _two_panels

    system, _ = _two_panels()
    params = system.default_params()
    x0 = np.asarray(system.init_state(params), float)
    m = system.model
    s = m.body_slices[m.body_index("small")][0] + 5
    dhat = float(params["elements"][0]["dhat"])
    xs = np.repeat(x0[None], 4, 0)
    xs[:, s] = [0.02, 0.5 * dhat, 0.02, 0.8 * dhat]            # apart, near, apart, near
    acc = jax.jit(jax.vmap(lambda x: system.accelerations(0.0, x, params)[0]))(xs)
    one = jax.jit(lambda x: system.accelerations(0.0, x, params)[0])
    for k in range(4):
        np.testing.assert_allclose(acc[k], one(xs[k]), rtol=1e-13, atol=1e-15)
    push = np.asarray(acc)[:, s]
    assert push[0] == push[2] == 0.0 and push[1] > push[3] > 0.0
