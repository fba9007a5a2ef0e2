// The WebSocket to the server: one connection, opened on demand and shared by concurrent
// callers; replies matched to requests by id; every failure a `SplitError`.

import { SplitError } from "./wasm.js";

/** The close code a server sends when it shuts down gracefully ("service restart"): it has
 * answered what it could, and the client should reconnect now rather than back off. */
const SERVICE_RESTART = 1012;
/** A WebSocket handshake not finished in this long is abandoned (a proxy that accepts TCP and
 * never answers would otherwise hold every later request behind one attempt). */
export const CONNECT_TIMEOUT_MS = 10_000;

export class Connection {
  /**
   * @param {URL} url  the server's WebSocket
   * @param {object} edge  the wasm `EdgeSession`: it decodes replies (learning from them: results
   *   fill its cache, `keyframe_required` resets the stream) and restarts streams on reconnect
   * @param {string | null} [token]  the server's bearer token, when it requires one: a browser
   *   cannot set headers on a WebSocket, so it travels as the subprotocol `bearer.TOKEN`
   */
  constructor(url, edge, token = null) {
    this.url = url;
    this.edge = edge;
    this.protocols = token ? ["split.v1", `bearer.${token}`] : [];
    this.socket = null;
    this.connecting = null;
    this.pending = new Map();
    /** Frames of the requests waiting for a reply, by id: sent again on a new connection when
     * the server closes with 1012 (it is restarting or draining behind a load balancer). */
    this.frames = new Map();
    /** After a failed attempt, no new one before `retryAt` (ms, `performance.now()`): the wait
     * doubles from 0.5 s to 8 s while the server stays unreachable, and requests meanwhile fail
     * at once (auto mode then runs them locally without waiting for a connect to fail). */
    this.retryAt = 0;
    this.backoffMs = 0;
    /** `{ state, ... }`: "idle" (never opened), "connecting", "open", "reconnecting" (the server
     * is restarting: sending again elsewhere), "unreachable" (with `retryInMs`) or "closed"
     * (with the close `code` and `reason`). */
    this.status = { state: "idle" };
    /** Called with every new `status`. */
    this.onStatus = () => {};
    /** Called when a connection opens (the client then sends what waited for the server). */
    this.onOpen = () => {};
    this.connectTimeoutMs = CONNECT_TIMEOUT_MS;
    /** Set by `close()`: no new connection opens. */
    this.closed = false;
  }

  /** Record and announce a new status (repeats of the same state are not announced). */
  setStatus(status) {
    if (status.state === this.status.state && status.state !== "unreachable") return;
    this.status = status;
    try {
      this.onStatus(status);
    } catch (e) {
      console.error("onConnection callback failed", e);
    }
  }

  /** Open the WebSocket if it is not open; concurrent callers share one attempt. */
  open() {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) return Promise.resolve(this.socket);
    if (this.connecting) return this.connecting;
    if (this.closed) return Promise.reject(new SplitError("closed", "the client was closed"));
    const wait = this.retryAt - performance.now();
    if (wait > 0) {
      return Promise.reject(new SplitError("network", `${this.url} was unreachable; next attempt in ${Math.ceil(wait)} ms`));
    }
    const socket = new WebSocket(this.url, this.protocols);
    socket.binaryType = "arraybuffer";
    if (this.status.state !== "reconnecting") this.setStatus({ state: "connecting" });
    this.connecting = new Promise((resolve, reject) => {
      // A failed attempt: no new one before the backoff, and the caller learns why.
      const unreachable = (error) => {
        clearTimeout(timer);
        this.backoffMs = Math.min(8_000, Math.max(500, 2 * this.backoffMs));
        this.retryAt = performance.now() + this.backoffMs;
        this.setStatus({ state: "unreachable", retryInMs: this.backoffMs });
        reject(error);
      };
      const timer = setTimeout(() => {
        socket.onerror = null;
        if (this.socket === socket) this.socket = null;
        socket.close();
        unreachable(new SplitError("timeout", `no WebSocket handshake with ${this.url} within ${this.connectTimeoutMs} ms`));
      }, this.connectTimeoutMs);
      socket.onopen = () => {
        clearTimeout(timer);
        this.backoffMs = 0;
        this.setStatus({ state: "open" });
        // Stream references do not survive a connection: start again from a keyframe.
        this.edge.forceKeyframe();
        resolve(socket);
        queueMicrotask(() => this.onOpen());
      };
      socket.onerror = () => unreachable(new SplitError("network", `cannot connect to ${this.url}`));
    }).finally(() => {
      this.connecting = null;
    });
    socket.onmessage = (event) => {
      let reply;
      try {
        reply = this.edge.acceptReply(new Uint8Array(event.data));
      } catch (e) {
        console.error("undecodable reply", e);
        return;
      }
      socket.sentIds.delete(reply.id);
      const waiter = this.pending.get(reply.id);
      if (waiter) waiter(reply);
    };
    // Ids of the requests sent on this socket: when it closes, those fail, and only those (a
    // request already waiting on the next socket is not this one's).
    socket.sentIds = new Set();
    socket.onclose = (event) => {
      // A socket already replaced (closed by the caller, then a new one opened) reports nothing.
      const current = this.socket === socket;
      if (current) this.socket = null;
      const ids = [...socket.sentIds];
      socket.sentIds.clear();
      if (event.code === SERVICE_RESTART) {
        // The server answered what it had and is going away: reconnect at once (a balancer
        // picks another replica) and send what is still unanswered there.
        this.retryAt = 0;
        this.backoffMs = 0;
        if (current) this.setStatus({ state: "reconnecting" });
        for (const id of ids) this.send(id);
        return;
      }
      // A socket that never opened already reported "unreachable".
      if (current && this.status.state !== "unreachable") {
        this.setStatus({ state: "closed", code: event.code, reason: event.reason });
      }
      const error = new SplitError("network", `connection closed (${event.code}${event.reason ? ": " + event.reason : ""})`);
      for (const id of ids) this.pending.get(id)?.(error);
    };
    this.socket = socket;
    return this.connecting;
  }

  /** Send `frame` (request `id`) and resolve to its reply; an error reply, a closed connection
   * or no reply within `timeoutMs` rejects with a `SplitError`. The deadline includes opening
   * the connection: a server that accepts TCP but never answers must not stall the caller. */
  request(id, frame, timeoutMs) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        this.frames.delete(id);
        this.socket?.sentIds.delete(id);
        reject(new SplitError("timeout", `no reply to request ${id} within ${Math.round(timeoutMs)} ms`));
      }, timeoutMs);
      const settle = (reply) => {
        clearTimeout(timer);
        this.pending.delete(id);
        this.frames.delete(id);
        if (reply instanceof Error) reject(reply);
        else if (reply.kind === "error") reject(new SplitError(reply.code, reply.message));
        else resolve(reply);
      };
      this.pending.set(id, settle);
      this.frames.set(id, frame);
      this.send(id);
    });
  }

  /** Send request `id`'s frame on the open (or next) connection, unless it was settled. */
  send(id) {
    this.open().then(
      (socket) => {
        const frame = this.frames.get(id);
        if (frame === undefined) return;
        socket.sentIds.add(id);
        socket.send(frame);
      },
      (e) => this.pending.get(id)?.(e));
  }

  /** Close the current WebSocket; the next request opens a new one. */
  close() {
    if (this.socket) this.socket.close(1000, "client closed");
  }

  /** Close the WebSocket for good (the client is closed): requests still waiting fail with
   * "closed", and no new connection opens. */
  shutdown() {
    this.closed = true;
    this.close();
    this.socket = null;
    const error = new SplitError("closed", "the client was closed");
    for (const settle of [...this.pending.values()]) settle(error);
  }
}
