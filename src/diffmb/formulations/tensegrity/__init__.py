"""Tensegrity dynamics in Cartesian nodal coordinates (Hsu, Tadiparthi & Bhattacharya).

Every node of the structure is a point ``n_i`` in 3-D; the coordinates are ``q = vec(N)``
(node-major: ``q[3i:3i+3] = n_i``, section 2.1). Bars are rigid (length constraints,
eq. 24) or compressible (elastic, section 3); strings are tension-only springs (eqs. 12-14)
with dampers that act only while taut (eq. 17); point masses sit on nodes (``L_pm``);
fixed coordinates and any linear constraints form ``A q = b`` (eq. 24).

How the equations are obtained
------------------------------
The kinetic energy ``T(q, qd)`` (eq. 10; section 3.1 for compressible bars, with the
``-T_f`` term and Poisson thinning of the radius) and the potential ``V(q)`` (gravity
eq. 11, strings eq. 12, bar elasticity ``V_b`` of section 3.1) are written once;
``M = d2T/dqd2``, the velocity terms of ``d/dt dT/dqd - dT/dq`` and the forces ``-dV/dq``
come from JAX. The constraint Jacobian ``R_q`` (eq. 25) and the curvature term ``xi_2``
(eq. 20) come from ``jax.jacfwd``/``jax.jvp`` of ``R(q)``. The closed forms of the paper
(:func:`closed_form_mass`, :func:`closed_form_gravity`, :func:`closed_form_string_force`,
:func:`closed_form_xi2`) exist for the tests only.

The KKT system (eq. 21) is solved by the range-space (Schur complement) method of
eqs. 22-23 with Cholesky factors: ``M~ = M + rho A^T A`` (equal to ``M`` on every
acceleration that satisfies ``A qdd = 0``, and positive definite even where a fixed node
carries no mass), then ``S = R_q M~^-1 R_q^T``.

State ``x = [q; qd; W_f]``: ``W_f`` is the work of the non-conservative forces
(external node forces and string dampers), integrated alongside (eq. 37).
``project`` is the direct correction of section 2.4 / Algorithm 1: the minimum-norm
``(dq, dqd, dW_f)`` that solves the linearised position, velocity (eq. 33) and, when
``energy_correction`` is on, energy (eq. 43) constraints (eq. 44-45), repeated while the
violation exceeds the threshold ``gamma`` (a fixed number of passes, masked, so that it
stays reverse-differentiable).

Diagnostics: ``energy`` is ``E(q, qd) - W_f``, the quantity that eq. 35 says is constant
(it is the mechanical energy when no non-conservative force acts); ``mechanical_energy``
is ``E = T + V`` (eq. 34) and ``work`` is ``W_f``. Violations: ``position`` (linear
residuals ``A q - b`` and bar-length errors ``|b_k| - l_k`` in metres), ``velocity``
(``A qd`` and ``d|b_k|/dt``), ``energy`` (``E - E0 - W_f``, eq. 35).

Node indices are 0-based in the Python API; the state names follow the paper's 1-based
numbering (``x3`` is the x coordinate of the paper's node 3).
"""

from .closed_forms import (
    closed_form_constraints,
    closed_form_gravity,
    closed_form_mass,
    closed_form_stiffness,
    closed_form_string_force,
)
from .forces import NodeForce
from .structure import Structure, make_structure, prestress_to_equilibrium
from .system import TENSEGRITY_STABILIZATIONS, TensegritySystem, null_space, taut_stretch

__all__ = ["NodeForce", "TENSEGRITY_STABILIZATIONS", "Structure", "TensegritySystem", "closed_form_constraints",
           "closed_form_gravity", "closed_form_mass", "closed_form_stiffness", "closed_form_string_force",
           "make_structure", "null_space", "prestress_to_equilibrium", "taut_stretch"]
