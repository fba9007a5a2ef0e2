// The demo page: wires the DOM to SplitClient. All inference logic lives in split-client.js.
import { SplitClient } from "./split-client.js";

const $ = (id) => document.getElementById(id);
let client = null;
let image = null; // { bytes: Uint8Array, name }

function showError(e) {
  $("error").hidden = false;
  $("error").textContent = `${e.code ? `[${e.code}] ` : ""}${e.message ?? e}`;
  document.body.dataset.state = client ? "ready" : "failed";
}

function setImage(bytes, name) {
  image = { bytes, name };
  const url = URL.createObjectURL(new Blob([bytes]));
  $("preview").src = url;
  $("classify").disabled = !client;
  document.body.dataset.image = name;
}

async function loadSample(name) {
  const response = await fetch(`samples/${name}.png`);
  setImage(new Uint8Array(await response.arrayBuffer()), name);
}

async function loadFile(file) {
  if (!/^image\/(jpeg|png)$/.test(file.type)) {
    showError(new Error(`${file.name} is ${file.type || "of unknown type"}; choose a JPEG or PNG`));
    return;
  }
  setImage(new Uint8Array(await file.arrayBuffer()), file.name);
}

function fillSplits() {
  const select = $("split");
  const add = (value, label) => select.add(new Option(label, value));
  add("edge", "edge only (everything in the browser)");
  add("cloud", "cloud only (upload the image)");
  for (const b of SplitClient.boundaries()) {
    if (b.name === "logits") continue;
    const kb = (b.bytesF32 / 1024).toFixed(0);
    add(b.name, `after ${b.name} — send [${b.shape.join("×")}] f32, ${kb} KiB; ${(b.cumulativeMacs / 1e6).toFixed(0)}M MACs on the edge`);
  }
  select.value = "block5";
}

const ms = (x) => `${x.toFixed(1)} ms`;

async function classify() {
  if (!image) return;
  $("error").hidden = true;
  $("classify").disabled = true;
  document.body.dataset.state = "busy";
  try {
    const r = await client.classify(image.bytes, $("split").value);
    $("top").replaceChildren(...r.top.map((p) => {
      const li = document.createElement("li");
      li.textContent = `${p.name} (${p.class}) — ${(p.prob * 100).toFixed(1)}%`;
      return li;
    }));
    $("r-mode").textContent = r.mode === "split" ? `split after ${r.split}` : `${r.mode} only`;
    $("r-backend").textContent = r.backend;
    $("r-edge").textContent = ms(r.edgeMs);
    $("r-bytes").textContent = r.bytesSent.toLocaleString();
    $("r-server").textContent = ms(r.serverMs);
    $("r-rtt").textContent = ms(r.roundTripMs);
    $("r-total").textContent = ms(r.totalMs);
    $("result").hidden = false;
    $("result").dataset.top1 = r.top[0].class;
    $("result").dataset.result = JSON.stringify(r);
    document.body.dataset.state = "ready";
  } catch (e) {
    showError(e);
  } finally {
    $("classify").disabled = false;
  }
}

async function main() {
  const backend = new URLSearchParams(location.search).get("backend") ?? "auto";
  const labels = { wasm: "Loading the wasm module…", weights: "Downloading weights", "warm-up": "Compiling and warming up the model…", ready: "Ready" };
  client = await SplitClient.create({
    backend,
    onProgress: (p) => {
      const pct = p.fraction == null || p.stage === "ready" ? "" : ` ${(p.fraction * 100).toFixed(0)}%`;
      $("status-text").textContent = (labels[p.stage] ?? "Ready") + pct;
      if (p.fraction == null) $("progress").removeAttribute("value");
      else $("progress").value = p.fraction;
    },
  });
  $("backend").textContent = client.backend;
  document.body.dataset.backend = client.backend;
  $("classify").disabled = !image;
  document.body.dataset.state = "ready";
}

start();
async function start() {
  $("samples").addEventListener("click", (e) => e.target.dataset.sample && loadSample(e.target.dataset.sample).catch(showError));
  $("file").addEventListener("change", (e) => e.target.files[0] && loadFile(e.target.files[0]));
  const zone = $("dropzone");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer.files[0]) loadFile(e.dataTransfer.files[0]);
  });
  $("classify").addEventListener("click", classify);
  try {
    await main();
    fillSplits();
  } catch (e) {
    showError(e);
  }
}
