"""Fluid forces of MuJoCo's inertia-box model: a body moving through a medium of
``density`` and ``viscosity`` (with a uniform ``wind``) is dragged as the box that has its
mass and principal moments of inertia.

Per body, in its principal axes at the centre of mass, with the box edges
``b_i = sqrt(6 (I_j + I_k - I_i) / m)``, the angular rate ``w`` and the velocity relative to
the wind ``v``:

* viscous (Stokes) terms of the sphere of diameter ``d = (b_0 + b_1 + b_2) / 3``:
  torque ``-pi d^3 mu w``, force ``-3 pi d mu v``;
* quadratic drag of the box's faces: force ``-1/2 rho b_j b_k |v_i| v_i`` on axis ``i``,
  torque ``-rho b_i (b_j^4 + b_k^4) |w_i| w_i / 64``.

This is MuJoCo's model where a body's geoms do not ask for the ellipsoid model
(``fluidshape``). Each box is one body of the file (a body welded to its parent keeps its
own box, fixed on the body it was merged into); its edges, centre and axes are the file's
(its masses and inertias), the rates are the state's. :class:`FluidWrenches` is the ``wrench_fn`` a
:class:`~diffmb.system.TreeSystem` takes; the numbers are :class:`InertiaBoxFluid`, a
parameter pytree (``forcing["fluid"]``).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from ..math import spatial as sp


class InertiaBoxFluid(eqx.Module):
    """``density``, ``viscosity`` (scalars), ``wind (3,)`` in world axes; per box ``k``:
    ``body[k]`` (static) the body it is fixed on, ``box (K, 3)`` its edges, ``center (K, 3)``
    its centre in that body's axes and ``axes (K, 3, 3)`` DCM [principal body] (body
    components -> principal components)."""

    density: jnp.ndarray
    viscosity: jnp.ndarray
    wind: jnp.ndarray
    box: jnp.ndarray
    center: jnp.ndarray
    axes: jnp.ndarray
    body: tuple = eqx.field(static=True)


def box_edges(mass, moments):
    """``b_i = sqrt(6 (I_j + I_k - I_i) / m)`` of principal ``moments (K, 3)`` (MuJoCo
    clamps the bracket at 1e-15, so a rod's thin edges stay real)."""
    I0, I1, I2 = moments[:, 0], moments[:, 1], moments[:, 2]
    bracket = jnp.maximum(1e-15, jnp.stack([I1 + I2 - I0, I0 + I2 - I1, I0 + I1 - I2], -1))
    return jnp.sqrt(bracket / mass[:, None] * 6.0)


def _drag(fluid, w, v):
    """Torque and force ``(N, 3)`` in principal axes for rates ``w`` and velocities ``v``."""
    b = fluid.box
    d = jnp.sum(b, -1, keepdims=True) / 3.0
    torque = -jnp.pi * d**3 * fluid.viscosity * w
    force = -3.0 * jnp.pi * d * fluid.viscosity * v
    area = jnp.stack([b[:, 1] * b[:, 2], b[:, 0] * b[:, 2], b[:, 0] * b[:, 1]], -1)
    force = force - 0.5 * fluid.density * area * jnp.abs(v) * v
    b4 = b**4
    arm = jnp.stack([b4[:, 1] + b4[:, 2], b4[:, 0] + b4[:, 2], b4[:, 0] + b4[:, 1]], -1)
    torque = torque - fluid.density * b * arm * jnp.abs(w) * w / 64.0
    return torque, force


def body_wrenches(fluid: InertiaBoxFluid, frames):
    """``(N, 6)`` wrenches ``[torque; force]`` in body axes about each body's origin, from
    the bodies' :class:`~diffmb.tree.body_frames.BodyFrames`."""
    b = jnp.asarray(fluid.body, jnp.int32)
    R, omega = frames.rot[b], frames.omega[b]
    v_center = frames.velocity[b] + sp.mtv(R, sp.cross(omega, fluid.center)) - fluid.wind[None, :]
    torque, force = _drag(fluid, sp.mv(fluid.axes, omega), sp.mv(fluid.axes, sp.mv(R, v_center)))
    force = sp.mtv(fluid.axes, force)
    torque = sp.mtv(fluid.axes, torque) + sp.cross(fluid.center, force)
    out = jnp.zeros((frames.rot.shape[0], 6), force.dtype)
    return out.at[b].add(jnp.concatenate([torque, force], -1))


class FluidWrenches(eqx.Module):
    """``wrench_fn(t, frames, model, forcing)`` of :class:`~diffmb.system.TreeSystem`:
    the inertia-box drag of ``forcing["fluid"]``."""

    def __call__(self, t, frames, model, forcing):
        return body_wrenches(forcing["fluid"], frames)
