"""Fast tree sweeps for the articulated-body algorithm, in per-entry form.

Why per-entry: on CPU the cost of a vmapped ABA is set by the number of compiled kernels,
not by arithmetic (see DESIGN.md, "Writing JAX here"). Here every vector / matrix entry is
its own JAX scalar (a ``(B,)`` array once ``jax.vmap`` batches it), and structural zeros
and ones are plain Python ints that the helpers below skip at trace time: a revolute
joint's ``S = [a; 0]`` makes ``U = IA S`` the product of IA's first three columns with
``a``, ``D = a^T U_top`` and so on, with no 6x6 products and no dot kernels. XLA then
fuses each pass into a few large elementwise loops over the batch.

Two backends run the same per-body step functions (:func:`_kin_step`,
:func:`_art_step`, :func:`_acc_step`):

``"unroll"``  a Python loop over bodies, unrolled at trace time. Fastest to run, compile
              time grows linearly with the number of bodies.
``"scan"``    ``lax.scan`` over contiguous runs of bodies with the same joint kind, in
              topological order. The carries are stacked arrays of every body's quantity
              plus a world slot (row 0); a body reads its parent's row by index and the
              tip-to-base pass accumulates into the parent's row. Compile time is flat in
              the number of bodies; each iteration costs ~1 µs of loop overhead, which a
              batch amortises.

``"auto"`` (the default) picks ``unroll`` for ``n_bodies <= UNROLL_MAX`` (4) and ``scan``
above. Measured (experiments/bench_tree.py, float64 revolute chains, jit(vmap) over 1024
states, 2 shared cores, load 3-6 so +-50 %): scan 1.1 / 2.0-3.9 / 4.1-8.9 / 10-22 / 46 µs per
state at N = 4 / 8 / 16 / 32 / 64 with compile ~1.2 s (2.5 s vmapped) at every N; unroll
1.4-3.5 / 3.5-7.6 / 7.5-17 µs per state at N = 4 / 8 / 16 with compile 2.5 / 6 / 14 s
(7 / 16 / 31 s vmapped). Unroll wins only single-state calls at N = 4 (31 vs 96 µs).
Why unroll loses: XLA's CPU fusion duplicates cheap elementwise producers into every
consumer fusion, so the per-entry DAG is recomputed many times across bodies (HLO grows
3-6x after optimisation); :func:`_mat` (divide by a traced 1.0, an "expensive" op XLA does not
duplicate) materialises the shared intermediates and halves the scan's run time.
``lax.optimization_barrier`` does not help: the CPU pipeline expands it before fusion.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import joints as jt
from . import spatial as sp

#: ``"auto"`` uses the unrolled backend up to this many bodies and ``lax.scan`` above.
#: Set from measurements (experiments/bench_tree.py), see the module docstring.
UNROLL_MAX = 4

#: Runs of same-kind bodies shorter than this are unrolled inside the scan backend.
MIN_SCAN_RUN = 3

BACKENDS = ("auto", "unroll", "scan")


def resolve_backend(backend: str, n_bodies: int) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "unroll" if n_bodies <= UNROLL_MAX else "scan"
    return backend


# ============================================================ entry algebra
# Entries are JAX scalars or the Python ints 0 / 1 / -1 (structural constants).


def _const(x):
    return isinstance(x, int)


def add(x, y):
    if _const(x) and x == 0:
        return y
    if _const(y) and y == 0:
        return x
    return x + y


def sub(x, y):
    if _const(y) and y == 0:
        return x
    if _const(x) and x == 0:
        return neg(y)
    return x - y


def neg(x):
    return -x


def mul(x, y):
    if _const(x):
        if x == 0:
            return 0
        if x == 1:
            return y
        if x == -1:
            return neg(y)
    if _const(y):
        if y == 0:
            return 0
        if y == 1:
            return x
        if y == -1:
            return neg(x)
    return x * y


def dot(xs, ys):
    s = 0
    for x, y in zip(xs, ys):
        s = add(s, mul(x, y))
    return s


def vadd(a, b):
    return tuple(add(x, y) for x, y in zip(a, b))


def vsub(a, b):
    return tuple(sub(x, y) for x, y in zip(a, b))


def vscale(s, a):
    return tuple(mul(s, x) for x in a)


def cross3(a, b):
    return (
        sub(mul(a[1], b[2]), mul(a[2], b[1])),
        sub(mul(a[2], b[0]), mul(a[0], b[2])),
        sub(mul(a[0], b[1]), mul(a[1], b[0])),
    )


def m3v(A, x):
    return tuple(dot(row, x) for row in A)


def m3tv(A, x):
    return tuple(dot((A[0][j], A[1][j], A[2][j]), x) for j in range(3))


def m3m(A, B):
    return tuple(tuple(dot(A[i], (B[0][j], B[1][j], B[2][j])) for j in range(3)) for i in range(3))


def m3t(A):
    return tuple(tuple(A[j][i] for j in range(3)) for i in range(3))


def entries(x):
    """Unpack an array (any shape) into nested tuples of scalars."""
    if x.ndim == 0:
        return x
    return tuple(entries(x[i]) for i in range(x.shape[0]))


def xmotion(E, r, m):
    """Plücker motion transform, as :func:`diffmb.spatial.xform_motion`."""
    w, v = m[:3], m[3:]
    return m3v(E, w) + m3v(E, vsub(v, cross3(r, w)))


def xforce_T(E, r, f):
    """``X^T f``, as :func:`diffmb.spatial.xform_force_T`."""
    fa = m3tv(E, f[3:])
    na = vadd(m3tv(E, f[:3]), cross3(r, fa))
    return na + fa


def cross_motion(v, m):
    w, u = v[:3], v[3:]
    mw, mu = m[:3], m[3:]
    return cross3(w, mw) + vadd(cross3(w, mu), cross3(u, mw))


def cross_force(v, f):
    w, u = v[:3], v[3:]
    n, fl = f[:3], f[3:]
    return vadd(cross3(w, n), cross3(u, fl)) + cross3(w, fl)


# ---- symmetric 6x6 matrices: nested 6x6 tuples whose (i, j) and (j, i) are one object


_TRIU = tuple((i, j) for i in range(6) for j in range(i, 6))


def sym_from_fn(fn, n=6):
    rows = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(i, n):
            rows[i][j] = rows[j][i] = fn(i, j)
    return tuple(tuple(r) for r in rows)


def sym_pack(I, dtype):
    return jnp.stack([jnp.asarray(I[i][j], dtype) for i, j in _TRIU])


def sym_unpack(x):
    vals = dict(zip(_TRIU, (x[k] for k in range(len(_TRIU)))))
    return sym_from_fn(lambda i, j: vals[(i, j)])


def blocks(I):
    A = tuple(tuple(I[i][j] for j in range(3)) for i in range(3))
    B = tuple(tuple(I[i][j + 3] for j in range(3)) for i in range(3))
    C = tuple(tuple(I[i + 3][j + 3] for j in range(3)) for i in range(3))
    return A, B, C


def _sym3_congr(E, A):
    """``E^T A E`` for symmetric 3x3 ``A`` (upper triangle only, mirrored)."""
    AE = m3m(A, E)
    rows = [[None] * 3 for _ in range(3)]
    for i in range(3):
        for j in range(i, 3):
            rows[i][j] = rows[j][i] = dot((E[0][i], E[1][i], E[2][i]), (AE[0][j], AE[1][j], AE[2][j]))
    return rows


def _skew_mul(r, M):
    """``[r~] M`` for 3x3 ``M``."""
    cols = [cross3(r, (M[0][j], M[1][j], M[2][j])) for j in range(3)]
    return tuple(tuple(cols[j][i] for j in range(3)) for i in range(3))


def inertia_to_parent(E, r, I):
    """``X^T I X`` in 3x3 blocks, as :func:`diffmb.spatial.inertia_to_parent`."""
    A, Bm, C = blocks(I)
    A1 = _sym3_congr(E, A)
    B1 = m3m(m3t(E), m3m(Bm, E))
    C1 = _sym3_congr(E, C)
    RC = _skew_mul(r, C1)
    B2 = tuple(tuple(add(B1[i][j], RC[i][j]) for j in range(3)) for i in range(3))
    RB1t = _skew_mul(r, m3t(B1))
    RB2t = _skew_mul(r, m3t(B2))  # -B2 [r~] = ([r~] B2^T)^T since [r~]^T = -[r~]
    A2 = [[None] * 3 for _ in range(3)]
    for i in range(3):
        for j in range(i, 3):
            # A2 = A1 + R B1^T - B2 R ;  -B2 R = ([r~] B2^T)^T
            A2[i][j] = A2[j][i] = add(add(A1[i][j], RB1t[i][j]), RB2t[j][i])

    def fn(i, j):
        if i < 3 and j < 3:
            return A2[i][j]
        if i < 3:
            return B2[i][j - 3]
        return C1[i - 3][j - 3]

    return sym_from_fn(fn)


def sym_add(I, J):
    return sym_from_fn(lambda i, j: add(I[i][j], J[i][j]))


def sym_mv(I, v):
    return tuple(dot(I[i], v) for i in range(6))


def inv_spd(D):
    """Inverse of a small SPD matrix (nested lists of entries) via Cholesky."""
    k = len(D)
    if k == 1:
        return ((1.0 / D[0][0],),)
    L = [[0] * k for _ in range(k)]
    for j in range(k):
        s = D[j][j]
        for m in range(j):
            s = sub(s, mul(L[j][m], L[j][m]))
        L[j][j] = jnp.sqrt(s)
        for i in range(j + 1, k):
            t = D[i][j]
            for m in range(j):
                t = sub(t, mul(L[i][m], L[j][m]))
            L[i][j] = t / L[j][j]
    # W = L^{-1} (lower triangular)
    W = [[0] * k for _ in range(k)]
    for i in range(k):
        W[i][i] = 1.0 / L[i][i]
        for j in range(i):
            t = 0
            for m in range(j, i):
                t = add(t, mul(L[i][m], W[m][j]))
            W[i][j] = neg(t) * W[i][i]
    # D^{-1} = W^T W
    Di = [[None] * k for _ in range(k)]
    for i in range(k):
        for j in range(i, k):
            t = 0
            for m in range(max(i, j), k):
                t = add(t, mul(W[m][i], W[m][j]))
            Di[i][j] = Di[j][i] = t
    return tuple(tuple(r) for r in Di)


# ============================================================ joint models, per entry


def _axis_angle_entries(a, q):
    """Entries of :func:`diffmb.spatial.axis_angle_dcm` for unit axis ``a`` (entries)."""
    c, s = jnp.cos(q), jnp.sin(q)
    omc = 1.0 - c
    sk = ((0, neg(a[2]), a[1]), (a[2], 0, neg(a[0])), (neg(a[1]), a[0], 0))
    rows = []
    for i in range(3):
        row = []
        for j in range(3):
            e = mul(omc, mul(a[i], a[j]))
            if i == j:
                e = add(c, e)
            e = sub(e, mul(s, sk[i][j]))
            row.append(e)
        rows.append(tuple(row))
    return tuple(rows)


def _joint(kind, P):
    """Per body: ``(E, r)`` parent -> body, subspace columns ``S``, bias ``S_dot qd``.

    ``P`` holds one body's arrays: axis, axis2, rot, pos, q, qd (see :func:`body_params`).
    """
    T, t = entries(P["rot"]), entries(P["pos"])
    q = P["q"]
    a = entries(P["axis"])
    zero3 = (0, 0, 0)
    bias = None
    if kind == "revolute":
        EJ = _axis_angle_entries(a, q[0])
        return m3m(EJ, T), t, [a + zero3], bias
    if kind == "prismatic":
        r = vadd(t, m3tv(T, vscale(q[0], a)))
        return T, r, [zero3 + a], bias
    if kind == "universal":
        E1 = sp.axis_angle_dcm(P["axis"], q[0])
        E2 = sp.axis_angle_dcm(P["axis2"], q[1])
        EJ = entries(sp.mm(E2, E1))
        a1v = sp.mv(E2, P["axis"])
        a1, a2 = entries(a1v), entries(P["axis2"])
        w = entries(-P["qd"][1] * P["qd"][0] * sp.cross(P["axis2"], a1v))
        return m3m(EJ, T), t, [a1 + zero3, a2 + zero3], w + zero3
    if kind == "spherical":
        EJ = entries(sp.mrp_to_dcm(q))
        cols = [tuple(1 if i == j else 0 for i in range(6)) for j in range(3)]
        return m3m(EJ, T), t, cols, bias
    if kind == "free":
        EJ = entries(sp.mrp_to_dcm(q[:3]))
        r = vadd(t, m3tv(T, entries(q[3:])))
        cols = [tuple(1 if i == j else 0 for i in range(6)) for j in range(6)]
        return m3m(EJ, T), r, cols, bias
    raise ValueError(f"unknown joint kind {kind!r}")


def _spatial_inertia(m, c, Ic):
    """Entries of :func:`diffmb.spatial.spatial_inertia` (structural zeros kept)."""
    cc = (mul(c[0], c[0]), mul(c[1], c[1]), mul(c[2], c[2]))
    mc = vscale(m, c)
    # m [c~] = [[0, -mc2, mc1], [mc2, 0, -mc0], [-mc1, mc0, 0]]
    TR = ((0, neg(mc[2]), mc[1]), (mc[2], 0, neg(mc[0])), (neg(mc[1]), mc[0], 0))

    def fn(i, j):
        if i < 3 and j < 3:
            if i == j:
                k1, k2 = [k for k in range(3) if k != i]
                return add(Ic[i][i], mul(m, add(cc[k1], cc[k2])))
            return sub(Ic[i][j], mul(m, mul(c[i], c[j])))
        if i < 3:
            return TR[i][j - 3]
        return m if i == j else 0

    return sym_from_fn(fn)


# ============================================================ per-body steps


def _kin_step(kind, P, v_par):
    """Base-to-tip: transform, velocity, velocity-product term, rigid inertia, bias force."""
    E, r, S, bias = _mat(_joint(kind, P))
    qd = P["qd"]
    vJ = (0,) * 6
    for k, col in enumerate(S):
        vJ = vadd(vJ, vscale(qd[k], col))
    v = _mat(vadd(xmotion(E, r, v_par), vJ))
    c = cross_motion(v, vJ)
    if bias is not None:
        c = vadd(bias, c)
    c = _mat(c)
    Ib = _spatial_inertia(P["mass"], entries(P["com"]), entries(P["inertia"]))
    pA = cross_force(v, sym_mv(Ib, v))
    if "fext" in P:
        pA = vsub(pA, entries(P["fext"]))
    return E, r, v, c, Ib, pA


def _art_step(kind, P, E, r, c, IA, pA):
    """Tip-to-base: ``U, D^-1, D^-1 u`` and the articulated inertia / bias for the parent."""
    S = _joint_subspace(kind, P)
    tau = P["tau"]
    nv = len(S)
    U = _mat([sym_mv(IA, col) for col in S])
    D = [[dot(S[i], U[j]) for j in range(nv)] for i in range(nv)]
    u = [sub(tau[k], dot(S[k], pA)) for k in range(nv)]
    Di, Du = _mat(inv_spd(D)), None
    Du = _mat(tuple(dot(Di[i], u) for i in range(nv)))
    # U D^-1 (6 x nv)
    UDi = [tuple(dot([U[m][row] for m in range(nv)], [Di[m][k] for m in range(nv)]) for row in range(6)) for k in range(nv)]
    Ia = _mat(sym_from_fn(lambda i, j: sub(IA[i][j], dot([UDi[k][i] for k in range(nv)], [U[k][j] for k in range(nv)]))))
    pa = vadd(vadd(pA, sym_mv(Ia, c)), tuple(dot([U[k][row] for k in range(nv)], Du) for row in range(6)))
    return U, Di, Du, _mat(inertia_to_parent(E, r, Ia)), _mat(xforce_T(E, r, pa))


def _acc_step(kind, P, E, r, c, U, Di, Du, a_par):
    """Base-to-tip: joint accelerations and body spatial accelerations."""
    S = _joint_subspace(kind, P)
    nv = len(S)
    ap = _mat(vadd(xmotion(E, r, a_par), c))
    Uta = [dot(U[k], ap) for k in range(nv)]
    qdd = tuple(sub(Du[i], dot(Di[i], Uta)) for i in range(nv))
    a = ap
    for k in range(nv):
        a = vadd(a, vscale(qdd[k], S[k]))
    return qdd, a


def _joint_subspace(kind, P):
    zero3 = (0, 0, 0)
    if kind == "revolute":
        return [entries(P["axis"]) + zero3]
    if kind == "prismatic":
        return [zero3 + entries(P["axis"])]
    if kind == "universal":
        E2 = sp.axis_angle_dcm(P["axis2"], P["q"][1])
        return [entries(sp.mv(E2, P["axis"])) + zero3, entries(P["axis2"]) + zero3]
    if kind == "spherical":
        return [tuple(1 if i == j else 0 for i in range(6)) for j in range(3)]
    if kind == "free":
        return [tuple(1 if i == j else 0 for i in range(6)) for j in range(6)]
    raise ValueError(f"unknown joint kind {kind!r}")


# ============================================================ static layout


@functools.lru_cache(maxsize=256)
def _layout(kinds, parents, body_slices):
    """Static index maps: topological q offsets, runs of equal kinds, public permutation."""
    nvs = [jt.NV[k] for k in kinds]
    topo_idx = np.concatenate([np.arange(s, e) for s, e in body_slices]).astype(np.int32)
    inv = np.empty_like(topo_idx)
    inv[topo_idx] = np.arange(len(topo_idx), dtype=np.int32)
    runs = []
    s = 0
    for i in range(1, len(kinds) + 1):
        if i == len(kinds) or kinds[i] != kinds[s]:
            runs.append((kinds[s], s, i))
            s = i
    off = np.concatenate([[0], np.cumsum(nvs)]).astype(int)
    return tuple(runs), topo_idx, inv, tuple(int(o) for o in off)


def body_params(model, q, qd, tau, f_ext):
    """Per-body arrays in topological order (leading axis = body)."""
    runs, topo_idx, inv, off = _layout(model.joint_kinds, model.parents, model.body_slices)
    P = dict(
        axis=model.axis, axis2=model.axis2, rot=model.tree_rot, pos=model.tree_pos,
        mass=model.mass, com=model.com, inertia=model.inertia,
    )
    if f_ext is not None:
        P["fext"] = f_ext
    qt, qdt, taut = q[topo_idx], qd[topo_idx], tau[topo_idx]
    return P, (qt, qdt, taut), runs, inv, off


# ============================================================ backends


def aba(model, q, qd, tau, f_ext=None, backend="auto"):
    """Articulated-body algorithm; ``q, qd, tau`` public order, validated by the caller."""
    backend = resolve_backend(backend, model.n_bodies)
    P, (qt, qdt, taut), runs, inv, off = body_params(model, q, qd, tau, f_ext)
    a0 = (0, 0, 0) + tuple(neg(g) for g in entries(model.gravity))
    _ONE[0] = 1.0 + 0.0 * q[0] if q.shape[0] else None
    if backend == "unroll":
        qdd = _aba_unroll(model, P, qt, qdt, taut, off, a0)
    else:
        qdd = _aba_scan(model, P, qt, qdt, taut, runs, off, a0)
    return qdd[inv]


def _body(P, qt, qdt, taut, off, i, with_tau=True):
    Pi = {k: v[i] for k, v in P.items()}
    s, e = off[i], off[i + 1]
    Pi["q"], Pi["qd"] = qt[s:e], qdt[s:e]
    if with_tau:
        Pi["tau"] = taut[s:e]
    return Pi


MAT = True  # materialise shared intermediates, see _mat
_ONE = [None]


def _mat(tree):
    """Force XLA to materialise entries (a divide by a traced 1.0 is an 'expensive' op that
    XLA's CPU fusion does not duplicate into every consumer)."""
    one = _ONE[0]
    if one is None or not MAT:
        return tree
    return jax.tree.map(lambda x: x if _const(x) else x / one, tree)


def _aba_unroll(model, P, qt, qdt, taut, off, a0):
    N = model.n_bodies
    parents = model.parents
    Pb = [_body(P, qt, qdt, taut, off, i) for i in range(N)]
    X, v, c, IA, pA = [None] * N, [None] * N, [None] * N, [None] * N, [None] * N
    zero6 = (0,) * 6
    for i in range(N):
        p = parents[i]
        E, r, v[i], c[i], IA[i], pA[i] = _kin_step(model.joint_kinds[i], Pb[i], zero6 if p < 0 else v[p])
        X[i] = (E, r)
    U, Di, Du = [None] * N, [None] * N, [None] * N
    for i in reversed(range(N)):
        U[i], Di[i], Du[i], IAp, pAp = _art_step(model.joint_kinds[i], Pb[i], *X[i], c[i], IA[i], pA[i])
        p = parents[i]
        if p >= 0:
            IA[p] = _mat(sym_add(IA[p], IAp))
            pA[p] = _mat(vadd(pA[p], pAp))
    a = [None] * N
    qdd = []
    for i in range(N):
        p = parents[i]
        qi, a[i] = _acc_step(model.joint_kinds[i], Pb[i], *X[i], c[i], U[i], Di[i], Du[i], a0 if p < 0 else a[p])
        qdd += list(qi)
    dt = qt.dtype
    return jnp.stack([jnp.asarray(x, dt) for x in qdd])


def _stack(xs, dt):
    return jnp.stack([jnp.asarray(x, dt) for x in xs])


def _run_xs(P, qt, qdt, taut, off, kind, s, e):
    """Per-body inputs of a run of ``e - s`` bodies of one kind, stacked on axis 0."""
    nv = jt.NV[kind]
    xs = {k: v[s:e] for k, v in P.items()}
    o0, o1 = off[s], off[e]
    xs["q"] = qt[o0:o1].reshape(e - s, nv)
    xs["qd"] = qdt[o0:o1].reshape(e - s, nv)
    xs["tau"] = taut[o0:o1].reshape(e - s, nv)
    return xs


def _scan_or_loop(body, carry, xs, n, reverse=False):
    """``lax.scan`` for long runs, a Python loop (static indices) for short ones."""
    if n >= MIN_SCAN_RUN:
        return lax.scan(body, carry, xs, reverse=reverse)
    ys = [None] * n
    for j in (reversed(range(n)) if reverse else range(n)):
        carry, ys[j] = body(carry, jax.tree.map(lambda x: x[j], xs))
    return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)


def _segments(kinds, parents):
    """Maximal runs ``(kind, s, e)`` of one joint kind with ``parents[i] == i - 1`` inside."""
    segs, s = [], 0
    for i in range(1, len(kinds) + 1):
        if i == len(kinds) or kinds[i] != kinds[s] or parents[i] != i - 1:
            segs.append((kinds[s], s, i))
            s = i
    return segs


def _aba_scan(model, P, qt, qdt, taut, runs, off, a0):
    """Scan over chain segments; the carry is the neighbouring body's quantity only.

    Within a segment body ``i``'s parent is ``i - 1``, so pass 1 and 3 carry the parent's
    velocity / acceleration and pass 2 carries the child's contribution to ``IA, pA``.
    Between segments values move by static index (branch points only).
    """
    dt = qt.dtype
    parents = model.parents
    segs = _segments(model.joint_kinds, parents)
    where = {}  # body -> (segment index, row)
    for k, (_, s, e) in enumerate(segs):
        for i in range(s, e):
            where[i] = (k, i - s)
    zeros = lambda n: jnp.zeros((n,), dt)  # noqa: E731

    def unpack_X(x):
        x = entries(x)
        return (x[0:3], x[3:6], x[6:9]), x[9:12]

    # ---- pass 1: kinematics (carry: parent's velocity)
    out1 = []
    for kind, s, e in segs:
        p = parents[s]
        v0 = zeros(6) if p < 0 else out1[where[p][0]][1][where[p][1]]
        xs = _run_xs(P, qt, qdt, taut, off, kind, s, e)

        def body(vp, x, kind=kind):
            E, r, v, c, Ib, pA = _kin_step(kind, x, entries(vp))
            v = _stack(v, dt)
            Xf = _stack([e_ for row in E for e_ in row] + list(r), dt)
            return v, (Xf, v, _stack(c, dt), sym_pack(Ib, dt), _stack(pA, dt))

        _, ys = _scan_or_loop(body, v0, xs, e - s)
        out1.append(ys)

    # ---- pass 2: articulated inertias (carry: child's contribution to IA, pA)
    extra = {}  # body -> contributions of children in later segments
    out2 = [None] * len(segs)
    for k in reversed(range(len(segs))):
        kind, s, e = segs[k]
        Xf, _, cs, Ibs, pAs = out1[k]
        IAx = jnp.stack([extra[i][0] if i in extra else zeros(21) for i in range(s, e)])
        pAx = jnp.stack([extra[i][1] if i in extra else zeros(6) for i in range(s, e)])
        xs = _run_xs(P, qt, qdt, taut, off, kind, s, e)
        xs.update(_X=Xf, _c=cs, _IA=Ibs + IAx, _pA=pAs + pAx)

        def body(carry, x, kind=kind):
            IAc, pAc = carry
            E, r = unpack_X(x["_X"])
            IA = sym_unpack(x["_IA"] + IAc)
            U, Di, Du, IAp, pAp = _art_step(kind, x, E, r, entries(x["_c"]), IA, entries(x["_pA"] + pAc))
            nv = len(U)
            ys = (
                _stack([u for col in U for u in col], dt),
                _stack([Di[i][j] for i in range(nv) for j in range(nv)], dt),
                _stack(Du, dt),
            )
            return (sym_pack(IAp, dt), _stack(pAp, dt)), ys

        (IAp, pAp), out2[k] = _scan_or_loop(body, (zeros(21), zeros(6)), xs, e - s, reverse=True)
        p = parents[s]
        if p >= 0:
            if p in extra:
                extra[p] = (extra[p][0] + IAp, extra[p][1] + pAp)
            else:
                extra[p] = (IAp, pAp)

    # ---- pass 3: accelerations (carry: parent's acceleration)
    out3, qdd = [], []
    for k, (kind, s, e) in enumerate(segs):
        nv = jt.NV[kind]
        p = parents[s]
        a_init = _stack(a0, dt) if p < 0 else out3[where[p][0]][where[p][1]]
        Us, Dis, Dus = out2[k]
        xs = _run_xs(P, qt, qdt, taut, off, kind, s, e)
        xs.update(_X=out1[k][0], _c=out1[k][2], _U=Us, _Di=Dis, _Du=Dus)

        def body(ap_, x, kind=kind, nv=nv):
            E, r = unpack_X(x["_X"])
            Ue = entries(x["_U"])
            U = [Ue[6 * k: 6 * k + 6] for k in range(nv)]
            Dl = entries(x["_Di"])
            Di = [Dl[nv * i: nv * i + nv] for i in range(nv)]
            qddi, a = _acc_step(kind, x, E, r, entries(x["_c"]), U, Di, entries(x["_Du"]), entries(ap_))
            a = _stack(a, dt)
            return a, (a, _stack(qddi, dt))

        _, (a_s, qs) = _scan_or_loop(body, a_init, xs, e - s)
        out3.append(a_s)
        qdd.append(qs.reshape(-1))
    return jnp.concatenate(qdd)
