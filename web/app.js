// The demo page: wires the DOM to SplitClient. All inference logic lives in split-client.js.
import { LiveCamera } from "./camera.js";
import { setupDevices } from "./devices.js";
import { showSeen } from "./seen.js";
import { SplitClient } from "./split-client.js";

const $ = (id) => document.getElementById(id);
let client = null;
let image = null; // { bytes: Uint8Array, name }

/** Take the last answer out of view: it belongs to another image or came before an error. */
function clearResult() {
  $("result").hidden = true;
  $("top").replaceChildren();
  $("quality").hidden = true;
  shownId = null;
  delete $("result").dataset.result;
  delete $("result").dataset.top1;
  delete $("result").dataset.quality;
  delete $("result").dataset.version;
}

/** The result on screen: its id and version (updates of other results go to the outage list,
 * and an older version never replaces a newer one). */
let shownId = null;
let shownVersion = 0;

function showTop(top) {
  $("top").replaceChildren(...top.map((p) => {
    const li = document.createElement("li");
    li.textContent = `${p.name} (${p.class}) — ${(p.prob * 100).toFixed(1)}%`;
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${(p.prob * 100).toFixed(1)}%`;
    li.append(bar);
    return li;
  }));
  $("result").dataset.top1 = top[0].class;
}

/** Say which model answered: the full one, or the light one and what happens next. */
function showQuality(r) {
  const q = $("quality");
  q.hidden = false;
  q.className = r.quality;
  if (r.quality === "full") {
    q.textContent = r.version > 1
      ? `The server's full answer${r.changed ? `, which changed the top-1 from ${r.previousTop[0].name}` : " (same top-1 as the light model's)"}.`
      : "Full model.";
  } else {
    const next = r.partial ? "the server's answer replaces it when it arrives"
      : r.resumable ? "its features wait in this browser and the server's answer replaces it when the link is back"
      : r.error ? `the server refused to finish it (${r.error.code})` : "the server will not see it";
    const size = r.inputSize && r.inputSize < 224 ? ` on a ${r.inputSize}×${r.inputSize} copy of the photo` : "";
    q.textContent = `Reduced: the ${r.model ?? "light"} light model answered on this device${size}; ${next}.`;
  }
  $("result").dataset.quality = r.quality;
  $("result").dataset.version = String(r.version);
}

/** A newer version of a result: the light model's first answer, or the server's final one. */
function onUpdate(u) {
  // Kept for the browser tests and the console, like `window.splitClient`, with when it came.
  (window.splitUpdates ??= []).push({ ...u, receivedAtMs: performance.now() });
  if (u.id === shownId && u.version > shownVersion) {
    shownVersion = u.version;
    showTop(u.top);
    showQuality(u);
    $("result").hidden = false;
  }
  if (u.final && u.waitedMs != null) {
    // Finished after an outage (or after a reload): listed with both answers.
    const li = document.createElement("li");
    const before = u.previousTop[0].name;
    const after = u.top[0].name;
    li.textContent = `${u.label ?? "a photo"}: ${before} (light model) → ${after} (server), after ${(u.waitedMs / 1000).toFixed(1)} s`;
    li.className = u.changed ? "changed" : "";
    li.dataset.id = u.id;
    $("resumed-list").prepend(li);
    $("resumed").hidden = false;
    $("resumed").dataset.count = String($("resumed-list").children.length);
  }
  showBacklog().catch(() => {});
}

/** How many answers wait for the server. */
async function showBacklog() {
  const b = await client.backlogState();
  $("backlog").textContent = b.entries
    ? `${b.entries} answer(s) waiting for the server (${(b.bytes / 1024).toFixed(1)} KiB of features${b.persistent ? ", kept across reloads" : ""}).`
    : "Nothing waits for the server.";
  document.body.dataset.backlog = String(b.entries);
  if (b.entries) $("resumed").hidden = false;
}

function showError(e) {
  clearResult();
  $("error").hidden = false;
  $("error").textContent = `${e.code ? `[${e.code}] ` : ""}${e.message ?? e}`;
  // Beside the controls, and scrolled to: an error below the fold goes unseen.
  $("error").scrollIntoView({ block: "nearest" });
  document.body.dataset.state = client ? "ready" : "failed";
}

function setImage(bytes, name) {
  image = { bytes, name };
  clearResult();
  $("error").hidden = true;
  const url = URL.createObjectURL(new Blob([bytes]));
  $("note").hidden = true;
  // The model sees 224×224: a much smaller photo is enlarged first, and answers get worse.
  $("preview").onload = () => {
    const { naturalWidth: w, naturalHeight: h } = $("preview");
    $("note").hidden = Math.min(w, h) >= 112;
    $("note").textContent = `This photo is ${w}×${h} pixels; the model looks at 224×224, so expect a rougher answer.`;
  };
  $("preview").src = url;
  $("preview").alt = `the photo to classify: ${name}`;
  $("classify").disabled = !client;
  document.body.dataset.image = name;
  if (client) drawNetwork();
}

function clearImage() {
  image = null;
  $("preview").removeAttribute("src");
  $("preview").alt = "";
  $("note").hidden = true;
  $("classify").disabled = true;
  delete document.body.dataset.image;
  $("seen").hidden = true;
}

async function loadSample(name) {
  // Started offline, the page has only the samples it showed before: say so, not "Failed to fetch".
  const response = await fetch(`samples/${name}.png`).catch(() => {
    throw new Error("the sample photos come from the server, which is out of reach now; choose a photo of your own");
  });
  if (!response.ok) throw new Error(`the sample ${name} could not be loaded (${response.status})`);
  setImage(new Uint8Array(await response.arrayBuffer()), name);
}

async function loadFile(file) {
  if (!/^image\/(jpeg|png|webp|avif|gif)$/.test(file.type)) {
    // The refused file must not leave the previous one selected as if it were it.
    clearImage();
    showError(new Error(`${file.name} is ${file.type || "of unknown type"}; choose a JPEG, PNG, WebP or AVIF photo`));
    return;
  }
  setImage(new Uint8Array(await file.arrayBuffer()), file.name);
}

/** Whether the server offers the encrypted classifier and this build has its wasm half
 * (the relaxed-SIMD builds only: wasm-edge's `encrypted` feature, wasm_build.rs). */
function encryptedHere() {
  return Boolean(client.info.encrypted) && ["cpu-relaxed", "cpu-threads"].includes(client.wasmBuild);
}

function fillSplits() {
  const select = $("split");
  const add = (value, label) => select.add(new Option(label, value));
  if (client.hasPlanner) add("auto", "auto — adaptive (planner picks split and codec)");
  add("edge", "edge only (everything in the browser)");
  add("cloud", "cloud only (upload the image)");
  if (encryptedHere()) {
    add("encrypted", "encrypted classifier — the server computes on ciphertext only");
  }
  for (const b of client.boundaries()) {
    if (b.name === "logits") continue;
    const kb = (b.bytesF32 / 1024).toFixed(0);
    add(b.name, `after ${b.name} — send [${b.shape.join("×")}] f32, ${kb} KiB; ${(b.cumulativeMacs / 1e6).toFixed(0)}M MACs on the edge`);
  }
  select.value = client.hasPlanner ? "auto" : "block11";
}

// The network as a bar of its stages with the cut drawn: what runs here, what on the server,
// and what crosses the network at the cut.
function drawNetwork() {
  const bounds = client.boundaries();
  const split = $("split").value;
  const placement = split === "auto" ? lastAuto?.placement : null;
  const encrypted = split === "encrypted" || placement?.mode === "encrypted";
  const cutName = split === "edge" ? "logits" : split === "cloud" ? "input" : split === "encrypted" ? "pool"
    : split === "auto" ? (placement ? { edge_only: "logits", cloud_only: "input" }[placement.mode] ?? placement.boundary : null)
    : split;
  const cut = cutName ? bounds.findIndex((b) => b.name === cutName) : -1;
  const total = bounds.at(-1).cumulativeMacs;
  const stages = bounds.slice(1).map((b, i) => {
    const el = document.createElement("span");
    const macs = b.cumulativeMacs - bounds[i].cumulativeMacs;
    el.className = `stage ${cut >= 0 && i + 1 <= cut ? "edge" : "cloud"}${i + 1 === cut ? " cut" : ""}`;
    el.style.flexGrow = String(Math.max(macs, total / 400));
    el.title = `${bounds[i].name} → ${b.name}: ${(macs / 1e6).toFixed(1)}M MACs, output [${b.shape.join("×")}]`;
    return el;
  });
  $("network").replaceChildren(...stages);
  const mmacs = (n) => `${(n / 1e6).toFixed(0)}M MACs`;
  let caption;
  if (cut < 0) {
    caption = "auto: the planner picks the cut for each request (classify to see its choice)";
  } else {
    const b = bounds[cut];
    const here = `this browser: ${mmacs(b.cumulativeMacs)}`;
    const there = `server: ${mmacs(total - b.cumulativeMacs)}`;
    const sent = encrypted ? "sends the pooled features encrypted (670 kB; the key, 335 kB, once): the server computes the classifier without reading them or the answer"
      : cutName === "logits" ? "nothing sent"
      : cutName === "input" ? "sends the photo"
      : `sends [${b.shape.join("×")}] at ${b.name}: ${(b.bytesF32 / 1024).toFixed(0)} KiB as f32, less with the codec`;
    caption = `${split === "auto" ? "auto chose: " : ""}${here} · ${sent} · ${there}`;
  }
  $("network-caption").textContent = caption;
  // An illustration: when it cannot be fetched (the server out of reach), it is left out
  // rather than shown as an error over the answer.
  // Encrypted features show the server nothing to reconstruct from.
  const seenAt = encrypted ? "encrypted" : cut < 0 ? null : bounds[cut].name;
  showSeen($("seen"), image?.name, seenAt).catch(() => { $("seen").hidden = true; });
  $("network").setAttribute("aria-label", caption);
  $("network-figure").hidden = false;
}

// One request's time: edge compute (encoding included; auto's cloud-only makes its upload), the
// network both ways, the server.
function drawWaterfall(r) {
  const network = Math.max(0, r.roundTripMs - r.serverMs);
  const parts = (r.mode === "encrypted"
    // The encrypted answer carries no server time: the round trip is network and server.
    ? [["edge", r.edgeMs, "edge compute"], ["edge", r.encryptMs, "encryption"],
       ["network", r.roundTripMs, "network and server on ciphertext"], ["edge", r.decryptMs, "decryption"]]
    : [["edge", r.uploadPrepMs ?? 0, "making the upload"], ["edge", r.edgeMs, "edge compute"],
       ["network", network, "network"], ["server", r.serverMs, "server"]])
    .filter(([, ms]) => ms > 0.05);
  const total = parts.reduce((t, [, ms]) => t + ms, 0) || 1;
  $("waterfall").replaceChildren(...parts.map(([kind, ms, label]) => {
    const el = document.createElement("span");
    el.className = kind;
    el.style.flexGrow = String(ms / total);
    el.title = `${label}: ${ms.toFixed(1)} ms`;
    return el;
  }));
  const legend = parts.map(([, ms, label]) => `${label} ${ms.toFixed(1)} ms`).join(" · ");
  $("waterfall-legend").textContent = `${legend} (total ${r.totalMs.toFixed(1)} ms)`;
  $("waterfall").setAttribute("aria-label", $("waterfall-legend").textContent);
}

// The planner panel: refreshed every second from the client's `explain()` (a plain object,
// from the worker the client runs in).
const history = [];
async function drawPlanner() {
  if (!client?.hasPlanner) return;
  const x = await client.explain();
  const f = x.forecast;
  $("planner").hidden = false;
  const name = (p) => !p ? "—" : p.mode === "split" ? `split after ${p.boundary}, ${p.codec}`
    : p.mode === "encrypted" ? `encrypted after ${p.boundary}` : p.mode.replace("_", " ");
  // A value that is not a finite number (the server down, nothing measured) shows as a dash, and
  // a default the planner starts from is not presented as a measurement.
  const num = (v, digits = 0) => Number.isFinite(v) ? v.toFixed(digits) : "—";
  const seen = f.measured ?? {};
  const guess = (known, text) => known ? text : `${text} (default, not measured yet)`;
  const mbit = (v) => num(v * 8 / 1000, 1);
  $("p-current").textContent = name(x.current);
  $("p-rtt").textContent = guess(seen.rtt, `${num(f.now.rttMs)} → ${num(f.predicted.rttMs)} ms`) + (f.linkUp ? "" : " (link down)");
  $("p-uplink").textContent = guess(seen.uplink, `${mbit(f.now.uplinkBytesPerMs)} → ${mbit(f.predicted.uplinkBytesPerMs)} Mbit/s`);
  $("p-queue").textContent = guess(seen.queue, `${num(f.now.queueMs)} ms`);
  $("p-edge").textContent = guess(seen.edgeFactor, `${num(f.now.edgeFactor, 2)}×`);
  if (x.predicted) {
    const measured = lastAuto ? `${num(lastAuto.totalMs)} ms` : "not measured yet";
    $("p-latency").textContent = `${num(x.predicted.totalMs)} ms / ${measured}`;
  }
  $("p-refused").hidden = !x.refused;
  $("p-refused").textContent = x.refused ?? "";
  $("p-ranked").tBodies[0].replaceChildren(...x.ranked.slice(0, 6).map((e) => {
    const tr = document.createElement("tr");
    const cells = [name(e.placement), num(e.totalMs), num(e.computeMj + e.radioMj), num(e.bytes / 1000, 1), num(e.serverCost), num(e.score, 1)];
    for (const text of cells) tr.insertCell().textContent = text;
    return tr;
  }));
  $("p-switches").replaceChildren(...x.switches.slice(-8).map((s) => {
    const li = document.createElement("li");
    li.textContent = `${(s.atMs / 1000).toFixed(1)} s: ${name(s.from)} → ${name(s.to.placement)} (${s.reason})`;
    return li;
  }));
  // Only measured values go on the chart (one point a second, the last minute).
  history.push([seen.rtt ? f.now.rttMs : NaN, seen.uplink ? f.now.uplinkBytesPerMs * 8 / 1000 : NaN]);
  if (history.length > 60) history.shift();
  const top = (i) => Math.max(...history.map((h) => h[i]).filter(Number.isFinite), 1e-9);
  const line = (i, color) => {
    const max = top(i);
    const pts = history.map((h, k) => Number.isFinite(h[i]) ? `${30 + k * 4},${(70 - 56 * h[i] / max).toFixed(1)}` : null)
      .filter(Boolean).join(" ");
    return `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${pts}"/>`;
  };
  // Axes: time along the bottom (the last 60 s), each series scaled to its own maximum.
  $("p-chart").innerHTML = line(0, "#c0392b") + line(1, "#2471a3") +
    `<line x1="30" y1="70" x2="270" y2="70" stroke="#999"/><line x1="30" y1="14" x2="30" y2="70" stroke="#999"/>` +
    `<text x="30" y="79" font-size="7" fill="#555">−60 s</text><text x="258" y="79" font-size="7" fill="#555">now</text>` +
    (history.some((h) => h.some(Number.isFinite))
      ? `<text x="34" y="10" font-size="7" fill="#c0392b">RTT (top ${num(top(0))} ms)</text>` +
        `<text x="150" y="10" font-size="7" fill="#2471a3">uplink (top ${num(top(1), 1)} Mbit/s)</text>`
      : `<text x="34" y="10" font-size="7" fill="#555">no measurements yet: choose auto, or wait for a ping</text>`);
}
let lastAuto = null;
/** Show the light model's answer at once while the server computes (`?progressive=0`: off). */
let progressive = true;

// Codec settings offered in the menu; the server's default is preselected.
const CODECS = {
  f32: "f32 — uncompressed",
  q8: "q8 — 8 bits/value + rANS",
  q6: "q6 — 6 bits/value + rANS",
  q4: "q4 — 4 bits/value + rANS",
  q3: "q3 — 3 bits/value + rANS",
  q2: "q2 — 2 bits/value + rANS",
  "q4-packed": "q4-packed — 4 bits/value, no entropy coding",
  "q2-r16": "q2-r16 — 16 principal components, 2 bits + rANS",
  s14: "s14 — steps by sensitivity + context coding",
  s12: "s12 — a little coarser than s14",
  s10: "s10 — coarser still",
  s8: "s8 — the coarsest offered, fewest bytes",
  learned4: "learned4 — trained bottleneck, 48 codes at 4 bits (block5 only)",
  learned3: "learned3 — trained bottleneck, 48 codes at 3 bits (block5 only)",
};

function fillCodecs() {
  const select = $("codec");
  const calibrated = Boolean(client.info.calibration);
  for (const [value, label] of Object.entries(CODECS)) {
    if (value === "f32" || calibrated) select.add(new Option(label, value));
  }
  if (!Object.hasOwn(CODECS, client.defaultCodec)) select.add(new Option(client.defaultCodec, client.defaultCodec));
  select.value = client.defaultCodec;
}

const ms = (x) => `${x.toFixed(1)} ms`;

async function classify() {
  if (!image) return;
  $("error").hidden = true;
  $("classify").disabled = true;
  $("busy").hidden = false;
  $("status-text").textContent = "Classifying…";
  document.body.dataset.state = "busy";
  try {
    // The light model's answer may come first (progressive, through onUpdate); this id
    // tells its updates from others'.
    shownId = crypto.randomUUID();
    shownVersion = 0;
    const id = shownId;
    const r = await client.classify(image.bytes, $("split").value,
      { codec: $("codec").value, id, progressive, label: image.name });
    if (shownId !== id) return; // another image was picked meanwhile
    if (r.version >= shownVersion) {
      shownVersion = r.version;
      showTop(r.top);
      showQuality(r);
    }
    const modes = { split: `split after ${r.split}`, cache: "answered from the browser's cache", edge: "edge only", cloud: "cloud only",
                    encrypted: "encrypted classifier: the server saw only ciphertext" };
    $("r-mode").textContent = (r.auto ? "auto: " : "") + (modes[r.mode] ?? r.mode) + (r.fallback ? ` (fallback: ${r.fallback})` : "");
    if (r.auto) lastAuto = r;
    drawPlanner().catch(() => {});
    drawNetwork();
    drawWaterfall(r);
    $("r-codec").textContent = r.mode === "split" ? r.codec : r.mode === "cloud" ? "image upload"
      : r.mode === "encrypted" ? `BFV ciphertexts (${ms(r.encryptMs)} to encrypt, ${ms(r.decryptMs)} to decrypt)` : "—";
    $("r-load").textContent = r.load ? `${r.load.queued} queued, ${r.load.workers} worker(s), ${ms(r.load.recentMs)} recent compute${r.serverCached ? "; served from cache" : ""}` : "—";
    $("r-backend").textContent = r.backend;
    $("r-edge").textContent = ms(r.edgeMs);
    $("r-bytes").textContent = r.bytesSent.toLocaleString();
    $("r-server").textContent = Number.isNaN(r.serverMs) ? "not reported (in the round trip)" : ms(r.serverMs);
    $("r-rtt").textContent = ms(r.roundTripMs);
    $("r-total").textContent = ms(r.totalMs);
    $("result").hidden = false;
    $("result").dataset.result = JSON.stringify(r);
    if (r.quality === "reduced") showBacklog().catch(() => {});
    document.body.dataset.state = "ready";
  } catch (e) {
    showError(e);
  } finally {
    $("classify").disabled = !image;
    $("busy").hidden = true;
    showWeights().catch(() => {});
    $("status-text").textContent = "Ready";
  }
}

// The live camera: frames classified continuously with the chosen split and codec.
let camera = null;
async function toggleCamera() {
  if (camera) {
    camera.stop();
    camera = null;
    $("camera").setAttribute("aria-pressed", "false");
    $("camera").textContent = "Camera";
    $("live").hidden = true;
    return;
  }
  $("error").hidden = true;
  const live = $("live");
  camera = new LiveCamera(client, $("video"), () => ({ split: $("split").value, codec: $("codec").value }), (r, stats) => {
    if (stats.error) {
      showError(stats.error);
      return toggleCamera();
    }
    const top = r.top[0];
    $("live-top").textContent = `${top.name} (${top.class}) — ${(top.prob * 100).toFixed(1)}%`;
    $("live-stats").textContent = `${stats.frames} frames, ${stats.fps.toFixed(1)} frames/s, `
      + `${(stats.bytesPerSecond / 1024).toFixed(1)} KiB/s sent (last frame ${stats.lastBytes.toLocaleString()} bytes, ${r.mode})`;
    live.dataset.frames = String(stats.frames);
    live.dataset.top1 = String(top.class);
    live.dataset.lastBytes = String(stats.lastBytes);
  });
  try {
    live.hidden = false;
    await camera.start();
    $("camera").setAttribute("aria-pressed", "true");
    $("camera").textContent = "Stop camera";
  } catch (e) {
    camera = null;
    live.hidden = true;
    showError(e);
  }
}

/** How much of the model this browser holds, beside the backend. */
async function showWeights() {
  const w = await client.weightsState();
  const mb = (n) => (n / 1e6).toFixed(1);
  $("weights").textContent = (w.through === "logits" ? `all (${mb(w.total)} MB)`
    : w.through === "input" ? "none yet" : `up to ${w.through} (${mb(w.bytes)} of ${mb(w.total)} MB)`)
    + (w.light ? `; the rest as the ${w.light} light model (${mb(w.lightBytes)} MB) for outages` : "");
  document.body.dataset.weights = w.through;
}

/** The WebSocket's state beside the backend (it opens on the first request that needs it). */
function showConnection(c) {
  const text = {
    idle: "not connected yet",
    connecting: "connecting…",
    open: "connected",
    reconnecting: "restarting; reconnecting…",
    // Attempts are made on demand (the next request, after a backoff), not on a timer.
    unreachable: "unreachable (retried later); this device answers",
    closed: `disconnected${c.code ? ` (${c.code}${c.reason ? `: ${c.reason}` : ""})` : ""}`,
  }[c.state] ?? c.state;
  $("connection").textContent = text;
  document.body.dataset.connection = c.state;
}

/** Whether a reload without the server would start (`capabilities.offline`), and why not;
 * `asked`: whether this page asked for it. */
function showOffline(o, asked) {
  $("offline").textContent = o.available ? "ready" : asked ? "not yet" : "off";
  $("offline").title = o.available ? `This page starts without the server: ${o.files} files of site ${o.site} are kept.` : o.reason;
  document.body.dataset.offline = o.available ? "ready" : "off";
}

async function main() {
  const params = new URLSearchParams(location.search);
  const backend = params.get("backend") ?? "auto";
  const wasmBuild = params.get("wasm") ?? undefined; // a build's name (client/wasm.js): benchmarks
  // The client runs in a Web Worker; `?worker=0` keeps it on the page's thread (to compare).
  const worker = params.has("worker") ? params.get("worker") !== "0" : undefined;
  // A server started with --token: open the page as …/#token=TOKEN (the fragment never
  // reaches the server's logs).
  const token = new URLSearchParams(location.hash.slice(1)).get("token") ?? undefined;
  // Which weights to download before the page is ready: the stages up to block5 by default
  // (2% of them); deeper ones come when a split needs them. `?weights=all` loads everything.
  const weights = params.get("weights") ?? "block5";
  progressive = params.get("progressive") !== "0";
  // `?max_edge_mb=1`: auto never places more than 1 MB of weights on this device (a phone short
  // of storage; the light model for outages does not count).
  const maxEdgeMb = Number(params.get("max_edge_mb"));
  // `?privacy_floor=block5`: no features before block5, and never the photo, leave this device;
  // `?privacy_floor=default`: the measured floor (docs/privacy.md).
  const floor = params.get("privacy_floor");
  const constraints = maxEdgeMb > 0 || floor
    ? { ...(maxEdgeMb > 0 ? { maxEdgeParamBytes: Math.round(maxEdgeMb * 1e6) } : {}), ...(floor ? { privacyFloor: floor } : {}) }
    : undefined;
  // `?light_input=128`: the light model's answers (outages, progressive first answers) run on
  // a 128×128 copy of the photo: a third of the compute, and they agree with the full model
  // less often (docs/training.md).
  const lightInput = params.has("light_input") ? Number(params.get("light_input")) : undefined;
  // The page starts again without the server (a service worker keeps its files: sw.js);
  // `?offline=0` leaves it out.
  const offline = params.get("offline") !== "0";
  const labels = { wasm: "Loading the wasm module…", weights: "Downloading weights", "light-weights": "Downloading the light model", calibration: "Downloading the codec calibration", profiling: "Timing this device for the planner…", "warm-up": "Compiling and warming up the model…", link: "Measuring the link to the server…", ready: "Ready" };
  client = await SplitClient.create({
    backend,
    wasmBuild,
    offline,
    worker,
    token,
    onConnection: showConnection,
    onUpdate,
    constraints,
    weights,
    lightInput,
    onProgress: (p) => {
      const mb = (n) => (n / 1e6).toFixed(1);
      // After start-up, downloads are the stages a request (or auto mode, in the background)
      // needs: shown while they run, then the page's own state again.
      const state = document.body.dataset.state;
      const started = state === "ready" || state === "busy";
      const done = p.stage === "ready" || (started && p.fraction === 1);
      const pct = p.fraction == null || done ? ""
        : p.cached ? " (from this browser's cache)"
        : ` ${(p.fraction * 100).toFixed(0)}%${p.total ? ` of ${mb(p.total)} MB` : ""}`;
      $("status-text").textContent = done && started ? (state === "busy" ? "Classifying…" : "Ready")
        : (labels[p.stage] ?? "Ready") + pct;
      if (p.fraction == null) $("progress").removeAttribute("value");
      else $("progress").value = p.fraction;
      if (done && started) showWeights();
    },
  });
  // Exposed for the browser tests and for experimenting from the console.
  window.splitClient = client;
  showOffline(client.capabilities.offline, offline);
  client.offlineReady?.then((o) => showOffline(o, offline));
  $("backend").textContent = (client.backend === "cpu" ? `cpu (${client.wasmBuild} wasm)` : client.backend)
    + (client.inWorker ? ", in a worker" : ", on the page's thread");
  document.body.dataset.backend = client.backend;
  document.body.dataset.wasmBuild = client.wasmBuild;
  document.body.dataset.worker = String(client.inWorker);
  await showWeights();
  await showBacklog();
  $("classify").disabled = !image;
  $("camera").disabled = false;
  document.body.dataset.state = "ready";
}

start();
async function start() {
  $("samples").addEventListener("click", (e) => e.target.dataset.sample && loadSample(e.target.dataset.sample).catch(showError));
  $("file").addEventListener("change", (e) => e.target.files[0] && loadFile(e.target.files[0]));
  const zone = $("dropzone");
  // Keyboard and pointer both reach the file chooser: the drop zone takes Enter and Space, the
  // link inside it is a real button.
  const choose = () => $("file").click();
  $("choose").addEventListener("click", (e) => { e.stopPropagation(); choose(); });
  zone.addEventListener("keydown", (e) => {
    if (e.target === zone && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); choose(); }
  });
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer.files[0]) loadFile(e.dataTransfer.files[0]);
  });
  $("classify").addEventListener("click", classify);
  $("camera").addEventListener("click", () => toggleCamera().catch(showError));
  try {
    await main();
    fillSplits();
    fillCodecs();
    drawNetwork();
    $("split").addEventListener("change", drawNetwork);
    setupDevices(client, () => image?.bytes ?? null, showError);
    if (client.hasPlanner) {
      // The goal, the radio it is priced for and the real-time class with its deadline (the
      // class's own when the field is empty): the next re-plan uses them.
      const realtime = () => {
        const cls = $("p-realtime").value;
        const ms = Number($("p-deadline").value);
        if (cls === "none") return null;
        return ms > 0 ? { class: cls, deadlineMs: ms } : { class: cls };
      };
      const goal = () => client.setObjective({ mode: $("p-mode").value, radio: $("p-radio").value, realtime: realtime() })
        .then(() => drawPlanner()).catch(showError);
      for (const id of ["p-mode", "p-radio", "p-realtime", "p-deadline"]) $(id).addEventListener("change", goal);
      // Encrypted only: auto then weighs the encrypted classifier against running it all here.
      $("p-encrypted-label").hidden = !encryptedHere();
      $("p-encrypted").addEventListener("change", () => client.setEncrypted($("p-encrypted").checked)
        .then(() => drawPlanner()).catch((e) => { $("p-encrypted").checked = false; showError(e); }));
      // One refresh at a time: a worker busy with an edge run answers late.
      let drawing = false;
      setInterval(() => {
        if (drawing) return;
        drawing = true;
        drawPlanner().catch(() => {}).finally(() => { drawing = false; });
      }, 1000);
    }
  } catch (e) {
    showError(e);
  }
}
