// The client package and the model served from another origin than the page (issue 33, item
// 4), in Chromium, Firefox and WebKit (`SPLIT_ENGINES` to choose): a server of this test's own
// with `--allow-origin http://localhost:PORT` answers CORS for that origin. The page
// `examples/cross-origin.html`, opened as http://localhost:PORT/…, imports the package from
// http://127.0.0.1:PORT/ (another origin: another host name) and classifies at block5: the
// client's worker starts from a same-origin `blob:` module that imports the package, and the
// threaded builds say why they cannot start. The same page opened on the origin not listed
// is refused by the browser. Run by `cargo xtask test` with `SPLIT_SERVER_CMD` set.
import assert from "node:assert/strict";
import { ENGINES, withEngine } from "./engine.mjs";
import { freePort, startOwnServer } from "./own-server.mjs";

const engines = (process.env.SPLIT_ENGINES ?? ENGINES.join(",")).split(",");
const port = await freePort();
const server = await startOwnServer(port, ["--allow-origin", `http://localhost:${port}`]);
const page = (pageHost, packageHost) =>
  `http://${pageHost}:${port}/examples/cross-origin.html?server=${encodeURIComponent(`http://${packageHost}:${port}/`)}`;
const settled = (p) => p.waitForFunction(() => document.body.dataset.top1 || document.body.dataset.failed, null, { timeout: 120_000 });
const result = (p) => p.evaluate(() => ({ ...document.body.dataset }));

try {
  for (const engine of engines) {
    await withEngine(engine, async (browser) => {
      const allowed = await browser.newPage();
      await allowed.goto(page("localhost", "127.0.0.1"));
      await settled(allowed);
      const ok = await result(allowed);
      console.log(`cross-origin: ${engine}: a listed origin`, JSON.stringify(ok));
      assert.equal(ok.failed, undefined, `${engine}: the package from another origin works: ${ok.failed}`);
      assert.ok(ok.top1 >= 281 && ok.top1 <= 285, `${engine}: chelsea is a cat: ${ok.top1}`);
      assert.equal(ok.mode, "split", "split at block5 with the server");
      assert.ok(!ok.build.includes("threads"), `${engine}: no threaded build from another origin: ${ok.build}`);
      // WebKitGTK has no shared memory at all, which it says first.
      if (engine !== "webkit") assert.match(ok.threads, /another origin/, `${engine}: and says why: ${ok.threads}`);
      const refused = await browser.newPage();
      await refused.goto(page("127.0.0.1", "localhost"));
      await settled(refused);
      const no = await result(refused);
      console.log(`cross-origin: ${engine}: an origin not listed`, JSON.stringify(no));
      assert.ok(no.failed && !no.top1, `${engine}: the browser refuses the package to an origin not listed`);
    });
  }
  console.log(`cross-origin: passed (${engines.join(", ")})`);
} finally {
  await server.stop();
}
