"""Browsers for the viewer tests: headless Chromium (selenium and the system's
chromedriver), WebKitGTK, Safari's engine (selenium and the system's WebKitWebDriver with
its MiniBrowser) and Firefox (Mozilla's ``marionette_driver`` talking to Firefox's own
Marionette server: no geckodriver), the last two on a private Xvfb display.

``chromium_available()`` / ``webkit_available()`` / ``firefox_available()`` say whether a
browser is installed; ``browser()`` / ``webkit()`` / ``firefox()`` yield a driver;
``open_page(drv, path)`` opens a page and returns once the viewer has drawn its first frame;
``first_frame`` and ``scrub_to_end`` are the checks every engine's test makes of a page.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

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


# ---------------------------------------------------------------- WebKitGTK (Safari's engine)
def webkit_available() -> bool:
    """WebKitWebDriver (Debian: webkit2gtk-driver, which brings MiniBrowser) and Xvfb."""
    return shutil.which("WebKitWebDriver") is not None and shutil.which("Xvfb") is not None


@contextlib.contextmanager
def xvfb(size: str = "1280x1024x24"):
    """A private X display (Xvfb picks a free number and writes it to a pipe); yields
    ``":N"`` and stops the server at the end."""
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", size, "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    try:
        with os.fdopen(r) as f:
            number = f.readline().strip()
        if not number:
            raise RuntimeError(f"Xvfb did not start (exit status {proc.poll()})")
        yield f":{number}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def webkit(width: int = 1200, height: int = 800):
    """WebKitWebDriver driving its MiniBrowser on its own Xvfb display (WebGL through
    Mesa's software GL). WebKitWebDriver keeps no browser log: pages opened with
    :func:`open_page` after :func:`instrumented` record their errors themselves."""
    from selenium import webdriver
    from selenium.webdriver.webkitgtk.service import Service

    with xvfb() as display:
        env = dict(os.environ, DISPLAY=display)
        env.pop("WAYLAND_DISPLAY", None)
        drv = webdriver.WebKitGTK(service=Service(shutil.which("WebKitWebDriver"), env=env,
                                                  log_output=subprocess.DEVNULL))
        try:
            drv.set_window_size(width, height)
            yield drv
        finally:
            drv.quit()


# ---------------------------------------------------------------- Firefox (Marionette)
def firefox() -> str | None:
    return shutil.which("firefox-esr") or shutil.which("firefox")


def firefox_available() -> bool:
    try:
        import marionette_driver.marionette  # noqa: F401
    except ImportError:
        return False
    return firefox() is not None and shutil.which("Xvfb") is not None


class _Marionette:
    """The few selenium calls the tests make, on a Marionette client (scripts run in the
    page's own scope, not in a sandbox, so they see the viewer's globals)."""

    def __init__(self, client):
        self.client = client

    def get(self, url):
        self.client.navigate(url)

    def execute_script(self, script, *args):
        return self.client.execute_script(script, script_args=list(args), sandbox=None)

    def save_screenshot(self, path):
        Path(path).write_bytes(self.client.screenshot(format="binary"))

    def set_window_size(self, width, height):
        self.client.set_window_rect(width=width, height=height)


@contextlib.contextmanager
def firefox_driver(width: int = 1200, height: int = 800):
    """Firefox (ESR) on its own Xvfb display (WebGL through Mesa's software GL: headless
    Firefox gets no WebGL context without a GPU), driven over Marionette."""
    import socket

    from marionette_driver.marionette import Marionette

    with socket.socket() as s:  # a free port for Marionette
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with xvfb() as display:
        old = os.environ.get("DISPLAY")
        os.environ["DISPLAY"] = display  # mozrunner starts Firefox with this process's environment
        logs = tempfile.mkdtemp(prefix="diffmb-firefox-")  # Firefox's own log (else gecko.log here)
        client = Marionette(host="127.0.0.1", port=port, bin=firefox(), headless=False, startup_timeout=120,
                            gecko_log=os.path.join(logs, "gecko.log"))
        try:
            client.start_session()
            drv = _Marionette(client)
            drv.set_window_size(width, height)
            yield drv
        finally:
            try:
                if client.session is not None:
                    client.delete_session()
            finally:
                client.cleanup()
                shutil.rmtree(logs, ignore_errors=True)
                if old is None:
                    os.environ.pop("DISPLAY", None)
                else:
                    os.environ["DISPLAY"] = old


# recorded in the page itself, before any of its scripts run: console.error calls, uncaught
# errors and unhandled rejections (for drivers without a browser log)
_RECORDER = """<script>window.__diffmbErrors = [];
(function () { var e = console.error;
  console.error = function () { window.__diffmbErrors.push(Array.prototype.map.call(arguments, String).join(" "));
    return e.apply(console, arguments); };
  window.addEventListener("error", function (ev) { window.__diffmbErrors.push("uncaught: " + ev.message); });
  window.addEventListener("unhandledrejection", function (ev) { window.__diffmbErrors.push("rejection: " + ev.reason); });
})();</script>"""


def instrumented(path) -> Path:
    """A copy of the page at ``path`` (``NAME.recorded.html`` beside it) whose first script
    records console errors in ``window.__diffmbErrors`` (read by :func:`recorded_errors`)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    assert text.count("<head>") == 1
    out = path.with_name(path.stem + ".recorded.html")
    out.write_text(text.replace("<head>", "<head>" + _RECORDER, 1), encoding="utf-8")
    return out


def recorded_errors(drv) -> list:
    return list(drv.execute_script("return window.__diffmbErrors || ['no recorder in the page']"))


SHOTS = Path(__file__).resolve().parents[1] / "out" / "viewer-tests"
BACKGROUND = (238, 240, 243)


def text(drv, id_) -> str:
    return drv.execute_script(f"return document.getElementById('{id_}').textContent")


def first_frame(drv, sc, shot: str):
    """The opened page of scene ``sc``: loaded nothing (offline), drew a picture that is
    not blank, reads out time 0 and the first quantity's name; its pixels, and a
    screenshot ``out/viewer-tests/<shot>_start.png``."""
    import numpy as np

    assert drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    start = canvas_pixels(drv)
    drv.save_screenshot(str(SHOTS / f"{shot}_start.png"))
    drawn = np.any(np.abs(start[..., :3].astype(int) - np.array(BACKGROUND)) > 8, axis=-1)
    assert drawn.mean() > 0.02, "the canvas is (nearly) blank"
    assert len(np.unique(start[..., :3].reshape(-1, 3), axis=0)) > 20
    t1 = float(sc.times[-1])
    assert text(drv, "time-readout") == f"t = 0.000 s / {t1:.3f} s"
    q = sc.quantities[0]
    assert text(drv, "legend-name") == f"{q.name} [{q.unit}]"
    return start


def scrub_to_end(drv, sc, shot: str, start):
    """Move the time slider to the end: the read-out says the last time and the picture
    changed from ``start``; the pixels, and a screenshot ``<shot>_end.png``."""
    import numpy as np

    t1 = float(sc.times[-1])
    before = drv.execute_script("return window.diffmbViewer.renders")
    drv.execute_script("const s = document.getElementById('slider'); s.value = s.max;"
                       "s.dispatchEvent(new Event('input'));")
    wait_rendered(drv, before)
    assert text(drv, "time-readout") == f"t = {t1:.3f} s / {t1:.3f} s"
    end = canvas_pixels(drv)
    drv.save_screenshot(str(SHOTS / f"{shot}_end.png"))
    changed = float(np.mean(np.any(start[..., :3] != end[..., :3], axis=-1)))
    assert changed > 0.003, "scrubbing to the end did not change the picture"
    return end
