// Why the lab measures edge CPU without throttling: the CPU time Chromium uses with the demo's
// client loaded and idle, with and without `Emulation.setCPUThrottlingRate`. Not a test.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [RATES=1,4] node tests/throttle-cpu.mjs
import { GPU_ARGS, browserCpuMs, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const RATES = (process.env.RATES ?? "1,4").split(",").map(Number);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
console.log("| throttle | idle CPU ms per s (page + client loaded) |\n|---|---|");
for (const rate of RATES) {
  await withPage(GPU_ARGS.cpu, async (page) => {
    await page.goto(new URL("healthz", url).href);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Emulation.setCPUThrottlingRate", { rate });
    await page.evaluate(async () => {
      const { SplitClient } = await import("/split-client.js");
      window.client = await SplitClient.create({ backend: "cpu" });
    });
    await sleep(1000);
    const c0 = browserCpuMs();
    await sleep(5000);
    console.log(`| ${rate}x | ${((browserCpuMs() - c0) / 5).toFixed(0)} |`);
  });
}
