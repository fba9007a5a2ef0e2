// What a ping out costs an edge run on the page's thread, CPU throttled 4x as in the lab: the
// photo edge-only with no ping out; with a bare ping out and the run pausing between stages as
// the client pauses it (a turn of the event loop at most every PAUSE_EVERY_MS), at most every
// 32 ms, or not at all (the pong then read after the run); and with a padded probe out.
// Settings interleaved run by run; the pings cross the link emulator's 3G profile to the real
// server. Prints each setting's median and 90th percentile edge ms and its pongs' median ms.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [RUNS=30] [LINK=3g] node tests/ping-bench.mjs
// (server with --allow-origin '*': the socket goes through the emulator's port)
import { GPU_ARGS, startNetem, withPage } from "./browser.mjs";

const url = new URL(process.env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const runs = Number(process.env.RUNS ?? 30);
const { child, addr } = await startNetem(url.host, process.env.LINK ?? "3g");
try {
  await withPage(GPU_ARGS.cpu, async (page) => {
    await page.goto(new URL("healthz", url).href);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Emulation.setCPUThrottlingRate", { rate: 4 });
    const out = await page.evaluate(async ({ runs, wsUrl }) => {
      const { SplitClient } = await import("/split-client.js");
      const png = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
      const c = await SplitClient.create({ backend: "cpu", cacheEntries: 0, worker: false, wsUrl });
      await c.connect();
      await c.classify(png, "edge"); // warm-up
      await c.ping(0, 5000);
      // The client's own pause (a MessageChannel round at most every `every` ms), at other
      // intervals: `ping()` installs whatever `countedPause` is when it starts.
      const ownPause = c.countedPause;
      let last = 0;
      const turn = (every) => () => {
        if (performance.now() - last < every) return null;
        return new Promise((resolve) => {
          const { port1, port2 } = new MessageChannel();
          port1.onmessage = () => { port1.close(); last = performance.now(); resolve(); };
          port2.postMessage(null);
        });
      };
      const settings = [["none"], ["ping, the client's pauses", 0, ownPause], ["ping, pauses every 32 ms", 0, turn(32)],
        ["ping, no pauses", 0, () => null], ["padded ping, the client's pauses", 16384, ownPause],
        ["padded ping, pauses every 32 ms", 16384, turn(32)]];
      const ms = {};
      const pongMs = {};
      for (let i = 0; i < runs; i++) {
        for (const [s, padding, pause] of settings) {
          c.countedPause = pause ?? ownPause;
          const ping = pause ? c.ping(padding, 5000) : null;
          (ms[s] ??= []).push((await c.classify(png, "edge")).edgeMs);
          const p = await ping;
          if (p) (pongMs[s] ??= []).push(p.ms);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      c.countedPause = ownPause;
      c.close();
      const at = (xs, q) => Math.round(xs.sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]);
      return Object.fromEntries(settings.map(([s]) => [s, { median: at(ms[s], 0.5), p90: at(ms[s], 0.9),
        pong_median: pongMs[s] ? at(pongMs[s], 0.5) : null }]));
    }, { runs, wsUrl: `ws://${addr}/ws` });
    console.log(JSON.stringify(out));
  });
} finally {
  child.kill();
}
