"""The viewer's page in WebKit, Safari's engine: WebKitGTK's MiniBrowser driven by selenium
through the system's WebKitWebDriver (Debian: ``webkit2gtk-driver``; ``.ci/run`` installs
it and ``xvfb`` when absent), on its own Xvfb display, WebGL through Mesa's software GL.

The same checks as the Chromium test, on fold-4panel: the first frame is drawn, nothing
is loaded from anywhere, no console errors (recorded by the page itself: WebKitWebDriver
keeps no browser log), the canvas is not blank, the legend and time read out, scrubbing
to the end changes the picture. Screenshots go to ``out/viewer-tests/webkit_*.png``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from browser import canvas_pixels, instrumented, open_page, recorded_errors, wait_rendered, webkit, webkit_available
from diffmb.viewer import saved, scene_of
from diffmb.viewer.page import write
from viewer_runs import fold_run

pytestmark = pytest.mark.skipif(not webkit_available(), reason="WebKitWebDriver / Xvfb not installed "
                                "(.ci/run installs webkit2gtk-driver and xvfb)")

SHOTS = Path(__file__).resolve().parents[1] / "out" / "viewer-tests"
BACKGROUND = np.array([238, 240, 243])


def _text(drv, id_):
    return drv.execute_script(f"return document.getElementById('{id_}').textContent")


def test_fold_page_in_webkit(tmp_path):
    sc = scene_of(saved.load(fold_run(tmp_path / "fold-4panel.npz")))
    page = instrumented(write(sc, tmp_path / "fold-4panel.html"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    with webkit() as drv:
        open_page(drv, page, timeout=60.0)
        assert "AppleWebKit" in drv.execute_script("return navigator.userAgent")
        assert recorded_errors(drv) == []
        assert drv.execute_script("return getComputedStyle(document.getElementById('error')).display") == "none"
        assert drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []
        start = canvas_pixels(drv)
        drv.save_screenshot(str(SHOTS / "webkit_fold-4panel_start.png"))
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
        drv.save_screenshot(str(SHOTS / "webkit_fold-4panel_end.png"))
        changed = float(np.mean(np.any(start[..., :3] != end[..., :3], axis=-1)))
        assert changed > 0.003, "scrubbing to the end did not change the picture"
        assert recorded_errors(drv) == []
        drv.execute_script("console.error('recorder check')")  # the recorder does record
        assert recorded_errors(drv) == ["recorder check"]
