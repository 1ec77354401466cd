"""Triangle meshes a model file ships, for the page: STL (binary or ASCII) and Wavefront
OBJ.

:func:`find` resolves a URDF ``<mesh filename>`` (a path relative to the file,
``file://``, or ROS's ``package://name/...``, looked for in the folders above the file
and beside them); :func:`read` returns the triangles. Other formats (Collada) are not
read: their bodies keep their frames.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def find(filename: str, model_path) -> Path | None:
    """The file a mesh reference names, or ``None`` when it cannot be found."""
    base = Path(model_path).resolve().parent
    if filename.startswith("file://"):
        p = Path(filename[len("file://"):])
        return p if p.is_file() else None
    if filename.startswith("package://"):
        package, _, rest = filename[len("package://"):].partition("/")
        for folder in [base, *list(base.parents)[:4]]:
            for root in (folder, *(d for d in folder.iterdir() if d.is_dir())) if folder.is_dir() else ():
                if root.name == package and (root / rest).is_file():
                    return root / rest
        return None
    p = Path(filename) if Path(filename).is_absolute() else base / filename
    return p if p.is_file() else None


FORMATS = (".stl", ".obj")


def read(path) -> np.ndarray:
    """``(T, 3, 3)`` triangles (vertices in the file's units) of an STL or OBJ file
    (ValueError when it is neither)."""
    return read_obj(path) if str(path).lower().endswith(".obj") else read_stl(path)


def read_obj(path) -> np.ndarray:
    """Triangles of a Wavefront OBJ file: its ``v`` vertices and ``f`` faces (polygons
    split into fans; ``v/vt/vn`` and negative indices read)."""
    verts, tris = [], []
    for line in Path(path).read_text(errors="replace").splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "v" and len(parts) >= 4:
            verts.append([float(x) for x in parts[1:4]])
        elif parts[0] == "f" and len(parts) >= 4:
            ids = [int(p.split("/")[0]) for p in parts[1:]]
            ids = [i - 1 if i > 0 else len(verts) + i for i in ids]
            tris += [(ids[0], ids[k], ids[k + 1]) for k in range(1, len(ids) - 1)]
    if not tris:
        raise ValueError(f"{path}: an OBJ file without faces")
    return np.asarray(verts, float)[np.asarray(tris, int)]


def read_stl(path) -> np.ndarray:
    """Triangles of an STL file, binary or ASCII."""
    data = Path(path).read_bytes()
    if len(data) >= 84:
        (n,) = struct.unpack("<I", data[80:84])
        if len(data) == 84 + 50 * n:
            rec = np.frombuffer(data, np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")]), n, 84)
            return np.asarray(rec["v"], float)
    text = data.decode("ascii", errors="replace")
    if not text.lstrip().lower().startswith("solid"):
        raise ValueError(f"{path}: not an STL file")
    verts = [[float(x) for x in line.split()[1:4]] for line in text.splitlines() if line.strip().startswith("vertex")]
    if not verts or len(verts) % 3:
        raise ValueError(f"{path}: an STL file without whole triangles")
    return np.asarray(verts, float).reshape(-1, 3, 3)
