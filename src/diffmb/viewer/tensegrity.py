"""The scene of a tensegrity run: nodes as small spheres, bars as cylinders, strings as
lines.

Each node is a body with no rotation, each bar a body at its midpoint with ``z`` along
it, each string a link between two nodes. Quantities: the strings' tension
``K max(|s| - l0, 0)`` (with its slack smoothing); for compressible bars their axial
force ``E A (l - l0) / l0``, tension positive (a rigid bar's force is a constraint
multiplier the run does not keep).
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


def bar_poses(nodes: np.ndarray, bars) -> np.ndarray:
    """``(F, B, 7)`` poses of the bars: origin at each bar's midpoint, ``z`` along it."""
    if not bars:
        return np.zeros(nodes.shape[:1] + (0, 7))
    i, j = np.asarray(bars).T
    d = nodes[:, j] - nodes[:, i]
    d = d / np.linalg.norm(d, axis=-1, keepdims=True)
    q = np.concatenate([np.stack([-d[..., 1], d[..., 0], np.zeros_like(d[..., 0])], -1), 1.0 + d[..., 2:3]], -1)
    flip = q[..., 3] < 1e-9  # pointing down -z: half a turn about x
    q[flip] = [1.0, 0.0, 0.0, 0.0]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.concatenate([(nodes[:, i] + nodes[:, j]) / 2, q], -1)


def scene(run, fps: float, max_frames: int) -> Scene | None:
    """The tensegrity scene of ``run``, or ``None`` when it is not a tensegrity run."""
    system = run.system
    if not isinstance(system, TensegritySystem):
        return None
    tr = run.traj.trimmed()
    pick = frame_indices(np.asarray(tr.ts), fps, max_frames)
    ts, xs = np.asarray(tr.ts)[pick], np.asarray(tr.xs)[pick]
    n, n_b = system.n_nodes, len(system.bars)
    nodes = xs[:, :3 * n].reshape(len(ts), n, 3)
    poses = np.concatenate([np.concatenate([nodes, np.broadcast_to([0.0, 0.0, 0.0, 1.0], (len(ts), n, 4))], -1),
                            bar_poses(nodes, system.bars)], 1)
    links = [{"a": int(i), "pa": [0, 0, 0], "b": int(j), "pb": [0, 0, 0], "kind": "string"} for i, j in system.strings]
    spread = float(np.ptp(nodes[0], axis=0).max()) or 1.0
    geometry = [{"polygons": [], "segments": [], "role": "node",
                 "primitives": [{"type": "sphere", "size": [0.012 * spread], "pos": [0, 0, 0], "quat": [0, 0, 0, 1]}]}
                for _ in range(n)]
    radius = np.broadcast_to(np.asarray(run.params["bar_radius"], float), (n_b,))
    length = np.broadcast_to(np.asarray(run.params["bar_length"], float), (n_b,))
    geometry += [{"polygons": [], "segments": [], "role": "bar", "primitives": [
        {"type": "cylinder", "size": [max(float(r), 0.006 * spread), float(L)], "pos": [0, 0, 0],
         "quat": [0, 0, 0, 1]}]}
        for r, L in zip(radius, length)]
    force = member_forces(system, run.params, xs)
    quantities = [Quantity("string tension", "N", "links", force[:, n_b:])]
    if system.compressible:
        quantities.append(Quantity("bar axial force (tension +)", "N", "bodies",
                                   np.concatenate([np.full((len(ts), n), np.nan), force[:, :n_b]], 1), signed=True))
    notes = ["Bars as cylinders of their rest length and radius (at least 0.6 % of the structure); strings as "
             "lines."] + ([] if system.compressible else [
                 "Rigid bars: their compression is a constraint force the run does not keep."])
    return Scene(
        title=run.name, times=ts.astype(np.float32),
        body_names=[f"node {k + 1}" for k in range(n)] + [f"bar {k + 1}" for k in range(n_b)],
        poses=poses.astype(np.float32), geometry=geometry, links=links, quantities=quantities,
        hub=None, kind="tensegrity", notes=notes,
        info={"nodes": n, "bars": n_b, "strings": len(system.strings)},
    )
