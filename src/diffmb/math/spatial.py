"""Spatial (6-D) algebra and attitude parameterisations.

Conventions (Featherstone, *Rigid Body Dynamics Algorithms*, ch. 2; Fulton & Schaub eq. 2):

* spatial motion and force vectors are ``[angular; linear]``;
* a coordinate transform from frame A to frame B is held as ``(E, r)``: ``E`` is the
  direction-cosine matrix ``[BA]`` (maps A-components to B-components) and ``r`` is the
  position of B's origin in A-components.  The 6x6 Plücker matrix is never formed on
  the hot path: :func:`xform_motion` and :func:`xform_force_T` apply it with 3x3 blocks;
* DCMs follow Schaub & Junkins: ``[BN]`` maps N-frame components to B-frame components;
* quaternions are scalar-last ``[q1, q2, q3, q4]`` (Shoer & Peck eq. 4), the attitude of
  B relative to N, ``q4 = cos(phi/2)``;
* Modified Rodrigues Parameters ``sigma = e tan(phi/4)`` with the kinematic matrix
  ``B(sigma)`` of Fulton & Schaub eq. (3) and the shadow set ``-sigma/|sigma|^2``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math

import equinox as eqx
import jax.numpy as jnp
from jax import lax

# ----------------------------------------------------------------------------- 3-D


def _entry(x, k):
    """``x[..., k:k + 1]`` (a static slice, traced straight to ``lax``)."""
    return lax.slice_in_dim(x, k, k + 1, axis=x.ndim - 1)


def skew(v):
    """Cross-product matrix ``[v~]`` so that ``skew(a) @ b == cross(a, b)``.

    Its nine entries are concatenated once and reshaped (a few operations instead of a
    stack of stacks: less to trace and to compile wherever a frame is rotated)."""
    v = jnp.asarray(v)
    n = -v
    z = jnp.zeros_like(_entry(v, 0))
    flat = lax.concatenate([z, _entry(n, 2), _entry(v, 1),
                            _entry(v, 2), z, _entry(n, 0),
                            _entry(n, 1), _entry(v, 0), z], v.ndim - 1)
    return flat.reshape(v.shape[:-1] + (3, 3))


def cross(a, b):
    """3-D cross product written out (fuses better than ``jnp.cross`` under vmap), its
    three components concatenated (a cyclic shift of the vectors, concatenated before the
    products, ran the 10x10 map fold's step 10 % slower)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
        a, b = _same(a, b)
    a0, a1, a2 = (_entry(a, k) for k in range(3))
    b0, b1, b2 = (_entry(b, k) for k in range(3))
    return lax.concatenate([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], a.ndim - 1)


#: The forms of the small products below (:func:`mv`, :func:`mtv`, :func:`mm`,
#: :func:`vdot`) and of the small dense algebra (:mod:`diffmb.math.small_cholesky`), chosen
#: at trace time by :func:`written_out` or :func:`traced_as`:
#:
#: * ``"reduce"`` (default): multiply-and-reduce. Fewest kernels, best for one state of a
#:   small system, where a step is bound by kernel count (fold-4panel 10 s: 0.068 s
#:   against 0.111 s written out, compile 8.4 s against 10.1 s; 2-core CPU).
#: * ``"written"``: each product written out term by term, an elementwise chain that
#:   vectorises over the leading (batch, body) axes. XLA's CPU backend runs a reduction
#:   over a short axis as a scalar loop per output element, so vmapped batches on a CPU
#:   gain: ``X^T I X`` of 32 bodies x 1024 states 4.0 against 18 us per state; the
#:   fold-4panel vector field 4.4 against 9.3 us per member at 512 members.
#: * ``"device"``: the form of accelerator batch programs: products written out, as in
#:   ``"written"`` (fewer kernels per step in the compiled program: fold-4panel 461 against
#:   501 reduced), and the Cholesky factorisations and triangular solves written out as
#:   elementwise code or loops of known trip count, so that a step holds no library call
#:   (on a GPU a cuSOLVER/cuBLAS call is a fusion barrier and keeps the step loop from
#:   being captured as one device graph).
FORMS = ("reduce", "written", "device")
_FORM = contextvars.ContextVar("diffmb_contraction_form", default="reduce")
#: Longest axis written out; longer contractions always reduce.
WRITTEN_OUT_MAX = 6
#: Longest axis a single matrix-vector product reduces; a longer one is a dot kernel.
#: Reduced, a short product fuses with its neighbours (the flexible four-body chain's vector
#: field, bodies of 10-16 speeds: 70 -> 52 us, 480 -> 336 kernels), but XLA's CPU backend
#: loops over a long reduction per output element (a 50 x 50 product: 16 us against 0.8 us
#: as a dot kernel; 24 x 24: 3.5 against 0.6 us; 16 x 16: 0.44 against 0.45 us).
REDUCED_MAX = 16


@contextlib.contextmanager
def written_out(on: bool = True):
    """Trace the small products inside the block written out (``on``) or reduced. A jitted
    program takes the form it was traced in: callers that cache programs (``simulate``)
    key them on :func:`contraction_form`."""
    token = _FORM.set("written" if on else "reduce")
    try:
        yield
    finally:
        _FORM.reset(token)


@contextlib.contextmanager
def traced_as(form: str):
    """Trace the block in ``form`` (one of :data:`FORMS`)."""
    if form not in FORMS:
        raise ValueError(f"form: unknown {form!r}; expected one of {list(FORMS)}")
    token = _FORM.set(form)
    try:
        yield
    finally:
        _FORM.reset(token)


def batch_form(on_cpu: bool) -> str:
    """The form a batch program is traced in: ``"written"`` on a CPU, ``"device"`` on an
    accelerator."""
    return "written" if on_cpu else "device"


def contraction_form() -> str:
    """The form the program is traced in now: one of :data:`FORMS`."""
    return _FORM.get()


def jit_per_form(fn):
    """``eqx.filter_jit(fn)`` with one program per :func:`contraction_form`: a jit called
    inside another trace (the vector field inside a solver's step) reuses its traced jaxpr
    for the same arguments, whatever form is current, so the form is passed as a static key.
    Without it a process that first traced one state would run its batches in that form,
    and a sweep's numbers would depend on what the process did before."""
    def keyed(form, *args):
        return fn(*args)

    keyed.__name__ = keyed.__qualname__ = fn.__name__  # the compile report's name for it
    jitted = eqx.filter_jit(keyed)
    return functools.wraps(fn)(lambda *args: jitted(contraction_form(), *args))


#: A short contraction with at least this many results is written out in either form. XLA's
#: CPU backend turns a large reduced one into a batched dot (a YNNPACK kernel) that runs
#: at a fraction of the elementwise chain's speed: the 20 x 20 map fold's 400 rotated
#: inertias (3 x 3) or its closure Gram blocks. One map-fold vector field, reduce / with
#: this rule: 20 x 20 2.1-3.1 / 1.5-1.6 ms; 10 x 10 RK4 step 1,011-1,212 / 894-960 us.
#: A few bodies (fold-4panel, at most a few dozen results per product) keep the reduced
#: form, with fewer kernels.
WRITTEN_OUT_MIN_RESULTS = 256


def writes_out(n: int, out_shape=()) -> bool:
    """Whether a contraction over an axis of ``n`` with results ``out_shape`` is traced
    written out: short, and in the ``"written"`` form or with many results."""
    if n > WRITTEN_OUT_MAX:
        return False
    return _FORM.get() in ("written", "device") or math.prod(out_shape) >= WRITTEN_OUT_MIN_RESULTS


def _long(A, x, axis=-1):
    """One product (no leading axes) over an axis longer than :data:`REDUCED_MAX`."""
    return x.ndim == 1 and A.ndim <= 2 and A.shape[axis] > REDUCED_MAX


def _terms(a, b, axis_a, axis_b):
    """``sum_k a_k * b_k`` over a short axis, as a chain of elementwise products."""
    n = a.shape[axis_a]
    take = lambda x, ax, k: lax.index_in_dim(x, k, ax % x.ndim, keepdims=False)
    out = take(a, axis_a, 0) * take(b, axis_b, 0)
    for k in range(1, n):
        out = out + take(a, axis_a, k) * take(b, axis_b, k)
    return out


def vdot(a, b):
    """``sum(a * b, -1)`` over the last axis (broadcasting the others)."""
    if _long(a, b):
        return a @ b
    if not writes_out(a.shape[-1], jnp.broadcast_shapes(a.shape[:-1], b.shape[:-1])):
        return jnp.sum(a * b, axis=-1)
    return _terms(a, b, -1, -1)


def mv(A, x):
    """Matrix-vector product ``A @ x`` (no batched dot kernels)."""
    if _long(A, x):
        return A @ x
    if not writes_out(A.shape[-1], jnp.broadcast_shapes(A.shape[:-1], x.shape[:-1] + (1,))):
        return jnp.sum(A * x[..., None, :], axis=-1)
    return _terms(A, x[..., None, :], -1, -1)


def mtv(A, x):
    """``A.T @ x``."""
    if _long(A, x, -2):
        return x @ A
    if not writes_out(A.shape[-2], jnp.broadcast_shapes(A.shape[:-2] + A.shape[-1:], x.shape[:-1] + (1,))):
        return jnp.sum(A * x[..., :, None], axis=-2)
    return _terms(A, x[..., :, None], -2, -2)


def table_product(A, x):
    """``A @ x`` (``A`` 1-D or 2-D, its last axis contracted with ``x``'s first): a matrix
    kernel, except in the accelerator form (:func:`traced_as`), where the product reduced
    elementwise fuses with what feeds it (a tree's sums along its paths by a 0/1 table, a
    Runge-Kutta step's weighted slopes)."""
    if contraction_form() != "device":
        return A @ x
    a = A.reshape(A.shape + (1,) * (x.ndim - 1))
    return jnp.sum(a * x.reshape((1,) * (A.ndim - 1) + x.shape), axis=A.ndim - 1)


def mm(A, B):
    """Matrix-matrix product (small matrices only)."""
    if not writes_out(A.shape[-1], jnp.broadcast_shapes(A.shape[:-1] + (1,), B.shape[:-2] + (1, B.shape[-1]))):
        return jnp.sum(A[..., :, :, None] * B[..., None, :, :], axis=-2)
    return _terms(A[..., :, :, None], B[..., None, :, :], -2, -2)


def _same(*xs):
    """Broadcast explicitly to a common shape (the code runs under strict rank promotion)."""
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in xs))
    return [jnp.broadcast_to(x, shape) for x in xs]


def safe_norm(v, axis=-1):
    """Euclidean norm whose gradient at zero is zero instead of NaN."""
    sq = jnp.sum(v * v, axis=axis)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


# ------------------------------------------------------------------ rotations / DCM


def axis_angle_dcm(axis, angle):
    """DCM ``[BA]`` of a frame B obtained by rotating A by ``angle`` about unit ``axis``.

    ``[BA] = cos(a) I - sin(a) [axis~] + (1 - cos(a)) axis axis^T``.
    """
    c = jnp.cos(angle)[..., None, None]
    s = jnp.sin(angle)[..., None, None]
    eye = jnp.eye(3, dtype=jnp.result_type(axis, angle))
    outer = axis[..., :, None] * axis[..., None, :]
    c, s, eye, S, outer = _same(c, s, eye, skew(axis), outer)
    return c * eye - s * S + (1.0 - c) * outer


def rpy_dcm(rpy):
    """DCM ``[child parent]`` of a URDF ``rpy`` origin (fixed-axis roll, pitch, yaw).

    URDF gives the rotation matrix ``R = Rz(y) Ry(p) Rx(r)`` that maps child components
    to parent components; the DCM here is its transpose.
    """
    r, p, y = rpy[..., 0], rpy[..., 1], rpy[..., 2]
    ex = jnp.array([1.0, 0.0, 0.0])
    ey = jnp.array([0.0, 1.0, 0.0])
    ez = jnp.array([0.0, 0.0, 1.0])
    # [BA] of successive rotations composes right-to-left.
    return mm(axis_angle_dcm(ex, r), mm(axis_angle_dcm(ey, p), axis_angle_dcm(ez, y)))


def mrp_to_dcm(sigma):
    """DCM ``[BN]`` from MRPs ``sigma_B/N`` (Schaub & Junkins eq. 3.153)."""
    s2 = jnp.sum(sigma * sigma, axis=-1)[..., None, None]
    S = skew(sigma)
    eye, S, s2 = _same(jnp.eye(3, dtype=sigma.dtype), S, s2)
    return eye + (8.0 * mm(S, S) - 4.0 * (1.0 - s2) * S) / (1.0 + s2) ** 2


def mrp_B(sigma):
    """Kinematic matrix of Fulton & Schaub eq. (3): ``sigma_dot = B(sigma) omega``.

    ``B = 1/4 [(1 - sigma^2) I + 2 [sigma~] + 2 sigma sigma^T]``; ``omega`` in B-frame.
    """
    s2 = jnp.sum(sigma * sigma, axis=-1)[..., None, None]
    outer = sigma[..., :, None] * sigma[..., None, :]
    eye, S, s2, outer = _same(jnp.eye(3, dtype=sigma.dtype), skew(sigma), s2, outer)
    return 0.25 * ((1.0 - s2) * eye + 2.0 * S + 2.0 * outer)


def mrp_shadow(sigma):
    """Shadow set ``-sigma / |sigma|^2`` (same attitude, the other MRP branch)."""
    s2 = jnp.sum(sigma * sigma, axis=-1, keepdims=True)
    return -sigma / jnp.where(s2 > 0, s2, 1.0)


def mrp_switch(sigma, threshold=1.0):
    """Switch to the shadow set where ``|sigma| > threshold`` (keeps ``|sigma| <= 1``)."""
    s2 = jnp.sum(sigma * sigma, axis=-1, keepdims=True)
    return jnp.where(s2 > threshold**2, mrp_shadow(sigma), sigma)


def mrp_switch_at(x, starts):
    """``x`` with the MRP triple at each index of ``starts`` switched to the shadow set
    where ``|sigma| > 1`` (:func:`mrp_switch`): the post-step switch of every formulation
    with spherical or free joints."""
    for s in starts:
        x = x.at[s:s + 3].set(mrp_switch(x[s:s + 3]))
    return x


def quat_to_dcm(q):
    """DCM ``[BN]`` from a scalar-last unit quaternion ``[q1, q2, q3, q4]``."""
    v = q[..., :3]
    w = q[..., 3][..., None, None]
    vv = jnp.sum(v * v, axis=-1)[..., None, None]
    outer = v[..., :, None] * v[..., None, :]
    eye, w, vv, outer, S = _same(jnp.eye(3, dtype=q.dtype), w, vv, outer, skew(v))
    return (w * w - vv) * eye + 2.0 * outer - 2.0 * w * S


def dcm_to_quat(C):
    """Scalar-last unit quaternion (``q4 >= 0``) from a DCM ``[BN]`` (Shepperd's method)."""
    tr = C[..., 0, 0] + C[..., 1, 1] + C[..., 2, 2]
    # Four candidate formulas; pick the one with the largest pivot (no division by ~0).
    b4 = jnp.sqrt(jnp.maximum(1.0 + tr, 0.0)) / 2.0
    b1 = jnp.sqrt(jnp.maximum(1.0 + 2 * C[..., 0, 0] - tr, 0.0)) / 2.0
    b2 = jnp.sqrt(jnp.maximum(1.0 + 2 * C[..., 1, 1] - tr, 0.0)) / 2.0
    b3 = jnp.sqrt(jnp.maximum(1.0 + 2 * C[..., 2, 2] - tr, 0.0)) / 2.0
    d23 = C[..., 1, 2] - C[..., 2, 1]
    d31 = C[..., 2, 0] - C[..., 0, 2]
    d12 = C[..., 0, 1] - C[..., 1, 0]
    s23 = C[..., 1, 2] + C[..., 2, 1]
    s31 = C[..., 2, 0] + C[..., 0, 2]
    s12 = C[..., 0, 1] + C[..., 1, 0]

    def safe(x):
        return jnp.where(x > 1e-12, x, 1.0)

    q_from4 = jnp.stack([d23 / (4 * safe(b4)), d31 / (4 * safe(b4)), d12 / (4 * safe(b4)), b4], -1)
    q_from1 = jnp.stack([b1, s12 / (4 * safe(b1)), s31 / (4 * safe(b1)), d23 / (4 * safe(b1))], -1)
    q_from2 = jnp.stack([s12 / (4 * safe(b2)), b2, s23 / (4 * safe(b2)), d31 / (4 * safe(b2))], -1)
    q_from3 = jnp.stack([s31 / (4 * safe(b3)), s23 / (4 * safe(b3)), b3, d12 / (4 * safe(b3))], -1)
    piv = jnp.argmax(jnp.stack([b1, b2, b3, b4], -1), axis=-1)[..., None]
    q = jnp.where(
        piv == 3, q_from4, jnp.where(piv == 0, q_from1, jnp.where(piv == 1, q_from2, q_from3))
    )
    return q * jnp.where(q[..., 3:4] < 0, -1.0, 1.0)


def quat_to_mrp(q):
    """MRPs from a scalar-last quaternion, on the short branch ``|sigma| <= 1``."""
    q = q * jnp.where(q[..., 3:4] < 0, -1.0, 1.0)
    return q[..., :3] / (1.0 + q[..., 3:4])


def mrp_to_quat(sigma):
    """Scalar-last quaternion from MRPs."""
    s2 = jnp.sum(sigma * sigma, axis=-1, keepdims=True)
    return jnp.concatenate([2.0 * sigma, 1.0 - s2], -1) / (1.0 + s2)


def dcm_to_mrp(C):
    """MRPs (``|sigma| <= 1``) from a DCM ``[BN]``."""
    return quat_to_mrp(dcm_to_quat(C))


def quat_angle(p, q):
    """Principal angle [rad] of the rotation between the attitudes of unit quaternions
    ``p`` and ``q`` (either sign of each): ``2 atan2(|v|, |p . q|)`` with ``v`` the vector
    part of ``p q*``, accurate near 0 and near pi."""
    v = q[..., 3:4] * p[..., :3] - p[..., 3:4] * q[..., :3] + cross(p[..., :3], q[..., :3])
    return 2.0 * jnp.arctan2(safe_norm(v), jnp.abs(jnp.sum(p * q, -1)))


def quat_multiply(p, q):
    """Scalar-last quaternion product such that ``dcm(p * q) = dcm(p) @ dcm(q)``.

    If ``q`` is the attitude of B relative to N and ``p`` that of C relative to B,
    the product is C relative to N.
    """
    pv, pw = p[..., :3], p[..., 3:4]
    qv, qw = q[..., :3], q[..., 3:4]
    v = pw * qv + qw * pv - cross(pv, qv)
    w = pw * qw - jnp.sum(pv * qv, axis=-1, keepdims=True)
    return jnp.concatenate([v, w], -1)


# ----------------------------------------------------------------------- 6-D algebra


def xform_motion(E, r, m):
    """Apply the Plücker motion transform ``(E, r)`` (A -> B) to ``m = [w; v]`` in A.

    ``[E w; E (v - r x w)]`` — the 6x6 matrix ``[[E, 0], [-E r~, E]]`` without forming it.
    """
    w, v = m[..., :3], m[..., 3:]
    return jnp.concatenate([mv(E, w), mv(E, v - cross(r, w))], -1)


def xform_motion_inv(E, r, m):
    """Inverse motion transform (B -> A) of ``m`` given in B."""
    w = mtv(E, m[..., :3])
    v = mtv(E, m[..., 3:]) + cross(r, w)
    return jnp.concatenate([w, v], -1)


def xform_force_T(E, r, f):
    """Transform a force ``f = [n; f]`` from B back to A: ``X^T f`` with ``X = (E, r)``."""
    fa = mtv(E, f[..., 3:])
    na = mtv(E, f[..., :3]) + cross(r, fa)
    return jnp.concatenate([na, fa], -1)


def xform_matrix(E, r):
    """The 6x6 Plücker motion transform (for tests and the rare dense use)."""
    Z = jnp.zeros_like(E)
    return jnp.concatenate(
        [jnp.concatenate([E, Z], -1), jnp.concatenate([-mm(E, skew(r)), E], -1)], -2
    )


def xform_compose(E2, r2, E1, r1):
    """Compose ``X2 (B -> C)`` after ``X1 (A -> B)`` into ``(A -> C)``."""
    return mm(E2, E1), r1 + mtv(E1, r2)


def inertia_to_parent(E, r, I):
    """``X^T I X`` for a symmetric 6x6 spatial inertia ``I`` held in B, with ``X = (E, r)``.

    Done in 3x3 blocks: first rotate into A-axes (still about B's origin), then shift the
    reference point by ``r``.
    """
    A, Bm, C = I[..., :3, :3], I[..., :3, 3:], I[..., 3:, 3:]
    Et = jnp.swapaxes(E, -1, -2)
    A1 = mm(Et, mm(A, E))
    B1 = mm(Et, mm(Bm, E))
    C1 = mm(Et, mm(C, E))
    R = skew(r)
    # Shift a force reference point by r: n_A = n_B + r x f.
    B2 = B1 + mm(R, C1)
    A2 = A1 + mm(R, jnp.swapaxes(B1, -1, -2)) - mm(B2, R)
    C2 = C1
    return jnp.concatenate(
        [jnp.concatenate([A2, B2], -1), jnp.concatenate([jnp.swapaxes(B2, -1, -2), C2], -1)], -2
    )


def cross_motion(v, m):
    """Spatial motion cross product ``v x m`` (Featherstone's ``crm(v) m``)."""
    w, u = v[..., :3], v[..., 3:]
    mw, mu = m[..., :3], m[..., 3:]
    return jnp.concatenate([cross(w, mw), cross(w, mu) + cross(u, mw)], -1)


def cross_force(v, f):
    """Spatial force cross product ``v x* f`` (Featherstone's ``crf(v) f``)."""
    w, u = v[..., :3], v[..., 3:]
    n, fl = f[..., :3], f[..., 3:]
    return jnp.concatenate([cross(w, n) + cross(u, fl), cross(w, fl)], -1)


def crm(v):
    """6x6 matrix of the motion cross product."""
    W, U = skew(v[..., :3]), skew(v[..., 3:])
    Z = jnp.zeros_like(W)
    return jnp.concatenate([jnp.concatenate([W, Z], -1), jnp.concatenate([U, W], -1)], -2)


def crf(v):
    """6x6 matrix of the force cross product, ``-crm(v)^T``."""
    return -jnp.swapaxes(crm(v), -1, -2)


def spatial_inertia(mass, com, inertia_com):
    """6x6 spatial inertia about the body origin from mass, com and 3x3 inertia about com.

    ``[[Ic + m c~ c~^T, m c~], [m c~^T, m 1]]`` (Featherstone eq. 2.63).
    """
    m = jnp.asarray(mass)[..., None, None]
    C = skew(com)
    Ct = jnp.swapaxes(C, -1, -2)
    eye = jnp.broadcast_to(jnp.eye(3, dtype=C.dtype), C.shape)  # explicit rank (strict promotion)
    top = jnp.concatenate([inertia_com + m * mm(C, Ct), m * C], -1)
    bot = jnp.concatenate([m * Ct, m * eye], -1)
    return jnp.concatenate([top, bot], -2)

