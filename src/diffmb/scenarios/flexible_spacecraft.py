"""Banerjee & Lemak's examples: a solar sail slewing, and a four-body flexible chain.

``solar-sail-slew`` (paper Figs. 1-2)
    One flexible body with 44 elastic modes (50 DOF). Geometry (the paper gives none; a
    notional square sail): a rigid hub (``hub_mass``, inertia ``diag(hub_ixx, hub_ixx,
    hub_izz)``) at the origin of the body frame, four booms of length ``boom_length`` along
    +x, +y, -x, -y (the sail plane is x-y, the normal z), clamped to the hub, each a
    built-in Euler-Bernoulli FE cantilever (:func:`~diffmb.formulations.flexible.frame_modes.frame_modes`,
    ``n_elements`` elements) with out-of-plane rigidity ``EI_out`` and in-plane rigidity
    ``EI_in``, boom mass ``boom_mu`` per metre. Membrane approximation: the square
    membrane (corners at the boom tips, area ``2 L^2``, areal density ``membrane_rho``) is
    carried as mass only, lumped onto the booms with the tributary line density
    ``rho (L - s)`` (each boom carries a quarter; the membrane's own tension and modes are
    neglected). The 44 lowest clamped-hub modes are kept — per boom 6 out-of-plane and
    5 in-plane (4-fold degenerate groups). Centrifugal geometric stiffening is on.
    Bang-bang torque ``torque`` about the body axis ``(axis_x, axis_y, axis_z)`` for
    ``t_switch`` seconds, reversed for ``t_switch`` seconds, then zero (coast) to 300 s;
    with ``slew_angle > 0`` [rad] the torque is instead the one that turns the rigid
    spacecraft by that angle (``I_axis slew_angle / t_switch^2``) with switches smoothed
    over ``slew_ramp`` seconds, so that ``t_switch`` alone trades the slew's speed against
    the vibration it leaves (tune loss ``slew``: :func:`slew_loss`).
    Outputs: attitude (MRPs and ``attitude_angle``), rates, and the tip deflection of the
    +x boom ``tip_px`` / +y boom ``tip_py`` (body axes) in the diagnostics.

``flex-4body`` (Figs. 3-4)
    Four identical flexible beams (10 modes each: cantilever modes clamped at the body's
    inboard end, 5 per bending plane) in a chain: body 1 free-flying, body 2 on a
    revolute joint (axis z) at body 1's tip, body 3 on a Hooke joint (axes z, y) at body
    2's tip, body 4 on a ball joint at body 3's tip: 6 + 1 + 2 + 3 + 40 = 52 DOF. The
    revolute rotation is prescribed, a smooth rest-to-rest slew of ``slew_angle`` in
    ``slew_time`` seconds; its internal load (the hinge torque, Fig. 4) is
    ``diagnostics["load"]``. Bodies 3 and 4 start with small joint rates.

``speeds`` = 0 (efficient) / 1 (customary); ``algorithm`` = 0 (recursive) / 1 (dense).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..formulations import flexible as fx
from ..formulations.flexible import frame_modes as fe, modal as md
from .scenario import Scenario, register

#: The part of the horizon over which loss ``slew`` judges the pointing (its end).
SLEW_WINDOW = 0.25


def _choice(v, key, options):
    """The option ``v[key]`` codes (0, 1, ...: a whole number, not rounded)."""
    k = float(v[key])
    if k not in range(len(options)):
        codes = ", ".join(f"{o} ({i})" for i, o in enumerate(options))
        raise ValueError(f"parameter {key!r}: expected {codes}, got {k:g}")
    return options[int(k)]


def _element_count(v, scenario: str, least: int, why: str) -> int:
    """``v["n_elements"]`` as a whole number of at least ``least`` (``why``: what needs them)."""
    n = float(v["n_elements"])
    if not (n == round(n) and n >= least):
        raise ValueError(f"{scenario}: n_elements must be a whole number of at least {least} ({why}), got {n:g}")
    return int(n)


def sail_modal(v) -> md.ModalData:
    """The sail's modal data (see module docstring)."""
    L = float(v["boom_length"])
    ne = _element_count(v, "solar-sail-slew", 4, "elements per boom")
    if L <= 0:
        raise ValueError("solar-sail-slew: boom_length must be positive")
    rho = float(v["membrane_rho"])
    nodes, mass, elements, names = [np.zeros(3)], [0.0], [], ["hub"]
    h = L / ne
    for b, (d, label) in enumerate(zip(((1, 0, 0), (0, 1, 0), (-1, 0, 0), (0, -1, 0)), ("px", "py", "mx", "my"))):
        d = np.asarray(d, float)
        prev = 0
        for k in range(1, ne + 1):
            s = k * h
            nodes.append(s * d)
            w = h if k < ne else h / 2
            mass.append(float(v["boom_mu"]) * w + rho * (L - s) * w + (float(v["tip_mass"]) if k == ne else 0.0))
            names.append(f"tip_{label}" if k == ne else f"{label}{k}")
            idx = len(nodes) - 1
            elements.append((prev, idx, {"EIy": float(v["EI_out"]), "EIz": float(v["EI_in"]),
                                         "GJ": 0.8 * float(v["EI_out"]),
                                         "EA": 1e4 * max(float(v["EI_out"]), float(v["EI_in"])),
                                         "up": (0.0, 0.0, 1.0)}))
            prev = idx
    hub_I = np.diag([v["hub_ixx"], v["hub_ixx"], v["hub_izz"]])
    return fe.frame_modes(np.asarray(nodes), elements, np.asarray(mass), clamped=(0,), n_modes=44,
                          name="sail", damping_ratio=float(v["damping_ratio"]), node_names=names,
                          rigid_mass=float(v["hub_mass"]), rigid_inertia=hub_I)


def _bang_bang(t, f):
    """The slew torque: ``torque`` for ``t_switch`` s, reversed for as long, then none.

    With ``slew_angle > 0`` it is instead the torque that turns the rigid spacecraft by
    that angle, ``I_axis slew_angle / t_switch^2`` (a bang-bang slew turns by
    ``tau t_s^2 / I``), and its switches are smooth steps ``(1 + tanh(x / slew_ramp)) / 2``:
    a switch time is then a number the motion depends on smoothly, so gradients with
    respect to ``t_switch`` see the switch move (a sharp switch moves only when it crosses
    a step of a fixed-step solver, which autodiff cannot see)."""
    ts = f["t_switch"]
    step = lambda x: 0.5 * (1.0 + jnp.tanh(x / f["ramp"]))
    smooth = f["inertia"] * f["slew_angle"] / ts**2 * (1.0 - 2.0 * step(t - ts) + step(t - 2 * ts))
    sharp = f["torque"] * jnp.where(t < ts, 1.0, jnp.where(t < 2 * ts, -1.0, 0.0))
    return (jnp.where(f["slew_angle"] > 0, smooth, sharp) * f["axis"])[None, :]


def axis_inertia(data: md.ModalData, axis) -> float:
    """The undeformed spacecraft's moment of inertia about ``axis`` through the body origin
    (hub plus the booms' and membrane's lumped node masses)."""
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    r = np.asarray(data.nodes, float)
    lever = np.sum(r * r, 1) - (r @ a) ** 2
    return float(a @ np.asarray(data.rigid_inertia) @ a + np.sum(np.asarray(data.node_mass) * lever))


def slew_loss(tr, params, *, window=SLEW_WINDOW):
    """Pointing error at the end of a slew (loss ``slew`` of ``solar-sail-slew``): the mean,
    over the last ``window`` of the horizon, of ``(attitude angle - slew_angle)^2`` plus
    each of the +x and +y boom tips' elastic deflection over the boom length, squared
    (rad^2: the angle off target and the angles the booms still swing through). A slew
    must be over and quiet before the window: a fast one leaves the booms ringing, one
    too slow has not arrived."""
    f = params["forcing"]
    valid = jnp.isfinite(tr.ts)
    ts = jnp.where(valid, tr.ts, 0.0)
    t_end = jnp.max(ts)
    inside = valid & (ts >= t_end - window * (t_end - ts[0]))
    err = (tr.diagnostics["attitude_angle"] - f["slew_angle"]) ** 2
    for tip in ("tip_px", "tip_py"):
        err = err + jnp.sum(tr.diagnostics[tip] ** 2, -1) / f["boom_length"] ** 2
    return jnp.sum(jnp.where(inside, err, 0.0)) / jnp.maximum(jnp.sum(inside.astype(err.dtype)), 1.0)


def _sail(v, stabilization):
    data = sail_modal(v)
    axis = np.asarray([v["axis_x"], v["axis_y"], v["axis_z"]], float)
    if np.linalg.norm(axis) == 0:
        raise ValueError("solar-sail-slew: the torque axis (axis_x, axis_y, axis_z) is zero")
    body = fx.FlexBody("sail", data, "world", "free")
    forcing = {"torque": jnp.asarray(float(v["torque"])), "t_switch": jnp.asarray(float(v["t_switch"])),
               "axis": jnp.asarray(axis / np.linalg.norm(axis)),
               "slew_angle": jnp.asarray(float(v["slew_angle"])),
               "inertia": jnp.asarray(axis_inertia(data, axis)),
               "ramp": jnp.asarray(float(v["slew_ramp"])),
               "boom_length": jnp.asarray(float(v["boom_length"]))}
    system = fx.build(
        [body], speeds=_choice(v, "speeds", fx.SPEEDS), algorithm=_choice(v, "algorithm", fx.ALGORITHMS),
        geometric_stiffening=_choice(v, "geometric_stiffening", (False, True)), torque_fn=_bang_bang, forcing=forcing,
        outputs=(("tip_px", "sail", "tip_px"), ("tip_py", "sail", "tip_py")))
    return system, system.default_params()


#: Modes kept of each flex-4body beam (a beam of n elements has 3 n).
BEAM_MODES = 10


def beam_body(v) -> md.ModalData:
    ne = _element_count(v, "flex-4body", -(-BEAM_MODES // 3), f"each element gives 3 modes; a beam keeps {BEAM_MODES}")
    return fe.cantilever_beam(
        float(v["length"]), ne, float(v["EI"]), float(v["mu"]), BEAM_MODES,
        name="beam", EI2=float(v["EI"]) * float(v["EI_ratio"]), damping_ratio=float(v["damping_ratio"]),
        rigid_mass=float(v["joint_mass"]), rigid_inertia=np.eye(3) * float(v["joint_inertia"]))


def slew_profile(t, p):
    """Smooth rest-to-rest slew: ``A (tau - sin(2 pi tau) / (2 pi))``, ``tau = t / T`` clipped."""
    tau = jnp.clip(t / p["T"], 0.0, 1.0)
    return p["A"] * (tau - jnp.sin(2 * jnp.pi * tau) / (2 * jnp.pi))


def _four(v, stabilization):
    data = beam_body(v)
    bodies = [
        fx.FlexBody("body1", data, "world", "free", u0=[0.0, 0.0, 0.05, 0.0, 0.0, 0.0]),
        fx.FlexBody("body2", data, "body1", "revolute", hinge="tip", axis=(0, 0, 1),
                    prescribed={0: slew_profile}),
        fx.FlexBody("body3", data, "body2", "universal", hinge="tip", axis=(0, 0, 1), axis2=(0, 1, 0),
                    u0=[float(v["rate3"]), -float(v["rate3"])]),
        fx.FlexBody("body4", data, "body3", "spherical", hinge="tip", u0=[float(v["rate4"]), 0.0, 0.0]),
    ]
    system = fx.build(
        bodies, speeds=_choice(v, "speeds", fx.SPEEDS), algorithm=_choice(v, "algorithm", fx.ALGORITHMS),
        geometric_stiffening=_choice(v, "geometric_stiffening", (False, True)),
        prescribed_params={"body2": {"A": jnp.asarray(float(v["slew_angle"])),
                                     "T": jnp.asarray(float(v["slew_time"]))}},
        outputs=(("tip4", "body4", "tip"),))
    return system, system.default_params()


register(Scenario(
    name="solar-sail-slew",
    description="solar sail, one flexible body with 44 modes (50 DOF), bang-bang slew, 300 s",
    paper="Banerjee & Lemak, efficient speeds in recursive flexible dynamics, Figs. 1-2",
    build=_sail,
    defaults={"boom_length": 20.0, "n_elements": 12, "boom_mu": 0.1, "EI_out": 200.0, "EI_in": 320.0,
              "membrane_rho": 0.005, "tip_mass": 0.05, "hub_mass": 100.0, "hub_ixx": 20.0, "hub_izz": 30.0,
              "damping_ratio": 0.005, "torque": 1.0, "t_switch": 30.0, "axis_x": 0.0, "axis_y": 0.0,
              "axis_z": 1.0, "slew_angle": 0.0, "slew_ramp": 0.5, "speeds": 0.0, "algorithm": 0.0,
              "geometric_stiffening": 1.0},
    t1=300.0, dt=0.02, solver="rk4",
    losses={"slew": slew_loss},
))

register(Scenario(
    name="flex-4body",
    description="four flexible beams, revolute + Hooke + ball joints (52 DOF), prescribed slew + hinge load",
    paper="Banerjee & Lemak, efficient speeds in recursive flexible dynamics, Figs. 3-4",
    build=_four,
    defaults={"length": 2.0, "n_elements": 8, "EI": 6.0, "EI_ratio": 2.0, "mu": 1.0, "joint_mass": 0.5,
              "joint_inertia": 0.02, "damping_ratio": 0.01, "slew_angle": 1.0, "slew_time": 4.0,
              "rate3": 0.2, "rate4": 0.3, "speeds": 0.0, "algorithm": 0.0, "geometric_stiffening": 1.0},
    t1=10.0, dt=5e-3, solver="rk4",
))
