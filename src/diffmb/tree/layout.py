"""The static index structure of a rigid-body tree, computed once per topology.

Every tree algorithm in diffmb runs on whole arrays of bodies at once; what makes that
possible is this table of static integer indices (Pinocchio keeps the same facts in its
``Model``: ``parents``, ``idx_v``, ``nv``, the supports of each joint). A
:class:`TreeLayout` depends only on a model's static fields, is built in NumPy before
tracing and cached per topology, so it costs nothing per evaluation and adds no
traced graph.

* ``dof_body[j]``: the body whose joint owns generalized velocity ``j`` (public order);
* ``groups``: the bodies of each joint kind and their columns of ``q`` (kind-specific
  joint models run once per kind, vmapped over its bodies);
* ``jumps``: the pointer-doubling tables of :mod:`diffmb.tree.scan` — ``jumps[k][i]`` is the
  ``2**k``-th ancestor of body ``i`` (the sentinel ``N`` past the root), so a prefix over
  every root path takes ``ceil(log2(depth + 1))`` vectorised rounds;
* ``ancestors``: ``(N, N)`` boolean, ``[i, j]`` true when ``j`` is ``i`` or an ancestor (small
  trees sum along root paths with one product by it instead of doubling rounds);
* ``dof_support``: ``(nv, nv)`` boolean, ``[i, j]`` true when ``dof_body[i]`` is ``dof_body[j]``
  or one of its ancestors (the nonzero pattern of the mass matrix's upper part);
* ``levels``: the bodies of each depth, split by joint kind and padded to a common width,
  for the level-by-level scans of the articulated-body algorithm; a level's *slots* are
  its groups' columns side by side (level 0 on its own, the deeper levels all of one
  width), and ``slot_parent[l, s]`` is the slot, one level up, of the parent of slot
  ``s`` of deeper level ``l`` (``-1``: padding), so a scan hands each level's results to
  the level above through a small matrix instead of an array of every body.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import joints as jt


@dataclass(frozen=True, eq=False)
class LevelGroup:
    """Bodies of one joint kind at every depth level, padded to width ``W``.

    ``ids (L, W)``: body index (padding: the trash row ``N + 1``); ``parent (L, W)``: the
    parent's row (``N`` for the world and for padding); ``dofs (L, W, nv_k)``: public
    velocity indices (padding: ``nv``, a zero column); ``valid (L, W)``.
    """

    kind: str
    ids: np.ndarray
    parent: np.ndarray
    dofs: np.ndarray
    valid: np.ndarray


@dataclass(frozen=True, eq=False)
class TreeLayout:
    n_bodies: int
    nv: int
    parents: np.ndarray
    depth: np.ndarray
    dof_body: np.ndarray
    groups: tuple          # ((kind, bodies (n_k,), qidx (n_k, nv_k)), ...) in kind order
    body_order: np.ndarray  # inverse permutation: concatenated groups -> body order
    dof_order: np.ndarray   # inverse permutation: concatenated group dofs -> public order
    jumps: tuple
    dof_support: np.ndarray
    levels: tuple          # (level-0 groups, deeper-level groups): tuples of LevelGroup
    slot_parent: np.ndarray  # (deeper levels, their slots): parent's slot one level up, -1 padding
    ancestors: np.ndarray  # (N, N) bool: [i, j] true when j is i or one of its ancestors

    def path_dofs(self, body: int) -> list:
        """Public velocity indices of every joint on the path from ``body`` to the world."""
        out = []
        while body >= 0:
            out += [j for j in range(self.nv) if self.dof_body[j] == body]
            body = int(self.parents[body])
        return out


def layout(model) -> TreeLayout:
    """The :class:`TreeLayout` of ``model`` (cached per topology)."""
    return _layout(model.parents, model.joint_kinds, model.body_slices)


@functools.lru_cache(maxsize=512)
def _layout(parents, kinds, body_slices) -> TreeLayout:
    N = len(parents)
    par = np.asarray(parents, dtype=np.int32).reshape(N)
    nv = int(sum(e - s for s, e in body_slices))
    depth = np.zeros(N, np.int32)
    for i in range(N):
        if par[i] >= i:
            raise ValueError(f"bodies must be in topological order (body {i} has parent {par[i]})")
        depth[i] = 0 if par[i] < 0 else depth[par[i]] + 1
    dof_body = np.zeros(nv, np.int32)
    for b, (s, e) in enumerate(body_slices):
        dof_body[s:e] = b

    groups, order, dof_cat = [], [], []
    for kind in jt.NV:
        bodies = np.array([i for i in range(N) if kinds[i] == kind], np.int32)
        if bodies.size == 0:
            continue
        qidx = np.array([np.arange(*body_slices[i]) for i in bodies], np.int32).reshape(len(bodies), jt.NV[kind])
        groups.append((kind, bodies, qidx))
        order.append(bodies)
        dof_cat.append(qidx.reshape(-1))
    body_order = np.argsort(np.concatenate(order)).astype(np.int32)
    dof_order = np.argsort(np.concatenate(dof_cat)).astype(np.int32)

    # pointer doubling: jumps[k][i] = 2**k-th ancestor (sentinel N past the root)
    jumps = []
    j = np.where(par < 0, N, par).astype(np.int32)
    ext = np.append(j, N).astype(np.int32)
    span = 1
    while span <= (int(depth.max()) if N else 0):
        jumps.append(ext[:N].copy())
        ext = ext[ext]
        span *= 2
    # dof support: body of i is body of j or an ancestor of it
    anc = np.zeros((N, N), bool)
    for i in range(N):
        anc[i, i] = True
        if par[i] >= 0:
            anc[i] |= anc[par[i]]
    support = anc[dof_body][:, dof_body].T  # [i, j]: dof_body[i] in ancestors-or-self of dof_body[j]

    levels = (_level_groups(kinds, par, depth, body_slices, nv, range(0, 1)),
              _level_groups(kinds, par, depth, body_slices, nv, range(1, int(depth.max()) + 1 if N else 1)))
    return TreeLayout(N, nv, par, depth, dof_body, tuple(groups), body_order, dof_order,
                      tuple(jumps), support, levels, _slot_parents(levels, par), anc)


def _slot_parents(levels, par) -> np.ndarray:
    g0, g = levels
    slot = {}
    for off, grp in zip(np.cumsum([0] + [x.ids.shape[1] for x in g0]), g0):
        for w, b in enumerate(grp.ids[0]):
            if grp.valid[0, w]:
                slot[int(b)] = off + w
    depth = g[0].ids.shape[0] if g else 0
    offsets = np.cumsum([0] + [x.ids.shape[1] for x in g])
    out = np.full((depth, int(offsets[-1])), -1, np.int32)
    for li in range(depth):
        above, slot = slot, {}
        for off, grp in zip(offsets, g):
            for w, b in enumerate(grp.ids[li]):
                if grp.valid[li, w]:
                    slot[int(b)] = off + w
                    out[li, off + w] = above[int(par[b])]
    return out


def _level_groups(kinds, par, depth, body_slices, nv, level_range) -> tuple:
    N = len(par)
    levels = list(level_range)
    out = []
    for kind in jt.NV:
        per = [[i for i in range(N) if depth[i] == d and kinds[i] == kind] for d in levels]
        W = max((len(p) for p in per), default=0)
        if W == 0:
            continue
        k = jt.NV[kind]
        L = len(levels)
        ids = np.full((L, W), N + 1, np.int32)
        parent = np.full((L, W), N, np.int32)
        dofs = np.full((L, W, k), nv, np.int32)
        valid = np.zeros((L, W), bool)
        for li, bodies in enumerate(per):
            for w, b in enumerate(bodies):
                ids[li, w] = b
                parent[li, w] = N if par[b] < 0 else par[b]
                dofs[li, w] = np.arange(*body_slices[b])
                valid[li, w] = True
        out.append(LevelGroup(kind, ids, parent, dofs, valid))
    return tuple(out)
