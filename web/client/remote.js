// The page's side of a client that runs in a Web Worker (`worker.js`): the same API as
// `SplitClient`, every call a message. The wasm module, the weights and every edge run live in
// the worker, so the page's thread only posts bytes and receives plain objects.

import { PageLinks } from "./peer.js";
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
      if (data.event?.startsWith("group")) return this.group?.event(data.event, data.value);
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

  /** Share `count` items over workers of the given speeds (`SplitClient.planTasks`). */
  planTasks(count, msPerItem, transferMs) {
    return this.call("planTasks", count, msPerItem, transferMs);
  }

  /** Join a device group from the worker; the page's handle on it (`client/group.js`). */
  async joinGroup(options = {}) {
    const { onMembers, onError, onProgress, ...rest } = options;
    const handle = new RemoteDeviceGroup(this, { onMembers, onError, onProgress });
    this.group = handle;
    try {
      handle.update(await this.call("joinGroup", rest));
    } catch (e) {
      this.group = null;
      throw e;
    }
    return handle;
  }

  /** Stop the worker: the weights and the connection go with it; calls fail afterwards. */
  terminate() {
    this.worker.terminate();
    this.failPending(new SplitError("worker", "the client was terminated"));
  }
}

/** A device group joined in the worker, as the page sees it: the same methods as
 * `DeviceGroup`, every call a message. */
class RemoteDeviceGroup {
  constructor(remote, { onMembers, onError, onProgress }) {
    this.remote = remote;
    /** The group's WebRTC connections: on the page, since a worker has none. */
    this.pageLinks = typeof RTCPeerConnection === "undefined" ? null
      : new PageLinks((op) => remote.call("groupPeer", op).catch(() => {}));
    this.onMembers = onMembers ?? (() => {});
    this.onError = onError ?? ((e) => console.warn("device group:", e.message));
    this.onProgress = onProgress ?? (() => {});
    this.code = null;
    this.you = 0;
    this.members = [];
  }

  update(state) {
    Object.assign(this, { code: state.code, codeExpiresS: state.codeExpiresS, you: state.you, members: state.members, links: state.links ?? {} });
  }

  event(kind, value) {
    if (kind === "group") {
      this.update(value);
      this.onMembers(value);
    } else if (kind === "group-error") {
      this.onError(new SplitError(value.code, value.message));
    } else if (kind === "group-progress") {
      this.onProgress(value);
    } else if (kind === "group-peer") {
      this.pageLinks?.toPage(value);
    }
  }

  describe() {
    return { code: this.code, codeExpiresS: this.codeExpiresS, you: this.you, members: this.members, links: this.links };
  }

  classifyAll(images, options = {}) {
    const { onProgress, ...rest } = options;
    if (onProgress) this.onProgress = onProgress;
    return this.remote.call("groupClassifyAll", images, rest);
  }

  classify(image, options = {}) {
    return this.remote.call("groupClassify", image, options);
  }

  plan(goal = "latency", peers = null) {
    return this.remote.call("groupPlan", goal, peers);
  }

  setView(image) {
    return this.remote.call("groupSetView", image);
  }

  fuse(options = {}) {
    return this.remote.call("groupFuse", options);
  }

  stats() {
    return this.remote.call("groupStats");
  }

  leave() {
    this.remote.group = null;
    return this.remote.call("leaveGroup");
  }
}

