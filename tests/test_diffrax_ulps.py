"""diffrax's ``t1 - 100 ULPs`` threshold computed in one operation (diffmb.simulation._diffrax_ulps):
the values of equinox's chain of ``prevbefore`` calls, the same integration bit for bit,
and no ``next_after`` left in a simulation program."""

import diffrax as dfx
import diffrax._integrate as dfx_integrate
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import scenarios
from diffmb.simulation import _diffrax_ulps, integrate

#: normal magnitudes of both signs, zero of both signs, the largest float, infinity, and a
#: value whose 100 ULPs cross a power of two (the bits' exponent changes)
VALUES = [1.0, 3.7, 0.7, 1e-300, 1e300, -2.5, -1e-310, 0.0, -0.0, 2.0 + 50 * 2.0**-51,
          np.finfo(np.float64).max, np.inf]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_k_ulps_before_equal_equinox_chain(dtype):
    x = np.asarray([v for v in VALUES if dtype == np.float64 or abs(v) < 1e30 and v != -1e-310], dtype)

    @jax.jit
    def chains(x):
        out, y = [], x
        for k in range(1, 101):
            y = eqxi.prevbefore(y)
            if k in (1, 2, 37, 100):
                out.append((y, _diffrax_ulps.before(x, k)))
        return out

    for chained, direct in chains(x):
        assert direct.dtype == chained.dtype == dtype
        np.testing.assert_array_equal(np.asarray(direct), np.asarray(chained))
    # the derivative is the identity, as equinox's
    assert float(jax.jvp(lambda t: _diffrax_ulps.before(t, 100), (2.0,), (1.0,))[1]) == 1.0


def test_a_chain_of_prevbefore_calls_is_one_operation():
    def hundred(t):
        for _ in range(100):
            t = _diffrax_ulps.prevbefore(t)
        return t

    text = jax.jit(hundred).lower(0.7).as_text()
    one = jax.jit(lambda t: _diffrax_ulps.before(t, 100)).lower(0.7).as_text()
    assert "next_after" not in text and text.count("\n") == one.count("\n")  # the 99 unused are dropped
    assert float(jax.jit(hundred)(0.7)) == float(jax.jit(lambda t: _diffrax_ulps.before(t, 100))(0.7))


def test_diffraxs_chain_is_traced_as_one_call_with_the_chains_value():
    """This diffrax writes its chain as ``_diffrax_ulps`` expects, so its module gets the
    chain's end at the first call: a hundred calls trace one operation, and two chains in
    a row each end 100 ULPs before their own origin."""
    assert dfx_integrate.eqxi.prevbefore is _diffrax_ulps._chain_end

    def hundred(t):
        for _ in range(_diffrax_ulps.CHAIN):
            t = dfx_integrate.eqxi.prevbefore(t)
        return t

    assert len(jax.make_jaxpr(hundred)(0.7).eqns) == 1
    x = jnp.asarray([v for v in VALUES if v != -1e-310])
    twice = jax.jit(lambda x: (hundred(x), hundred(2.0 * x)))(x)
    for got, origin in zip(twice, (x, 2.0 * x)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(_diffrax_ulps.before(origin, 100)))


def test_diffrax_integrates_as_with_equinox_prevbefore_and_simulate_has_no_next_after():
    assert _diffrax_ulps.installed()
    system, params, _ = scenarios.get("pendulum").make()
    args = integrate.simulate(system, params=params, t1=1.0, dt=1e-2, saveat=11, _compile_only=True)
    # one: the fixed-step grid's own (integrate._step_grid); diffrax's hundred are gone
    assert integrate._solve.lower(*args).as_text().count("next_after") == 1

    # an adaptive run whose last step is clipped onto t1, with diffrax's own chain and with ours
    def solve(y0):
        sol = dfx.diffeqsolve(dfx.ODETerm(lambda t, y, a: jnp.stack([y[1], -jnp.sin(y[0])])), dfx.Dopri5(),
                              0.0, 0.7, 0.05, y0, saveat=dfx.SaveAt(t1=True),
                              stepsize_controller=dfx.PIDController(rtol=1e-9, atol=1e-9))
        return sol.ts, sol.ys, sol.stats["num_steps"]

    y0 = jnp.array([1.0, 0.0])
    ours = jax.jit(solve)(y0)
    dfx_integrate.eqxi = eqxi
    try:
        theirs = jax.jit(lambda y: solve(y))(y0)  # a new function: traced with equinox's chain
    finally:
        _diffrax_ulps.install()
    assert _diffrax_ulps.installed() and float(ours[0][0]) == 0.7
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
