"""Batched evaluation on a CPU: ``vmap`` in cache-sized blocks, small products written out.

``jax.jit(jax.vmap(f))`` over a large batch makes every intermediate of ``f`` a
batch-long array. On a CPU two things then cost more than the arithmetic:

* XLA runs a reduction over a short axis (the 3 and 6 of spatial algebra) as a scalar
  loop per output element; :func:`diffmb.math.spatial.written_out` traces those products as
  elementwise chains that vectorise over the batch;
* each of the few hundred kernels of a dynamics evaluation streams its batch-long
  operands through memory; in blocks of about a hundred members they stay in cache.

:func:`vmap_blocks` does both: ``lax.map`` over blocks of ``block`` members, each block
vmapped. Measured (forward dynamics, ABA, random 32-body chain, 1024 states, 2-core
CPU): 11.5 us per state in blocks of 128 against 37 us as one vmapped call in the
written-out form and 44 to 88 us in the default form (``experiments/bench_tree.py``).
Accelerators keep plain ``vmap``: their kernels see the whole batch at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from . import spatial

#: Members per block on a CPU (``experiments/bench_tree.py``: 32-body ABA per state 22.4 /
#: 21.1 / 17.5 / 23.5 / 44.3 us in blocks of 32 / 64 / 128 / 256 / 1024).
BLOCK = 128


def _on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def vmap_blocks(f: Callable, block: int = BLOCK) -> Callable:
    """``f`` mapped over the leading axis of every array argument, jitted: on a CPU as
    ``lax.map`` over vmapped blocks of ``block`` members (the last block filled up with
    copies of the first member, dropped from the result) traced with the small products
    written out; elsewhere as ``jit(vmap(f))``. Non-array arguments are not allowed;
    close over them instead. On a CPU, a closed-chain projection inside ``f`` stops at
    round-off in a while loop (:func:`diffmb.closures.dynamics.project_state`): derivatives
    through it in forward mode only."""
    vf = jax.vmap(f)
    cpu = _on_cpu()

    def blocked(*args):
        n = jax.tree.leaves(args)[0].shape[0]
        size = min(block, n)
        count = math.ceil(n / size)

        def split(x):
            fill = jnp.broadcast_to(x[:1], (count * size - n,) + x.shape[1:])
            return jnp.concatenate([x, fill]).reshape((count, size) + x.shape[1:])

        out = lax.map(lambda a: vf(*a), jax.tree.map(split, args))
        return jax.tree.map(lambda y: y.reshape((count * size,) + y.shape[2:])[:n], out)

    program = jax.jit(blocked if cpu else vf)

    def call(*args):
        with spatial.written_out(cpu):
            return program(*args)

    return call


__all__ = ["BLOCK", "vmap_blocks"]
