"""Helpers the tests share (imported as ``from helpers import ...``; pytest's
configuration is ``conftest.py``'s).

* ``make_random_model``: seeded random trees with mixed joint kinds, a free root or a
  fixed base, branches, fixed (merged) links, random placements and valid inertias.
* ``random_state``: a random ``(q, qd)`` of a model (MRP parts inside the unit ball).
* ``random_rotation``, ``random_inertia``, ``random_unit``.
* ``interrupt_after``: a Ctrl-C after a resumable run's segment.
* ``counting_compiles``: the XLA compiles (cache reads included) made inside a block.
"""

from __future__ import annotations

import contextlib

import numpy as np

import diffmb


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """A uniformly random proper rotation matrix."""
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    x, y, z, w = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def random_inertia(rng: np.random.Generator, scale: float = 0.1) -> np.ndarray:
    """A full (non-diagonal) valid inertia: principal moments in [1, 2]*scale, rotated.

    Moments in [1, 2] always satisfy the triangle inequality (1 + 1 >= 2).
    """
    R = random_rotation(rng)
    I = R @ np.diag(rng.uniform(1.0, 2.0, 3) * scale) @ R.T
    return 0.5 * (I + I.T)


def axis_rotation(axis, t) -> np.ndarray:
    """Rodrigues' rotation by ``t`` about ``axis`` (numpy, independent of diffmb)."""
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(t) * K + (1 - np.cos(t)) * K @ K


def random_unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


MOVING_KINDS = ("revolute", "prismatic", "universal", "spherical")


def make_random_model(
    seed: int,
    n_bodies: int = 5,
    base: str = "free",
    gravity=(0.0, 0.0, -9.81),
    springs: bool = False,
    dampers: bool = False,
    kinds=None,
    with_fixed: bool = True,
):
    """Random tree of ``n_bodies`` moving bodies (plus fixed links when ``with_fixed``).

    ``base="free"``: body 0 has a free joint to the world (floating base).
    ``base="fixed"``: body 0 hangs from the world by a 1-3 DOF joint; a second root
    (and a fixed link to the world with a moving child) make the base a real forest.
    ``kinds``: optional sequence of joint kinds for the non-root bodies (cycled); the
    default cycles through all of revolute, prismatic, universal, spherical in a
    seed-dependent order, so every kind appears once ``n_bodies >= 5``.
    Parameters (not the structure) can be re-drawn by changing ``seed`` only if the
    structure is drawn from a separate stream: structure uses ``seed``, numbers use
    ``seed + 10_000`` (see ``param_seed``).
    """
    return _build(seed, seed + 10_000, n_bodies, base, gravity, springs, dampers, kinds, with_fixed)


def make_random_model_params(seed: int, param_seed: int, **kw):
    """Same structure as ``make_random_model(seed, **kw)`` with other numbers."""
    n_bodies = kw.pop("n_bodies", 5)
    base = kw.pop("base", "free")
    gravity = kw.pop("gravity", (0.0, 0.0, -9.81))
    return _build(
        seed,
        param_seed,
        n_bodies,
        base,
        gravity,
        kw.pop("springs", False),
        kw.pop("dampers", False),
        kw.pop("kinds", None),
        kw.pop("with_fixed", True),
    )


def _build(seed, param_seed, n_bodies, base, gravity, springs, dampers, kinds, with_fixed):
    srng = np.random.default_rng(seed)  # structure
    prng = np.random.default_rng(param_seed)  # numbers
    b = diffmb.ModelBuilder(gravity=tuple(float(g) for g in gravity))
    if kinds is None:
        kinds = [str(k) for k in srng.permutation(MOVING_KINDS)]
    kinds = [str(k) for k in kinds]

    def inertial():
        return dict(
            mass=float(prng.uniform(0.5, 2.0)),
            com=prng.uniform(-0.3, 0.3, 3),
            inertia=random_inertia(prng),
        )

    def placement():
        return dict(pos=prng.uniform(-0.5, 0.5, 3), rpy=prng.uniform(-np.pi, np.pi, 3))

    def passive(kind):
        nv = diffmb.tree.joints.NV[kind]
        kw = {}
        if springs and kind not in diffmb.tree.joints.MRP_KINDS:
            kw["stiffness"] = prng.uniform(1.0, 5.0, nv)
            kw["rest"] = prng.uniform(-0.5, 0.5, nv)
        if dampers:
            kw["damping"] = prng.uniform(0.1, 1.0, nv)
        return kw

    names = []
    if base == "free":
        b.add_body("b0", "world", "free", **placement(), **inertial())
    elif base == "fixed":
        k0 = kinds[0]
        b.add_body(
            "b0", "world", k0, axis=random_unit(prng), axis2=random_unit(prng),
            **placement(), **inertial(), **passive(k0),
        )
    else:
        raise ValueError(base)
    names.append("b0")
    for i in range(1, n_bodies):
        kind = kinds[(i - 1) % len(kinds)]
        # mostly deep chains with branches: parent among the last three bodies
        parent = names[max(0, len(names) - 1 - int(srng.integers(0, 3)))]
        if i == n_bodies - 1 and i >= 2:
            parent = "b0"  # guarantee a branch at the root
        name = f"b{i}"
        b.add_body(
            name, parent, kind, axis=random_unit(prng), axis2=random_unit(prng),
            **placement(), **inertial(), **passive(kind),
        )
        names.append(name)
        if with_fixed and i == 1:
            # a massive fixed link merged into b1, and a moving child of that fixed link
            b.add_body("f1", name, "fixed", **placement(), **inertial())
            b.add_body(
                "c1", "f1", "revolute", axis=random_unit(prng), **placement(), **inertial(),
                **passive("revolute"),
            )
            names.append("c1")
            # a massless marker frame
            b.add_body("tip1", "c1", "fixed", **placement())
    if with_fixed and base == "fixed":
        # a second root through a fixed link to the world: a forest base
        b.add_body("wf", "world", "fixed", **placement(), **inertial())
        b.add_body(
            "r2", "wf", "revolute", axis=random_unit(prng), **placement(), **inertial(),
            **passive("revolute"),
        )
    return b.build()


def random_state(model, seed: int, scale: float = 1.0):
    """Random ``(q, qd)`` for ``model`` (numpy float64). MRP blocks have ``|sigma| < 0.8``."""
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1.0, 1.0, model.nq) * scale
    qd = rng.uniform(-1.0, 1.0, model.nv) * scale
    for i, kind in enumerate(model.joint_kinds):
        if kind in ("spherical", "free"):
            s, _ = model.body_slices[i]
            sig = rng.normal(size=3)
            q[s : s + 3] = sig / np.linalg.norm(sig) * rng.uniform(0.1, 0.8)
    return q, qd


def interrupt_after(monkeypatch, segment: int):
    """A Ctrl-C once segment ``segment`` (0-based) of a resumable run has finished: the
    compiled segment raises KeyboardInterrupt when it is called for the next one."""
    from diffmb.simulation import resumable

    real = resumable.compile_simulation

    def compiling(system, **kw):
        run, seconds = real(system, **kw)
        calls = []

        def counted(**args):
            if len(calls) > segment:
                raise KeyboardInterrupt
            calls.append(1)
            return run(**args)
        return counted, seconds

    monkeypatch.setattr(resumable, "compile_simulation", compiling)


@contextlib.contextmanager
def counting_compiles():
    """``with counting_compiles() as compiles:``, a list of the seconds of every XLA
    compile (persistent-cache reads included) made inside the block, JAX's in-memory
    caches cleared at its start (so a program compiled by an earlier test counts)."""
    import jax
    from jax import monitoring

    compiles = []
    listener = lambda event, seconds, **kw: compiles.append(seconds) \
        if event == "/jax/core/compile/backend_compile_duration" else None
    jax.clear_caches()
    monitoring.register_event_duration_secs_listener(listener)
    try:
        yield compiles
    finally:
        monitoring.unregister_event_duration_listener(listener)
