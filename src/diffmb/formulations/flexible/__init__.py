"""Flexible multibody dynamics with efficient generalized speeds (Banerjee & Lemak).

A tree of flexible bodies (modal data: :mod:`diffmb.formulations.flexible.modal`) joined by
revolute, Hooke (universal) and spherical joints, with a free-flying or hinged root.
Each body ``i`` has a reference frame ``B_i`` and ``n_i`` modal coordinates ``q_i``.

The model (what the paper gives and what is derived here)
---------------------------------------------------------
**Velocity field, eq. (1).** With the body's *efficient* speeds ``w = [w; v; s]`` —
reference-frame angular velocity ``w`` and origin velocity ``v`` (``B`` components) and
the D'Eleuterio-Barfoot modal speeds ``s`` — a material point ``p`` moves with
``v_p = v + w x p + Phi(p) s``. The speeds ``s`` relate to the modal rates by eq. (2),
``Me (s - q_dot) = L(w, q)``, ``L_i = sum_j w . int(phi_j x phi_i dm) q_j``, i.e.
``q_dot = s - Me^-1 L``: ``Phi s`` is the mass-weighted projection of the exact
``w x Phi q + Phi q_dot`` on the modal space (the exact field differs from eq. (1) by the
component of ``w x Phi q`` orthogonal to the modes). Eq. (1) is the *model* for both
speed choices here, so the two choices describe the same system and must agree to
round-off; with eq. (1) the kinetic energy is ``T = 1/2 w^T M0 w`` with the constant
body mass matrix ``M0 = [[J, c~, Bm], [c~^T, m U, A], [Bm^T, A^T, Me]]``
(:func:`~diffmb.formulations.flexible.modal.body_mass_matrix`).

**Kane's equations, eq. (3).** ``int a . dv/du_r dm`` with ``a`` the inertial derivative
of eq. (1) gives, per body, the generalized inertia force ``-(M0 w_dot + g(w))`` on ``w``
(derived here from the lumped form; ``U`` the unit dyadic, ``N``/``d``/``G`` the modal
integrals of :mod:`~diffmb.formulations.flexible.modal`):

* ``g_w = w x (J w) + c x (w x v) + w (d . s) - (N . s) w``
* ``g_v = w x (m v + w x c) + w x (A s)``
* ``g_s = A^T (w x v) + N : (w w) - d |w|^2 + G_w s``, ``(G_w)_ij = w . int(phi_j x phi_i dm)``

``w^T g = 0`` (``G_w`` is skew), so the power of the inertia forces is ``-dT/dt``.
The generalized active forces of the potential ``P`` (elastic ``1/2 q^T K q``, gravity)
and dissipation ``D = 1/2 q_dot^T C q_dot`` are ``-(dP/dq_j + dD/dq_dot_j) dq_dot_j/du_r``
exactly as eq. (3) writes them: ``q_dot`` depends on ``w`` through eq. (2), so
elasticity, damping and geometric stiffening act on the rotational speeds as well as on
the modal ones (the paper's remark after eq. 3). They are computed as one reverse-mode
product (``vjp``) of the kinematical equations ``x_dot(x, u)`` with the cotangent
``-grad P - C q_dot - K_G(w) q``; ``T + P`` is therefore conserved to integration error
when ``C = 0`` and no input acts.

**Geometric stiffening.** The centrifugal inertia load ``-m_k W p_k``, ``W = [w~][w~]``,
produces axial forces whose geometric stiffness is ``K_G(w) = sum_ab W_ab KG[a, b]``
(Banerjee 1993, the unit-load method; ``KG`` from
:func:`~diffmb.formulations.flexible.frame_modes.frame_modes`); it enters as the generalized force
``-K_G(w) q`` on ``q_dot`` (so also on ``w``). The loads from reference accelerations
(``a_0``, ``alpha x p``) are left out: they make the mass matrix state-dependent and are
transverse (no axial force) for radial booms. Stiffening is not derived from a potential,
so the energy check runs without it.

**Momentum.** ``diagnostics["angular_momentum"]`` is ``sum int rho x v dm`` about the
world origin with the *deformed* positions ``rho = r + E^T (p + Phi q)`` and the field
``v`` of eq. (1): ``M0[:3] w`` plus :func:`~.speeds.deformation_moment` ``int (Phi q) x v dm``.
When the modal space is closed under ``w x`` (eq. 1 then is the exact velocity field)
both momenta are conserved to integration error for a floating tree, prescribed joint
motion, damping and geometric stiffening included (tests). With truncated modes (e.g.
cantilever bending modes: ``w x Phi q`` has an axial part no mode carries) eq. (1) is not
the time derivative of any position field and the paper's equations conserve no angular
momentum exactly: the change is first order in the deformation (flex-4body, 10 s: 0.085
of |h| = 53; 0.019 with EI x 4; unchanged by halving the step or dropping stiffening).
Linear momentum ``sum M0[3:6] w`` is conserved exactly.

**Hinge kinematics, eq. (4).** Body ``j`` hangs at node ``h`` of its parent ``c(j)``.
The hinge frame is carried by the parent's deformation: position ``p_h + Phi_h q``, and
rotation ``psi_h = Psi_h q`` held exactly as the MRP ``psi_h / 4``, so that its angular
velocity relative to ``B_c`` is ``T(psi_h) Psi_h q_dot = Psi_h q_dot + O(psi)`` — the
``sum phi_i q_dot_i`` of eq. (4) — and poses and velocities stay consistent. The
absolute hinge angular velocity is ``w_h = w^c + T Psi_h q_dot``; for the joint speeds:

==============  ==================================  ======================================
joint           customary ``u``                      efficient ``u`` (Mitiguy & Kane)
==============  ==================================  ======================================
revolute        ``theta_dot``                        ``w^j . h``: ``w^j = w_h.(U - hh) + u h``
Hooke           ``theta_dot_1, theta_dot_2``         ``w^j . h_k``: eq. (4), ``h1 _|_ h2``
spherical       MRP rates ``sigma_dot``              body components of ``w^j``
free (root)     ``sigma_dot``, ``r_dot`` (world)     body components of ``w``, ``v``
modal           ``q_dot``                            ``s`` of eq. (2)
==============  ==================================  ======================================

**Recursive solution** (``algorithm="recursive"``, Banerjee 1993's block-diagonal order-n
scheme in the articulated-body form). Each body's speeds ``w_i`` (``6 + n_i``) follow from
its parent's and its own speeds ``u_i`` (free joint DOFs + modal speeds) by the linear map
``w_i = A_i w_p + S_i u_i`` (``A_i``, ``S_i`` from forward-mode derivatives of the
kinematics; the velocity-product terms ``c_i`` from one ``jvp`` of the whole kinematics
along ``x_dot``). Then: forward pass (kinematics), backward pass (articulated inertias
``IA_i = M0_i + sum A_c^T Ia_c A_c``, ``D_i = S^T IA S``, bias forces), forward pass
(``u_dot_i = D^-1 (tau - S^T p - U^T a')``). With efficient speeds the ``S_i`` of a leaf
body with a free, spherical or revolute joint is constant, so its ``D_i^-1`` (for a single
free body: ``M0^-1``) is computed once (params ``Dinv``): the constant mass matrix the
paper's efficiency rests on. With customary speeds ``S_i`` depends on the state and every
``D_i`` is rebuilt and factored at every evaluation. ``algorithm="dense"`` (the "standard
Kane" column of the paper) forms the full mass matrix ``sum W_i^T M0_i W_i`` and solves it.

**Prescribed motion and internal loads.** Any revolute/Hooke DOF may be prescribed as
``theta(t)`` (a traceable function; rates by forward-mode differentiation). It leaves the
state; its speed is ``theta_dot(t)`` in both speed choices. The internal load is
"the augmented inertia and active forces dot-multiplied by the partial angular velocity of
the prescribed motion": ``lambda = S_p^T (IA_i w_dot_i + p_i)`` with ``S_p = dw_i/dtheta_dot``
and ``IA_i``, ``p_i`` the articulated inertia and force of the subtree (the rigid RNEA's
``tau = S^T f``). Systems with prescribed DOFs carry a ``clock`` state so diagnostics can
evaluate the loads along the run (``diagnostics["load"]``).

State ``x = [coords; speeds]`` (plus ``clock``): per body its free joint coordinates then
its modal coordinates, speeds in the same order. Attitudes are MRPs (``project`` does the
shadow-set switch, converting customary MRP rates).

Modules: :mod:`.modal` (modal data of one body) and :mod:`.frame_modes` (its beam and
plate finite-element models), :mod:`.body` (the body description), :mod:`.speeds` (eq. 2
and the per-body inertia terms), :mod:`.system` (the tree: layout, kinematics, energy),
:mod:`.forces` (generalized active forces and the per-body speed maps), :mod:`.solve`
(the recursive and dense solutions), :mod:`.builder` (validation and the initial state).
Matrix-vector products go through :func:`diffmb.math.spatial.mv` / :func:`~diffmb.math.spatial.mtv`
rather than ``@``: up to :data:`diffmb.math.spatial.REDUCED_MAX` entries they fuse with their
neighbours instead of each being a dot kernel (the four-body chain's vector field 70 ->
52 us); matrix-matrix products stay ``@``.
"""

from ...tree.api import ALGORITHMS
from .body import JOINT_DOF, SPEEDS, FlexBody
from .builder import build, customary_to_speeds
from .system import FlexibleSystem

__all__ = ["JOINT_DOF", "ALGORITHMS", "SPEEDS", "FlexBody", "FlexibleSystem", "build",
           "customary_to_speeds"]
