// An app built the way apps are built: the client package packed by `npm pack`, installed from
// its tarball into a copy of `web/examples/bundled/` with esbuild, bundled by `npm run build`,
// and the built app served from a sub-path of the server (`/examples/bundled/dist/`), its
// package files from a folder of the app's own. In Chromium, Firefox and WebKit it classifies
// chelsea (in the client's worker, with the best build the engine offers).
// Run by `cargo xtask test` with SPLIT_URL set to the server.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ENGINES, withEngine } from "./engine.mjs";

const url = process.env.SPLIT_URL;
assert.ok(url, "set SPLIT_URL to the server's base URL (cargo xtask test does)");
const engines = (process.env.SPLIT_ENGINES ?? ENGINES.join(",")).split(",");
const web = new URL("..", import.meta.url).pathname;
const example = join(web, "examples/bundled");
const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });

const work = mkdtempSync(join(tmpdir(), "split-bundled-"));
try {
  // The package as a registry would hand it out.
  const [packed] = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", work], web));
  const tarball = join(work, packed.filename);
  // The app, as its author has it: installs the client from the tarball, and esbuild.
  const app = join(work, "app");
  for (const f of ["package.json", "index.html", "build.mjs", "src"]) cpSync(join(example, f), join(app, f), { recursive: true });
  npm(["install", "--no-audit", "--no-fund", tarball], app);
  npm(["run", "build"], app);
  const bundle = readFileSync(join(app, "dist/app.js"), "utf8");
  assert.match(bundle, /(class SplitClient|SplitClient = class)\b/, "the client is in the app's bundle");
  assert.doesNotMatch(bundle, /from\s*["']split-inference-client["']/, "nothing left for the browser to resolve");
  assert.ok(existsSync(join(app, "dist/split-inference-client/client/worker.js")), "the package's worker beside the bundle");
  // Served by the server from a sub-path (its `examples/` folder).
  const served = join(example, "dist");
  rmSync(served, { recursive: true, force: true });
  cpSync(join(app, "dist"), served, { recursive: true });
  for (const engine of engines) {
    const out = await withEngine(engine, async (browser) => {
      const page = await browser.newPage();
      await page.goto(new URL("examples/bundled/dist/index.html", url).href);
      await page.waitForFunction(() => document.body.dataset.top1 || document.body.dataset.failed, null, { timeout: 300_000 });
      return page.evaluate(() => ({ ...document.body.dataset, text: document.querySelector("#out").textContent }));
    });
    console.log(`bundled: ${engine}: ${out.text} (the ${out.build} build, in a worker: ${out.worker})`);
    assert.equal(out.top1, "282", `${engine}: the bundled app classifies chelsea as a tiger cat: ${out.text}`);
    assert.equal(out.worker, "true", `${engine}: the client runs in its worker`);
  }
  console.log(`bundled: passed (${packed.filename}: ${(packed.size / 1e6).toFixed(1)} MB packed, ` +
    `${(packed.unpackedSize / 1e6).toFixed(1)} MB unpacked; the app's bundle ${(bundle.length / 1e3).toFixed(0)} kB)`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
