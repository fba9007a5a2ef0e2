// Browser end-to-end test: headless Chromium opens the page served by the real server and
// classifies `chelsea` edge-only, cloud-only and at two splits, once with WebGPU and once on the
// CPU fallback. Run by `cargo xtask test`, which starts the server and sets SPLIT_URL.
import assert from "node:assert/strict";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL;
assert.ok(url, "set SPLIT_URL to the server's base URL (cargo xtask test does)");
const CATS = new Set([281, 282, 283, 284, 285]);
// SwiftShader's WebGPU is a software rasterizer: slow, but correct.
const STEP_TIMEOUT_MS = 300_000;

async function runPass({ name, args, expectBackend }) {
  const errors = [];
  return withPage(args, async (page) => {
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    await page.goto(url);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: STEP_TIMEOUT_MS });
    const state = await page.evaluate(() => document.body.dataset.state);
    assert.equal(state, "ready", `${name}: page failed to load: ${await page.textContent("#error")}`);
    const backend = await page.evaluate(() => document.body.dataset.backend);
    assert.equal(backend, expectBackend, `${name}: edge backend`);

    await page.click('button[data-sample="chelsea"]');
    await page.waitForFunction(() => document.body.dataset.image === "chelsea");
    const rows = [];
    for (const split of ["edge", "cloud", "block5", "block11"]) {
      await page.selectOption("#split", split);
      await page.evaluate(() => { delete document.querySelector("#result").dataset.result; });
      await page.click("#classify");
      await page.waitForFunction(
        () => document.querySelector("#result").dataset.result || !document.querySelector("#error").hidden,
        null, { timeout: STEP_TIMEOUT_MS });
      const error = await page.evaluate(() => document.querySelector("#error").hidden ? null : document.querySelector("#error").textContent);
      assert.equal(error, null, `${name}/${split}: ${error}`);
      const r = JSON.parse(await page.evaluate(() => document.querySelector("#result").dataset.result));
      rows.push({ pass: name, split, top1: r.top[0].class, name: r.top[0].name, backend: r.backend,
        edgeMs: r.edgeMs.toFixed(1), bytesSent: r.bytesSent, serverMs: r.serverMs.toFixed(1), roundTripMs: r.roundTripMs.toFixed(1) });
    }
    console.table(rows);
    for (const r of rows) assert.ok(CATS.has(r.top1), `${name}/${r.split}: top-1 ${r.top1} (${r.name}) is not a cat`);
    assert.equal(new Set(rows.map((r) => r.top1)).size, 1, `${name}: top-1 differs across modes`);
    assert.equal(rows.find((r) => r.split === "edge").bytesSent, 0, "edge-only sends nothing");
    assert.equal(errors.filter((e) => !/WebGPU unavailable/.test(e)).length, 0, `${name}: page errors: ${errors.join("\n")}`);
    return rows;
  });
}

const passes = [
  { name: "webgpu", args: GPU_ARGS.webgpu, expectBackend: "webgpu" },
  { name: "cpu-fallback", args: GPU_ARGS.cpu, expectBackend: "cpu" },
];
const only = process.env.SPLIT_E2E_PASS;
const all = [];
for (const pass of passes.filter((p) => !only || p.name === only)) {
  console.log(`e2e: ${pass.name} pass`);
  all.push(...(await runPass(pass)));
}
const top1s = new Set(all.map((r) => r.top1));
assert.equal(top1s.size, 1, "top-1 must agree between the WebGPU and CPU passes");
console.log(`e2e: passed (${all.length} classifications, top-1 ${[...top1s][0]})`);
