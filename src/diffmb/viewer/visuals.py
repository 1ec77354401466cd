"""Visual primitives of a model file, placed on the bodies of the built model.

URDF: each link's ``<visual>`` with a ``box``, ``sphere``, ``cylinder`` or an STL or OBJ
``mesh`` (:mod:`.mesh_files`; Collada is not read: the body then shows its frame). MJCF:
each body's geoms of type ``box``, ``sphere``, ``cylinder``, ``capsule`` or ``mesh``, as
MuJoCo compiles them (defaults, orientations, ``fromto``, mesh files and inline meshes).
A link merged into its moving ancestor by a fixed joint brings its visuals to that body
through the merged frame's placement (``Model.frame_*``); a fixed base's root link, and
links fixed to it, are drawn where they are in the world.

A primitive: ``{"type", "size", "pos", "quat"}`` in the body frame; ``size`` is the
box's full sides, the sphere's ``[radius]``, the cylinder's and capsule's
``[radius, length]`` (of the cylindrical part, along the primitive's ``z``); a mesh has
``triangles`` (packed float32, 9 numbers a triangle) instead.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import jax.numpy as jnp
import numpy as np

from ..formats.mjcf_import import quat_dcm
from ..math import spatial as sp
from . import mesh_files
from .saved import model_args
from .scene import dcm_to_quat, packed

#: Mesh triangles a page carries at most (about 1.8 MB); meshes beyond are left out.
MAX_MESH_TRIANGLES = 50_000


def _floats(text, n, default):
    if text is None:
        return np.asarray(default, float)
    vals = [float(v) for v in text.split()]
    return np.asarray(vals[:n] if len(vals) >= n else default, float)


def _align_z(d: np.ndarray) -> np.ndarray:
    """A rotation taking ``z`` to the unit vector ``d``."""
    z = np.array([0.0, 0.0, 1.0])
    v, c = np.cross(z, d), float(np.dot(z, d))
    if np.linalg.norm(v) < 1e-12:
        return np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    vx = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + vx + vx @ vx / (1 + c)


def _prim(kind, size, pos, R) -> dict:
    shape = {"triangles": packed(np.asarray(size).reshape(-1, 9))} if kind == "mesh" else \
        {"size": [float(s) for s in size]}
    return {"type": kind, **shape, "pos": [float(p) for p in pos], "quat": dcm_to_quat(np.asarray(R).T).tolist()}


def urdf_visuals(path) -> dict:
    """``{link: [(type, size, pos, R)]}`` in each link's frame."""
    out = {}
    for link in ET.parse(path).getroot().iter("link"):
        for vis in link.findall("visual"):
            origin = vis.find("origin")
            pos = _floats(None if origin is None else origin.get("xyz"), 3, [0, 0, 0])
            rpy = _floats(None if origin is None else origin.get("rpy"), 3, [0, 0, 0])
            R = np.asarray(sp.rpy_dcm(jnp.asarray(rpy))).T
            geom = vis.find("geometry")
            if geom is None:
                continue
            for g in geom:
                if g.tag == "box":
                    size = _floats(g.get("size"), 3, [0, 0, 0])
                elif g.tag == "sphere":
                    size = [float(g.get("radius", 0))]
                elif g.tag in ("cylinder", "capsule"):
                    size = [float(g.get("radius", 0)), float(g.get("length", 0))]
                elif g.tag == "mesh":
                    size = _mesh(g.get("filename", ""), path, _floats(g.get("scale"), 3, [1, 1, 1]))
                    if size is None:
                        continue
                else:
                    continue
                out.setdefault(link.get("name"), []).append((g.tag, size, pos, R))
    return out


def _mesh(filename: str, model_path, scale) -> np.ndarray | None:
    """The triangles of an STL or OBJ mesh reference, scaled; ``None`` when it cannot be
    read."""
    found = mesh_files.find(filename, model_path) if filename.lower().endswith(mesh_files.FORMATS) else None
    try:
        return None if found is None else mesh_files.read(found) * np.asarray(scale, float)
    except (OSError, ValueError):
        return None


#: MuJoCo's geom types (``mjtGeom``) drawn, and the name a primitive takes
_MJ_GEOMS = {2: "sphere", 3: "capsule", 5: "cylinder", 6: "box", 7: "mesh"}


def mjcf_visuals(path) -> dict:
    """``{body: [(type, size, pos, R)]}`` in each MJCF body's frame, read off the model
    MuJoCo compiles (so default classes, ``euler``/``axisangle``, ``fromto`` and meshes —
    files or inline vertices, as MuJoCo loaded them — are what MuJoCo uses); planes,
    height fields and ellipsoids are not drawn."""
    try:
        import mujoco
    except ImportError:  # pragma: no cover - depends on the environment
        return {}
    try:
        m = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as e:
        raise ValueError(str(e)) from None
    out = {}
    for g in range(m.ngeom):
        kind = _MJ_GEOMS.get(int(m.geom_type[g]))
        b = int(m.geom_bodyid[g])
        if kind is None or b == 0:
            continue
        half = np.asarray(m.geom_size[g], float)
        pos, R = np.asarray(m.geom_pos[g], float), quat_dcm(m.geom_quat[g])
        if kind == "mesh":
            k = int(m.geom_dataid[g])
            v0, nv = int(m.mesh_vertadr[k]), int(m.mesh_vertnum[k])
            f0, nf = int(m.mesh_faceadr[k]), int(m.mesh_facenum[k])
            verts = np.asarray(m.mesh_vert[v0:v0 + nv], float)
            size = verts[np.asarray(m.mesh_face[f0:f0 + nf])].reshape(nf, 9)
        else:
            size = {"sphere": half[:1], "box": 2 * half, "capsule": [half[0], 2 * half[1]],
                    "cylinder": [half[0], 2 * half[1]]}[kind]
        out.setdefault(m.body(b).name, []).append((kind, size, pos, R))
    return out


def file_visuals(model: str | None, body_names, tree_model=None) -> tuple[dict, list]:
    """``({body name: [primitive, ...]}, notes)`` from the run's model file (empty when the
    run is not from a URDF or MJCF file, or the file cannot be read); key ``None``: what is
    fixed to the world (a URDF's fixed root link and links merged into it), in world axes.
    STL and OBJ meshes are carried up to :data:`MAX_MESH_TRIANGLES` triangles in all."""
    if not isinstance(model, str):
        return {}, []
    path = model_args(model)[0]
    try:
        found = urdf_visuals(path) if path.lower().endswith(".urdf") else (
            mjcf_visuals(path) if path.lower().endswith(".xml") else {})
    except (OSError, ET.ParseError, ValueError):
        return {}, []
    out, budget, left_out = {}, MAX_MESH_TRIANGLES, 0
    frames = list(tree_model.frame_names) if tree_model is not None else []
    for name, prims in found.items():
        if name in body_names:
            body, E, r = name, np.eye(3), np.zeros(3)
        elif name in frames:
            k = frames.index(name)
            b = int(tree_model.frame_bodies[k])
            body = body_names[b] if b >= 0 else None
            E, r = np.asarray(tree_model.frame_rot[k], float), np.asarray(tree_model.frame_pos[k], float)
        elif tree_model is not None and path.lower().endswith(".urdf"):
            body, E, r = None, np.eye(3), np.zeros(3)  # the fixed root link: the world frame
        else:
            continue
        for kind, size, pos, R in prims:
            if kind == "mesh":
                if len(size) > budget:
                    left_out += 1
                    continue
                budget -= len(size)
            out.setdefault(body, []).append(_prim(kind, size, r + E.T @ pos, E.T @ R))
    notes = [f"{left_out} meshes left out: a page carries at most {MAX_MESH_TRIANGLES:,} mesh triangles."] \
        if left_out else []
    return out, notes
