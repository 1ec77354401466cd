"""Modal data from finite elements: 3-D Euler-Bernoulli frame elements assembled over any
nodes, elements and clamps (:func:`frame_modes`, which also gives the centrifugal geometric
stiffness), a cantilever boom (:func:`cantilever_beam`: Hermite cubic elements, lumped
translational masses, rotations condensed statically, Guyan) and a free-free plate or
membrane as a grillage of the same elements (:func:`plate_grid`, rigid-body modes removed).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from .modal import modal_from_arrays


def _frame_element(L, EA, GJ, EIy, EIz):
    """12x12 local stiffness of a 3-D Euler-Bernoulli frame element (x along the element)."""
    k = np.zeros((12, 12))
    a, t = EA / L, GJ / L
    for (i, j, v) in ((0, 0, a), (0, 6, -a), (6, 6, a), (3, 3, t), (3, 9, -t), (9, 9, t)):
        k[i, j] = k[j, i] = v

    def bend(EI, w0, r0, sgn):  # w: transverse dof, r: rotation dof; sgn couples them
        c = EI / L**3
        kb = c * np.array([[12, 6 * L, -12, 6 * L], [6 * L, 4 * L * L, -6 * L, 2 * L * L],
                           [-12, -6 * L, 12, -6 * L], [6 * L, 2 * L * L, -6 * L, 4 * L * L]])
        S = np.diag([1, sgn, 1, sgn])
        kb = S @ kb @ S
        d = [w0, r0, w0 + 6, r0 + 6]
        k[np.ix_(d, d)] += kb

    bend(EIz, 1, 5, 1.0)   # v (y) with rotation about z: v' = rz
    bend(EIy, 2, 4, -1.0)  # w (z) with rotation about y: w' = -ry
    return k


def _frame_geometric(L):
    """12x12 local geometric stiffness per unit axial tension (consistent Hermite form)."""
    g = np.zeros((12, 12))
    base = (1.0 / (30 * L)) * np.array([[36, 3 * L, -36, 3 * L], [3 * L, 4 * L * L, -3 * L, -L * L],
                                        [-36, -3 * L, 36, -3 * L], [3 * L, -L * L, -3 * L, 4 * L * L]])
    for w0, r0, sgn in ((1, 5, 1.0), (2, 4, -1.0)):
        S = np.diag([1, sgn, 1, sgn])
        d = [w0, r0, w0 + 6, r0 + 6]
        g[np.ix_(d, d)] += S @ base @ S
    return g


def _element_frame(pi, pj, up, what):
    ex = pj - pi
    L = np.linalg.norm(ex)
    if L <= 0:
        raise ValueError(f"{what}: zero-length element")
    ex = ex / L
    up = np.asarray(up, float)
    if abs(ex @ up) > 0.99 * np.linalg.norm(up):
        up = np.array([0.0, 0.0, 1.0]) if abs(ex[2]) < 0.9 else np.array([0.0, 1.0, 0.0])
    ez = up - (up @ ex) * ex
    ez /= np.linalg.norm(ez)
    ey = np.cross(ez, ex)
    R = np.stack([ex, ey, ez])  # [local, body]
    T = np.kron(np.eye(4), R)
    return L, T


def frame_modes(nodes, elements, node_mass, *, clamped=(), n_modes, name="structure",
                drop_rigid=False, geometric_stiffening=True, damping_ratio=0.0, node_names=(),
                rigid_mass=0.0, rigid_com=(0.0, 0.0, 0.0), rigid_inertia=None):
    """Modes of a 3-D assembly of Euler-Bernoulli beam elements with lumped masses.

    ``elements``: sequence of ``(i, j, props)`` with ``props`` a dict of ``EA``, ``GJ``,
    ``EIy`` (bending out of the element's x-y plane, about its local y), ``EIz`` and an
    optional ``up`` vector fixing the local z axis. Nodes carry translational masses only;
    the rotational DOFs are condensed statically (Guyan, exact for massless rotations),
    the eigenproblem ``K* phi = w^2 M phi`` is solved and the ``n_modes`` lowest modes
    (after ``drop_rigid`` removes those with ``w`` below 1e-6 of the largest: free-free
    bodies) are kept, normalised to unit modal mass, with nodal rotations
    ``psi = -K_rr^-1 K_rt phi``.

    Geometric stiffness (``geometric_stiffening``, clamped structures only): for each of the
    nine unit centrifugal loads ``W = e_a e_b^T`` the nodal inertia load ``-m_k W p_k`` is
    applied, the static axial forces ``N_e`` solved, and the element geometric stiffness
    ``sum_e N_e K_g,e`` projected on the modes: ``KG[a, b] = Phi^T K_G^(ab) Phi``.
    """
    nodes = np.asarray(nodes, float)
    K_n = len(nodes)
    node_mass = np.asarray(node_mass, float)
    if node_mass.shape != (K_n,):
        raise ValueError(f"{name}: node_mass has shape {node_mass.shape}, expected ({K_n},)")
    ndof = 6 * K_n
    K = np.zeros((ndof, ndof))
    elem = []
    for e, (i, j, props) in enumerate(elements):
        what = f"{name}: element {e} ({i}-{j})"
        for key in ("EA", "GJ", "EIy", "EIz"):
            if not (np.isfinite(props.get(key, np.nan)) and props[key] > 0):
                raise ValueError(f"{what}: property {key!r} must be positive")
        L, T = _element_frame(nodes[i], nodes[j], props.get("up", (0.0, 0.0, 1.0)), what)
        kl = _frame_element(L, props["EA"], props["GJ"], props["EIy"], props["EIz"])
        d = np.r_[6 * i:6 * i + 6, 6 * j:6 * j + 6]
        K[np.ix_(d, d)] += T.T @ kl @ T
        elem.append((i, j, L, T, props["EA"], d))
    clamped = sorted({int(c) for c in clamped})
    free_nodes = [k for k in range(K_n) if k not in clamped]
    bad = [k for k in free_nodes if node_mass[k] <= 0]
    if bad:
        raise ValueError(f"{name}: free nodes {bad} have no mass (lumped-mass model needs it)")
    t_dof = np.array([6 * k + a for k in free_nodes for a in range(3)], int)
    r_dof = np.array([6 * k + 3 + a for k in free_nodes for a in range(3)], int)
    Ktt, Ktr, Krr = K[np.ix_(t_dof, t_dof)], K[np.ix_(t_dof, r_dof)], K[np.ix_(r_dof, r_dof)]
    Rmap = -np.linalg.solve(Krr, Ktr.T)  # rotations from translations
    Ks = Ktt + Ktr @ Rmap
    Ks = 0.5 * (Ks + Ks.T)
    mt = np.repeat(node_mass[free_nodes], 3)
    w2, V = sla.eigh(Ks, np.diag(mt))
    w = np.sqrt(np.maximum(w2, 0.0))
    keep = np.arange(len(w))
    if drop_rigid:
        keep = keep[w > 1e-6 * w.max()]
    keep = keep[:n_modes]
    if len(keep) < n_modes:
        raise ValueError(f"{name}: only {len(keep)} modes available, {n_modes} requested")
    V = V[:, keep]  # unit modal mass (eigh normalises V^T M V = I)
    full = np.zeros((ndof, len(keep)))
    full[t_dof] = V
    full[r_dof] = Rmap @ V
    phi = np.stack([full[6 * k:6 * k + 3] for k in range(K_n)])
    psi = np.stack([full[6 * k + 3:6 * k + 6] for k in range(K_n)])
    KG = None
    if geometric_stiffening and clamped:
        KG = np.zeros((3, 3, len(keep), len(keep)))
        for a in range(3):
            for b in range(3):
                f = np.zeros(ndof)
                for k in free_nodes:
                    f[6 * k + a] = -node_mass[k] * nodes[k, b]
                Kff = K[np.ix_(np.r_[t_dof, r_dof], np.r_[t_dof, r_dof])]
                u = np.zeros(ndof)
                u[np.r_[t_dof, r_dof]] = np.linalg.solve(Kff, f[np.r_[t_dof, r_dof]])
                Kg = np.zeros((ndof, ndof))
                for (i, j, L, T, EA, d) in elem:
                    ul = T @ u[d]
                    Nax = EA * (ul[6] - ul[0]) / L  # tension positive
                    Kg[np.ix_(d, d)] += Nax * (T.T @ _frame_geometric(L) @ T)
                KG[a, b] = full.T @ Kg @ full
    return modal_from_arrays(
        name, nodes=nodes, node_mass=node_mass, phi=phi, psi=psi, frequencies=w[keep],
        damping_ratio=damping_ratio, geometric_stiffness=KG, node_names=node_names,
        rigid_mass=rigid_mass, rigid_com=rigid_com, rigid_inertia=rigid_inertia)


def beam_props(EI, EI2=None, GJ=None, EA=None, up=(0.0, 0.0, 1.0)):
    """Element properties for :func:`frame_modes`; axial/torsion default to very stiff."""
    EI2 = EI if EI2 is None else EI2
    return {"EIy": float(EI), "EIz": float(EI2), "GJ": float(GJ if GJ is not None else 0.8 * EI),
            "EA": float(EA if EA is not None else 1e4 * max(EI, EI2)), "up": up}


def cantilever_beam(length, n_elements, EI, mass_per_length, n_modes, *, name="beam", EI2=None,
                    direction=(1.0, 0.0, 0.0), up=(0.0, 0.0, 1.0), origin=(0.0, 0.0, 0.0),
                    tip_mass=0.0, extra_mass=None, damping_ratio=0.0, geometric_stiffening=True,
                    rigid_mass=0.0, rigid_com=(0.0, 0.0, 0.0), rigid_inertia=None):
    """A uniform Euler-Bernoulli cantilever clamped at ``origin`` (the body's reference point).

    ``EI`` bends in the plane of ``direction`` and ``up`` (deflection along ``up``);
    ``EI2`` in the other plane (default ``EI``). Lumped masses ``mass_per_length * h``
    (half at the tip) plus ``tip_mass`` and optional ``extra_mass(s)`` per unit length
    (``s`` from the root) for carried mass such as a membrane. Nodes are named ``root``
    and ``tip``; analytic check: ``w_k = (beta_k L)^2 sqrt(EI / (mu L^4))``.
    """
    if not (length > 0 and n_elements >= 1 and EI > 0 and mass_per_length > 0):
        raise ValueError(f"{name}: length, n_elements, EI and mass_per_length must be positive")
    e = np.asarray(direction, float)
    e = e / np.linalg.norm(e)
    s = np.linspace(0.0, length, n_elements + 1)
    nodes = np.asarray(origin, float) + s[:, None] * e
    h = length / n_elements
    m = np.full(n_elements + 1, mass_per_length * h)
    m[0] = m[-1] = 0.5 * mass_per_length * h
    if extra_mass is not None:
        w = np.full(n_elements + 1, h)
        w[0] = w[-1] = 0.5 * h
        m = m + np.asarray([extra_mass(x) for x in s]) * w
    m[-1] += tip_mass
    props = beam_props(EI2 if EI2 is not None else EI, EI, up=up)
    # local z = up: EIy bends along local z (deflection along up) -> EI
    props["EIy"], props["EIz"] = float(EI), float(EI2 if EI2 is not None else EI)
    elements = [(k, k + 1, props) for k in range(n_elements)]
    names = ["root"] + [f"n{k}" for k in range(1, n_elements)] + ["tip"]
    return frame_modes(nodes, elements, m, clamped=(0,), n_modes=n_modes, name=name,
                       geometric_stiffening=geometric_stiffening, damping_ratio=damping_ratio,
                       node_names=names, rigid_mass=rigid_mass, rigid_com=rigid_com,
                       rigid_inertia=rigid_inertia)


def plate_grid(lx, ly, nx, ny, bending_rigidity, areal_density, n_modes, *, name="plate",
               poisson=0.3, damping_ratio=0.0, origin=(0.0, 0.0, 0.0)):
    """A free-free rectangular plate/membrane in the x-y plane as a grid of beam elements.

    Grillage analogy: beams along x and y through an ``(nx+1) x (ny+1)`` node grid, each
    with bending rigidity ``D b`` and torsional rigidity ``D (1 - nu) b`` for its
    tributary width ``b``; nodal masses ``rho * tributary area``. The six rigid-body
    modes are removed (the body's reference frame carries them); the ``n_modes`` lowest
    elastic modes are kept. Centred on ``origin``.
    """
    if not (lx > 0 and ly > 0 and nx >= 1 and ny >= 1 and bending_rigidity > 0 and areal_density > 0):
        raise ValueError(f"{name}: sizes, counts, bending_rigidity and areal_density must be positive")
    D = float(bending_rigidity)
    xs = np.linspace(-lx / 2, lx / 2, nx + 1)
    ys = np.linspace(-ly / 2, ly / 2, ny + 1)
    hx, hy = lx / nx, ly / ny
    idx = lambda i, j: i * (ny + 1) + j
    nodes = np.array([[x, y, 0.0] for x in xs for y in ys]) + np.asarray(origin, float)
    wx = np.full(nx + 1, hx)
    wx[0] = wx[-1] = hx / 2
    wy = np.full(ny + 1, hy)
    wy[0] = wy[-1] = hy / 2
    mass = areal_density * np.array([wx[i] * wy[j] for i in range(nx + 1) for j in range(ny + 1)])
    stiff_in = 1e3 * D * max(lx, ly) ** 2
    elements = []
    for i in range(nx + 1):
        for j in range(ny + 1):
            if i < nx:  # along x, tributary width wy[j]
                b = wy[j]
                elements.append((idx(i, j), idx(i + 1, j), {"EIy": D * b, "EIz": stiff_in, "GJ": D * (1 - poisson) * b,
                                                             "EA": stiff_in, "up": (0, 0, 1)}))
            if j < ny:
                b = wx[i]
                elements.append((idx(i, j), idx(i, j + 1), {"EIy": D * b, "EIz": stiff_in, "GJ": D * (1 - poisson) * b,
                                                             "EA": stiff_in, "up": (0, 0, 1)}))
    return frame_modes(nodes, elements, mass, clamped=(), n_modes=n_modes, name=name, drop_rigid=True,
                       geometric_stiffening=False, damping_ratio=damping_ratio)


#: ``beta_k L`` of a uniform cantilever (clamped-free) and of a free-free beam.
CANTILEVER_BETA_L = (1.8751040687, 4.6940911330, 7.8547574382, 10.9955407349, 14.1371683910)
FREE_FREE_BETA_L = (4.7300407449, 7.8532046241, 10.9956078380)
