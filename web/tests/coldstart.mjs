// Cold start of the demo page in a fresh browser profile: bytes downloaded (as transferred, i.e.
// gzip where the server compresses) and time from navigation to the page being ready and to the
// first result, per edge backend. Not a test; prints a markdown table.
//
//   SPLIT_URL=http://127.0.0.1:8080/ [JSON_OUT=f.json] node tests/coldstart.mjs
import { writeFileSync } from "node:fs";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
console.log("| edge backend | bytes downloaded | ready s | first result s | split used |");
console.log("|---|---|---|---|---|");
const rows = [];
for (const [name, args] of [["cpu", GPU_ARGS.cpu], ["webgpu", GPU_ARGS.webgpu]]) {
  await withPage(args, async (page) => {
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Network.enable");
    let bytes = 0;
    cdp.on("Network.loadingFinished", (e) => { bytes += e.encodedDataLength; });
    const t0 = Date.now();
    await page.goto(url);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
    const ready = (Date.now() - t0) / 1000;
    await page.click('button[data-sample="chelsea"]');
    await page.click("#classify");
    await page.waitForFunction(() => document.querySelector("#result").dataset.result, null, { timeout: 300_000 });
    const first = (Date.now() - t0) / 1000;
    const r = JSON.parse(await page.evaluate(() => document.querySelector("#result").dataset.result));
    rows.push({ backend: name, bytes, ready_s: ready, first_s: first, mode: r.mode, split: r.split ?? null });
    console.log(`| ${name} | ${bytes.toLocaleString("en")} | ${ready.toFixed(1)} | ${first.toFixed(1)} | ${r.mode} ${r.split ?? ""} |`);
  });
}
if (process.env.JSON_OUT) writeFileSync(process.env.JSON_OUT, JSON.stringify(rows));
