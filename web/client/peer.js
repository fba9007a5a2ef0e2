// Direct channels between the browsers of a device group: a WebRTC DataChannel per pair of
// browser members, set up through the server's `signal` messages (offer, answer, ICE
// candidates), so frames cross the local network directly instead of through the server.
// A Web Worker has no RTCPeerConnection: when the group lives in the client's worker, the
// page holds the connections (`PeerLinks`, driven by `remote.js`) and the worker a
// `BridgedLinks` with the same interface, every call and every message a postMessage.
// Until a channel is open, or when one cannot be made (no route between the devices), or for a
// message larger than the channel takes, the group keeps using the server's relay: the same
// bytes either way.

/** ICE servers: none. Devices of one group reach each other by their host candidates on the
 * local network; across networks the relay carries the frames. */
const RTC_CONFIG = { iceServers: [] };
/** What a DataChannel message may hold when the browser does not say (Chromium: 256 KiB). */
const DEFAULT_MAX_MESSAGE = 256 * 1024;

export class PeerLinks {
  /**
   * @param {object} group  the `DeviceGroup`: `you`, `signalServer(peer, data)`,
   *   `onChannelText(peer, data)`, `onChannelBinary(peer, bytes)`, `onLinks()`
   */
  constructor(group) {
    this.group = group;
    /** peer → { pc, channel, open, remoteSet, candidates } */
    this.links = new Map();
    this.available = typeof RTCPeerConnection !== "undefined";
  }

  /** Make or drop links as the member list changes: the member with the lower peer number
   * offers, so each pair makes one connection. Native members have no WebRTC. */
  update(members) {
    if (!this.available) return;
    const browsers = new Set(members.filter((m) => m.backend !== "native" && m.peer !== this.group.you).map((m) => m.peer));
    for (const [peer, link] of this.links) {
      if (!browsers.has(peer)) {
        link.pc.close();
        this.links.delete(peer);
      }
    }
    for (const peer of browsers) {
      if (!this.links.has(peer) && this.group.you < peer) this.offer(peer).catch((e) => this.failed(peer, e));
    }
  }

  failed(peer, e) {
    console.warn(`device group: no direct channel to peer ${peer} (${e?.message ?? e}); frames go through the server`);
    this.links.get(peer)?.pc.close();
    this.links.delete(peer);
    this.group.onLinks();
  }

  make(peer) {
    const pc = new RTCPeerConnection(RTC_CONFIG);
    const link = { pc, channel: null, open: false, remoteSet: false, candidates: [] };
    this.links.set(peer, link);
    pc.onicecandidate = (e) => {
      if (e.candidate) this.group.signalServer(peer, { webrtc: { candidate: e.candidate.toJSON() } });
    };
    pc.ondatachannel = (e) => this.attach(peer, link, e.channel);
    pc.onconnectionstatechange = () => {
      if (["failed", "closed"].includes(pc.connectionState) && this.links.get(peer) === link) {
        this.failed(peer, `connection ${pc.connectionState}`);
      }
    };
    return link;
  }

  attach(peer, link, channel) {
    channel.binaryType = "arraybuffer";
    link.channel = channel;
    channel.onopen = () => {
      link.open = true;
      this.group.onLinks();
    };
    channel.onclose = () => {
      link.open = false;
      this.group.onLinks();
    };
    channel.onmessage = ({ data }) => {
      if (typeof data === "string") this.group.onChannelText(peer, JSON.parse(data));
      else this.group.onChannelBinary(peer, new Uint8Array(data));
    };
  }

  async offer(peer) {
    const link = this.make(peer);
    this.attach(peer, link, link.pc.createDataChannel("split", { ordered: true }));
    await link.pc.setLocalDescription(await link.pc.createOffer());
    this.group.signalServer(peer, { webrtc: { sdp: link.pc.localDescription.toJSON() } });
  }

  /** A `webrtc` signal from `peer`: its offer, answer or an ICE candidate. */
  async onSignal(peer, data) {
    if (!this.available) return;
    try {
      let link = this.links.get(peer);
      if (data.sdp?.type === "offer") {
        link?.pc.close();
        link = this.make(peer);
        await link.pc.setRemoteDescription(data.sdp);
        await this.remoteSet(link);
        await link.pc.setLocalDescription(await link.pc.createAnswer());
        this.group.signalServer(peer, { webrtc: { sdp: link.pc.localDescription.toJSON() } });
      } else if (data.sdp?.type === "answer" && link) {
        await link.pc.setRemoteDescription(data.sdp);
        await this.remoteSet(link);
      } else if (data.candidate && link) {
        // Candidates can arrive before the description they belong to is applied.
        if (link.remoteSet) await link.pc.addIceCandidate(data.candidate);
        else link.candidates.push(data.candidate);
      }
    } catch (e) {
      this.failed(peer, e);
    }
  }

  async remoteSet(link) {
    link.remoteSet = true;
    for (const c of link.candidates.splice(0)) await link.pc.addIceCandidate(c);
  }

  /** The open channel to `peer` that takes a message of `bytes`, or null (use the relay). */
  channel(peer, bytes = 0) {
    const link = this.links.get(peer);
    if (!link?.open || link.channel.readyState !== "open") return null;
    const max = link.pc.sctp?.maxMessageSize || DEFAULT_MAX_MESSAGE;
    return bytes <= max ? link.channel : null;
  }

  /** Each browser member's channel state: "open" or "connecting". */
  states() {
    return Object.fromEntries([...this.links].map(([peer, l]) => [peer, l.open ? "open" : "connecting"]));
  }

  close() {
    for (const link of this.links.values()) link.pc.close();
    this.links.clear();
  }
}

/**
 * The worker's side of links the page holds: the same interface as `PeerLinks` for the
 * `DeviceGroup`, with `post(op)` sending each operation to the page and `fromPage(op)`
 * taking the page's reports (channel states, signals to send, messages received).
 */
export class BridgedLinks {
  constructor(group, post) {
    this.group = group;
    this.post = post;
    /** peer → { open, max } as the page last reported. */
    this.state = new Map();
    this.available = true;
  }

  update(members) {
    if (this.available) this.post({ op: "update", you: this.group.you, members });
  }

  onSignal(peer, data) {
    if (this.available) this.post({ op: "signal", peer, data });
  }

  channel(peer, bytes = 0) {
    const s = this.state.get(peer);
    if (!s?.open || bytes > s.max) return null;
    return { send: (data) => this.post({ op: "send", peer, data }) };
  }

  states() {
    return Object.fromEntries([...this.state].map(([peer, s]) => [peer, s.open ? "open" : "connecting"]));
  }

  close() {
    this.post({ op: "close" });
    this.state.clear();
  }

  /** What the page reports. */
  fromPage(op) {
    switch (op.op) {
      case "states":
        this.state = new Map(op.states.map((s) => [s.peer, s]));
        this.group.onLinks();
        break;
      case "signal-out":
        this.group.signalServer(op.peer, op.data);
        break;
      case "text":
        this.group.onChannelText(op.peer, op.data);
        break;
      case "binary":
        this.group.onChannelBinary(op.peer, op.data);
        break;
      default:
        break;
    }
  }
}

/**
 * The page's side: real `PeerLinks` whose group is the worker, reached through `call(op)`.
 * `toPage(op)` takes the worker's operations.
 */
export class PageLinks {
  constructor(call) {
    this.call = call;
    this.you = 0;
    this.links = new PeerLinks(this);
  }

  report() {
    const states = [...this.links.links].map(([peer, l]) => ({
      peer, open: Boolean(l.open && l.channel?.readyState === "open"), max: l.pc.sctp?.maxMessageSize || DEFAULT_MAX_MESSAGE,
    }));
    this.call({ op: "states", states });
  }

  // What `PeerLinks` asks of its group.
  signalServer(peer, data) {
    this.call({ op: "signal-out", peer, data });
  }

  onChannelText(peer, data) {
    this.call({ op: "text", peer, data });
  }

  onChannelBinary(peer, bytes) {
    this.call({ op: "binary", peer, data: bytes });
  }

  onLinks() {
    this.report();
  }

  toPage(op) {
    switch (op.op) {
      case "update":
        this.you = op.you;
        this.links.update(op.members);
        this.report();
        break;
      case "signal":
        this.links.onSignal(op.peer, op.data);
        break;
      case "send":
        this.links.channel(op.peer, 0)?.send(op.data);
        break;
      case "close":
        this.links.close();
        break;
      default:
        break;
    }
  }
}

