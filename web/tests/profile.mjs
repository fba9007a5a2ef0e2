// Edge profiles for the cost table: in headless Chromium, time the network stage by stage on
// the wasm CPU backend and on WebGPU (EdgeSession.profileEdge), and write them as JSON for
// `./run.sh profile --browser FILE`. Run by `./run.sh profile --with-browser`.
//
//   SPLIT_URL=http://127.0.0.1:8080/ OUT=/tmp/browser-profile.json node tests/profile.mjs
import { writeFileSync } from "node:fs";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const out = process.env.OUT ?? "browser-profile.json";
const REPEATS = Number(process.env.REPEATS ?? 3);
const profiles = {};
for (const [name, backend, args] of [["browser-wasm-cpu", "cpu", GPU_ARGS.cpu], ["browser-webgpu", "webgpu", GPU_ARGS.webgpu]]) {
  await withPage(args, async (page) => {
    // The page's own client (one WebGPU device per page): ?backend= picks its backend.
    await page.goto(new URL(`index.html?backend=${backend}&weights=all`, url).href);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
    const p = await page.evaluate(async ({ repeats }) => {
      const client = window.splitClient;
      const r = await client.profileEdge(repeats);
      return { backend: client.backend, ms: r.ms, ua: navigator.userAgent };
    }, { repeats: REPEATS });
    if (p.backend !== backend) throw new Error(`${name}: got backend ${p.backend}`);
    const device = backend === "webgpu" ? "Chromium WebGPU (SwiftShader on this machine)" : "Chromium wasm, burn flex";
    profiles[name] = { device, ms: p.ms };
    console.log(`${name}: edge-only ${p.ms[p.ms.length - 1].toFixed(1)} ms`);
  });
}
writeFileSync(out, JSON.stringify(profiles, null, 2));
console.log(`wrote ${out}`);
