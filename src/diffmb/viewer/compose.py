"""Several scenes in one: a few sweep members side by side, on the first one's clock."""

from __future__ import annotations

import numpy as np

from .frames import world_points
from .scene import Quantity, Scene


def extent(scene: Scene) -> float:
    """The largest side of the box the scene's bodies and geometry sweep over the run."""
    pts = [scene.poses[..., :3].reshape(-1, 3).astype(float)]
    for b, g in enumerate(scene.geometry):
        local = [p for poly in g.get("polygons", []) for p in poly] + [p for s in g.get("segments", []) for p in s["p"]]
        if local:
            pose = scene.poses[:, b].astype(float)
            pts += [world_points(pose[:, None], np.asarray(local, float)[None]).reshape(-1, 3)]
    P = np.concatenate(pts)
    return float(np.ptp(P, axis=0).max()) if len(P) else 1.0


def side_by_side(scenes: list, labels: list, title: str, gap: float = 0.25) -> Scene:
    """One scene of ``scenes`` placed along ``+y``, ``(1 + gap)`` x the largest extent
    apart, each shown at the first scene's frame times (the nearest of its own frames);
    bodies named ``"<label>: <body>"``; the quantities the scenes share, side by side."""
    first = scenes[0]
    times = np.asarray(first.times, float)
    step = (1.0 + gap) * max(extent(s) for s in scenes)
    poses, geometry, links, names, hub = [], [], [], [], first.hub
    shared = [q.name for q in first.quantities if all(q.name in {x.name for x in s.quantities} for s in scenes)]
    values = {name: [] for name in shared}
    base = 0
    for k, (s, label) in enumerate(zip(scenes, labels)):
        t = np.asarray(s.times, float)
        pick = np.clip(np.searchsorted(t, times - 1e-9), 0, len(t) - 1)
        p = s.poses[pick].astype(np.float32)
        p[..., 1] += np.float32(k * step)
        poses.append(p)
        geometry += s.geometry
        links += [{**link, "a": link["a"] + base, "b": link["b"] + base} for link in s.links]
        names += [f"{label}: {n}" for n in s.body_names]
        for q in s.quantities:
            if q.name in values:
                values[q.name].append(np.asarray(q.values)[pick])
        base += len(s.body_names)
    quantities = [Quantity(q.name, q.unit, q.target, np.concatenate(values[q.name], 1), q.signed)
                  for q in first.quantities if q.name in values]
    return Scene(
        title=title, times=first.times, body_names=names, poses=np.concatenate(poses, 1), geometry=geometry,
        links=links, quantities=quantities, hub=hub, kind=first.kind,
        notes=list(first.notes) + [f"{len(scenes)} members side by side along +y, {step:.3g} m apart: "
                                   + ", ".join(labels) + " (follow the hub: the first one's)."],
        info={"members": ", ".join(labels)},
    )
