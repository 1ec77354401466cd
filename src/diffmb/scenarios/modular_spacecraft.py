"""Shoer & Peck's Udwadia–Kalaba cases: ``uk-chain``, ``uk-hinged-cubes``.

``uk-chain``
    A free-floating chain of box links joined alternately by revolute and spherical joints
    (4 bodies by default), no gravity: built both as a :class:`~diffmb.formulations.
    udwadia_kalaba.UKSystem` and as a :class:`~diffmb.system.TreeSystem` (ABA) from the same
    bodies and joints (:func:`chain_pair`), for the cross-check and the benchmark.
``uk-hinged-cubes``
    The two-cube laboratory demonstration (section IV.A): see :mod:`diffmb.formulations.udwadia_kalaba.reconfig` and
    :func:`hinged_cubes`. ``diffmb reconfig uk-hinged-cubes`` explores its graph.
``uk-imaging``
    The four-module planetary-imaging spacecraft (section IV.B): see :func:`imaging` for the
    layout chosen where the paper shows it only as a figure (Figs. 6-7).
    ``diffmb reconfig uk-imaging`` explores its graph.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..formulations.udwadia_kalaba import UKBuilder, potentials as pot
from ..formulations.udwadia_kalaba.reconfig import JointSite, Problem
from ..math import spatial as sp
from ..system import TreeSystem
from ..tree import api
from ..tree.model import ModelBuilder
from .scenario import Scenario, conserves, register


def box_inertia(m, a, b, c):
    """Inertia of a uniform box ``a x b x c`` (along x, y, z) about its centre."""
    return np.diag([m * (b * b + c * c), m * (a * a + c * c), m * (a * a + b * b)]) / 12.0


# =============================================================================== chain
def _chain_spec(n, length, mass):
    kinds = ["revolute" if k % 2 == 0 else "spherical" for k in range(n - 1)]
    axes = [np.array(a, float) / np.linalg.norm(a) for a in ((0, 0, 1), (0, 1, 1), (1, 0, 1), (0, 1, 0))]
    links = []
    for i in range(n):
        m = mass * (1.0 + 0.25 * (i % 3))
        links.append((m, box_inertia(m, length, 0.3 * length, 0.2 * length)))
    return kinds, axes, links


def chain_tree_model(n=4, length=0.4, mass=1.0):
    """The chain as a tree: free root, then revolute/spherical joints at the link ends."""
    kinds, axes, links = _chain_spec(n, length, mass)
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    m0, I0 = links[0]
    b.add_body("b0", "world", "free", mass=m0, com=(0, 0, 0), inertia=I0)
    for i in range(1, n):
        m, I = links[i]
        pos = (length / 2, 0.0, 0.0) if i == 1 else (length, 0.0, 0.0)  # the parent's far end
        b.add_body(f"b{i}", f"b{i - 1}", kinds[i - 1], axis=axes[(i - 1) % len(axes)], pos=pos,
                   mass=m, com=(length / 2, 0.0, 0.0), inertia=I)
    return b.build()


def chain_pair(n=4, length=0.4, mass=1.0, *, angles=0.3, rates=0.5, spin=0.4, stabilization="projection",
               half_span=None, **build_kw):
    """``(uk_system, tree_system)`` of the same free-floating chain in the same initial state.

    Tree joint angles ``angles`` (revolute angle, or MRP components ``angles/4`` for spherical
    joints), joint rates ``rates``, and a root angular velocity ``spin`` about a skew axis;
    the UK initial state is the tree's forward kinematics (com positions, quaternions,
    velocities).
    """
    model = chain_tree_model(n, length, mass)
    rng = np.random.default_rng(7)
    q0 = np.zeros(model.nq)
    qd0 = np.zeros(model.nv)
    root_sigma = np.array([0.1, -0.2, 0.15])
    q0[:3], q0[3:6] = root_sigma, (0.05, -0.02, 0.03)
    qd0[:3] = spin * np.array([0.3, -0.5, 0.8])
    qd0[3:6] = (0.02, 0.01, -0.03)
    for i in range(1, n):
        s, e = model.body_slices[i]
        sign = 1.0 if i % 2 else -1.0
        if e - s == 1:
            q0[s], qd0[s] = sign * angles, rates * sign
        else:
            q0[s:e] = angles / 4 * rng.uniform(-1, 1, 3)
            qd0[s:e] = rates * rng.uniform(-1, 1, 3)
    tsys = TreeSystem(model, q0=q0, qd0=qd0)
    dcm, pos, vel = (np.asarray(a) for a in api.forward_kinematics(model, jnp.asarray(q0), jnp.asarray(qd0)))
    com = np.asarray(model.com)
    b = UKBuilder()
    kinds, axes, links = _chain_spec(n, length, mass)
    for i in range(n):
        E = dcm[i]
        r = pos[i] + E.T @ com[i]
        w = vel[i, :3]
        v = E.T @ (vel[i, 3:] + np.cross(w, com[i]))
        q = np.asarray(sp.dcm_to_quat(jnp.asarray(E)))
        b.add_body(f"b{i}", mass=links[i][0], inertia=links[i][1], r=r, q=q, v=v, omega=w,
                   radius=length / 2)
    for i in range(1, n):
        axis_w = dcm[i].T @ np.asarray(model.axis[i])
        b.add_joint(f"j{i}", kinds[i - 1], f"b{i - 1}", f"b{i}", at=pos[i], axis=axis_w,
                    half_span=length / 2 if half_span is None else half_span)
    return b.build(stabilization=stabilization, **build_kw), tsys


def chain_poses_tree(model, xs):
    """Tree trajectory ``xs (k, 2 nq)`` -> com positions ``(k, N, 3)`` and DCMs ``(k, N, 3, 3)``."""
    def one(x):
        dcm, pos = api.forward_kinematics(model, x[: model.nq])
        return pos + sp.mtv(dcm, model.com), dcm

    return jax.vmap(one)(xs)


def chain_poses_uk(system, xs):
    """UK trajectory ``xs (k, 14 n)`` -> com positions and DCMs ``[BN]``."""
    P = xs[:, : 7 * system.n].reshape(xs.shape[0], system.n, 7)
    return P[..., :3], sp.quat_to_dcm(P[..., 3:])


#: The chain's multiplier regularisation (``UKBuilder.build(eps=)``, relative to the mean
#: diagonal of ``A M^-1 A^T``) and tolerances. Free-floating with no load, its momentum is
#: conserved exactly; at the builder's eps 1e-10 and rtol 1e-10 it drifted 6.0e-8 N m s over
#: 10 s in 3,887 Dopri5 steps, most of them spent on the round-off that the near-singular
#: solve (a revolute joint's six rows for five constraints) feeds the step-size control: at
#: eps 1e-8 and rtol 1e-11 it drifts 3.0e-9 in 2,770 steps, and its poses agree with a tight
#: tree reference to 2.4e-8 m instead of 3.4e-7 (experiments/bench_uk.py --drift).
CHAIN_EPS, CHAIN_RTOL, CHAIN_ATOL = 1e-8, 1e-11, 1e-13


def _chain(v, stabilization):
    n = int(v["n_bodies"])
    if n < 2 or n != v["n_bodies"]:
        raise ValueError(f"parameter 'n_bodies': expected an integer >= 2, got {v['n_bodies']:g}")
    if v["length"] <= 0 or v["mass"] <= 0:
        raise ValueError("parameters 'length' and 'mass' must be positive")
    system, _ = chain_pair(n, v["length"], v["mass"], angles=v["angle0"], rates=v["rate0"], spin=v["spin"],
                           stabilization=stabilization, baumgarte=(v["a"], v["b"]), eps=CHAIN_EPS)
    return system, system.default_params()


register(Scenario(
    name="uk-chain",
    description="free-floating 4-link chain, revolute + spherical joints, UK quaternion form (tree cross-check)",
    paper="Shoer & Peck (Udwadia-Kalaba with quaternions), section III",
    build=_chain,
    defaults={"n_bodies": 4.0, "length": 0.4, "mass": 1.0, "angle0": 0.3, "rate0": 0.5, "spin": 0.4,
              "a": 10.0, "b": 10.0},
    t1=2.0, dt=1e-3, solver="dopri5", rtol=CHAIN_RTOL, atol=CHAIN_ATOL,
    stabilizations=("none", "baumgarte", "projection"), stabilization="projection",
    conserved=conserves(momentum=True, energy_unless=()),
))


# ======================================================================== hinged cubes
#: Laboratory CubeSat mock-ups (section IV.A, refs. 19-20): 1U cubes of side 0.1 m and
#: 1.0 kg (the CubeSat standard allows up to 1.33 kg per U), a 2.5 cm flux-pinned gap.
CUBE = {"side": 0.1, "mass": 1.0, "gap": 0.025}


def _rz(deg):
    a = math.radians(deg)
    return np.array([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0.0, 0.0, 1.0]])


def hinged_cubes(v=None, stabilization="projection"):
    """The two-cube demonstration (section IV.A) as a UK system.

    Cube ``c1`` is inertially fixed at the origin; cube ``c2`` starts across a gap on its
    +x side (configuration A, centre at ``(s + gap, 0, 0)``) and is held by a flux-pinned,
    non-contacting hinge: a revolute joint about z through ``c1``'s centre (so ``c2``
    swings around ``c1`` at a constant standoff, faces square to ``c1`` every 90 deg). Two
    selectable flux-pinning wells (:class:`~diffmb.formulations.udwadia_kalaba.potentials.FluxPinningWell`,
    with their damping): ``well_px`` holds ``c2``'s inner face across the gap from
    ``c1``'s +x face (A), ``well_my`` from its -y face (B, ``c2`` turned -90 deg about z).
    Face sensors ``c1_px``, ``c1_my`` (on ``c1``) and ``c2_in`` (``c2``'s inner face) meet
    when the faces align. ``v["well"]``: 0 selects the +x well, 1 the -y well.
    """
    v = dict(CUBE_DEFAULTS, **(v or {}))
    s, m, g = v["side"], v["mass"], v["gap"]
    if s <= 0 or m <= 0 or g <= 0:
        raise ValueError("parameters 'side', 'mass' and 'gap' must be positive")
    if v["well"] not in (0.0, 1.0):
        raise ValueError(f"parameter 'well': expected px (0) or my (1), got {v['well']:g}")
    rho = s + g
    I = box_inertia(m, s, s, s)
    b = UKBuilder()
    b.add_body("c1", mass=m, inertia=I, fixed=True, radius=0.6 * s)
    b.add_body("c2", mass=m, inertia=I, r=(rho, 0.0, 0.0), radius=0.6 * s)
    b.add_joint("hinge", "revolute", "c1", "c2", at=(0.0, 0.0, 0.0), axis=(0.0, 0.0, 1.0), half_span=s / 2)
    common = dict(bodies=("c1", "c2"), pin_b=(-s / 2, 0.0, 0.0), k_t=v["k_t"], k_r=v["k_r"],
                  c_t=v["c_t"], c_r=v["c_r"])
    b.add(pot.FluxPinningWell("well_px", pin_a=(s / 2, 0.0, 0.0), offset=(g, 0.0, 0.0), **common))
    b.add(pot.FluxPinningWell("well_my", pin_a=(0.0, -s / 2, 0.0), offset=(0.0, -g, 0.0),
                              rel_eq=tuple(map(tuple, _rz(-90.0))), **common))
    b.add_sensor(pot.Sensor("c1_px", "c1", (s / 2, 0.0, 0.0), (1.0, 0.0, 0.0), radius=g))
    b.add_sensor(pot.Sensor("c1_my", "c1", (0.0, -s / 2, 0.0), (0.0, -1.0, 0.0), radius=g))
    b.add_sensor(pot.Sensor("c2_in", "c2", (-s / 2, 0.0, 0.0), (-1.0, 0.0, 0.0), radius=g))
    system = b.build(stabilization=stabilization, baumgarte=(v["a"], v["b"]))
    params = system.default_params()
    sel = v["well"]
    inter = dict(params["interactions"])
    inter["well_px"] = {**inter["well_px"], "weight": jnp.asarray(1.0 - sel)}
    inter["well_my"] = {**inter["well_my"], "weight": jnp.asarray(sel)}
    return system, {**params, "interactions": inter}


CUBE_DEFAULTS = {"side": CUBE["side"], "mass": CUBE["mass"], "gap": CUBE["gap"], "k_t": 20.0, "k_r": 0.02,
                 "c_t": 2.0, "c_r": 0.03, "well": 1.0, "a": 20.0, "b": 20.0}


def cubes_problem(overrides=None):
    v = dict(CUBE_DEFAULTS, **{k: float(x) for k, x in (overrides or {}).items()})
    # Baumgarte, not projection: simulate's projected solver snaps its dense output to the
    # projected step end, which stalls the Newton root find of real-valued events.
    system, params = hinged_cubes(v, "baumgarte")
    return Problem(
        system=system, params=params,
        sites=(JointSite("hinge", {"revolute": ("hinge",), "free": ()}),),
        choices={"+x": {"well_px": 1.0}, "-y": {"well_my": 1.0}},
        sensor_pairs=(("c1_px", "c2_in"), ("c1_my", "c2_in")), align_tol=math.radians(2.0),
        t_max=6.0, n_save=121, dwell=1.0, ke_tol=1e-7, rate_tol=1e-3, pose_tol=(5e-3, 0.1),
        separation=5 * v["side"],
    )


register(Scenario(
    name="uk-hinged-cubes",
    description="two CubeSat mock-ups, c1 fixed, c2 on a flux-pinned z hinge, +x / -y wells (reconfig: 2 nodes)",
    paper="Shoer & Peck (Udwadia-Kalaba with quaternions), section IV.A",
    build=lambda v, stab: hinged_cubes(v, stab),
    defaults=dict(CUBE_DEFAULTS),
    choices={"well": {"px": 0.0, "my": 1.0}},
    t1=5.0, dt=1e-3, solver="dopri5", rtol=1e-8, atol=1e-10,
    stabilizations=("none", "baumgarte", "projection"), stabilization="projection",
    conserved=conserves(momentum=True, energy_unless=("c_t", "c_r")),
    reconfiguration=cubes_problem,
))


# ====================================================================== imaging craft
#: The four identical modules of the planetary-imaging spacecraft (section IV.B). The paper
#: gives no numbers: we take 0.5 m cubes of 50 kg (an ESPA-class microsatellite each), a
#: 2 cm non-contacting flux-pinned gap between neighbours, and a low orbit about the target
#: planet with orbit rate ``n_orbit`` = 1.1e-3 rad/s (period ~95 min).
IMAGING = {"side": 0.5, "mass": 50.0, "gap": 0.02}
IMAGING_SITES = ("s12", "s23", "s34")
SITE_OPTIONS = ("free", "revolute", "fixed")  # the numeric codes 0, 1, 2 of the site parameters
IMAGING_DEFAULTS = {"side": IMAGING["side"], "mass": IMAGING["mass"], "gap": IMAGING["gap"],
                    "n_orbit": 1.1e-3, "c_v": 0.05, "c_w": 0.01, "k_t": 2e-3, "k_r": 2e-3,
                    "c_t": 0.2, "c_r": 0.1, "s12": 2.0, "s23": 1.0, "s34": 2.0, "em": 2.0,
                    "a": 0.05, "b": 0.05}
#: selectable potentials (``em`` parameter / explorer choices): ambient only, or ambient plus
#: one set of electromagnet wells.
IMAGING_CHOICES = {"gg": (), "em-fold": ("em12", "em23_fold", "em34"), "em-wide": ("em12", "em23_wide", "em34"),
                   "em-line": ("em12", "em23_line", "em34")}


def _imaging_layout(d):
    """Transit (launch) configuration: centres (x, y) and attitudes (deg about z) of the four
    modules, and the world hinge points of the three joint sites."""
    centres = {"m1": (0.0, 0.0), "m2": (d, 0.0), "m3": (d, d), "m4": (0.0, d)}
    angles = {"m1": 0.0, "m2": 0.0, "m3": 180.0, "m4": 180.0}
    hinges = {"s12": ("m1", "m2", (d / 2, -d / 2)), "s23": ("m2", "m3", (1.5 * d, d / 2)),
              "s34": ("m3", "m4", (d / 2, 1.5 * d))}
    return centres, angles, hinges


def _quat_z(deg):
    a = math.radians(deg) / 2
    return (0.0, 0.0, math.sin(a), math.cos(a))


def imaging_configurations(d):
    """``{configuration: {module: (centre (3,), DCM {}^N Q^B)}}`` of the three named forms:
    ``transit`` (the 2x2 launch block), ``wide`` (m3-m4 swung 90 deg out about ``s23``: an
    L whose camera faces fan out, the wide-angle form) and ``line`` (swung 180 deg: the
    straight chain along the local vertical, the raster form)."""
    centres, angles, _ = _imaging_layout(d)
    out = {"transit": {k: (np.array([*centres[k], 0.0]), _rz(angles[k])) for k in centres}}
    h = np.array([1.5 * d, 0.5 * d, 0.0])
    for name, turn in (("wide", -90.0), ("line", -180.0)):
        R = _rz(turn)
        cfg = dict(out["transit"])
        for k in ("m3", "m4"):
            r, Q = out["transit"][k]
            cfg[k] = (h + R @ (r - h), R @ Q)
        out[name] = cfg
    return out


def _relative_well(name, a, b, ra, Qa, rb, Qb, v):
    """A 6-DOF electromagnet well holding ``b`` at the relative pose (``rb``, ``Qb``) w.r.t.
    ``a`` (``ra``, ``Qa``): a :class:`~diffmb.formulations.udwadia_kalaba.potentials.FluxPinningWell` between the
    two centres, with its damping."""
    return pot.FluxPinningWell(name, bodies=(a, b), pin_a=(0.0, 0.0, 0.0), pin_b=(0.0, 0.0, 0.0),
                               offset=tuple(float(u) for u in Qa.T @ (np.asarray(rb) - np.asarray(ra))),
                               rel_eq=tuple(map(tuple, Qa.T @ Qb)), k_t=v["k_t"], k_r=v["k_r"],
                               c_t=v["c_t"], c_r=v["c_r"])


def imaging(v=None, stabilization="projection", **build_kw):
    """The four-module planetary-imaging spacecraft (section IV.B) as a UK system.

    **Frame.** The orbit frame at module ``m1``'s centre: x the local vertical (radially
    outward), y along-track, z the orbit normal. All hinge axes are along z, so every
    reconfiguration happens in the orbit plane, where the gravity gradient acts.

    **Modules** (the paper: four identical modules, numbers not given): cubes of side
    ``side`` = 0.5 m and ``mass`` = 50 kg (uniform-box inertia), neighbours a ``gap`` = 2 cm
    apart (non-contacting flux-pinned interfaces), pitch ``d = side + gap``. Module ``m1`` is
    the core and is held inertially fixed in the orbit frame (its attitude control is the
    reference of every configuration, as the fixed cube of section IV.A), ``m2``-``m4`` move.
    Bounding spheres: the inscribed spheres (radius ``side / 2``), so neighbours across the
    gap do not count as colliding.

    **Layout** (Fig. 6 is only a sketch; this is our reading): the modules form a chain
    ``m1 - m2 - m3 - m4`` whose straight configuration (a line along the local vertical,
    the gravity-gradient-stable "raster" form of Fig. 7) is folded by 180 deg at its middle
    for launch, giving the compact 2x2 transit block of the initial configuration::

        m4 (0, d)  [turned 180]   s34 (d/2, 3d/2)   m3 (d, d)  [turned 180]
        m1 (0, 0)  [core, fixed]  s12 (d/2, -d/2)   m2 (d, 0)       s23 (3d/2, d/2)

    **Joint sites** (section IV.B: "each joint site can be fully free, fully fixed, or a
    revolute joint"): ``s12`` (m1-m2), ``s23`` (m2-m3) and ``s34`` (m3-m4), at the outer
    corner edges where the neighbours' faces meet, each with a revolute joint about z and a
    weld (``fixed``) joint; parameter value 0 = free, 1 = revolute, 2 = fixed. Each site
    carries a sensor pair (one sensor per module at the hinge point, radius ``gap / 2``): a
    site can be made only while its pair meets.

    **Potentials** (section II/IV.B): always on, the gravity gradient of the circular orbit
    (rate ``n_orbit``; it pulls the modules apart along the vertical — the paper's green,
    ambient transitions) and a small linear damping (``c_v``, ``c_w``: the "small amount of
    dissipation" of Figs. 5 and 8). Selectable (parameter ``em``: 0 ambient only ``gg``,
    1 ``em-fold``, 2 ``em-wide``, 3 ``em-line``; the paper's red, powered transitions):
    electromagnet wells between neighbours, modelled as 6-DOF spring-damper wells (``k_t``,
    ``k_r``, ``c_t``, ``c_r``) around a relative pose (:func:`imaging_configurations`):
    ``em12`` and ``em34`` hold m1-m2 and m3-m4 as they are in every named form, and
    ``em23_fold`` / ``em23_wide`` / ``em23_line`` hold m3 w.r.t. m2 as in the transit block,
    the wide-angle L (m3-m4 swung 90 deg out about ``s23``) or the straight raster line
    (swung 180 deg). A 180-deg swing is a saddle of the wells (both ways round are equally
    short), so the transitions of the graph go block <-> L <-> line in 90-deg steps; the
    explorer rejects the ambiguous direct ones when they sweep a module through another.
    Time scale: the gravity gradient acts over ``1 / n_orbit`` ~ 900 s; the wells
    (``k_t`` = ``k_r`` = 2e-3, weak electromagnets at half a metre) over a few hundred
    seconds.

    ``build_kw`` go to :meth:`~diffmb.formulations.udwadia_kalaba.UKBuilder.build` (e.g.
    ``projection_iterations``).

    Defaults (``diffmb run uk-imaging``): ``s12`` fixed, ``s23`` revolute, ``s34`` fixed with
    ``em-wide``: the transit block opens into the wide-angle L (the first step of Fig. 8).
    """
    v = dict(IMAGING_DEFAULTS, **(v or {}))
    s, m, g = v["side"], v["mass"], v["gap"]
    if s <= 0 or m <= 0 or g <= 0:
        raise ValueError("parameters 'side', 'mass' and 'gap' must be positive")
    for site in IMAGING_SITES:
        if v[site] not in (0.0, 1.0, 2.0):
            raise ValueError(f"parameter {site!r}: expected free (0), revolute (1) or fixed (2), got {v[site]:g}")
    if v["em"] not in (0.0, 1.0, 2.0, 3.0):
        raise ValueError(f"parameter 'em': expected gg (0), em-fold (1), em-wide (2) or em-line (3), got {v['em']:g}")
    d = s + g
    centres, angles, hinges = _imaging_layout(d)
    I = box_inertia(m, s, s, s)
    b = UKBuilder()
    for name in ("m1", "m2", "m3", "m4"):
        x, y = centres[name]
        b.add_body(name, mass=m, inertia=I, r=(x, y, 0.0), q=_quat_z(angles[name]), fixed=(name == "m1"),
                   radius=s / 2)
    for site, (a, c, (x, y)) in hinges.items():
        b.add_joint(f"{site}_rev", "revolute", a, c, at=(x, y, 0.0), axis=(0.0, 0.0, 1.0), half_span=s / 2)
        b.add_joint(f"{site}_fix", "fixed", a, c, at=(x, y, 0.0))
        for body in (a, c):
            cx, cy = centres[body]
            Qb = _rz(angles[body])
            b.add_sensor(pot.Sensor(f"{site}_{body}", body, tuple(Qb.T @ np.array([x - cx, y - cy, 0.0])),
                                    radius=g / 2))
    b.add(pot.GravityGradient("gg", n=v["n_orbit"], radial=(1.0, 0.0, 0.0)))
    b.add(pot.LinearDamping("damp", c_v=v["c_v"], c_w=v["c_w"]))
    # electromagnet wells: target relative poses of the three configurations
    cfg = imaging_configurations(d)
    blk = cfg["transit"]
    for a, c in (("m1", "m2"), ("m3", "m4")):  # the same relative pose in every configuration
        b.add(_relative_well(f"em{a[1]}{c[1]}", a, c, *blk[a], *blk[c], v))
    for name in ("fold", "wide", "line"):
        tgt = cfg[{"fold": "transit", "wide": "wide", "line": "line"}[name]]
        b.add(_relative_well(f"em23_{name}", "m2", "m3", *tgt["m2"], *tgt["m3"], v))
    system = b.build(stabilization=stabilization, **{"baumgarte": (v["a"], v["b"]), **build_kw})
    return system, imaging_select(system, system.default_params(),
                                  {site: SITE_OPTIONS[int(v[site])] for site in IMAGING_SITES},
                                  tuple(IMAGING_CHOICES)[int(v["em"])])


def imaging_select(system, params, sites, choice):
    """``params`` with the joint layout ``sites`` (``{site: "free" | "revolute" | "fixed"}``)
    and the potential ``choice`` (a key of :data:`IMAGING_CHOICES`) switched on."""
    joints = {}
    for kind, names, _, _ in system.joints:
        act = []
        for n in names:
            site, _, k = n.partition("_")
            act.append(1.0 if sites[site] == {"rev": "revolute", "fix": "fixed"}[k] else 0.0)
        joints[kind] = {**params["joints"][kind], "active": jnp.asarray(act)}
    inter = {}
    on = IMAGING_CHOICES[choice]
    for name, ip in params["interactions"].items():
        w = 1.0 if (name in ("gg", "damp") or name in on) else 0.0
        inter[name] = {**ip, "weight": jnp.asarray(w)}
    return {**params, "joints": joints, "interactions": inter}


#: the explorer's bound on the number of nodes (candidates reaching a new configuration
#: beyond it are counted as ``rejected["max_nodes"]``)
IMAGING_MAX_NODES = 12


def imaging_problem(overrides=None):
    v = dict(IMAGING_DEFAULTS, **{k: float(x) for k, x in (overrides or {}).items()})
    system, params = imaging(v, "baumgarte")
    n = v["n_orbit"]
    if n <= 0:
        raise ValueError("parameter 'n_orbit': the explorer needs a positive orbit rate")
    tau = 1.0 / n  # the gravity-gradient time scale (~900 s)
    sites = tuple(JointSite(site, {"free": (), "revolute": (f"{site}_rev",), "fixed": (f"{site}_fix",)},
                            sensors=(f"{site}_{a}", f"{site}_{c}"))
                  for site, (a, c, _) in _imaging_layout(v["side"] + v["gap"])[2].items())
    return Problem(
        system=system, params=params, sites=sites,
        choices={c: {w: 1.0 for w in ws} for c, ws in IMAGING_CHOICES.items()},
        always=("gg", "damp"),
        sensor_pairs=tuple(s.sensors for s in sites),
        t_max=12.0 * tau, n_save=121, dwell=2.0 * tau, ke_tol=1e-9, rate_tol=2e-5,
        pose_tol=(0.02, 0.05), separation=3.0 * (v["side"] + v["gap"]),
        rtol=1e-7, atol=1e-9, max_nodes=IMAGING_MAX_NODES,
    )


register(Scenario(
    name="uk-imaging",
    description="four-module planetary-imaging spacecraft: free/revolute/fixed joint sites, gravity gradient + wells",
    paper="Shoer & Peck (Udwadia-Kalaba with quaternions), section IV.B",
    build=lambda v, stab: imaging(v, stab),
    defaults=dict(IMAGING_DEFAULTS),
    choices={**{site: {o: float(i) for i, o in enumerate(SITE_OPTIONS)} for site in IMAGING_SITES},
             "em": {c: float(i) for i, c in enumerate(IMAGING_CHOICES)}},
    t1=3000.0, dt=1.0, solver="dopri5", rtol=1e-8, atol=1e-10,
    stabilizations=("none", "baumgarte", "projection"), stabilization="projection",
    reconfiguration=imaging_problem,
))
