// `split: "auto"`: the wasm planner (`plan::AdaptivePolicy`, the code the trace simulator runs)
// decides where each request runs, how long it may wait for the server, and when to probe the
// network; this part only carries bytes between it, the client and the clock.

import { newResultId } from "./resilience.js";
import { SWITCHES_KEPT, SplitError, keepNewest, modelInputJpeg } from "./wasm.js";

/** How long `create` waits for the link's first measurement, ms: a link that has not answered
 * by then is left to the probes that follow. */
const LINK_PROBE_BUDGET_MS = 3_000;

/** Failures the edge would hit too: no point running locally after them. */
const CALLER_ERRORS = new Set(["bad_image", "bad_option"]);

/** Time making a cloud-only upload on this device once, before the first plan, so that the
 * planner's first choice counts it (requests then replace it with their own): a 320x240
 * gradient, encoded once to warm the encoder and then timed. Less than a photo costs, which
 * the first cloud-only request corrects. */
export async function timeUploadPrep(planner) {
  if (typeof OffscreenCanvas === "undefined") return;
  try {
    const canvas = new OffscreenCanvas(320, 240);
    const ctx = canvas.getContext("2d");
    const gradient = ctx.createLinearGradient(0, 0, 320, 240);
    gradient.addColorStop(0, "#2a6f4e");
    gradient.addColorStop(1, "#d08c3c");
    ctx.fillStyle = gradient;
    ctx.fillRect(0, 0, 320, 240);
    const png = new Uint8Array(await (await canvas.convertToBlob({ type: "image/png" })).arrayBuffer());
    await modelInputJpeg(png);
    const started = performance.now();
    await modelInputJpeg(png);
    planner.observeUploadPrep(performance.now() - started);
  } catch {
    // No canvas here (or no encoder): the first cloud-only request measures it.
  }
}

export class Adaptive {
  /**
   * @param {import("../split-client.js").SplitClient} client
   * @param {object} planner  the wasm `AdaptivePlanner`
   * @param {(s: object) => void} onSwitch
   */
  constructor(client, planner, onSwitch) {
    this.client = client;
    this.planner = planner;
    this.onSwitch = onSwitch;
    /** The newest placement changes (`SWITCHES_KEPT`): { atMs, from, to, reason }. */
    this.switches = [];
    this.probeTimer = null;
  }

  /** Classify with the planner's placement; a request the network fails is answered on this
   * device (`Resilience.answer`: the light model where the full weights are missing, its
   * features kept for the server), and everything observed feeds the planner. */
  async classify(image, options = {}) {
    options = { ...options, id: options.id ?? newResultId() };
    const resilience = this.client.resilience;
    const planner = this.planner;
    this.startProbing();
    const decision = planner.tick(performance.now());
    if (decision.decision === "switch") {
      keepNewest(this.switches, decision, SWITCHES_KEPT);
      this.onSwitch(decision);
    }
    const placement = planner.current();
    const split = { edge_only: "edge", cloud_only: "cloud", encrypted: "encrypted" }[placement.mode] ?? placement.boundary;
    const codec = placement.codec ?? this.client.defaultCodec;
    const started = performance.now();
    let r;
    try {
      if (split === "edge" && !planner.linkUp && this.client.fallback === "light" && this.client.weights.hasLight) {
        // Edge only because the server is out of reach, without the later stages' full
        // weights: the light model answers, and the server finishes the features when it is
        // back (no 17 MB download over a link that is down). Edge only on a working link
        // (the device is faster) downloads the full weights instead.
        r = await resilience.answer(image, "edge", codec, options.id, options, undefined);
      } else {
        // Cloud-only uploads a quality-90 JPEG of the 224x224 model input. Making it is
        // cloud-only's work on this device, and the planner counts it.
        let upload = image;
        let prepMs = 0;
        if (split === "cloud") {
          const prepStarted = performance.now();
          upload = await modelInputJpeg(image);
          prepMs = performance.now() - prepStarted;
          planner.observeUploadPrep(prepMs);
        }
        const deadlineMs = planner.deadlineMs(this.client.timeoutMs);
        r = await this.client.classify(upload, split, { ...options, codec, deadlineMs, modelInput: split === "cloud" });
        // The answer's time starts before the upload was made, as the planner's price does.
        if (split === "cloud" && r.mode === "cloud") {
          r.uploadPrepMs = prepMs;
          r.totalMs += prepMs;
        }
      }
    } catch (e) {
      // Whatever went wrong on the way or on the server (closed, slow, busy, internal, a
      // calibration it lacks), the edge can still answer; only the caller's own mistakes (an
      // undecodable image, an unknown option) would fail there too.
      if (!(e instanceof SplitError) || CALLER_ERRORS.has(e.code)) throw e;
      planner.observeFailure(performance.now(), started);
      // An encrypted request's features go nowhere else: the fallback runs the whole network.
      r = await resilience.answer(image, split === "encrypted" ? "edge" : split, codec, options.id, options, e.message);
      r.totalMs = performance.now() - started; // the wait for the server counts too
    }
    planner.observeRequest(performance.now(), r.bytesSent, r.roundTripMs, r.serverMs,
                           r.load ? r.load.waitMs : NaN, r.load ? r.queueMs : NaN);
    // What the edge's part cost here, the photo's decoding and the features' coding included:
    // the planner's edge factor follows it (the warm-up timed only the bare stages). The light
    // model's runs, a fallback's and a cache hit's say nothing about the full model's speed;
    // nor does a run that paused for a ping: on a stalled link pings stay out for seconds and
    // every run pauses between all its stages, which on the lab's throttled page doubled it
    // (AT&T LTE driving: 304-343 ms runs against 165, and edge-only then priced at 304 ms for
    // the next 12 s, docs/adaptive.md).
    if (r.quality === "full" && !r.fallback && !r.edgePaused && (r.mode === "edge" || r.mode === "split")) {
      planner.observeEdge(performance.now(), r.mode === "edge" ? "logits" : r.split, r.edgeMs, r.edgeStagesMs);
    }
    // The server's congestion price prices its compute (goals that weigh the server's cost).
    if (r.load) planner.observePrice(r.load.price);
    // This device's own cryptography replaces the table's estimate of it.
    if (r.mode === "encrypted") planner.observeEncryptedMs(r.encryptMs + r.decryptMs);
    // After this request's own stages: the rest, for the fallback's sake.
    this.client.loadAllInBackground();
    const result = { ...r, auto: true, placement, explain: planner.explain(this.client.timeoutMs) };
    // Running locally, back-to-back requests keep this thread busy and the timer's probes may
    // never find it idle: start one here when it is due. The answer does not wait for it (a
    // ping stuck in an outage would hold it for the ping's whole timeout); the next requests'
    // edge runs pause between stages while it is out, so its pong is timed within a stage
    // (while the link is down they run whole, and its pong is read before the next run).
    if ((split === "edge" || r.fallback) && planner.probeDue(performance.now())) {
      this.probe().catch(() => {});
    }
    return result;
  }

  /** Before the first request: open the socket, then a bare ping and an uplink probe, so the
   * first placement is planned on this link as measured. A socket that does not open counts as
   * the link being down (the first plan runs locally); a link slower than `budgetMs` to answer
   * is left to the probes that follow. Measured by the page's lab on 3G (docs/adaptive.md). */
  async measureLink(budgetMs = LINK_PROBE_BUDGET_MS) {
    const measure = async () => {
      try {
        await this.client.connect();
      } catch {
        this.planner.observeFailure(performance.now());
        return;
      }
      await this.probe();
    };
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, budgetMs); });
    await Promise.race([measure().catch(() => {}), late]);
    clearTimeout(timer);
  }

  /** Probe while adaptive mode is in use, whenever the planner says one is due. */
  startProbing() {
    if (this.probeTimer) return;
    this.probeTimer = setInterval(() => {
      if (this.planner.probeDue(performance.now())) this.probe().catch(() => {});
    }, this.planner.probePeriodMs);
  }

  /** A bare ping (RTT, server load) and, right behind it, the uplink probe the planner asks
   * for, if any and the link is up: the server times the probe's padding from the bare ping's
   * arrival to its own (the pong's `gapMs`), so edge runs pause for the bare ping alone. On a
   * slow uplink the probe is out for seconds (16 KiB at 240 kbit/s: 0.55 s plus the round
   * trip), and pausing every run meanwhile cost the lab's T-Mobile trace most of its runs. */
  async probe() {
    const padding = this.planner.startProbe(performance.now());
    const bare = this.ping(0, this.planner.linkUp);
    if (padding === 0 || !this.planner.linkUp) {
      await bare;
      return;
    }
    await Promise.all([bare, this.ping(padding, false)]);
  }

  /** A ping the planner learns from (its round trip, or the failure). With `pause` edge runs
   * pause for it so that its pong is timed within a stage; while the link is down a ping only
   * asks whether it is back, so runs do not pause for it (an answer read a run late costs less
   * than a pause in every run of the outage), nor for an uplink probe the server times. */
  async ping(probeBytes, pause) {
    const timeoutMs = this.planner.pingTimeoutMs(probeBytes, this.client.timeoutMs);
    const sent = performance.now();
    const p = await this.client.ping(probeBytes, timeoutMs, pause);
    if (p == null) this.planner.observeFailure(performance.now(), sent);
    else this.planner.observePing(performance.now(), probeBytes, p.ms, p.load.waitMs, p.skewed, p.gapMs ?? undefined);
    if (p?.load) this.planner.observePrice(p.load.price);
    return p;
  }

  stop() {
    clearInterval(this.probeTimer);
    this.probeTimer = null;
  }
}
