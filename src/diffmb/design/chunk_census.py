"""What one step of a sweep's chunk program asks of an accelerator, read on any machine.

:func:`chunk_census` compiles a sweep's chunk program (:func:`diffmb.design.batch.sweep`'s
``vmap`` of a member's run and metrics) in the form an accelerator gets (``"device"``,
:func:`diffmb.math.spatial.traced_as`) on the machine at hand, a CPU included, and counts
from its text (:mod:`diffmb.simulation.program_census`): the loops without a known trip
count, the library calls and host callbacks, and the kernels launched per time step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import equinox as eqx
import jax.numpy as jnp

from ..simulation import fixed_steps, resumable
from ..simulation.program_census import Census, Loop, census, uncached
from . import batch


@dataclass(frozen=True)
class StepCensus:
    """The counts of one chunk program (per time step unless said otherwise)."""

    #: the time loop's trip count (save intervals; ``None``: unknown, diffrax's loop)
    time_loop_trips: int | None
    #: loops without a known trip count inside the time loop, at any depth
    unknown_trip_loops: int
    #: library custom calls (LAPACK, cuSOLVER, cuBLAS) per step, by target
    library_calls: dict
    #: instructions of ``lax.linalg`` operations inside the time loop, however XLA lowered
    #: them (a library call, or inline): 0 where the algebra is written out
    linalg_ops: int
    #: host callbacks in the whole program
    callbacks: int
    #: ``conditional`` instructions inside the time loop
    conditionals: int
    #: fusions + dots + custom calls + copies per step (nested loops times their trip counts;
    #: the save interval's own work spread over its steps)
    launches_per_step: float
    #: :attr:`launches_per_step` by opcode
    kernels: dict
    #: per member and vector-field evaluation: XLA's cost model (``cost_analysis``)
    flops_per_eval: float
    bytes_per_eval: float
    compile_s: float


def chunk_census(system, params_batch, *, t1: float, dt: float, solver: str = "rk4", saveat: int = 11,
                 form: str = "device", max_violation: float | None = None, loop: str = "auto") -> StepCensus:
    """Compile the chunk program of a sweep of ``params_batch`` (its members one chunk) in
    ``form`` and count it (:class:`StepCensus`)."""
    member = batch.member_runner(system, t1=t1, dt=dt, solver=solver, saveat=saveat, max_violation=max_violation)
    member = eqx.tree_at(lambda m: m.settings, member, dataclasses.replace(member.settings, loop=loop))
    B = batch._batch_size(eqx.filter(params_batch, eqx.is_array), None)
    with uncached():
        _, compile_s, compiled = batch._compiled(member, params_batch, jnp.zeros((B, 1)), form=form)
    c = census(compiled.as_text())
    flops, nbytes = _vector_field_cost(system, params_batch)
    return _count(c, compile_s, flops, nbytes, resumable.fixed_steps(t1, dt))


def _count(c: Census, compile_s, flops, nbytes, n_steps: int) -> StepCensus:
    try:
        outer = c.find(fixed_steps.SAVE_SCOPE)
        # steps per save interval from the run's step count: XLA removes a step loop of one
        # trip, and the loop then found in the steps' scope is the Runge-Kutta stages'
        per = n_steps / (outer.trip_count or 1)
        launches = outer.launches() / per
        kernels = {k: v / per for k, v in outer.kernels().items()}
        library = {k: v / per for k, v in outer.library_calls().items()}
        trips = outer.trip_count
    except KeyError:                          # diffrax's loop: its step loop is the time loop
        outer = c.find("outer-loop")
        launches, kernels, library, trips = outer.launches(), dict(outer.kernels()), dict(outer.library_calls()), None
    return StepCensus(
        time_loop_trips=trips,
        unknown_trip_loops=outer.unknown_trip_loops() + (trips is None),
        library_calls=dict(library),
        linalg_ops=outer.linalg_ops(),
        callbacks=c.top.callbacks(),
        conditionals=outer.conditionals(),
        launches_per_step=float(launches),
        kernels=kernels,
        flops_per_eval=flops,
        bytes_per_eval=nbytes,
        compile_s=compile_s,
    )


def _vector_field_cost(system, params_batch):
    """``(flops, bytes)`` of one member's vector field (XLA's cost model, once per loop body)."""
    import jax

    params = jax.tree.map(lambda x: x[0] if eqx.is_array(x) and x.ndim else x, params_batch)
    x0 = system.init_state(params)
    try:
        cost = jax.jit(lambda x, p: system.vector_field(0.0, x, p)).lower(x0, params).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        return float(cost.get("flops", float("nan"))), float(cost.get("bytes accessed", float("nan")))
    except Exception:  # a backend without a cost model
        return float("nan"), float("nan")


__all__ = ["Loop", "StepCensus", "chunk_census"]
