"""One self-contained HTML page of a :class:`~diffmb.viewer.scene.Scene`.

Everything is inlined at write time: three.js (vendored, ``assets/three.min.js``, MIT,
its licence in ``assets/THREE_LICENSE`` and quoted in the page), the viewer's script and
style, and the scene as JSON. The page loads nothing from the network.
"""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from pathlib import Path

from .scene import Scene, to_json

THREE_VERSION = "0.159.0"

_BODY = """<div id="view"></div>
<div id="title"></div>
<div id="axes-key"></div>
<div id="resolution"></div>
<div id="scale"><div id="scale-line"></div><span id="scale-label"></span></div>
<div id="panel">
  <label>colour by <select id="quantity"></select></label>
  <div id="legend"><div id="legend-name"></div><div id="legend-bar"></div>
    <div id="legend-ticks"><span id="legend-min"></span><span id="legend-mid"></span>
      <span id="legend-max"></span></div></div>
  <canvas id="plot" width="302" height="110"></canvas>
  <label id="follow-label"><input type="checkbox" id="follow"> follow the hub</label>
  <label id="deflect-label">deflection x <select id="deflect"><option value="1" selected>1</option>
    <option value="10">10</option><option value="100">100</option></select></label>
  <button id="reset">reset view</button>
  <div id="help">drag: orbit; right-drag or shift-drag: pan; wheel: zoom; click the plot to seek;
    space: play/pause; arrow keys: a frame back/on; Home/End: start/end</div>
  <div id="info"></div>
  <div id="notes"></div>
</div>
<div id="bar">
  <button id="play">Play</button>
  <label>speed <select id="speed">
    <option value="0.1">0.1x</option><option value="0.25">0.25x</option><option value="0.5">0.5x</option>
    <option value="1" selected>1x</option><option value="2">2x</option><option value="5">5x</option>
    <option value="10">10x</option><option value="30">30x</option></select></label>
  <input id="slider" type="range" min="0" max="1000" value="0">
  <span id="time-readout"></span>
</div>
<div id="error"></div>"""

_ON_ERROR = """window.addEventListener("error", function (e) {
  var d = document.getElementById("error"); d.style.display = "block";
  d.textContent = "viewer error: " + e.message; });"""


def asset(name: str) -> str:
    """The text of a packaged asset (``three.min.js``, ``viewer.js``, ...)."""
    return resources.files("diffmb.viewer").joinpath("assets", name).read_text(encoding="utf-8")


def _script(text: str) -> str:
    return "<script>\n" + text.replace("</script", "<\\/script") + "\n</script>"


def render(scene: Scene) -> str:
    """The page's HTML text."""
    data = json.dumps(to_json(scene), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    licence = asset("THREE_LICENSE").replace("*/", "* /")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(scene.title)} - diffmb view</title>",
        "<style>\n" + asset("viewer.css") + "\n</style>",
        "</head><body>",
        _BODY,
        _script(_ON_ERROR),
        f'<script type="application/json" id="diffmb-data">{data}</script>',
        # three r159's classic build announces its own deprecation on load: silenced here
        _script("window.__diffmbWarn = console.warn; console.warn = function () {};"),
        _script(f"/* three.js {THREE_VERSION} (https://threejs.org), MIT licence:\n{licence}*/\n"
                + asset("three.min.js")),
        _script("console.warn = window.__diffmbWarn;"),
        _script(asset("viewer.js")),
        "</body></html>",
    ])


def write(scene: Scene, path) -> Path:
    """Write the page of ``scene`` to ``path`` atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(scene), encoding="utf-8")
    os.replace(tmp, path)
    return path
