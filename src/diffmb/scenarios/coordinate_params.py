"""Per-coordinate parameters: names for one joint's or one hinge's entry of a System's params.

A scenario's own ``--set`` names (``K``, ``c``, ``hub_mass``, ...) are numbers its ``build``
turns into a System. Besides them, any System whose params hold a tree ``model`` accepts

``K.<coordinate>``, ``c.<coordinate>``, ``rest.<coordinate>``
    that joint's stiffness, damping or spring rest angle only (e.g. ``K.theta_j``); also
    spelled as a model file names them: ``stiffness.<joint>``, ``damping.<joint>``, and
    ``armature.<joint>`` (the joint's rotor inertia)
``mass.<body>``
    that body's mass (its inertia about its centre of mass stays, as in MuJoCo's
    ``body_mass``)
``inertia_scale``
    the mass and inertia of every body but the root, scaled together (1: as built)

and one with hinge models (:mod:`diffmb.origami.hinges`) ``tape.<field>.<coordinate>`` and
``stop.<field>.<coordinate>``: one hinge's entry of a tape spring's or end stop's per-hinge
arrays (e.g. ``tape.M_peak.theta_j``: that tape spring's snap-through moment, positive side).

These names are not inputs of a build: they edit the params a build returned. A scenario
builds with its own numbers and then sets these entries (:func:`apply`, called by
:meth:`diffmb.scenarios.Scenario.make`), so ``K.theta_j`` overrides ``K`` for that one
hinge; :mod:`diffmb.design.binding` tunes and fits them along :func:`direction`. Both read a name
the same way (:func:`_locate`). :func:`is_coordinate_param` checks the spelling only: which
coordinates and hinges exist is known once the System is built.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

#: ``K.<coordinate>`` etc.: the tree model's per-coordinate field each prefix addresses
JOINT_FIELDS = {"K": "stiffness", "c": "damping", "rest": "rest",
                "stiffness": "stiffness", "damping": "damping", "armature": "armature"}
#: ``mass.<body>``: the tree model's per-body field each prefix addresses
BODY_FIELDS = {"mass": "mass"}
#: ``tape.<field>.<coordinate>``, ``stop.<field>.<coordinate>``: the hinge models' groups
HINGE_GROUPS = ("tape", "stop")
#: the spellings, for messages
FORMS = ("K.<coordinate>", "c.<coordinate>", "rest.<coordinate>", "stiffness.<joint>", "damping.<joint>",
         "armature.<joint>", "mass.<body>", "inertia_scale", "tape.<field>.<hinge>", "stop.<field>.<hinge>")


def is_coordinate_param(name: str) -> bool:
    """Whether ``name`` is spelled as a per-coordinate parameter (not whether it exists)."""
    head, dot, rest = name.partition(".")
    if name == "inertia_scale":
        return True
    if dot and (head in JOINT_FIELDS or head in BODY_FIELDS):
        return True
    key, dot2, coord = rest.partition(".")
    return head in HINGE_GROUPS and bool(dot2) and bool(key) and "." not in coord


def _model(name: str, params):
    model = params.get("model") if isinstance(params, dict) else None
    if model is None:
        raise ValueError(f"parameter {name!r}: per-coordinate parameters need a tree model in params")
    return model


def _locate(name: str, system, params) -> tuple:
    """``(path, index)`` of a ``K.<coordinate>`` or ``tape.<field>.<hinge>`` style name:
    ``path`` is ``("model", field)`` or ``("forcing", group, key)``. ValueError naming the
    coordinates, hinges or fields that exist when the name addresses none of them."""
    head, _, rest = name.partition(".")
    model = _model(name, params)
    if head in BODY_FIELDS:
        bodies = list(model.body_names)
        if rest not in bodies:
            raise ValueError(f"parameter {name!r}: no body {rest!r}; bodies: {', '.join(bodies)}")
        return ("model", BODY_FIELDS[head]), bodies.index(rest)
    names = list(model.coordinate_names)
    if head in JOINT_FIELDS:
        if rest not in names:
            raise ValueError(f"parameter {name!r}: no coordinate {rest!r}; coordinates: {', '.join(names)}")
        return ("model", JOINT_FIELDS[head]), names.index(rest)
    key, _, coord = rest.partition(".")
    forcing = params.get("forcing")
    if not isinstance(forcing, dict) or head not in forcing:
        raise ValueError(f"parameter {name!r}: this system has no {head!r} hinge model")
    if key not in forcing[head]:
        raise ValueError(f"parameter {name!r}: no {head} field {key!r}; fields: {', '.join(forcing[head])}")
    hinges = list(system.coordinate_roles.get("hinge", ()))
    if jnp.shape(forcing[head][key]) != (len(hinges),):
        raise ValueError(f"parameter {name!r}: {head} field {key!r} is not one value per hinge "
                         f"({len(hinges)} hinges: {', '.join(hinges)})")
    if coord not in hinges:
        raise ValueError(f"parameter {name!r}: no hinge {coord!r}; hinges: {', '.join(hinges)}")
    return ("forcing", head, key), hinges.index(coord)


def _get(params, path):
    if path[0] == "model":
        return jnp.asarray(getattr(params["model"], path[1]))
    return jnp.asarray(params["forcing"][path[1]][path[2]])


def _put(params, path, leaf):
    if path[0] == "model":
        return {**params, "model": eqx.tree_at(lambda m: getattr(m, path[1]), params["model"], leaf)}
    f = params["forcing"]
    return {**params, "forcing": {**f, path[1]: {**f[path[1]], path[2]: leaf}}}


def _movable(model):
    """1 for every body but the root (what ``inertia_scale`` scales), 0 for the root."""
    return jnp.asarray([0.0] + [1.0] * (len(model.body_names) - 1), model.mass.dtype)


def _scale_bodies(params, factor):
    """Params with each body's mass and inertia multiplied by its entry of ``factor``."""
    model = params["model"]
    return {**params, "model": eqx.tree_at(lambda m: (m.mass, m.inertia), model,
                                           (model.mass * factor, model.inertia * factor[:, None, None]))}


def direction(name: str, system, params, value: float | None = None):
    """``(d params / d value, value)`` of per-coordinate parameter ``name`` at ``params``
    (zeros in every other leaf). ``value``: what ``params`` already carry for the name (an
    :func:`apply`-ed value); ``None``: read it from ``params``, 1 for ``inertia_scale``."""
    zeros = jax.tree_util.tree_map(lambda x: jnp.zeros_like(x) if eqx.is_inexact_array(x) else x, params)
    if name == "inertia_scale":
        _model(name, params)
        s = 1.0 if value is None else float(value)
        if s == 0:
            raise ValueError("parameter 'inertia_scale': cannot be bound at 0 (massless bodies)")
        d = _scale_bodies(params, _movable(params["model"]) / s)["model"]
        zm = eqx.tree_at(lambda m: (m.mass, m.inertia), zeros["model"], (d.mass, d.inertia))
        return {**zeros, "model": zm}, s
    path, i = _locate(name, system, params)
    arr = _get(params, path)
    return _put(zeros, path, jnp.zeros_like(arr).at[i].set(1.0)), float(arr[i])


def apply(system, params, values: dict):
    """``params`` with each per-coordinate parameter of ``values`` set: the entry replaced
    (``K.theta_j``), or the bodies' masses and inertias scaled (``inertia_scale``, relative
    to ``params``). ValueError for a name that addresses no coordinate, hinge or field."""
    for name, v in values.items():
        if not is_coordinate_param(name):
            raise ValueError(f"parameter {name!r} is not a per-coordinate parameter ({', '.join(FORMS)})")
        if name == "inertia_scale":
            _model(name, params)
            params = _scale_bodies(params, jnp.where(_movable(params["model"]) > 0, float(v), 1.0))
            continue
        path, i = _locate(name, system, params)
        params = _put(params, path, _get(params, path).at[i].set(float(v)))
    return params
