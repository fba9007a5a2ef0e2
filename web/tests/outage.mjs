// Outages in Chromium (or `SPLIT_ENGINE=firefox`): the demo page classifies a stream of frames in auto mode while the link
// to the server is cut (connections reset) and later silenced (a black hole: nothing answers,
// nothing closes). Every frame must get an answer (reduced, from the light model), the backlog
// must survive a reload during the outage, and when the link returns every kept answer must be
// finished by the server: version 2, full quality, in order, once each. Then a progressive
// request: the light model's answer first, the server's after it.
// Run by `cargo xtask test` after e2e.mjs, with SPLIT_URL set to the server.
import assert from "node:assert/strict";
import net from "node:net";
import { GPU_ARGS, withPage } from "./browser.mjs";
import { withEngine } from "./engine.mjs";
import { startOwnServer } from "./own-server.mjs";

const server = new URL(process.env.SPLIT_URL ?? "");
/** The engine the pages run in (`SPLIT_ENGINE`: chromium, the default, or firefox). */
const ENGINE = process.env.SPLIT_ENGINE ?? "chromium";
/** Run `body(page)` on a fresh page of the engine, the CPU fallback in Chromium. */
const onPage = (body) => ENGINE === "chromium" ? withPage(GPU_ARGS.cpu, body)
  : withEngine(ENGINE, async (browser) => body(await browser.newPage()));
assert.ok(server.port, "set SPLIT_URL to the server's base URL (cargo xtask test does)");
const STEP_TIMEOUT_MS = 120_000;
const SAMPLES = ["chelsea", "coffee", "camera"];

/**
 * A TCP proxy in front of the server whose WebSocket link the test can take down: "reset"
 * closes the WebSockets through it and refuses new ones (a server that died, Wi-Fi dropped),
 * "blackhole" holds every byte of them (a link gone silent: nothing answers, nothing closes),
 * "up" forwards again (held bytes included, as TCP would deliver them). Pages and files load
 * throughout: the page's origin stays reachable, the inference link does not.
 */
class CuttableLink {
  constructor(upstreamPort) {
    this.upstreamPort = upstreamPort;
    this.mode = "up";
    this.links = new Set();
    this.server = net.createServer((client) => this.accept(client));
  }

  listen() {
    return new Promise((resolve) => this.server.listen(0, "127.0.0.1", () => resolve(this.server.address().port)));
  }

  accept(client) {
    client.on("error", () => {});
    client.once("data", (first) => {
      const ws = /^GET \/ws[ ?]/.test(first.toString("latin1", 0, 12));
      if (ws && this.mode === "reset") return client.destroy();
      if (ws && this.mode === "blackhole") {
        // A handshake into a black hole: held, never answered, never closed (not even by the
        // server's own idle timeout, which would close an upstream connection after 5 s).
        const held = { client, upstream: { destroy() {}, write() {} }, held: [] };
        this.links.add(held);
        client.on("close", () => this.links.delete(held));
        return;
      }
      const upstream = net.connect(this.upstreamPort, "127.0.0.1");
      upstream.on("error", () => client.destroy());
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
      const link = { client, upstream, held: [] };
      // Each direction goes through `forward`, which holds bytes while the link is a black hole.
      const forward = (to) => (chunk) => (ws && this.mode === "blackhole" ? link.held.push([to, chunk]) : to.write(chunk));
      forward(upstream)(first);
      client.on("data", forward(upstream));
      upstream.on("data", forward(client));
      if (ws) {
        this.links.add(link);
        client.on("close", () => this.links.delete(link));
      }
    });
  }

  set(mode) {
    this.mode = mode;
    for (const link of this.links) {
      if (mode === "reset") {
        link.client.destroy();
        link.upstream.destroy();
      } else if (mode === "up") {
        for (const [to, chunk] of link.held.splice(0)) to.write(chunk);
      }
    }
  }

  close() {
    for (const link of this.links) link.client.destroy();
    this.server.close();
  }
}

/** Screenshots at desktop and phone sizes into `$SCREENSHOT_DIR`, when it is set (to look at). */
async function screenshots(page, name) {
  const dir = process.env.SCREENSHOT_DIR;
  if (!dir) return;
  for (const [w, h] of [[1280, 800], [390, 844]]) {
    await page.setViewportSize({ width: w, height: h });
    await page.screenshot({ path: `${dir}/${name}-${w}.png`, fullPage: true });
  }
  await page.setViewportSize({ width: 1280, height: 800 });
}

/** Classify each sample in auto mode, one after another, with labels `${prefix}${i}`. */
const classifySamples = (page, prefix) => page.evaluate(async ({ samples, prefix }) => {
  const c = window.splitClient;
  const out = [];
  for (const [i, s] of samples.entries()) {
    const bytes = new Uint8Array(await (await fetch(`samples/${s}.png`)).arrayBuffer());
    const r = await c.classify(bytes, "auto", { label: `${prefix}${i}` });
    out.push({ id: r.id, quality: r.quality, resumable: r.resumable ?? false, mode: r.mode, top1: r.top[0].class });
  }
  return out;
}, { samples: SAMPLES, prefix });

/** Wait until every id in `ids` has a final update (version 2). */
const finished = (page, ids) => page.waitForFunction((ids) => ids.every((id) =>
  (window.splitUpdates ?? []).some((u) => u.id === id && u.version === 2 && u.final)), ids, { timeout: STEP_TIMEOUT_MS });

const link = new CuttableLink(Number(server.port));
const port = await link.listen();
// At most 1 MB of full weights on the device: auto never picks edge only (which would download
// all 18.5 MB), so the edge holds block5's stages and the light model covers the rest.
const pageUrl = `http://127.0.0.1:${port}/?weights=block5&max_edge_mb=1`;

/** The page started; it gains `holdLink(id, ms)`: the link goes silent (a black hole, through
 * the page's `setLink`) and `{ released }` resolves once result `id`'s first answer (version 1)
 * is announced, or `ms` pass, to the ms the link was held, with the link up again. So the
 * server's answer cannot come before the light model's (from its cache, on a loaded machine),
 * which would leave nothing progressive, by design. */
const ready = async (page) => {
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: STEP_TIMEOUT_MS });
  await page.evaluate(() => {
    window.holdLink = async (id, ms) => {
      await window.setLink("blackhole");
      const held = performance.now();
      const first = () => (window.splitUpdates ?? []).some((u) => u.id === id && u.version === 1);
      const released = (async () => {
        while (!first() && performance.now() - held < ms) await new Promise((f) => setTimeout(f, 10));
        const heldMs = performance.now() - held;
        await window.setLink("up");
        return heldMs;
      })();
      return { released };
    };
  });
};

try {
  await onPage(async (page) => {
    const errors = [];
    // Firefox reports each WebSocket that cannot connect as a page error, and each request its
    // service worker (the offline start's) could not answer; the link is cut and the server
    // killed here on purpose, so those are expected (Chromium logs them to the console instead),
    // as is a socket cut while the page reloads (Firefox: "interrupted while the page was
    // loading", seen on a loaded machine).
    const linkCut = /can’t establish a connection to the server at ws:|The connection to ws:\S+ was interrupted while the page was loading|A ServiceWorker passed a promise to FetchEvent\.respondWith\(\) that rejected/;
    page.on("pageerror", (e) => linkCut.test(e.message) || errors.push(e.message));
    await page.exposeFunction("setLink", (mode) => link.set(mode));
    await page.goto(pageUrl);
    await ready(page);
    assert.equal(await page.evaluate(() => document.body.dataset.state), "ready", "the page loads through the link");

    // The backlog's bounds, on a database of its own: the oldest entries go, the count says so,
    // and what is kept is there when the backlog is opened again.
    const bounds = await page.evaluate(async () => {
      const { Backlog, MAX_BACKLOG_ENTRIES } = await import("/client/backlog.js");
      const name = "split-inference-bounds-test";
      const b = await Backlog.open(name);
      for (let i = 0; i < MAX_BACKLOG_ENTRIES + 2; i++) {
        await b.add({ id: `e${i}`, frame: new Uint8Array(100), createdAt: i, top: [] });
      }
      await b.add({ id: `e${MAX_BACKLOG_ENTRIES + 1}`, frame: new Uint8Array(100), createdAt: 0, top: [] }); // a repeat
      await b.remove("e5");
      const again = await Backlog.open(name);
      const out = { size: b.size, dropped: b.dropped, first: b.first().id, reopened: again.entries.map((e) => e.id),
                    max: MAX_BACKLOG_ENTRIES };
      indexedDB.deleteDatabase(name);
      return out;
    });
    assert.deepEqual([bounds.size, bounds.dropped, bounds.first], [bounds.max - 1, 2, "e2"], "the oldest two dropped, e5 removed");
    assert.equal(bounds.reopened.length, bounds.max - 1, "what was kept is read back");
    assert.deepEqual([bounds.reopened[0], bounds.reopened.at(-1)], ["e2", `e${bounds.max + 1}`], "oldest first");
    assert.ok(!bounds.reopened.includes("e5"), "a removed entry stays removed");

    // A first auto request with the link up; the light model then downloads in the background.
    const warm = await page.evaluate(async () => {
      const c = window.splitClient;
      const bytes = new Uint8Array(await (await fetch("samples/chelsea.png")).arrayBuffer());
      const r = await c.classify(bytes, "auto", { label: "warm-up" });
      for (let i = 0; i < 600 && !(await c.weightsState()).light; i++) await new Promise((f) => setTimeout(f, 100));
      return { quality: r.quality, version: r.version, weights: await c.weightsState() };
    });
    console.log("outage: before the cut", warm);
    assert.deepEqual([warm.quality, warm.version], ["full", 1], "the link up: a full answer");
    assert.equal(warm.weights.light, "int8", "the light model is loaded in the background");
    assert.notEqual(warm.weights.through, "logits", "the full weights stay those of the edge's stages");

    // A camera-like stream of six frames, the link reset after the second.
    const stream = await page.evaluate(async (samples) => {
      const c = window.splitClient;
      const images = await Promise.all(samples.map(async (s) => new Uint8Array(await (await fetch(`samples/${s}.png`)).arrayBuffer())));
      const out = [];
      let cutAt = null;
      for (let i = 0; i < 6; i++) {
        if (i === 2) {
          await window.setLink("reset");
          cutAt = performance.now();
        }
        const r = await c.classify(images[i % 3], "auto", { stream: true, label: `frame${i}` });
        out.push({ i, id: r.id, quality: r.quality, version: r.version, model: r.model, resumable: r.resumable ?? false,
                   top1: r.top[0].class, mode: r.mode, split: r.split, fallback: r.fallback ?? null,
                   afterCutMs: cutAt == null ? null : performance.now() - cutAt });
      }
      return { frames: out, backlog: await c.backlogState() };
    }, SAMPLES);
    console.table(stream.frames);
    // After the cut every frame is answered: by the light model with its features kept, or, for
    // a photo the stream showed before, from the edge's cache of the server's earlier answer
    // (whether a repeat reaches the cache before auto moves to the edge is a matter of timing).
    const after = stream.frames.slice(2);
    const cut = after.filter((f) => f.mode !== "cache");
    assert.ok(stream.frames.slice(0, 2).every((f) => f.quality === "full"), "before the cut: full answers");
    assert.ok(cut.length >= 1 && cut[0].i === 2, "the first new photo after the cut is answered on the device");
    assert.ok(cut.every((f) => f.quality === "reduced" && f.model === "int8" && f.resumable),
      "after the cut: every frame not in the cache answered by the light model, its features kept");
    for (const f of after.filter((f) => f.mode === "cache")) {
      assert.ok(f.i >= 3 && f.quality === "full" && f.top1 === stream.frames[f.i - 3].top1,
        `frame ${f.i} from the cache is the same photo's earlier answer`);
    }
    assert.deepEqual(stream.backlog.entries, cut.length, "the backlog holds each reduced answer once");
    assert.ok(stream.backlog.persistent, "the backlog is in IndexedDB");
    console.log(`outage: first reduced answer ${cut[0].afterCutMs.toFixed(0)} ms after the cut; ${after.length - cut.length} of ${after.length} from the edge cache`);

    // A reload during the outage: the backlog is still there.
    await page.reload();
    await ready(page);
    const afterReload = await page.evaluate(() => window.splitClient.backlogState());
    assert.equal(afterReload.entries, cut.length, "the backlog survives a reload");
    assert.equal(await page.evaluate(() => (window.splitUpdates ?? []).length), 0, "nothing finished while the link is down");

    // The link is back: the reloaded page finishes every kept answer, oldest first, once each.
    const restoredAt = Date.now();
    link.set("up");
    await page.waitForFunction((n) => (window.splitUpdates ?? []).filter((u) => u.final).length >= n && document.body.dataset.backlog === "0",
      cut.length, { timeout: STEP_TIMEOUT_MS });
    const drainMs = Date.now() - restoredAt;
    await new Promise((f) => setTimeout(f, 1000)); // a duplicate would arrive by now
    const updates = await page.evaluate(() => window.splitUpdates);
    console.table(updates.map((u) => ({ id: u.id.slice(0, 8), label: u.label, version: u.version, quality: u.quality,
                                        top1: u.top[0].class, before: u.previousTop[0].class, changed: u.changed, waitedMs: Math.round(u.waitedMs) })));
    console.log(`outage: backlog of ${cut.length} finished ${drainMs} ms after the link returned`);
    assert.deepEqual(updates.map((u) => u.id), cut.map((f) => f.id), "every kept answer finished once, in order");
    assert.ok(updates.every((u) => u.version === 2 && u.quality === "full" && u.final), "version 2, full quality");
    for (const [k, u] of updates.entries()) {
      assert.equal(u.previousTop[0].class, cut[k].top1, "the update names the answer it replaces");
    }
    assert.equal(await page.evaluate(() => document.querySelectorAll("#resumed-list li").length), cut.length,
      "the page lists the finished answers");

    // A black hole: nothing answers and nothing closes; the request is still answered, by the
    // light model, when its deadline passes; the link returns and it is finished.
    const silent = await page.evaluate(async () => {
      const c = window.splitClient;
      const bytes = new Uint8Array(await (await fetch("samples/coffee.png")).arrayBuffer());
      await window.setLink("blackhole");
      const t = performance.now();
      const r = await c.classify(bytes, "auto", { label: "silent" });
      const ms = performance.now() - t;
      await window.setLink("up");
      return { id: r.id, quality: r.quality, resumable: r.resumable ?? false, placement: r.placement, fallback: r.fallback ?? null, ms };
    });
    console.log("outage: black hole", silent);
    assert.equal(silent.quality, "reduced", "a silent link: answered by the light model");
    await page.waitForFunction((id) => (window.splitUpdates ?? []).some((u) => u.id === id && u.version === 2), silent.id,
      { timeout: STEP_TIMEOUT_MS });

    // Progressive: the light model's answer first (version 1, reduced), the server's after it.
    // The link holds the server's answer until the light model's is out (`holdLink`).
    const progressive = await page.evaluate(async () => {
      const c = window.splitClient;
      const bytes = new Uint8Array(await (await fetch("samples/camera.png")).arrayBuffer());
      const id = "progressive-camera";
      const { released } = await window.holdLink(id, 10_000);
      const t = performance.now();
      const r = await c.classify(bytes, "block5", { id, progressive: true });
      const lightMs = await released;
      return { result: { version: r.version, quality: r.quality, top1: r.top[0].class, ms: performance.now() - t, lightMs },
               updates: window.splitUpdates.filter((u) => u.id === id).map((u) => ({ version: u.version, quality: u.quality, top1: u.top[0].class })) };
    });
    console.log("outage: progressive", JSON.stringify(progressive));
    assert.deepEqual(progressive.updates.map((u) => [u.version, u.quality]), [[1, "reduced"], [2, "full"]],
      "the light model's answer, then the server's");
    assert.deepEqual([progressive.result.version, progressive.result.quality], [2, "full"]);

    // The same for a model input uploaded cloud-only (what auto's cloud-only requests send):
    // the first answer reads it as the server does, as it is, where a photo would be cropped
    // first (and a model input cropped again loses its border).
    const input = await page.evaluate(async () => {
      const c = window.splitClient;
      const { modelInputJpeg } = await import("/client/wasm.js");
      const jpeg = await modelInputJpeg(new Uint8Array(await (await fetch("samples/coffee.png")).arrayBuffer()));
      const id = "progressive-input";
      const { released } = await window.holdLink(id, 10_000);
      const r = await c.classify(jpeg, "cloud", { id, progressive: true, modelInput: true });
      await released;
      const top = (t) => ({ class: t[0].class, prob: t[0].prob });
      const first = window.splitUpdates.find((u) => u.id === id && u.version === 1);
      // The page's client lives in a worker: a client on this thread, holding the same
      // stages (full to block5, the light model after), answers the two readings directly.
      const { SplitClient } = await import("/split-client.js");
      const here = await SplitClient.create({ weights: "block5", worker: false });
      await here.weights.ensureLight();
      const asInput = top((await here.edge.answerAt(jpeg, 224, true)).top);
      const asPhoto = top((await here.edge.run(jpeg, "logits", 1e6, "f32", false)).top);
      here.close();
      return { result: [r.version, r.quality], first: first && [first.quality, top(first.top)], asInput, asPhoto };
    });
    console.log("outage: progressive model input", JSON.stringify(input));
    assert.deepEqual(input.result, [2, "full"]);
    assert.deepEqual(input.first, ["reduced", input.asInput], "the first answer is the model input's, not cropped again");
    assert.notDeepEqual(input.asInput, input.asPhoto, "a second crop would answer otherwise");

    // A server killed (SIGKILL: no close frame, no goodbye) and started again.
    if (process.env.SPLIT_SERVER_CMD) {
      let own = await startOwnServer();
      link.upstreamPort = own.port;
      link.set("reset"); // the page's next connection goes to that server
      link.set("up");
      // The reset may find the client backing off after the black hole above: a ping then
      // fails at once ("next attempt in …"), by design; the next one after the wait connects.
      const pong = await page.evaluate(async () => {
        for (let until = performance.now() + 20_000; performance.now() < until;) {
          const p = await window.splitClient.ping(0, 10_000);
          if (p) return p;
          await new Promise((f) => setTimeout(f, 250));
        }
        return null;
      });
      assert.ok(pong, "the test's own server answers a ping within 20 s");
      await own.stop();
      const killedAt = Date.now();
      // Auto and the backlog now code block5 alike (both s14), so the edge's cache holds the
      // server's answers to every sample: switch it off to see what happens to new work.
      await page.evaluate(() => window.splitClient.setCacheEntries(0));
      const during = await classifySamples(page, "killed-");
      console.table(during);
      // A photo the server already answered at this split comes from the edge's cache, in full.
      assert.ok(during.every((r) => (r.quality === "reduced" && r.resumable) || (r.quality === "full" && r.mode === "cache")),
        "the server dead: reduced answers, kept (or the server's earlier answer from the cache)");
      assert.ok(during.filter((r) => r.resumable).length >= 2, "photos the server never saw are kept");
      // The page itself, as a person uses it: the answer says the light model gave it, within
      // the request's deadline, every time (`KILLED_REPEATS=20` repeats it to show that).
      await page.click('button[data-sample="chelsea"]');
      await page.selectOption("#split", "auto");
      const repeats = Number(process.env.KILLED_REPEATS ?? 1);
      const deadlineMs = await page.evaluate(() => window.splitClient.timeoutMs);
      for (let k = 0; k < repeats; k++) {
        const t = Date.now();
        await page.evaluate(() => delete document.querySelector("#result").dataset.quality);
        // Classify is enabled once the sample is read (puppeteer would click it disabled).
        await page.waitForFunction(() => !document.querySelector("#classify").disabled, null, { timeout: STEP_TIMEOUT_MS });
        // The click must start a request (the page's state turns busy at once). In Firefox it
        // missed about 1 run in 5. One cause was found: the status line above shrank for ~20 ms
        // while the client retried the dead server, so a click aimed at Classify landed where it
        // had been; the status now keeps its height (style.css) and clicks wait for a still
        // target (engine.mjs). One miss seen with Classify standing still stays unexplained, so
        // a click that starts nothing within 5 s is made again (at most three), and logged.
        for (let attempt = 1; ; attempt++) {
          await page.click("#classify");
          const started = await page.waitForFunction(() => document.body.dataset.state === "busy"
            || document.querySelector("#result").dataset.quality || !document.querySelector("#error").hidden,
          null, { timeout: 5_000 }).then(() => true, () => false);
          if (started) break;
          assert.ok(attempt < 3, "three clicks on Classify and none started a request");
          console.log(`outage: server killed: click ${attempt} on Classify started nothing; clicked again`);
        }
        // An answer or an error on screen, whichever comes: an error fails here with its text.
        // Neither: fail with what the page showed instead.
        await page.waitForFunction(() => document.querySelector("#result").dataset.quality || !document.querySelector("#error").hidden,
          null, { timeout: deadlineMs + 30_000 }).catch(async (e) => {
          const seen = await page.evaluate(() => ({ state: document.body.dataset.state, status: document.querySelector("#status-text").textContent,
            busy: !document.querySelector("#busy").hidden, classifyDisabled: document.querySelector("#classify").disabled,
            image: document.body.dataset.image, mode: document.querySelector("#r-mode").textContent,
            backlog: document.querySelector("#backlog")?.textContent?.slice(0, 200) })).catch((err) => ({ unreadable: err.message }));
          throw new Error(`server killed: no answer and no error on the page within ${deadlineMs + 30_000} ms (${e.message}); the page: ${JSON.stringify(seen)}`);
        });
        const shown = await page.evaluate(() => ({ quality: document.querySelector("#result").dataset.quality,
          error: document.querySelector("#error").hidden ? null : document.querySelector("#error").textContent,
          text: document.querySelector("#quality").textContent }));
        assert.equal(shown.error, null, `the page shows no error: ${JSON.stringify(shown)}`);
        assert.equal(shown.quality, "reduced", `the page shows a reduced answer: ${JSON.stringify(shown)}`);
        assert.match(shown.text, /light model/, "and says which model answered");
        if (repeats > 1) console.log(`outage: server killed, the page's classify ${k + 1}/${repeats}: reduced in ${Date.now() - t} ms`);
      }
      const kept = during.filter((r) => r.resumable).map((r) => r.id);
      await screenshots(page, "outage");
      own = await startOwnServer();
      link.upstreamPort = own.port;
      const restartedAt = Date.now();
      await finished(page, kept);
      // The answer on screen becomes the server's.
      await page.waitForFunction(() => document.querySelector("#result").dataset.version === "2", null, { timeout: STEP_TIMEOUT_MS });
      assert.equal(await page.evaluate(() => document.querySelector("#result").dataset.quality), "full", "the page shows the server's answer");
      await screenshots(page, "resumed");
      const updates = await page.evaluate((ids) => window.splitUpdates.filter((u) => ids.includes(u.id)), kept);
      assert.deepEqual(updates.map((u) => u.id), kept, "finished once each, in order");
      console.log(`outage: server killed; ${kept.length} answers kept for ${restartedAt - killedAt} ms, ` +
                  `finished ${Date.now() - restartedAt} ms after the restart`);
      link.upstreamPort = Number(server.port); // back to the shared server for what follows
      await own.stop();
    } else {
      console.log("outage: SPLIT_SERVER_CMD not set: the server-killed phase needs a server this test may kill");
    }
    assert.deepEqual(errors, [], "no page errors");
  });

  // A privacy floor at block5: the photo and features before block5 never cross the WebSocket,
  // through auto's choices, an outage and its backlog; asking for them is refused. Every frame
  // the page sends is captured and read: byte 6 is its kind (2 image, 4 model input), byte 16
  // a features frame's boundary.
  // Chromium only: the frames are read from the DevTools protocol's WebSocket events, which
  // WebDriver BiDi (Firefox's driver) does not report. The floor is the client's code, the same
  // in every engine.
  if (ENGINE === "chromium") await onPage(async (page) => {
    const sent = [];
    page.on("websocket", (ws) => ws.on("framesent", ({ payload }) => typeof payload !== "string" && sent.push(Buffer.from(payload))));
    await page.exposeFunction("setLink", (mode) => link.set(mode));
    await page.goto(`${pageUrl}&privacy_floor=block5`);
    await ready(page);
    const out = await page.evaluate(async (samples) => {
      const c = window.splitClient;
      // Every classification below must reach the wire to be captured: auto codes block5 as the
      // explicit block5 request does (s14), so the edge's cache would answer the repeats.
      await c.setCacheEntries(0);
      const images = await Promise.all(samples.map(async (s) => new Uint8Array(await (await fetch(`samples/${s}.png`)).arrayBuffer())));
      const refused = async (split) => {
        try { await c.classify(images[0], split); return null; } catch (e) { return e.code; }
      };
      const codes = { cloud: await refused("cloud"), block3: await refused("block3"), block5: await refused("block5") };
      // Noise on the features that leave: a small scale keeps the answer; a bad one is refused.
      const noisy = await c.classify(images[0], "block5", { noise: "gauss:0.02", codec: "q8" });
      let badNoise = null;
      try { await c.classify(images[0], "block5", { noise: "gauss:9" }); } catch (e) { badNoise = e.code; }
      Object.assign(codes, { noisyTop1: noisy.top[0].class, noisyMode: noisy.mode, badNoise });
      const auto = [];
      // Two photos with the link up; the third, which the server never saw (none of it is in
      // the edge's cache of answers), during the outage.
      for (const image of images.slice(0, 2)) auto.push((await c.classify(image, "auto")).placement);
      for (let i = 0; i < 600 && !(await c.weightsState()).light; i++) await new Promise((f) => setTimeout(f, 100));
      await window.setLink("reset");
      const r = await c.classify(images[2], "auto");
      await window.setLink("up");
      return { codes, auto, outage: { quality: r.quality, resumable: r.resumable ?? false, split: r.split, id: r.id } };
    }, SAMPLES);
    console.log("outage: privacy floor", JSON.stringify(out));
    const { noisyTop1, ...codes } = out.codes;
    assert.deepEqual(codes, { cloud: "privacy_floor", block3: "privacy_floor", block5: null, noisyMode: "split", badNoise: "bad_option" },
      "splits before the floor are refused; noise is taken, a bad one refused");
    assert.ok(noisyTop1 >= 281 && noisyTop1 <= 285, `with a little noise chelsea is still a cat: ${noisyTop1}`);
    assert.ok(out.auto.every((p) => p.mode !== "cloud_only"), "auto never uploads the photo");
    assert.ok(out.outage.resumable && out.outage.quality === "reduced", "an outage answer is still kept");
    await finished(page, [out.outage.id]);
    const kinds = sent.map((f) => ({ kind: f[6], boundary: f[6] === 1 ? f[16] : null }));
    const floor = 7; // input 0, stem 1, block0 2, ... block5 7
    assert.ok(kinds.length >= 5, `frames were captured: ${kinds.length}`); // block5, noisy, two auto, the backlog
    assert.ok(kinds.every((k) => k.kind !== 2 && k.kind !== 4), "no photo was sent");
    assert.ok(kinds.every((k) => k.kind !== 1 || k.boundary >= floor),
      `no features before block5 were sent: ${JSON.stringify(kinds.filter((k) => k.kind === 1))}`);
    console.log(`outage: privacy floor: ${kinds.length} frames sent, none an image, features at boundaries ${[...new Set(kinds.filter((k) => k.kind === 1).map((k) => k.boundary))]}`);
  });
  // `privacy_floor: "default"` is the measured floor (head, docs/privacy.md): block15 is
  // refused, naming it; head is taken.
  await onPage(async (page) => {
    await page.goto(`${pageUrl.split("?")[0]}?weights=block5&privacy_floor=default`);
    await ready(page);
    const out = await page.evaluate(async () => {
      const c = window.splitClient;
      const image = new Uint8Array(await (await fetch("samples/chelsea.png")).arrayBuffer());
      let refused = null;
      try { await c.classify(image, "block15"); } catch (e) { refused = { code: e.code, message: e.message }; }
      const taken = await c.classify(image, "head");
      return { refused, taken: { mode: taken.mode, split: taken.split, top1: taken.top[0].class } };
    });
    console.log("outage: default privacy floor", JSON.stringify(out));
    assert.equal(out.refused?.code, "privacy_floor", "block15 is before the default floor");
    assert.match(out.refused.message, /privacy floor is head/, "the refusal names the measured floor");
    assert.deepEqual([out.taken.mode, out.taken.split], ["split", "head"], "a split at the floor is taken");
  });
  // `lightInput: 128` (the page's `?light_input=128`): the light model's answers run on a
  // 128×128 copy of the photo: a progressive request's first answer and an outage's answer say
  // so and are still finished by the server; a size out of range is refused.
  await onPage(async (page) => {
    await page.exposeFunction("setLink", (mode) => link.set(mode));
    await page.goto(`${pageUrl}&light_input=128`);
    await ready(page);
    const out = await page.evaluate(async () => {
      const c = window.splitClient;
      await c.setCacheEntries(0);
      const image = async (s) => new Uint8Array(await (await fetch(`samples/${s}.png`)).arrayBuffer());
      await c.classify(await image("chelsea"), "auto"); // the light model downloads after it
      for (let i = 0; i < 600 && !(await c.weightsState()).light; i++) await new Promise((f) => setTimeout(f, 100));
      const id = "small-progressive";
      const { released } = await window.holdLink(id, 20_000);
      const r = await c.classify(await image("coffee"), "block5", { id, progressive: true });
      await released;
      const updates = window.splitUpdates.filter((u) => u.id === id)
        .map((u) => ({ version: u.version, quality: u.quality, inputSize: u.inputSize ?? null }));
      await window.setLink("reset");
      const outage = await c.classify(await image("camera"), "auto");
      await window.setLink("up");
      const { SplitClient } = await import("/split-client.js");
      const refused = async (lightInput) => {
        try { (await SplitClient.create({ weights: "none", worker: false, lightInput })).close(); return null; } catch (e) { return e.code; }
      };
      return { progressive: { version: r.version, quality: r.quality, updates },
               outage: { id: outage.id, quality: outage.quality, inputSize: outage.inputSize, resumable: outage.resumable ?? false },
               refused: [await refused(500), await refused(31), await refused(12.5), await refused(128)] };
    });
    console.log("outage: light input 128", JSON.stringify(out));
    assert.deepEqual(out.progressive.updates, [{ version: 1, quality: "reduced", inputSize: 128 }, { version: 2, quality: "full", inputSize: null }],
      "the first answer ran on 128×128, the server's replaced it");
    assert.deepEqual([out.progressive.version, out.progressive.quality], [2, "full"]);
    assert.deepEqual([out.outage.quality, out.outage.inputSize, out.outage.resumable], ["reduced", 128, true],
      `an outage's answer ran on 128×128 and its features wait for the server: ${JSON.stringify(out.outage)}`);
    await finished(page, [out.outage.id]);
    assert.deepEqual(out.refused, ["bad_option", "bad_option", "bad_option", null], "a light input out of range is refused");
  });
  // The client never hangs: a WebSocket handshake the link holds fails with "timeout" within
  // the connect deadline (and does not wedge the connection: the next attempt connects), and
  // a worker that died fails its calls, first with "timeout", then at once with "worker", and
  // a panic in the wasm module is reported with its message and the worker replaced.
  await onPage(async (page) => {
    await page.exposeFunction("setLink", (mode) => link.set(mode));
    await page.goto(`${pageUrl}`);
    await ready(page);
    const out = await page.evaluate(async () => {
      const c = window.splitClient;
      await c.connect();
      await window.setLink("reset"); // the open socket goes; new ones are refused ...
      // The worker learns of it when the socket's close arrives: until then `connect` finds
      // the old socket open and returns at once (seen on a loaded machine).
      for (const cut = performance.now(); c.connectionState.state === "open" && performance.now() - cut < 5_000;) {
        await new Promise((f) => setTimeout(f, 20));
      }
      const seenClosed = c.connectionState.state;
      await window.setLink("blackhole"); // ... then held: the handshake never completes
      let t = performance.now();
      let stalled = null;
      try { await c.connect(); } catch (e) { stalled = e.code; }
      const stalledMs = performance.now() - t;
      await window.setLink("up");
      t = performance.now();
      let reconnected = false;
      while (!reconnected && performance.now() - t < 20_000) {
        try { await c.connect(); reconnected = true; } catch { await new Promise((f) => setTimeout(f, 250)); }
      }
      // A second client whose worker is killed under it (as a crash or the browser would).
      const { SplitClient } = await import("/split-client.js");
      const doomed = await SplitClient.create({ weights: "none", workerTimeoutMs: 3_000 });
      doomed.worker.terminate();
      const image = new Uint8Array(await (await fetch("samples/chelsea.png")).arrayBuffer());
      t = performance.now();
      let first = null;
      try { await doomed.classify(image, "cloud"); } catch (e) { first = e.code; }
      const firstMs = performance.now() - t;
      // The liveness ping (sent when the call timed out) gets no answer within its 5 s.
      await new Promise((f) => setTimeout(f, 9_000));
      let later = null;
      t = performance.now();
      try { await doomed.weightsState(); } catch (e) { later = e.code; }
      const laterMs = performance.now() - t;
      // A third whose wasm module panics, as a bug would: the call fails with the panic's
      // message, the trapped worker is replaced, and the next call is answered by the new one.
      const panicky = await SplitClient.create({ weights: "none" });
      let trap = null;
      try { await panicky.call("forcePanic", "forced by outage.mjs"); } catch (e) { trap = { code: e.code, message: e.message }; }
      const after = await panicky.classify(image, "cloud");
      const restarts = panicky.restarts;
      panicky.terminate();
      return { seenClosed, stalled, stalledMs, reconnected, first, firstMs, later, laterMs, trap, afterTop1: after.top[0].class, restarts };
    });
    console.log("outage: never hangs", JSON.stringify(out));
    assert.notEqual(out.seenClosed, "open", "the reset reached the client within 5 s");
    assert.equal(out.stalled, "timeout", "a held handshake fails with timeout");
    assert.ok(out.stalledMs < 15_000, `within the connect deadline: ${out.stalledMs} ms`);
    assert.ok(out.reconnected, "the connection is not wedged: the next attempt connects");
    assert.equal(out.first, "timeout", "a call into a dead worker fails with timeout");
    assert.ok(out.firstMs < 10_000, `within the worker deadline: ${out.firstMs} ms`);
    assert.equal(out.later, "worker", "once the worker is known dead, calls fail with worker");
    assert.ok(out.laterMs < 1_000, "and at once");
    assert.equal(out.trap?.code, "wasm_trap", "a panic in the module fails the call with wasm_trap");
    assert.match(out.trap.message, /forced by outage\.mjs/, "with the panic's message");
    assert.match(out.trap.message, /panic\.rs:\d+/, "and where it happened");
    assert.equal(out.restarts, 1, "the trapped worker was replaced once");
    assert.equal(out.afterTop1, 282, "the replacement answers");
  });
  console.log("outage: passed");
} finally {
  link.close();
}
