// The client's worker: a whole `SplitClient` (wasm module, weights, edge compute, WebSocket,
// auto mode's planner and probes) off the page's thread, so a classification never freezes the
// page. `remote.js` is the other end. Messages:
//
//   in:  { id, method, args }                 a call on the client (`create` first)
//   out: { id, result } | { id, error }       its answer; errors as { code, message }
//        { event: "progress" | "switch" | "connection" | "update", value }
//                                            `onProgress` / `onSwitch` / `onConnection` / `onUpdate`
//                                            as they happen
//        { event: "group" | "group-error" | "group-progress", value }
//                                            a device group's members, refusals and batch progress
//        { event: "group-peer", value }        WebRTC work for the page (client/peer.js)
//        { event: "trap", value: { message } }  the wasm module trapped (a panic): after the
//                                            call's own "wasm_trap" error; the page replaces
//                                            this worker with a fresh one

import { SplitClient, SplitError } from "../split-client.js";
import { fromWasm, wasm } from "./wasm.js";
import { loadedUrls } from "./offline.js";

let client = null;
/** This worker's device group, when the page joined one (`client/group.js`). */
let group = null;

function inGroup() {
  if (!group) throw new SplitError("not_joined", "join a device group first");
  return group;
}

/** What the page may call; each returns something structured-cloneable. */
const methods = {
  async create(options) {
    if (client) throw new SplitError("bad_option", "this worker already has a client");
    client = await SplitClient.create({
      ...options,
      worker: false,
      onProgress: (value) => postMessage({ event: "progress", value }),
      onSwitch: (value) => postMessage({ event: "switch", value }),
      onConnection: (value) => postMessage({ event: "connection", value }),
      onUpdate: (value) => postMessage({ event: "update", value }),
    });
    return client.describe();
  },
  alive: () => true,
  /** The files this worker loaded (the client, the wasm build, `/api/info`), for the offline
   * start's service worker. */
  resources: () => loadedUrls(),
  /** What a bug in the module would do: the browser tests provoke a trap with it. */
  forcePanic: (message) => wasm.forcePanicForTests(message),
  classify: (image, split, options) => client.classify(image, split, options),
  ping: (probeBytes, timeoutMs, pause) => client.ping(probeBytes, timeoutMs, pause),
  benchCodec: (image, split, codec, repeats) => client.benchCodec(image, split, codec, repeats),
  profileEdge: (repeats) => client.profileEdge(repeats),
  explain: () => client.explain(),
  setObjective: (objective) => client.setObjective(objective),
  setEncrypted: (on) => client.setEncrypted(on),
  weightsState: () => client.weightsState(),
  backlogState: () => client.backlogState(),
  setCacheEntries: (n) => client.setCacheEntries(n),
  setTimeoutMs: (ms) => { client.timeoutMs = ms; },
  setDefaultCodec: (codec) => { client.defaultCodec = codec; },
  connect: async () => { await client.connect(); },
  close: () => client.close(),
  planTasks: (count, msPerItem, transferMs) => client.planTasks(count, msPerItem, transferMs),
  async joinGroup(options) {
    if (group) throw new SplitError("already_joined", `this client is in group ${group.code}; leave it first`);
    group = await client.joinGroup({
      ...options,
      // WebRTC exists on the page only: the page holds the direct channels for this group.
      bridge: (op) => postMessage({ event: "group-peer", value: op }),
      onMembers: (value) => postMessage({ event: "group", value }),
      onError: (e) => postMessage({ event: "group-error", value: { code: e.code, message: e.message } }),
    });
    return group.describe();
  },
  groupClassifyAll: (images, options) => inGroup().classifyAll(images, {
    ...options,
    onProgress: (value) => postMessage({ event: "group-progress", value }),
  }),
  groupClassify: (image, options) => inGroup().classify(image, options),
  groupPlan: (goal, peers) => inGroup().plan(goal, peers),
  groupSetView: (image) => inGroup().setView(image),
  groupFuse: (options) => inGroup().fuse(options),
  groupStats: () => ({ answered: inGroup().answered, load: inGroup().load }),
  groupPeer: (op) => inGroup().peers.fromPage(op),
  groupLinkChat: (port, peer) => inGroup().linkChat(port, peer),
  groupUnlinkChat: (peer) => inGroup().unlinkChat(peer),
  leaveGroup: () => {
    group?.leave();
    group = null;
  },
};

onmessage = async ({ data: { id, method, args } }) => {
  try {
    const f = methods[method];
    if (!f) throw new SplitError("bad_option", `no client method ${method}`);
    if (!client && method !== "create" && method !== "alive") throw new SplitError("bad_option", "the client is not created yet");
    postMessage({ id, result: await f(...args) });
  } catch (e) {
    const error = fromWasm(e);
    postMessage({ id, error: { code: error.code, message: error.message } });
    if (error.code === "wasm_trap") postMessage({ event: "trap", value: { message: error.message } });
  }
};
