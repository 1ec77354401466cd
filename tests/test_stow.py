"""The stow step (issue 58, deliverable 5): a stowed state that contact admits, the
closures kept and the layers apart in their order, or a refusal that says why."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import scenarios
from diffmb.closures.assembly import assemble
from diffmb.origami import stow as st
from diffmb.origami.contact import start_diagnostics
from diffmb.tree.kinematics import kinematics

L = 2.0   # the map folds' panel size [m]


def _make(name, **values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scenarios.get(name).make({"contact": 1.0, **values}, "projection")[:2]


@pytest.fixture(scope="module")
def accordion():
    """A 4 x 1 map fold: a strip z-folded into four layers, no closures."""
    system, params = _make("map-fold", rows=4.0, cols=1.0)
    gap = 2 * float(params["elements"][0]["dhat"])
    return system, params, gap, st.stow(system, params, gap)


def _heights(system, params, q):
    """Each panel's centroid height along the root panel's normal at ``q``."""
    element, p = system.elements[0], params["elements"][0]
    P = np.asarray(jax.jit(lambda q: element.vertices(kinematics(params["model"], q), p))(jnp.asarray(q)))
    n = np.cross(P[0, 1] - P[0, 0], P[0, 2] - P[0, 0])
    n /= np.linalg.norm(n)
    return {name: float(np.mean(P[i] @ n)) for i, name in enumerate(element.panel_names)}


def test_a_z_folded_strip_stows_each_crease_open_by_asin_gap_over_its_length(accordion):
    """Alternate layers of an accordion opened by ``delta`` are parallel and ``L sin
    delta`` apart: the nearest stowed state opens every crease by the same ``delta``,
    towards flat, with the smallest gap that closed form at the solved opening."""
    system, params, gap, done = accordion
    q0 = np.asarray(params["q0"])
    moved = np.array(list(done.moved.values()))
    delta = np.abs(moved)
    assert sorted(done.pairs) == ["3/1", "r/1", "r/2"]     # the layers that share no crease
    assert gap <= done.min_gap <= 1.0011 * gap
    np.testing.assert_allclose(delta, math.asin(done.min_gap / L), rtol=1e-9)
    hinge = [c[0] for c in system.elements[0].tree_creases]
    # every crease moved towards flat: |theta| = pi - delta
    np.testing.assert_allclose(np.abs(done.q[hinge]), np.pi - delta, rtol=0, atol=1e-12)
    assert np.all(np.sign(moved) == -np.sign(q0[hinge]))


def test_the_layer_order_is_the_order_the_strip_folds_in(accordion):
    """The reported bottom-to-top order equals the order of the panels' heights in a
    state 0.3 rad short of stowed on the same fold signs (far from the stack, where
    the geometry alone orders them)."""
    system, params, gap, done = accordion
    q0 = np.asarray(params["q0"])
    hinge = [c[0] for c in system.elements[0].tree_creases]
    q = q0.copy()
    q[hinge] -= np.sign(q[hinge]) * 0.3
    h = _heights(system, params, q)
    assert len(done.layers) == 1
    assert list(done.layers[0]) == sorted(done.layers[0], key=h.get)


def test_contact_admits_the_stowed_start(accordion):
    """From the stowed state every stacked pair starts armed and outside the barrier's
    reach, with no crease past flat and no crossing."""
    system, params, gap, done = accordion
    element = system.elements[0]
    p = params["elements"][0]
    stowed = {**params, "q0": jnp.asarray(done.q)}
    d = start_diagnostics(system, element, stowed)
    assert float(np.max(np.abs(d["crease_angle"]))) < np.pi
    assert float(d["panel_overlap"]) <= 0.0
    armed = jax.jit(lambda q: element.armed_pairs(element.init_states(params["model"], kinematics(params["model"], q),
                                                                      p, 1.0)))
    assert np.all(np.asarray(armed(jnp.asarray(done.q))) == 1.0)
    # the paper's stack: every stacked pair starts in contact, unarmed
    assert np.all(np.asarray(armed(jnp.asarray(params["q0"]))) == 0.0)


@pytest.mark.slow   # ~6 s; the strip above covers the same solve
def test_a_thickness_is_added_to_the_stowed_gap():
    system, params = _make("map-fold", rows=3.0, cols=1.0, contact_thickness=0.01)
    p = params["elements"][0]
    gap = float(p["thickness"]) + 2 * float(p["dhat"])
    done = st.stow(system, params, gap)
    assert gap <= done.min_gap <= 1.0011 * gap
    np.testing.assert_allclose(np.abs(list(done.moved.values())), math.asin(done.min_gap / L), rtol=1e-9)


def test_stowing_changes_numbers_only(accordion):
    """``contact_stow`` moves the start state to :func:`stow`'s and nothing else: the
    parameters keep their structure, shapes and dtypes, so a compiled run takes either
    without recompiling."""
    _, a, _, done = accordion
    b = _make("map-fold", rows=4.0, cols=1.0, contact_stow=2.0)[1]
    la, lb = jax.tree.leaves_with_path(a), jax.tree.leaves_with_path(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert [(k, np.shape(x), np.asarray(x).dtype) for k, x in la] == \
        [(k, np.shape(x), np.asarray(x).dtype) for k, x in lb]
    np.testing.assert_array_equal(np.asarray(b["q0"]), done.q)
    assert not np.array_equal(np.asarray(a["q0"]), done.q)


@pytest.mark.slow
def test_fold_2x4_cannot_be_stowed_apart_and_says_which_layers_the_closures_hold():
    """Fulton & Schaub's 2 x 4 stack opens only along crease 7 (the fold made last): on
    that motion the layers of a column stay face to face, so no closed state near the
    stack separates them. The refusal names them; the kinematic fact behind it is
    checked directly (crease 7 opened by 0.05 rad, the others solved: panels 7 and 3
    still touch everywhere)."""
    system, params = _make("fold-2x4")
    element, p = system.elements[0], params["elements"][0]
    with pytest.raises(ValueError, match=r"stow: no rigid folded state .*7/3.*loop closures do not let"):
        st.stow(system, params, 2 * float(p["dhat"]))
    model = params["model"]
    q = np.array(params["q0"])
    s = model.body_slices[model.body_index("7")][0]
    q[s] -= 0.05
    q = np.asarray(assemble(model, system.closures, q, fixed=["r_free", "theta_7"])[0])
    P = np.asarray(element.vertices(kinematics(model, jnp.asarray(q)), p))
    i, j = element.panel_names.index("7"), element.panel_names.index("3")
    n = np.cross(P[j, 1] - P[j, 0], P[j, 2] - P[j, 0])
    assert np.max(np.abs((P[i] - P[j, 0]) @ n / np.linalg.norm(n))) < 1e-12


@pytest.mark.slow
def test_the_cli_refuses_a_stow_the_closures_forbid_in_one_line(capsys, tmp_path):
    from diffmb import cli

    rc = cli.main(["run", "map-fold", "--set", "rows=3", "--set", "cols=2", "--set", "contact=1",
                   "--set", "contact_stow=2", "--out", str(tmp_path)])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "error" in line]
    assert rc == 2 and len(err) == 1 and "loop closures do not let" in err[0], err
    assert not list(tmp_path.iterdir())


def test_a_stow_compiles_a_handful_of_programs_not_one_per_operation():
    """The stow's poses, vertices, normals and layer separations run as a few compiled
    programs: op by op, a stow of this 4 x 1 strip compiled 252 programs (5.3 s, nearly
    all of the stow). A second stow of the same structure compiles only its constraint
    functions again (they hold the gap and the layer order as constants)."""
    from helpers import counting_compiles

    system, params = _make("map-fold", rows=4.0, cols=1.0)
    gap = 2 * float(params["elements"][0]["dhat"])
    with counting_compiles() as compiles:
        first = st.stow(system, params, gap)
        n = len(compiles)
        again = st.stow(system, params, 1.5 * gap)     # other numbers, the same structure
    assert 0 < n <= 15 and len(compiles) - n <= 2, (n, len(compiles))
    assert first.pairs == again.pairs and again.min_gap >= 1.5 * gap * (1 - 1e-6)
