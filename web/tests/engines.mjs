// The client in each engine (`SPLIT_ENGINES`, default: every engine in engine.mjs): the demo
// page loads the best build the engine validates and says which, and why not the better ones
// (`client.capabilities`); every mode classifies the samples right from the client in its
// worker; a second visit downloads no weights (Cache Storage); the embedding example works;
// a device group of two pages of each other engine and a Chromium page shares a batch over
// WebRTC channels where both ends have WebRTC, through the relay where one does not; without
// Workers, IndexedDB or WebAssembly SIMD the page degrades or fails saying why.
// Run by `cargo xtask test` with SPLIT_URL set to the server.
import assert from "node:assert/strict";
import { ENGINES, withEngine } from "./engine.mjs";
import { InjectingProxy } from "./inject-proxy.mjs";
import { RequestLog } from "./request-log.mjs";

const server = process.env.SPLIT_URL;
assert.ok(server, "set SPLIT_URL to the server's base URL (cargo xtask test does)");
const engines = (process.env.SPLIT_ENGINES ?? ENGINES.join(",")).split(",");
const STEP_TIMEOUT_MS = 300_000;
/** The samples and their top-1 classes: chelsea a cat (tiger cat in the numpy reference, its
 * close second Egyptian cat), coffee an espresso (967, the reference's); the camera photo has
 * no reference answer here, so every mode must give edge-only's. */
const SAMPLES = { chelsea: [281, 282, 283, 284, 285], coffee: [967], camera: null };
const MODES = ["edge", "cloud", "block5", "block11", "auto", "encrypted"];

/** The build a page should load from what the engine offers: WebGPU first, then threads,
 * each with relaxed SIMD where the engine validates it (client/wasm.js). */
function bestBuild(c) {
  if (c.webgpu.available) return "webgpu";
  if (c.relaxedSimd.available) return c.threads.available ? "cpu-threads" : "cpu-relaxed";
  return c.threads.available ? "cpu-threads-simd128" : "cpu";
}

const log = new RequestLog(Number(new URL(server).port));
const url = await log.listen();

/** Wait for the demo page to load, and check it ended `expected` ("ready" or "failed"). */
async function ready(page, expected = "ready") {
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: STEP_TIMEOUT_MS });
  const state = await page.evaluate(() => ({ state: document.body.dataset.state, error: document.querySelector("#error").textContent }));
  assert.equal(state.state, expected, `the page's state (its error: ${state.error})`);
}

async function engineChecks(engine) {
  return withEngine(engine, async (browser) => {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    // A first visit in a fresh profile: what it downloads before the page is ready.
    const weightFiles = (from) => log.paths.slice(from).filter((p) => /^\/(weights|calibration)\//.test(p));
    const first = log.paths.length;
    await page.goto(new URL("index.html", url).href);
    await ready(page);
    const cold = weightFiles(first);
    // The demo keeps itself for an offline start (sw.js), in every engine.
    const offline = await page.evaluate(() => window.splitClient.offlineReady);
    console.log(`engines: ${engine}: the offline start: ${JSON.stringify(offline)}`);
    assert.equal(offline?.available, true, `${engine}: the service worker kept the start: ${offline?.reason}`);
    // A second visit: the weights and the codec tables come from Cache Storage. A navigation,
    // not a reload: WebKitGTK 2.50's WebDriver reload empties its automation session's Cache
    // Storage for any page (a PNG's own entry went too), which no visitor's reload does.
    const second = log.paths.length;
    await page.goto(new URL("index.html?visit=2", url).href);
    await ready(page);
    const warm = weightFiles(second);
    console.log(`engines: ${engine}: downloads on the first visit [${cold.length} files], on the next [${warm}]`);
    assert.ok(cold.includes("/weights/shards/stem.splw"), `${engine}: the first visit downloads the weights: [${cold}]`);
    assert.deepEqual(warm, [], `${engine}: a second visit downloads no weights or calibration`);

    const found = await page.evaluate(() => {
      const c = window.splitClient;
      return { capabilities: c.capabilities, wasmBuild: c.wasmBuild, backend: c.backend, inWorker: c.inWorker,
               isolated: globalThis.crossOriginIsolated, userAgent: navigator.userAgent };
    });
    const c = found.capabilities;
    console.log(`engines: ${engine} (${found.userAgent}): the ${found.wasmBuild} build`);
    for (const k of ["webgpu", "relaxedSimd", "threads", "worker"]) console.log(`  ${k}: ${c[k].available ? "yes" : `no: ${c[k].reason}`}`);
    // Every feature is used or says why not.
    for (const k of ["webgpu", "relaxedSimd", "threads", "worker"]) {
      assert.equal(typeof c[k].available, "boolean", `${engine}: capabilities.${k}`);
      assert.ok(c[k].available === (c[k].reason == null), `${engine}: capabilities.${k} has a reason exactly when unavailable: ${JSON.stringify(c[k])}`);
    }
    assert.equal(found.wasmBuild, bestBuild(c), `${engine}: the best build the engine offers`);
    assert.equal(c.build, found.wasmBuild, `${engine}: capabilities.build`);
    assert.equal(c.buildFallback, null, `${engine}: the build chosen loaded`);
    assert.equal(found.inWorker, true, `${engine}: the page's client runs in a worker`);
    assert.equal(c.worker.available, true, `${engine}: capabilities.worker`);
    assert.equal(found.isolated, true, `${engine}: the demo page is cross-origin isolated (COOP/COEP)`);
    // What the capabilities say, checked against the engine itself on the page's thread.
    const probe = await page.evaluate(() => ({ gpu: "gpu" in navigator, cores: navigator.hardwareConcurrency,
      shared: typeof SharedArrayBuffer !== "undefined" }));
    if (!probe.gpu) assert.equal(c.webgpu.available, false, `${engine}: no navigator.gpu, no WebGPU`);
    assert.equal(c.threads.available, probe.cores > 1 && probe.shared,
      `${engine}: threads in an isolated page's worker exactly when it has shared memory and ${probe.cores} > 1 cores`);

    // Every mode, every sample, through the page's client.
    const rows = await page.evaluate(async ({ modes, samples }) => {
      const out = [];
      for (const name of samples) {
        const bytes = new Uint8Array(await (await fetch(`samples/${name}.png`)).arrayBuffer());
        for (const mode of modes) {
          let r;
          try {
            r = await window.splitClient.classify(bytes, mode, {});
          } catch (e) {
            // The encrypted classifier is in the relaxed-SIMD builds only: refused elsewhere.
            if (mode !== "encrypted") throw e;
            out.push({ sample: name, mode, refused: e.code, build: window.splitClient.wasmBuild });
            continue;
          }
          out.push({ sample: name, mode, top1: r.top[0].class, answered: r.mode, bytesSent: r.bytesSent });
        }
      }
      return out;
    }, { modes: MODES, samples: Object.keys(SAMPLES) });
    console.table(rows);
    for (const r of rows.filter((r) => r.refused)) {
      assert.ok(r.refused === "unsupported_engine" && !["cpu-relaxed", "cpu-threads"].includes(r.build),
        `${engine}/${r.sample}: encrypted refused (${r.refused}) on the ${r.build} build`);
    }
    for (const r of rows.filter((r) => !r.refused)) {
      const edge = rows.find((e) => e.sample === r.sample && e.mode === "edge").top1;
      const expected = SAMPLES[r.sample] ?? [edge];
      assert.ok(expected.includes(r.top1), `${engine}/${r.sample}/${r.mode}: top-1 ${r.top1}, expected ${expected}`);
    }
    for (const r of rows.filter((r) => r.mode === "edge")) assert.equal(r.bytesSent, 0, `${engine}: edge-only sends nothing`);

    // The embedding example: the client package alone.
    await page.goto(new URL("examples/embed.html", url).href);
    await page.waitForFunction(() => document.body.dataset.top1 || document.body.dataset.failed, null, { timeout: STEP_TIMEOUT_MS });
    const embedded = await page.evaluate(() => ({ top1: Number(document.body.dataset.top1), text: document.querySelector("#out").textContent }));
    assert.equal(embedded.top1, 282, `${engine}: the embedding example: ${embedded.text}`);
    assert.deepEqual(errors, [], `${engine}: errors on the page`);
    return { engine, build: found.wasmBuild };
  });
}

/** Open the demo page for a device group (CPU backend, every stage's weights) and join the
 * group `code` (or start one); the group's code and this page's peer id. */
async function joinGroup(page, name, code) {
  await page.goto(new URL("?backend=cpu&weights=all", url).href);
  await ready(page);
  return page.evaluate(async ({ name, code }) => {
    window.splitGroup = await window.splitClient.joinGroup({ name, id: name, code });
    return { code: window.splitGroup.code, you: window.splitGroup.you };
  }, { name, code });
}

/**
 * A device group across engines: three pages, two in `engine` and one in `other`. The first
 * page's batch goes device to device (`via: "p2p"`) to each page whose engine and its own have
 * WebRTC, through the server's relay to the others (their `capabilities.webrtc` says why), and
 * every photo gets the answer the first page gives alone.
 */
async function groupChecks(engine, other) {
  return withEngine(engine, (first) => withEngine(other, async (second) => {
    const a = await first.newPage();
    const b = await first.newPage();
    const c = await second.newPage();
    const { code, you: peerA } = await joinGroup(a, `${engine}-A`);
    const { you: peerB } = await joinGroup(b, `${engine}-B`, code);
    const { you: peerC } = await joinGroup(c, `${other}-C`, code);
    const rtc = async (page) => {
      const cap = await page.evaluate(() => window.splitClient.capabilities.webrtc);
      assert.equal(cap.available, await page.evaluate(() => typeof RTCPeerConnection !== "undefined"), "capabilities.webrtc");
      assert.ok(cap.available === (cap.reason == null), `capabilities.webrtc's reason: ${JSON.stringify(cap)}`);
      return cap;
    };
    const caps = { [peerA]: await rtc(a), [peerB]: await rtc(b), [peerC]: await rtc(c) };
    const direct = (p) => caps[peerA].available && caps[p].available;
    for (const [p, cap] of Object.entries(caps)) if (!cap.available) console.log(`engines: peer ${p}: ${cap.reason}`);
    await a.waitForFunction(({ peers }) => window.splitGroup.members.length === 3
      && peers.every((p) => window.splitGroup.links?.[p] === "open"), { peers: [peerB, peerC].filter(direct) }, { timeout: 60_000 });
    const out = await a.evaluate(async () => {
      const names = ["chelsea", "camera"];  // coffee.png is over a channel message: it would go by the relay
      const bytes = {};
      for (const n of names) bytes[n] = new Uint8Array(await (await fetch(`samples/${n}.png`)).arrayBuffer());
      const alone = {};
      for (const n of names) alone[n] = (await window.splitClient.classify(bytes[n], "edge")).top[0].class;
      const order = Array.from({ length: 12 }, (_, i) => names[i % 2]);
      const results = await window.splitGroup.classifyAll(order.map((n) => bytes[n]));
      return { order, alone, results: results.map((r) => ({ peer: r.peer, via: r.via, top1: r.top[0].class })) };
    });
    const byPeer = {};
    out.results.forEach((r, i) => {
      assert.equal(r.top1, out.alone[out.order[i]], `${engine}+${other}: photo ${i} (${out.order[i]}) on ${r.peer}`);
      const via = r.peer === peerA ? "local" : direct(r.peer) ? "p2p" : "relay";
      assert.equal(r.via, via, `${engine}+${other}: photo ${i} to ${r.peer}`);
      byPeer[`${r.peer} (${r.via})`] = (byPeer[`${r.peer} (${r.via})`] ?? 0) + 1;
    });
    console.log(`engines: a group of ${engine}, ${engine} and ${other}: photos by peer`, byPeer);
  }));
}

/**
 * Features turned off before the page's scripts run: without Workers and with IndexedDB
 * refused (as private browsing may) the demo page still classifies, on its own thread with a
 * backlog in memory, and says both in `capabilities`; without WebAssembly SIMD the client
 * fails with "unsupported_engine" and the page shows why. The switch-off runs first in the
 * page: an init script where the driver has them, else (WebKitGTK's WebDriver classic) a
 * script a proxy puts at the top of the page (`inject-proxy.mjs`).
 */
const WITHOUT_WORKERS_AND_INDEXEDDB = () => {
  delete globalThis.Worker;
  indexedDB.open = () => { throw new DOMException("refused by the test", "SecurityError"); };
};
const WITHOUT_SIMD = () => {
  // Any module with a SIMD opcode (prefix 0xfd) fails validation, as in an engine without SIMD.
  const validate = WebAssembly.validate;
  WebAssembly.validate = (b) => !new Uint8Array(b.buffer ?? b).includes(0xfd) && validate(b);
  delete globalThis.Worker; // the client on the page's thread, where the script above runs
};

/** A new page of `browser` whose documents run `fn` before their own scripts; its base URL. */
async function pageWith(engine, browser, fn, proxies) {
  const page = await browser.newPage();
  if (engine !== "webkit") {
    await page.addInitScript(fn);
    return { page, base: url };
  }
  const proxy = new InjectingProxy(url, `(${fn.toString()})();`);
  proxies.push(proxy);
  return { page, base: await proxy.listen() };
}

async function degradedChecks(engine) {
  const proxies = [];
  try {
    return await withEngine(engine, async (browser) => {
      const { page, base } = await pageWith(engine, browser, WITHOUT_WORKERS_AND_INDEXEDDB, proxies);
      await page.goto(new URL("index.html", base).href);
      await ready(page);
      const out = await page.evaluate(async () => {
        const c = window.splitClient;
        const bytes = new Uint8Array(await (await fetch("samples/chelsea.png")).arrayBuffer());
        const r = await c.classify(bytes, "block5", {});
        return { worker: c.capabilities.worker, backlog: c.capabilities.backlog, inWorker: c.inWorker, top1: r.top[0].class,
                 persistent: (await c.backlogState()).persistent };
      });
      console.log(`engines: ${engine} without Workers and IndexedDB:`, JSON.stringify(out));
      assert.equal(out.top1, 282, `${engine}: the page classifies without Workers and IndexedDB`);
      assert.deepEqual([out.inWorker, out.worker.available, out.backlog.available, out.persistent], [false, false, false, false]);
      assert.match(out.worker.reason, /no Web Worker/, `${engine}: capabilities.worker says why`);
      assert.match(out.backlog.reason, /IndexedDB/, `${engine}: capabilities.backlog says why`);

      const { page: simdless, base: simdBase } = await pageWith(engine, browser, WITHOUT_SIMD, proxies);
      await simdless.goto(new URL("index.html", simdBase).href);
      await ready(simdless, "failed");
      const shown = await simdless.evaluate(() => document.querySelector("#error").textContent);
      console.log(`engines: ${engine} without SIMD: the page says "${shown}"`);
      assert.match(shown, /no WebAssembly SIMD/, `${engine}: the page says why it cannot run`);
    });
  } finally {
    for (const p of proxies) p.close();
  }
}

const results = [];
try {
  for (const engine of engines) results.push(await engineChecks(engine));
  for (const engine of engines.filter((e) => e !== "chromium")) await groupChecks(engine, "chromium");
  for (const engine of engines) await degradedChecks(engine);
} finally {
  log.close();
}
console.log(`engines: passed: ${results.map((r) => `${r.engine} (${r.build})`).join(", ")}`);
