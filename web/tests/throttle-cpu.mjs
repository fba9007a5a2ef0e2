// Why the lab measures edge CPU without throttling: the CPU time Chromium uses with the demo's
// client loaded and idle, with and without `Emulation.setCPUThrottlingRate`. Not a test.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [RATES=1,4] node tests/throttle-cpu.mjs
import { GPU_ARGS, withPage } from "./browser.mjs";
import { readFileSync, readdirSync } from "node:fs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const RATES = (process.env.RATES ?? "1,4").split(",").map(Number);

/** CPU ms used so far by every process below this one (the browser's). */
function browserCpuMs() {
  const procs = new Map();
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.set(Number(pid), { ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12])) * 10 });
    } catch { /* exited meanwhile */ }
  }
  const below = (pid) => {
    for (let p = procs.get(pid)?.ppid; p; p = procs.get(p)?.ppid) if (p === process.pid) return true;
    return false;
  };
  let total = 0;
  for (const [pid, p] of procs) if (below(pid)) total += p.ms;
  return total;
}

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
