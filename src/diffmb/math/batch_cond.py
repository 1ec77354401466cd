"""A branch that stays a branch in a batch.

``jax.vmap`` turns a ``lax.cond`` whose predicate differs from member to member into both
branches and a select: every member pays for the expensive branch at every call. A
contact force that is needed only while panels are within reach (rarely, while a fold
deploys) then costs a sweep as much as if they always were. :func:`cond_any` keeps the
branch: batched, it runs the expensive branch for the whole batch, masked, only when some
member takes it, and the cheap one otherwise. Its derivatives are ``lax.cond``'s, in
forward and reverse mode (a batch of derivatives selects, as ``vmap`` of ``lax.cond``
does).

In the accelerator form of a program (:func:`~diffmb.math.spatial.contraction_form`
``"device"``) it is a select of both branches instead: on a GPU a conditional reads its
predicate back to the host, a round trip per call that the form exists to remove.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .spatial import contraction_form


def cond_any(pred, true_fn, false_fn, operand):
    """``lax.cond(pred, true_fn, false_fn, operand)``; under ``vmap`` with a batched
    ``pred``, ``true_fn`` runs (for every member, each member keeping its own branch's
    value) only when ``any(pred)``. The branches must take everything traced through
    ``operand`` (closing over a traced value is an error in the batch rule), and return
    arrays of the same structure."""

    if contraction_form() == "device":
        a, b = true_fn(operand), false_fn(operand)
        return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)

    def plain(pred, operand):
        return jax.lax.cond(pred, true_fn, false_fn, operand)

    @jax.custom_batching.custom_vmap
    def batched(pred, operand):
        return plain(pred, operand)

    @batched.def_vmap
    def rule(axis_size, in_batched, pred, operand):
        pred_batched, operand_batched = in_batched
        axes = (jax.tree.map(lambda b: 0 if b else None, operand_batched),)
        on = lambda o: jax.vmap(true_fn, in_axes=axes, axis_size=axis_size)(o)
        off = lambda o: jax.vmap(false_fn, in_axes=axes, axis_size=axis_size)(o)
        # the branch is cond_any again, not lax.cond: under a second vmap (a sweep's members
        # around its save points) a lax.cond would become a select of both branches
        if not pred_batched:
            out = cond_any(pred, on, off, operand)
        else:
            def some(o):
                pred, o = o
                a, b = on(o), off(o)
                return jax.tree.map(lambda x, y: jnp.where(pred.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)

            out = cond_any(jnp.any(pred), some, lambda o: off(o[1]), (pred, operand))
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def branch(pred, operand):
        return batched(pred, operand)

    @branch.defjvp
    def branch_jvp(primals, tangents):
        pred, operand = primals
        return jax.jvp(lambda o: plain(pred, o), (operand,), (tangents[1],))

    return branch(pred, operand)
