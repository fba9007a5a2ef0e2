// The page's side of a client that runs in a Web Worker (`worker.js`): the same API as
// `SplitClient`, every call a message. The wasm module, the weights and every edge run live in
// the worker, so the page's thread only posts bytes and receives plain objects.

import { SplitError } from "./wasm.js";

export class RemoteSplitClient {
  /**
   * Start the worker and create the client in it. URLs are resolved here: a worker's own
   * location is its script, not the page.
   * @param {object} options  as `SplitClient.create`
   */
  static async create(options = {}) {
    const worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module", name: "split-client" });
    const remote = new RemoteSplitClient(worker, options);
    const { onProgress, onSwitch, onConnection, onUpdate, ...rest } = options;
    const base = new URL(options.baseUrl ?? "/", location.href);
    const forward = { ...rest, baseUrl: base.href };
    if (options.wsUrl) forward.wsUrl = new URL(options.wsUrl, base).href;
    try {
      Object.assign(remote.state, await remote.call("create", forward));
    } catch (e) {
      worker.terminate();
      throw e;
    }
    return remote;
  }

  constructor(worker, options) {
    this.worker = worker;
    this.pending = new Map();
    this.nextId = 1;
    this.state = {};
    /** The worker's WebSocket state, as it last reported it. */
    this.connectionState = { state: "idle" };
    /** Every placement change of the adaptive mode, as the worker reports them. */
    this.switches = [];
    const onProgress = options.onProgress ?? (() => {});
    const onSwitch = options.onSwitch ?? (() => {});
    const onConnection = options.onConnection ?? (() => {});
    const onUpdate = options.onUpdate ?? (() => {});
    worker.onmessage = ({ data }) => {
      if (data.event === "progress") return onProgress(data.value);
      if (data.event === "connection") {
        this.connectionState = data.value;
        return onConnection(data.value);
      }
      if (data.event === "update") return onUpdate(data.value);
      if (data.event === "switch") {
        this.switches.push(data.value);
        return onSwitch(data.value);
      }
      const call = this.pending.get(data.id);
      if (!call) return;
      this.pending.delete(data.id);
      if (data.error) call.reject(new SplitError(data.error.code, data.error.message));
      else call.resolve(data.result);
    };
    // A worker that cannot start (its script failed to load) or died: every waiting call fails.
    worker.onerror = (event) => {
      event.preventDefault?.();
      this.failPending(new SplitError("worker", `the client's worker failed: ${event.message ?? "unknown error"}`));
    };
  }

  /** Reject every call still waiting for the worker with `error`. */
  failPending(error) {
    for (const call of this.pending.values()) call.reject(error);
    this.pending.clear();
  }

  /** Call `method` in the worker. */
  call(method, ...args) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, method, args });
    });
  }

  /** Whether the client runs in a Web Worker: always, for this class. */
  get inWorker() {
    return true;
  }

  get backend() {
    return this.state.backend;
  }

  get wasmBuild() {
    return this.state.wasmBuild;
  }

  get info() {
    return this.state.info;
  }

  get hasPlanner() {
    return this.state.hasPlanner;
  }

  get defaultCodec() {
    return this.state.defaultCodec;
  }

  set defaultCodec(codec) {
    this.state.defaultCodec = codec;
    this.call("setDefaultCodec", codec);
  }

  get timeoutMs() {
    return this.state.timeoutMs;
  }

  set timeoutMs(ms) {
    this.state.timeoutMs = ms;
    this.call("setTimeoutMs", ms);
  }

  boundaries() {
    return this.state.boundaries;
  }

  classify(image, split = "block5", options = {}) {
    return this.call("classify", image, split, options);
  }

  ping(probeBytes = 0, timeoutMs = undefined) {
    return this.call("ping", probeBytes, timeoutMs);
  }

  benchCodec(image, split, codec, repeats = 10) {
    return this.call("benchCodec", image, split, codec, repeats);
  }

  profileEdge(repeats = 1) {
    return this.call("profileEdge", repeats);
  }

  explain() {
    return this.call("explain");
  }

  weightsState() {
    return this.call("weightsState");
  }

  backlogState() {
    return this.call("backlogState");
  }

  setCacheEntries(n) {
    return this.call("setCacheEntries", n);
  }

  connect() {
    return this.call("connect");
  }

  close() {
    this.call("close").catch(() => {});
  }

  /** Stop the worker: the weights and the connection go with it; calls fail afterwards. */
  terminate() {
    this.worker.terminate();
    this.failPending(new SplitError("worker", "the client was terminated"));
  }
}
