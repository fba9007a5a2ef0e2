// The client in each engine (`SPLIT_ENGINES`, default: every engine in engine.mjs): the demo
// page loads the best build the engine validates and says which, and why not the better ones
// (`client.capabilities`); every mode classifies the samples right from the client in its
// worker; a second visit downloads no weights (Cache Storage); the embedding example works.
// Run by `cargo xtask test` with SPLIT_URL set to the server.
import assert from "node:assert/strict";
import { ENGINES, withEngine } from "./engine.mjs";

const url = process.env.SPLIT_URL;
assert.ok(url, "set SPLIT_URL to the server's base URL (cargo xtask test does)");
const engines = (process.env.SPLIT_ENGINES ?? ENGINES.join(",")).split(",");
const STEP_TIMEOUT_MS = 300_000;
/** The samples and their top-1 classes: chelsea a cat (tiger cat in the numpy reference, its
 * close second Egyptian cat), coffee an espresso (967, the reference's); the camera photo has
 * no reference answer here, so every mode must give edge-only's. */
const SAMPLES = { chelsea: [281, 282, 283, 284, 285], coffee: [967], camera: null };
const MODES = ["edge", "cloud", "block5", "block11", "auto"];

/** The build a page should load from what the engine offers: WebGPU first, then threads,
 * each with relaxed SIMD where the engine validates it (client/wasm.js). */
function bestBuild(c) {
  if (c.webgpu.available) return "webgpu";
  if (c.relaxedSimd.available) return c.threads.available ? "cpu-threads" : "cpu-relaxed";
  return c.threads.available ? "cpu-threads-simd128" : "cpu";
}

async function ready(page) {
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: STEP_TIMEOUT_MS });
  const state = await page.evaluate(() => ({ state: document.body.dataset.state, error: document.querySelector("#error").textContent }));
  assert.equal(state.state, "ready", `the page failed to load: ${state.error}`);
}

async function engineChecks(engine) {
  return withEngine(engine, async (browser) => {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    await page.goto(new URL("index.html", url).href);
    await ready(page);
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
    const probe = await page.evaluate(() => ({ gpu: "gpu" in navigator, cores: navigator.hardwareConcurrency }));
    if (!probe.gpu) assert.equal(c.webgpu.available, false, `${engine}: no navigator.gpu, no WebGPU`);
    if (probe.cores > 1) assert.equal(c.threads.available, true, `${engine}: threads in an isolated page's worker on ${probe.cores} cores`);

    // Every mode, every sample, through the page's client.
    const rows = await page.evaluate(async ({ modes, samples }) => {
      const out = [];
      for (const name of samples) {
        const bytes = new Uint8Array(await (await fetch(`samples/${name}.png`)).arrayBuffer());
        for (const mode of modes) {
          const r = await window.splitClient.classify(bytes, mode, {});
          out.push({ sample: name, mode, top1: r.top[0].class, answered: r.mode, bytesSent: r.bytesSent });
        }
      }
      return out;
    }, { modes: MODES, samples: Object.keys(SAMPLES) });
    console.table(rows);
    for (const r of rows) {
      const edge = rows.find((e) => e.sample === r.sample && e.mode === "edge").top1;
      const expected = SAMPLES[r.sample] ?? [edge];
      assert.ok(expected.includes(r.top1), `${engine}/${r.sample}/${r.mode}: top-1 ${r.top1}, expected ${expected}`);
    }
    for (const r of rows.filter((r) => r.mode === "edge")) assert.equal(r.bytesSent, 0, `${engine}: edge-only sends nothing`);

    // A second visit: the weights and the codec tables come from Cache Storage.
    const visit = async () => {
      page.requests.length = 0;
      await page.reload();
      await ready(page);
      return page.requests.filter((u) => /\/(weights|calibration)\//.test(u)).map((u) => new URL(u).pathname);
    };
    await page.evaluate(() => caches.delete("split-inference"));
    const cold = await visit();
    const warm = await visit();
    console.log(`engines: ${engine}: downloads with an empty cache [${cold.length} files], on the next visit [${warm}]`);
    assert.ok(cold.length > 0, `${engine}: an emptied cache downloads the weights again`);
    assert.deepEqual(warm, [], `${engine}: a second visit downloads no weights or calibration`);

    // The embedding example: the client package alone.
    await page.goto(new URL("examples/embed.html", url).href);
    await page.waitForFunction(() => document.body.dataset.top1 || document.body.dataset.failed, null, { timeout: STEP_TIMEOUT_MS });
    const embedded = await page.evaluate(() => ({ top1: Number(document.body.dataset.top1), text: document.querySelector("#out").textContent }));
    assert.equal(embedded.top1, 282, `${engine}: the embedding example: ${embedded.text}`);
    assert.deepEqual(errors, [], `${engine}: errors on the page`);
    return { engine, build: found.wasmBuild };
  });
}

const results = [];
for (const engine of engines) results.push(await engineChecks(engine));
console.log(`engines: passed: ${results.map((r) => `${r.engine} (${r.build})`).join(", ")}`);
