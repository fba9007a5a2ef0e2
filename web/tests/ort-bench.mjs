// burn (wasm, CPU) against ONNX Runtime Web (wasm backend) in the same engine, on the same model
// and weights: the ONNX file `./run.sh onnx` exported. Each engine in SPLIT_ENGINES (default:
// chromium; any of engine.mjs's) runs every CPU build it can load (its `client.capabilities`
// say which) and ORT Web on 1 thread and, where the page has shared memory, 2. Not a test;
// prints a table. ORT Web is not a project dependency: install it for this benchmark only.
//
//   npm install --no-save onnxruntime-web@1.30.0
//   SPLIT_URL=http://127.0.0.1:8080/ ONNX=~/.cache/splitinfer/onnx/efficientnet-lite0.onnx \
//     [SPLIT_ENGINES=chromium,firefox,webkit] [JSON_OUT=f.json] node tests/ort-bench.mjs
import { copyFileSync, cpSync, existsSync, writeFileSync } from "node:fs";
import { edgeProfileMs, withEngine } from "./engine.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const REPEATS = Number(process.env.REPEATS ?? 20);
const engines = (process.env.SPLIT_ENGINES ?? "chromium").split(",");
const onnx = process.env.ONNX ?? `${process.env.HOME}/.cache/splitinfer/onnx/efficientnet-lite0.onnx`;
if (!existsSync("node_modules/onnxruntime-web/dist/ort.wasm.bundle.min.mjs")) {
  throw new Error("npm install --no-save onnxruntime-web@1.30.0 first");
}
// Served by the demo server's static files (web/pkg is a build output, not committed; the server
// serves only the site's folders, not node_modules).
copyFileSync(onnx, "pkg/efficientnet-lite0.onnx");
cpSync("node_modules/onnxruntime-web/dist", "pkg/ort", { recursive: true });

/** Run `body(page)` on the demo page (CPU backend, every stage's weights) in `engine`. */
function onPage(engine, body) {
  return withEngine(engine, async (browser) => {
    const page = await browser.newPage();
    await page.goto(new URL("index.html?backend=cpu&weights=all", url).href);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
    return body(page);
  });
}

/** The CPU builds `engine` can load, from what its page says it offers, and its user agent. */
async function enginesBuilds(engine) {
  return onPage(engine, (page) => page.evaluate(() => {
    const c = window.splitClient.capabilities;
    const builds = ["cpu"];
    if (c.relaxedSimd.available) builds.push("cpu-relaxed");
    if (c.threads.available) builds.push(c.relaxedSimd.available ? "cpu-threads" : "cpu-threads-simd128");
    return { builds, shared: typeof SharedArrayBuffer !== "undefined", agent: navigator.userAgent };
  }));
}

/** ONNX Runtime Web's whole network on `threads` threads, in a fresh page (ORT fixes its
 * thread count when its module starts). */
function ortMs(engine, threads) {
  return onPage(engine, (page) => page.evaluate(async ({ repeats, threads }) => {
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const ort = await import("/pkg/ort/ort.wasm.bundle.min.mjs");
    ort.env.wasm.numThreads = threads;
    const t0 = performance.now();
    const session = await ort.InferenceSession.create("/pkg/efficientnet-lite0.onnx", { executionProviders: ["wasm"] });
    const loadMs = performance.now() - t0;
    const input = new ort.Tensor("float32", new Float32Array(3 * 224 * 224), [1, 3, 224, 224]);
    for (let i = 0; i < 3; i++) await session.run({ input });
    const times = [];
    for (let i = 0; i < repeats; i++) {
      const t = performance.now();
      await session.run({ input });
      times.push(performance.now() - t);
    }
    return { ms: median(times), loadMs, version: ort.env.versions?.web ?? "?" };
  }, { repeats: REPEATS, threads }));
}

const THREADS = { cpu: 1, "cpu-relaxed": 1, "cpu-threads": 2, "cpu-threads-simd128": 2 };
const results = {};
console.log(`| engine | build | burn, whole network ms (median of ${REPEATS}) | ONNX Runtime Web, same threads, ms | burn / ORT |`);
console.log("|---|---|---|---|---|");
for (const engine of engines) {
  const { builds, shared, agent } = await enginesBuilds(engine);
  const ort = { 1: await ortMs(engine, 1), 2: shared ? await ortMs(engine, 2) : null };
  const burn = {};
  for (const build of builds) {
    const { ms, build: loaded } = await edgeProfileMs(url, build, REPEATS, engine);
    if (loaded !== build) throw new Error(`${engine}: asked for ${build}, the page loaded ${loaded}`);
    burn[build] = ms;
    const o = ort[THREADS[build]];
    console.log(`| ${engine} | ${build} (${THREADS[build]} thread${THREADS[build] > 1 ? "s" : ""}) | ${ms.toFixed(1)} | ${o.ms.toFixed(1)} | ${(ms / o.ms).toFixed(2)} |`);
  }
  if (!shared) console.log(`| ${engine} | (no shared memory: no 2-thread row for either) | | | |`);
  results[engine] = { agent, burn, ort_ms: ort[1].ms, ort_2_ms: ort[2]?.ms ?? null, ort_load_ms: ort[1].loadMs, ort_version: ort[1].version };
}
console.log(`ORT Web ${Object.values(results)[0].ort_version}`);
if (process.env.JSON_OUT) {
  // The lab reads Chromium's: burn_ms, the single-threaded build Chromium loads where threads
  // cannot start, against ORT Web on 1 thread; burn_threads_ms against ort_2_ms, both on 2.
  const c = results.chromium;
  writeFileSync(process.env.JSON_OUT, JSON.stringify({ repeats: REPEATS, engines: results, ...(c && {
    burn_ms: c.burn["cpu-relaxed"], burn_simd128_ms: c.burn.cpu, burn_relaxed_ms: c.burn["cpu-relaxed"],
    burn_threads_ms: c.burn["cpu-threads"], ort_ms: c.ort_ms, ort_2_ms: c.ort_2_ms, ort_load_ms: c.ort_load_ms,
    ort_version: c.ort_version }) }));
}
