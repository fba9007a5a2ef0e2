// SplitClient: the embeddable API of split inference in the browser.
//
//   import { SplitClient } from "./split-client.js";
//   const client = await SplitClient.create({ onProgress: (p) => console.log(p.stage, p.fraction) });
//   const result = await client.classify(fileBytes, "block5");   // or "edge", "cloud", any boundary
//   result.top[0].name  // "tiger cat"
//   await client.classify(frameBytes, "block8", { codec: "q2-r16", stream: true });  // camera frames
//
// Features are compressed with the server's default codec (from /api/info) unless `codec` says
// otherwise ("f32" sends them uncompressed). Content already classified with the same options is
// answered from a cache in the wasm module without compute or traffic.
// The WebSocket lives here, in JS; the wasm module computes and frames. Every failure is
// thrown as a SplitError with a stable `code` ("network", "timeout", or a server error code such
// as "shape_mismatch") and a message meant for a developer.


/** The wasm module in use, loaded by `SplitClient.create` (see `loadWasm`). */
let wasm = null;

/**
 * Whether this engine validates relaxed SIMD: a module whose one function is
 * `f32x4.relaxed_madd(v128.const 0, v128.const 0, v128.const 0)`.
 */
function hasRelaxedSimd() {
  const v128zero = [0xfd, 0x0c, ...new Array(16).fill(0)];
  const body = [0x00, ...v128zero, ...v128zero, ...v128zero, 0xfd, 0x85, 0x02, 0x0b];
  const bytes = new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,       // magic, version
    0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b,             // type: () -> v128
    0x03, 0x02, 0x01, 0x00,                               // one function of type 0
    0x0a, body.length + 2, 0x01, body.length, ...body,    // its code
  ]);
  try { return WebAssembly.validate(bytes); } catch { return false; }
}

/** Whether WebGPU would give an adapter (`navigator.gpu` exists on some machines without one). */
async function hasWebGpuAdapter() {
  if (typeof navigator === "undefined" || !navigator.gpu) return false;
  try { return (await navigator.gpu.requestAdapter()) != null; } catch { return false; }
}

/**
 * Load the smallest build that can do what was asked: the WebGPU build (`pkg/`, which also has
 * the CPU backend) only when WebGPU may be used and the browser has it; otherwise the CPU-only
 * build, with relaxed SIMD's fused multiply-add where the engine has it (`pkg-cpu-relaxed/`,
 * Chromium) or plain SIMD (`pkg-cpu/`).
 */
const BUILD_DIRS = { webgpu: "pkg", cpu: "pkg-cpu", "cpu-relaxed": "pkg-cpu-relaxed" };

async function loadWasm(backend, build) {
  if (build != null && !BUILD_DIRS[build]) {
    throw new SplitError("bad_option", `unknown wasm build ${build}; use ${Object.keys(BUILD_DIRS).join(", ")}`);
  }
  const gpu = backend !== "cpu" && (await hasWebGpuAdapter());
  const dir = BUILD_DIRS[build] ?? (gpu ? "pkg" : hasRelaxedSimd() ? "pkg-cpu-relaxed" : "pkg-cpu");
  const module = await import(new URL(`./${dir}/wasm_edge.js`, import.meta.url).href);
  await module.default();
  return module;
}

/** An error with a stable, machine-readable code. */
export class SplitError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "SplitError";
    this.code = code;
  }
}

const DEFAULT_TIMEOUT_MS = 120_000;
/** Auto mode: how often the network is probed (RTT, server load, uplink when idle). */
const PROBE_PERIOD_MS = 2_000;
/** Auto mode: a ping unanswered this long counts as an outage (the planner's detection time). */
const PING_TIMEOUT_MS = 2_000;
/** Auto mode: a request waits for the server at most max(this, 3x the planner's prediction of
 * its network and server part), then runs locally; a link that silently stops carrying bytes
 * (no close, no error) must not stall the caller for the full `timeoutMs`. */
const AUTO_MIN_DEADLINE_MS = 1_500;

async function fetchWithProgress(url, stage, onProgress) {
  const response = await fetch(url);
  if (!response.ok) {
    throw new SplitError("network", `GET ${url} failed: ${response.status} ${response.statusText}`);
  }
  const total = Number(response.headers.get("content-length")) || 0;
  const reader = response.body.getReader();
  const chunks = [];
  let loaded = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.length;
    onProgress({ stage, loaded, total, fraction: total ? loaded / total : null });
  }
  const bytes = new Uint8Array(loaded);
  let offset = 0;
  for (const c of chunks) {
    bytes.set(c, offset);
    offset += c.length;
  }
  return bytes;
}

/**
 * The 224x224 centre crop of `image` (224/256 of the short side, as the model's preprocessing
 * takes it) as a quality-90 JPEG: with the browser's own decoder, scaler and encoder where there
 * is an OffscreenCanvas (several times faster than wasm on a slow CPU, and smaller), else with
 * the wasm module's bit-exact preprocessing.
 */
async function modelInputJpeg(image) {
  if (typeof OffscreenCanvas === "undefined" || typeof createImageBitmap === "undefined") {
    return wasm.encodeUploadJpeg(image, 90);
  }
  try {
    const bitmap = await createImageBitmap(new Blob([image]));
    const side = Math.round(Math.min(bitmap.width, bitmap.height) * 224 / 256);
    const canvas = new OffscreenCanvas(224, 224);
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingQuality = "high";
    ctx.drawImage(bitmap, Math.ceil((bitmap.width - side) / 2), Math.ceil((bitmap.height - side) / 2), side, side, 0, 0, 224, 224);
    bitmap.close();
    return new Uint8Array(await (await canvas.convertToBlob({ type: "image/jpeg", quality: 0.9 })).arrayBuffer());
  } catch {
    return wasm.encodeUploadJpeg(image, 90); // a format the browser cannot decode: let wasm say why
  }
}

export class SplitClient {
  /**
   * Load the wasm module and the weights, pick WebGPU or the CPU, and prepare the connection.
   * @param {object} [options]
   * @param {string} [options.baseUrl]   where the server is (default: this page's origin)
   * @param {string} [options.wsUrl]     the WebSocket, when it goes elsewhere (default: baseUrl + "ws")
   * @param {"auto"|"webgpu"|"cpu"} [options.backend]  default "auto": WebGPU if it works, else CPU
   * @param {(p: {stage: string, fraction: number|null}) => void} [options.onProgress]
   * @param {number} [options.timeoutMs]  per request
   * @param {number} [options.cacheEntries]  results remembered by content (default 256; 0: off)
   * @param {{privacy_floor?: string|number, min_agreement?: number, max_edge_param_bytes?: number}} [options.constraints]
   *   for split "auto": never send features before this boundary (and never the image), never
   *   use a codec below this top-1 agreement, never hold more edge parameters than this
   * @param {(s: object) => void} [options.onSwitch]  called with each placement change of "auto"
   * @param {"webgpu"|"cpu"|"cpu-relaxed"} [options.wasmBuild]  force one build of the module
   *   (default: the WebGPU build only when WebGPU works, else the CPU build with relaxed SIMD
   *   where the engine has it); for benchmarks
   */
  static async create(options = {}) {
    const base = new URL(options.baseUrl ?? "/", location.href);
    const onProgress = options.onProgress ?? (() => {});
    onProgress({ stage: "wasm", fraction: null });
    wasm = await loadWasm(options.backend ?? "auto", options.wasmBuild);
    const infoResponse = await fetch(new URL("api/info", base));
    if (!infoResponse.ok) throw new SplitError("network", `GET api/info failed: ${infoResponse.status}`);
    const info = await infoResponse.json();
    const weights = await fetchWithProgress(new URL("weights/efficientnet-lite0.splw", base), "weights", onProgress);
    const calibration = info.calibration
      ? await fetchWithProgress(new URL(info.calibration.url.replace(/^\//, ""), base), "calibration", onProgress)
      : null;
    onProgress({ stage: "warm-up", fraction: null });
    const edge = await wasm.EdgeSession.create(weights, options.backend ?? "auto");
    if (calibration) edge.setCalibration(calibration);
    if (options.cacheEntries != null) edge.setCacheEntries(options.cacheEntries);
    let planner = null;
    if (info.cost_table_url) {
      onProgress({ stage: "profiling", fraction: null });
      const table = await (await fetch(new URL(info.cost_table_url.replace(/^\//, ""), base))).text();
      planner = new wasm.AdaptivePlanner(table, edge.backend === "webgpu" ? "browser-webgpu" : "browser-wasm-cpu");
      // A phone is not the profiling machine: time this device and scale the edge column.
      const profile = await edge.profileEdge(1);
      planner.edgeFactor = planner.setEdgeTimes(profile.names, profile.ms);
      if (options.constraints) {
        // The privacy floor may be a boundary name: it means "that boundary and deeper only".
        const k = { privacy_floor: 0, min_agreement: 0.99, max_edge_param_bytes: null, ...options.constraints };
        if (typeof k.privacy_floor === "string") {
          k.privacy_floor = wasm.boundaries().findIndex((b) => b.name === k.privacy_floor);
          if (k.privacy_floor < 0) throw new SplitError("bad_option", `unknown boundary ${options.constraints.privacy_floor}`);
        }
        planner.setConstraints(JSON.stringify(k));
      }
    }
    onProgress({ stage: "ready", fraction: 1 });
    const client = new SplitClient(base, edge, options.timeoutMs ?? DEFAULT_TIMEOUT_MS, info, planner, options.onSwitch);
    if (options.wsUrl) client.wsUrl = new URL(options.wsUrl);
    return client;
  }

  constructor(base, edge, timeoutMs, info, planner = null, onSwitch = null) {
    this.edge = edge;
    /** Which wasm build was loaded: "webgpu", "cpu" or "cpu-relaxed". */
    this.wasmBuild = wasm.buildKind();
    this.info = info;
    /** The adaptive planner (`split: "auto"`), when the server publishes a cost table. */
    this.planner = planner;
    this.onSwitch = onSwitch ?? (() => {});
    /** Every placement change of the adaptive mode: { at_ms, from, to, reason }. */
    this.switches = [];
    this.rttMs = null;
    this.lastSent = 0;
    /** Edge runs started; the wasm edge computes on this thread, so a reply that arrives
     * meanwhile is only seen when it ends, and a ping timed across one measures the edge. */
    this.edgeRuns = 0;
    this.edgeRunning = false;
    this.lastProbe = 0;
    this.probeTimer = null;
    /** Codec used when `classify` is not given one: the server's recommendation. */
    this.defaultCodec = info.default_codec ?? "f32";
    this.timeoutMs = timeoutMs;
    this.wsUrl = new URL("ws", base);
    this.wsUrl.protocol = base.protocol === "https:" ? "wss:" : "ws:";
    this.socket = null;
    this.connecting = null;
    this.pending = new Map();
    this.nextId = 1;
  }

  /** "webgpu" or "cpu": where the edge half runs. */
  get backend() {
    return this.edge.backend;
  }

  /** Every split boundary: [{ name, shape, cumulativeMacs, bytesF32 }]. */
  /** The model's boundaries (name, shape, MACs); available once a client was created. */
  static boundaries() {
    return wasm.boundaries();
  }

  /** Open the WebSocket if it is not open; concurrent callers share one attempt. */
  connect() {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) return Promise.resolve(this.socket);
    if (this.connecting) return this.connecting;
    const socket = new WebSocket(this.wsUrl);
    socket.binaryType = "arraybuffer";
    this.connecting = new Promise((resolve, reject) => {
      socket.onopen = () => {
        // Stream references do not survive a connection: start again from a keyframe.
        this.edge.forceKeyframe();
        resolve(socket);
      };
      socket.onerror = () => reject(new SplitError("network", `cannot connect to ${this.wsUrl}`));
    }).finally(() => {
      this.connecting = null;
    });
    socket.onmessage = (event) => {
      let reply;
      try {
        // The session learns from replies: results fill its cache, keyframe_required resets
        // the stream.
        reply = this.edge.acceptReply(new Uint8Array(event.data));
      } catch (e) {
        console.error("undecodable reply", e);
        return;
      }
      const waiter = this.pending.get(reply.id);
      if (waiter) waiter(reply);
    };
    socket.onclose = (event) => {
      const error = new SplitError("network", `connection closed (${event.code}${event.reason ? ": " + event.reason : ""})`);
      for (const waiter of this.pending.values()) waiter(error);
      this.pending.clear();
      if (this.socket === socket) this.socket = null;
    };
    this.socket = socket;
    return this.connecting;
  }

  async request(id, frame, timeoutMs = this.timeoutMs) {
    const socket = await this.connect();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SplitError("timeout", `no reply to request ${id} within ${Math.round(timeoutMs)} ms`));
      }, timeoutMs);
      this.pending.set(id, (reply) => {
        clearTimeout(timer);
        this.pending.delete(id);
        if (reply instanceof Error) reject(reply);
        else if (reply.kind === "error") reject(new SplitError(reply.code, reply.message));
        else resolve(reply);
      });
      socket.send(frame);
    });
  }

  /**
   * Classify an encoded image (JPEG or PNG bytes).
   * @param {Uint8Array} image
   * @param {string} split  "edge" (all local), "cloud" (upload the image), or a boundary name
   * @param {object} [options]
   * @param {string} [options.codec]  "f32", or "q<bits>[-r<rank>][-packed]"; default: `defaultCodec`
   * @param {boolean} [options.stream]  code against the previous frame (camera streams)
   * @param {number} [options.deadlineMs]  wait this long for the server (default `timeoutMs`)
   * @param {boolean} [options.modelInput]  "cloud" only: `image` is already the 224x224 model input
   *   (centre-cropped and resized), so the server must not crop it again
   * @returns {Promise<{mode, split, codec, backend, top, edgeMs, bytesSent, serverMs, serverCached,
   *   roundTripMs, totalMs, load}>}  mode is "edge", "cloud", "split" or "cache"
   */
  async classify(image, split = "block5", options = {}) {
    if (split === "auto") return this.classifyAuto(image, options);
    const codec = options.codec ?? this.defaultCodec;
    const started = performance.now();
    for (let attempt = 0; ; attempt++) {
      const id = this.nextId++;
      let frame;
      let edgeMs = 0;
      if (split === "cloud") {
        frame = options.modelInput ? wasm.encodeInputRequest(id, image) : wasm.encodeImageRequest(id, image);
      } else {
        this.edgeRuns++;
        this.edgeRunning = true;
        let out;
        try {
          out = await this.edge.run(image, split === "edge" ? "logits" : split, id, codec, Boolean(options.stream));
        } finally {
          this.edgeRunning = false;
        }
        edgeMs = performance.now() - started;
        if (out.top) {
          return { mode: out.cached ? "cache" : "edge", split: split === "edge" ? "logits" : split, codec,
                   backend: this.backend, top: out.top, edgeMs, bytesSent: 0, serverMs: 0, serverCached: false,
                   roundTripMs: 0, totalMs: edgeMs, load: null };
        }
        frame = out.frame;
      }
      const sent = performance.now();
      let reply;
      try {
        reply = await this.request(id, frame, options.deadlineMs ?? this.timeoutMs);
      } catch (e) {
        // The server lost this stream's reference (a dropped frame, a restart): the session
        // already switched to a keyframe, so send this image once more.
        if (e.code === "keyframe_required" && attempt === 0) continue;
        throw e;
      }
      const roundTripMs = performance.now() - sent;
      const t = reply.timings;
      return {
        mode: split === "cloud" ? "cloud" : "split",
        split: reply.from,
        codec: split === "cloud" ? "image" : codec,
        backend: split === "cloud" ? "server" : this.backend,
        top: reply.top,
        edgeMs,
        bytesSent: frame.length,
        serverMs: t.queueMs + t.decodeMs + t.computeMs,
        serverCached: t.cached,
        roundTripMs,
        totalMs: performance.now() - started,
        load: reply.load,
      };
    }
  }

  /**
   * Adaptive mode: the planner picks edge-only, cloud-only or a split and codec from the cost
   * table and the measured network and server load, re-planning every 2 s (at once on a jump),
   * and requests feed it back. A failed request falls back to running locally.
   */
  async classifyAuto(image, options = {}) {
    if (!this.planner) throw new SplitError("no_cost_table", "the server publishes no cost table; pick a split");
    this.startProbing();
    const decision = JSON.parse(this.planner.tick(performance.now()));
    if (decision.decision === "switch") {
      this.switches.push(decision);
      this.onSwitch(decision);
    }
    const placement = JSON.parse(this.planner.current());
    const split = placement.mode === "edge_only" ? "edge" : placement.mode === "cloud_only" ? "cloud" : placement.boundary;
    const codec = placement.codec ?? this.defaultCodec;
    const started = performance.now();
    let r;
    try {
      // Cloud-only uploads a quality-90 JPEG of the 224x224 model input.
      const upload = split === "cloud" ? await modelInputJpeg(image) : image;
      const p = JSON.parse(this.planner.explain()).predicted;
      const remoteMs = p ? p.transfer_ms + p.rtt_ms + p.queue_ms + p.cloud_ms : Infinity;
      const deadlineMs = Math.min(this.timeoutMs, Math.max(AUTO_MIN_DEADLINE_MS, 3 * remoteMs));
      r = await this.classify(upload, split, { ...options, codec, deadlineMs, modelInput: split === "cloud" });
    } catch (e) {
      if (e.code !== "network" && e.code !== "timeout") throw e;
      this.planner.observeOutage(performance.now());
      r = await this.classify(image, "edge", options);
      r.fallback = e.message;
      r.totalMs = performance.now() - started; // the wait for the server counts too
    }
    this.observe(r);
    const result = { ...r, auto: true, placement, explain: JSON.parse(this.planner.explain()) };
    // Running locally, back-to-back requests keep this thread busy, and a probe timed across an
    // edge run measures the edge, not the network: probe here, between runs, when one is due.
    if ((split === "edge" || r.fallback) && performance.now() - this.lastProbe > PROBE_PERIOD_MS) {
      await this.probe();
    }
    return result;
  }

  observe(r) {
    const now = performance.now();
    if (r.bytesSent > 0) {
      this.lastSent = now;
      const base = this.rttMs ?? r.roundTripMs - r.serverMs;
      this.planner.observeUpload(now, r.bytesSent, Math.max(0.05, r.roundTripMs - r.serverMs - base));
    }
    if (r.load) this.planner.observeQueue(now, r.load.waitMs);
  }

  /** Ping every 2 s while adaptive mode is in use: RTT, server load, and a 16 KB uplink probe
   * when nothing else was sent recently. */
  startProbing() {
    if (this.probeTimer) return;
    this.probeTimer = setInterval(() => {
      if (performance.now() - this.lastProbe > PROBE_PERIOD_MS * 0.75) this.probe().catch(() => {});
    }, PROBE_PERIOD_MS);
  }

  async probe() {
    const now = performance.now();
    this.lastProbe = now;
    const idle = now - this.lastSent > 2000;
    const rtt = await this.ping(0);
    if (rtt == null || rtt.skewed) return;
    if (idle) {
      const t = await this.ping(16384);
      if (t != null && !t.skewed) this.planner.observeUpload(performance.now(), 16384, Math.max(0.05, t.ms - rtt.ms));
    }
  }

  /** Send a ping with `probeBytes` of padding; resolves to { ms, load, skewed } (null when
   * offline); `skewed`: an edge run overlapped it, so `ms` is not the network's. */
  async ping(probeBytes = 0) {
    const id = this.nextId++;
    const runs = this.edgeRuns;
    const busy = this.edgeRunning;
    const sent = performance.now();
    try {
      // A padded probe needs time to serialize on a slow uplink; a bare ping does not.
      const timeout = probeBytes ? Math.min(this.timeoutMs, 4 * PING_TIMEOUT_MS) : PING_TIMEOUT_MS;
      const pong = await this.request(id, wasm.encodePing(id, probeBytes), timeout);
      const ms = performance.now() - sent;
      const skewed = busy || this.edgeRunning || runs !== this.edgeRuns;
      if (this.planner) {
        if (probeBytes === 0 && !skewed) {
          this.rttMs = this.rttMs == null ? ms : 0.7 * this.rttMs + 0.3 * ms;
          this.planner.observeRtt(performance.now(), ms);
        }
        this.planner.observeQueue(performance.now(), pong.load.waitMs);
      }
      return { ms, load: pong.load, skewed };
    } catch (e) {
      if (this.planner) this.planner.observeOutage(performance.now());
      return null;
    }
  }

  /** Time the codec alone in this browser: `{ bytes, encodeMs, decodeMs }` per run. */
  benchCodec(image, split, codec, repeats = 10) {
    return this.edge.benchCodec(image, split, codec, repeats);
  }

  /** Close the connection and stop probing. */
  close() {
    clearInterval(this.probeTimer);
    this.probeTimer = null;
    if (this.socket) this.socket.close(1000, "client closed");
  }
}
