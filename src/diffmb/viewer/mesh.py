"""One frame of a :class:`~diffmb.viewer.scene.Scene` as a mesh for CAD and rendering.

:func:`triangles` gives each body's surfaces in its own frame: panel polygons (ear
clipping, so non-convex faces are fine) and primitives (box, sphere, cylinder, capsule as
a cylinder with its caps' radius added). glTF 2.0 (``.gltf``, the buffer embedded as a
data URI): one node per body at its pose, two-sided materials, the lines (creases,
members, skeleton) as a line primitive in world axes; a root node turns the scene's
``z``-up world into glTF's ``y``-up. OBJ: world coordinates (``z`` up), one object per
body, lines as ``l`` records.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np

from .frames import rotate, world_points

ROLE_COLOURS = {"hub": (0.3, 0.33, 0.4), "panel": (0.78, 0.8, 0.86), "link": (0.7, 0.72, 0.78),
                "node": (0.2, 0.2, 0.2), "bar": (0.25, 0.25, 0.3), "world": (0.55, 0.57, 0.62)}


def _ear_clip(poly2: np.ndarray) -> list:
    """Triangles (index triples) of a simple polygon, counter-clockwise or not."""
    idx = list(range(len(poly2)))
    area = 0.5 * np.sum(poly2[:, 0] * np.roll(poly2[:, 1], -1) - np.roll(poly2[:, 0], -1) * poly2[:, 1])
    if area < 0:
        idx.reverse()
    out, guard = [], 0
    while len(idx) > 3 and guard < 10_000:
        guard += 1
        for k in range(len(idx)):
            i, j, m = idx[k - 1], idx[k], idx[(k + 1) % len(idx)]
            a, b, c = poly2[i], poly2[j], poly2[m]
            if np.cross(b - a, c - b) <= 1e-15:
                continue
            inside = False
            for o in idx:
                if o in (i, j, m):
                    continue
                p = poly2[o]
                d1, d2, d3 = np.cross(b - a, p - a), np.cross(c - b, p - b), np.cross(a - c, p - c)
                if d1 >= 0 and d2 >= 0 and d3 >= 0:
                    inside = True
                    break
            if not inside:
                out.append((i, j, m))
                del idx[k]
                break
        else:
            break
    if len(idx) == 3:
        out.append(tuple(idx))
    return out


def _polygon(poly) -> tuple[np.ndarray, np.ndarray]:
    P = np.asarray(poly, float)
    n = np.zeros(3)
    for a, b in zip(P, np.roll(P, -1, 0)):
        n += np.array([(a[1] - b[1]) * (a[2] + b[2]), (a[2] - b[2]) * (a[0] + b[0]), (a[0] - b[0]) * (a[1] + b[1])])
    n = n / (np.linalg.norm(n) or 1.0)
    u = np.cross([0.0, 0.0, 1.0] if abs(n[2]) < 0.9 else [1.0, 0.0, 0.0], n)
    u /= np.linalg.norm(u)
    v = np.cross(n, u)
    tris = _ear_clip(np.stack([P @ u, P @ v], 1))
    return P, np.asarray(tris, int).reshape(-1, 3)


def _box(size):
    s = np.asarray(size, float) / 2
    V = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * s
    F = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1), (2, 3, 7), (2, 7, 6),
         (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    return V, np.asarray(F, int)


def _sphere(r, n=12):
    th, ph = np.meshgrid(np.linspace(0, np.pi, n // 2 + 1), np.linspace(0, 2 * np.pi, n + 1), indexing="ij")
    V = r * np.stack([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)], -1).reshape(-1, 3)
    w = n + 1
    F = [(i * w + j, (i + 1) * w + j, (i + 1) * w + j + 1) for i in range(n // 2) for j in range(n)]
    F += [(i * w + j, (i + 1) * w + j + 1, i * w + j + 1) for i in range(n // 2) for j in range(n)]
    return V, np.asarray(F, int)


def _cylinder(r, length, n=16):
    a = np.linspace(0, 2 * np.pi, n, endpoint=False)
    ring = np.stack([r * np.cos(a), r * np.sin(a)], 1)
    V = np.concatenate([np.pad(ring, ((0, 0), (0, 1)), constant_values=-length / 2),
                        np.pad(ring, ((0, 0), (0, 1)), constant_values=length / 2),
                        [[0, 0, -length / 2], [0, 0, length / 2]]])
    F = [(k, (k + 1) % n, n + (k + 1) % n) for k in range(n)] + [(k, n + (k + 1) % n, n + k) for k in range(n)]
    F += [(2 * n, (k + 1) % n, k) for k in range(n)] + [(2 * n + 1, n + k, n + (k + 1) % n) for k in range(n)]
    return V, np.asarray(F, int)


def _primitive(pr):
    kind, size = pr["type"], pr.get("size", [])
    if kind == "mesh":
        tri = np.frombuffer(base64.b64decode(pr["triangles"]["b64"]), "<f4").astype(float)
        V, F = tri.reshape(-1, 3), np.arange(len(tri) // 3).reshape(-1, 3)
    elif kind == "box":
        V, F = _box(size)
    elif kind == "sphere":
        V, F = _sphere(size[0])
    elif kind in ("cylinder", "capsule"):
        V, F = _cylinder(size[0], size[1] + (2 * size[0] if kind == "capsule" else 0.0))
    else:
        return np.zeros((0, 3)), np.zeros((0, 3), int)
    q = np.asarray(pr.get("quat", [0, 0, 0, 1]), float)
    return rotate(np.broadcast_to(q, V.shape[:-1] + (4,)), V) + np.asarray(pr.get("pos", [0, 0, 0]), float), F


def triangles(geometry: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (V, 3), faces (T, 3))`` of one body's surfaces in its own frame."""
    Vs, Fs, base = [], [], 0
    parts = ([_polygon(p) for p in geometry.get("polygons", [])]
             + [_primitive(p) for p in geometry.get("primitives", [])])
    for V, F in parts:
        Vs.append(V)
        Fs.append(F + base)
        base += len(V)
    if not Vs:
        return np.zeros((0, 3)), np.zeros((0, 3), int)
    return np.concatenate(Vs), np.concatenate(Fs)


def frame_at(scene, t: float | None) -> int:
    """The frame nearest to time ``t`` (``None``: the last)."""
    if t is None:
        return len(scene.times) - 1
    if not float(scene.times[0]) - 1e-9 <= t <= float(scene.times[-1]) + 1e-9:
        raise ValueError(f"--at {t:g} s is outside the run (t = {float(scene.times[0]):g} to "
                         f"{float(scene.times[-1]):g} s)")
    return int(np.argmin(np.abs(np.asarray(scene.times, float) - t)))


def world_lines(scene, f: int) -> np.ndarray:
    """``(L, 2, 3)`` world end points of the frame's lines: segments and links."""
    pose = np.asarray(scene.poses[f], float)
    out = []
    for b, g in enumerate(scene.geometry):
        for s in g.get("segments", []):
            if not str(s.get("kind", "")).startswith("axis"):
                out.append([world_points(pose[b], s["p"][0]), world_points(pose[b], s["p"][1])])
    for link in scene.links:
        out.append([world_points(pose[link["a"]], link["pa"]), world_points(pose[link["b"]], link["pb"])])
    return np.asarray(out, float).reshape(-1, 2, 3)


def _atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_obj(scene, path, t: float | None = None) -> Path:
    """Frame nearest ``t`` as Wavefront OBJ in world coordinates (``z`` up)."""
    f = frame_at(scene, t)
    pose = np.asarray(scene.poses[f], float)
    lines = [f"# diffmb: {scene.title} at t = {float(scene.times[f]):.6g} s (metres, z up)"]
    base = 1
    for b, (name, g) in enumerate(zip(scene.body_names, scene.geometry)):
        V, F = triangles(g)
        if not len(V):
            continue
        W = world_points(pose[b], V)
        lines.append(f"o {str(name).replace(' ', '_')}")
        lines += [f"v {x:.7g} {y:.7g} {z:.7g}" for x, y, z in W]
        lines += [f"f {i + base} {j + base} {k + base}" for i, j, k in F]
        base += len(V)
    L = world_lines(scene, f)
    if len(L):
        lines.append("o lines")
        lines += [f"v {x:.7g} {y:.7g} {z:.7g}" for x, y, z in L.reshape(-1, 3)]
        lines += [f"l {base + 2 * k} {base + 2 * k + 1}" for k in range(len(L))]
    return _atomic(Path(path), "\n".join(lines) + "\n")


def gltf(scene, t: float | None = None) -> dict:
    """Frame nearest ``t`` as a glTF 2.0 dict (buffer embedded)."""
    f = frame_at(scene, t)
    pose = np.asarray(scene.poses[f], float)
    blob, views, accessors, meshes, nodes, materials = bytearray(), [], [], [], [], {}

    def add(array, target, kind):
        a = np.ascontiguousarray(array, dtype="<u4" if kind == "SCALAR" else "<f4")
        while len(blob) % 4:
            blob.append(0)
        views.append({"buffer": 0, "byteOffset": len(blob), "byteLength": a.nbytes, "target": target})
        blob.extend(a.tobytes())
        acc = {"bufferView": len(views) - 1, "componentType": 5125 if kind == "SCALAR" else 5126,
               "count": int(a.size if kind == "SCALAR" else len(a)), "type": kind}
        if kind == "VEC3":
            acc.update(min=a.min(0).tolist(), max=a.max(0).tolist())
        accessors.append(acc)
        return len(accessors) - 1

    def material(role):
        if role not in materials:
            materials[role] = {"name": role, "doubleSided": True, "pbrMetallicRoughness": {
                "baseColorFactor": list(ROLE_COLOURS.get(role, ROLE_COLOURS["link"])) + [1.0],
                "metallicFactor": 0.1, "roughnessFactor": 0.8}}
        return list(materials).index(role)

    children = []
    for b, (name, g) in enumerate(zip(scene.body_names, scene.geometry)):
        V, F = triangles(g)
        if not len(V):
            continue
        prim = {"attributes": {"POSITION": add(V, 34962, "VEC3")}, "indices": add(F.reshape(-1), 34963, "SCALAR"),
                "material": material(g.get("role", "link")), "mode": 4}
        meshes.append({"name": str(name), "primitives": [prim]})
        nodes.append({"name": str(name), "mesh": len(meshes) - 1, "translation": pose[b, :3].tolist(),
                      "rotation": (pose[b, 3:] / np.linalg.norm(pose[b, 3:])).tolist()})
        children.append(len(nodes) - 1)
    L = world_lines(scene, f)
    if len(L):
        lines = {"attributes": {"POSITION": add(L.reshape(-1, 3), 34962, "VEC3")}, "material": material("node"),
                 "mode": 1}
        meshes.append({"name": "lines", "primitives": [lines]})
        nodes.append({"name": "lines", "mesh": len(meshes) - 1})
        children.append(len(nodes) - 1)
    nodes.append({"name": f"{scene.title} (z up)", "rotation": [-np.sqrt(0.5), 0.0, 0.0, np.sqrt(0.5)],
                  "children": children})
    return {"asset": {"version": "2.0", "generator": "diffmb view"},
            "scene": 0, "scenes": [{"name": f"{scene.title} at t = {float(scene.times[f]):.6g} s",
                                    "nodes": [len(nodes) - 1]}],
            "nodes": nodes, "meshes": meshes, "materials": list(materials.values()), "accessors": accessors,
            "bufferViews": views, "buffers": [{"byteLength": len(blob), "uri": "data:application/octet-stream;base64,"
                                               + base64.b64encode(bytes(blob)).decode("ascii")}]}


def write_gltf(scene, path, t: float | None = None) -> Path:
    """Frame nearest ``t`` as a self-contained ``.gltf`` file."""
    return _atomic(Path(path), json.dumps(gltf(scene, t), separators=(",", ":")))
