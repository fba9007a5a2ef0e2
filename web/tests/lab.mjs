// The browser lab: the real page's SplitClient in headless Chromium with the CPU throttled
// through the DevTools protocol (Lighthouse's mobile setting is 4x), its WebSocket going through
// the link emulator (`netem`, lab/src/bin/netem.rs). Every mode runs on the same photo:
// edge-only, cloud-only (a quality-90 JPEG of the 224x224 crop made with the browser's canvas per
// request, as a plain app would upload),
// fixed splits, and the adaptive planner ("auto").
//
// Static links: REPEATS rounds of REQUESTS requests per mode (after one warm-up each), each mode
// in its own browser (fresh for each link), the modes taking turns request by request.
// Traces: TRACE_REPEATS rounds, in each for each mode a fresh emulator (its clock starts when the
// client connects) and a fresh client; requests back to back until the trace ends, each stamped
// with its time on the trace.
//
// Edge cost: the CPU time (user + system, every Chromium process: renderer, GPU, network) spent
// during a mode's requests divided by their number, read from /proc. Not a test: `./run.sh lab`
// runs it and writes the report; it writes raw samples as JSON to OUT.
//
//   SPLIT_URL=http://127.0.0.1:8080/ OUT=lab.json [LINKS=fast-wifi,4g] [MODES=edge,cloud,block5,auto]
//     [REQUESTS=10] [REPEATS=3] [THROTTLE=4] [TRACES=degrading,outage,verizon-lte,…] [TRACE_MODES=...]
//     [TRACE_REPEATS=1] [TRACE_SCALE=1] node tests/lab.mjs
// (server started with --cache-entries 0; `cargo build -p split-lab` builds netem)
import { writeFileSync } from "node:fs";
import { GPU_ARGS, browserCpuMs as allBrowserCpuMs, startNetem, withPage } from "./browser.mjs";

const browserCpuMs = () => allBrowserCpuMs(["netem"]);

const env = process.env;
const url = new URL(env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const list = (v, d) => (v ?? d).split(",").filter(Boolean);
const LINKS = list(env.LINKS, "fast-wifi,4g,3g,congested-uplink");
const MODES = list(env.MODES, "edge,cloud,block5,block11,auto");
// The synthetic traces, then a minute each of three recorded ones (lab/traces/README.md).
const TRACES = list(env.TRACES, "degrading,outage,verizon-lte,att-lte-driving,tmobile-umts-driving");
const TRACE_MODES = list(env.TRACE_MODES, "edge,cloud,block5,block11,auto");
const REQUESTS = Number(env.REQUESTS ?? 10);
const REPEATS = Number(env.REPEATS ?? 3);
// A trace's run is one draw (where its stalls meet the requests): several say how far it moves.
const TRACE_REPEATS = Number(env.TRACE_REPEATS ?? 1);
const THROTTLE = Number(env.THROTTLE ?? 4);
const TRACE_SCALE = Number(env.TRACE_SCALE ?? 1);
const log = (...a) => console.error("lab:", ...a);
/** The modes of one repeat in the order they run: as listed, backwards on every other repeat,
 * so that no mode always runs last (after the page has run the others for minutes) or always
 * meets the same stretch of a machine whose speed drifts. */
const inTurn = (modes, repeat) => (repeat % 2 ? [...modes].reverse() : modes);

/** The emulator for a profile or trace, at the lab's trace scale. */
const startLink = (link) => startNetem(url.host, link, TRACE_SCALE);

/** A page with the CPU throttled before anything runs, holding the photo and its JPEG. */
async function preparePage(page) {
  await page.goto(new URL("healthz", url).href);
  page.cdp = await page.context().newCDPSession(page);
  await throttle(page, THROTTLE);
  await preparePageImages(page);
}

/** Chromium's CPU throttle on `page` (1: off). */
const throttle = (page, rate) => page.cdp.send("Emulation.setCPUThrottlingRate", { rate });

async function preparePageImages(page) {
  await page.evaluate(async () => {
    const png = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
    window.png = png;
    // What a plain app uploads: the centre crop at 224x224 as a quality-90 JPEG, made with the
    // browser's own decoder and encoder for each photo (inside the timed request, as auto's own
    // encode is).
    window.plainUpload = async () => {
      const bitmap = await createImageBitmap(new Blob([png]));
      const side = Math.min(bitmap.width, bitmap.height) * 224 / 256;
      const canvas = new OffscreenCanvas(224, 224);
      canvas.getContext("2d").drawImage(bitmap, (bitmap.width - side) / 2, (bitmap.height - side) / 2, side, side, 0, 0, 224, 224);
      return new Uint8Array(await (await canvas.convertToBlob({ type: "image/jpeg", quality: 0.9 })).arrayBuffer());
    };
    /** One request in `mode` on the photo (`cloud`: the plain app's JPEG). */
    window.classifyAs = async (mode) => window.client.classify(mode === "cloud" ? await window.plainUpload() : window.png, mode, { modelInput: mode === "cloud" });
    /** `classifyAs` with its start and wall time, the planner's explanation cut to what the lab keeps. */
    window.timedClassify = async (mode) => {
      const started = Date.now();
      const r = await window.classifyAs(mode);
      return { r: { ...r, explain: r.explain ? { forecast: r.explain.forecast, ranked: r.explain.ranked } : undefined }, s: started, wall: Date.now() - started };
    };
  });
}

/** A new client on `wsUrl` (the previous one closed); the device timing sees the throttle. */
const newClient = (page, wsUrl) => page.evaluate(async (wsUrl) => {
  const { SplitClient } = await import("/split-client.js");
  if (window.client) {
    window.client.close();
    window.client.terminate?.(); // its worker, weights and all
  }
  // On the page's thread: Chromium's CPU throttle (what makes this a slow phone) does not reach
  // a worker's wasm — the client's edge took 36.1 ms unthrottled and 38.2 ms at rate 4 in its
  // worker, 35.7 and 159.1 ms on the page's thread — so a worker here would measure a fast CPU.
  window.client = await SplitClient.create({ backend: "cpu", wsUrl: wsUrl ?? undefined, cacheEntries: 0, worker: false });
}, wsUrl);

const sample = (r, started, wall) => ({ start: started, total: wall, client_total: r.totalMs, bytes: r.bytesSent, edge: r1(r.edgeMs),
  // Of the edge time, the network's stages; `edge_paused` only when the run paused for a ping.
  edge_stages: r1(r.edgeStagesMs), edge_paused: r.edgePaused ? true : null,
  // What auto planned ("edge_only", "cloud_only" or a boundary); a timed-out request ran locally.
  placement: r.placement ? (r.fallback ? "fallback_edge" : r.placement.mode === "split" ? `${r.placement.boundary}:${r.placement.codec}` : r.placement.mode) : null,
  fallback: r.fallback ?? null, top1: r.top[0].class,
  // What auto's planner believed when it answered: the link it forecast and its two best
  // placements' predicted totals (why it chose what it chose).
  planned: r.explain ? planned(r.explain) : null });

// Tenths of a millisecond: the report keeps every auto sample's, and full doubles doubled its size.
const r1 = (v) => (v == null ? v : Math.round(v * 10) / 10);
const planned = (x) => ({ rtt_ms: r1(x.forecast.predicted.rttMs), uplink_bytes_per_ms: r1(x.forecast.predicted.uplinkBytesPerMs),
  edge_factor: r1(x.forecast.predicted.edgeFactor), cloud_factor: r1(x.forecast.predicted.cloudFactor), queue_ms: r1(x.forecast.predicted.queueMs),
  ranked: x.ranked.slice(0, 3).map((e) => ({ placement: e.placement.mode === "split" ? `${e.placement.boundary}:${e.placement.codec}` : e.placement.mode,
    total_ms: r1(e.totalMs), edge_ms: r1(e.edgeMs), transfer_ms: r1(e.transferMs), rtt_ms: r1(e.rttMs), cloud_ms: r1(e.cloudMs) })) });

/** One browser per mode on a constant link, the requests taking turns across them: request `i`
 * of every mode, then request `i + 1` of every mode, the order reversed every other time. Each
 * mode meets the same minutes of a machine whose speed drifts, so the oracle (made of the fixed
 * modes) and auto are timed on the same machine; run one mode after the other, auto's P95
 * carried slow spells of the device the fixed modes' did not (docs/history.md). Each mode its own client, in its own browser: auto
 * learns only from its own requests, and its pings are answered by a thread no other mode's
 * edge run holds. A page is throttled only while its own request runs (and while its client
 * starts, so that the client times the slow device): Chromium's throttle keeps a core busy
 * while it holds an idle page back. */
async function staticLink(link) {
  const { child, addr } = await startLink(link);
  const runs = [];
  try {
    await withPagesFor(MODES, async (pages) => {
      for (const [mode, page] of pages) {
        await preparePage(page);
        await newClient(page, `ws://${addr}/ws`);
        await throttle(page, 1);
      }
      const one = async (mode) => {
        const page = pages.get(mode);
        await throttle(page, THROTTLE);
        try {
          return await page.evaluate((mode) => window.timedClassify(mode), mode);
        } finally {
          await throttle(page, 1);
        }
      };
      for (let repeat = 0; repeat < REPEATS; repeat++) {
        for (const mode of inTurn(MODES, repeat)) await one(mode); // warm-up
        const samples = new Map(MODES.map((m) => [m, []]));
        for (let i = 0; i < REQUESTS; i++) {
          for (const mode of inTurn(MODES, repeat + i)) samples.get(mode).push(await one(mode));
        }
        for (const mode of MODES) {
          const got = samples.get(mode);
          runs.push({ repeat, mode, samples: got.map(({ r, s, wall }) => sample(r, s, wall)) });
          log(`${link} repeat ${repeat} ${mode}: median ${got.map(({ wall }) => wall).sort((a, b) => a - b)[REQUESTS >> 1]} ms`);
        }
      }
      for (const page of pages.values()) await page.evaluate(() => window.client.close());
    });
  } finally {
    child.kill();
  }
  return { link, kind: "profile", interleaved: "requests", runs };
}

/** `body(pages)` with a fresh browser for each of `modes` (a map from mode to its page). */
const withPagesFor = (modes, body, pages = new Map()) => (modes.length === 0 ? body(pages)
  : withPage(GPU_ARGS.cpu, (page) => withPagesFor(modes.slice(1), body, pages.set(modes[0], page))));

async function trace(name) {
  const runs = [];
  await withPage(GPU_ARGS.cpu, async (page) => {
    await preparePage(page);
    for (let repeat = 0; repeat < TRACE_REPEATS; repeat++) for (const mode of inTurn(TRACE_MODES, repeat)) {
      const { child, addr, clock } = await startLink(name);
      try {
        await newClient(page, `ws://${addr}/ws`);
        await page.evaluate(() => window.client.connect());
        const origin = await clock;
        const { samples, durationMs } = await page.evaluate(async ({ mode, origin, scale }) => {
          const durationMs = 60_000 * scale;
          const out = [];
          while (Date.now() - origin < durationMs) out.push(await window.timedClassify(mode));
          return { samples: out, durationMs };
        }, { mode, origin, scale: TRACE_SCALE });
        const switches = await page.evaluate(() => window.client.switches.map((s) => ({ at_ms: s.atMs, reason: s.reason })));
        runs.push({ repeat, mode, origin, duration_ms: durationMs,
          switches, samples: samples.map(({ r, s, wall }) => ({ ...sample(r, s, wall), t: s - origin })) });
        log(`trace ${name} repeat ${repeat} ${mode}: ${samples.length} requests`);
      } finally {
        child.kill();
      }
    }
    await page.evaluate(() => window.client.close());
  });
  return { link: name, kind: "trace", scale: TRACE_SCALE, runs };
}

/** Edge CPU per request and mode, on loopback and *without* throttling: Chromium's throttle
 * keeps a core busy while it holds the page back (about 950 ms of CPU per second at 4x, idle),
 * so CPU time under it measures the throttle, not the work. The idle rate is measured first and
 * subtracted. */
async function edgeCost() {
  const runs = [];
  let idleMsPerS = 0;
  await withPage(GPU_ARGS.cpu, async (page) => {
    await page.goto(new URL("healthz", url).href);
    await preparePageImages(page);
    await newClient(page, null);
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    await sleep(500);
    const idle0 = browserCpuMs();
    await sleep(3000);
    idleMsPerS = (browserCpuMs() - idle0) / 3;
    for (let repeat = 0; repeat < REPEATS; repeat++) {
      for (const mode of MODES) {
        await page.evaluate((mode) => window.classifyAs(mode), mode);
        const cpu0 = browserCpuMs();
        const t0 = Date.now();
        await page.evaluate(async ({ mode, n }) => {
          for (let i = 0; i < n; i++) await window.classifyAs(mode);
        }, { mode, n: REQUESTS });
        const cpu = browserCpuMs() - cpu0;
        const wallMs = Date.now() - t0;
        runs.push({ repeat, mode, cpu_ms_per_request: cpu / REQUESTS,
          net_cpu_ms_per_request: Math.max(0, cpu - idleMsPerS * wallMs / 1000) / REQUESTS, wall_ms_per_request: wallMs / REQUESTS });
      }
    }
    await page.evaluate(() => window.client.close());
  });
  log(`edge cost: idle ${idleMsPerS.toFixed(0)} ms/s, ${runs.length} runs`);
  return { idle_cpu_ms_per_s: idleMsPerS, runs };
}

const report = { throttle: THROTTLE, requests: REQUESTS, repeats: REPEATS, trace_repeats: TRACE_REPEATS, chromium: null, links: [] };
// What is measured so far is written after each link (`complete: false` until the end): a
// failure late in a 45-minute run keeps what came before it.
const save = () => writeFileSync(env.OUT ?? "lab.json", JSON.stringify(report));
for (const link of LINKS) { report.links.push(await staticLink(link)); save(); }
for (const name of TRACES) { report.links.push(await trace(name)); save(); }
report.edge_cost = await edgeCost();
await withPage([], async (page) => { report.chromium = await page.evaluate(() => navigator.userAgent); });
report.complete = true;
save();
log(`wrote ${env.OUT ?? "lab.json"}`);
