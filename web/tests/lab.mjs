// The browser lab: the real page's SplitClient in headless Chromium with the CPU throttled
// through the DevTools protocol (4x, Lighthouse's mobile setting), its WebSocket going through
// the link emulator (`netem`, perf/src/bin/netem.rs) for each link profile; every mode compared
// on the same photo: edge-only, cloud-only (a quality-90 JPEG of the 224x224 input, as a plain app
// would upload), fixed splits, and the adaptive planner. Not a test; prints a markdown table.
//
//   cargo run -p cloud-server -- --port 8080 --cache-entries 0 &     # no server cache
//   cargo build -p split-perf                                          # the netem binary
//   SPLIT_URL=http://127.0.0.1:8080/ [LINKS=4g,3g] [MODES=edge,cloud,block5,auto] [REQUESTS=10] \
//     [THROTTLE=4] node tests/lab.mjs
import { spawn } from "node:child_process";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = new URL(process.env.SPLIT_URL ?? "http://127.0.0.1:8080/");
const LINKS = (process.env.LINKS ?? "fast-wifi,4g,3g,congested-uplink").split(",");
const MODES = (process.env.MODES ?? "edge,cloud,block5,block11,auto").split(",");
const REQUESTS = Number(process.env.REQUESTS ?? 10);
const THROTTLE = Number(process.env.THROTTLE ?? 4);
const NETEM = process.env.NETEM_BIN ?? `${process.env.CARGO_TARGET_DIR ?? `${process.env.HOME}/.cache/splitinfer/target`}/debug/netem`;

function startLink(link) {
  const child = spawn(NETEM, ["--upstream", url.host, "--link", link], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.stdout.on("data", (d) => {
      const m = /listening on (\S+)/.exec(d.toString());
      if (m) resolve({ child, addr: m[1] });
    });
  });
}

const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.round((s.length - 1) * p)]; };
console.log(`CPU throttled ${THROTTLE}x, ${REQUESTS} requests per mode after one warm-up, chelsea; total ms from the page's SplitClient`);
console.log(`| link | mode | P50 ms | P95 ms | P99 ms | bytes sent | edge ms (median) | placements |`);
console.log(`|---|---|---|---|---|---|---|---|`);
for (const link of LINKS) {
  const { child, addr } = await startLink(link);
  try {
    await withPage(GPU_ARGS.cpu, async (page) => {
      await page.goto(new URL("healthz", url).href);
      // Throttle first, so the client's start-up timing of this device sees the slow CPU.
      const cdp = await page.context().newCDPSession(page);
      await cdp.send("Emulation.setCPUThrottlingRate", { rate: THROTTLE });
      await page.evaluate(async (wsUrl) => {
        const { SplitClient } = await import("/split-client.js");
        window.client = await SplitClient.create({ backend: "cpu", wsUrl, cacheEntries: 0 });
        const png = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
        window.png = png;
        // What a plain app uploads: the centre crop at 224x224 as a quality-90 JPEG.
        const bitmap = await createImageBitmap(new Blob([png]));
        const side = Math.min(bitmap.width, bitmap.height) * 224 / 256;
        const canvas = new OffscreenCanvas(224, 224);
        canvas.getContext("2d").drawImage(bitmap, (bitmap.width - side) / 2, (bitmap.height - side) / 2, side, side, 0, 0, 224, 224);
        window.jpeg = new Uint8Array(await (await canvas.convertToBlob({ type: "image/jpeg", quality: 0.9 })).arrayBuffer());
      }, `ws://${addr}/ws`);
      for (const mode of MODES) {
        const rows = await page.evaluate(async ({ mode, n }) => {
          const out = [];
          const image = mode === "cloud" ? window.jpeg : window.png;
          await window.client.classify(image, mode, {}); // warm this path
          for (let i = 0; i < n; i++) {
            const r = await window.client.classify(image, mode, {});
            out.push({ total: r.totalMs, bytes: r.bytesSent, edge: r.edgeMs, placement: r.placement ? JSON.stringify(r.placement) : mode });
          }
          return out;
        }, { mode, n: REQUESTS });
        const t = rows.map((r) => r.total);
        const placements = [...new Set(rows.map((r) => r.placement))].map((p) => p.replace(/[{}"]/g, "")).join("; ");
        console.log(`| ${link} | ${mode} | ${q(t, 0.5).toFixed(0)} | ${q(t, 0.95).toFixed(0)} | ${q(t, 0.99).toFixed(0)} | ${q(rows.map((r) => r.bytes), 0.5)} | ${q(rows.map((r) => r.edge), 0.5).toFixed(0)} | ${placements} |`);
      }
      await page.evaluate(() => window.client.close());
    });
  } finally {
    child.kill();
  }
}
