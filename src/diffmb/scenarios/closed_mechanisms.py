"""Madonna's closed-chain cases with Kane's method for constrained systems (cut joints).

``slider-crank``
    The paper's mechanism (Fig. 1, eq. 8): q = [theta1, theta2, s3], crank ``l1``/``m1``
    (uniform rod pinned at the origin), connecting rod ``l2``/``m2`` (uniform rod), slider
    ``m3`` (point mass on the x axis), gravity ``g`` along -y, no friction. ``theta1`` is
    the crank angle from +x (counter-clockwise, unwrapped), ``theta2`` the rod's absolute
    angle from +x, ``s3`` the slider's x position; potential-energy datum y = 0 at the
    crank pivot. The open tree (Fig. 1b) is crank -> rod (a revolute joint measuring
    ``theta2 - theta1``) and the slider on a prismatic joint; the rod's far end is cut from
    the slider (a ``point`` cut, node A on the slider so the residual is eq. 8 exactly; its
    out-of-plane row is dropped as redundant). ``theta2``, ``s3`` and their rates start on
    the closure with the slider at x > 0.

``dual-arm-grasp``
    The post-grasping manoeuvre (Figs. 2-5, Tables 1-2). The paper leaves the arm layout
    open; the choices here:

    * a forest of two trees: the SMS (bus on a free joint; Table 1: 1000 kg,
      diag(590.83, 270.83, 486.67) kg m^2, i.e. a 1.0 x 2.2 x 1.5 m box along b1, b2, b3)
      and the target (a free 100 kg solid sphere of radius 1 m);
    * two planar arms of **three links each** (Table 2: 1 m, 30 kg, 3.5 cm-radius solid
      cylinders), all **joint axes along b3**, mounted on the bus's +b1 face at
      (0.5, +-0.7, 0) m. The closed chain bus - left arm - target - right arm - bus has
      6 joint DOF against the 3 in-plane closure rows, so it is mobile with 3 internal
      DOF (the target's b1, b2 position and b3 rotation relative to the bus): enough to
      pull the target in along b1. The two welds' out-of-plane rows are structurally
      redundant (3 of 12 dropped); 9 independent speeds: the bus (6) and the left arm (3);
    * the grasps: **two cut joints** (welds) between each end effector's tip and the
      sphere at +-``grasp_deg`` (60 deg) from -b1, link 3 pointing at the sphere's centre,
      elbows outwards;
    * distance = gap along b1 between the bus's +b1 face and the sphere's near pole
      (1.5 m: the centre 3.0 m ahead of the bus's centre);
    * the whole system starts in a rigid spin at ``omega0_deg`` (5 deg/s) about b1 (the
      chaser synchronised with the target before grasping), a principal axis of the
      symmetric assembly.

    Mission (600 s): de-spin over ``t_despin`` (180 s) along a quintic rate profile,
    hold ``t_hold1`` (60 s), pull in from ``d0`` = 1.5 m to ``d1`` = 0.75 m over
    ``t_manip`` (120 s, quintic), hold to the end. Controllers: :func:`dual_arm_control`.
    Diagnostics (the paper's Figs. 3-5): ``bus_torque``, ``bus_rate_b1_deg_s``, the arm
    angles (coordinates ``left1..3``), ``reaction`` / ``reaction_wrench`` (grasp
    reactions), plus ``distance``, ``target_rate_deg_s``, ``left_arm_torque``.

``formulation``: 0 or ``kane`` runs the Kane form (eq. 6), 1 or ``dae`` the
Lagrange-multiplier DAE form (eq. 11).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..formulations import kane
from ..math import spatial as sp
from ..tree import api
from ..tree.model import ModelBuilder
from .scenario import Scenario, conserves, register

PAPER = "Madonna, closed-chain post-grasping with Kane's method"


#: ``--set formulation=kane|dae`` (same as 0|1).
FORMULATION_NAMES = {"kane": 0.0, "dae": 1.0}


def _formulation(v) -> str:
    f = v["formulation"]
    if f not in (0.0, 1.0):
        raise ValueError(f"parameter 'formulation': 0 (Kane, eq. 6) or 1 (multiplier DAE, eq. 11), got {f:g}")
    return kane.FORMULATIONS[int(f)]


def _positive(v, *keys):
    for k in keys:
        if not (math.isfinite(v[k]) and v[k] > 0):
            raise ValueError(f"parameter {k!r} must be positive, got {v[k]:g}")


# ======================================================================= slider-crank


def slider_crank_model(l1, l2, m1, m2, m3, g):
    """Open tree of Fig. 1b: crank (revolute z at the origin) -> rod (revolute z at the
    crank tip), slider (prismatic x). Slender uniform rods, the slider a point mass."""
    b = ModelBuilder(gravity=(0.0, -g, 0.0))
    rod = lambda m, l: np.diag([0.0, m * l * l / 12.0, m * l * l / 12.0])
    b.add_body("crank", "world", "revolute", axis=(0, 0, 1), mass=m1, com=(l1 / 2, 0, 0),
               inertia=rod(m1, l1), joint_name="crank_joint")
    b.add_body("rod", "crank", "revolute", axis=(0, 0, 1), pos=(l1, 0, 0), mass=m2,
               com=(l2 / 2, 0, 0), inertia=rod(m2, l2), joint_name="rod_joint")
    b.add_body("slider", "world", "prismatic", axis=(1, 0, 0), mass=m3, joint_name="slider_joint")
    return b.build()


#: q_tree = P q with q = [theta1, theta2, s3] and q_tree = [theta1, theta2 - theta1, s3].
SLIDER_CRANK_MAP = ((1.0, 0.0, 0.0), (-1.0, 1.0, 0.0), (0.0, 0.0, 1.0))


def slider_crank_state(l1, l2, theta1, omega1):
    """``(q, u)`` on the closure of eq. (8) with the slider at x > 0."""
    s1, c1 = math.sin(theta1), math.cos(theta1)
    s2 = -l1 * s1 / l2
    if abs(s2) >= 1.0:
        raise ValueError(f"slider-crank: the rod (l2 = {l2:g}) cannot reach the x axis at theta1 = {theta1:g}")
    c2 = math.sqrt(1.0 - s2 * s2)
    theta2 = math.atan2(s2, c2)
    w2 = -l1 * c1 * omega1 / (l2 * c2)
    s3 = l1 * c1 + l2 * c2
    v3 = -l1 * s1 * omega1 - l2 * s2 * w2
    return np.array([theta1, theta2, s3]), np.array([omega1, w2, v3])


def slider_crank(v: dict, stabilization: str = "none", formulation: str | None = None, **kw):
    """The slider-crank System (Kane or DAE) and its params from scenario values ``v``."""
    _positive(v, "l1", "l2", "m1", "m2", "m3")
    if not (math.isfinite(v["g"]) and v["g"] >= 0):
        raise ValueError(f"parameter 'g' must be non-negative, got {v['g']:g}")
    if v["l1"] >= v["l2"]:
        raise ValueError(f"slider-crank: needs l1 < l2 for a full-turn crank (got l1 = {v['l1']:g}, l2 = {v['l2']:g})")
    model = slider_crank_model(v["l1"], v["l2"], v["m1"], v["m2"], v["m3"], v["g"])
    cuts = kane.make_cuts(model, [{"name": "slider_pin", "body_a": "slider", "body_b": "rod",
                                   "kind": "point", "pos_b": (v["l2"], 0.0, 0.0)}])
    q0, u0 = slider_crank_state(v["l1"], v["l2"], v["theta1_0"], v["omega1_0"])
    formulation = formulation or _formulation(v)
    if stabilization == "baumgarte" and formulation != "dae":
        raise ValueError("slider-crank: Baumgarte stabilization is for the multiplier (DAE) form, eq. (11): "
                         "set formulation=1 (--set formulation=1); the Kane form, eq. (6), takes 'none' or "
                         "'projection'")
    system = kane.build(formulation, model, cuts, q0, u0, names=("theta1", "theta2", "s3"),
                        coordinate_map=SLIDER_CRANK_MAP, stabilization=stabilization,
                        baumgarte=(v.get("a", 0.0), v.get("b", 0.0)), **kw)
    return system, system.default_params()


SLIDER_CRANK_DEFAULTS = {"l1": 0.5, "l2": 1.0, "m1": 1.0, "m2": 2.0, "m3": 3.0, "g": 9.81,
                         "theta1_0": math.pi / 3, "omega1_0": 2.0, "formulation": 0.0,
                         "a": 0.0, "b": 0.0}

register(Scenario(
    name="slider-crank",
    description="Madonna's slider-crank (Fig. 1, eq. 8): Kane cut-joint form or multiplier DAE",
    paper=PAPER,
    build=lambda v, stab: slider_crank(v, stab),
    defaults=SLIDER_CRANK_DEFAULTS,
    t1=5.0, dt=1e-3, solver="rk4", rtol=1e-10, atol=1e-12,
    stabilizations=("none", "projection", "baumgarte"), stabilization="projection",
    choices={"formulation": FORMULATION_NAMES},
    conserved=conserves(energy_unless=()),
))


# ===================================================================== dual-arm grasp

#: Table 1: bus mass [kg] and principal inertia [kg m^2] (a 1.0 x 2.2 x 1.5 m box).
BUS_MASS = 1000.0
BUS_INERTIA = (590.83, 270.83, 486.67)
BUS_HALF_DEPTH = 0.5  # b1 half-size of that box [m]: the arms are mounted on its +b1 face


def link_inertia(mass: float, length: float, radius: float) -> np.ndarray:
    """Solid cylinder along x about its centre (Table 2 links)."""
    ixx = mass * radius**2 / 2.0
    iyy = mass * (3 * radius**2 + length**2) / 12.0
    return np.diag([ixx, iyy, iyy])


def smoothstep(tau):
    """Quintic 0 -> 1 on [0, 1] with zero rate and acceleration at both ends."""
    tau = jnp.clip(tau, 0.0, 1.0)
    return tau**3 * (10.0 - 15.0 * tau + 6.0 * tau**2)


def _smoothstep_integral(tau):
    tau = jnp.clip(tau, 0.0, 1.0)
    return tau**4 * (2.5 - 3.0 * tau + tau**2)


def mission_reference(t, f):
    """``(psi, omega, omega_dot, d)``: bus spin angle/rate/acceleration about b1 and the
    target distance demanded at time ``t`` by the mission profile in ``f`` (forcing)."""
    T = f["t_despin"]
    tau = t / T
    w0 = f["omega0"]
    omega = w0 * (1.0 - smoothstep(tau))
    psi = w0 * T * (jnp.clip(tau, 0.0, 1.0) - _smoothstep_integral(tau))
    inside = (tau > 0.0) & (tau < 1.0)
    omega_dot = jnp.where(inside, -w0 * 30.0 * tau**2 * (1.0 - tau) ** 2 / T, 0.0)
    t_m = f["t_despin"] + f["t_hold1"]
    d = f["d0"] + (f["d1"] - f["d0"]) * smoothstep((t - t_m) / f["t_manip"])
    return psi, omega, omega_dot, d


def arm_ik(d, f, side: float):
    """Joint angles of the left (``side = 1``) or right (``-1``) 3R arm holding the target
    at distance ``d`` (target centre on b1 at ``x = half_depth + R + d``). The grasp point
    is on the sphere at ``grasp`` from -b1 towards the arm's side; link 3 points at the
    centre. Elbow outwards (away from b1)."""
    l = f["link_length"]
    R, beta = f["target_radius"], f["grasp"]
    xc = BUS_HALF_DEPTH + R + d
    gx, gy = xc - R * jnp.cos(beta), R * jnp.sin(beta)
    phi3 = -beta
    wx, wy = gx - l * jnp.cos(phi3), gy - l * jnp.sin(phi3)
    dx, dy = wx - f["mount_x"], wy - f["mount_y"]
    r = jnp.sqrt(dx * dx + dy * dy)
    gamma = jnp.arccos(jnp.clip((r * r - 2 * l * l) / (2 * l * l), -1.0, 1.0))
    phi1 = jnp.arctan2(dy, dx) + jnp.arccos(jnp.clip(r / (2 * l), -1.0, 1.0))
    phi2 = phi1 - gamma
    return side * jnp.stack([phi1, phi2 - phi1, phi3 - phi2])


def _arm_reference(t, f):
    def ang(tt):
        return arm_ik(mission_reference(tt, f)[3], f, 1.0)

    return jax.jvp(ang, (t,), (jnp.ones_like(t),))


# Layout of u (KaneSystem over the forest (sms, target)): bus [w (3), v (3)],
# left1..3, right1..3, target [w (3), v (3)].
_BUS_W = slice(0, 3)
_LEFT = slice(6, 9)
_RIGHT = slice(9, 12)
_TARGET_W = slice(12, 15)


def _bus_attitude(q):
    return sp.mrp_to_dcm(q[0:3])


def dual_arm_control(t, q, u, f):
    """Generalized control forces: bus attitude torque (b-frame) and left-arm joint torques.

    Bus attitude: ``tau = J (omega_ref_dot b1 - wn^2 e - 2 zeta wn (omega - omega_ref b1))``
    with ``e`` the small-angle attitude error ``1/2 vee(C_e^T - C_e)`` of
    ``C_e = [bus ref]``, the reference a rotation ``psi(t)`` about b1 (the de-spin
    profile), and ``J`` the whole closed system's inertia about its centre of mass at the
    start (arms locked) — PD with inertia feed-forward. Left arm (the independent
    coordinates): joint-space computed-torque PD with the constant effective inertia
    ``M_arm`` of the constrained system at the start (the reduced mass matrix
    ``N^T M N`` on the independent speeds, bus left free: a Schur complement),
    ``M_arm (wn^2 (theta_ref - theta) + 2 zeta wn (theta_ref_dot - theta_dot))``, the
    reference from inverse kinematics of the distance profile. One inertia-scaled gain
    gives every arm mode the same bandwidth: plain scalar gains either leave the heavy
    target mode sluggish or make the light link modes too stiff for RK4 at 50 ms. The
    right arm is passive (its joints are dependent speeds, driven by the closure).
    """
    tau_bus, tau_left = _controls(t, q, u, f)
    F = jnp.zeros_like(u)
    return F.at[_BUS_W].set(tau_bus).at[_LEFT].set(tau_left)


def _controls(t, q, u, f):
    psi, omega, omega_dot, _ = mission_reference(t, f)
    b1 = jnp.asarray([1.0, 0.0, 0.0], q.dtype)
    C_ref = sp.axis_angle_dcm(b1, psi)
    Ce = _bus_attitude(q) @ C_ref.T
    D = Ce.T - Ce
    e = 0.5 * jnp.stack([D[2, 1], D[0, 2], D[1, 0]])
    wa, za = f["wn_att"], f["zeta_att"]
    J = f["J_att"]
    tau_bus = J @ (omega_dot * b1 - wa * wa * e - 2.0 * za * wa * (u[_BUS_W] - omega * b1))
    th_ref, thd_ref = _arm_reference(t, f)
    wm, zm = f["wn_arm"], f["zeta_arm"]
    tau_left = f["M_arm"] @ (wm * wm * (th_ref - q[_LEFT]) + 2.0 * zm * wm * (thd_ref - u[_LEFT]))
    return tau_bus, tau_left


def dual_arm_outputs(t, q, u, f):
    """The paper's Figs. 3-5 quantities plus the mission checks."""
    tau_bus, tau_left = _controls(t, q, u, f)
    _, omega_ref, _, d_ref = mission_reference(t, f)
    C_bus = _bus_attitude(q)
    rel = C_bus @ (q[15:18] - q[3:6])  # target centre relative to the bus origin, bus axes
    deg = 180.0 / math.pi
    return {
        "bus_torque": tau_bus,
        "left_arm_torque": tau_left,
        "bus_rate_b1_deg_s": u[0] * deg,
        "bus_rate_b1_ref_deg_s": omega_ref * deg,
        "target_rate_deg_s": jnp.sqrt(jnp.sum(u[_TARGET_W] ** 2)) * deg,
        "distance": rel[0] - BUS_HALF_DEPTH - f["target_radius"],
        "distance_ref": d_ref,
        "target_offset": rel[1:],
    }


def dual_arm_model(v):
    """The forest: the SMS tree (free bus, two planar 3R arms) and the free target."""
    sms = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    sms.add_body("bus", "world", "free", mass=BUS_MASS, inertia=np.diag(BUS_INERTIA))
    I_link = link_inertia(v["link_mass"], v["link_length"], v["link_radius"])
    l = v["link_length"]
    for side, sign in (("left", 1.0), ("right", -1.0)):
        parent, pos = "bus", (BUS_HALF_DEPTH, sign * v["mount_y"], 0.0)
        for k in (1, 2, 3):
            name = f"{side}{k}"
            sms.add_body(name, parent, "revolute", axis=(0, 0, 1), pos=pos, mass=v["link_mass"],
                         com=(l / 2, 0, 0), inertia=I_link)
            parent, pos = name, (l, 0.0, 0.0)
    tgt = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    R = v["target_radius"]
    tgt.add_body("target", "world", "free", mass=v["target_mass"],
                 inertia=np.eye(3) * 0.4 * v["target_mass"] * R * R)
    return sms.build(), tgt.build()


DUAL_ARM_DEFAULTS = {
    "omega0_deg": 5.0, "d0": 1.5, "d1": 0.75,
    "t_despin": 180.0, "t_hold1": 60.0, "t_manip": 120.0,
    "target_mass": 100.0, "target_radius": 1.0,
    "link_mass": 30.0, "link_length": 1.0, "link_radius": 0.035,
    "mount_y": 0.7, "grasp_deg": 60.0,
    "wn_att": 0.1, "zeta_att": 1.0, "wn_arm": 0.5, "zeta_arm": 1.0,
    "formulation": 0.0,
}


def dual_arm(v: dict, stabilization: str = "none", formulation: str | None = None, **kw):
    """The dual-arm post-grasping System (Kane or DAE) and its params."""
    _positive(v, "omega0_deg", "d0", "d1", "t_despin", "t_hold1", "t_manip", "target_mass",
              "target_radius", "link_mass", "link_length", "link_radius", "wn_att", "zeta_att",
              "wn_arm", "zeta_arm")
    if not 0.0 < v["grasp_deg"] < 90.0:
        raise ValueError(f"parameter 'grasp_deg' must be in (0, 90), got {v['grasp_deg']:g}")
    sms, tgt = dual_arm_model(v)
    f = {
        "omega0": v["omega0_deg"] * math.pi / 180.0, "d0": v["d0"], "d1": v["d1"],
        "t_despin": v["t_despin"], "t_hold1": v["t_hold1"], "t_manip": v["t_manip"],
        "link_length": v["link_length"], "target_radius": v["target_radius"],
        "grasp": v["grasp_deg"] * math.pi / 180.0, "mount_x": BUS_HALF_DEPTH, "mount_y": v["mount_y"],
    }
    # reachability of both end distances (elbow neither straight nor folded)
    for key in ("d0", "d1"):
        th = np.asarray(arm_ik(jnp.asarray(v[key]), {k: jnp.asarray(x) for k, x in f.items()}, 1.0))
        if not np.all(np.isfinite(th)) or abs(abs(th[1]) - math.pi) < 0.1 or abs(th[1]) < 0.1:
            raise ValueError(f"parameter {key!r} = {v[key]:g}: the arms cannot hold the target there")
    th0 = np.asarray(arm_ik(jnp.asarray(v["d0"]), {k: jnp.asarray(x) for k, x in f.items()}, 1.0))
    xc = BUS_HALF_DEPTH + v["target_radius"] + v["d0"]
    w0 = f["omega0"]
    q0 = np.concatenate([np.zeros(6), th0, -th0, np.zeros(3), [xc, 0.0, 0.0]])
    u0 = np.concatenate([[w0, 0, 0, 0, 0, 0], np.zeros(6), [w0, 0, 0, 0, 0, 0]])
    # grasp welds: node A at each end effector (link-3 tip), node B the same point and
    # axes on the target at q0
    dcm, pos = api.forward_kinematics(sms, jnp.asarray(q0[:12]))
    pairs = []
    for side in ("left", "right"):
        i = sms.body_index(f"{side}3")
        E, r = np.asarray(dcm[i]), np.asarray(pos[i])
        tip = r + E.T @ np.array([v["link_length"], 0.0, 0.0])
        pairs.append({"name": f"grasp_{side}", "body_a": f"{side}3", "body_b": "target", "kind": "weld",
                      "pos_a": (v["link_length"], 0.0, 0.0), "pos_b": tip - np.array([xc, 0.0, 0.0]),
                      "rot_b": E})
    cuts = kane.make_cuts((sms, tgt), pairs)
    f.update({"wn_att": v["wn_att"], "zeta_att": v["zeta_att"], "wn_arm": v["wn_arm"],
              "zeta_arm": v["zeta_arm"], "J_att": np.eye(3), "M_arm": np.eye(3)})
    forcing = {k: jnp.asarray(x) for k, x in f.items()}
    formulation = formulation or _formulation(v)
    kw.setdefault("independent", ("bus_sigma1", "bus_sigma2", "bus_sigma3", "bus_x", "bus_y", "bus_z",
                                  "left1", "left2", "left3"))
    system = kane.build(formulation, (sms, tgt), cuts, q0, u0, force_fn=dual_arm_control,
                        outputs_fn=dual_arm_outputs, forcing=forcing, clock=True,
                        stabilization=stabilization, **kw)
    # controller inertias from the reduced mass matrix N^T M N on the independent speeds
    # (bus 6, left arm 3) at the start: bus rotation with translation free (Schur
    # complement) = the locked system's inertia about its centre of mass; the left arm's
    # with the bus free.
    params = system.default_params()
    Mr = np.asarray(system.reduced_mass_matrix(params["q0"], params))

    def schur(a, b):
        return Mr[np.ix_(a, a)] - Mr[np.ix_(a, b)] @ np.linalg.solve(Mr[np.ix_(b, b)], Mr[np.ix_(b, a)])

    forcing["J_att"] = jnp.asarray(schur([0, 1, 2], [3, 4, 5]))
    forcing["M_arm"] = jnp.asarray(schur([6, 7, 8], [0, 1, 2, 3, 4, 5]))
    system = eqx.tree_at(lambda s_: s_.forcing, system, forcing)
    return system, system.default_params()


register(Scenario(
    name="dual-arm-grasp",
    description="dual-arm SMS holding a spinning 100 kg target: de-spin, hold, pull in to 0.75 m, hold",
    paper=PAPER,
    build=lambda v, stab: dual_arm(v, stab),
    defaults=DUAL_ARM_DEFAULTS,
    t1=600.0, dt=0.05, solver="rk4", rtol=1e-8, atol=1e-10,
    stabilizations=("none", "projection"), stabilization="none",
    choices={"formulation": FORMULATION_NAMES},
))
