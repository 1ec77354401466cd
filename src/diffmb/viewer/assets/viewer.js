/* diffmb viewer: one run in 3-D, scrubbable. Reads the JSON in #diffmb-data (see
   diffmb/viewer/scene.py) and draws it with three.js (inlined before this script). */
(function () {
  "use strict";
  const THREE = window.THREE;
  const DATA = JSON.parse(document.getElementById("diffmb-data").textContent);
  const $ = (id) => document.getElementById(id);

  function unpack(p) {
    const bin = atob(p.b64);
    const buf = new ArrayBuffer(bin.length);
    const u8 = new Uint8Array(buf);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return new Float32Array(buf);
  }

  const times = unpack(DATA.times);
  const F = times.length;
  const N = DATA.bodies.length;
  const poses = unpack(DATA.poses);
  const T0 = times[0], T1 = times[F - 1];
  const quantities = DATA.quantities.map((q) => ({ ...q, data: unpack(q.values), n: q.values.shape[1] }));

  // ------------------------------------------------------------------ time and poses
  function frameAt(t) {
    if (t <= T0 || F === 1) return [0, 0];
    if (t >= T1) return [F - 1, 0];
    let lo = 0, hi = F - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (times[mid] <= t) lo = mid; else hi = mid; }
    const span = times[hi] - times[lo];
    return [lo, span > 0 ? (t - times[lo]) / span : 0];
  }

  const cur = new Float32Array(N * 7);
  function posesAt(t) {
    const [i, a] = frameAt(t);
    const j = Math.min(i + 1, F - 1);
    for (let b = 0; b < N; b++) {
      const p = (i * N + b) * 7, q = (j * N + b) * 7, o = b * 7;
      for (let k = 0; k < 3; k++) cur[o + k] = poses[p + k] * (1 - a) + poses[q + k] * a;
      let dot = 0;
      for (let k = 3; k < 7; k++) dot += poses[p + k] * poses[q + k];
      const s = dot < 0 ? -a : a;
      let n2 = 0;
      for (let k = 3; k < 7; k++) { cur[o + k] = poses[p + k] * (1 - a) + poses[q + k] * s; n2 += cur[o + k] * cur[o + k]; }
      const inv = 1 / Math.sqrt(n2 || 1);
      for (let k = 3; k < 7; k++) cur[o + k] *= inv;
    }
    return cur;
  }

  function valueAt(q, t, k) {
    const [i, a] = frameAt(t);
    const j = Math.min(i + 1, F - 1);
    const v0 = q.data[i * q.n + k], v1 = q.data[j * q.n + k];
    return v0 * (1 - a) + v1 * a;
  }

  function transform(pose, o, x, y, z, out, w) {
    const px = pose[o], py = pose[o + 1], pz = pose[o + 2];
    const qx = pose[o + 3], qy = pose[o + 4], qz = pose[o + 5], qw = pose[o + 6];
    const tx = 2 * (qy * z - qz * y), ty = 2 * (qz * x - qx * z), tz = 2 * (qx * y - qy * x);
    out[w] = px + x + qw * tx + (qy * tz - qz * ty);
    out[w + 1] = py + y + qw * ty + (qz * tx - qx * tz);
    out[w + 2] = pz + z + qw * tz + (qx * ty - qy * tx);
  }

  function rotateOnly(pose, o, x, y, z, out, w) {
    const qx = pose[o + 3], qy = pose[o + 4], qz = pose[o + 5], qw = pose[o + 6];
    const tx = 2 * (qy * z - qz * y), ty = 2 * (qz * x - qx * z), tz = 2 * (qx * y - qy * x);
    out[w] = x + qw * tx + (qy * tz - qz * ty);
    out[w + 1] = y + qw * ty + (qz * tx - qx * tz);
    out[w + 2] = z + qw * tz + (qx * ty - qy * tx);
  }

  // ------------------------------------------------------------------ geometry, body frames
  const tri = { pos: [], nrm: [], body: [] };
  const seg = { pos: [], body: [], color: [] };
  const SEG_COLORS = { crease: [0.15, 0.15, 0.15], cut: [0.85, 0.1, 0.1], edge: [0.35, 0.35, 0.4],
    skeleton: [0.2, 0.2, 0.2], axis_x: [0.85, 0.1, 0.1], axis_y: [0.1, 0.6, 0.1], axis_z: [0.1, 0.2, 0.85],
    bar: [0.2, 0.2, 0.2], string: [0.1, 0.45, 0.8], flex: [0.1, 0.1, 0.15] };

  function newell(poly) {
    const n = new THREE.Vector3();
    for (let i = 0; i < poly.length; i++) {
      const a = poly[i], b = poly[(i + 1) % poly.length];
      n.x += (a[1] - b[1]) * (a[2] + b[2]); n.y += (a[2] - b[2]) * (a[0] + b[0]); n.z += (a[0] - b[0]) * (a[1] + b[1]);
    }
    return n.lengthSq() > 0 ? n.normalize() : new THREE.Vector3(0, 0, 1);
  }

  function addPolygon(b, poly) {
    const n = newell(poly);
    const u = Math.abs(n.z) < 0.9 ? new THREE.Vector3(0, 0, 1).cross(n).normalize() : new THREE.Vector3(1, 0, 0).cross(n).normalize();
    const v = n.clone().cross(u);
    const flat = poly.map((p) => new THREE.Vector2(p[0] * u.x + p[1] * u.y + p[2] * u.z, p[0] * v.x + p[1] * v.y + p[2] * v.z));
    let faces = THREE.ShapeUtils.triangulateShape(flat, []);
    const clockwise = THREE.ShapeUtils.isClockWise(flat);
    for (const f of faces) {
      const ids = clockwise ? [f[0], f[2], f[1]] : f;
      for (const id of ids) { tri.pos.push(...poly[id]); tri.nrm.push(n.x, n.y, n.z); tri.body.push(b); }
    }
    for (let i = 0; i < poly.length; i++) addSegment(b, poly[i], poly[(i + 1) % poly.length], "edge");
  }

  function addSegment(b, p, q, kind) {
    seg.pos.push(...p, ...q); seg.body.push(b, b);
    const c = SEG_COLORS[kind] || SEG_COLORS.edge;
    seg.color.push(...c, ...c);
  }

  function addPrimitive(b, pr) {
    let g;
    const s = pr.size || [];
    if (pr.type === "box") g = new THREE.BoxGeometry(s[0], s[1], s[2]);
    else if (pr.type === "sphere") g = new THREE.SphereGeometry(s[0], 16, 10);
    else if (pr.type === "cylinder") { g = new THREE.CylinderGeometry(s[0], s[0], s[1], 20); g.rotateX(Math.PI / 2); }
    else if (pr.type === "capsule") { g = new THREE.CapsuleGeometry(s[0], s[1], 6, 16); g.rotateX(Math.PI / 2); }
    else if (pr.type === "mesh") {
      g = new THREE.BufferGeometry();
      g.setAttribute("position", new THREE.BufferAttribute(unpack(pr.triangles), 3));
      g.computeVertexNormals();
    } else return;
    const m = new THREE.Matrix4().compose(new THREE.Vector3(...(pr.pos || [0, 0, 0])),
      new THREE.Quaternion(...(pr.quat || [0, 0, 0, 1])), new THREE.Vector3(1, 1, 1));
    g.applyMatrix4(m);
    g = g.index ? g.toNonIndexed() : g;
    const P = g.attributes.position.array, Nn = g.attributes.normal.array;
    for (let i = 0; i < P.length; i += 3) {
      tri.pos.push(P[i], P[i + 1], P[i + 2]); tri.nrm.push(Nn[i], Nn[i + 1], Nn[i + 2]); tri.body.push(b);
    }
    g.dispose();
  }

  DATA.geometry.forEach((g, b) => {
    (g.polygons || []).forEach((poly) => addPolygon(b, poly));
    (g.primitives || []).forEach((pr) => addPrimitive(b, pr));
    (g.segments || []).forEach((s) => addSegment(b, s.p[0], s.p[1], s.kind));
  });
  const flex = [];
  DATA.geometry.forEach((g, b) => {
    if (!g.flex) return;
    const f = { body: b, nodes: g.flex.nodes, phi: unpack(g.flex.phi), eta: unpack(g.flex.eta),
      n: g.flex.eta.shape[1], first: seg.body.length, edges: g.flex.edges };
    f.edges.forEach(([i, j]) => addSegment(b, f.nodes[i], f.nodes[j], "flex"));
    flex.push(f);
  });
  let deflect = 1;
  const linkStart = seg.body.length;
  const links = DATA.links.filter((l) => l.kind !== "cut-gap");
  links.forEach((l) => {
    seg.pos.push(...l.pa, ...l.pb); seg.body.push(l.a, l.b);
    const c = SEG_COLORS[l.kind] || SEG_COLORS.edge;
    seg.color.push(...c, ...c);
  });

  const triLocal = new Float32Array(tri.pos), triNrm = new Float32Array(tri.nrm), triBody = Int32Array.from(tri.body);
  const segLocal = new Float32Array(seg.pos), segBody = Int32Array.from(seg.body), segBase = new Float32Array(seg.color);
  const nTri = triBody.length, nSeg = segBody.length;

  // ------------------------------------------------------------------ three.js scene
  const container = $("view");
  const renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
  const FULL_RATIO = window.devicePixelRatio || 1;
  renderer.setPixelRatio(FULL_RATIO);
  renderer.setClearColor(0xeef0f3, 1);
  container.appendChild(renderer.domElement);
  const scene = new THREE.Scene();
  scene.add(new THREE.HemisphereLight(0xffffff, 0x667788, 1.6));
  const sun = new THREE.DirectionalLight(0xffffff, 1.4);
  scene.add(sun);

  const triGeom = new THREE.BufferGeometry();
  const triWorld = new Float32Array(nTri * 3), triNWorld = new Float32Array(nTri * 3), triColor = new Float32Array(nTri * 3);
  triGeom.setAttribute("position", new THREE.BufferAttribute(triWorld, 3));
  triGeom.setAttribute("normal", new THREE.BufferAttribute(triNWorld, 3));
  triGeom.setAttribute("color", new THREE.BufferAttribute(triColor, 3));
  const front = new THREE.Mesh(triGeom, new THREE.MeshLambertMaterial({ vertexColors: true, side: THREE.FrontSide,
    polygonOffset: true, polygonOffsetFactor: 1, polygonOffsetUnits: 1 }));
  const back = new THREE.Mesh(triGeom, new THREE.MeshLambertMaterial({ vertexColors: true, side: THREE.BackSide,
    color: 0x9a9aa6, polygonOffset: true, polygonOffsetFactor: 1, polygonOffsetUnits: 1 }));
  front.frustumCulled = back.frustumCulled = false;
  scene.add(front, back);

  const segGeom = new THREE.BufferGeometry();
  const segWorld = new Float32Array(nSeg * 3), segColor = new Float32Array(segBase);
  segGeom.setAttribute("position", new THREE.BufferAttribute(segWorld, 3));
  segGeom.setAttribute("color", new THREE.BufferAttribute(segColor, 3));
  const lines = new THREE.LineSegments(segGeom, new THREE.LineBasicMaterial({ vertexColors: true }));
  lines.frustumCulled = false;
  scene.add(lines);

  // extent of the motion: body origins over all frames, padded by the geometry's reach
  let reach = 0;
  for (let i = 0; i < triLocal.length; i += 3) reach = Math.max(reach, Math.hypot(triLocal[i], triLocal[i + 1], triLocal[i + 2]));
  for (let i = 0; i < segLocal.length; i += 3) reach = Math.max(reach, Math.hypot(segLocal[i], segLocal[i + 1], segLocal[i + 2]));
  const lo = [Infinity, Infinity, Infinity], hi = [-Infinity, -Infinity, -Infinity];
  for (let i = 0; i < F * N; i++) for (let k = 0; k < 3; k++) {
    const v = poses[i * 7 + k]; if (isFinite(v)) { lo[k] = Math.min(lo[k], v); hi[k] = Math.max(hi[k], v); }
  }
  for (let k = 0; k < 3; k++) { lo[k] -= reach; hi[k] += reach; }
  // panels folded flat lie in one plane: each body's faces are lifted along their normal by
  // a few 1e-4 of the scene (body index mod 6), so stacked panels keep a fixed order on screen
  // instead of flickering (z-fighting)
  const lift = new Float32Array(N);
  { const extent = Math.max(hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2], 1e-9);
    const unit = isFinite(extent) ? 2e-4 * extent : 0;
    for (let b = 0; b < N; b++) lift[b] = unit * (b % 6); }
  const center = new THREE.Vector3((lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, (lo[2] + hi[2]) / 2);
  const size = Math.max(hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2], 1e-3);

  function nice(x) {
    const e = Math.pow(10, Math.floor(Math.log10(x)));
    const m = x / e;
    return (m >= 5 ? 5 : m >= 2 ? 2 : 1) * e;
  }
  const cell = nice(size / 8);
  const gridSize = cell * Math.ceil(1.5 * size / cell / 2) * 2;
  const grid = new THREE.GridHelper(gridSize, Math.round(gridSize / cell), 0x9aa0aa, 0xc8ccd4);
  grid.rotation.x = Math.PI / 2;
  grid.position.set(Math.round(center.x / cell) * cell, Math.round(center.y / cell) * cell, lo[2] - 0.05 * size);
  scene.add(grid);
  const axes = new THREE.AxesHelper(nice(size / 4));
  scene.add(axes);
  $("axes-key").textContent = `axes at the origin: x red, y green, z blue (${fmt(nice(size / 4))} m); grid cells ${fmt(cell)} m`;

  // ------------------------------------------------------------------ camera and orbit
  const camera = new THREE.PerspectiveCamera(40, 1, size * 1e-3, size * 100);
  camera.up.set(0, 0, 1);
  const orbit = { target: center.clone(), radius: 1.7 * size, theta: -Math.PI / 3, phi: Math.PI / 3, offset: new THREE.Vector3() };
  const home = { target: center.clone(), radius: orbit.radius, theta: orbit.theta, phi: orbit.phi };
  let follow = false;
  let dirty = true;

  function placeCamera() {
    const t = orbit.target.clone().add(orbit.offset);
    const s = Math.sin(orbit.phi);
    camera.position.set(t.x + orbit.radius * s * Math.cos(orbit.theta), t.y + orbit.radius * s * Math.sin(orbit.theta),
      t.z + orbit.radius * Math.cos(orbit.phi));
    camera.lookAt(t);
    // the near plane follows the distance, so the depth buffer resolves the stacked panels'
    // lift (2e-4 of the scene) at any zoom: at 1e-3 of the scene it did not in WebKit
    camera.near = Math.max(0.02 * orbit.radius, size * 1e-5);
    camera.far = orbit.radius + 100 * size;
    camera.updateProjectionMatrix();
    sun.position.copy(camera.position).add(new THREE.Vector3(0, 0, size));
    sun.target.position.copy(t);
    sun.target.updateMatrixWorld();
  }

  const el = renderer.domElement;
  let drag = null;
  el.addEventListener("contextmenu", (e) => e.preventDefault());
  el.addEventListener("pointerdown", (e) => {
    drag = { x: e.clientX, y: e.clientY, pan: e.button === 2 || e.button === 1 || e.shiftKey };
    el.setPointerCapture(e.pointerId);
  });
  el.addEventListener("pointerup", () => { drag = null; });
  el.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    drag.x = e.clientX; drag.y = e.clientY;
    if (drag.pan) {
      const perPx = 2 * orbit.radius * Math.tan(camera.fov * Math.PI / 360) / el.clientHeight;
      const right = new THREE.Vector3().setFromMatrixColumn(camera.matrixWorld, 0);
      const up = new THREE.Vector3().setFromMatrixColumn(camera.matrixWorld, 1);
      orbit.offset.add(right.multiplyScalar(-dx * perPx)).add(up.multiplyScalar(dy * perPx));
    } else {
      orbit.theta -= dx * 0.008;
      orbit.phi = Math.min(Math.PI - 1e-3, Math.max(1e-3, orbit.phi - dy * 0.008));
    }
    dirty = true;
  });
  el.addEventListener("wheel", (e) => {
    e.preventDefault();
    orbit.radius = Math.min(size * 50, Math.max(size * 1e-2, orbit.radius * Math.exp(e.deltaY * 0.001)));
    dirty = true;
  }, { passive: false });

  // ------------------------------------------------------------------ colour by a quantity
  const VIRIDIS = [[0.267, 0.005, 0.329], [0.229, 0.322, 0.546], [0.128, 0.567, 0.551], [0.369, 0.789, 0.383], [0.993, 0.906, 0.144]];
  const DIVERGING = [[0.23, 0.3, 0.75], [0.55, 0.69, 0.99], [0.87, 0.87, 0.87], [0.96, 0.6, 0.48], [0.71, 0.02, 0.15]];
  function ramp(stops, u) {
    u = Math.min(1, Math.max(0, u)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(u)), a = u - i;
    return stops[i].map((c, k) => c * (1 - a) + stops[i + 1][k] * a);
  }
  const HUB = [0.3, 0.33, 0.4], PLAIN = [0.78, 0.8, 0.86], NODE = [0.25, 0.25, 0.3], WORLD = [0.55, 0.57, 0.62];
  let qi = quantities.length ? 0 : -1;
  let range = [0, 1];

  function fmt(x) {
    if (!isFinite(x)) return "n/a";
    const a = Math.abs(x);
    if (a === 0) return "0";
    if (a >= 1e4 || a < 1e-3) return x.toExponential(2);
    return String(parseFloat(x.toPrecision(3)));
  }

  function setQuantity(i) {
    qi = i;
    const sel = $("quantity");
    if (sel.value !== String(i)) sel.value = String(i);
    if (qi < 0) { $("legend").style.display = "none"; drawPlot(); dirty = true; return; }
    const q = quantities[qi];
    let mn = Infinity, mx = -Infinity;
    for (const v of q.data) if (isFinite(v)) { mn = Math.min(mn, v); mx = Math.max(mx, v); }
    if (!isFinite(mn)) { mn = 0; mx = 1; }
    if (q.signed) { const m = Math.max(Math.abs(mn), Math.abs(mx)) || 1; range = [-m, m]; }
    else range = [mn, mx > mn ? mx : mn + (Math.abs(mn) || 1)];
    $("legend").style.display = "";
    $("legend-name").textContent = `${q.name} [${q.unit}]`;
    $("legend-min").textContent = fmt(range[0]);
    $("legend-mid").textContent = fmt((range[0] + range[1]) / 2);
    $("legend-max").textContent = fmt(range[1]);
    const stops = (q.signed ? DIVERGING : VIRIDIS).map((c, k, all) =>
      `rgb(${c.map((x) => Math.round(x * 255)).join(",")}) ${(100 * k / (all.length - 1)).toFixed(0)}%`);
    $("legend-bar").style.background = `linear-gradient(to right, ${stops.join(",")})`;
    drawPlot();
    dirty = true;
  }

  function colourOf(v, q) {
    if (!isFinite(v)) return null;
    return ramp(q.signed ? DIVERGING : VIRIDIS, (v - range[0]) / (range[1] - range[0]));
  }

  // ------------------------------------------------------------------ the time plot
  const plot = $("plot");
  const pctx = plot.getContext("2d");
  function drawPlot() {
    const W = plot.width, H = plot.height;
    pctx.clearRect(0, 0, W, H);
    if (qi < 0) return;
    const q = quantities[qi];
    const x = (t) => 4 + (W - 8) * (t - T0) / Math.max(T1 - T0, 1e-12);
    const y = (v) => H - 14 - (H - 20) * (v - range[0]) / (range[1] - range[0]);
    pctx.strokeStyle = "#ddd"; pctx.beginPath(); pctx.moveTo(0, y(0)); pctx.lineTo(W, y(0)); pctx.stroke();
    const cols = [];
    for (let k = 0; k < q.n; k++) { let any = false; for (let f = 0; f < F; f++) if (isFinite(q.data[f * q.n + k])) { any = true; break; } if (any) cols.push(k); }
    const series = (get) => { pctx.beginPath(); let on = false; for (let f = 0; f < F; f++) { const v = get(f); if (!isFinite(v)) { on = false; continue; } if (on) pctx.lineTo(x(times[f]), y(v)); else pctx.moveTo(x(times[f]), y(v)); on = true; } pctx.stroke(); };
    if (cols.length <= 16) {
      cols.forEach((k, i) => { pctx.strokeStyle = `hsl(${(i * 47) % 360},60%,45%)`; series((f) => q.data[f * q.n + k]); });
    } else {
      const stat = (f, red) => { let r = null; for (const k of cols) { const v = q.data[f * q.n + k]; if (isFinite(v)) r = r === null ? v : red(r, v); } return r === null ? NaN : r; };
      pctx.strokeStyle = "#1f77b4"; series((f) => stat(f, Math.max));
      pctx.strokeStyle = "#ff7f0e"; series((f) => stat(f, Math.min));
    }
    pctx.fillStyle = "#333"; pctx.font = "10px sans-serif";
    pctx.fillText(cols.length <= 16 ? `${cols.length} series` : `max (blue), min (orange) of ${cols.length}`, 4, H - 3);
    const tx = x(current);
    pctx.strokeStyle = "#c00"; pctx.beginPath(); pctx.moveTo(tx, 0); pctx.lineTo(tx, H - 12); pctx.stroke();
  }
  plot.addEventListener("click", (e) => {
    const r = plot.getBoundingClientRect();
    setTime(T0 + (T1 - T0) * Math.min(1, Math.max(0, (e.clientX - r.left - 4) / (r.width - 8))));
  });

  // ------------------------------------------------------------------ one frame
  let current = T0;
  const bodyColor = new Float32Array(N * 3);
  function bend() {
    if (!flex.length) return;
    const [fi, a] = frameAt(current);
    const fj = Math.min(fi + 1, F - 1);
    for (const f of flex) {
      const K = f.nodes.length, n = f.n, eta = new Float64Array(n), p = new Float64Array(3 * K);
      for (let m = 0; m < n; m++) eta[m] = deflect * (f.eta[fi * n + m] * (1 - a) + f.eta[fj * n + m] * a);
      for (let k = 0; k < K; k++) for (let c = 0; c < 3; c++) {
        let v = f.nodes[k][c];
        const row = (3 * k + c) * n;
        for (let m = 0; m < n; m++) v += f.phi[row + m] * eta[m];
        p[3 * k + c] = v;
      }
      f.edges.forEach(([i, j], e) => {
        const o = 3 * (f.first + 2 * e);
        for (let c = 0; c < 3; c++) { segLocal[o + c] = p[3 * i + c]; segLocal[o + 3 + c] = p[3 * j + c]; }
      });
    }
  }

  function update() {
    bend();
    const pose = posesAt(current);
    for (let i = 0; i < nTri; i++) {
      const o = triBody[i] * 7;
      transform(pose, o, triLocal[3 * i], triLocal[3 * i + 1], triLocal[3 * i + 2], triWorld, 3 * i);
      rotateOnly(pose, o, triNrm[3 * i], triNrm[3 * i + 1], triNrm[3 * i + 2], triNWorld, 3 * i);
      const h = lift[triBody[i]];
      for (let k = 0; k < 3; k++) triWorld[3 * i + k] += h * triNWorld[3 * i + k];
    }
    for (let i = 0; i < nSeg; i++) transform(pose, segBody[i] * 7, segLocal[3 * i], segLocal[3 * i + 1], segLocal[3 * i + 2], segWorld, 3 * i);
    const q = qi >= 0 ? quantities[qi] : null;
    for (let b = 0; b < N; b++) {
      const role = DATA.geometry[b].role;
      let c = b === DATA.hub ? HUB : role === "node" || role === "bar" ? NODE : role === "world" ? WORLD : PLAIN;
      if (q && q.target === "bodies") { const v = colourOf(valueAt(q, current, b), q); if (v && b !== DATA.hub) c = v; }
      bodyColor.set(c, 3 * b);
    }
    for (let i = 0; i < nTri; i++) { const b = triBody[i]; triColor[3 * i] = bodyColor[3 * b]; triColor[3 * i + 1] = bodyColor[3 * b + 1]; triColor[3 * i + 2] = bodyColor[3 * b + 2]; }
    if (q && q.target === "links") {
      links.forEach((l, k) => {
        const c = colourOf(valueAt(q, current, k), q);
        if (c) for (const e of [0, 1]) segColor.set(c, 3 * (linkStart + 2 * k + e));
      });
    } else segColor.set(segBase.subarray(3 * linkStart), 3 * linkStart);
    triGeom.attributes.position.needsUpdate = triGeom.attributes.normal.needsUpdate = triGeom.attributes.color.needsUpdate = true;
    segGeom.attributes.position.needsUpdate = segGeom.attributes.color.needsUpdate = true;
    if (follow && DATA.hub !== null) orbit.target.set(pose[DATA.hub * 7], pose[DATA.hub * 7 + 1], pose[DATA.hub * 7 + 2]);
    $("time-readout").textContent = `t = ${current.toFixed(3)} s / ${T1.toFixed(3)} s`;
    $("slider").value = String(Math.round(1000 * (current - T0) / Math.max(T1 - T0, 1e-12)));
    drawPlot();
  }

  function resize() {
    const w = container.clientWidth, h = container.clientHeight;
    renderer.setSize(w, h, false);
    camera.aspect = w / Math.max(h, 1);
    camera.updateProjectionMatrix();
    dirty = true;
  }
  window.addEventListener("resize", resize);

  function scaleBar() {
    const perPx = 2 * orbit.radius * Math.tan(camera.fov * Math.PI / 360) / Math.max(el.clientHeight, 1);
    const L = nice(120 * perPx);
    $("scale-line").style.width = `${Math.round(L / perPx)}px`;
    $("scale-label").textContent = `${fmt(L)} m`;
  }

  // ------------------------------------------------------------------ resolution while moving
  // Drawing is fill-bound when many panels lie stacked (a 20x20 fold folded flat covers each
  // pixel hundreds of times), so while the picture moves (playing, orbiting) the page draws
  // fewer pixels until frames come at the target rate; at rest it draws one sharp frame.
  const motion = { budget: 1000 / 30, scale: 1, min: 0.25, interval: null, lastAt: null, since: 0, adaptive: true };
  function applyRatio(scale) {
    const r = FULL_RATIO * scale;
    if (renderer.getPixelRatio() === r) return;
    renderer.setPixelRatio(r);
    resize();
  }
  function pace(now, moving) {
    if (!moving || !motion.adaptive) {
      motion.lastAt = null; motion.interval = null;
      applyRatio(1);
      $("resolution").textContent = "";
      return;
    }
    applyRatio(motion.scale);
    if (motion.lastAt !== null) {
      const dt = now - motion.lastAt;
      motion.interval = motion.interval === null ? dt : 0.7 * motion.interval + 0.3 * dt;
      motion.since++;
      // the pixel count, hence the fill cost, goes with scale^2; adjust after the average settles
      if (motion.since >= 6 && (motion.interval > 1.35 * motion.budget || (motion.interval < 0.6 * motion.budget && motion.scale < 1))) {
        const s = motion.scale * Math.sqrt(motion.budget / motion.interval);
        motion.scale = Math.min(1, Math.max(motion.min, Math.round(s * 20) / 20));
        motion.since = 0; motion.interval = null;
      }
    }
    motion.lastAt = now;
    const pct = Math.round(100 * renderer.getPixelRatio() / FULL_RATIO);
    $("resolution").textContent = pct < 100 ? `drawn at ${pct} % resolution while moving` : "";
  }

  // ------------------------------------------------------------------ controls and loop
  let playing = false, speed = 1, last = null, frames = 0, fpsFrom = performance.now();
  const api = { ready: false, frames: F, t0: T0, t1: T1, renders: 0, fps: 0, time: () => current,
    resolution: () => renderer.getPixelRatio() / FULL_RATIO };
  function setTime(t) { current = Math.min(T1, Math.max(T0, t)); update(); dirty = true; }
  function setPlaying(p) { playing = p; last = null; $("play").textContent = p ? "Pause" : "Play"; }
  $("play").addEventListener("click", () => { if (!playing && current >= T1) setTime(T0); setPlaying(!playing); });
  $("speed").addEventListener("change", (e) => { speed = parseFloat(e.target.value); });
  $("slider").addEventListener("input", (e) => { setPlaying(false); setTime(T0 + (T1 - T0) * e.target.value / 1000); });
  $("follow").addEventListener("change", (e) => { follow = e.target.checked; orbit.offset.set(0, 0, 0); update(); dirty = true; });
  $("quantity").addEventListener("change", (e) => { setQuantity(parseInt(e.target.value, 10)); update(); });
  $("reset").addEventListener("click", () => { Object.assign(orbit, { target: home.target.clone(), radius: home.radius, theta: home.theta, phi: home.phi }); orbit.offset.set(0, 0, 0); follow = false; $("follow").checked = false; update(); dirty = true; });
  if (DATA.hub === null) $("follow-label").style.display = "none";
  if (!flex.length) $("deflect-label").style.display = "none";
  $("deflect").addEventListener("change", (e) => { deflect = parseFloat(e.target.value); update(); dirty = true; });
  quantities.forEach((q, i) => { const o = document.createElement("option"); o.value = String(i); o.textContent = q.name; $("quantity").appendChild(o); });
  const none = document.createElement("option"); none.value = "-1"; none.textContent = "none (plain)"; $("quantity").appendChild(none);

  window.addEventListener("keydown", (e) => {
    const tag = e.target.tagName;
    if (tag === "SELECT" || tag === "BUTTON" || (tag === "INPUT" && e.target.type !== "range")) return;
    if (e.key === " ") { e.preventDefault(); $("play").click(); }
    else if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      e.preventDefault();
      setPlaying(false);
      const [i, a] = frameAt(current);
      const j = e.key === "ArrowRight" ? Math.min(F - 1, i + 1) : (a > 0 ? i : Math.max(0, i - 1));
      setTime(times[j]);
    } else if (e.key === "Home") setTime(T0);
    else if (e.key === "End") setTime(T1);
  });

  function loop(now) {
    if (playing) {
      if (last !== null) {
        current += (now - last) / 1000 * speed;
        if (current >= T1) { current = T1; setPlaying(false); }
        update();
      }
      last = now;
      dirty = true;
    }
    const moving = playing || drag !== null;
    const sharpen = !moving && renderer.getPixelRatio() !== FULL_RATIO;
    // frame intervals count only between frames drawn back to back (a drag may pause)
    if (!dirty && !sharpen) motion.lastAt = null;
    else {
      pace(now, moving);
      placeCamera();
      renderer.render(scene, camera);
      scaleBar();
      dirty = false;
      api.renders++;
      frames++;
      if (!api.ready) { api.ready = true; document.body.dataset.ready = "1"; }
    }
    if (now - fpsFrom >= 1000) { api.fps = frames * 1000 / (now - fpsFrom); frames = 0; fpsFrom = now; }
    requestAnimationFrame(loop);
  }

  Object.assign(api, { setTime, setQuantity: (i) => { setQuantity(i); update(); }, play: () => setPlaying(true),
    pause: () => setPlaying(false), setSpeed: (s) => { speed = s; $("speed").value = String(s); },
    setFollow: (f) => { follow = f; $("follow").checked = f; update(); dirty = true; },
    setFrameBudget: (ms) => { motion.budget = ms; }, setAdaptive: (on) => { motion.adaptive = on; motion.scale = 1; } });
  window.diffmbViewer = api;

  $("title").textContent = DATA.title;
  document.title = `${DATA.title} - diffmb view`;
  const info = Object.entries(DATA.info || {}).map(([k, v]) => `${k}: ${v}`).join("; ");
  $("info").textContent = `${N} bodies, ${F} frames, t = ${fmt(T0)} to ${fmt(T1)} s` + (info ? `; ${info}` : "");
  $("notes").textContent = (DATA.notes || []).join(" ");
  resize();
  setQuantity(qi);
  update();
  requestAnimationFrame(loop);
})();
