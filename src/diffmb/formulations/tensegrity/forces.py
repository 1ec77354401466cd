"""Node forces on a tensegrity: time-dependent loads applied at nodes."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class NodeForce:
    """External node forces ``f(t)`` (eq. 9): each entry ``(node, axis, sign)`` gets
    ``sign * amplitude * shape(t)``; ``shape``: ``sin`` (``sin(omega t)``) or ``doublet``
    (``+1`` on ``[t_start, t_start + width)``, ``-1`` on the next ``width``, else 0).
    Hashable and compared by value, so rebuilding a scenario does not recompile.
    Numbers (``amplitude``, ``omega``, ``t_start``, ``width``) live in ``params["forcing"]``.
    """

    entries: tuple
    shape: str = "sin"

    def __call__(self, t, q, forcing, n_nodes):
        if self.shape == "sin":
            s = jnp.sin(forcing["omega"] * t)
        elif self.shape == "doublet":
            t0, w = forcing["t_start"], forcing["width"]
            s = jnp.where((t >= t0) & (t < t0 + w), 1.0, jnp.where((t >= t0 + w) & (t < t0 + 2 * w), -1.0, 0.0))
        else:  # pragma: no cover - validated in __post_init__
            raise ValueError(self.shape)
        F = jnp.zeros((n_nodes, 3), q.dtype)
        for node, axis, sign in self.entries:
            F = F.at[node, axis].add(sign * forcing["amplitude"] * s)
        return F.reshape(-1)

    def jump_times(self, forcing):
        """The doublet's switching times ``t_start + (0, 1, 2) width``; ``None`` for ``sin``."""
        if self.shape != "doublet":
            return None
        return forcing["t_start"] + forcing["width"] * jnp.arange(3.0)

    def __post_init__(self):
        if self.shape not in ("sin", "doublet"):
            raise ValueError(f"NodeForce shape: expected 'sin' or 'doublet', got {self.shape!r}")
