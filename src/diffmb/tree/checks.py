"""The checks every tree builder makes of a body it is given: a new name, a known joint,
a parent listed before it, a free joint only from the world, a proper rotation.

Shared by the rigid :class:`~diffmb.tree.model.ModelBuilder` and the flexible tree's
:func:`~diffmb.formulations.flexible.builder.build`; imports nothing of the package, so
either can use it.
"""

from __future__ import annotations

import numpy as np


def check_tree_body(what, name, parent, joint, earlier, kinds, *, joint_word="joint kind",
                    listed="added", joint_name=None, joint_names=()) -> int:
    """Check one body against the bodies ``earlier`` (their names, parents first) and
    return its parent's index (-1: the world).

    Raises ValueError naming ``what`` for a duplicate body name (or ``"world"``), a joint
    not in ``kinds`` (called ``joint_word`` in the message), a parent that is not a body
    ``listed`` before it, a ``joint_name`` already in ``joint_names`` (when given), or a
    free joint on a body that does not hang from the world.
    """
    earlier = list(earlier)
    if name == "world" or name in earlier:
        raise ValueError(f"{what}: duplicate body name")
    if joint not in kinds:
        raise ValueError(f"{what}: unknown {joint_word} {joint!r}; expected one of {list(kinds)}")
    if parent != "world" and parent not in earlier:
        raise ValueError(f"{what}: parent {parent!r} is not a body {listed} before it")
    if joint_name is not None and joint_name in joint_names:
        raise ValueError(f"{what}: duplicate joint name {joint_name!r}")
    if joint == "free" and parent != "world":
        raise ValueError(f"{what}: a free joint must connect to 'world'")
    return -1 if parent == "world" else earlier.index(parent)


def is_rotation(R) -> bool:
    """Whether the 3x3 array ``R`` is a proper rotation (an orthonormal DCM, det +1)."""
    return bool(np.allclose(R @ R.T, np.eye(3), atol=1e-8) and np.linalg.det(R) >= 0)
