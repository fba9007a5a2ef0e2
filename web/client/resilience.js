// Answers while the server is out of reach, and finishing them when it is back.
//
// A request the server cannot take is answered on this device: the edge runs to its split as
// usual, then finishes the frame itself with the stages it holds: the full weights where it
// has them, the light model (`EdgeWeights.ensureLight`, int8) for the rest. An answer through
// the light model is *reduced*: its frame goes to the backlog (IndexedDB) and, once the link
// is back, to the server, whose answer arrives as an update of the same result (`onUpdate`,
// version 2, `quality: "full"`).
//
// Versions only go up: a result is version 1 when first given (reduced or full), version 2
// when the server's answer replaces a reduced one. An update is sent once per result id, and
// never for a lower version than the one already sent.

import { Backlog } from "./backlog.js";
import { SplitError, isPermanent, wasm, wasmCall } from "./wasm.js";
import { boundaryIndex } from "./weights.js";

/** The side of the network's input, in pixels (`SplitClient.lightInput` may be smaller). */
export const FULL_INPUT = 224;


/** A result id: unique across reloads (the backlog outlives the page). */
export function newResultId() {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

export class Resilience {
  /**
   * @param {import("../split-client.js").SplitClient} client
   * @param {Backlog} backlog
   * @param {(u: object) => void} onUpdate  a result's newer version
   */
  constructor(client, backlog, onUpdate) {
    this.client = client;
    this.backlog = backlog;
    this.onUpdate = onUpdate;
    /** Result id → the highest version announced. */
    this.versions = new Map();
    this.draining = null;
    this.retryTimer = null;
  }

  static async create(client, onUpdate) {
    return new Resilience(client, await Backlog.open(), onUpdate);
  }

  /** Announce `update` (`{ id, version, ... }`) unless a version as high was announced. */
  announce(update) {
    if ((this.versions.get(update.id) ?? 0) >= update.version) return false;
    this.versions.set(update.id, update.version);
    try {
      this.onUpdate(update);
    } catch (e) {
      console.error("onUpdate callback failed", e);
    }
    return true;
  }

  /** Whether this device can answer every request alone, in full or with the light model. */
  get canAnswerLocally() {
    return this.client.weights.through === "logits" || this.client.weights.hasLight;
  }

  /**
   * Answer `image` on this device for a request the server could not take (`reason`): the
   * split the request had (or the deepest one this device holds in full) is where its frame is
   * cut and kept. Resolves to a result like `classify`'s, with `quality`, `model`, and
   * `resumable` (its frame is in the backlog).
   */
  async answer(image, split, codec, resultId, options, reason) {
    const client = this.client;
    const weights = client.weights;
    const started = performance.now();
    if (weights.through !== "logits" && !weights.hasLight && client.fallback === "light") {
      await weights.ensureLight(); // not downloaded yet: from the cache, or it fails like the request did
    }
    if (weights.through === "logits" || !weights.hasLight) {
      // Every stage here in full (or no light model to use): the whole network, as edge-only.
      const r = await client.classify(image, "edge", { ...options, id: resultId });
      return { ...r, fallback: reason };
    }
    // The frame is cut where the request would have been, else as deep as the full weights
    // reach; never before the privacy floor (the server sees it later): below the floor with
    // no full stage there, nothing is kept and the answer stays reduced.
    const have = weights.through;
    const floor = client.privacyFloor;
    const ok = (b) => boundaryIndex(b) > 0 && boundaryIndex(b) <= boundaryIndex(have) && boundaryIndex(b) >= floor;
    const cut = ok(split) ? split : ok(have) ? have : "input";
    const base = { split: cut, backend: client.backend, bytesSent: 0, serverMs: 0, queueMs: 0, serverCached: false,
                   roundTripMs: 0, load: null, id: resultId, version: 1, fallback: reason };
    const id = client.nextId++;
    if (cut === "input") {
      // Nothing held in full (at or past the floor): the light model from the image; nothing
      // to finish later.
      const out = await this.smallAnswer(image) ?? await wasmCall(() => client.edge.run(image, "logits", id, "f32", false));
      const edgeMs = performance.now() - started;
      return { ...base, mode: "edge", codec: "f32", top: out.top, quality: out.quality, model: weights.lightModel,
               inputSize: out.inputSize ?? FULL_INPUT, edgeMs, totalMs: edgeMs, resumable: false };
    }
    // On a smaller input the answer comes from the photo first; the frame is still cut below,
    // for the server to finish.
    const small = await this.smallAnswer(image);
    // The codec's tables for this boundary, if they can be had; else the frame goes uncoded.
    let frameCodec = codec;
    if (frameCodec !== "f32") {
      try {
        await client.ensureCalibration(cut);
      } catch {
        frameCodec = "f32";
      }
    }
    let out;
    try {
      out = await wasmCall(() => client.edge.run(image, cut, id, frameCodec, false, ...client.noiseArgs(options)));
    } catch (e) {
      if (frameCodec === "f32" || e.code === "bad_image") throw e;
      frameCodec = "f32"; // this codec is not calibrated here: send the features uncoded
      out = await wasmCall(() => client.edge.run(image, cut, id, frameCodec, false, ...client.noiseArgs(options)));
    }
    if (out.top) {
      // The server answered this very content before: its answer, from the edge's cache.
      const edgeMs = performance.now() - started;
      return { ...base, mode: "cache", codec: frameCodec, top: out.top, quality: "full", model: "full",
               edgeMs, totalMs: edgeMs, resumable: false };
    }
    const local = small ?? await wasmCall(() => client.edge.finishLocally(out.frame));
    const edgeMs = performance.now() - started;
    const reduced = local.quality === "reduced";
    if (reduced) {
      await this.keep({ id: resultId, frame: out.frame, split: cut, codec: frameCodec, top: local.top,
                        model: weights.lightModel, label: options.label });
    }
    return { ...base, mode: "edge", codec: frameCodec, top: local.top, quality: local.quality,
             model: reduced ? weights.lightModel : "full", inputSize: local.inputSize ?? FULL_INPUT,
             edgeMs, totalMs: edgeMs, resumable: reduced };
  }

  /** The light model's answer from the photo on a smaller copy of it (the client's
   * `lightInput`); null when that is the network's own input (the caller's usual run).
   * `modelInput`: the image is already the 224x224 model input (a cloud-only upload), resized
   * but not cropped again. */
  async smallAnswer(image, modelInput = false) {
    const size = this.client.lightInput;
    return size < FULL_INPUT ? wasmCall(() => this.client.edge.answerAt(image, size, modelInput)) : null;
  }

  /** Keep a reduced answer's frame for the server (`{ id, frame, split, codec, top, model,
   * label }`) and try to send it. */
  async keep(entry) {
    await this.backlog.add({ ...entry, label: entry.label ?? null, createdAt: Date.now() });
    this.scheduleDrain();
  }

  /** No more retries: the client was closed. */
  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  /** `{ entries, bytes, dropped, persistent }` of the backlog. */
  describe() {
    return this.backlog.describe();
  }

  /** Try to finish the backlog now, and again after the connection's backoff while the
   * server stays out of reach; `now`: a connection just opened, so do not wait for a retry
   * already scheduled. */
  scheduleDrain(now = false) {
    if (now && this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    if (this.stopped || this.backlog.size === 0 || this.draining || this.retryTimer) return;
    this.drain().catch(() => {
      if (this.stopped) return;
      const wait = Math.max(500, this.client.connection.retryAt - performance.now(), this.client.connection.backoffMs);
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        this.scheduleDrain();
      }, wait);
    });
  }

  /**
   * Send the backlog's frames to the server, oldest first, one at a time; each answer becomes
   * its result's version 2. Stops at the first failure of the link (rejects; the entry stays).
   */
  drain() {
    if (this.draining) return this.draining;
    this.draining = (async () => {
      const client = this.client;
      for (let entry = this.backlog.first(); entry; entry = this.backlog.first()) {
        const id = client.nextId++;
        const sent = performance.now();
        let reply;
        try {
          reply = await client.connection.request(id, wasm.withRequestId(entry.frame, id), client.timeoutMs);
        } catch (e) {
          if (!(e instanceof SplitError) || !isPermanent(e.code)) throw e;
          // The server will never take this frame (e.g. it changed its calibration): the
          // reduced answer stays the answer, and says why.
          await this.backlog.remove(entry.id);
          this.announce({ id: entry.id, version: 2, quality: "reduced", final: true, top: entry.top, previousTop: entry.top,
                          changed: false, split: entry.split, label: entry.label, error: { code: e.code, message: e.message } });
          continue;
        }
        await this.backlog.remove(entry.id);
        this.announce({
          id: entry.id, version: 2, quality: "full", final: true, top: reply.top, previousTop: entry.top,
          changed: reply.top[0].class !== entry.top[0].class, split: entry.split, codec: entry.codec,
          label: entry.label, model: entry.model, bytesSent: entry.frame.length,
          roundTripMs: performance.now() - sent, waitedMs: Date.now() - entry.createdAt,
        });
      }
    })().finally(() => {
      this.draining = null;
    });
    return this.draining;
  }
}
