"""The viewer's pages in a real browser: headless Chromium (``.ci/run`` installs it when
absent) driven by selenium. For fold-4panel, a URDF arm (a two-link one of primitives, and
example-robot-data's xArm7 with its STL meshes) and the T-bar: the page opens
offline, draws its first frame without console errors, the canvas is not blank, the
legend and the time read out the expected values, and scrubbing to the end changes the
picture (and the same for a flexible solar sail); the page loads no resource at all.
Screenshots go to ``out/viewer-tests/`` for a human to look at."""

from __future__ import annotations

import time

import numpy as np
import pytest

from browser import (
    SHOTS,
    canvas_pixels,
    chromium_available,
    console_errors,
    first_frame,
    open_page,
    scrub_to_end,
    text as _text,
    wait_rendered,
)
from diffmb.viewer import saved, scene_of
from diffmb.viewer.page import write
from robots import robot_urdfs
from viewer_runs import arm_run, fold_run, robot_run, sail_run, tbar_run

pytestmark = pytest.mark.skipif(not chromium_available(), reason="chromium / chromedriver not installed "
                                "(.ci/run installs them)")



RUNS = {"fold-4panel": lambda d: fold_run(d / "fold-4panel.npz"), "arm": arm_run,
        "tbar": lambda d: tbar_run(d / "tbar.npz"), "sail": lambda d: sail_run(d / "sail.npz"),
        "xarm7": lambda d: robot_run(d, next(p for p in robot_urdfs() if p.name == "xarm7.urdf"))}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """``pages[name]``: ``(page path, scene)``, each made when a test first asks for it."""
    d = tmp_path_factory.mktemp("pages")

    class Pages(dict):
        def __missing__(self, name):
            sc = scene_of(saved.load(RUNS[name](d)))
            self[name] = (write(sc, d / f"{name}.html"), sc)
            return self[name]

    return Pages()


@pytest.fixture(scope="module")
def drv():
    from browser import browser

    with browser() as d:
        yield d


def _changed(a, b) -> float:
    return float(np.mean(np.any(a[..., :3] != b[..., :3], axis=-1)))


def _until(check, message, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(message)


def _shown(x: float) -> float:
    """A value as the legend prints it (3 significant digits)."""
    return float(f"{x:.3g}")


@pytest.mark.parametrize("name", ["fold-4panel", "arm", "xarm7", "tbar", "sail"])
def test_page_draws_scrubs_and_reads_out(pages, drv, name):
    path, sc = pages[name]
    open_page(drv, path)
    assert console_errors(drv) == []
    start = first_frame(drv, sc, name)
    q = sc.quantities[0]
    vals = q.values[np.isfinite(q.values)].astype(np.float32)
    m = float(np.abs(vals).max()) if q.signed else float(vals.max())
    lo = -m if q.signed else float(vals.min())
    assert float(_text(drv, "legend-max")) == pytest.approx(_shown(m), rel=1e-6)
    assert float(_text(drv, "legend-min")) == pytest.approx(_shown(lo), rel=1e-6)

    scrub_to_end(drv, sc, name, start)
    assert console_errors(drv) == []


def test_controls(pages, drv):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    path, sc = pages["fold-4panel"]
    open_page(drv, path)
    Select(drv.find_element("id", "quantity")).select_by_visible_text("hinge energy")
    energy = {q.name: q for q in sc.quantities}["hinge energy"].values
    assert _text(drv, "legend-name") == "hinge energy [J]"
    assert float(_text(drv, "legend-max")) == pytest.approx(_shown(float(np.nanmax(energy))), rel=1e-6)

    drv.find_element("id", "play").click()
    _until(lambda: drv.execute_script("return window.diffmbViewer.time()") > 0.0, "playing did not advance the time")
    drv.find_element("id", "play").click()
    _until(lambda: _text(drv, "play") == "Play", "the button did not pause")
    t = drv.execute_script("return window.diffmbViewer.time()")
    assert 0.0 < t <= float(sc.times[-1])

    from selenium.webdriver.common.keys import Keys

    t1 = float(sc.times[-1])
    body = drv.find_element("tag name", "body")
    body.send_keys(Keys.END)
    _until(lambda: _text(drv, "time-readout") == f"t = {t1:.3f} s / {t1:.3f} s", "End did not go to the end")
    body.send_keys(Keys.HOME)
    body.send_keys(Keys.ARROW_RIGHT)
    _until(lambda: _text(drv, "time-readout") == f"t = {float(sc.times[1]):.3f} s / {t1:.3f} s",
           "Home then the right arrow did not step to the second frame")

    # Moving may lower the resolution on a slow machine (adaptive resolution): compare
    # sharp frames at rest, which the page draws at full resolution.
    def at_rest():
        _until(lambda: drv.execute_script("return window.diffmbViewer.resolution()") == 1,
               "at rest, the page did not draw a sharp frame")
        return canvas_pixels(drv)

    before = at_rest()
    canvas = drv.find_element("css selector", "#view canvas")
    n = drv.execute_script("return window.diffmbViewer.renders")
    ActionChains(drv).move_to_element(canvas).click_and_hold().move_by_offset(120, 40).release().perform()
    wait_rendered(drv, n)
    after = at_rest()
    assert after.shape == before.shape
    assert _changed(before, after) > 0.01, "dragging did not orbit the view"
    drv.find_element("id", "follow").click()
    assert drv.execute_script("return document.getElementById('follow').checked")
    drv.save_screenshot(str(SHOTS / "fold-4panel_orbit_energy.png"))
    assert console_errors(drv) == []


def test_a_page_too_slow_to_draw_draws_fewer_pixels_while_playing_and_a_sharp_frame_at_rest(pages, drv):
    """Adaptive resolution (the stacked 20x20 fold is fill-bound in software WebGL): a frame
    budget no machine meets (0.5 ms) drives the drawing buffer down to its floor, a quarter
    of the pixel ratio, while playing, and the page says so; paused, it draws at full
    resolution again and the note goes."""
    path, sc = pages["fold-4panel"]
    open_page(drv, path)
    full = drv.execute_script("const c = document.querySelector('#view canvas'); return [c.width, c.clientWidth * (window.devicePixelRatio || 1)]")
    assert full[0] == pytest.approx(full[1], abs=1)
    drv.execute_script("const v = window.diffmbViewer; v.setFrameBudget(0.5); v.setSpeed(0.05); v.setTime(v.t0); v.play()")
    _until(lambda: drv.execute_script("return window.diffmbViewer.resolution()") == 0.25,
           "playing at an impossible frame budget did not lower the resolution to its floor")
    width = drv.execute_script("return document.querySelector('#view canvas').width")
    assert width == pytest.approx(0.25 * full[1], abs=1)
    assert _text(drv, "resolution") == "drawn at 25 % resolution while moving"
    drv.execute_script("window.diffmbViewer.pause()")
    _until(lambda: drv.execute_script("return document.querySelector('#view canvas').width") == round(full[1]),
           "paused, the page did not draw at full resolution again")
    assert _text(drv, "resolution") == ""
    assert drv.execute_script("return window.diffmbViewer.resolution()") == 1
    px = canvas_pixels(drv)
    assert px.shape[1] == round(full[1])
    assert np.mean(np.any(px[..., :3] != px[0, 0, :3], axis=-1)) > 0.01, "the sharp frame is blank"
    assert console_errors(drv) == []
