// Which of the model's weights the edge holds, and downloading more when a request needs them.
//
// The server cuts its weights per stage (`/api/info`'s `weights_shards`: the stem, each block,
// the head conv, the classifier). A split at block5 runs the stem and blocks 0–5, 2% of the
// bytes; the 1280-channel head and the classifier are 60% and only edge-only runs them. Each
// shard is kept in Cache Storage under its checksum, so a revisit downloads nothing.
//
// For outages the server also publishes a light model (`/api/info`'s `light_model`: the same
// stages in int8, a quarter of the bytes): `ensureLight` loads it for the stages the edge does
// not hold in full, so the device can always answer (a reduced answer, see resilience.js).

import { SplitError, fetchCached, isCached, serverUrl, wasm, wasmCall } from "./wasm.js";

/** A boundary's index in forward order (input 0 … logits 20); -1 when unknown. */
export function boundaryIndex(name) {
  return wasm.boundaries().findIndex((b) => b.name === name);
}

export class EdgeWeights {
  /**
   * @param {object} edge  the wasm `EdgeSession`
   * @param {object} info  the server's `/api/info`
   * @param {URL} base  the server's base URL
   * @param {(p: object) => void} onProgress  `{ stage: "weights", loaded, total, fraction, cached }`
   */
  constructor(edge, info, base, onProgress) {
    this.edge = edge;
    this.info = info;
    this.base = base;
    this.onProgress = onProgress;
    /** Bytes of weights this client downloaded or read from its cache so far. */
    this.bytes = 0;
    /** Bytes of the light model's shards, likewise. */
    this.lightBytes = 0;
    /** Loads run one after another: two requests needing the same shard fetch it once. */
    this.queue = Promise.resolve();
  }

  /** The deepest boundary the loaded stages reach ("input" with none, "logits" with all). */
  get through() {
    return this.edge.loadedThrough;
  }

  /** Bytes of every shard (or of the whole file, from a server without shards). */
  get total() {
    const shards = this.info.weights_shards;
    return shards ? shards.reduce((sum, s) => sum + s.bytes, 0) : this.info.weights_bytes;
  }

  /** Whether the stages after the full ones are all there in the light model's weights (a
   * full run is possible here, reduced where light). */
  get hasLight() {
    return this.through !== "logits" && this.edge.reachableThrough === "logits";
  }

  /** The light model's precision (e.g. "int8"), or null when the server publishes none. */
  get lightModel() {
    return this.info.light_model?.precision ?? null;
  }

  /** `{ through, bytes, total, light, lightBytes }`: what is loaded in full, its share of the
   * weights, and the light model's precision when it covers the rest (else null). */
  describe() {
    return { through: this.through, bytes: this.bytes, total: this.total,
             light: this.hasLight ? this.lightModel : null, lightBytes: this.lightBytes };
  }

  /**
   * Load the light model's shards of every stage not loaded yet (in full or light), so the
   * device can run the whole network; queued with the full downloads. Progress says
   * `stage: "light-weights"`.
   */
  ensureLight() {
    const light = this.info.light_model;
    if (!light) return Promise.reject(new SplitError("no_light_model", "the server publishes no light model"));
    return this.enqueue(() => this.loadLight(light.shards));
  }

  async loadLight(shards) {
    await this.loadKeptFull();
    const have = boundaryIndex(this.edge.reachableThrough);
    const needed = shards.filter((s) => boundaryIndex(s.name) > have);
    const files = await this.fetchAll(needed, "light-weights");
    for (const [i, s] of needed.entries()) {
      await wasmCall(() => this.edge.loadLightStage(s.name, files[i]));
      this.lightBytes += files[i].length;
    }
  }

  /**
   * Load the full stages after the loaded ones that this browser already keeps in Cache
   * Storage (an earlier visit's deeper split), in forward order up to the first it lacks:
   * exact and without a download, where the light model would need one (a page started
   * without the server has only what it kept).
   */
  async loadKeptFull() {
    const have = boundaryIndex(this.through);
    let target = have;
    for (const s of this.info.weights_shards ?? []) {
      const k = boundaryIndex(s.name);
      if (k <= have) continue;
      if (k !== target + 1 || !(await isCached(serverUrl(s.url, this.base), s.id))) break;
      target = k;
    }
    if (target > have) await this.load(target);
  }

  /**
   * Make sure every stage up to boundary `through` ("logits": all of them) is loaded,
   * downloading the shards that are missing (all at once, with one progress for their sum).
   */
  ensure(through) {
    const target = boundaryIndex(through);
    if (target < 0) return Promise.reject(new SplitError("bad_option", `unknown boundary ${through}`));
    return this.enqueue(() => this.load(target));
  }

  /** Run `f` after the loads queued before it; a failed one does not block the next. */
  enqueue(f) {
    const run = this.queue.then(f);
    this.queue = run.catch(() => {});
    return run;
  }

  /** Download `shards` at once, with one progress (`stage`) for their sum; `cached` when
   * every one came from Cache Storage. */
  fetchAll(shards, stage) {
    const total = shards.reduce((sum, s) => sum + s.bytes, 0);
    const loaded = new Map();
    let cached = true;
    const progress = (s) => (p) => {
      loaded.set(s.name, p.loaded);
      cached &&= Boolean(p.cached);
      const sum = [...loaded.values()].reduce((a, b) => a + b, 0);
      this.onProgress({ stage, loaded: sum, total, fraction: total ? Math.min(1, sum / total) : 1, cached });
    };
    return Promise.all(shards.map((s) => fetchCached(serverUrl(s.url, this.base), s.id, stage, progress(s), s.bytes)));
  }

  async load(target) {
    const have = boundaryIndex(this.through);
    if (target <= have) return;
    const shards = this.info.weights_shards;
    if (!shards) {
      // A server from before shards: the whole file, every stage.
      const { weights_url: path, weights_id: id, weights_bytes: size } = this.info;
      const bytes = await fetchCached(serverUrl(path, this.base), id, "weights", this.onProgress, size);
      await wasmCall(() => this.edge.loadWeights(bytes));
      this.bytes += bytes.length;
      return;
    }
    const needed = shards.filter((s) => {
      const k = boundaryIndex(s.name);
      return k > have && k <= target;
    });
    const files = await this.fetchAll(needed, "weights");
    // In forward order, so a failure leaves a usable prefix loaded.
    for (const [i, s] of needed.entries()) {
      await wasmCall(() => this.edge.loadStage(s.name, files[i]));
      this.bytes += files[i].length;
    }
  }
}
