"""diffrax's ``t1 - 100 ULPs`` in one operation instead of a hundred.

diffrax (0.7.1 on) rounds a step that ends within 100 ULPs of ``t1`` onto ``t1``, and
computes that threshold at the top of its integration loop by calling
``equinox.internal.prevbefore`` a hundred times in a row. ``t1`` is traced (a new horizon
does not recompile), so the chain reaches XLA: a hundred ``next_after`` expanded into
some 2,000 scalar operations, which cost 0.4-0.6 s of every simulation program's XLA
compile on a CPU (a pendulum's 1.2-1.5 s, a fold-4panel's 6 s; measured in pairs).

:func:`install` gives diffrax's integration module a ``prevbefore`` that recognises the
chain, each call's argument being the previous call's result, and returns ``k`` ULPs
before the chain's origin as one integer subtraction on the bits. The values are those of
the chain: for every ``t1`` of normal magnitude, zero, or negative (only a ``t1`` within
100 ULPs above the smallest normal number, 2.2e-308, would differ, as XLA on a CPU treats
subnormals as zero). The hundred results before the last are unused and XLA removes them.

Tracing the hundred calls still cost 0.2-0.25 s of every simulation program (a custom
JVP each). Where diffrax's source shows the chain as ``for _ in range(100)`` around its
one ``prevbefore`` call, :func:`install` gives it :func:`_chain_end` instead: the first
call of a chain returns the chain's last value, ``t1 - 100 ULPs``, and the 99 calls that
follow hand it back untouched, so one operation is traced.
"""

from __future__ import annotations

import threading
import weakref

import equinox.internal as eqxi
import jax
import jax.numpy as jnp

_chain = threading.local()


def _int_type(dtype):
    return {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[jnp.dtype(dtype).itemsize]


def _before_impl(x, k):
    it = _int_type(x.dtype)
    b = jax.lax.bitcast_convert_type(x, it)
    k = jnp.asarray(k, it)
    neg_tiny = jax.lax.bitcast_convert_type(jnp.asarray(-jnp.finfo(x.dtype).tiny, x.dtype), it)
    # prevbefore(0) is -tiny (equinox), and each further step moves one ULP down from there
    from_zero = lambda r: neg_tiny + (r - 1)
    bits = jnp.where(x > 0, jnp.where(b >= k, b - k, from_zero(k - b)),
                     jnp.where(x == 0, from_zero(k), b + k))
    return jax.lax.bitcast_convert_type(jnp.where(jnp.isnan(x), b, bits), x.dtype)


before = jax.custom_jvp(_before_impl, nondiff_argnums=(1,))
before.__doc__ = """``k`` applications of ``equinox.internal.prevbefore`` to ``x`` (same values,
same identity derivative), as one operation."""


@before.defjvp
def _before_jvp(k, primals, tangents):
    return before(primals[0], k), tangents[0]


def prevbefore(x):
    """``equinox.internal.prevbefore``, computed from the origin of a chain of calls."""
    last = getattr(_chain, "last", None)
    if last is not None and last[0]() is x and last[1]() is not None:
        origin, k = last[1](), last[2] + 1
    else:
        origin, k = jnp.asarray(x), 1
    out = before(origin, k)
    _chain.last = (weakref.ref(out), weakref.ref(origin), k)
    return out


#: The length of diffrax's chain of ``prevbefore`` calls, as its source writes it.
CHAIN = 100
_CHAIN_SOURCE = f"for _ in range({CHAIN}):\n        t1_clip_floor = eqxi.prevbefore(t1_clip_floor)"


def _chain_end(x):
    """diffrax's chain of :data:`CHAIN` calls: its first call returns ``CHAIN`` ULPs before
    ``x``, each later call (given the previous call's result) returns its argument."""
    last = getattr(_chain, "end", None)
    if last is not None and last[0]() is x and last[1] < CHAIN:
        _chain.end = (last[0], last[1] + 1)
        return x
    out = before(jnp.asarray(x), CHAIN)
    _chain.end = (weakref.ref(out), 1)
    return out


def _whole_chain_known(integrate) -> bool:
    """Whether diffrax's module calls ``prevbefore`` once, in a loop of :data:`CHAIN`."""
    import inspect

    try:
        source = inspect.getsource(integrate)
    except (OSError, TypeError):
        return False
    return source.count("prevbefore") == 1 and _CHAIN_SOURCE in source


class _Internal:
    """``equinox.internal`` as diffrax's integration module sees it, with ``prevbefore``
    replaced (:func:`_chain_end` where the chain's length is known, else :func:`prevbefore`)."""

    def __init__(self, prev):
        self._prev = prev

    def __getattr__(self, name):
        return self._prev if name == "prevbefore" else getattr(eqxi, name)


def install():
    """Give ``diffrax._integrate`` a one-operation ``prevbefore`` (idempotent; a diffrax
    without that module or name is left as it is)."""
    import diffrax._integrate as integrate

    if getattr(integrate, "eqxi", None) is eqxi:
        integrate.eqxi = _Internal(_chain_end if _whole_chain_known(integrate) else prevbefore)


def installed() -> bool:
    import diffrax._integrate as integrate

    return isinstance(getattr(integrate, "eqxi", None), _Internal)
