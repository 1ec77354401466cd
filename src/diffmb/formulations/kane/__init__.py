"""Kane's equations for constrained systems with the cut-joint approach (Madonna; Bajodah,
Hodges & Chen, JGCD 2003), and the Lagrange-multiplier DAE form of the same system.

A closed-chain mechanism is cut open at one or more joints (the *cut joints*); what is left
is a forest of rigid-body trees (one or more :class:`~diffmb.tree.model.Model`, each with at
most one free root), whose coordinates ``q`` and generalized speeds ``u`` (``u = qd`` of
the open trees, optionally through a constant invertible map, see below) are the
unconstrained system's. At each cut joint the two *nodes* (a frame on body A, a frame on
body B) must coincide in a chosen set of rows ``(rx, ry, rz, tx, ty, tz)`` of node A's
frame: the position-level closure ``Phi(q) = 0`` (eq. 8 for the slider-crank).

Both forms share the state ``x = [q; u]`` (plus an optional mission ``clock``), the
generalized inertia forces from the tree algorithms — ``M(q)`` by the CRBA and ``nl(q, u)``
by the RNEA with zero accelerations, so ``F* = -M u_dot - nl`` (eq. 3) — and the
velocity-level closure ``C(q) u = beta = 0`` (eq. 12). Both are read from one kinematics
workspace of the forest per evaluation and the closure layer shared with the
tree-augmented systems (:mod:`diffmb.closures`): the rows of ``C`` are the two nodes'
Jacobian columns along their tree paths, and ``C_dot u`` comes from the bias
accelerations; nothing is differentiated through the kinematics.

:class:`KaneSystem` (eqs. 1-6, 13)
    The speeds are partitioned into ``p`` independent ``u_I`` and ``n - p`` dependent
    ``u_D`` ones by a column-pivoted QR factorisation of ``C(q0)`` at build time (the
    ``n - p`` pivot columns are the dependent set, so ``C_D`` is as well conditioned as a
    greedy choice can make it). Then ``A = -C_D^-1 C_I`` (eq. 13), ``u_D = A u_I`` (eq. 1,
    ``b = 0`` for cut joints), ``A1 = [-A  I]``, ``A2 = [I  A^T]`` and
    ``T u_dot = [A_dot u_I; A2 (F - nl)]`` with ``T = [A1; A2 M]`` (eq. 6), solved by LU.
    No multipliers appear. ``A_dot u_I = -C_D^-1 C_dot [u_I; A u_I]`` is obtained exactly
    from the workspace's velocity-product accelerations, evaluated with the state's ``u`` in place of
    ``[u_I; A u_I]`` (the same on ``C u = 0``): then the first block row reads
    ``C u_dot = -C_dot u`` and the second ``N^T (M u_dot + nl - F) = 0`` with
    ``N = [I; A]`` spanning the null space of ``C``, so ``u_dot`` is independent of the
    partition everywhere, off the velocity manifold (RK stages) included. With
    ``[u_I; A u_I]`` instead, RK4 stage errors near a singular ``C_D`` grow like the
    derivatives of ``A`` (measured: a slider-crank run through a singular forced partition
    drifts by O(1)). When the dependent block becomes ill-conditioned
    (reciprocal pivot ratio of its LU below ``repartition_tol``) the vector field
    re-partitions at that state by greedy column pivoting of ``C(q)``: ``u_dot`` does not
    depend on the partition (``A2^T`` spans the null space of ``C`` for any valid one), so
    switching is seamless. The reactions are recovered afterwards by back-substitution:
    ``F_cr = M u_dot + nl - F`` (eq. 7) and ``F_cr = -C^T lambda`` (eq. 10), solved on
    the dependent rows, ``lambda = -C_D^-T F_cr,D``.

:class:`MultiplierSystem` (eq. 11)
    ``[[M, D^T], [D, 0]] [u_dot; lambda] = [F - nl; gamma]`` with ``D = C`` and
    ``gamma = -C_dot u`` (eq. 9), solved by the range-space method (Cholesky of ``M``,
    then the ``(n-p) x (n-p)`` Schur complement). Optional Baumgarte terms
    ``gamma - 2 a C u - b^2 Phi``.

Drift control (both forms): ``stabilization="projection"`` applies, after every step, a
mass-weighted Gauss-Newton projection of ``q`` onto ``Phi = 0`` and then of ``u`` onto
``C u = 0`` (the same correction as :func:`diffmb.closures.dynamics.project_state`, written here
for forests and coordinate maps). The position and velocity violations are reported in
``violation``; ``diagnostics`` holds the energy, the multipliers ``reaction`` (one per
kept row, the wrench body B exerts on body A at node A, in node A's axes — Newton's third
law gives body B the opposite) and ``reaction_wrench`` (P, 6), the momentum of floating
systems, and ``repartitioned`` (1 where the build-time partition was too ill-conditioned).

Rows: each cut constrains rows of ``(rx, ry, rz, tx, ty, tz)``; rows that are
structurally redundant (a planar mechanism's out-of-plane rows) are dropped at build time
by a rank-revealing selection on ``C(q0)``, so ``C`` has full row rank ``n - p``. The
selection takes ``q0`` to be a generic configuration of the closed chain (its rank that
of nearby configurations); a ``q0`` at a singular configuration would drop a row that is
needed elsewhere.

Coordinate map: ``coordinate_map=P`` (constant, invertible, ``n x n``) makes the system's
coordinates ``q`` and speeds ``u`` related to the open trees' by ``q_tree = P q``,
``u_tree = P u`` (so ``M = P^T M_tree P``, ``nl = P^T nl_tree``), which lets a scenario
use the paper's coordinates, e.g. the slider-crank's absolute rod angle ``theta2`` where
the tree joint measures it relative to the crank.

Time: with ``clock=True`` the state carries the mission time as its last entry (named
``clock``, rate 1), and ``force_fn`` / ``outputs_fn`` are evaluated at it, so that
time-dependent controllers and their outputs (control torques, references) can be
reported by ``diagnostics`` — which sees only the state.
"""

from .cuts import Cut, CutJoints, make_cuts
from .forms import FORMULATIONS, KaneSystem, MultiplierSystem, build
from .system import CutJointSystem

__all__ = ["Cut", "CutJointSystem", "CutJoints", "FORMULATIONS", "KaneSystem", "MultiplierSystem", "build",
           "make_cuts"]
