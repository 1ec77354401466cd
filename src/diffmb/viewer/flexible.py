"""The scene of a flexible-body run: each body's frame moves rigidly, its nodes deflect by
its modes.

A body's nodes (undeformed, body axes) and mode shapes ``phi (K, 3, n)`` go into the
page once, its modal amplitudes ``eta (F, n)`` per frame, so the page draws the deformed
appendage ``nodes + phi eta`` (with an exaggeration factor) without carrying vertices.
The lines join each node to its nearest neighbours (a boom's chain, a frame's members
from the hub): the modal data keep nodes, not elements. The modal data come from the
scenario (:data:`MODAL`); bodies' poses from the system's own forward pass.

Quantity: each body's largest nodal deflection ``max_k |phi_k eta|`` [m].
"""

from __future__ import annotations

import jax
import numpy as np

from ..formulations.flexible.system import FlexibleSystem
from ..scenarios.flexible_spacecraft import beam_body, sail_modal
from .scene import Quantity, Scene, dcm_to_quat, frame_indices, packed

#: Per scenario: ``values -> [ModalData per body]``.
MODAL = {"solar-sail-slew": lambda v: [sail_modal(v)], "flex-4body": lambda v: [beam_body(v)] * 4}


def chain_edges(nodes: np.ndarray, tol: float = 1.02) -> list:
    """Pairs ``(i, j)`` joining each node to those within ``tol`` x its nearest distance."""
    P = np.asarray(nodes, float)
    d = np.linalg.norm(P[:, None] - P[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    near = d.min(1)
    return sorted({(min(i, j), max(i, j)) for i in range(len(P)) for j in np.flatnonzero(d[i] <= tol * near[i])})


def frames_and_modes(system: FlexibleSystem, params, xs: np.ndarray):
    """``(poses (F, N, 7), etas [per body (F, n_i)])`` at the states ``xs``."""
    def one(x):
        xc, u = system.split(x)
        _, _, poses = system.kinematics(xc, system.clock_time(x), u, params)
        return jax.numpy.stack([E for E, _ in poses]), jax.numpy.stack([r for _, r in poses])

    E, r = (np.asarray(a, float) for a in jax.jit(jax.vmap(one))(np.asarray(xs)))
    poses = np.concatenate([r, dcm_to_quat(E)], -1)
    etas = []
    for b in range(system.n_bodies):
        blocks = [system.blocks(x[:system.n_coords])[b][1] for x in np.asarray(xs)]
        etas.append(np.asarray(blocks, float).reshape(len(xs), -1))
    return poses, etas


def scene(run, fps: float, max_frames: int) -> Scene | None:
    """The flexible scene of ``run``, or ``None`` when it is not a flexible run this module
    has modal data for."""
    system = run.system
    if not isinstance(system, FlexibleSystem) or run.name not in MODAL:
        return None
    modal = MODAL[run.name](run.values)
    tr = run.traj.trimmed()
    pick = frame_indices(np.asarray(tr.ts), fps, max_frames)
    ts, xs = np.asarray(tr.ts)[pick], np.asarray(tr.xs)[pick]
    poses, etas = frames_and_modes(system, run.params, xs)
    geometry, deflection = [], []
    for data, eta, n in zip(modal, etas, system.n_modes):
        phi = np.asarray(data.phi, float)[:, :, :n]
        geometry.append({"polygons": [], "segments": [], "role": "link",
                         "flex": {"nodes": np.asarray(data.nodes, float).tolist(), "edges": chain_edges(data.nodes),
                                  "phi": packed(phi.reshape(-1, n)), "eta": packed(eta[:, :n])}})
        deflection.append(np.linalg.norm(np.einsum("kan,fn->fka", phi, eta[:, :n]), axis=-1).max(-1))
    parents = list(system.parents)
    links = [{"a": p, "pa": [0, 0, 0], "b": i, "pb": [0, 0, 0], "kind": "skeleton"}
             for i, p in enumerate(parents) if p >= 0]
    return Scene(
        title=run.name, times=ts.astype(np.float32), body_names=list(system.names), poses=poses.astype(np.float32),
        geometry=geometry, links=links,
        quantities=[Quantity("largest modal deflection", "m", "bodies", np.stack(deflection, -1))],
        hub=0 if system.kinds[0] == "free" else None, kind="flexible",
        notes=["Booms and beams drawn through their nodes, deflected by their modes (exaggerate with "
               "'deflection x'); the membrane is not drawn."],
        info={"bodies": system.n_bodies, "modes": sum(system.n_modes)},
    )
