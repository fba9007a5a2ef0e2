// Progressive answers, measured: the demo page (CPU backend, weights up to block5 and the int8
// light model for the rest) classifies photos at block5 with `progressive: true`. For each, the
// time to the first answer (the light model's, through `onUpdate`) and to the final one (the
// server's), and whether their top-1s differ. Run by `./run.sh lab --progressive` over each
// link profile; env: SPLIT_URL (the page, through the link), IMAGES (a folder of JPEG/PNG
// photos), LIMIT (how many, default 100), JSON_OUT (where the rows go).
import assert from "node:assert/strict";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL;
const dir = process.env.IMAGES;
assert.ok(url && dir && process.env.JSON_OUT, "set SPLIT_URL, IMAGES and JSON_OUT (./run.sh lab --progressive does)");
const limit = Number(process.env.LIMIT ?? 100);
const files = readdirSync(dir).filter((f) => /\.(jpe?g|png)$/i.test(f)).sort().slice(0, limit);
assert.ok(files.length > 0, `no photos in ${dir}`);

const rows = await withPage(GPU_ARGS.cpu, async (page) => {
  await page.goto(new URL("?weights=block5&progressive=0&max_edge_mb=1", url).href);
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 600_000 });
  // The light model comes in the background after an auto request.
  await page.evaluate(async () => {
    const c = window.splitClient;
    const bytes = new Uint8Array(await (await fetch("samples/chelsea.png")).arrayBuffer());
    await c.classify(bytes, "auto");
    for (let i = 0; i < 6000 && !(await c.weightsState()).light; i++) await new Promise((f) => setTimeout(f, 100));
    if (!(await c.weightsState()).light) throw new Error("the light model did not load");
  });
  const out = [];
  for (const [i, file] of files.entries()) {
    const bytes = [...readFileSync(join(dir, file))];
    out.push(await page.evaluate(async ({ bytes, id }) => {
      const c = window.splitClient;
      const image = new Uint8Array(bytes);
      const t = performance.now();
      const r = await c.classify(image, "block5", { id, progressive: true });
      const total = performance.now() - t;
      const first = window.splitUpdates?.find((u) => u.id === id && u.version === 1);
      return { id, firstMs: first ? first.receivedAtMs - t : total, finalMs: total, partial: Boolean(first),
               firstTop1: first ? first.top[0].class : r.top[0].class, finalTop1: r.top[0].class, quality: r.quality,
               bytesSent: r.bytesSent };
    }, { bytes, id: `p${i}` }));
    if ((i + 1) % 25 === 0) console.error(`progressive: ${i + 1}/${files.length}`);
  }
  return out;
});
writeFileSync(process.env.JSON_OUT, JSON.stringify(rows));
