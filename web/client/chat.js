// The page's side of the chat: a `SplitChat` runs the language model's edge share and its
// socket in a worker of its own (`chat-worker.js`), so the page stays responsive while the
// model computes, and hands the page the answer as it is written.
//
//   const chat = await SplitChat.create({ privacyFloor: "default", onProgress });
//   const answer = await chat.ask([{ role: "user", content: "Hi" }], { onToken: (t) => show(t.text) });
//   chat.stop();  chat.close();

import { SplitError, packageRoot, startModuleWorker } from "./wasm.js";

export class SplitChat {
  constructor(worker) {
    this.worker = worker;
    this.pending = new Map();
    this.nextId = 1;
    this.onProgress = () => {};
    this.onToken = () => {};
    /** What `create` answered: `{ placement, blocks, layers, width, positions, shareBytes,
     * weightBytes, codec, rowBytes, model, plan }`. */
    this.info = null;
    /** The device group and member a `member` chat's frames go through. */
    this.memberLink = null;
    worker.onmessage = ({ data }) => {
      if (data.event === "progress") return this.onProgress(data.value);
      if (data.event === "token") return this.onToken(data.value);
      const p = this.pending.get(data.id);
      if (!p) return;
      this.pending.delete(data.id);
      if (data.error) p.reject(new SplitError(data.error.code, data.error.message));
      else p.resolve(data.result);
    };
    const failAll = (error) => {
      for (const p of this.pending.values()) p.reject(error);
      this.pending.clear();
    };
    worker.onerror = (e) => failAll(new SplitError("worker", `the chat worker failed: ${e.message ?? e}`));
    worker.onmessageerror = () => failAll(new SplitError("worker", "a message from the chat worker could not be read"));
    this.failAll = failAll;
  }

  /**
   * Load the model's share into a new worker.
   * @param {object} [options]  `server` (URL; the page's origin by default), `blocks` (the
   *   edge's blocks; the model's block count runs it whole in the browser; by default the
   *   privacy floor's, 12), `privacyFloor` (fewer blocks are refused with "privacy_floor": a
   *   number, or "default"),
   *   `positions` (1,024), `token`, `codec` (how hidden states cross: "f32", "f16", "bf16",
   *   "q8", "q8o"; the module's default unless named), `placement` ("split", the default;
   *   "plain": the server also runs the head; "cloud": the server runs everything; "edge":
   *   the whole model here; "auto": where the planner predicts the fastest answer under the
   *   privacy floor and `memoryBytes`, with `info.plan` saying why), `memoryBytes` (the most
   *   of the model this browser may hold, for "auto"),
   *   `member` (`{ group, peer, blocks }`: a U-shaped split whose next `blocks` blocks run on
   *   member `peer` of the device group `group` (from `client.joinGroup()`), the server
   *   running the rest; the member's `llm` is true in the group's list (a device agent with
   *   the model); when it leaves mid-answer the server takes its blocks and the answer goes
   *   on), `onProgress({ stage, loaded, total, fraction, cached })`
   */
  static async create({ onProgress, member, ...options } = {}) {
    const worker = startModuleWorker(new URL("client/chat-worker.js", packageRoot(options.assetBase)));
    const chat = new SplitChat(worker);
    if (onProgress) chat.onProgress = onProgress;
    try {
      const transfer = [];
      if (member) {
        const { group, peer, blocks } = member;
        if (typeof group?.linkChat !== "function") {
          throw new SplitError("bad_option", "member.group: a device group from client.joinGroup()");
        }
        // The group carries the chat's frames to the member: one end of a channel each.
        const channel = new MessageChannel();
        await group.linkChat(channel.port1, peer);
        chat.memberLink = { group, peer };
        options.member = { peer, blocks, name: group.members?.find((m) => m.peer === peer)?.name ?? `peer ${peer}`, port: channel.port2 };
        transfer.push(channel.port2);
      }
      chat.info = await chat.call("create", [options], transfer);
    } catch (e) {
      chat.close();
      throw e;
    }
    return chat;
  }

  call(method, args = [], transfer = []) {
    if (!this.worker) return Promise.reject(new SplitError("bad_option", "this chat is closed"));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, method, args }, transfer);
    });
  }

  /**
   * Answer a conversation (`[{ role, content }]`, the last a user's message). `onToken({ text,
   * tokens, edgeMs, serverMs, bytesUp, bytesDown })` sees the answer as it grows. Resolves with
   * `{ text, tokens, stopped, firstTokenMs, tokensPerSecond, placement, edgeMs, serverMs,
   * bytesUp, bytesDown, promptTokens }`.
   */
  ask(messages, { onToken, ...options } = {}) {
    this.onToken = onToken ?? (() => {});
    return this.call("ask", [messages, options]);
  }

  /** End the answer being written (it resolves with `stopped: true`). */
  stop() {
    return this.call("stop");
  }

  /** Stop the worker; pending calls fail with "closed". */
  close() {
    this.worker?.terminate();
    this.worker = null;
    // The group stops carrying this chat's frames.
    Promise.resolve(this.memberLink?.group.unlinkChat(this.memberLink.peer)).catch(() => {});
    this.memberLink = null;
    this.failAll(new SplitError("closed", "the chat was closed"));
  }
}
