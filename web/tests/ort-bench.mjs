// burn (wasm, CPU) against ONNX Runtime Web (wasm backend) in the same headless Chromium, on the
// same model and weights: the ONNX file `./run.sh onnx` exported. Not a test; prints a table.
// ORT Web is not a project dependency: install it for this benchmark only.
//
//   npm install --no-save onnxruntime-web@1.30.0
//   SPLIT_URL=http://127.0.0.1:8080/ ONNX=~/.cache/splitinfer/onnx/efficientnet-lite0.onnx [JSON_OUT=f.json] node tests/ort-bench.mjs
import { copyFileSync, cpSync, existsSync, writeFileSync } from "node:fs";
import { GPU_ARGS, withPage } from "./browser.mjs";

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

/** burn's whole network in one build of the CPU module: the page's own profile (median). */
async function burnMs(build) {
  return withPage(GPU_ARGS.cpu, async (page) => {
    await page.goto(new URL(`index.html?backend=cpu&wasm=${build}`, url).href);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
    return page.evaluate(async (repeats) => {
      const p = await window.splitClient.profileEdge(repeats);
      return { ms: p.ms[p.ms.length - 1], build: window.splitClient.wasmBuild };
    }, REPEATS);
  });
}

const burn = {};
for (const build of ["cpu", "cpu-relaxed"]) burn[build] = (await burnMs(build)).ms;

await withPage(GPU_ARGS.cpu, async (page) => {
  await page.goto(new URL("index.html?backend=cpu", url).href);
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
  const r = await page.evaluate(async (repeats) => {
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const ort = await import("/pkg/ort/ort.wasm.bundle.min.mjs");
    ort.env.wasm.numThreads = 1; // no cross-origin isolation here, and burn's wasm is single-threaded
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
    return { ortMs: median(times), ortLoadMs: loadMs, ortVersion: ort.env.versions?.web ?? "?" };
  }, REPEATS);
  console.log(`| engine | whole network ms (median of ${REPEATS}) | / ORT Web |`);
  console.log(`|---|---|---|`);
  console.log(`| burn wasm, simd128 (pkg-cpu, 1 thread) | ${burn.cpu.toFixed(1)} | ${(burn.cpu / r.ortMs).toFixed(2)} |`);
  console.log(`| burn wasm, simd128 + relaxed SIMD FMA (pkg-cpu-relaxed, 1 thread) | ${burn["cpu-relaxed"].toFixed(1)} | ${(burn["cpu-relaxed"] / r.ortMs).toFixed(2)} |`);
  console.log(`| ONNX Runtime Web ${r.ortVersion} (wasm, 1 thread) | ${r.ortMs.toFixed(1)} | 1.00 |`);
  console.log(`ORT session load ${r.ortLoadMs.toFixed(0)} ms`);
  if (process.env.JSON_OUT) {
    // burn_ms: what the page loads by default in Chromium (relaxed SIMD).
    writeFileSync(process.env.JSON_OUT, JSON.stringify({ repeats: REPEATS, burn_ms: burn["cpu-relaxed"],
      burn_simd128_ms: burn.cpu, burn_relaxed_ms: burn["cpu-relaxed"], ort_ms: r.ortMs,
      ort_load_ms: r.ortLoadMs, ort_version: r.ortVersion }));
  }
});
