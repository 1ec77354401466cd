"""One flexible body of a tree (Banerjee & Lemak): its joint, hinge node and modal data."""

from __future__ import annotations

import dataclasses

from ...tree import joints as jt
from .modal import ModalData

#: the joint kinds a flexible tree takes, with their DOF (the tree's vocabulary, :mod:`diffmb.tree.joints`)
JOINT_DOF = {k: jt.NV[k] for k in ("free", "revolute", "universal", "spherical")}
SPEEDS = ("efficient", "customary")


@dataclasses.dataclass(frozen=True, eq=False)
class FlexBody:
    """One flexible body of the tree (plain Python; validated by :func:`~diffmb.formulations.flexible.builder.build`).

    ``joint``: ``free`` (root only), ``revolute``, ``universal`` (Hooke) or ``spherical``.
    ``hinge``: node (index or name) of the parent's modal data where the joint sits
    (ignored for a root). ``rot``: DCM ``[J hinge]`` of the joint frame; ``pos``: the joint
    frame origin in world coordinates for a root. ``axis``/``axis2`` as
    :mod:`diffmb.tree.joints`. ``prescribed``: ``{dof: fn(t, p) -> angle}`` with ``p`` the
    params entry ``params["prescribed"][name]``. ``q0``/``u0``: initial joint coordinates
    (customary rates for ``u0``: ``theta_dot``, MRP rates, ``r_dot``), ``eta0``/``eta_dot0``
    initial modal coordinates/rates.
    """

    name: str
    modal: ModalData
    parent: str = "world"
    joint: str = "free"
    hinge: object = None
    axis: tuple = (0.0, 0.0, 1.0)
    axis2: tuple = (0.0, 1.0, 0.0)
    rot: object = None
    pos: tuple = (0.0, 0.0, 0.0)
    prescribed: dict = dataclasses.field(default_factory=dict)
    q0: object = None
    u0: object = None
    eta0: object = None
    eta_dot0: object = None

