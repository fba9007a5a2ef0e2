// SplitClient: the embeddable API of split inference in the browser.
//
//   import { SplitClient } from "./split-client.js";
//   const client = await SplitClient.create({ onProgress: (p) => console.log(p.stage, p.fraction) });
//   const result = await client.classify(fileBytes, "block5");   // or "edge", "cloud", "auto", any boundary
//   result.top[0].name  // "tiger cat"
//   await client.classify(frameBytes, "block8", { codec: "q2-r16", stream: true });  // camera frames
//
// Features are compressed with the server's default codec (from /api/info) unless `codec` says
// otherwise ("f32" sends them uncompressed). Content already classified with the same options is
// answered from a cache in the wasm module without compute or traffic. Every failure is thrown
// as a SplitError with a stable `code` ("network", "timeout", "bad_option", "bad_image", or a
// server error code such as "shape_mismatch") and a message meant for a developer; types are in
// `split-client.d.ts`.
//
// When the server is out of reach, `auto` answers on this device: with the full weights where
// it holds them, else with the light model (int8) for the stages it lacks; such an answer says
// `quality: "reduced"`, its compressed features wait in a backlog (IndexedDB, so a reload
// keeps them), and when the link returns the server's answer arrives through `onUpdate` as
// version 2 of the same result (`id`). With `progressive: true` the light model's answer comes
// at once (through `onUpdate`, version 1) while the server computes the full one.
//
// With `offline: true` a service worker (`sw.js`, `client/offline.js`) keeps the page's files,
// the client, its wasm build and `/api/info`, so that a reload with the server out of reach
// still starts and answers with what this device holds (the light model for the rest).
//
// On a page the client runs in a Web Worker by default (`worker: false` keeps it on the calling
// thread): the same API, every call a message, and the page never waits on an edge run.
//
// Parts: `client/wasm.js` (which build to load, the wasm seam), `client/connection.js` (the
// WebSocket), `client/adaptive.js` (`split: "auto"`), `client/resilience.js` and
// `client/backlog.js` (answers during outages, finished later), `client/offline.js` (the
// offline start's page side), `client/worker.js` and
// `client/remote.js` (the worker and the page's handle on it), and this file (creation and
// `classify`).

import { Adaptive, timeUploadPrep } from "./client/adaptive.js";
import { Connection } from "./client/connection.js";
import { EncryptedLink, checkEncryptedAvailable } from "./client/encrypted.js";
import { RemoteSplitClient } from "./client/remote.js";
import { FULL_INPUT, Resilience, newResultId } from "./client/resilience.js";
import {
  SplitError, browserDecodedPng, capabilities, fetchCached, fetchWithProgress, isTransient, loadWasm, modelInputJpeg,
  serverUrl, wasm, wasmCall, webRtcCapability,
} from "./client/wasm.js";
import { EdgeWeights, boundaryIndex } from "./client/weights.js";
import { DeviceGroup } from "./client/group.js";
import { loadedUrls, notAsked, registerOffline, reportStarted, withoutData } from "./client/offline.js";

export { SplitError };
/** The language model split between this page and the server (`client/chat.js`). */
export { SplitChat } from "./client/chat.js";

/** The boundary `options.weights` asks to load before `create` resolves: "all" is every
 * stage, "none" none, a boundary name the stages up to it. */
function preloadTarget(weights) {
  if (weights === "all") return "logits";
  if (weights === "none") return "input";
  if (boundaryIndex(weights) >= 0) return weights;
  throw new SplitError("bad_option", `unknown weights option ${weights}; use "all", "none" or a boundary such as "block5"`);
}

/** How long a request waits for the server's reply (including connecting), unless told. */
const DEFAULT_TIMEOUT_MS = 30_000;
/** The model whose browser half this client runs (docs/models.md). */
const EDGE_MODEL = "efficientnet-lite0";
/** What a frame adds to its payload at most (`MAX_FRAME_BYTES - MAX_PAYLOAD_BYTES` in
 * shared/src/protocol). */
const FRAME_HEADER_BYTES = 64;
/** The smallest input the light model's answers may run on (`lightInput`; five stride-2
 * stages leave a 1×1 map at 32). */
const MIN_LIGHT_INPUT = 32;
/** Refuse `model` unless the server hosts it (`/api/info`'s `models`) and this client has its
 * browser half: "unknown_model" names what the server has. */
function checkModel(model, info) {
  const hosted = (info.models ?? [{ name: info.model }]).map((m) => m.name);
  if (!hosted.includes(model)) {
    throw new SplitError("unknown_model", `the server hosts ${hosted.join(", ")}; not ${model}`);
  }
  if (model !== EDGE_MODEL) {
    throw new SplitError("bad_option", `the server hosts ${model}, but this client's browser half runs ${EDGE_MODEL} only`);
  }
}

/** The keys of what auto minimizes (`setObjective`, and `options.constraints`). */
const OBJECTIVE = ["mode", "weights", "deviceWatts", "radio", "requestIntervalMs", "serverPrice", "realtime"];
/** The keys `options.constraints` may have; any other is refused rather than ignored (a
 * misspelt privacy floor must not silently mean none). */
const CONSTRAINTS = ["privacyFloor", "minAgreement", "maxEdgeParamBytes", "encrypted", ...OBJECTIVE];
/** A ping's timeout when no planner sets one. */
const PING_TIMEOUT_MS = 2_000;

/** An edge run with a ping out yields to the event loop at the first stage boundary this
 * long after its last turn, ms: the pong is seen at most this (plus a stage) late, and a short
 * stage does not cost a turn of its own. On the lab's 4x throttled page a run with a bare ping
 * out took 4% longer than one without at 32 ms, 8-11% at 8 ms (the setting before), its pong
 * read 10-17 ms later (`tests/ping-bench.mjs`); the trace simulator puts auto within 4% of the
 * oracle on every lab link at 32, 5-11% over it on six of them at 8 (docs/adaptive.md, "The
 * lab's links, simulated"). */
const PAUSE_EVERY_MS = 32;
let lastTurn = 0;

/** What edge runs await between stages while a ping is out: after `PAUSE_EVERY_MS`, a turn
 * of the event loop ([`nextTurn`]); before, nothing (the run goes on). */
function turnOfEventLoop() {
  if (performance.now() - lastTurn < PAUSE_EVERY_MS) return null;
  return nextTurn();
}

/** A promise that resolves once the event loop has run the tasks queued before it (a pong
 * among them): a message through a fresh channel, which browsers do not clamp as they clamp
 * nested timers. Back-to-back requests that run on the device never leave this thread
 * otherwise (their awaits are microtasks), so a message event waits for one of these. */
function nextTurn() {
  return new Promise((resolve) => {
    const { port1, port2 } = new MessageChannel();
    port1.onmessage = () => {
      port1.close();
      lastTurn = performance.now();
      resolve();
    };
    port2.postMessage(null);
  });
}

/**
 * Once `client` started: tell the offline start's service worker (`offline`, the pending
 * registration) which site version started and what this page and the client's worker
 * loaded. Sets and resolves to `client.capabilities.offline`.
 */
async function keepForOffline(client, offline, inWorker) {
  const setOffline = (capability) => {
    if (inWorker) client.offline = capability;
    else client.capabilities.offline = capability;
    return capability;
  };
  setOffline({ available: false, reason: "the service worker is keeping this start's files" });
  const { registration, reason } = await offline;
  if (!registration) return setOffline({ available: false, reason });
  const urls = [...loadedUrls(), ...(inWorker ? await client.call("resources").catch(() => []) : [])];
  return setOffline(await reportStarted(registration, client.info?.site, withoutData(urls, client.info)));
}

export class SplitClient {
  /**
   * Load the wasm module and the weights, pick WebGPU or the CPU, and prepare the connection.
   * @param {import("./split-client.js").CreateOptions} [options]  see `split-client.d.ts`:
   *   baseUrl, wsUrl, backend ("auto" | "webgpu" | "cpu"), onProgress, timeoutMs, cacheEntries,
   *   constraints (privacyFloor, minAgreement, maxEdgeParamBytes), onSwitch,
   *   wasmBuild ("webgpu" | "cpu" | "cpu-relaxed" | "cpu-threads" | "cpu-threads-simd128", for benchmarks), token (the server's bearer
   *   token, when it requires one), onConnection (the WebSocket's state as it changes), worker
   *   (default: true on a page that can start one), onUpdate (a newer version of a result:
   *   the server's answer to one given reduced), fallback ("light", the default: outages are
   *   answered with the light model; "full": auto downloads every stage's full weights),
   *   lightInput (the side in pixels of the input the light model's answers run on, 32 to 224,
   *   default 224: smaller is faster and agrees less often),
   *   noise (added to every request's features before they leave: "gauss:<scale>" or
   *   "laplace:<scale>", a fraction of each channel's calibrated range)
   */
  static async create(options = {}) {
    const onPage = typeof window !== "undefined";
    // The offline start's service worker registers beside the load (a page's business: a
    // worker has no service workers to register).
    const offline = onPage ? registerOffline(options.offline, options.assetBase) : null;
    const worker = options.worker ?? (onPage && typeof Worker !== "undefined");
    const client = worker ? await RemoteSplitClient.create(options) : await SplitClient.createHere(options);
    if (offline) client.offlineReady = keepForOffline(client, offline, worker);
    return client;
  }

  /** `create` on this thread (a worker's, or the page's with `worker: false`). */
  static async createHere(options) {
    const base = new URL(options.baseUrl ?? "/", location.href);
    const onProgress = options.onProgress ?? (() => {});
    onProgress({ stage: "wasm", fraction: null });
    await loadWasm(options.backend ?? "auto", options.wasmBuild, options.assetBase);
    const info = JSON.parse(new TextDecoder().decode(await fetchWithProgress(new URL("api/info", base), "info", () => {})));
    checkModel(options.model ?? info.model, info);
    const preload = preloadTarget(options.weights ?? "all");
    const edge = await wasmCall(() => wasm.EdgeSession.create(options.backend ?? "auto"));
    const weights = new EdgeWeights(edge, info, base, onProgress);
    await weights.ensure(preload);
    const client = new SplitClient(base, edge, options.timeoutMs ?? DEFAULT_TIMEOUT_MS, info, weights, options.token);
    client.onProgress = onProgress;
    if (options.fallback != null && !["light", "full"].includes(options.fallback)) {
      throw new SplitError("bad_option", `unknown fallback ${options.fallback}; use "light" or "full"`);
    }
    client.fallback = info.light_model ? options.fallback ?? "light" : "full";
    const lightInput = options.lightInput ?? FULL_INPUT;
    if (!Number.isInteger(lightInput) || lightInput < MIN_LIGHT_INPUT || lightInput > FULL_INPUT) {
      throw new SplitError("bad_option", `lightInput is a whole number of pixels from ${MIN_LIGHT_INPUT} to ${FULL_INPUT}, not ${lightInput}`);
    }
    /** The side of the input the light model's answers run on: below 224, from the photo on a
     * smaller copy of it (faster, agrees less), not from the request's features. */
    client.lightInput = lightInput;
    // The privacy floor may be a boundary name: "that boundary and deeper only"; "default" is
    // the measured one (the earliest whose features no longer reconstruct into the photo).
    const unknown = Object.keys(options.constraints ?? {}).filter((k) => !CONSTRAINTS.includes(k));
    if (unknown.length) {
      throw new SplitError("bad_option", `unknown constraint ${unknown.join(", ")}; use ${CONSTRAINTS.join(", ")}`);
    }
    const constraints = { privacyFloor: 0, minAgreement: 0.98, maxEdgeParamBytes: null, ...options.constraints };
    if (constraints.privacyFloor === "default") constraints.privacyFloor = wasm.defaultPrivacyFloor();
    if (typeof constraints.privacyFloor === "string") {
      constraints.privacyFloor = boundaryIndex(constraints.privacyFloor);
      if (constraints.privacyFloor < 0) throw new SplitError("bad_option", `unknown boundary ${options.constraints.privacyFloor}`);
    }
    /** The first boundary whose features may leave this device (0: any, the photo included). */
    client.privacyFloor = constraints.privacyFloor;
    client.constraints = constraints;
    if (constraints.encrypted) checkEncryptedAvailable(client);
    /** Noise on every request's features unless a request says otherwise ("gauss:0.02"). */
    client.noise = options.noise ?? null;
    client.resilience = await Resilience.create(client, options.onUpdate ?? (() => {}));
    client.capabilities.worker = typeof Worker === "undefined"
      ? { available: false, reason: "this page has no Web Worker: the client runs on the page's thread" }
      : { available: false, reason: "worker: false was asked for" };
    client.capabilities.backlog = client.resilience.backlog.persistent ? { available: true, reason: null }
      : { available: false, reason: "IndexedDB is refused or absent here (private browsing?): answers kept for the server live in memory and go with the page" };
    // Set by `create` on a page that asked for it (`keepForOffline`).
    client.capabilities.offline = notAsked();
    // Every new connection is a chance to finish what waited for the server.
    client.connection.onOpen = () => client.resilience.scheduleDrain(true);
    // The codec's tables at the boundary the page preloads for; any other boundary's come
    // with its first request.
    if (preload !== "input" && preload !== "logits") await client.ensureCalibration(preload);
    onProgress({ stage: "warm-up", fraction: null });
    await wasmCall(() => edge.warmUp());
    if (options.cacheEntries != null) edge.setCacheEntries(options.cacheEntries);
    let planner = null;
    if (info.cost_table_url) {
      onProgress({ stage: "profiling", fraction: null });
      const table = new TextDecoder().decode(await fetchWithProgress(serverUrl(info.cost_table_url, base), "profiling", () => {}));
      client.costTable = table;
      planner = await wasmCall(() => new wasm.AdaptivePlanner(table, edge.backend === "webgpu" ? "browser-webgpu" : "browser-wasm-cpu"));
      // A phone is not the profiling machine: time this device (the stages loaded so far; all
      // of them again once they are) and scale the edge column.
      await client.profilePlanner(planner);
      await timeUploadPrep(planner);
      if (options.constraints) await wasmCall(() => planner.setConstraints(constraints));
    }
    if (options.wsUrl) client.connection.url = new URL(options.wsUrl);
    if (options.onConnection) client.connection.onStatus = options.onConnection;
    if (planner) {
      client.adaptive = new Adaptive(client, planner, options.onSwitch ?? (() => {}));
      // No cold start: the first request in auto mode is planned on this link as measured now
      // (a round trip and an uplink probe), not on the planner's defaults.
      if (options.linkProbe !== false) {
        onProgress({ stage: "link", fraction: null });
        await client.adaptive.measureLink();
      }
    }
    onProgress({ stage: "ready", fraction: 1 });
    // Answers given reduced before a reload: finish them now (or when the server is back).
    if (client.resilience.backlog.size > 0) {
      if (client.fallback === "light") client.loadAllInBackground();
      client.resilience.scheduleDrain();
    }
    return client;
  }

  constructor(base, edge, timeoutMs, info, weights, token = null) {
    this.edge = edge;
    /** The stages the edge holds, and fetching more ([`EdgeWeights`]). */
    this.weights = weights;
    this.base = base;
    /** The codec calibration's loads by part ("all": the whole file), once started. */
    this.calibrationLoads = new Map();
    this.onProgress = () => {};
    /** Which wasm build was loaded: "webgpu", "cpu", "cpu-relaxed", "cpu-threads" or "cpu-threads-simd128". */
    this.wasmBuild = wasm.buildKind();
    /** What this engine offers the edge (WebGPU, relaxed SIMD, threads), each with the reason
     * when it does not, and the build chosen from them. */
    this.capabilities = { ...capabilities, webrtc: webRtcCapability() };
    this.info = info;
    /** Codec used when `classify` is not given one: the server's recommendation. */
    this.defaultCodec = info.default_codec ?? "f32";
    this.timeoutMs = timeoutMs;
    const wsUrl = new URL("ws", base);
    wsUrl.protocol = base.protocol === "https:" ? "wss:" : "ws:";
    this.connection = new Connection(wsUrl, edge, token);
    /** `split: "auto"`, when the server publishes a cost table. */
    this.adaptive = null;
    /** Edge runs started that held this thread from end to end: the wasm edge computes on
     * this thread, so a reply that arrives meanwhile is only seen when it ends, and a ping
     * timed across such a run measures the edge. While a ping is out, runs pause for a turn
     * of the event loop after every stage instead (`EdgeSession.setPause`): its pong is seen
     * within a stage of its arrival, and the run is not counted here. */
    this.edgeRuns = 0;
    this.edgeRunning = false;
    /** Pauses edge runs made for pings: a run that paused took longer than its compute. */
    this.pauses = 0;
    this.countedPause = () => {
      const pause = turnOfEventLoop();
      if (pause) this.pauses++;
      return pause;
    };
    /** Pings out; while any that pauses is (`pausingPings`), edge runs pause between stages. */
    this.pingsOut = 0;
    this.pausingPings = 0;
    this.nextId = 1;
  }

  /**
   * Load the codec calibration's tables for `boundary` (`q*` codecs need them), once: that
   * boundary's part where the server cuts its calibration per boundary, else the whole file.
   */
  ensureCalibration(boundary) {
    const c = this.info.calibration;
    if (!c) return Promise.resolve();
    if (this.calibrationLoads.has("all")) return this.calibrationLoads.get("all");
    const part = c.parts?.find((p) => p.name === boundary);
    if (!part && c.parts?.length) return Promise.resolve(); // not calibrated there: the codec says so
    const file = part ?? { name: "all", url: c.url, id: c.id, bytes: c.bytes };
    if (!this.calibrationLoads.has(file.name)) {
      const load = fetchCached(serverUrl(file.url, this.base), file.id, "calibration", this.onProgress, file.bytes)
        .then((bytes) => wasmCall(() => (part ? this.edge.addCalibration(bytes) : this.edge.setCalibration(bytes))));
      this.calibrationLoads.set(file.name, load);
      load.catch(() => this.calibrationLoads.delete(file.name)); // the next request tries again
    }
    return this.calibrationLoads.get(file.name);
  }

  /** Time the loaded stages on this device and give the planner its edge factor. */
  async profilePlanner(planner) {
    if (this.weights.through === "input") return; // nothing to time yet: the table's speed
    const profile = await wasmCall(() => this.edge.profileEdge(1));
    planner.edgeFactor = planner.setEdgeTimes(profile.names, profile.ms);
  }

  /**
   * What an edge run to `split` needs before it starts: the stages up to it (downloaded now if
   * the client was created with fewer; progress goes to `onProgress`), and the calibration
   * for a coded frame.
   */
  async prepareEdge(split, codec) {
    const through = split === "edge" ? "logits" : split;
    if (this.weights.through !== "logits") await this.weights.ensure(through);
    if (through !== "logits" && codec !== "f32") await this.ensureCalibration(through);
  }

  /** Auto mode may answer on this device whenever the link fails: once it is used, the light
   * model's shards of the stages the client lacks download in the background (4.3 MB after
   * block5, where the full weights are 17 MB); with `fallback: "full"` the full shards, one
   * at a time (a request that needs a stage waits for at most the one in flight), after which
   * the planner times them all. */
  loadAllInBackground() {
    if (this.backgroundLoad || this.weights.through === "logits") return;
    if (this.fallback === "light" && this.weights.hasLight) return;
    this.backgroundLoad = (async () => {
      if (this.fallback === "light") return this.weights.ensureLight();
      for (const b of wasm.boundaries().slice(1)) await this.weights.ensure(b.name);
      if (this.adaptive) await this.profilePlanner(this.adaptive.planner);
    })().then(() => { this.backgroundLoad = null; }, () => { this.backgroundLoad = null; }); // tried again after the next auto request
  }

  /** `{ entries, bytes, dropped, persistent }`: the answers waiting for the server. */
  async backlogState() {
    return this.resilience.describe();
  }

  /** `{ through, bytes, total }`: the deepest boundary the edge's weights reach, the bytes of
   * weights it downloaded or read from its cache, and the bytes of all of them. */
  async weightsState() {
    return this.weights.describe();
  }

  /** "webgpu" or "cpu": where the edge half runs. */
  get backend() {
    return this.edge.backend;
  }

  /** Whether the client runs in a Web Worker (never, for this class: see `RemoteSplitClient`). */
  get inWorker() {
    return false;
  }

  /** Whether `split: "auto"` is available (the server publishes a cost table). */
  get hasPlanner() {
    return this.adaptive != null;
  }

  /** What a page needs to know of the client, as plain data (what the worker sends back). */
  describe() {
    return { backend: this.backend, wasmBuild: this.wasmBuild, capabilities: this.capabilities, info: this.info, hasPlanner: this.hasPlanner,
             defaultCodec: this.defaultCodec, timeoutMs: this.timeoutMs, boundaries: this.boundaries() };
  }

  /** The model's boundaries (name, shape, MACs). */
  boundaries() {
    return wasm.boundaries();
  }

  /** Auto mode's view of the link, the server and its choice (a plain object), or null. */
  async explain() {
    return this.adaptive ? this.adaptive.planner.explain(this.timeoutMs) : null;
  }

  /** Change what auto minimizes ("latency", "battery", "data", "balanced", the radio, the
   * real-time class…); the privacy floor and the other limits stay. */
  async setObjective(objective = {}) {
    if (!this.adaptive) throw new SplitError("no_planner", "this server publishes no cost table: there is no auto mode to set a goal for");
    const unknown = Object.keys(objective).filter((k) => !OBJECTIVE.includes(k));
    if (unknown.length) throw new SplitError("bad_option", `unknown objective field ${unknown.join(", ")}; use ${OBJECTIVE.join(", ")}`);
    const constraints = { ...this.constraints, ...objective };
    await wasmCall(() => this.adaptive.planner.setConstraints(constraints));
    this.constraints = constraints;
  }

  /** Whether auto may choose only placements the server reads nothing of: the encrypted
   * classifier (the server computes on ciphertext) or edge-only. Off, auto never encrypts. */
  async setEncrypted(on) {
    if (!this.adaptive) throw new SplitError("no_planner", "this server publishes no cost table: there is no auto mode to constrain");
    if (on) checkEncryptedAvailable(this);
    const constraints = { ...this.constraints, encrypted: Boolean(on) };
    await wasmCall(() => this.adaptive.planner.setConstraints(constraints));
    this.constraints = constraints;
  }

  /** Results remembered by content (0 turns the cache off). */
  async setCacheEntries(n) {
    this.edge.setCacheEntries(n);
  }

  /** Time the edge on this device: `{ names, ms }`, cumulative ms at each boundary. */
  profileEdge(repeats = 1) {
    return wasmCall(() => this.edge.profileEdge(repeats));
  }

  /** The adaptive planner (`split: "auto"`), when the server publishes a cost table. */
  get planner() {
    return this.adaptive?.planner ?? null;
  }

  /** The newest placement changes of the adaptive mode (at most 64): { atMs, from, to, reason }. */
  get switches() {
    return this.adaptive?.switches ?? [];
  }

  /** The model's boundaries (name, shape, MACs); available once a client was created. */
  static boundaries() {
    return wasm.boundaries();
  }

  /** The WebSocket's state: `{ state: "idle" | "connecting" | "open" | "reconnecting" |
   * "unreachable" | "closed", retryInMs?, code?, reason? }`. */
  get connectionState() {
    return this.connection.status;
  }

  /** Open the WebSocket if it is not open. */
  connect() {
    return this.connection.open();
  }

  /**
   * Classify an encoded image (JPEG or PNG bytes).
   * @param {Uint8Array} image
   * @param {string} split  "edge" (all local), "cloud" (upload the image), "auto" (the planner
   *   picks), "encrypted" (the classifier on the server, on features encrypted here), or a
   *   boundary name
   * @param {object} [options]  codec, stream, deadlineMs, modelInput, id, progressive, label
   *   (see `split-client.d.ts`)
   * @returns {Promise<object>}  { id, version, quality, model, mode, split, codec, backend, top,
   *   edgeMs, bytesSent, serverMs, queueMs, serverCached, roundTripMs, totalMs, load }; mode is "edge",
   *   "cloud", "split" or "cache"
   */
  async classify(image, split = "block5", options = {}) {
    if (split === "auto") {
      if (!this.adaptive) throw new SplitError("no_cost_table", "the server publishes no cost table; pick a split");
      return this.adaptive.classify(image, options);
    }
    if (split === "encrypted") {
      // The server sees only ciphertext: no privacy floor to check.
      this.encrypted ??= new EncryptedLink(this);
      return this.encrypted.classify(image, options.id ?? newResultId());
    }
    const resultId = options.id ?? newResultId();
    const codec = options.codec ?? this.defaultCodec;
    this.checkPrivacy(split);
    const started = performance.now();
    ({ image, options } = await this.prepare(image, split, options));
    for (let attempt = 0; ; attempt++) {
      const id = this.nextId++;
      let frame;
      let delta = false;
      let edgeMs = 0;
      let edgePaused = false;
      let edgeStagesMs;
      if (split === "cloud") {
        frame = options.modelInput ? wasm.encodeInputRequest(id, image) : wasm.encodeImageRequest(id, image);
      } else {
        await this.prepareEdge(split, codec);
        // A ping out that does not pause runs (sent while the link was down): its pong, if it
        // came during the last run, is read before this one, at the cost of one turn.
        if (this.pingsOut > this.pausingPings) await nextTurn();
        const holds = this.pausingPings === 0;
        if (holds) {
          this.edgeRuns++;
          this.edgeRunning = true;
        }
        let out;
        const pauses = this.pauses;
        try {
          out = await wasmCall(() => this.edge.run(image, split === "edge" ? "logits" : split, id, codec, Boolean(options.stream),
                                                   ...this.noiseArgs(options)));
        } finally {
          if (holds) this.edgeRunning = false;
        }
        edgeMs = performance.now() - started;
        edgePaused = this.pauses !== pauses;
        edgeStagesMs = out.stagesMs;
        if (out.top) {
          const quality = out.quality ?? "full";
          return { id: resultId, version: 1, quality, model: quality === "full" ? "full" : this.weights.lightModel,
                   mode: out.cached ? "cache" : "edge", split: split === "edge" ? "logits" : split, codec,
                   backend: this.backend, top: out.top, edgeMs, edgeStagesMs, edgePaused, bytesSent: 0, serverMs: 0, queueMs: 0, serverCached: false,
                   roundTripMs: 0, totalMs: edgeMs, load: null };
        }
        frame = out.frame;
        delta = out.delta;
      }
      if (frame.length > this.info.max_frame_bytes) {
        throw new SplitError("too_large", `a ${frame.length}-byte frame is over the server's limit of ${this.info.max_frame_bytes} bytes`);
      }
      const sent = performance.now();
      const request = this.connection.request(id, frame, options.deadlineMs ?? this.timeoutMs);
      request.catch(() => {}); // awaited below, after the partial answer
      const partial = options.progressive && !delta
        ? await this.partialAnswer(resultId, split, image, frame, request, started, Boolean(options.modelInput)) : null;
      let reply;
      try {
        reply = await request;
      } catch (e) {
        // The server lost this stream's reference (a dropped frame, a restart): the session
        // already switched to a keyframe, so send this image once more.
        if (e.code === "keyframe_required" && attempt === 0) continue;
        // The light model already answered: after a failure that may pass (the link, the
        // server's capacity) that answer stands, and the features wait for the server in the
        // backlog.
        if (partial?.quality === "reduced" && isTransient(e.code)) {
          return this.keepReduced(partial, resultId, split, codec, frame, options, e.message, started);
        }
        throw e;
      }
      const roundTripMs = performance.now() - sent;
      const t = reply.timings;
      const replaced = partial ? { previousTop: partial.top, changed: reply.top[0].class !== partial.top[0].class } : {};
      if (partial) this.resilience.announce({ id: resultId, version: 2, quality: "full", final: true, top: reply.top, ...replaced });
      return {
        id: resultId,
        version: partial ? 2 : 1,
        quality: "full",
        model: "full",
        ...replaced,
        mode: split === "cloud" ? "cloud" : "split",
        split: reply.from,
        codec: split === "cloud" ? "image" : codec,
        backend: split === "cloud" ? "server" : this.backend,
        top: reply.top,
        edgeMs,
        edgeStagesMs,
        edgePaused,
        bytesSent: frame.length,
        serverMs: t.queueMs + t.decodeMs + t.computeMs,
        queueMs: t.queueMs,
        serverCached: t.cached,
        roundTripMs,
        totalMs: performance.now() - started,
        load: reply.load,
      };
    }
  }

  /** The noise the features get before they leave (`options.noise`, else the client's), and a
   * fresh random seed for its draw: `[noise, seed]`, or `[]` without noise. */
  noiseArgs(options) {
    const noise = options.noise ?? this.noise;
    if (!noise) return [];
    const [hi, lo] = crypto.getRandomValues(new Uint32Array(2));
    return [noise, hi * 2 ** 21 + (lo >>> 11)]; // 53 random bits: exact in a double
  }

  /** Refuse a split that would send what the privacy floor keeps here: the photo (cloud) or
   * features of a boundary before the floor. */
  checkPrivacy(split) {
    if (this.privacyFloor <= 0 || split === "edge") return;
    const at = split === "cloud" ? 0 : boundaryIndex(split);
    if (at >= 0 && at < this.privacyFloor) {
      const floor = wasm.boundaries()[this.privacyFloor].name;
      throw new SplitError("privacy_floor", `${split === "cloud" ? "the photo" : `features at ${split}`} may not leave this device: ` +
        `the privacy floor is ${floor}; split at ${floor} or deeper, or run edge only`);
    }
  }

  /**
   * The light model's answer while the server computes the full one (`progressive`): announced
   * as version 1 of the result, unless the server's reply came first. Null when the light
   * model is not loaded yet (its download starts) or the full weights hold every stage (the
   * local answer would be the final one: nothing progressive about it).
   */
  async partialAnswer(resultId, split, image, frame, request, started, modelInput) {
    if (this.weights.through === "logits") return null;
    if (!this.weights.hasLight) {
      if (this.weights.lightModel) this.weights.ensureLight().catch(() => {});
      return null;
    }
    let replied = false;
    request.then(() => { replied = true; }, () => {});
    // A model input (the upload auto's cloud-only requests and an oversized photo's make) is
    // read as the server reads it, not cropped a second time as a photo.
    const local = await this.resilience.smallAnswer(image, modelInput) ?? (split !== "cloud"
      ? await wasmCall(() => this.edge.finishLocally(frame))
      : modelInput ? await wasmCall(() => this.edge.answerAt(image, FULL_INPUT, true))
        : await wasmCall(() => this.edge.run(image, "logits", this.nextId++, "f32", false)));
    if (replied) return null;
    const quality = local.quality ?? "full";
    const answer = { id: resultId, version: 1, quality, partial: true, top: local.top,
                     model: quality === "full" ? "full" : this.weights.lightModel, split,
                     inputSize: local.inputSize ?? FULL_INPUT, edgeMs: performance.now() - started };
    this.resilience.announce(answer);
    return answer;
  }

  /** A progressive request whose server never answered: the partial answer is the result, and
   * the frame waits in the backlog (a cloud upload has no features to keep). */
  async keepReduced(partial, resultId, split, codec, frame, options, reason, started) {
    const resumable = split !== "cloud";
    if (resumable) {
      await this.resilience.keep({ id: resultId, frame, split, codec, top: partial.top, model: partial.model, label: options.label });
    }
    const totalMs = performance.now() - started;
    return { id: resultId, version: 1, quality: "reduced", model: partial.model, mode: "edge", split, codec,
             inputSize: partial.inputSize, backend: this.backend, top: partial.top, edgeMs: partial.edgeMs, bytesSent: 0, serverMs: 0,
             queueMs: 0, serverCached: false, roundTripMs: 0, totalMs, load: null, fallback: reason, resumable };
  }

  /**
   * The bytes the edge and the server decode: JPEG and PNG as they are; another format this
   * browser decodes (WebP, AVIF, GIF, BMP) as a PNG of it; and for a cloud upload over the
   * server's frame limit (a 20 MB camera JPEG), the 224x224 model input instead of the photo.
   */
  async prepare(image, split, options) {
    const jpeg = image[0] === 0xff && image[1] === 0xd8;
    const png = image[0] === 0x89 && image[1] === 0x50 && image[2] === 0x4e && image[3] === 0x47;
    if (!jpeg && !png) image = await browserDecodedPng(image);
    const limit = this.info.max_frame_bytes - FRAME_HEADER_BYTES;
    if (split === "cloud" && !options.modelInput && image.length > limit) {
      return { image: await modelInputJpeg(image), options: { ...options, modelInput: true } };
    }
    return { image, options };
  }

  /** Send a ping with `probeBytes` of padding; resolves to { ms, load, skewed, gapMs } (null
   * when offline or unanswered within `timeoutMs`); `skewed`: an edge run that held the thread
   * overlapped it, so `ms` is not the network's; `gapMs`: the server's time between reading
   * the frame sent before it and reading it (null for a connection's first), which no stall
   * here skews: a padded ping sent right behind a bare one arrives its upload time later. With `pause`, edge runs started while it is
   * out pause between stages, so they may run meanwhile without skewing it by more than a
   * stage; without, they run whole (the pauses cost a throttled run 4%, docs/adaptive.md) and
   * its pong is read before the next run: for a ping that only asks whether the link is back. */
  async ping(probeBytes = 0, timeoutMs = PING_TIMEOUT_MS, pause = true) {
    const id = this.nextId++;
    const runs = this.edgeRuns;
    const busy = this.edgeRunning;
    this.pingsOut++;
    if (pause && this.pausingPings++ === 0) this.edge.setPause(this.countedPause);
    const sent = performance.now();
    try {
      const pong = await this.connection.request(id, wasm.encodePing(id, probeBytes), timeoutMs);
      const ms = performance.now() - sent;
      return { ms, load: pong.load, skewed: busy || this.edgeRunning || runs !== this.edgeRuns, gapMs: pong.gapMs };
    } catch {
      return null;
    } finally {
      this.pingsOut--;
      if (pause && --this.pausingPings === 0) this.edge.setPause(null);
    }
  }

  /** Time the codec alone in this browser: `{ bytes, encodeMs, decodeMs }` per run. */
  async benchCodec(image, split, codec, repeats = 10) {
    await this.prepareEdge(split, codec);
    return wasmCall(() => this.edge.benchCodec(image, split, codec, repeats));
  }

  /**
   * Join a device group (or start one without `options.code`): this device lends its model to
   * the group's members and can share a batch over them or run a pipeline across them.
   * @param {object} [options]  code, name, id, msPerImage, onMembers, onError, privacyFloor,
   *   codec (see `client/group.js`)
   * @returns {Promise<DeviceGroup>}
   */
  joinGroup(options = {}) {
    return DeviceGroup.open(this, options);
  }

  /** Answer a request frame another device relayed (a group member's task or last stage):
   * the reply frame's bytes. */
  answerRequest(frame) {
    return wasmCall(() => this.edge.answerRequest(frame));
  }

  /** A pipeline's middle stage: run a features frame on to `to`, coded with `codec`. */
  continueRequest(frame, to, codec) {
    return wasmCall(() => this.edge.continueRequest(frame, to, codec));
  }

  /** The first stage of a pipeline: `image` run to `split`, its features coded with `codec`,
   * as a request frame with id `id`. */
  async edgeFrame(image, split, codec, id) {
    await this.prepareEdge(split, codec);
    const out = await wasmCall(() => this.edge.run(image, split, id, codec, false));
    if (!out.frame) throw new SplitError("bad_option", `no frame to send at ${split}`);
    return out.frame;
  }

  /** Share `count` items over workers of the given speeds (`group::tasks`): each item's worker. */
  planTasks(count, msPerItem, transferMs) {
    return Array.from(wasm.planTasks(count, Float64Array.from(msPerItem), Float64Array.from(transferMs)));
  }

  /** Cut the network across devices (`group::chain`), priced with the server's cost table. */
  planChain(request, codec = this.defaultCodec) {
    if (!this.costTable) throw new SplitError("no_cost_table", "the server publishes no cost table; a pipeline needs one");
    const profile = this.backend === "webgpu" ? "browser-webgpu" : "browser-wasm-cpu";
    return wasmCall(() => wasm.planChain(this.costTable, profile, codec, request));
  }

  /** Close the connection for good and cancel every timer: probing, the backlog's retries.
   * Requests still waiting fail with "closed"; what is in the backlog stays for the next
   * client on this origin. */
  close() {
    this.adaptive?.stop();
    this.encrypted?.close();
    this.resilience?.stop();
    this.connection.shutdown();
  }
}
