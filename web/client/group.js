// A device group: this device's membership in a group of devices that pool their compute
// (docs/multi-device.md). It lives beside the `SplitClient` whose model it lends (in the
// client's worker by default; `remote.js` gives the page the same API), talks to the server's
// `/group` socket, and does three things:
//
//   - answers what other members send it: a whole image (a task of someone's batch) or the
//     features of a pipeline stage, which it runs on and passes to the next stage or answers;
//   - `classifyAll(images)`: shares a batch over the members in proportion to their measured
//     speed (the shared crate's `group::tasks`), results in input order, items of a member that
//     leaves shared out again;
//   - `classify(image)`: one image through a pipeline across members, cut where the shared
//     chain planner says (`group::chain`), re-planned and re-sent when a stage leaves.
//
// Frames between members are the protocol's own request and reply frames, in the relay
// envelope of shared/src/group/relay.rs: over a WebRTC DataChannel between two browsers once
// it is open (`via: "p2p"`, client/peer.js), else passed on by the server (`via: "relay"`).

import { BridgedLinks, PeerLinks } from "./peer.js";
import { SplitError, fetchCached, serverUrl, wasm, wasmCall } from "./wasm.js";

/** The relay envelope (shared/src/group/relay.rs): "SPLG", version u16, reserved u16, peer u32. */
const RELAY_MAGIC = [0x53, 0x50, 0x4c, 0x47];
const RELAY_VERSION = 1;
const RELAY_HEADER_BYTES = 12;
/** The first bytes of a language model's frame (`LLM_MAGIC`, shared/src/protocol/llm.rs). */
const LLM_MAGIC = [0x53, 0x50, 0x4c, 0x4d];
/** Where such a frame's kind is, and the kinds the group tells apart (shared/src/protocol/llm.rs):
 * an open, the server's answer to it, and the first of the replies' kinds. */
const LLM_KIND_AT = 6;
const LLM_OPEN = 1;
const LLM_OPENED = 0x81;
const LLM_FIRST_REPLY = 0x80;
/** `group::HEARTBEAT_INTERVAL_S`: how often this device reports its status. */
const HEARTBEAT_MS = 5_000;
/** How long opening the group socket and being answered `joined` may take (`timeoutMs`). */
const JOIN_TIMEOUT_MS = 15_000;
/** How long a request to another member may take before it counts as lost. */
const MEMBER_TIMEOUT_MS = 60_000;
/** Photos of a batch in flight to another member at once (measured in docs/multi-device.md:
 * one at a time left a native member idle for most of each of the coordinator's own photos). */
const REMOTE_IN_FLIGHT = 4;
/** Routes kept per sender before their frames arrive (`device-agent` keeps as many). */
const MAX_ROUTES_PER_PEER = 64;
/** Positions one asker's split chat may reach at this member (`llm: true`). */
const MEMBER_CHAT_POSITIONS = 1024;
/** The largest chat frame a direct channel must carry for a conversation to take it: a resent
 * frame of `MEMBER_RESEND_ROWS` (client/chat-worker.js) f32 rows and its headers. */
const CHAT_CHANNEL_BYTES = 64 * 576 * 4 + 64;

function wrap(peer, frame) {
  const out = new Uint8Array(RELAY_HEADER_BYTES + frame.length);
  out.set(RELAY_MAGIC, 0);
  const view = new DataView(out.buffer);
  view.setUint16(4, RELAY_VERSION, true);
  view.setUint32(8, peer, true);
  out.set(frame, RELAY_HEADER_BYTES);
  return out;
}

function unwrap(bytes) {
  if (bytes.length < RELAY_HEADER_BYTES || RELAY_MAGIC.some((b, i) => bytes[i] !== b)) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  return { peer: view.getUint32(8, true), frame: bytes.subarray(RELAY_HEADER_BYTES) };
}

/** The Battery Status API where the browser has it (Chromium), else "unknown". */
async function powerState() {
  try {
    const battery = await navigator.getBattery?.();
    if (!battery) return { state: "unknown" };
    return battery.charging ? { state: "charging" } : { state: "battery", level: battery.level };
  } catch {
    return { state: "unknown" };
  }
}

/** A stable id for this browser profile, kept in localStorage where there is one. */
function deviceId() {
  const fresh = () => `dev-${crypto.getRandomValues(new Uint32Array(2)).join("")}`;
  try {
    const stored = globalThis.localStorage?.getItem("split-device-id");
    if (stored) return stored;
    const id = fresh();
    globalThis.localStorage?.setItem("split-device-id", id);
    return id;
  } catch {
    return fresh();
  }
}

export class DeviceGroup {
  /**
   * Join the group `options.code`, or start one without a code.
   * @param {object} client  the `SplitClient` whose model this device lends (all stages loaded)
   * @param {object} options  code, name, id, url (the server's `/group` socket, when not beside
   *   its `/ws`), p2p (false: no direct channels), msPerImage (else measured now), onMembers,
   *   onError (a refusal after joining), privacyFloor (a boundary name: the first stage of this
   *   device's pipelines keeps at least that), codec (features between members; default: the
   *   client's), timeoutMs (opening and joining, default 15000; then "timeout"), llm (true:
   *   run the middle blocks of other members' split chats, downloading the language model's
   *   share at the first; the member list says `llm: true`)
   */
  static async open(client, options = {}) {
    const url = new URL(options.url ?? client.connection.url);
    if (!options.url) url.pathname = url.pathname.replace(/\/ws$/, "/group");
    await client.prepareEdge("logits", client.defaultCodec);
    const msPerImage = options.msPerImage ?? (await client.profileEdge(1)).ms.at(-1);
    const id = options.id ?? deviceId();
    const device = {
      id,
      // Two browsers of one person must not look alike: the end of the id tells them apart.
      name: options.name ?? `${client.backend === "webgpu" ? "browser (WebGPU)" : "browser (CPU)"} ${id.slice(-4)}`,
      backend: client.backend === "webgpu" ? "webgpu" : "cpu",
      msPerImage,
      power: await powerState(),
      ...(options.llm ? { llm: true } : {}),
    };
    const socket = new WebSocket(url, client.connection.protocols);
    socket.binaryType = "arraybuffer";
    const group = new DeviceGroup(client, socket, device, options);
    const timeoutMs = options.timeoutMs ?? JOIN_TIMEOUT_MS;
    let timer = null;
    await new Promise((resolve, reject) => {
      // A handshake or a `joined` that never comes (a proxy that accepts and stalls).
      timer = setTimeout(() => {
        group.joining = null;
        socket.onclose = null;
        socket.close();
        reject(new SplitError("timeout", `no answer from ${url} within ${timeoutMs} ms`));
      }, timeoutMs);
      socket.onopen = () => {
        const hello = options.code
          ? { type: "join", code: String(options.code).toUpperCase(), device }
          : { type: "create", device };
        socket.send(JSON.stringify(hello));
      };
      socket.onerror = () => reject(new SplitError("network", `cannot open ${url}`));
      socket.onclose = (e) => reject(new SplitError("network", `${url} closed: ${e.code} ${e.reason}`));
      group.joining = { resolve, reject };
    }).finally(() => clearTimeout(timer));
    socket.onclose = (e) => group.closed(e);
    socket.onerror = () => {};
    group.heartbeat = setInterval(() => group.sendStatus(), HEARTBEAT_MS);
    return group;
  }

  constructor(client, socket, device, options) {
    this.client = client;
    this.socket = socket;
    this.device = device;
    this.codec = options.codec ?? client.defaultCodec;
    this.privacyFloor = options.privacyFloor ?? "";
    this.onMembers = options.onMembers ?? (() => {});
    this.onError = options.onError ?? ((e) => console.warn("device group:", e.message));
    /** The group's join code, this device's peer number, and everyone in the group. */
    this.code = null;
    this.you = 0;
    this.members = [];
    /** Requests this device is working on for others: reported in every status. */
    this.load = 0;
    /** Replies awaited, by request id: { resolve, reject, peers, timer }. */
    this.pending = new Map();
    /** Pipeline routes received, per sender, in order: the next frame from that sender follows
     * the first one (the server keeps one sender's messages in order). */
    this.routes = new Map();
    /** How each pipeline request's hops went, by request id (the last stage reports). */
    this.hops = new Map();
    this.nextId = 1;
    this.answered = 0;
    /** Split chats of this device whose frames go through a member: port by member peer. */
    this.chatLinks = new Map();
    /** Other members' split chats whose middle blocks run here (`llm: true`): by asker, its
     * stage's end (`to`), the socket to the server's blocks, and the queue its frames wait in. */
    this.chatStages = new Map();
    /** The language model's share these stages run on (wasm `LlmMember`), once loaded. */
    this.llmMember = null;
    /** Direct channels to the other browsers (off with `options.p2p === false`): held here on
     * a page, by the page for a group in the client's worker (`options.bridge`). */
    this.peers = options.bridge ? new BridgedLinks(this, options.bridge) : new PeerLinks(this);
    if (options.p2p === false) this.peers.available = false;
    socket.onmessage = ({ data }) => {
      if (typeof data === "string") this.onText(JSON.parse(data));
      else this.onRelayed(new Uint8Array(data));
    };
  }

  /** The member with peer number `peer`. */
  member(peer) {
    return this.members.find((m) => m.peer === peer);
  }

  onText(message) {
    switch (message.type) {
      case "joined":
        this.code = message.code;
        this.codeExpiresS = message.codeExpiresS;
        this.you = message.you;
        this.setMembers(message.members);
        this.joining?.resolve();
        this.joining = null;
        break;
      case "members":
        this.setMembers(message.members);
        break;
      case "signal":
        if (message.data?.webrtc) this.peers.onSignal(message.from, message.data.webrtc);
        else this.onSignalData(message.from, message.data, "relay");
        break;
      case "error": {
        const error = new SplitError(message.code, message.message);
        if (this.joining) {
          this.joining.reject(error);
          this.joining = null;
          this.socket.close();
        } else {
          this.onError(error);
        }
        break;
      }
      default:
        break;
    }
  }

  /** A signal from another member, through the server or over a direct channel. */
  onSignalData(from, data, via) {
    if (data?.route) {
      // Checked against the one definition the native agent reads too (`shared::group::route`,
      // through the module); the sender hears why a route was refused instead of waiting.
      let route;
      try {
        route = wasm.parseRoute(data.route);
      } catch (e) {
        this.path(from).signal({ failed: { id: data.route.id, code: "bad_route", text: e.message } });
        return;
      }
      // Routes queue per sender and path: a route arrives the way its frame does.
      const key = `${from}/${via}`;
      const queue = this.routes.get(key) ?? [];
      if (queue.length < MAX_ROUTES_PER_PEER) queue.push(route);
      this.routes.set(key, queue);
    } else if (data?.hops) {
      // Only for a request of ours still waiting: a member cannot make this map grow.
      if (this.pending.has(data.hops.id)) this.hops.set(data.hops.id, data.hops.list);
    } else if (data?.llmStage) {
      // Where this member's stage of the asker's next split chat ends (the open checks it).
      if (this.device.llm && Number.isInteger(data.llmStage.to)) this.chatStage(from).to = data.llmStage.to;
    } else if (data?.view) {
      this.answerView(from, data.view.id);
    } else if (data?.failed) {
      // A pipeline stage could not go on: its request fails with the stage's reason.
      const { id, code, text } = data.failed;
      const wait = this.pending.get(id);
      if (wait) {
        this.pending.delete(id);
        clearTimeout(wait.timer);
        wait.reject(new SplitError(code ?? "internal", `peer ${from}: ${text}`));
      }
    }
  }

  /** What arrives on a direct channel: signals as text, frames as bytes. */
  onChannelText(peer, data) {
    this.onSignalData(peer, data, "p2p");
  }

  onChannelBinary(peer, bytes) {
    const envelope = unwrap(bytes);
    // The channel says who sent it, whatever the envelope claims.
    if (envelope) this.onFrame(peer, envelope.frame, "p2p");
  }

  /** A frame the server relayed. */
  onRelayed(bytes) {
    const envelope = unwrap(bytes);
    if (envelope) this.onFrame(envelope.peer, envelope.frame, "relay");
  }

  /** A channel opened or closed. */
  onLinks() {
    this.announce();
  }

  /** Tell the app what the group looks like now. */
  announce() {
    try {
      this.onMembers(this.describe());
    } catch (e) {
      console.error("onMembers callback failed", e);
    }
  }

  /** How to reach `peer` with a message of `bytes`: its direct channel when open and large
   * enough, else the server. The same path for a request's route and its frame. */
  path(peer, bytes = 0) {
    const channel = this.peers.channel(peer, bytes);
    if (channel) {
      return {
        via: "p2p",
        send: (frame) => channel.send(wrap(this.you, frame)),
        signal: (data) => channel.send(JSON.stringify(data)),
      };
    }
    return { via: "relay", send: (frame) => this.send(peer, frame), signal: (data) => this.signal(peer, data) };
  }

  /** A signal through the server (WebRTC setup). */
  signalServer(peer, data) {
    this.signal(peer, data);
  }

  setMembers(members) {
    const gone = this.members.filter((m) => !members.some((n) => n.peer === m.peer));
    this.members = members;
    this.peers.update(members);
    // A request waiting on a member that left cannot be answered: its owner re-plans.
    for (const m of gone) {
      this.endChat(m.peer);
      const chat = this.chatLinks.get(m.peer);
      if (chat) {
        chat.postMessage({ left: `${m.name} (peer ${m.peer}) left the group` });
        chat.close();
        this.chatLinks.delete(m.peer);
      }
      for (const [id, wait] of this.pending) {
        if (wait.peers.includes(m.peer)) {
          this.pending.delete(id);
          clearTimeout(wait.timer);
          wait.reject(new SplitError("member_left", `${m.name} (peer ${m.peer}) left the group`));
        }
      }
    }
    this.announce();
  }

  /** The group as plain data: code, you, members. */
  describe() {
    return { code: this.code, codeExpiresS: this.codeExpiresS, you: this.you, members: this.members, links: this.peers.states() };
  }

  async sendStatus() {
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.socket.send(JSON.stringify({ type: "status", load: this.load, power: await powerState() }));
  }

  closed(event) {
    clearInterval(this.heartbeat);
    this.peers.close();
    for (const port of this.chatLinks.values()) {
      port.postMessage({ left: `the group's socket closed (${event.code})` });
      port.close();
    }
    this.chatLinks.clear();
    for (const wait of this.pending.values()) {
      clearTimeout(wait.timer);
      wait.reject(new SplitError("network", `the group's socket closed: ${event.code} ${event.reason}`));
    }
    this.pending.clear();
  }

  /**
   * Carry a split chat's `/llm` frames between `port` (a `MessagePort`: the chat's worker holds
   * the other end) and member `peer`, which runs blocks of it (docs/llm.md, "Through a
   * device group"). Messages on the port: in, `{ signal }` (the `llmStage` before an open) and
   * `{ frame }`; out, `{ via }` (how this conversation's frames go: "p2p" or "relay"),
   * `{ frame }` (the member's replies) and `{ left }` (the member left the group, or the
   * direct channel closed under a conversation). A conversation keeps the way its signal
   * went, the member's direct channel when it is open then (the server then never sees the
   * rows), else the server's relay, so that no frame overtakes another; one chat per member.
   */
  linkChat(port, peer) {
    const member = this.member(peer);
    if (!member || peer === this.you) throw new SplitError("unknown_peer", `no other member ${peer} in this group`);
    this.chatLinks.get(peer)?.close();
    this.chatLinks.set(peer, port);
    let path = null;
    port.onmessage = ({ data }) => {
      try {
        if (data?.signal) {
          path = this.path(peer, CHAT_CHANNEL_BYTES);
          port.postMessage({ via: path.via });
          path.signal(data.signal);
        } else if (data?.frame) {
          const frame = new Uint8Array(data.frame);
          if (path.via === "p2p" && !this.peers.channel(peer, frame.length)) {
            throw new SplitError("network", "the direct channel closed, or the frame outgrew it");
          }
          path.send(frame);
        }
      } catch (e) {
        port.postMessage({ left: `the way to ${member.name} failed: ${e.message}` });
      }
    };
  }

  /** Asker `peer`'s split chat at this member. */
  chatStage(peer) {
    let stage = this.chatStages.get(peer);
    if (!stage) {
      stage = { to: null, server: null, queue: Promise.resolve() };
      this.chatStages.set(peer, stage);
    }
    return stage;
  }

  /** End asker `peer`'s split chat here: its socket to the server closes. */
  endChat(peer) {
    const stage = this.chatStages.get(peer);
    if (!stage) return;
    this.chatStages.delete(peer);
    if (stage.server) {
      stage.server.onclose = null;
      stage.server.close();
    }
    this.llmMember?.forget(peer);
  }

  /** The language model's share holding blocks `0..to` at least (downloaded, or from the
   * browser's cache), as the wasm `LlmMember`; a larger stage than the share loaded replaces
   * it (the conversations on the old one end). */
  async memberShare(to) {
    if (this.llmMember && this.llmMember.blocks() >= to) return this.llmMember;
    // The server beside the client's socket (`…/ws`).
    const base = new URL(this.client.connection.url);
    base.protocol = base.protocol === "wss:" ? "https:" : "http:";
    base.pathname = base.pathname.replace(/[^/]*$/, "");
    const llm = (await (await fetch(new URL("api/info", base))).json()).llm;
    if (!llm) throw new SplitError("no_model", "the server hosts no language model");
    this.llmInfo = { llm, base };
    const bytes = await fetchCached(serverUrl(`${llm.edge_url}${to}`, base), `${llm.file_id}-${to}`, "llm-weights", () => {});
    this.llmMember = await wasmCall(() => wasm.LlmMember.load(bytes, MEMBER_CHAT_POSITIONS));
    return this.llmMember;
  }

  /** One frame of asker `from`'s split chat: this member's blocks, then on to the server (or
   * back, as the last stage); the server's replies go back to the asker as they are. Through
   * the relay both ways, like the asker's frames. */
  async serveChat(from, stage, frame, via) {
    const opening = frame[LLM_KIND_AT] === LLM_OPEN;
    // Replies go back the way the conversation's open came.
    if (opening) stage.via = via;
    const back = (bytes) => this.replyChat(from, stage, bytes);
    let member = this.llmMember;
    if (opening || !member) {
      try {
        member = await this.memberShare(stage.to ?? 30);
      } catch (e) {
        back(wasm.llmRefusal(frame) ?? new Uint8Array());
        throw e;
      }
    }
    const action = await wasmCall(() => member.handle(from, frame, opening ? stage.to : undefined));
    if (opening) stage.to = null;
    if (action.kind === "reply") {
      if (opening && stage.server) this.closeServer(stage);
      back(action.frame);
    } else if (action.kind === "open") {
      this.closeServer(stage);
      let opened;
      try {
        opened = await this.openServer(from, stage, action.frame);
      } catch (e) {
        // The server cannot be reached from here: the asker tries again, then gives up.
        member.forget(from);
        back(wasm.LlmMember.lostFrame());
        throw e;
      }
      // Else the server's refusal went to the asker.
      if (opened) back(action.opened);
    } else if (action.kind === "forward") {
      if (stage.server?.readyState === WebSocket.OPEN) {
        stage.server.send(action.frame);
      } else {
        member.forget(from);
        back(wasm.LlmMember.lostFrame());
      }
    }
  }

  /** Send asker `from` a frame of its chat, the way its conversation came (a direct channel
   * gone meanwhile: the relay, and the asker hears of it by its own side's failure). */
  replyChat(from, stage, bytes) {
    const channel = stage.via === "p2p" ? this.peers.channel(from, bytes.length) : null;
    if (channel) channel.send(wrap(this.you, bytes));
    else this.send(from, bytes);
  }

  closeServer(stage) {
    if (!stage.server) return;
    stage.server.onclose = null;
    stage.server.close();
    stage.server = null;
  }

  /** Open the server's part of asker `from`'s conversation with `open`; resolves when the
   * server answered it (its refusal goes to the asker, and then resolves null). */
  openServer(from, stage, open) {
    const { llm, base } = this.llmInfo;
    const url = serverUrl(llm.url, base);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(url, this.client.connection.protocols);
    socket.binaryType = "arraybuffer";
    return new Promise((resolve, reject) => {
      let opened = false;
      socket.onopen = () => socket.send(open);
      socket.onerror = () => { if (!opened) reject(new SplitError("network", `cannot reach ${url}`)); };
      socket.onmessage = ({ data }) => {
        const bytes = new Uint8Array(data);
        if (opened) {
          this.replyChat(from, stage, bytes);
          return;
        }
        opened = true;
        // The server's `opened` starts the conversation; anything else refuses it.
        if (bytes[LLM_KIND_AT] === LLM_OPENED) {
          stage.server = socket;
          resolve(true);
        } else {
          this.replyChat(from, stage, bytes);
          socket.close();
          resolve(null);
        }
      };
      socket.onclose = () => {
        if (!opened) {
          reject(new SplitError("network", `${url} closed before answering`));
          return;
        }
        // The server's part is gone: the asker opens again and sends its kept states again.
        if (stage.server === socket) {
          stage.server = null;
          this.llmMember?.forget(from);
          this.replyChat(from, stage, wasm.LlmMember.lostFrame());
        }
      };
    });
  }

  /** Stop carrying the chat frames of member `peer` (the chat was closed). */
  unlinkChat(peer) {
    this.chatLinks.get(peer)?.close();
    this.chatLinks.delete(peer);
  }

  /** A frame from another member: a reply to one of ours, or a request for us. */
  async onFrame(from, frame, via) {
    if (LLM_MAGIC.every((b, i) => frame[i] === b)) {
      // A split chat's frame: to the chat linked with this member, else (a request: this
      // browser runs no member's blocks) refused.
      // Replies (kind 0x80 and up) to this device's chat through `from`; requests are `from`'s
      // own chat through this device.
      const reply = frame[LLM_KIND_AT] >= LLM_FIRST_REPLY;
      const port = reply ? this.chatLinks.get(from) : null;
      if (reply && !port) return;
      if (port) {
        const copy = frame.slice();
        port.postMessage({ frame: copy }, [copy.buffer]);
        return;
      }
      if (this.device.llm) {
        // One asker's frames in order, each after the one before has gone on.
        const stage = this.chatStage(from);
        const copy = frame.slice();
        stage.queue = stage.queue.then(() => this.serveChat(from, stage, copy, via)).catch((e) => this.onError(e));
        return;
      }
      const refusal = wasm.llmRefusal(frame);
      if (refusal) this.send(from, refusal);
      return;
    }
    let reply = null;
    try {
      reply = wasm.decodeReply(frame);
    } catch {
      // Not a reply: a request (a bad one is answered with a typed error).
    }
    if (reply) {
      const wait = this.pending.get(reply.id);
      if (!wait) return;
      this.pending.delete(reply.id);
      clearTimeout(wait.timer);
      if (reply.kind === "error") wait.reject(new SplitError(reply.code, reply.message));
      else wait.resolve({ ...reply, answeredBy: from, via });
      return;
    }
    const route = this.routes.get(`${from}/${via}`)?.shift();
    this.load++;
    try {
      await this.serve(from, frame, route, via);
    } catch (e) {
      // The asker hears why instead of waiting for an answer that will not come.
      if (route) this.path(route.answerTo).signal({ failed: { id: route.id, code: e.code ?? "internal", text: e.message } });
      this.onError(e);
    } finally {
      this.load--;
    }
  }

  /** Answer a request, or run a pipeline stage on and pass it to the next one. */
  async serve(from, frame, route, via) {
    const stage = route?.stages?.[0];
    // The codec's tables where the features arrive and where they leave.
    if (stage && route.codec !== "f32") {
      await this.client.ensureCalibration(stage.from);
      if (stage.to !== "logits") await this.client.ensureCalibration(stage.to);
    }
    if (!stage || stage.to === "logits") {
      const reply = await this.client.answerRequest(frame);
      this.answered++;
      const back = this.path(route ? route.answerTo : from, reply.length);
      // The asker learns how every hop went, on the path its answer takes.
      if (route) back.signal({ hops: { id: route.id, list: [...(route.hops ?? []), back.via] } });
      back.send(reply);
      return;
    }
    const next = await this.client.continueRequest(frame, stage.to, route.codec);
    const rest = route.stages.slice(1);
    const onward = this.path(rest[0].peer, next.length);
    onward.signal({ route: { ...route, stages: rest, hops: [...(route.hops ?? []), onward.via] } });
    onward.send(next);
  }

  send(peer, frame) {
    this.socket.send(wrap(peer, frame));
  }

  signal(peer, data) {
    this.socket.send(JSON.stringify({ type: "signal", to: peer, data }));
  }

  /** Wait for the reply to request `id`, which involves `peers` (it fails if one leaves). */
  awaitReply(id, peers) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SplitError("timeout", `no answer from peers ${peers.join(", ")} in ${MEMBER_TIMEOUT_MS} ms`));
      }, MEMBER_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, peers, timer });
    });
  }

  /**
   * Classify a batch over the group: each member takes a share in proportion to its measured
   * speed, one image at a time; results come back in input order, each saying which device
   * answered. A member that leaves loses nothing: what it had not answered is shared out again.
   * @param {Uint8Array[]} images  JPEG or PNG bytes
   * @param {object} [options]  onProgress({ done, total, counts }); peers (default: every
   *   member)
   * @returns {Promise<object[]>}  { index, top, peer, device, via: "local" | "relay", ms }
   */
  async classifyAll(images, options = {}) {
    const chosen = (m) => !options.peers || options.peers.includes(m.peer);
    const onProgress = options.onProgress ?? (() => {});
    const results = new Array(images.length);
    const counts = {};
    let todo = images.map((_, i) => i);
    let done = 0;
    while (todo.length > 0) {
      const members = this.members.filter(chosen);
      if (members.length === 0) throw new SplitError("network", "no chosen member is in the group");
      const plan = await this.client.planTasks(todo.length, members.map((m) => m.msPerImage), members.map(() => 0));
      const queues = members.map(() => []);
      todo.forEach((item, k) => queues[plan[k]].push(item));
      const left = [];
      await Promise.all(members.map(async (m, w) => {
        // Another member gets its next photos while it works on one, so the relay's round trip
        // overlaps its compute, and it keeps working while this device's own compute holds
        // up the thread that would send it more; this device takes one at a time.
        const depth = m.peer === this.you ? 1 : REMOTE_IN_FLIGHT;
        const queue = queues[w];
        let cursor = 0;
        let gone = false;
        await Promise.all(Array.from({ length: depth }, async () => {
          while (!gone && cursor < queue.length) {
            const index = queue[cursor++];
            const started = performance.now();
            try {
              const { top, via } = await this.runOn(m.peer, images[index]);
              results[index] = { index, top, peer: m.peer, device: m.name, via, ms: performance.now() - started };
              counts[m.peer] = (counts[m.peer] ?? 0) + 1;
              onProgress({ done: ++done, total: images.length, counts: { ...counts } });
            } catch (e) {
              if (e.code !== "member_left" && e.code !== "timeout" && e.code !== "network") throw e;
              // This member is gone: what it held and the rest of its queue go to the others.
              left.push(index);
              if (!gone) {
                gone = true;
                left.push(...queue.slice(cursor));
                cursor = queue.length;
              }
              return;
            }
          }
        }));
      }));
      todo = left;
    }
    return results;
  }

  /** The top-5 of one whole image on member `peer` (this device: locally), and how the
   * image went: `{ top, via: "local" | "p2p" | "relay" }`. */
  async runOn(peer, image) {
    const id = this.nextId++;
    const frame = wasm.encodeImageRequest(id, image);
    if (peer === this.you) {
      const reply = wasm.decodeReply(await this.client.answerRequest(frame));
      if (reply.kind === "error") throw new SplitError(reply.code, reply.message);
      return { top: reply.top, via: "local" };
    }
    const answer = this.awaitReply(id, [peer]);
    const path = this.path(peer, frame.length + 12);
    path.send(frame);
    return { top: (await answer).top, via: path.via };
  }

  /**
   * The chain the planner picks now over the group's members for `goal` ("latency" or
   * "throughput"): { stages: [{ peer, from, to, computeMs, sendBytes, sendMs }], latencyMs,
   * periodMs }.
   */
  async plan(goal = "latency", peers = null) {
    const node = (m) => ({
      peer: m.peer,
      msPerImage: m.msPerImage,
      lowPower: m.power?.state === "battery" && m.power.level < 0.2,
      // Members of one group share a local network: 100 Mbit/s, 2 ms each way as a default
      // until links are measured.
      mbps: 100,
      latencyMs: 2,
    });
    const me = this.member(this.you);
    const others = this.members.filter((m) => m.peer !== this.you && (!peers || peers.includes(m.peer))).map(node);
    // The photo itself never leaves this device: its first stage runs at least the stem.
    const floor = this.privacyFloor && this.privacyFloor !== "input" ? this.privacyFloor : "stem";
    return this.client.planChain({ asker: node(me), others, privacyFloor: floor, goal }, this.codec);
  }

  /**
   * One image through a pipeline across the group's members: this device runs the first
   * stage, each next member runs its blocks on and passes the features along, the last answers
   * here. If a stage's member leaves meanwhile, the plan is made again without it and this
   * device's features (kept until the answer) go out again.
   * @param {Uint8Array} image  JPEG or PNG bytes
   * @param {object} [options]  goal ("latency", the default, or "throughput"); stages (an
   *   explicit chain instead of the planner's: [{ peer, to }], this device first, the last
   *   stage's `to` "logits"; used while all its members are in the group); peers (the
   *   members the planner may use; default: all)
   * @returns {Promise<object>}  { top, mode: "pipeline", stages: [{ peer, device, from, to }],
   *   via ("p2p" when every hop went over a direct channel, "relay" when every one went
   *   through the server, else "mixed"), hops (each hop's way, the answer's last),
   *   predicted: { latencyMs, periodMs }, totalMs, replans }
   */
  async classify(image, options = {}) {
    const started = performance.now();
    const goal = options.goal ?? "latency";
    let replans = 0;
    let kept = null; // this device's first-stage frame, by its cut
    const chosen = options.stages;
    for (;;) {
      const usable = chosen && chosen[0]?.peer === this.you && chosen.every((s) => this.member(s.peer));
      const chain = usable ? this.explicitChain(chosen) : await this.plan(goal, options.peers ?? null);
      const [first, ...rest] = chain.stages;
      const id = this.nextId++;
      const describe = (s) => ({ peer: s.peer, device: this.member(s.peer)?.name, from: s.from, to: s.to });
      const stages = chain.stages.map(describe);
      const predicted = { latencyMs: chain.latencyMs, periodMs: chain.periodMs };
      if (rest.length === 0) {
        const { top } = await this.runOn(this.you, image);
        return { top, mode: "pipeline", stages, via: "local", hops: [], predicted, totalMs: performance.now() - started, replans };
      }
      if (kept?.to !== first.to) {
        const out = await this.client.edgeFrame(image, first.to, this.codec, id);
        kept = { to: first.to, frame: out };
      }
      const frame = wasm.withRequestId(kept.frame, id);
      const answer = this.awaitReply(id, rest.map((s) => s.peer));
      const hop = this.path(rest[0].peer, frame.length + 12);
      const route = wasm.parseRoute({ id, answerTo: this.you, codec: this.codec, hops: [hop.via],
                                      stages: rest.map((s) => ({ peer: s.peer, from: s.from, to: s.to })) });
      hop.signal({ route });
      hop.send(frame);
      try {
        const reply = await answer;
        // Every hop, the answer's included, as the stages reported them.
        const hops = this.hops.get(id) ?? [hop.via];
        const via = hops.every((h) => h === "p2p") ? "p2p" : hops.every((h) => h === "relay") ? "relay" : "mixed";
        return { top: reply.top, mode: "pipeline", stages, via, hops, predicted, totalMs: performance.now() - started, replans };
      } catch (e) {
        if (e.code !== "member_left" || replans >= 3) throw e;
        replans++;
      } finally {
        this.hops.delete(id);
      }
    }
  }

  /** The view this device contributes to a fusion (the latest camera frame, a photo): JPEG
   * or PNG bytes; null takes it back. */
  setView(image) {
    this.view = image ?? null;
  }

  /** Another member asks what this device sees: its answer for its own view, or why not. */
  async answerView(from, id) {
    if (!this.view) {
      this.path(from).signal({ failed: { id, code: "no_view", text: `${this.device.name} has no view to classify` } });
      return;
    }
    this.load++;
    try {
      const reply = await this.client.answerRequest(wasm.encodeImageRequest(id, this.view));
      this.path(from, reply.length + 12).send(reply);
      this.answered++;
    } finally {
      this.load--;
    }
  }

  /**
   * One answer from several devices' views of the same object: each member asked (and this
   * device, with its own view) classifies what it sees, and the answers are fused
   * (`group::fusion`: "mean" of the probabilities, the default, or "confidence"-weighted).
   * @param {object} [options]  rule, peers (default: every member)
   * @returns {Promise<object>}  { top, mode: "fusion", rule, views: [{ peer, device, top }],
   *   missing: [{ peer, device, code }] }
   */
  async fuse(options = {}) {
    const rule = options.rule ?? "mean";
    const peers = options.peers ?? this.members.map((m) => m.peer);
    const ask = async (peer) => {
      const device = this.member(peer)?.name;
      try {
        if (peer === this.you) {
          if (!this.view) throw new SplitError("no_view", "this device has no view: call setView first");
          return { peer, device, top: (await this.runOn(this.you, this.view)).top };
        }
        const id = this.nextId++;
        const answer = this.awaitReply(id, [peer]);
        this.path(peer).signal({ view: { id } });
        const reply = await answer;
        return { peer, device, top: reply.top, via: reply.via };
      } catch (e) {
        return { peer, device, code: e.code ?? "internal" };
      }
    };
    const answers = await Promise.all(peers.map(ask));
    const views = answers.filter((a) => a.top);
    if (views.length === 0) throw new SplitError("no_view", "no member had a view to classify");
    const top = await wasmCall(() => wasm.fuseViews(views.map((v) => v.top), rule));
    return { top, mode: "fusion", rule, views, missing: answers.filter((a) => !a.top) };
  }

  /** What this device did for the group: requests answered, and in progress now. */
  stats() {
    return { answered: this.answered, load: this.load };
  }

  /** An app's own chain in the planner's shape (no predictions). */
  explicitChain(stages) {
    let from = "input";
    const out = stages.map((s) => {
      const stage = { peer: s.peer, from, to: s.to };
      from = s.to;
      return stage;
    });
    if (from !== "logits") throw new SplitError("bad_option", "the last stage of a chain must run to \"logits\"");
    return { stages: out, latencyMs: null, periodMs: null };
  }

  /** Leave the group and close its socket. */
  leave() {
    clearInterval(this.heartbeat);
    this.peers.close();
    for (const port of this.chatLinks.values()) {
      port.postMessage({ left: "this device left the group" });
      port.close();
    }
    this.chatLinks.clear();
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify({ type: "leave" }));
    this.socket.close();
  }
}
