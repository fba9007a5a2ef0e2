// burn (wasm, CPU) against ONNX Runtime Web (wasm backend) in the same headless Chromium, on the
// same model and weights: the ONNX file `./run.sh onnx` exported. Not a test; prints a table.
// ORT Web is not a project dependency: install it for this benchmark only.
//
//   npm install --no-save onnxruntime-web@1.30.0
//   SPLIT_URL=http://127.0.0.1:8080/ ONNX=~/.cache/splitinfer/onnx/efficientnet-lite0.onnx [JSON_OUT=f.json] node tests/ort-bench.mjs
import { copyFileSync, cpSync, existsSync, writeFileSync } from "node:fs";
import { GPU_ARGS, edgeProfileMs, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const REPEATS = Number(process.env.REPEATS ?? 20);
const onnx = process.env.ONNX ?? `${process.env.HOME}/.cache/splitinfer/onnx/efficientnet-lite0.onnx`;
if (!existsSync("node_modules/onnxruntime-web/dist/ort.wasm.bundle.min.mjs")) {
  throw new Error("npm install --no-save onnxruntime-web@1.30.0 first");
}
// Served by the demo server's static files (web/pkg is a build output, not committed; the server
// serves only the site's folders, not node_modules).
copyFileSync(onnx, "pkg/efficientnet-lite0.onnx");
cpSync("node_modules/onnxruntime-web/dist", "pkg/ort", { recursive: true });

const burn = {};
for (const build of ["cpu", "cpu-relaxed", "cpu-threads"]) burn[build] = (await edgeProfileMs(url, build, REPEATS)).ms;

/** ONNX Runtime Web's whole network on `threads` threads, in a fresh page (ORT fixes its
 * thread count when its module starts); the page is cross-origin isolated, so 2 threads run. */
async function ortMs(threads) {
  return withPage(GPU_ARGS.cpu, async (page) => {
    await page.goto(new URL("index.html?backend=cpu&weights=all", url).href);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
    return page.evaluate(async ({ repeats, threads }) => {
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
      return { ms: median(times), loadMs, version: ort.env.versions?.web ?? "?", isolated: crossOriginIsolated };
    }, { repeats: REPEATS, threads });
  });
}

const ort1 = await ortMs(1);
const ort2 = await ortMs(2);
const row = (name, ms, vs) => console.log(`| ${name} | ${ms.toFixed(1)} | ${(ms / vs).toFixed(2)} |`);
console.log(`| engine | whole network ms (median of ${REPEATS}) | / ORT Web, same threads |`);
console.log(`|---|---|---|`);
row("burn wasm, simd128 (pkg-cpu, 1 thread)", burn.cpu, ort1.ms);
row("burn wasm, simd128 + relaxed SIMD FMA (pkg-cpu-relaxed, 1 thread)", burn["cpu-relaxed"], ort1.ms);
row(`ONNX Runtime Web ${ort1.version} (wasm, 1 thread)`, ort1.ms, ort1.ms);
row("burn wasm, relaxed SIMD + Web Worker threads (pkg-cpu-threads, 2 threads)", burn["cpu-threads"], ort2.ms);
row(`ONNX Runtime Web ${ort2.version} (wasm, 2 threads${ort2.isolated ? "" : ": NOT cross-origin isolated, ran 1"})`, ort2.ms, ort2.ms);
console.log(`ORT session load ${ort1.loadMs.toFixed(0)} ms`);
if (process.env.JSON_OUT) {
  // burn_ms: the single-threaded build Chromium loads where threads cannot start, against
  // ORT Web on 1 thread; burn_threads_ms against ort_2_ms: both on 2 threads.
  writeFileSync(process.env.JSON_OUT, JSON.stringify({ repeats: REPEATS, burn_ms: burn["cpu-relaxed"],
    burn_simd128_ms: burn.cpu, burn_relaxed_ms: burn["cpu-relaxed"], burn_threads_ms: burn["cpu-threads"],
    ort_ms: ort1.ms, ort_2_ms: ort2.ms, ort_load_ms: ort1.loadMs, ort_version: ort1.version }));
}
