// The browser half of the multi-client lab (`./run.sh lab --clients N --pages P`): P tabs of the
// real page in one headless Chromium, each with its CPU throttled (4x, Lighthouse's mobile
// setting) and its WebSocket through its own emulated link, joining the native crowd
// (lab/src/bin/crowd.rs) on the same schedule: mode i runs from START_AT + i x (DURATION + GAP)
// for DURATION seconds. Like the crowd's clients, each tab wants an answer every INTERVAL ms (a
// camera) and drops the frames that come while it is busy. Writes raw samples as JSON to OUT.
// Without START_AT it prints "ready" once every tab has its client and reads the start time
// (Unix ms) from its standard input: the lab starts the native crowd at the same moment.
//
//   SPLIT_URL=http://127.0.0.1:8080/ OUT=pages.json PAGES=2 MODES=edge,cloud,block5:q6,auto
//     [START_AT=<unix ms>] DURATION=40 GAP=2 INTERVAL=250 [THROTTLE=4] [LINK=4g] node tests/crowd-pages.mjs
import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { GPU_ARGS, startNetem, withPage } from "./browser.mjs";

const env = process.env;
const url = new URL(env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const PAGES = Number(env.PAGES ?? 2);
const MODES = (env.MODES ?? "edge,cloud,block5:q6,auto").split(",").filter(Boolean);
const DURATION_MS = Number(env.DURATION ?? 40) * 1000;
const GAP_MS = Number(env.GAP ?? 2) * 1000;
const INTERVAL_MS = Number(env.INTERVAL ?? 250);
const THROTTLE = Number(env.THROTTLE ?? 4);
const LINK = env.LINK ?? "4g";
const log = (...a) => console.error("crowd-pages:", ...a);

/** The schedule's start: START_AT, or a line on stdin after "ready" on stdout. */
async function startTime() {
  if (env.START_AT) return Number(env.START_AT);
  console.log("ready");
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    lines.close();
    return Number(line.trim());
  }
  throw new Error("no start time on stdin");
}

/** A tab with its CPU throttled and a client on the emulated link. */
async function preparePage(page, wsUrl) {
  await page.goto(new URL("healthz", url).href);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Emulation.setCPUThrottlingRate", { rate: THROTTLE });
  await page.evaluate(async (wsUrl) => {
    window.png = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
    const { SplitClient } = await import("/split-client.js");
    // Cloud-only uploads a quality-90 JPEG of the 224x224 model input, made per request (as auto does).
    window.modelInputJpeg = (await import("/client/wasm.js")).modelInputJpeg;
    // On the page's thread: the throttle does not reach a worker's wasm (see lab.mjs).
    window.client = await SplitClient.create({ backend: "cpu", wsUrl, cacheEntries: 0, worker: false });
    await window.client.classify(window.png, "edge"); // warm-up: compiled and allocated
  }, wsUrl);
}

/** One mode on one tab, from `at` for DURATION_MS: a frame every INTERVAL_MS, late ones dropped. */
const runMode = (page, mode, at) => page.evaluate(async ({ mode, at, durationMs, intervalMs }) => {
  const [split, codec] = mode.split(":");
  const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
  await sleep(at - Date.now());
  const out = [];
  let next = at;
  while (Date.now() < at + durationMs) {
    await sleep(next - Date.now());
    if (Date.now() >= at + durationMs) break;
    const started = Date.now();
    try {
      const cloud = split === "cloud";
      const image = cloud ? await window.modelInputJpeg(window.png) : window.png;
      const r = await window.client.classify(image, split, { codec, modelInput: cloud });
      const p = r.placement;
      out.push({ t: started - at, total: Date.now() - started, bytes: r.bytesSent, edge: r.edgeMs, top1: r.top[0].class,
        placement: r.fallback ? "fallback_edge" : p ? (p.mode === "split" ? `${p.boundary}/${p.codec}` : p.mode) : split,
        fallback: r.fallback ?? null });
    } catch (e) {
      out.push({ t: started - at, total: Date.now() - started, error: String(e.message ?? e) });
    }
    next += intervalMs;
    while (next < Date.now()) next += intervalMs;
  }
  return out;
}, { mode, at, durationMs: DURATION_MS, intervalMs: INTERVAL_MS });

const { child, addr } = await startNetem(url.host, LINK);
const report = { pages: PAGES, throttle: THROTTLE, link: LINK, interval_ms: INTERVAL_MS, chromium: null, modes: [] };
try {
  await withPage(GPU_ARGS.cpu, async (first) => {
    const pages = [first];
    while (pages.length < PAGES) pages.push(await first.context().newPage());
    await Promise.all(pages.map((p) => preparePage(p, `ws://${addr}/ws`)));
    report.chromium = await first.evaluate(() => navigator.userAgent);
    const START_AT = await startTime();
    if (Date.now() > START_AT) log(`pages ready ${Date.now() - START_AT} ms after the start: the first mode starts late`);
    for (const [i, mode] of MODES.entries()) {
      const at = START_AT + i * (DURATION_MS + GAP_MS);
      const samples = await Promise.all(pages.map((p) => runMode(p, mode, at)));
      report.modes.push({ mode, pages: samples });
      log(`${mode}: ${samples.map((s) => s.length).join(", ")} requests`);
    }
    await Promise.all(pages.map((p) => p.evaluate(() => window.client.close())));
  });
} finally {
  child.kill();
}
writeFileSync(env.OUT ?? "pages.json", JSON.stringify(report));
