"""The frames of a FOLD file: which one is the crease pattern, which are folded states.

FOLD keeps one frame at the top level (frame 0) and any others in ``file_frames``
(frame ``k`` is ``file_frames[k - 1]``). A frame with ``frame_inherit: true`` takes every
key of its ``frame_parent`` (frame 0 when not given) that it does not set itself. Tools
write this in two shapes: a crease pattern at the top with folded states below (diffmb's
own export, :mod:`diffmb.viewer.fold_frames`), and a top level without geometry whose
``file_frames[0]`` is the crease pattern (Origami Simulator's fold series).

:func:`resolve_frames` returns every frame with its inherited keys; :func:`pick` chooses
the crease-pattern frame: the first whose ``frame_classes`` holds ``creasePattern``, else
the first with geometry that does not say ``foldedForm``, else the first folded form (to be
developed, :mod:`diffmb.formats.fold_develop`).
"""

from __future__ import annotations

FRAME_KEYS_NOT_INHERITED = ("file_frames", "frame_inherit", "frame_parent")


def resolve_frames(data: dict) -> list:
    """Every frame of ``data`` (frame 0 first) as a dict with its inherited keys;
    ValueError names the frame whose ``frame_parent`` is not a frame or loops."""
    raw = data.get("file_frames", [])
    if not isinstance(raw, list):
        raise ValueError(f"file_frames: expected a list of frames, got {type(raw).__name__}")
    own = [{k: v for k, v in data.items() if k != "file_frames"}]
    for k, f in enumerate(raw, start=1):
        if not isinstance(f, dict):
            raise ValueError(f"file_frames[{k - 1}] (frame {k}): expected a JSON object, got {type(f).__name__}")
        own.append(f)
    done: dict = {}

    def resolved(k, seen=()):
        if k in done:
            return done[k]
        f = own[k]
        if not f.get("frame_inherit"):
            out = dict(f)
        else:
            parent = f.get("frame_parent", 0)
            if isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < len(own) or parent == k:
                raise ValueError(f"{where(k)}: frame_parent {parent!r} is not another frame "
                                 f"(frames 0-{len(own) - 1})")
            if parent in seen:
                raise ValueError(f"{where(k)}: frame_parent {parent} inherits back from frame {k} (a loop)")
            out = {key: v for key, v in resolved(parent, (*seen, k)).items() if key not in FRAME_KEYS_NOT_INHERITED}
            if "frame_classes" not in f:
                out.pop("frame_classes", None)   # a folded child does not inherit "creasePattern"
            out.update(f)
        done[k] = out
        return out

    return [resolved(k) for k in range(len(own))]


def where(k: int) -> str:
    """How errors name frame ``k``."""
    return "frame 0 (the top level)" if k == 0 else f"file_frames[{k - 1}] (frame {k})"


def classes(frame: dict) -> set:
    """The frame's ``frame_classes`` as a set of strings."""
    c = frame.get("frame_classes", [])
    return {str(x) for x in c} if isinstance(c, list) else set()


def has_geometry(frame: dict) -> bool:
    return isinstance(frame.get("vertices_coords"), list) and len(frame["vertices_coords"]) > 0


def pick(frames: list) -> int:
    """The number of the crease-pattern frame (module docstring); ValueError when no frame
    has ``vertices_coords``."""
    with_geometry = [k for k, f in enumerate(frames) if has_geometry(f)]
    if not with_geometry:
        raise ValueError("missing key 'vertices_coords' (no frame of the file has vertex coordinates)"
                         if len(frames) > 1 else "missing key 'vertices_coords'")
    for k in with_geometry:
        if "creasePattern" in classes(frames[k]):
            return k
    for k in with_geometry:
        if "foldedForm" not in classes(frames[k]):
            return k
    return with_geometry[0]


def folded_frames(frames: list, cp: int) -> list:
    """The frame numbers, other than ``cp``, with geometry or fold angles: the start
    states a run may begin from."""
    return [k for k, f in enumerate(frames) if k != cp and (has_geometry(f) or "edges_foldAngle" in f)]
