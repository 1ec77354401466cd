"""A sweep chunk's program carried from one worker process to the others (``jax.export``).

A worker that begins a sweep late (a killed worker's replacement, a worker joining a
running cluster) traced and lowered the chunk program again before the shared
compilation cache could answer: fold-4panel's chunk took 3.2-3.8 s of tracing for a chunk
that runs in 1.7 s, and that was most of what a lost worker cost. Here the first worker to
build the program exports it (its StableHLO and calling convention, ~0.2 MB for
fold-4panel), the driver hands those bytes to the sweep's later tasks, and a worker
without the program deserialises them and compiles the exported module, which the cache
answers (0.3 s read back against 2.7 s compiling).

Every worker compiles the exported module, the first one too, so they share one cache
entry and run one program; it is the same computation as the one-process sweep's
:func:`diffmb.design.batch._compiled` (bit for bit, tested). The exported function takes the
chunk's params as a flat list of arrays: ``jax.export`` serialises only standard
containers, not the System's modules.

Falls back to tracing on the worker (``None`` for the bytes) where ``jax.export`` cannot
carry the program: without the ``flatbuffers`` package (in the ``cluster`` extra), or for
a program with a host callback (equinox's runtime checks unless ``EQX_ON_ERROR=nan``, which
local workers have, :func:`diffmb.design.distributed.worker_env`); and where the bytes
shipped were exported for another platform than the worker's.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import equinox as eqx
import jax
import numpy as np

from ..math import spatial as sp
from .batch import _compiled, _on_cpu

#: what ``jax.export`` raises for a program or a package it cannot carry
_CANNOT_EXPORT = (ImportError, ValueError, NotImplementedError, TypeError)


class Built(NamedTuple):
    """A chunk program: ``program(dyn_chunk, x0_chunk)`` gives the chunk's metrics as NumPy
    arrays; ``exported``: its bytes for other workers (None where it could not be
    exported); ``how``: ``"shipped"`` (compiled from another worker's bytes), ``"exported"``
    (traced and exported here) or ``"traced"`` (as the one-process sweep)."""

    program: Callable
    exported: bytes | None
    compile_s: float
    how: str


def build(member, static, dyn_chunk, x0_chunk, shipped: bytes | None = None) -> Built:
    """The program for chunks of this shape: from ``shipped`` (another worker's export)
    when given and loadable here; else traced and exported here; else, where
    ``jax.export`` cannot carry it, compiled as the one-process sweep compiles it."""
    tic = time.perf_counter()
    leaves = jax.tree.leaves(dyn_chunk)
    if shipped is not None:
        try:
            program = _load(jax.export.deserialize(bytearray(shipped)), leaves, x0_chunk)
            return Built(program, bytes(shipped), time.perf_counter() - tic, "shipped")
        except Exception:  # bytes that do not load here (another platform or jaxlib, cut short):
            pass           # the worker traces the program itself, as before
    treedef = jax.tree.structure(dyn_chunk)

    def run(leaves, x0):
        return jax.vmap(member)(eqx.combine(jax.tree.unflatten(treedef, leaves), static), x0)

    try:
        with sp.traced_as(sp.batch_form(_on_cpu(dyn_chunk))):
            exported = jax.export.export(jax.jit(run))(leaves, x0_chunk)
        blob = exported.serialize()
    except _CANNOT_EXPORT:
        compiled, _, _ = _compiled(member, eqx.combine(dyn_chunk, static), x0_chunk)
        program = lambda dyn, x0: _numpy(compiled(member, eqx.combine(dyn, static), x0))
        return Built(program, None, time.perf_counter() - tic, "traced")
    return Built(_load(exported, leaves, x0_chunk), blob, time.perf_counter() - tic, "exported")


def _load(exported, leaves, x0_chunk):
    compiled = jax.jit(exported.call).lower(leaves, x0_chunk).compile()
    return lambda dyn, x0: _numpy(compiled(jax.tree.leaves(dyn), x0))


def _numpy(out: dict) -> dict:
    return {k: np.asarray(v) for k, v in jax.block_until_ready(out).items()}
