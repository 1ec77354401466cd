"""``diffmb view``: a run in 3-D, one self-contained HTML page.

:func:`saved.load` rebuilds a saved run's System from its metadata; a scene module per
kind of model (:mod:`.origami`, :mod:`.bodies` for trees, Kane and Udwadia-Kalaba
modules, :mod:`.tensegrity`, :mod:`.flexible` for modal bodies) turns its states into a
:class:`~.scene.Scene` of bodies, poses and quantities; :mod:`.page` writes the page
(three.js inlined, no network); :mod:`.fold_frames` exports a fold's frames as a FOLD
file, :mod:`.mesh` one frame as glTF or OBJ.
"""

from __future__ import annotations

from pathlib import Path

from . import saved
from .scene import FPS, MAX_FRAMES, Scene


def scene_of(run, fps: float = FPS, max_frames: int = MAX_FRAMES) -> Scene:
    """The scene of a :class:`~.saved.SavedRun`: origami first, then tensegrity, flexible
    bodies, then any System with ``body_frames`` (ValueError when it has none)."""
    from . import bodies, flexible, origami, tensegrity

    for make in (origami.scene, tensegrity.scene, flexible.scene, bodies.scene):
        sc = make(run, fps, max_frames)
        if sc is not None:
            return sc
    raise ValueError(f"{run.path}: {type(run.system).__name__} has no bodies to show "
                     f"(no System.body_frames)")


def write_view(run_path, out=None, *, fps: float = FPS, max_frames: int = MAX_FRAMES) -> Path:
    """Write the page of the run in ``run_path`` (default: beside it, ``.html``)."""
    from .page import write

    run = saved.load(run_path)
    out = Path(run_path).with_suffix(".html") if out is None else Path(out)
    return write(scene_of(run, fps, max_frames), out)
