"""Udwadia–Kalaba equations with quaternion states (Shoer & Peck, section III).

Maximal coordinates: every moving body ``B`` carries ``x_B = [r_B; q_B]`` (eq. 4) — its
centre of mass in N and the scalar-last quaternion ``{}^N q^B`` — and the rates
``[r_B_dot; q_B_dot]``. The state is ``x = [r_1, q_1, ..., r_n, q_n, rd_1, qd_1, ...]``.
Inertially fixed bodies carry no state: their pose is a number in ``params["fixed_pose"]``.

Equations of motion
-------------------
Per body, the effective mass and force of eqs. (12)-(13): ``m_B 1_3`` and ``f_B`` for the
translation (eq. 5); for the rotation ``M~_B = T^T I_B T`` and
``F~_B = T^T (tau_B - (T qd) x I_B (T qd) - I_B T_dot qd)`` (eq. 10) with
``T(q) = 2 [q4 1_3 - q123^x, -q123]`` (eq. 7, ``omega_B = T qd``). (``T_dot(qd) qd = 0``
identically, so the last term vanishes; it is kept in the docstrings only.)
``1/2 qd^T M~ qd`` is the rotational kinetic energy (eq. 11).

The constraints ``A x_ddot = b`` (eq. 1) are the quaternion-norm rows (eq. 15), the joint
rows (eqs. 16-19) and user rows from ``phi(x) = 0``. The system's acceleration is the
Udwadia–Phohomsiri solution (eq. 14)

    x_ddot = [ (1 - A^+ A) M_eff ; A ]^+ [ F_eff ; b ],

which, when ``[M_eff; A]`` has full column rank, is the unique ``x_ddot`` with
``M_eff x_ddot = F_eff + A^T mu`` and ``A x_ddot = b`` for some ``mu``. We solve that
system without a dense pseudo-inverse, exploiting its structure:

1. ``M~_B q = 0`` (``T q = 0``): the singular direction of each body's effective mass is
   its own quaternion, exactly the direction the norm row ``q^T q_ddot = -qd^T qd``
   (eq. 15) fixes. Each joint/user row ``a`` is first made orthogonal to ``q_B`` by adding
   a multiple of body B's norm row (``a_q -= (a_q.q/|q|^2) q``, ``b`` changed alike): the
   constraint set is unchanged, and afterwards the norm rows carry no multiplier. The
   same projection is applied to every generalized force on ``q`` (``-dU/dq`` from
   autodiff has a component along ``q`` when ``U`` is written with a non-normalised DCM).
2. The norm rows are then absorbed into an augmented, block-diagonal, positive definite
   mass ``M^_B = M~_B + k q q^T`` whose inverse is closed form: with the orthogonal
   ``E = [T / (2|q|); q^T / |q|]``, ``M^_B^-1 = T^T I^-1 T / (16 |q|^4) + q q^T / (k |q|^4)``.
   The unconstrained acceleration of the augmented system satisfies the norm row
   exactly (``k`` cancels).
3. The joint and user rows are enforced by the range-space (Schur complement) method
   with ``S = A M^-1 A^T``. The paper's revolute rows (eq. 19, 6 rows for 5 constraints)
   and closed loops make ``S`` singular, so ``mu`` solves ``(S + eps 1) mu = r`` by
   Cholesky with ``refine`` steps of iterative refinement — the Tikhonov-regularised
   least-squares solution, which converges to the minimum-norm one for consistent
   ``r``, is differentiable everywhere (an SVD/eigh pseudo-inverse has NaN gradients at
   repeated zero singular values) and costs one ``m x m`` Cholesky.
   ``linear_solve="pinv"`` evaluates eq. (14) literally with ``jnp.linalg.pinv`` (a dense SVD
   fallback, used by the tests to check the structured solve).

Joints (eq. 16 template; each joint's rows touch only its two bodies):

``spherical``  eq. (17)-(18): ``r_B + Q_B p_BC = r_C + Q_C p_CB`` (3 rows, analytic A, b).
``revolute``   eq. (19), the errata form: two spherical joints at ``p +- a`` along the
               axis (6 rows, 5 independent — the redundancy is absorbed by the solve).
``fixed``      weld: the spherical rows plus the rotation vector of the attitude error
               ``E = rel^T {}^B Q^C`` (6 rows).
``prismatic``  relative attitude fixed (3 rows) and the joint point of C on the line
               along ``a`` through the joint point of B (2 rows).
user rows      ``phi(x, p) = 0`` over the position state; ``A = dphi/dx`` by ``jax.jacfwd``
               and ``b = -x_dot^T (d2 phi/dx2) x_dot`` by nested forward-mode derivatives
               (the fixed/prismatic joints use the same machinery locally).

Every joint has a numeric ``active`` in ``params["joints"][kind]["active"]`` (1 on, 0 off:
rows multiplied by 0 are handled like redundant rows), so joint layouts can be switched
and vmapped without recompiling (the reconfiguration explorer relies on it).

Drift control: ``stabilization="baumgarte"`` replaces ``b`` by
``b - 2 alpha phi_dot - beta^2 phi`` (also for the norm rows), with Baumgarte's gains
``alpha, beta`` named ``a``, ``b`` in the params as in every formulation; ``"projection"`` applies,
after every step, Gauss–Newton corrections of the positions onto ``phi = 0`` and
``|q| = 1`` in the metric ``M^`` and then the velocity projection onto ``A x_dot = 0`` in
the same metric (which keeps the total momentum, the joint impulses being internal).
"""

from .builder import LINEAR_SOLVES, UKBuilder
from .joint_rows import JOINT_KINDS, JOINT_ROWS, autodiff_rows, local_rows
from .quaternion import T_matrix, dcm_NB, effective_force, effective_mass, omega_body, quat_rate
from .system import UKSystem

__all__ = ["JOINT_KINDS", "JOINT_ROWS", "LINEAR_SOLVES", "T_matrix", "UKBuilder", "UKSystem", "autodiff_rows",
           "dcm_NB", "effective_force", "effective_mass", "local_rows", "omega_body", "quat_rate"]
