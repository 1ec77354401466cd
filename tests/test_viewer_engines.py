"""The viewer's page in the other browser engines, each on its own Xvfb display with
WebGL through Mesa's software GL:

* WebKit, Safari's engine: WebKitGTK's MiniBrowser driven by selenium through the
  system's WebKitWebDriver (Debian: ``webkit2gtk-driver``);
* Firefox (ESR): driven over its own Marionette server by Mozilla's ``marionette_driver``
  (the dev extra), so no geckodriver is needed.

``.ci/run`` installs ``webkit2gtk-driver``, ``firefox-esr`` and ``xvfb`` when absent. The
same checks as the Chromium test, on fold-4panel: the first frame is drawn, nothing is
loaded from anywhere, no console errors (recorded by the page itself: neither driver
keeps a browser log), the canvas is not blank, the legend and time read out, scrubbing to
the end changes the picture. Screenshots go to ``out/viewer-tests/<engine>_*.png``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from browser import (
    canvas_pixels,
    firefox_available,
    firefox_driver,
    instrumented,
    open_page,
    recorded_errors,
    wait_rendered,
    webkit,
    webkit_available,
)
from diffmb.viewer import saved, scene_of
from diffmb.viewer.page import write
from viewer_runs import fold_run

SHOTS = Path(__file__).resolve().parents[1] / "out" / "viewer-tests"
BACKGROUND = np.array([238, 240, 243])

ENGINES = {
    "webkit": (webkit, webkit_available, "AppleWebKit", "WebKitWebDriver / Xvfb not installed "
               "(.ci/run installs webkit2gtk-driver and xvfb)"),
    "firefox": (firefox_driver, firefox_available, "Firefox/", "Firefox, Xvfb or marionette_driver not installed "
                "(.ci/run installs firefox-esr and xvfb; marionette_driver is in the dev extra)"),
}


def _text(drv, id_):
    return drv.execute_script(f"return document.getElementById('{id_}').textContent")


@pytest.fixture(scope="module")
def fold_page(tmp_path_factory):
    d = tmp_path_factory.mktemp("pages")
    sc = scene_of(saved.load(fold_run(d / "fold-4panel.npz")))
    return instrumented(write(sc, d / "fold-4panel.html")), sc


@pytest.mark.parametrize("engine", list(ENGINES))
def test_fold_page(fold_page, engine):
    start_driver, available, agent, why = ENGINES[engine]
    if not available():
        pytest.skip(why)
    page, sc = fold_page
    SHOTS.mkdir(parents=True, exist_ok=True)
    with start_driver() as drv:
        open_page(drv, page, timeout=60.0)
        assert agent in drv.execute_script("return navigator.userAgent")
        assert recorded_errors(drv) == []
        assert drv.execute_script("return getComputedStyle(document.getElementById('error')).display") == "none"
        assert drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []
        start = canvas_pixels(drv)
        drv.save_screenshot(str(SHOTS / f"{engine}_fold-4panel_start.png"))
        drawn = np.any(np.abs(start[..., :3].astype(int) - BACKGROUND) > 8, axis=-1)
        assert drawn.mean() > 0.02, "the canvas is (nearly) blank"
        assert len(np.unique(start[..., :3].reshape(-1, 3), axis=0)) > 20
        t1 = float(sc.times[-1])
        assert _text(drv, "time-readout") == f"t = 0.000 s / {t1:.3f} s"
        q = sc.quantities[0]
        assert _text(drv, "legend-name") == f"{q.name} [{q.unit}]"

        before = drv.execute_script("return window.diffmbViewer.renders")
        drv.execute_script("const s = document.getElementById('slider'); s.value = s.max;"
                           "s.dispatchEvent(new Event('input'));")
        wait_rendered(drv, before)
        assert _text(drv, "time-readout") == f"t = {t1:.3f} s / {t1:.3f} s"
        end = canvas_pixels(drv)
        drv.save_screenshot(str(SHOTS / f"{engine}_fold-4panel_end.png"))
        changed = float(np.mean(np.any(start[..., :3] != end[..., :3], axis=-1)))
        assert changed > 0.003, "scrubbing to the end did not change the picture"
        assert recorded_errors(drv) == []
        drv.execute_script("console.error('recorder check')")  # the recorder does record
        assert recorded_errors(drv) == ["recorder check"]
