// Cold and warm start of the demo page per placement: for cloud only (`?weights=none`), a split
// at block5 and at block11 (`?weights=block5`, `block11`) and edge only (`?weights=all`), the
// bytes transferred (compressed where the server compresses; what the page and its worker
// fetched) and the seconds from navigation to the page being ready and to its first answer;
// cold in a fresh browser profile, warm on a reload of the same profile (Cache Storage holds
// the weights). CPU backend (the WebGPU adapter here is a software rasterizer). Not a test:
// `./run.sh lab --start` runs it over shaped links and writes the report.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [MODES=cloud,block5,block11,edge] [JSON_OUT=f.json] node tests/coldstart.mjs
import { writeFileSync } from "node:fs";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const WEIGHTS = { cloud: "none", block5: "block5", block11: "block11", edge: "all" };
const modes = (process.env.MODES ?? "cloud,block5,block11,edge").split(",");
const TIMEOUT_MS = 600_000;

/** What kind of file a URL is, for the byte breakdown. */
function kind(u) {
  const path = new URL(u).pathname;
  if (path.startsWith("/weights/")) return "weights";
  if (path.startsWith("/calibration/")) return "calibration";
  if (path.endsWith(".wasm")) return "wasm";
  return "other";
}

/** Load the page once: bytes by kind, seconds to ready and to the first answer at `split`. */
async function visit(page, href, split, reload) {
  const bytes = { wasm: 0, weights: 0, calibration: 0, other: 0 };
  const sizes = [];
  const onFinished = (request) => {
    sizes.push(request.sizes().then((s) => {
      bytes[kind(request.url())] += s.responseBodySize + s.responseHeadersSize;
    }).catch(() => {}));
  };
  page.context().on("requestfinished", onFinished);
  const t0 = Date.now();
  if (reload) await page.reload();
  else await page.goto(href);
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: TIMEOUT_MS });
  const state = await page.evaluate(() => document.body.dataset.state);
  if (state !== "ready") throw new Error(`${href}: ${await page.textContent("#error")}`);
  const readyS = (Date.now() - t0) / 1000;
  await page.click('button[data-sample="chelsea"]');
  await page.waitForFunction(() => document.body.dataset.image === "chelsea");
  await page.selectOption("#split", split);
  await page.click("#classify");
  await page.waitForFunction(() => document.querySelector("#result").dataset.result || !document.querySelector("#error").hidden, null, { timeout: TIMEOUT_MS });
  const firstS = (Date.now() - t0) / 1000;
  const result = await page.evaluate(() => document.querySelector("#result").dataset.result);
  if (!result) throw new Error(`${href}: ${await page.textContent("#error")}`);
  const r = JSON.parse(result);
  await Promise.all(sizes);
  page.context().off("requestfinished", onFinished);
  const total = Object.values(bytes).reduce((a, b) => a + b, 0);
  const weightsHere = await page.evaluate(() => document.body.dataset.weights);
  return { ready_s: readyS, first_s: firstS, bytes: total, by_kind: bytes, top1: r.top[0].class, answered_as: r.mode, weights_through: weightsHere };
}

const rows = [];
console.log("| placement | visit | bytes | of which weights | ready s | first answer s |");
console.log("|---|---|---|---|---|---|");
for (const mode of modes) {
  const weights = WEIGHTS[mode];
  if (!weights) throw new Error(`unknown mode ${mode}; use ${Object.keys(WEIGHTS).join(", ")}`);
  await withPage(GPU_ARGS.cpu, async (page) => {
    const href = new URL(`?backend=cpu&weights=${weights}`, url).href;
    for (const visitKind of ["cold", "warm"]) {
      const v = await visit(page, href, mode, visitKind === "warm");
      rows.push({ mode, weights, visit: visitKind, ...v });
      console.log(`| ${mode} | ${visitKind} | ${v.bytes.toLocaleString("en")} | ${v.by_kind.weights.toLocaleString("en")} | ${v.ready_s.toFixed(1)} | ${v.first_s.toFixed(1)} |`);
    }
  });
}
if (process.env.JSON_OUT) writeFileSync(process.env.JSON_OUT, JSON.stringify(rows));
