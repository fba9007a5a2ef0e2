// A phone-class visit in each engine: the demo page at 390×844 through the lab's emulated link
// (default 3G, `lab/src/netem.rs`), a fresh profile, Chromium's CPU slowed 4× (DevTools'
// throttle; Firefox and WebKit offer none to their drivers, so they run at this machine's
// speed, said in the output): seconds to the page being ready and to its first answer in auto
// mode, the page thread's long tasks (where the engine reports them) and the page's memory
// (`performance.measureUserAgentSpecificMemory`, where the engine has it). Not a test.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [SPLIT_ENGINES=chromium,firefox,webkit] [LINK=3g] [THROTTLE=4] node tests/phone-bench.mjs
import { startNetem } from "./browser.mjs";
import { withEngine } from "./engine.mjs";

const server = new URL(process.env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const engines = (process.env.SPLIT_ENGINES ?? "chromium,firefox,webkit").split(",");
const LINK = process.env.LINK ?? "3g";
const THROTTLE = Number(process.env.THROTTLE ?? 4);
const TIMEOUT_MS = 600_000;

const { child, addr } = await startNetem(server.host, LINK);
const url = `http://${addr}/`;
const rows = [];
try {
  for (const engine of engines) {
    rows.push(await withEngine(engine, async (browser) => {
      const page = await browser.newPage();
      await page.setViewportSize({ width: 390, height: 844 });
      let throttle = "none (the engine's driver has no CPU throttle)";
      if (engine === "chromium") {
        const cdp = await page.context().newCDPSession(page);
        await cdp.send("Emulation.setCPUThrottlingRate", { rate: THROTTLE });
        throttle = `${THROTTLE}×`;
      }
      // Long tasks from the first script on, where an init script can run and the engine
      // reports them.
      await page.addInitScript?.(() => {
        window.longTasks = [];
        if (PerformanceObserver.supportedEntryTypes?.includes("longtask")) {
          new PerformanceObserver((l) => { for (const e of l.getEntries()) window.longTasks.push(e.duration); })
            .observe({ type: "longtask", buffered: true });
        } else {
          window.longTasks = null;
        }
      });
      const t0 = Date.now();
      await page.goto(new URL("index.html", url).href);
      await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: TIMEOUT_MS });
      const readyS = (Date.now() - t0) / 1000;
      const first = await page.evaluate(async () => {
        const bytes = new Uint8Array(await (await fetch("samples/chelsea.png")).arrayBuffer());
        const r = await window.splitClient.classify(bytes, "auto", {});
        return { top1: r.top[0].class, mode: r.mode, split: r.split, model: r.model, quality: r.quality,
                 build: window.splitClient.wasmBuild, weights: (await window.splitClient.weightsState()).through };
      });
      const firstS = (Date.now() - t0) / 1000;
      const page2 = await page.evaluate(async () => {
        let memoryMb = null;
        if (typeof performance.measureUserAgentSpecificMemory === "function" && crossOriginIsolated) {
          try { memoryMb = (await performance.measureUserAgentSpecificMemory()).bytes / 1e6; } catch { /* refused */ }
        }
        const tasks = window.longTasks;
        return { memoryMb, longTasks: tasks == null ? null : tasks.length, longestMs: tasks?.length ? Math.max(...tasks) : 0 };
      });
      return { engine, throttle, readyS, firstS, ...first, ...page2 };
    }));
  }
} finally {
  child.kill();
}
console.log(`| engine | CPU throttle | ready s | first answer s (auto) | answered | build | long tasks (longest ms) | memory MB |`);
console.log("|---|---|---:|---:|---|---|---|---:|");
for (const r of rows) {
  const tasks = r.longTasks == null ? "not reported" : `${r.longTasks} (${r.longestMs.toFixed(0)})`;
  const memory = r.memoryMb == null ? "not reported" : r.memoryMb.toFixed(0);
  console.log(`| ${r.engine} | ${r.throttle} | ${r.readyS.toFixed(1)} | ${r.firstS.toFixed(1)} | ${r.mode} (${r.model} model, ${r.quality}; weights here through ${r.weights}), top-1 ${r.top1} | ${r.build} | ${tasks} | ${memory} |`);
}
console.log(`(${LINK} link through the lab's emulator, 390×844, a fresh profile each)`);
