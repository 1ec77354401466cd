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

import pytest

from browser import (
    firefox_available,
    firefox_driver,
    first_frame,
    instrumented,
    open_page,
    recorded_errors,
    scrub_to_end,
    webkit,
    webkit_available,
)
from diffmb.viewer import saved, scene_of
from diffmb.viewer.page import write
from viewer_runs import fold_run

# the other engines start a browser each on a display of their own (~15 s): the slow job; the
# default job checks the page in Chromium (test_viewer_browser.py)
pytestmark = pytest.mark.slow

ENGINES = {
    "webkit": (webkit, webkit_available, "AppleWebKit", "WebKitWebDriver / Xvfb not installed "
               "(.ci/run installs webkit2gtk-driver and xvfb)"),
    "firefox": (firefox_driver, firefox_available, "Firefox/", "Firefox, Xvfb or marionette_driver not installed "
                "(.ci/run installs firefox-esr and xvfb; marionette_driver is in the dev extra)"),
}


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
    with start_driver() as drv:
        open_page(drv, page, timeout=60.0)
        assert agent in drv.execute_script("return navigator.userAgent")
        assert recorded_errors(drv) == []
        assert drv.execute_script("return getComputedStyle(document.getElementById('error')).display") == "none"
        start = first_frame(drv, sc, f"{engine}_fold-4panel")
        scrub_to_end(drv, sc, f"{engine}_fold-4panel", start)
        assert recorded_errors(drv) == []
        drv.execute_script("console.error('recorder check')")  # the recorder does record
        assert recorded_errors(drv) == ["recorder check"]
