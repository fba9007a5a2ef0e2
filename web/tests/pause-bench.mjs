// What pausing an edge run costs: while a ping is out, the client's edge runs yield a turn of
// the event loop between stages (at most every PAUSE_EVERY_MS, `turnOfEventLoop` in split-client.js) so
// that the pong is seen when it arrives. This times edge-only runs of one photo on the page's
// thread, CPU throttled 4x as in the lab, with no pause and with a pause at most every N ms,
// the settings interleaved run by run so that the machine's drift falls on all of them.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [RUNS=30] node tests/pause-bench.mjs
//
// Prints the median and the 90th percentile of `edgeMs` per setting ("none", "8", "16", "32",
// "0": every stage).
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = new URL(process.env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const runs = Number(process.env.RUNS ?? 30);
await withPage(GPU_ARGS.cpu, async (page) => {
  await page.goto(new URL("healthz", url).href);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Emulation.setCPUThrottlingRate", { rate: 4 });
  const out = await page.evaluate(async (runs) => {
    const { SplitClient } = await import("/split-client.js");
    const png = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
    const c = await SplitClient.create({ backend: "cpu", cacheEntries: 0, worker: false });
    let last = 0;
    // The client's own turn: a MessageChannel round, no timer clamping.
    const turn = (every) => () => {
      if (performance.now() - last < every) return null;
      return new Promise((resolve) => {
        const { port1, port2 } = new MessageChannel();
        port1.onmessage = () => { port1.close(); last = performance.now(); resolve(); };
        port2.postMessage(null);
      });
    };
    await c.classify(png, "edge"); // warm-up
    const ms = {};
    const settings = ["none", 8, 16, 32, 0];
    for (let i = 0; i < runs; i++) {
      for (const every of settings) {
        c.edge.setPause(every === "none" ? null : turn(every));
        (ms[every] ??= []).push((await c.classify(png, "edge")).edgeMs);
      }
    }
    c.edge.setPause(null);
    c.close();
    const at = (xs, q) => Math.round(xs.sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]);
    return Object.fromEntries(settings.map((s) => [s, { median: at(ms[s], 0.5), p90: at(ms[s], 0.9) }]));
  }, runs);
  console.log(JSON.stringify(out));
});
