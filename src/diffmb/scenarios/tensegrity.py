"""Hsu, Tadiparthi & Bhattacharya's tensegrity cases (Table 1, Figs. 1 and 17) as CLI scenarios.

The paper shows the geometry only as figures; we take it from the authors' published code
(STEDY, ``Examples/TBar``, ``Examples/Arm``, ``Examples/Ball``), with these choices:

``tbar``  (Fig. 1a) nodes 1 (0,0,0), 2 (c,0,0), 3 (c,0,c), 4 (0,0,c), ``c = 5 cos 45deg``;
          bars 1-3 and 2-4 (5 m, crossing), strings 1-2, 2-3, 3-4, 4-1 at 100 N/m; the
          vertical strings 2-3 and 4-1 at 90 % of their initial length (``rest_vertical``),
          the horizontal ones at 100 % (the top one goes slack when it shortens; 1-2 joins
          fixed nodes and never acts). Nodes 1, 2 fixed, y of nodes 3, 4 fixed (2-D).
          No gravity, no damping: energy is conserved.
``tensegrity-arm`` (Fig. 1b) 16 nodes, 16 bars, 18 nylon strings (E = 2 GPa, r = 1 mm,
          K = E A / l0); nodes 1, 2, 16 fixed, and y of every node fixed (a 2-D arm; the
          authors' code leaves y free, where nothing excites it). Strings prestressed so
          that the initial shape is in equilibrium under gravity (minimum total force
          density >= ``min_force_density``); tip node 10 gets ``300 sin(t)`` N along z.
``tensegrity-ball`` (Fig. 1c) a 6-bar icosahedron (bars 1 m) around a 1 kg payload node 13
          with 32 strings (24 outer, 8 to the payload), nodes 1, 2, 9 fixed on the ground
          (the body is rotated about y so node 9 lies at z = 0, as in the authors' code),
          prestressed to equilibrium under gravity (min force density 10 N/m); the three
          highest nodes, in node order, get ``amplitude sin(t)`` along x, y, z.
``tbar-compressible`` (section 3, Fig. 17, Table 2) the T-bar with compressible bars of
          ``material`` 0/``hdpe`` (960 kg/m^3, 1 GPa, nu 0.46) or 1/``aluminium``
          (2700 kg/m^3, 68 GPa, nu 0.33); strings 100 N/m with damping 1 N s/m, prestressed
          (strings and bars) to equilibrium; a doublet of ``doublet`` N along x at node 3
          (+ on [1, 2) s, - on [2, 3) s). The bars' axial modes (about 56 Hz for HDPE,
          280 Hz for aluminium) are undamped, so every solver has to follow them to keep
          the tolerance: the implicit ``kvaerno5`` runs it but takes as many steps as an
          explicit method at 15x the cost per step (measured), so the default is ``dopri8``.

:func:`tbar_elastic` is ``tbar`` with compressible bars of a given Young's modulus (Fig. 15).

``--stabilization projection`` turns on the direct correction (Algorithm 1) and
``--set energy_correction=0|1`` its energy row; ``--set gamma=...`` the threshold;
``--set slack_width=W`` (m, default 0: the paper's hard switch) smooths the strings'
slack/taut switch over about ``W`` so gradients through slackening strings are exact
(:func:`~diffmb.formulations.tensegrity.taut_stretch`).
:class:`TBarMinimal` is the hand-derived two-angle model of the rigid T-bar (Fig. 2).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..formulations import tensegrity as tg
from ..simulation.integrate import simulate
from ..system import System
from .scenario import REGISTRY, Scenario, conserves, register

PAPER = "Hsu, Tadiparthi & Bhattacharya, tensegrity Lagrangian (2020)"
STABS = ("none", "projection")
MATERIALS = {"hdpe": 0.0, "aluminium": 1.0, "aluminum": 1.0}
_MATERIAL_DATA = {0: (960.0, 1e9, 0.46), 1: (2700.0, 68e9, 0.33)}


def _switch(v, key):
    x = v[key]
    if x not in (0.0, 1.0):
        raise ValueError(f"parameter {key!r}: 0 or 1, got {x:g}")
    return bool(x)


def _system(structure, v, stabilization, **kw):
    return tg.TensegritySystem(structure, stabilization=stabilization,
                               energy_correction=_switch(v, "energy_correction"),
                               gamma=v["gamma"], slack_width=v["slack_width"], **kw)


# --------------------------------------------------------------------------- T-bar
def tbar_nodes(length=5.0):
    c = length * math.cos(math.pi / 4)
    return np.array([[0, 0, 0], [c, 0, 0], [c, 0, c], [0, 0, c]], float)


TBAR_BARS = ((0, 2), (1, 3))
TBAR_STRINGS = ((0, 1), (1, 2), (2, 3), (3, 0))
TBAR_FIXED = {0: "xyz", 1: "xyz", 2: "y", 3: "y"}


def tbar_structure(v):
    rv = v["rest_vertical"]
    return tg.make_structure(tbar_nodes(v["length"]), TBAR_BARS, TBAR_STRINGS, fixed=TBAR_FIXED,
                             bar_radius=v["radius"], bar_density=v["density"],
                             string_stiffness=v["K"], rest_fraction=[1.0, rv, 1.0, rv],
                             damping=v["damping"])


def _tbar(v, stabilization):
    system = _system(tbar_structure(v), v, stabilization)
    return system, system.default_params()


class TBarMinimal(System):
    """The rigid T-bar in two angles (derived by hand; the reference of Fig. 2).

    ``theta1``: bar 1-3 from +x about node 1; ``theta2``: bar 2-4 from -x about node 2, so
    ``n3 = (l cos theta1, 0, l sin theta1)``, ``n4 = (c - l cos theta2, 0, l sin theta2)``.
    Each bar pinned at one end: ``T = 1/2 J (theta1d^2 + theta2d^2)``, ``J = m (l^2/3 +
    r^2/4)`` (a bar of eq. 10 turning about its end). Strings are tension-only springs with
    tension ``K max(|s| - l0, 0)``; the generalized force of string ``s`` is
    ``-tension * (s . ds/dtheta) / |s|`` with the partial derivatives written out below.
    """

    J: float
    c: float
    l: float
    K: tuple
    rest: tuple
    theta0: tuple

    def __init__(self, v):
        s = tbar_structure(v)
        m, r, l = float(s.bar_mass[0]), float(s.bar_radius[0]), float(s.bar_length[0])
        self.J = m * (l**2 / 3 + r**2 / 4)
        self.c = l * math.cos(math.pi / 4)
        self.l = l
        self.K = tuple(float(k) for k in s.string_K)
        self.rest = tuple(float(x) for x in s.string_rest)
        self.theta0 = (math.pi / 4, math.pi / 4)

    def default_params(self):
        return {}

    def init_state(self, params):
        return jnp.array([*self.theta0, 0.0, 0.0])

    @property
    def state_names(self):
        return ("theta1", "theta2", "theta1d", "theta2d")

    def nodes(self, th1, th2):
        l, c = self.l, self.c
        n3 = jnp.stack([l * jnp.cos(th1), l * jnp.sin(th1)])
        n4 = jnp.stack([c - l * jnp.cos(th2), l * jnp.sin(th2)])
        return n3, n4

    def state_derivative(self, t, x, params):
        th1, th2, w1, w2 = x[0], x[1], x[2], x[3]
        l, c = self.l, self.c
        n3, n4 = self.nodes(th1, th2)
        n1, n2 = jnp.array([0.0, 0.0]), jnp.array([c, 0.0])
        dn3 = jnp.stack([-l * jnp.sin(th1), l * jnp.cos(th1)])  # d n3 / d theta1
        dn4 = jnp.stack([l * jnp.sin(th2), l * jnp.cos(th2)])   # d n4 / d theta2

        def pull(s, k):  # tension / |s| (0 when slack)
            L = jnp.sqrt(jnp.sum(s * s))
            return self.K[k] * jnp.maximum(L - self.rest[k], 0.0) / L

        # string 2-3: s = n3 - n2;  string 3-4: s = n4 - n3;  string 4-1: s = n1 - n4
        s23, s34, s41 = n3 - n2, n4 - n3, n1 - n4
        Q1 = -pull(s23, 1) * jnp.dot(s23, dn3) + pull(s34, 2) * jnp.dot(s34, dn3)
        Q2 = -pull(s34, 2) * jnp.dot(s34, dn4) + pull(s41, 3) * jnp.dot(s41, dn4)
        return jnp.stack([w1, w2, Q1 / self.J, Q2 / self.J])

    def node3(self, xs):
        """``(x3, z3)`` time series from minimal-model states."""
        return self.l * jnp.cos(xs[..., 0]), self.l * jnp.sin(xs[..., 0])


def tbar_minimal_error(t1, rtol, *, samples=1001, reference_rtol=1e-13):
    """Fig. 2: the largest node-3 difference [m] between the rigid ``tbar`` (dopri5 at
    ``rtol``, direct + energy correction) and :class:`TBarMinimal` (dopri8 at
    ``reference_rtol``) at ``samples`` times over ``[0, t1]``; also returns node 3's x range
    (how far the T-bar swings)."""
    system, params, v = REGISTRY["tbar"].make()
    ts = np.linspace(0.0, t1, samples)
    tr = simulate(system, params=params, t1=t1, solver="dopri5", rtol=rtol, atol=rtol, saveat=ts)
    ref = TBarMinimal(v)
    tm = simulate(ref, t1=t1, solver="dopri8", rtol=reference_rtol, atol=reference_rtol, saveat=ts)
    x3, z3 = (np.asarray(a) for a in ref.node3(tm.xs))
    err = max(float(np.max(np.abs(np.asarray(tr["x3"]) - x3))), float(np.max(np.abs(np.asarray(tr["z3"]) - z3))))
    return err, float(np.ptp(x3))


# --------------------------------------------------------------------------- arm
def arm_geometry(L=1.0):
    vz, vx = L * math.sin(math.pi / 4), L * math.cos(math.pi / 4)
    N = np.array([[0, 0, 0], [0, 0, -vz], [vx, 0, -vz], [2 * vx, 0, -vz], [2 * vx, 0, 0],
                  [3 * vx, 0, -vz], [4 * vx, 0, -vz], [4 * vx, 0, 0], [5 * vx, 0, -vz],
                  [6 * vx, 0, 0], [5 * vx, 0, vz], [4 * vx, 0, vz], [3 * vx, 0, vz],
                  [2 * vx, 0, vz], [vx, 0, vz], [0, 0, vz]], float)
    bars = [(1, 3), (3, 5), (5, 4), (5, 6), (6, 8), (8, 7), (8, 9), (9, 10), (10, 11), (11, 8),
            (8, 12), (8, 13), (13, 5), (5, 14), (5, 15), (15, 1)]
    strings = [(1, 2), (2, 3), (3, 4), (4, 6), (6, 7), (7, 9), (11, 12), (12, 13), (13, 14),
               (14, 15), (15, 16), (16, 1), (1, 5), (5, 8), (8, 10), (9, 11), (6, 13), (3, 15)]
    to0 = lambda ms: [(i - 1, j - 1) for i, j in ms]
    return N, to0(bars), to0(strings)


def _arm(v, stabilization):
    N, bars, strings = arm_geometry(v["bar_length"])
    fixed = {i: "y" for i in range(len(N))}
    fixed.update({0: "xyz", 1: "xyz", 15: "xyz"})
    s = tg.make_structure(N, bars, strings, fixed=fixed, bar_radius=v["bar_radius"],
                          bar_density=v["density"], string_E=v["string_E"],
                          string_radius=v["string_radius"], damping=v["damping"],
                          gravity=(0.0, 0.0, -v["g"]))
    s = tg.prestress_to_equilibrium(s, min_force_density=v["min_force_density"])
    force = tg.NodeForce(entries=((9, 2, 1.0),), shape="sin")
    system = _system(s, v, stabilization, force=force,
                     forcing={"amplitude": v["amplitude"], "omega": v["omega"]})
    return system, system.default_params()


# --------------------------------------------------------------------------- ball
def ball_geometry():
    phi = (1 + math.sqrt(5)) / 2
    temp = np.array([[0, -1, phi], [0, -1, -phi], [0, 1, phi], [0, 1, -phi]]) / (2 * phi)
    N = np.vstack([temp, temp[:, [2, 0, 1]], temp[:, [1, 2, 0]], np.zeros((1, 3))])
    N = N[[1, 3, 5, 7, 9, 11, 0, 2, 4, 6, 8, 10, 12]]
    N = N - N[0]
    alpha = math.atan2(-N[8, 2], N[8, 0])  # sin(a) x9 + cos(a) z9 = 0
    if abs(alpha) > math.pi / 2:
        alpha -= math.copysign(math.pi, alpha)
    c, s = math.cos(alpha), math.sin(alpha)
    dcm = np.array([[c, 0, -s], [0, 1, 0], [s, 0, c]])
    N = N @ dcm.T
    if N[:, 2].sum() < 0:  # the body above the ground plane
        N = N * np.array([1.0, 1.0, -1.0])
    N[np.abs(N) < 1e-15] = 0.0
    bars = [(k, k + 6) for k in range(6)]
    outer = [(1, 3), (1, 5), (1, 6), (1, 9), (2, 3), (2, 9), (2, 11), (2, 12), (3, 5), (3, 11),
             (4, 5), (4, 7), (4, 8), (4, 11), (5, 7), (6, 7), (6, 9), (6, 10), (7, 10), (8, 10),
             (8, 11), (8, 12), (9, 12), (10, 12)]
    payload = [(13, k) for k in (3, 4, 5, 6, 9, 10, 11, 12)]
    strings = [(i - 1, j - 1) for i, j in outer + payload]
    return N, bars, strings


def _ball(v, stabilization):
    N, bars, strings = ball_geometry()
    s = tg.make_structure(N, bars, strings, fixed=[0, 1, 8], bar_radius=v["bar_radius"],
                          bar_density=v["density"], string_E=v["string_E"],
                          string_radius=v["string_radius"], damping=v["damping"],
                          point_masses={12: v["payload"]}, gravity=(0.0, 0.0, -v["g"]))
    s = tg.prestress_to_equilibrium(s, min_force_density=v["min_force_density"])
    top = sorted(np.argsort(-N[:12, 2])[:3].tolist())
    force = tg.NodeForce(entries=tuple((int(n), a, 1.0) for a, n in enumerate(top)), shape="sin")
    system = _system(s, v, stabilization, force=force,
                     forcing={"amplitude": v["amplitude"], "omega": v["omega"]})
    return system, system.default_params()


# --------------------------------------------------------------------------- compressible
def material(v):
    m = v["material"]
    if m not in (0.0, 1.0):
        raise ValueError(f"parameter 'material': 0 / hdpe or 1 / aluminium, got {m:g}")
    return _MATERIAL_DATA[int(m)]


def _tbar_compressible(v, stabilization):
    rho, E, nu = material(v)
    s = tg.make_structure(tbar_nodes(v["length"]), TBAR_BARS, TBAR_STRINGS, fixed=TBAR_FIXED,
                          bar_radius=v["radius"], bar_density=rho, bar_E=E, bar_nu=nu,
                          string_stiffness=v["K"], damping=v["damping"])
    s = tg.prestress_to_equilibrium(s, compressible=True, min_force_density=v["min_force_density"])
    force = tg.NodeForce(entries=((2, 0, 1.0),), shape="doublet")
    system = _system(s, v, stabilization, compressible=True, force=force,
                     forcing={"amplitude": v["doublet"], "t_start": v["t_start"], "width": v["width"]})
    return system, system.default_params()


def tbar_elastic(v, E=200e9, nu=0.3, stabilization="none"):
    """The rigid ``tbar`` (``v``: its scenario values) with its bars made compressible of
    Young's modulus ``E`` (Fig. 15; the authors' code uses 200 GPa, nu = 0.3): the same
    start, strings and masses, bar lengths released. As ``E`` grows it tends to ``tbar``
    run without correction."""
    s = tbar_structure(v)
    s = s.replace(bar_E=np.full(len(s.bars), float(E)), bar_nu=np.full(len(s.bars), float(nu)))
    return _system(s, v, stabilization, compressible=True)


_CORR = {"energy_correction": 1.0, "gamma": 1e-12, "slack_width": 0.0}

register(Scenario(
    name="tbar",
    description="2-D T-bar: 2 rigid bars, 4 tension-only springs, direct + energy correction",
    paper=PAPER, build=_tbar,
    defaults={"K": 100.0, "rest_vertical": 0.9, "length": 5.0, "radius": 0.05, "density": 500.0,
              "damping": 0.0, **_CORR},
    t1=10.0, dt=1e-3, solver="dopri5", rtol=1e-10, atol=1e-10,
    stabilizations=STABS, stabilization="projection",
    conserved=conserves(energy_unless=("damping",)),
))

register(Scenario(
    name="tensegrity-arm",
    description="2-D tensegrity arm (3 squares, 16 bars, 18 nylon strings), tip force 300 sin t",
    paper=PAPER, build=_arm,
    defaults={"bar_length": 1.0, "bar_radius": 0.01, "density": 1300.0, "string_E": 2e9,
              "string_radius": 1e-3, "damping": 0.0, "g": 9.806, "min_force_density": 1.0,
              "amplitude": 300.0, "omega": 1.0, **_CORR},
    t1=20.0, dt=1e-4, solver="dopri5", rtol=1e-8, atol=1e-8,
    stabilizations=STABS, stabilization="projection",
    conserved=conserves(energy_unless=("damping",)),
))

register(Scenario(
    name="tensegrity-ball",
    description="3-D 6-bar tensegrity ball with a payload, forces on the top 3 nodes",
    paper=PAPER, build=_ball,
    defaults={"bar_radius": 0.01, "density": 1300.0, "string_E": 2e9, "string_radius": 1e-3,
              "damping": 0.0, "g": 9.806, "payload": 1.0, "min_force_density": 10.0,
              "amplitude": 300.0, "omega": 1.0, **_CORR},
    t1=20.0, dt=1e-4, solver="dopri5", rtol=1e-8, atol=1e-8,
    stabilizations=STABS, stabilization="projection",
    conserved=conserves(energy_unless=("damping",)),
))

register(Scenario(
    name="tbar-compressible",
    description="T-bar with compressible HDPE (material=0) or aluminium (1) bars, 10 N doublet",
    paper=PAPER, build=_tbar_compressible,
    defaults={"material": 0.0, "K": 100.0, "length": 5.0, "radius": 0.05, "damping": 1.0,
              "min_force_density": 1.0, "doublet": 10.0, "t_start": 1.0, "width": 1.0, **_CORR},
    t1=10.0, dt=1e-4, solver="dopri8", rtol=1e-8, atol=1e-8,
    stabilizations=STABS, stabilization="none",
    choices={"material": MATERIALS},
    conserved=conserves(energy_unless=("damping",)),
))
