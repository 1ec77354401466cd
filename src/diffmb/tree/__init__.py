"""Layer 2: a tree of rigid bodies and its recursive algorithms.

Structure first, then the algorithms over it:

* :mod:`~diffmb.tree.joints` (joint kinds), :mod:`~diffmb.tree.model` (``Model`` and its
  builder, checked by :mod:`~diffmb.tree.checks` and :mod:`~diffmb.tree.regularity`),
  :mod:`~diffmb.tree.layout` (the tree's static index tables), :mod:`~diffmb.tree.scan`
  (sweeps without a Python loop over bodies);
* :mod:`~diffmb.tree.kinematics` (the per-evaluation workspace), :mod:`~diffmb.tree.crba`,
  :mod:`~diffmb.tree.rnea`, :mod:`~diffmb.tree.aba` (Featherstone's algorithms on the
  workspace: the ``*_ws`` functions), :mod:`~diffmb.tree.body_frames`;
* passive forces beyond springs and dampers: :mod:`~diffmb.tree.tendons`,
  :mod:`~diffmb.tree.fluid`;
* :mod:`~diffmb.tree.api`: the same algorithms as functions of one state ``(q, qd)``,
  the package's public tree API (re-exported here and as ``diffmb.<name>``).
"""

from .api import (
    bias_forces as bias_forces,
    center_of_mass as center_of_mass,
    coordinate_rates as coordinate_rates,
    energy as energy,
    forward_dynamics as forward_dynamics,
    forward_kinematics as forward_kinematics,
    frame_pose as frame_pose,
    inverse_dynamics as inverse_dynamics,
    joint_forces as joint_forces,
    kinetic_energy as kinetic_energy,
    mass_matrix as mass_matrix,
    momentum as momentum,
    potential_energy as potential_energy,
    spatial_momentum as spatial_momentum,
)
