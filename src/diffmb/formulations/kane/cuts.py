"""Cut joints (Madonna; Fulton & Schaub sec. 2.3): node pairs on a forest of trees,
their loops, and the choice of independent speeds by pivoted LU of the constraint
Jacobian."""


from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ...closures.nodes import ROW_NAMES, Closure, closure_rows
from ...tree.layout import layout
from ...tree.model import Model


@dataclass(frozen=True)
class Cut:
    """One cut joint: node A on ``(tree_a, body_a)``, node B on ``(tree_b, body_b)``."""

    name: str
    tree_a: int
    body_a: int
    tree_b: int
    body_b: int
    rows: tuple

    @property
    def free_rotations(self) -> tuple:
        return tuple(i for i in range(3) if i not in self.rows)


class CutJoints(eqx.Module):
    """Node placements of the cut joints (arrays) and their static description.

    ``rot_a (P, 3, 3)``: DCM [node A, body A]; ``pos_a (P, 3)``: node A's origin in body-A
    coordinates (likewise for B).
    """

    rot_a: jnp.ndarray
    pos_a: jnp.ndarray
    rot_b: jnp.ndarray
    pos_b: jnp.ndarray
    cuts: tuple = eqx.field(static=True)

    @property
    def labels(self) -> list:
        return [f"{c.name}:{ROW_NAMES[r]}" for c in self.cuts for r in range(6)]


def _locate(models, name, what):
    hits = [(k, m.body_names.index(name)) for k, m in enumerate(models) if name in m.body_names]
    if not hits:
        known = [b for m in models for b in m.body_names]
        raise ValueError(f"{what}: unknown body {name!r}; bodies are {known}")
    if len(hits) > 1:
        raise ValueError(f"{what}: body name {name!r} appears in several trees; names must be unique")
    return hits[0]


def make_cuts(models, pairs) -> CutJoints:
    """:class:`CutJoints` from pair descriptions (dicts), bodies named across the forest.

    Keys: ``name``, ``body_a``, ``body_b`` (body names), ``kind`` (``weld`` | ``point`` |
    ``hinge``, see :func:`diffmb.closures.nodes.closure_rows`), ``axis`` (a hinge's free
    axis of node A), ``pos_a``/``pos_b`` and optional ``rot_a``/``rot_b`` (DCM [node, body]).
    """
    models = _as_models(models)
    cuts, ra, pa, rb, pb = [], [], [], [], []
    pairs = list(pairs)
    if not pairs:
        raise ValueError("make_cuts: no cut joints given")
    for k, p in enumerate(pairs):
        name = p.get("name", f"cut{k}")
        for key in ("body_a", "body_b"):
            if key not in p:
                raise ValueError(f"cut {name!r}: missing {key!r}")
        ta, ia = _locate(models, p["body_a"], f"cut {name!r} body_a")
        tb, ib = _locate(models, p["body_b"], f"cut {name!r} body_b")
        if (ta, ia) == (tb, ib):
            raise ValueError(f"cut {name!r}: both nodes are on body {p['body_a']!r}")
        rows = closure_rows(p.get("kind", "weld"), p.get("axis", 0))
        cuts.append(Cut(name, ta, ia, tb, ib, rows))
        for key, lst, shape in (("rot_a", ra, (3, 3)), ("rot_b", rb, (3, 3)),
                                ("pos_a", pa, (3,)), ("pos_b", pb, (3,))):
            default = np.eye(3) if shape == (3, 3) else np.zeros(3)
            a = np.asarray(p.get(key, default), float)
            if a.shape != shape or not np.all(np.isfinite(a)):
                raise ValueError(f"cut {name!r}: {key} must be a finite array of shape {shape}")
            if shape == (3, 3) and (not np.allclose(a @ a.T, np.eye(3), atol=1e-8) or np.linalg.det(a) < 0):
                raise ValueError(f"cut {name!r}: {key} is not a proper rotation (DCM)")
            lst.append(a)
    return CutJoints(rot_a=jnp.asarray(np.stack(ra)), pos_a=jnp.asarray(np.stack(pa)),
                     rot_b=jnp.asarray(np.stack(rb)), pos_b=jnp.asarray(np.stack(pb)),
                     cuts=tuple(cuts))


def _as_models(models) -> tuple:
    if isinstance(models, Model):
        return (models,)
    models = tuple(models)
    if not models or not all(isinstance(m, Model) for m in models):
        raise TypeError("models: expected a diffmb Model or a non-empty sequence of Models")
    return models


def _forest_loops(models, cuts) -> tuple:
    """``(closures, paths, nv)`` of the cuts with forest-global body and speed indices."""
    body0 = np.concatenate([[0], np.cumsum([m.n_bodies for m in models])]).astype(int)
    dof0 = np.concatenate([[0], np.cumsum([m.nv for m in models])]).astype(int)
    closures, paths = [], []
    for c in cuts.cuts:
        closures.append(Closure(c.name, int(body0[c.tree_a] + c.body_a),
                                int(body0[c.tree_b] + c.body_b), c.rows))
        pa = [int(dof0[c.tree_a]) + j for j in layout(models[c.tree_a]).path_dofs(c.body_a)]
        pb = [int(dof0[c.tree_b]) + j for j in layout(models[c.tree_b]).path_dofs(c.body_b)]
        if c.tree_a != c.tree_b:
            shared = set()
        else:
            shared = set(pa) & set(pb)
        path = [(j, 1.0) for j in pb if j not in shared] + [(j, -1.0) for j in pa if j not in shared]
        paths.append((tuple(j for j, _ in path), tuple(s for _, s in path)))
    return tuple(closures), tuple(paths), int(dof0[-1])


def _lu_pivot_ratio(lu):
    d = jnp.abs(jnp.diagonal(lu))
    return jnp.min(d) / jnp.maximum(jnp.max(d), 1e-300)


def _greedy_partition(C):
    """Column-pivoted Gram-Schmidt on ``C`` (m x n): ``perm`` with the ``n - m``
    independent columns first, then the ``m`` pivot (dependent) columns, both ascending."""
    m, n = C.shape
    R = C
    chosen = jnp.zeros(n, bool)
    for _ in range(m):
        norms = jnp.where(chosen, -1.0, jnp.sum(R * R, axis=0))
        j = jnp.argmax(norms)
        col = R[:, j]
        v = col / jnp.sqrt(jnp.maximum(jnp.sum(col * col), 1e-300))
        R = R - v[:, None] * (v @ R)[None, :]
        chosen = chosen.at[j].set(True)
    return jnp.argsort(chosen, stable=True)


