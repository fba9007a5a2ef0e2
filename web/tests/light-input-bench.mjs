// The light model on a smaller input, measured in a browser: for each photo, on the CPU
// backend of the engine's default wasm build, the whole network (edge-only at 224, the full
// weights: the answer every other row is compared with) and the answers an outage can give
// instead: the int8 light model at 224 (today's default), and at each size of SIZES, with the
// int8 light model and with the full weights. Per row: the median and 90th-percentile ms of
// `answerAt` (decoding the photo included), the speed-up over edge-only, and the top-1
// agreement with the whole network with its 95% Wilson lower bound. Not a test: prints a
// markdown table (docs/training.md quotes it) and writes the rows to JSON_OUT if set.
//
//   SPLIT_URL=http://127.0.0.1:8080/ IMAGES=../../shared/data/imagenet-dev [LIMIT=100]
//     [SIZES=160,128] [SPLIT_ENGINE=chromium|firefox] node tests/light-input-bench.mjs
import assert from "node:assert/strict";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { withEngine } from "./engine.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const dir = process.env.IMAGES;
assert.ok(dir, "set IMAGES to a folder of JPEG/PNG photos");
const limit = Number(process.env.LIMIT ?? 100);
const sizes = (process.env.SIZES ?? "160,128").split(",").map(Number);
const engine = process.env.SPLIT_ENGINE ?? "chromium";
const files = readdirSync(dir).filter((f) => /\.(jpe?g|png)$/i.test(f)).sort().slice(0, limit);
assert.ok(files.length > 0, `no photos in ${dir}`);

/** The lower end of the 95% Wilson interval of `k` successes in `n`. */
function wilsonLower(k, n) {
  const z = 1.96;
  const p = k / n;
  return (p + z * z / (2 * n) - z * Math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n);
}

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

const result = await withEngine(engine, async (browser) => {
  const page = await browser.newPage();
  await page.goto(new URL("index.html?backend=cpu&weights=none&offline=0", url).href);
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 600_000 });
  const build = await page.evaluate(async () => {
    const { SplitClient } = await import("/split-client.js");
    // Two clients on this thread: one with only the light model's weights, then one with the
    // full weights (in that order: the light model loads the full stages this browser keeps).
    window.light = await SplitClient.create({ backend: "cpu", worker: false, weights: "none", cacheEntries: 0, linkProbe: false });
    await window.light.weights.ensureLight();
    window.full = await SplitClient.create({ backend: "cpu", worker: false, weights: "all", cacheEntries: 0, linkProbe: false });
    return window.full.wasmBuild;
  });
  const variants = [
    { name: "whole network (edge-only)", client: "full", size: 224, edgeOnly: true },
    { name: "int8 light model (today's outage answer)", client: "light", size: 224 },
    ...sizes.flatMap((size) => [{ name: "int8 light model", client: "light", size }, { name: "full weights", client: "full", size }]),
  ];
  const rows = [];
  for (const [i, file] of files.entries()) {
    const bytes = [...readFileSync(join(dir, file))];
    rows.push(await page.evaluate(async ({ bytes, variants }) => {
      const image = new Uint8Array(bytes);
      const out = [];
      for (const v of variants) {
        const c = window[v.client];
        const t = performance.now();
        const r = v.edgeOnly ? await c.classify(image, "edge") : await c.edge.answerAt(image, v.size);
        out.push({ ms: performance.now() - t, top1: r.top[0].class });
      }
      return out;
    }, { bytes, variants }));
    if ((i + 1) % 25 === 0) console.error(`light-input: ${i + 1}/${files.length}`);
  }
  return { build, variants, rows };
});

const { build, variants, rows } = result;
console.log(`${engine}, CPU backend (${build} wasm), ${rows.length} photos from ${dir}; ms: answerAt (or classify "edge"), the photo's decoding included`);
console.log("| model | input | median ms | p90 ms | × faster than edge-only | agreement with the whole network | ≥ (95%) |");
console.log("|---|---|---|---|---|---|---|");
const base = quantile(rows.map((r) => r[0].ms), 0.5);
const summary = variants.map((v, k) => {
  const ms = rows.map((r) => r[k].ms);
  const agree = rows.filter((r) => r[k].top1 === r[0].top1).length;
  const median = quantile(ms, 0.5);
  const row = { name: v.name, size: v.size, medianMs: median, p90Ms: quantile(ms, 0.9), speedup: base / median,
                agree, n: rows.length, lower: wilsonLower(agree, rows.length) };
  console.log(`| ${row.name} | ${row.size} | ${median.toFixed(1)} | ${row.p90Ms.toFixed(1)} | ${row.speedup.toFixed(2)} | ` +
              `${(100 * agree / rows.length).toFixed(1)}% (${agree}/${rows.length}) | ${(100 * row.lower).toFixed(1)}% |`);
  return row;
});
if (process.env.JSON_OUT) writeFileSync(process.env.JSON_OUT, JSON.stringify({ engine, build, files, summary, rows }));
