"""Modal data of a flexible body: validation, loading and saving, modal integrals.

A flexible body (Banerjee & Lemak, "Single flexible body in large overall motion") is a
reference frame B plus ``n`` elastic modes. Here its mass is held as

* a **rigid part** attached to B (``rigid_mass``, ``rigid_com``, ``rigid_inertia`` about
  that com, B axes) — a hub, a bus, a tip mass that does not deform; and
* ``K`` **nodes** with translational point masses ``node_mass`` at undeformed positions
  ``nodes`` (B axes), each carrying mode shapes ``phi[k] (3, n)`` (translation) and
  ``psi[k] (3, n)`` (small rotation; used for hinge points, where an outboard body is
  attached, eq. 4). Euler-Bernoulli beams carry no rotary inertia, so nodes have none.

plus the modal stiffness ``stiffness (n, n)``, modal damping ``damping (n, n)`` and,
optionally, the centrifugal geometric stiffness ``geometric_stiffness (3, 3, n, n)``:
``K_G(w) = sum_ab W_ab KG[a, b]`` with ``W = [w~][w~]`` (the inertia load
``-m_k W p_k`` of a spinning body, Banerjee 1993 / Banerjee & Dickens 1990), see
:func:`~.frame_modes.frame_modes`.

:meth:`ModalData.integrals` computes once the modal integrals the equations of motion
need (paper eqs. 1-3, Kane & Levinson's lumped form ``int ... dm = sum_k m_k ...``):

=======  ==========================================  ====================================
 name     definition                                  meaning
=======  ==========================================  ====================================
 ``m``    ``m_r + sum m_k``                           mass
 ``c``    ``m_r c_r + sum m_k p_k``                   first moment about the origin of B
 ``J``    rigid inertia about the origin of B          ``int (p.p U - p p) dm``
 ``A``    ``sum m_k phi_k``  (3, n)                   ``int phi_i dm``
 ``Bm``   ``sum m_k p_k x phi_k``  (3, n)             ``int p x phi_i dm``
 ``Me``   ``sum m_k phi_k^T phi_k``  (n, n)           ``int phi_i . phi_j dm``
 ``G``    ``G[:, j, i] = sum m_k phi_kj x phi_ki``    ``int phi_j x phi_i dm`` (eq. 2)
 ``N``    ``N[a, i, b] = sum m_k phi_k[a, i] p_k[b]`` ``int phi_i p^T dm``
 ``d``    ``sum m_k p_k . phi_k``  (n,)              ``int p . phi_i dm``
=======  ==========================================  ====================================

Sources of modal data:

* :func:`load_modal` — a user file (``.npz`` or ``.json``) with the fields above;
  :func:`modal_from_arrays` — the same from arrays. Both validate everything and raise
  ``ValueError`` naming the body/file and field.
* :mod:`~diffmb.formulations.flexible.frame_modes` — built-in finite-element models
  (cantilever booms, plates, any frame of beam elements).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import scipy.linalg as sla


# =============================================================================== data
@dataclasses.dataclass(frozen=True, eq=False)
class ModalData:
    """Validated modal data of one flexible body (plain numpy; see module docstring)."""

    name: str
    nodes: np.ndarray  # (K, 3)
    node_mass: np.ndarray  # (K,)
    phi: np.ndarray  # (K, 3, n)
    psi: np.ndarray  # (K, 3, n)
    stiffness: np.ndarray  # (n, n)
    damping: np.ndarray  # (n, n)
    rigid_mass: float = 0.0
    rigid_com: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    rigid_inertia: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((3, 3)))
    geometric_stiffness: np.ndarray | None = None  # (3, 3, n, n)
    node_names: tuple = ()

    @property
    def n_modes(self) -> int:
        return int(self.phi.shape[2])

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.shape[0])

    def node_index(self, node) -> int:
        """Index of a node given by index or by name (``ValueError`` naming the body)."""
        if isinstance(node, str):
            if node not in self.node_names:
                raise ValueError(f"body {self.name!r}: unknown node {node!r}; named nodes: "
                                 f"{list(self.node_names)}")
            return self.node_names.index(node)
        k = int(node)
        if not -self.n_nodes <= k < self.n_nodes:
            raise ValueError(f"body {self.name!r}: node index {node} out of range (0..{self.n_nodes - 1})")
        return k % self.n_nodes

    def frequencies(self) -> np.ndarray:
        """Natural frequencies [rad/s] of the modal model (generalized eigenproblem)."""
        w2 = sla.eigh(self.stiffness, self.modal_mass(), eigvals_only=True)
        return np.sqrt(np.maximum(w2, 0.0))

    def modal_mass(self) -> np.ndarray:
        return np.einsum("k,kai,kaj->ij", self.node_mass, self.phi, self.phi)

    def select(self, modes) -> "ModalData":
        """A copy keeping only the given mode indices (``[]``: a rigid body)."""
        idx = np.asarray(list(modes), dtype=int)
        kg = None if self.geometric_stiffness is None else self.geometric_stiffness[:, :, idx][:, :, :, idx]
        return dataclasses.replace(
            self, phi=self.phi[:, :, idx], psi=self.psi[:, :, idx],
            stiffness=self.stiffness[np.ix_(idx, idx)], damping=self.damping[np.ix_(idx, idx)],
            geometric_stiffness=kg)

    def scaled(self, stiffness: float = 1.0) -> "ModalData":
        """A copy with stiffness (and geometric stiffness) multiplied by ``stiffness``."""
        return dataclasses.replace(self, stiffness=self.stiffness * stiffness)

    def rigid_properties(self):
        """``(mass, com, inertia about com)`` of the undeformed body (rigid equivalent)."""
        I = self.integrals_np()
        m, c1 = I["m"], I["c"]
        com = c1 / m
        Jc = I["J"] - m * (com @ com * np.eye(3) - np.outer(com, com))
        return float(m), com, 0.5 * (Jc + Jc.T)

    def integrals_np(self) -> dict:
        """The modal integrals of the module docstring (numpy float64)."""
        p, mk, Phi = self.nodes, self.node_mass, self.phi
        m = self.rigid_mass + mk.sum()
        c = self.rigid_mass * self.rigid_com + mk @ p
        rc = self.rigid_com
        J = self.rigid_inertia + self.rigid_mass * (rc @ rc * np.eye(3) - np.outer(rc, rc))
        J = J + np.einsum("k,kab->ab", mk, np.einsum("ka,ka->k", p, p)[:, None, None] * np.eye(3)
                          - p[:, :, None] * p[:, None, :])
        A = np.einsum("k,kai->ai", mk, Phi)
        Bm = np.einsum("k,kai->ai", mk, np.cross(p[:, :, None], Phi, axis=1))
        Me = self.modal_mass()
        # G[:, j, i] = sum_k m_k phi_kj x phi_ki
        G = np.einsum("k,kaj,kbi,cab->cji", mk, Phi, Phi, _LEVI)
        N = np.einsum("k,kai,kb->aib", mk, Phi, p)
        d = np.einsum("aia->i", N)
        return dict(m=np.float64(m), c=c, J=0.5 * (J + J.T), A=A, Bm=Bm, Me=0.5 * (Me + Me.T),
                    G=G, N=N, d=d, K=self.stiffness, C=self.damping)

    def integrals(self, geometric_stiffening: bool = False) -> dict:
        """Modal integrals as float64 JAX arrays, plus ``Me_inv``, ``M0`` and ``KG``."""
        I = self.integrals_np()
        n = self.n_modes
        I["Me_inv"] = np.linalg.inv(I["Me"]) if n else np.zeros((0, 0))
        I["M0"] = body_mass_matrix(I)
        if geometric_stiffening:
            I["KG"] = (np.zeros((3, 3, n, n)) if self.geometric_stiffness is None
                       else self.geometric_stiffness)
        return {k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in I.items()}


_LEVI = np.zeros((3, 3, 3))
for _a, _b, _c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _LEVI[_a, _b, _c], _LEVI[_a, _c, _b] = 1.0, -1.0


def _skew(v):
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def body_mass_matrix(I: dict) -> np.ndarray:
    """The constant ``(6+n)`` mass matrix of eqs. (1), (3), speeds ``[w; v; s]``.

    ``[[J, c~, Bm], [c~^T, m U, A], [Bm^T, A^T, Me]]`` (the rigid block is the spatial
    inertia about the origin of B, Featherstone eq. 2.63).
    """
    n = I["Me"].shape[0]
    M = np.zeros((6 + n, 6 + n))
    C = _skew(I["c"])
    M[:3, :3] = I["J"]
    M[:3, 3:6] = C
    M[3:6, :3] = C.T
    M[3:6, 3:6] = I["m"] * np.eye(3)
    M[:3, 6:] = I["Bm"]
    M[6:, :3] = I["Bm"].T
    M[3:6, 6:] = I["A"]
    M[6:, 3:6] = I["A"].T
    M[6:, 6:] = I["Me"]
    return 0.5 * (M + M.T)


# ========================================================================= validation
def _field(name, what, x, shape, *, allow_none=False):
    if x is None:
        if allow_none:
            return None
        raise ValueError(f"{name}: missing field {what!r}")
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: field {what!r} is not numeric") from None
    if shape is not None:
        if a.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, a.shape)):
            want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: field {what!r} has shape {a.shape}, expected {want}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: field {what!r} contains non-finite values")
    return a


def modal_from_arrays(name: str = "body", *, nodes, node_mass, phi, psi=None, frequencies=None,
                      stiffness=None, damping_ratio=None, damping=None, rigid_mass=0.0,
                      rigid_com=(0.0, 0.0, 0.0), rigid_inertia=None, geometric_stiffness=None,
                      node_names=()) -> ModalData:
    """Validated :class:`ModalData` from arrays; ``ValueError`` names ``name`` and the field.

    Give either ``frequencies (n,)`` [rad/s] (stiffness ``diag(w^2) Me``-consistent: the
    modal stiffness is ``Me^(1/2)``-scaled so the model has exactly these frequencies
    when the modes are mass-orthogonal) or ``stiffness (n, n)``; damping as
    ``damping_ratio (n,)`` (``C = 2 zeta w`` in mass-normalised modal coordinates) or
    ``damping (n, n)``.
    """
    nodes = _field(name, "nodes", nodes, (None, 3))
    K = nodes.shape[0]
    node_mass = _field(name, "node_mass", node_mass, (K,))
    if np.any(node_mass < 0):
        raise ValueError(f"{name}: field 'node_mass' has negative entries")
    phi = _field(name, "phi", phi, (K, 3, None))
    n = phi.shape[2]
    psi = np.zeros_like(phi) if psi is None else _field(name, "psi", psi, (K, 3, n))
    rigid_mass = float(_field(name, "rigid_mass", rigid_mass, ()))
    if rigid_mass < 0:
        raise ValueError(f"{name}: field 'rigid_mass' is negative")
    rigid_com = _field(name, "rigid_com", rigid_com, (3,))
    rigid_inertia = np.zeros((3, 3)) if rigid_inertia is None else _field(
        name, "rigid_inertia", rigid_inertia, (3, 3))
    if not np.allclose(rigid_inertia, rigid_inertia.T, atol=1e-12 * max(1.0, np.abs(rigid_inertia).max())):
        raise ValueError(f"{name}: field 'rigid_inertia' is not symmetric")
    if np.linalg.eigvalsh(rigid_inertia).min() < -1e-9 * max(1.0, np.abs(rigid_inertia).max()):
        raise ValueError(f"{name}: field 'rigid_inertia' is not positive semi-definite")
    if rigid_mass + node_mass.sum() <= 0:
        raise ValueError(f"{name}: the body has no mass (rigid_mass and node_mass are zero)")
    Me = np.einsum("k,kai,kaj->ij", node_mass, phi, phi)
    if n:
        ev = np.linalg.eigvalsh(Me)
        if ev.min() <= 1e-12 * max(ev.max(), 1e-300):
            raise ValueError(f"{name}: field 'phi': the modal mass matrix int(phi_i . phi_j dm) is "
                             f"singular (a mode moves no mass, or modes are linearly dependent)")
    if (frequencies is None) == (stiffness is None):
        raise ValueError(f"{name}: give exactly one of the fields 'frequencies' and 'stiffness'")
    if frequencies is not None:
        w = _field(name, "frequencies", frequencies, (n,))
        if np.any(w < 0):
            raise ValueError(f"{name}: field 'frequencies' has negative entries")
        R = np.real(sla.sqrtm(Me)) if n else Me
        stiffness = R @ np.diag(w**2) @ R
    stiffness = _field(name, "stiffness", stiffness, (n, n))
    if not np.allclose(stiffness, stiffness.T, atol=1e-9 * max(1.0, np.abs(stiffness).max())):
        raise ValueError(f"{name}: field 'stiffness' is not symmetric")
    if n and np.linalg.eigvalsh(stiffness).min() < -1e-9 * max(1.0, np.abs(stiffness).max()):
        raise ValueError(f"{name}: field 'stiffness' is not positive semi-definite")
    if damping is not None and damping_ratio is not None:
        raise ValueError(f"{name}: give at most one of the fields 'damping' and 'damping_ratio'")
    if damping_ratio is not None:
        z = _field(name, "damping_ratio", damping_ratio, None)
        z = np.broadcast_to(z, (n,)) if z.ndim == 0 else z
        if z.shape != (n,) or np.any(z < 0):
            raise ValueError(f"{name}: field 'damping_ratio' must be non-negative, shape ({n},)")
        # C = 2 zeta w in the eigen-coordinates of (K, Me), mapped back
        if n:
            w2, V = sla.eigh(stiffness, Me)
            Vi = np.linalg.inv(V)
            damping = Vi.T @ np.diag(2 * z * np.sqrt(np.maximum(w2, 0))) @ Vi
        else:
            damping = np.zeros((0, 0))
    damping = np.zeros((n, n)) if damping is None else _field(name, "damping", damping, (n, n))
    if n and np.linalg.eigvalsh(0.5 * (damping + damping.T)).min() < -1e-9 * max(1.0, np.abs(damping).max()):
        raise ValueError(f"{name}: field 'damping' is not positive semi-definite")
    if geometric_stiffness is not None:
        geometric_stiffness = _field(name, "geometric_stiffness", geometric_stiffness, (3, 3, n, n))
    node_names = tuple(str(s) for s in node_names)
    if node_names and len(node_names) != K:
        raise ValueError(f"{name}: field 'node_names' has {len(node_names)} entries for {K} nodes")
    return ModalData(name=name, nodes=nodes, node_mass=node_mass, phi=phi, psi=psi,
                     stiffness=0.5 * (stiffness + stiffness.T), damping=damping,
                     rigid_mass=rigid_mass, rigid_com=rigid_com, rigid_inertia=rigid_inertia,
                     geometric_stiffness=geometric_stiffness, node_names=node_names)


_FIELDS = ("nodes", "node_mass", "phi", "psi", "frequencies", "stiffness", "damping_ratio", "damping",
           "rigid_mass", "rigid_com", "rigid_inertia", "geometric_stiffness", "node_names")


def load_modal(path, name: str | None = None) -> ModalData:
    """Load modal data from ``.npz`` or ``.json`` (fields as :func:`modal_from_arrays`)."""
    path = Path(path)
    label = f"{name or path.stem} ({path})"
    if not path.exists():
        raise ValueError(f"{label}: modal data file not found")
    try:
        if path.suffix.lower() == ".npz":
            z = np.load(path, allow_pickle=False)
            raw = {k: z[k] for k in z.files}
        elif path.suffix.lower() == ".json":
            raw = json.loads(path.read_text())
            if not isinstance(raw, dict):
                raise ValueError("top level is not an object")
        else:
            raise ValueError(f"unsupported extension {path.suffix!r} (expected .npz or .json)")
    except (OSError, ValueError) as e:
        raise ValueError(f"{label}: cannot read modal data ({e})") from None
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{label}: unknown field(s) {unknown}; known: {list(_FIELDS)}")
    kw = {k: raw[k] for k in _FIELDS if k in raw}
    if "node_names" in kw:
        kw["node_names"] = [str(s) for s in np.asarray(kw["node_names"]).reshape(-1)]
    for k in ("nodes", "node_mass", "phi"):
        if k not in kw:
            raise ValueError(f"{label}: missing field {k!r}")
    return modal_from_arrays(label, **kw)


def save_modal(data: ModalData, path) -> Path:
    """Write ``data`` as ``.npz`` (readable by :func:`load_modal`)."""
    path = Path(path)
    arrays = dict(nodes=data.nodes, node_mass=data.node_mass, phi=data.phi, psi=data.psi,
                  stiffness=data.stiffness, damping=data.damping, rigid_mass=data.rigid_mass,
                  rigid_com=data.rigid_com, rigid_inertia=data.rigid_inertia)
    if data.geometric_stiffness is not None:
        arrays["geometric_stiffness"] = data.geometric_stiffness
    if data.node_names:
        arrays["node_names"] = np.asarray(data.node_names)
    np.savez(path, **arrays)
    return path
