// `split: "encrypted"`: the network runs on this device to `pool`; the server computes the
// classifier on the pooled features encrypted under a key made and kept here (BFV), and sends
// the logits back encrypted; this device decrypts them. The server learns neither the
// features nor the answer (docs/privacy.md, "The encrypted classifier"). Its own socket
// (`/encrypted`): the evaluation key once, then one classify frame per photo.

import { SplitError, fromWasm, wasm, wasmCall } from "./wasm.js";

/** How long a reply of the encrypted socket may take, ms (a key is 335 kB, a photo 670 kB). */
const REPLY_TIMEOUT_MS = 60_000;

/** Whether this server and this engine can run the encrypted classifier: the server's
 * classifier scale, or a `SplitError` (`unsupported_server`, `unsupported_engine`). */
export function checkEncryptedAvailable(client) {
  const step = client.info.encrypted?.weight_step;
  if (!step) throw new SplitError("unsupported_server", "this server does not offer the encrypted classifier");
  if (!wasm.EncryptedClient) {
    throw new SplitError("unsupported_engine", `the encrypted classifier is in the relaxed-SIMD builds only, and this engine loaded ${client.wasmBuild} ` +
      "(fhe.rs's arithmetic brings relaxed SIMD instructions, which engines without relaxed SIMD refuse to load)");
  }
  return step;
}

export class EncryptedLink {
  /** @param {import("../split-client.js").SplitClient} client */
  constructor(client) {
    this.client = client;
    /** The wasm half: the session's keys. */
    this.keys = null;
    this.socket = null;
    /** Replies awaited, by request id. */
    this.waiting = new Map();
    /** Whether the server holds this socket's key. */
    this.keyHeld = false;
    this.nextId = 1;
    /** One request at a time on the socket. */
    this.turn = Promise.resolve();
  }

  /** Classify `image` with the classifier on the server, encrypted. */
  classify(image, resultId) {
    const run = this.turn.then(() => this.classifyNow(image, resultId));
    this.turn = run.catch(() => {});
    return run;
  }

  async classifyNow(image, resultId) {
    const client = this.client;
    const started = performance.now();
    await client.prepareEdge("pool", "f32");
    const pooled = await wasmCall(() => client.edge.pooled(image));
    const edgeMs = performance.now() - started;
    if (!this.keys) {
      const step = checkEncryptedAvailable(client);
      const k = performance.now();
      this.keys = await wasmCall(() => new wasm.EncryptedClient(step));
      this.keygenMs = performance.now() - k;
    }
    let keyBytes = 0;
    let keyMs = 0;
    for (let attempt = 0; ; attempt++) {
      if (!this.keyHeld) {
        const k = performance.now();
        keyBytes += await this.sendKey();
        keyMs += performance.now() - k;
      }
      const t = performance.now();
      const id = this.nextId++;
      const frame = await wasmCall(() => this.keys.classifyFrame(id, pooled));
      const encryptMs = performance.now() - t;
      const sent = performance.now();
      const reply = await this.request(id, frame);
      const roundTripMs = performance.now() - sent;
      const d = performance.now();
      try {
        const answer = await wasmCall(() => this.keys.readReply(reply));
        return { id: resultId, version: 1, quality: "full", model: "full", mode: "encrypted", split: "pool", codec: "encrypted",
                 backend: client.backend, top: answer.top, edgeMs, encryptMs, decryptMs: performance.now() - d,
                 bytesSent: frame.length + keyBytes, bytesReceived: reply.length, keyBytes, keyMs, keygenMs: this.keygenMs, serverMs: answer.serverMs, queueMs: answer.queueMs,
                 serverCached: false, roundTripMs, totalMs: performance.now() - started, load: null };
      } catch (e) {
        // The server lost the key (taken for another session while this one sat idle): send it
        // again, once.
        if (attempt === 0 && ["no_key", "evicted"].includes(e.code)) {
          this.keyHeld = false;
          continue;
        }
        throw fromWasm(e);
      }
    }
  }

  /** Send this session's evaluation key; resolves to the bytes sent. */
  async sendKey() {
    const id = this.nextId++;
    const frame = await wasmCall(() => this.keys.keyFrame(id));
    const reply = await this.request(id, frame);
    await wasmCall(() => this.keys.readReply(reply)); // throws the refusal (key_budget, …)
    this.keyHeld = true;
    return frame.length;
  }

  /** Send `frame` and wait for the reply with its id. */
  async request(id, frame) {
    const socket = await this.open();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new SplitError("timeout", `no answer from the encrypted classifier within ${REPLY_TIMEOUT_MS / 1000} s`));
      }, REPLY_TIMEOUT_MS);
      this.waiting.set(id, { resolve: (r) => { clearTimeout(timer); resolve(r); }, reject: (e) => { clearTimeout(timer); reject(e); } });
      socket.send(frame);
    });
  }

  /** The socket, opened if it is not. */
  open() {
    if (this.socket && this.socket.readyState <= WebSocket.OPEN) return this.opened;
    const url = new URL("encrypted", this.client.connection.url);
    const socket = new WebSocket(url, this.client.connection.protocols);
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    this.keyHeld = false;
    this.opened = new Promise((resolve, reject) => {
      socket.onopen = () => resolve(socket);
      socket.onerror = () => reject(new SplitError("closed", `could not open ${url}`));
    });
    socket.onmessage = (event) => {
      const bytes = new Uint8Array(event.data);
      const id = Number(new DataView(bytes.buffer).getBigUint64(8, true));
      const waiter = this.waiting.get(id);
      if (waiter) {
        this.waiting.delete(id);
        waiter.resolve(bytes);
      } else {
        // Unasked (id 0): the server took the key back; the next request sends it again.
        this.keyHeld = false;
      }
    };
    socket.onclose = () => {
      this.keyHeld = false;
      for (const w of this.waiting.values()) w.reject(new SplitError("closed", "the encrypted classifier's socket closed"));
      this.waiting.clear();
    };
    return this.opened;
  }

  close() {
    this.socket?.close();
    this.socket = null;
  }
}
