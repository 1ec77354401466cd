"""The scene of a tensegrity run: nodes as small spheres, bars and strings as lines.

Each node is a body with no rotation; each bar and string a link between two nodes.
Quantity: the member's axial force, tension positive: a string's ``K max(|s| - l0, 0)``
(with its slack smoothing), a compressible bar's ``E A (l - l0) / l0``; a rigid bar's
force is a constraint multiplier the run does not keep, so it shows no value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..formulations.tensegrity.system import TensegritySystem
from .scene import Quantity, Scene, frame_indices


def member_forces(system: TensegritySystem, params, xs: np.ndarray) -> np.ndarray:
    """``(F, bars + strings)`` axial forces [N], tension positive (NaN for rigid bars)."""
    n3 = 3 * system.n_nodes

    def one(x):
        q = x[:n3]
        N = q.reshape(-1, 3)
        sigma = system.string_force_density(q, params)
        if system.strings:
            i, j = np.asarray(system.strings).T
            f_s = sigma * jnp.linalg.norm(N[j] - N[i], axis=1)
        else:
            f_s = jnp.zeros(0, q.dtype)
        if system.bars and system.compressible:
            i, j = np.asarray(system.bars).T
            length = jnp.linalg.norm(N[j] - N[i], axis=1)
            l0 = params["bar_length"]
            f_b = params["bar_E"] * jnp.pi * params["bar_radius"] ** 2 / l0 * (length - l0)
        else:
            f_b = jnp.full(len(system.bars), jnp.nan, q.dtype)
        return jnp.concatenate([f_b, f_s])

    return np.asarray(jax.jit(jax.vmap(one))(np.asarray(xs)))


def scene(run, fps: float, max_frames: int) -> Scene | None:
    """The tensegrity scene of ``run``, or ``None`` when it is not a tensegrity run."""
    system = run.system
    if not isinstance(system, TensegritySystem):
        return None
    tr = run.traj.trimmed()
    pick = frame_indices(np.asarray(tr.ts), fps, max_frames)
    ts, xs = np.asarray(tr.ts)[pick], np.asarray(tr.xs)[pick]
    n = system.n_nodes
    nodes = xs[:, :3 * n].reshape(len(ts), n, 3)
    poses = np.concatenate([nodes, np.broadcast_to([0.0, 0.0, 0.0, 1.0], (len(ts), n, 4))], -1)
    links = ([{"a": int(i), "pa": [0, 0, 0], "b": int(j), "pb": [0, 0, 0], "kind": "bar"} for i, j in system.bars]
             + [{"a": int(i), "pa": [0, 0, 0], "b": int(j), "pb": [0, 0, 0], "kind": "string"}
                for i, j in system.strings])
    spread = float(np.ptp(nodes[0], axis=0).max()) or 1.0
    geometry = [{"polygons": [], "segments": [], "role": "node",
                 "primitives": [{"type": "sphere", "size": [0.012 * spread], "pos": [0, 0, 0], "quat": [0, 0, 0, 1]}]}
                for _ in range(n)]
    notes = [] if system.compressible else [
        "Rigid bars: their compression is a constraint force the run does not keep; they are drawn dark."]
    return Scene(
        title=run.name, times=ts.astype(np.float32), body_names=[f"node {k + 1}" for k in range(n)],
        poses=poses.astype(np.float32), geometry=geometry, links=links,
        quantities=[Quantity("member force (tension +)", "N", "links",
                             member_forces(system, run.params, xs), signed=True)],
        hub=None, kind="tensegrity", notes=notes,
        info={"nodes": n, "bars": len(system.bars), "strings": len(system.strings)},
    )
