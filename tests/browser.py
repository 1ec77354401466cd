"""Headless Chromium for the viewer tests (selenium + the system's chromedriver).

``chromium_available()`` says whether a browser is installed; ``page(path)`` opens a
page and yields a driver once the viewer has drawn its first frame.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import tempfile
import time

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--window-size=1200,800",
         "--disable-dev-shm-usage", "--allow-file-access-from-files")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def driver_path() -> str | None:
    return shutil.which("chromedriver")


def chromium_available() -> bool:
    return chromium() is not None and driver_path() is not None


@contextlib.contextmanager
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium()
    profile = tempfile.mkdtemp(prefix="diffmb-chromium-")
    for f in FLAGS + (f"--user-data-dir={profile}",):
        opts.add_argument(f)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(driver_path()), options=opts)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(drv, path, timeout: float = 30.0):
    """Load ``path`` and wait for the viewer's first frame (``window.diffmbViewer.ready``)."""
    drv.get(path.resolve().as_uri())
    end = time.time() + timeout
    while time.time() < end:
        if drv.execute_script("return !!(window.diffmbViewer && window.diffmbViewer.ready)"):
            return
        time.sleep(0.05)
    raise AssertionError(f"the viewer did not draw a frame in {timeout} s; console: {console_errors(drv, 'ALL')}")


def console_errors(drv, level="SEVERE") -> list:
    return [e for e in drv.get_log("browser") if level == "ALL" or e["level"] == level]


def canvas_pixels(drv):
    """The canvas as an ``(h, w, 4)`` uint8 array (its own pixels, read back via PNG)."""
    import io

    import numpy as np
    from matplotlib.image import imread

    url = drv.execute_script("return document.querySelector('#view canvas').toDataURL('image/png')")
    png = base64.b64decode(url.split(",", 1)[1])
    img = imread(io.BytesIO(png), format="png")
    return (np.asarray(img) * 255).round().astype(np.uint8)


def wait_rendered(drv, before: int, timeout: float = 10.0):
    """Wait until the viewer has drawn at least one frame after the count ``before``."""
    end = time.time() + timeout
    while time.time() < end:
        if drv.execute_script("return window.diffmbViewer.renders") > before:
            return
        time.sleep(0.03)
    raise AssertionError("the viewer did not redraw")
