// The offline start (issue 33), in Chromium, Firefox and WebKit (`SPLIT_ENGINES` to choose): the demo
// page, whose client registers the service worker (`sw.js`), is visited once with a server of
// this test's own; the server is killed (nothing listens on its port) and the page reloaded.
// It must load from the service worker's cache, answer with the light model, keep the answers
// in the backlog (IndexedDB: they outlive the page), and finish them when a server is back on
// the same origin. Then a new server build (a served file changed) must replace the cached
// version: one version's cache, never a mix. Run by `cargo xtask test` with `SPLIT_SERVER_CMD` set (see own-server.mjs).
import assert from "node:assert/strict";
import { readFileSync, utimesSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { withEngine } from "./engine.mjs";
import { freePort, startOwnServer } from "./own-server.mjs";
import { RequestLog } from "./request-log.mjs";

const ENGINES = (process.env.SPLIT_ENGINES ?? "chromium,firefox,webkit").split(",");
const STEP_TIMEOUT_MS = 120_000;
/** A served file whose time of change the test moves: to the server, a new build's files. */
const TOUCHED = new URL("../samples/chelsea.png", import.meta.url);

/** The page opened again. WebKitGTK 2.50's WebDriver reload empties its automation session's
 * Cache Storage (engines.mjs), which no visitor's reload does: there, a navigation to it. */
const reopen = (page, engine, url) => (engine === "webkit" ? page.goto(url) : page.reload());

const ready = (page) => page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null,
  { timeout: STEP_TIMEOUT_MS });

/** Poll `fn` (async) in the page until it is truthy. Not `waitForFunction`: Playwright's takes
 * an async predicate's promise for a truthy answer and returns at once. */
async function until(page, fn, timeoutMs = STEP_TIMEOUT_MS) {
  for (const end = Date.now() + timeoutMs; !(await page.evaluate(fn));) {
    if (Date.now() > end) throw new Error(`not true within ${timeoutMs} ms: ${fn.toString().slice(0, 120)}`);
    await new Promise((f) => setTimeout(f, 100));
  }
}

/** The offline capability once the service worker kept the start's files, and the caches. */
const offlineState = (page) => page.evaluate(async () => ({
  offline: await window.splitClient.offlineReady,
  site: window.splitClient.info.site,
  controlled: navigator.serviceWorker.controller != null,
  caches: (await caches.keys()).filter((k) => k.startsWith("split-site-")),
  state: document.body.dataset.state,
  build: window.splitClient.wasmBuild,
}));

/** Classify each sample in auto mode, one after another; the photos come from here (the page
 * has no server to fetch them from). */
const classify = (page, samples) => page.evaluate(async (samples) => {
  const out = [];
  for (const [s, data] of samples) {
    const bytes = new Uint8Array(data);
    const r = await window.splitClient.classify(bytes, "auto", { label: s });
    out.push({ id: r.id, quality: r.quality, model: r.model, resumable: r.resumable ?? false, mode: r.mode, top1: r.top[0].class });
  }
  return out;
}, samples.map((s) => [s, [...readFileSync(new URL(`../samples/${s}.png`, import.meta.url))]]));

for (const engine of ENGINES) {
  const port = await freePort();
  let server = await startOwnServer(port);
  // The page's origin: a proxy that notes every request, in front of the server's port.
  const log = new RequestLog(port);
  const origin = await log.listen();
  // As in outage.mjs: auto may not put the full weights on the device, so the light model is
  // what answers without the server.
  const pageUrl = `${origin}?weights=block5&max_edge_mb=1`;
  await withEngine(engine, async (browser) => {
    const page = await browser.newPage();
    const errors = [];
    // Firefox reports each WebSocket that cannot connect as a page error, each request the
    // service worker could not answer (the sample below), both expected with the server gone,
    // and a socket still open when the test reloads the page (the client opens it at start to
    // measure the link).
    const expected = /can’t establish a connection to the server at ws:|A ServiceWorker passed a promise to FetchEvent\.respondWith\(\) that rejected|The connection to ws:\S+ was interrupted while the page was loading/;
    page.on("pageerror", (e) => expected.test(e.message) || errors.push(e.message));

    // The first visit, the server up: the start's files are kept; the light model downloads
    // in the background (offline: true asks for it).
    await page.goto(pageUrl);
    await ready(page);
    const first = await offlineState(page);
    console.log(`offline: ${engine}: first visit`, JSON.stringify(first));
    assert.equal(first.state, "ready");
    assert.equal(first.offline.available, true, `${engine}: the service worker kept the start: ${first.offline.reason}`);
    assert.equal(first.offline.site, first.site, "of the server's site version");
    assert.deepEqual(first.caches, [`split-site-${first.site}`], "one version's cache");
    const online = await classify(page, ["chelsea"]);
    assert.equal(online[0].quality, "full", "the server answers while it is up");
    // The light model in memory, and its shards (those after the full stages) in the client's
    // Cache Storage, which an offline start reads.
    await until(page, async () => {
      const c = window.splitClient;
      const w = await c.weightsState();
      if (w.light !== "int8") return false;
      const shards = c.info.light_model.shards;
      const kept = new Set((await (await caches.open("split-inference")).keys()).map((r) => new URL(r.url).pathname));
      return shards.slice(shards.findIndex((s) => s.name === w.through) + 1)
        .every((s) => kept.has(new URL(s.url, location.href).pathname));
    });
    assert.equal(await page.evaluate(() => document.querySelector("#offline").textContent), "ready", "the page says it can start offline");

    // A warm start, the server up: only the page and the API go to the network; the scripts,
    // the client and the wasm come from the current version's cache.
    const before = log.paths.length;
    await reopen(page, engine, pageUrl);
    await ready(page);
    const warm = log.paths.slice(before);
    console.log(`offline: ${engine}: a warm start asked the server for [${warm}]`);
    assert.ok(warm.includes("/"), "the page itself is asked for");
    // Bar the service worker's own script: a navigation may make the browser check it for an
    // update, from the network by design (Firefox did, now and then, on a loaded machine).
    assert.deepEqual(warm.filter((p) => p !== "/sw.js" && /\.(js|wasm|css|html)$/.test(p)), [],
      `${engine}: no script, style or wasm is asked for`);

    // The server killed: nothing listens on the origin. The reload starts from the cache.
    await server.stop();
    const reloadAt = Date.now();
    await reopen(page, engine, pageUrl);
    await ready(page);
    const again = await offlineState(page);
    console.log(`offline: ${engine}: reloaded with the server gone in ${Date.now() - reloadAt} ms`, JSON.stringify(again));
    assert.equal(again.state, "ready", `${engine}: the page starts without the server`);
    assert.ok(again.controlled, "served by the service worker");
    assert.equal(again.site, first.site, "the cached /api/info");
    const during = await classify(page, ["coffee", "camera"]);
    console.table(during);
    assert.ok(during.every((r) => r.quality === "reduced" && r.model === "int8" && r.resumable),
      `${engine}: answered by the light model, kept for the server`);
    assert.equal((await page.evaluate(() => window.splitClient.backlogState())).entries, 2, "both in the backlog");
    // The page as a person uses it: a sample button says the samples need the server; a photo
    // of one's own and Classify give an answer on screen.
    await page.click('button[data-sample="coffee"]');
    await page.waitForFunction(() => !document.querySelector("#error").hidden, null, { timeout: STEP_TIMEOUT_MS });
    assert.match(await page.evaluate(() => document.querySelector("#error").textContent), /out of reach/,
      "a sample offline: the page says why it cannot load it");
    await page.setInputFiles("#file", fileURLToPath(new URL("../samples/chelsea.png", import.meta.url)));
    await page.selectOption("#split", "auto");
    // The file is read before Classify is enabled; puppeteer and WebDriver would click it
    // disabled (Playwright waits), and nothing would happen.
    await page.waitForFunction(() => !document.querySelector("#classify").disabled, null, { timeout: STEP_TIMEOUT_MS });
    await page.click("#classify");
    await page.waitForFunction(() => document.querySelector("#result").dataset.quality || !document.querySelector("#error").hidden,
      null, { timeout: STEP_TIMEOUT_MS });
    const shown = await page.evaluate(() => ({ quality: document.querySelector("#result").dataset.quality,
      error: document.querySelector("#error").hidden ? null : document.querySelector("#error").textContent }));
    assert.deepEqual(shown, { quality: "reduced", error: null }, `${engine}: the page answers offline`);

    // Opened again, the server still gone: the three kept answers are in IndexedDB.
    await reopen(page, engine, pageUrl);
    await ready(page);
    const persisted = await page.evaluate(() => window.splitClient.backlogState());
    assert.deepEqual([persisted.entries, persisted.persistent], [3, true], `${engine}: the backlog survives the page`);

    // A server again on the same origin: the kept answers finish, once each, in order.
    server = await startOwnServer(port);
    const backAt = Date.now();
    const kept = during.map((r) => r.id);
    await page.waitForFunction((ids) => ids.every((id) => (window.splitUpdates ?? []).some((u) => u.id === id && u.version === 2 && u.final))
      && document.body.dataset.backlog === "0", kept, { timeout: STEP_TIMEOUT_MS });
    const updates = await page.evaluate((ids) => window.splitUpdates.filter((u) => ids.includes(u.id)).map((u) => ({ id: u.id, quality: u.quality })), kept);
    console.log(`offline: ${engine}: ${persisted.entries} kept answers finished ${Date.now() - backAt} ms after the server returned`);
    assert.deepEqual(updates.map((u) => u.id), kept, "finished once each, in order");
    assert.ok(updates.every((u) => u.quality === "full"), "by the server");

    // A new server build: a served file changed. The next start online keeps the new version
    // and drops the old one's cache: no page of one version with the wasm of another.
    await server.stop();
    const now = new Date();
    utimesSync(TOUCHED, now, now);
    server = await startOwnServer(port);
    await reopen(page, engine, pageUrl);
    await ready(page);
    const rebuilt = await offlineState(page);
    console.log(`offline: ${engine}: after a new build`, JSON.stringify(rebuilt));
    assert.notEqual(rebuilt.site, first.site, "a new site version");
    assert.equal(rebuilt.offline.available, true, rebuilt.offline.reason);
    assert.deepEqual(rebuilt.caches, [`split-site-${rebuilt.site}`], `${engine}: the old version's cache is gone`);
    assert.deepEqual(errors, [], "no page errors");
  });
  await server.stop();
  log.close();
}
console.log("offline: passed");
