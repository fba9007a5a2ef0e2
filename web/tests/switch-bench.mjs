// Whether the device's edge runs slow down after a stretch of other work on the page, as auto's
// do when it comes back to the device after sending to the server. On the lab's traces the
// device ran its P95 stage time 9-22% slower during auto's run than during fixed edge-only's in
// 8 runs of 36, all of them on traces where auto had switched from the server to the device
// (docs/perf-lab.md, "The machine's drift beside each run"). This times 10 edge-only runs of one
// photo on the page's thread, CPU throttled 4x as in the lab, at the start and after each of
// four stretches of STRETCH_MS, in turn ROUNDS times: cloud-only requests with the canvas JPEG
// auto makes, idling, cloud-only requests of the PNG as it is (no canvas), and the canvas JPEG
// alone (no request).
//
//   SPLIT_URL=http://127.0.0.1:8080/ [ROUNDS=3] [STRETCH_MS=10000] node tests/switch-bench.mjs
//
// Prints each stretch's request count, the first three runs after it and their median (stage
// time, `edgeStagesMs`). Start the server with `--cache-entries 0` so that cloud-only computes.
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = new URL(process.env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const rounds = Number(process.env.ROUNDS ?? 3);
const stretchMs = Number(process.env.STRETCH_MS ?? 10_000);
const STRETCHES = ["canvasCloud", "idle", "pngCloud", "canvasOnly"];

await withPage(GPU_ARGS.cpu, async (page) => {
  await page.goto(new URL("healthz", url).href);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Emulation.setCPUThrottlingRate", { rate: 4 });
  const out = await page.evaluate(async ({ rounds, stretchMs, names }) => {
    const { SplitClient } = await import("/split-client.js");
    const { modelInputJpeg } = await import("/client/wasm.js");
    const png = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
    const c = await SplitClient.create({ backend: "cpu", cacheEntries: 0, worker: false });
    await c.connect();
    const edge = async (n) => {
      const ms = [];
      for (let i = 0; i < n; i++) ms.push(Math.round((await c.classify(png, "edge")).edgeStagesMs));
      return ms;
    };
    const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
    const work = {
      canvasCloud: async () => c.classify(await modelInputJpeg(png), "cloud", { modelInput: true }),
      idle: () => pause(100),
      pngCloud: () => c.classify(png, "cloud"),
      canvasOnly: async () => { await modelInputJpeg(png); await pause(60); },
    };
    const log = { start: await edge(10) };
    for (let k = 0; k < rounds; k++) {
      for (const name of names) {
        const end = performance.now() + stretchMs;
        let n = 0;
        while (performance.now() < end) { await work[name](); n++; }
        (log[name] ??= []).push({ n, after: await edge(10) });
      }
    }
    c.close();
    return log;
  }, { rounds, stretchMs, names: STRETCHES });
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  console.log(`${"start".padEnd(12)} median ${median(out.start)} runs ${JSON.stringify(out.start)}`);
  for (const name of STRETCHES) {
    for (const r of out[name]) {
      console.log(`${name.padEnd(12)} n ${String(r.n).padStart(3)} first three ${JSON.stringify(r.after.slice(0, 3))} median ${median(r.after)}`);
    }
  }
});
