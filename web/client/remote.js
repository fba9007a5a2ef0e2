// The page's side of a client that runs in a Web Worker (`worker.js`): the same API as
// `SplitClient`, every call a message. The wasm module, the weights and every edge run live in
// the worker, so the page's thread only posts bytes and receives plain objects.

import { notAsked } from "./offline.js";
import { PageLinks } from "./peer.js";
import { SWITCHES_KEPT, SplitError, keepNewest, packageRoot, startModuleWorker, webRtcCapability } from "./wasm.js";

/** How long a call into the worker may take before the page stops waiting (downloads, edge
 * compute and the server's reply each have deadlines of their own inside it). */
export const WORKER_CALL_TIMEOUT_MS = 120_000;
/** A worker that does not answer a bare ping in this long is taken for dead. */
const WORKER_PING_TIMEOUT_MS = 5_000;

/** The client's worker, from the package's root (`assetBase`: see `packageRoot`). */
function startWorker(assetBase) {
  return startModuleWorker(new URL("client/worker.js", packageRoot(assetBase)), "split-client");
}

export class RemoteSplitClient {
  /**
   * Start the worker and create the client in it. URLs are resolved here: a worker's own
   * location is its script, not the page.
   * @param {object} options  as `SplitClient.create`
   */
  static async create(options = {}) {
    const { onProgress, onSwitch, onConnection, onUpdate, ...rest } = options;
    const base = new URL(options.baseUrl ?? "/", location.href);
    const forward = { ...rest, baseUrl: base.href };
    if (options.wsUrl) forward.wsUrl = new URL(options.wsUrl, base).href;
    if (options.assetBase != null) forward.assetBase = packageRoot(options.assetBase).href;
    const remote = new RemoteSplitClient(startWorker(options.assetBase), options, forward);
    try {
      Object.assign(remote.state, await remote.callWithin(remote.createMs, "create", forward));
      remote.created = true;
    } catch (e) {
      remote.worker.terminate();
      throw e;
    }
    return remote;
  }

  constructor(worker, options, forward = {}) {
    this.callTimeoutMs = options.workerTimeoutMs ?? WORKER_CALL_TIMEOUT_MS;
    /** Loading the module and the weights: never less than the default deadline. */
    this.createMs = Math.max(WORKER_CALL_TIMEOUT_MS, this.callTimeoutMs);
    /** What `create` was given, to create the client again in a fresh worker after a trap. */
    this.forward = forward;
    /** Set once the worker is gone (terminated, crashed, wedged): every call fails at once. */
    this.dead = null;
    /** While a trapped worker is being replaced: calls wait for the new one. */
    this.replacing = null;
    /** Whether `create` succeeded in the worker once. */
    this.created = false;
    /** How many times a trap (a panic in the wasm module) replaced the worker. */
    this.restarts = 0;
    /** Settings the page changed after creation, applied again to a replacement. */
    this.overrides = {};
    this.pending = new Map();
    this.nextId = 1;
    this.state = {};
    /** The offline start (`client/offline.js`), set on the page: the worker has none. */
    this.offline = notAsked();
    /** The worker's WebSocket state, as it last reported it. */
    this.connectionState = { state: "idle" };
    /** The newest placement changes of the adaptive mode (`SWITCHES_KEPT`), as the worker
     * reports them. */
    this.switches = [];
    this.onProgress = options.onProgress ?? (() => {});
    this.onSwitch = options.onSwitch ?? (() => {});
    this.onConnection = options.onConnection ?? (() => {});
    this.onUpdate = options.onUpdate ?? (() => {});
    this.attach(worker);
  }

  /** Make `worker` the one calls go to, and listen to it. */
  attach(worker) {
    this.worker = worker;
    worker.onmessage = ({ data }) => {
      // Any event shows the worker alive and working (a download's progress, a batch's):
      // every waiting call's deadline starts again.
      if (data.event) for (const call of this.pending.values()) call.rearm();
      if (data.event === "progress") return this.onProgress(data.value);
      if (data.event === "trap") return this.replace(data.value.message);
      if (data.event?.startsWith("group")) return this.group?.event(data.event, data.value);
      if (data.event === "connection") {
        this.connectionState = data.value;
        return this.onConnection(data.value);
      }
      if (data.event === "update") return this.onUpdate(data.value);
      if (data.event === "switch") {
        keepNewest(this.switches, data.value, SWITCHES_KEPT);
        return this.onSwitch(data.value);
      }
      const call = this.pending.get(data.id);
      if (!call) return; // answered after its deadline: the caller has moved on
      this.pending.delete(data.id);
      clearTimeout(call.timer);
      if (data.error) call.reject(new SplitError(data.error.code, data.error.message));
      else call.resolve(data.result);
    };
    // A worker that cannot start (its script failed to load) or died: every waiting call fails.
    worker.onerror = (event) => {
      event.preventDefault?.();
      this.failPending(new SplitError("worker", `the client's worker failed: ${event.message ?? "unknown error"}`));
    };
    // A message the page cannot read back (it should never happen: everything sent is plain
    // data) fails what waits on it rather than leaving it waiting.
    worker.onmessageerror = () => {
      this.failPending(new SplitError("worker", "a message from the client's worker could not be read"));
    };
  }

  /**
   * The wasm module trapped (a panic; `message` says where and why): its instance cannot be
   * trusted again. The call that trapped has had its "wasm_trap" error; the worker goes, a
   * device group it was in is left, and a fresh worker loads the module and the client again
   * (the weights from Cache Storage). Calls the old worker had not answered are sent to the new
   * one, and calls made meanwhile wait for it.
   */
  replace(message) {
    // A trap while creating (the first time or a replacement) is not retried: it would recur.
    if (this.dead || this.replacing || !this.created) return;
    const old = this.worker;
    old.onmessage = old.onerror = old.onmessageerror = null;
    old.terminate();
    const group = this.group;
    this.group = null;
    if (group) {
      group.pageLinks?.toPage({ op: "close" });
      group.onError(new SplitError("wasm_trap", `the device group was left: ${message}`));
    }
    this.restarts += 1;
    const unanswered = [...this.pending.values()];
    this.pending.clear();
    this.replacing = (async () => {
      this.attach(startWorker(this.forward.assetBase));
      try {
        Object.assign(this.state, await this.post(this.createMs, "create", [this.forward]));
        for (const [method, value] of Object.entries(this.overrides)) await this.post(this.callTimeoutMs, method, [value]);
        for (const call of unanswered) {
          this.pending.set(call.message.id, call);
          call.rearm();
          this.worker.postMessage(call.message);
        }
      } catch (e) {
        for (const call of unanswered) {
          clearTimeout(call.timer);
          call.reject(new SplitError("wasm_trap", message));
        }
        this.kill(new SplitError("worker", `the client's worker could not be replaced after a trap: ${e.message}`));
      } finally {
        this.replacing = null;
      }
    })();
  }

  /** Reject every call still waiting for the worker with `error`. */
  failPending(error) {
    for (const call of this.pending.values()) {
      clearTimeout(call.timer);
      call.reject(error);
    }
    this.pending.clear();
  }

  /** Call `method` in the worker; rejects with "timeout" after `timeoutMs`, and with
   * "worker" once the worker is gone. */
  call(method, ...args) {
    return this.callWithin(this.callTimeoutMs, method, ...args);
  }

  callWithin(timeoutMs, method, ...args) {
    if (this.dead) return Promise.reject(this.dead);
    if (this.replacing) return this.replacing.then(() => this.callWithin(timeoutMs, method, ...args));
    return this.post(timeoutMs, method, args);
  }

  /** Post one call to the worker now, whatever is in progress. */
  post(timeoutMs, method, args, transfer = []) {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const call = { resolve, reject, timer: null, message: { id, method, args } };
      // An event from the worker (progress of a download or a batch) starts it again.
      call.rearm = () => {
        clearTimeout(call.timer);
        call.timer = setTimeout(() => {
          this.pending.delete(id);
          reject(new SplitError("timeout", `the client's worker did not answer ${method} within ${timeoutMs} ms`));
          if (method !== "alive") this.checkAlive();
        }, timeoutMs);
      };
      call.rearm();
      this.pending.set(id, call);
      this.worker.postMessage(call.message, transfer);
    });
  }

  /** After a call ran out of time: a worker that does not answer a bare ping either is taken
   * for dead, stopped, and every call waiting on it fails with "worker". */
  async checkAlive() {
    if (this.dead || this.checking) return;
    this.checking = true;
    try {
      await this.callWithin(WORKER_PING_TIMEOUT_MS, "alive");
    } catch (e) {
      if (e.code === "timeout") this.kill(new SplitError("worker", "the client's worker stopped answering; create a new client"));
    } finally {
      this.checking = false;
    }
  }

  /** Stop the worker for good and fail every call with `error`. */
  kill(error) {
    this.dead = error;
    this.worker.terminate();
    this.failPending(error);
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

  /** The worker's capabilities; the client itself runs in the worker. */
  get capabilities() {
    return this.state.capabilities
      && { ...this.state.capabilities, worker: { available: true, reason: null }, webrtc: webRtcCapability(),
           offline: this.offline };
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
    this.overrides.setDefaultCodec = codec;
    this.call("setDefaultCodec", codec);
  }

  get timeoutMs() {
    return this.state.timeoutMs;
  }

  set timeoutMs(ms) {
    this.state.timeoutMs = ms;
    this.overrides.setTimeoutMs = ms;
    this.call("setTimeoutMs", ms);
  }

  boundaries() {
    return this.state.boundaries;
  }

  classify(image, split = "block5", options = {}) {
    return this.call("classify", image, split, options);
  }

  ping(probeBytes = 0, timeoutMs = undefined, pause = true) {
    return this.call("ping", probeBytes, timeoutMs, pause);
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

  setObjective(objective) {
    return this.call("setObjective", objective);
  }

  setEncrypted(on) {
    return this.call("setEncrypted", on);
  }

  weightsState() {
    return this.call("weightsState");
  }

  backlogState() {
    return this.call("backlogState");
  }

  setCacheEntries(n) {
    this.overrides.setCacheEntries = n;
    return this.call("setCacheEntries", n);
  }

  connect() {
    return this.call("connect");
  }

  /** Close the connection and stop the client's timers (in the worker, which stays: call
   * `terminate()` to stop it too). */
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
    this.kill(new SplitError("worker", "the client was terminated"));
  }
}

/** A device group joined in the worker, as the page sees it: the same methods as
 * `DeviceGroup`, every call a message. */
export class RemoteDeviceGroup {
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

  /** Carry a split chat's frames between `port` and member `peer` (`DeviceGroup.linkChat`). */
  linkChat(port, peer) {
    return this.remote.post(this.remote.callTimeoutMs, "groupLinkChat", [port, peer], [port]);
  }

  /** Stop carrying member `peer`'s chat frames (`DeviceGroup.unlinkChat`). */
  unlinkChat(peer) {
    return this.remote.call("groupUnlinkChat", peer);
  }

  leave() {
    this.remote.group = null;
    return this.remote.call("leaveGroup");
  }
}

