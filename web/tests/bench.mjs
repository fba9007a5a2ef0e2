// Browser timings: per backend (wasm CPU, WebGPU) and split, the median over REPEATS runs of
// edge time, bytes sent, server time and round trip, measured through SplitClient in headless
// Chromium against a running server (start it with `--cache-entries 0`, or repeats are answered
// from its cache; the client's cache is turned off here). Not a test: prints a markdown table.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [CODEC=q4] node tests/bench.mjs
//   SPLIT_URL=... CODEC_BENCH=stem,block5 CODECS=q8,q4 node tests/bench.mjs   # codec alone, in wasm
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const REPEATS = Number(process.env.REPEATS ?? 5);
const SPLITS = (process.env.SPLITS ?? "edge,cloud,stem,block5,block11,head").split(",");
const CODEC = process.env.CODEC ?? "f32";
const BACKENDS = [{ backend: "cpu", args: GPU_ARGS.cpu }, { backend: "webgpu", args: GPU_ARGS.webgpu }];

if (process.env.CODEC_BENCH) {
  const splits = process.env.CODEC_BENCH.split(",");
  const codecs = (process.env.CODECS ?? "f32,q8,q6,q4,q3,q2").split(",");
  await withPage(GPU_ARGS.cpu, async (page) => {
    await page.goto(new URL("index.html", url).href);
    const rows = await page.evaluate(async ({ splits, codecs, repeats }) => {
      const { SplitClient } = await import("/split-client.js");
      const client = await SplitClient.create({ backend: "cpu", cacheEntries: 0 });
      const image = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
      const out = [];
      for (const split of splits) for (const codec of codecs) {
        out.push({ split, codec, ...(await client.benchCodec(image, split, codec, repeats)) });
      }
      return out;
    }, { splits, codecs, repeats: REPEATS });
    console.log(`| split | codec | bytes | wasm encode ms | wasm decode ms |`);
    console.log(`|---|---|---|---|---|`);
    for (const r of rows) console.log(`| ${r.split} | ${r.codec} | ${r.bytes} | ${r.encodeMs.toFixed(2)} | ${r.decodeMs.toFixed(2)} |`);
  });
  process.exit(0);
}

console.log(`| backend | split | codec | edge ms | bytes sent | server ms | round trip ms | total ms | load ms |`);
console.log(`|---|---|---|---|---|---|---|---|---|`);
for (const { backend, args } of BACKENDS.filter((b) => !process.env.BACKEND || b.backend === process.env.BACKEND)) {
  await withPage(args, async (page) => {
    await page.goto(new URL("index.html", url).href);
    const rows = await page.evaluate(async ({ backend, splits, repeats, codec }) => {
      const { SplitClient } = await import("/split-client.js");
      const t0 = performance.now();
      const client = await SplitClient.create({ backend, cacheEntries: 0 });
      const loadMs = performance.now() - t0;
      const image = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
      const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      const out = [];
      for (const split of splits) {
        const runs = [];
        await client.classify(image, split, { codec }); // warm this path
        for (let i = 0; i < repeats; i++) runs.push(await client.classify(image, split, { codec }));
        const m = (k) => median(runs.map((r) => r[k]));
        out.push({ split, edgeMs: m("edgeMs"), bytesSent: m("bytesSent"), serverMs: m("serverMs"),
          roundTripMs: m("roundTripMs"), totalMs: m("totalMs"), backend: client.backend, loadMs });
      }
      client.close();
      return out;
    }, { backend, splits: SPLITS, repeats: REPEATS, codec: CODEC });
    for (const r of rows) {
      console.log(`| ${r.backend} | ${r.split} | ${CODEC} | ${r.edgeMs.toFixed(1)} | ${r.bytesSent} | ${r.serverMs.toFixed(1)} | ${r.roundTripMs.toFixed(1)} | ${r.totalMs.toFixed(1)} | ${r.loadMs.toFixed(0)} |`);
    }
  });
}
