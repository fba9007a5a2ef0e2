// The engines the client is tested in, behind the page methods the tests use (Playwright's, so
// that a check reads the same in every engine): Chromium through Playwright as in the other
// tests; Debian's Firefox ESR, driven headless by puppeteer-core over WebDriver BiDi
// (Playwright needs a Firefox of its own build, which cannot be downloaded here); WebKitGTK
// over WebDriver on an Xvfb display (webkit.mjs).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { GPU_ARGS, launchChromium } from "./browser.mjs";
import { launchWebKit } from "./webkit.mjs";

/** Where Firefox is (overridable for other machines; Chromium: browser.mjs). */
const FIREFOX = process.env.FIREFOX ?? "/usr/bin/firefox-esr";

/** Firefox preferences for a closed network: no update checks, telemetry, safe-browsing lists
 * or captive-portal probes (each would dial a host this machine cannot reach). Nothing here
 * turns a web feature on or off: the tests see what a user of this Firefox gets. */
const FIREFOX_PREFS = {
  "app.update.enabled": false,
  "browser.safebrowsing.malware.enabled": false,
  "browser.safebrowsing.phishing.enabled": false,
  "browser.safebrowsing.downloads.enabled": false,
  "datareporting.policy.dataSubmissionEnabled": false,
  "network.captive-portal-service.enabled": false,
  "network.connectivity-service.enabled": false,
  "toolkit.telemetry.enabled": false,
};

/** The engines `engines.mjs` knows, by the name tests and output use. */
export const ENGINES = ["chromium", "firefox", "webkit"];

/**
 * Run `body(browser)` with a fresh headless `engine` (one of `ENGINES`) and profile;
 * `browser.newPage()` gives a Playwright page, or elsewhere one with the same methods for what
 * the tests call. Always cleans up.
 */
export async function withEngine(engine, body) {
  const profile = mkdtempSync(join(tmpdir(), `split-${engine}-`));
  let close;
  let newPage;
  if (engine === "firefox") {
    const browser = await puppeteer.launch({
      browser: "firefox", executablePath: FIREFOX, headless: true, userDataDir: profile,
      extraPrefsFirefox: FIREFOX_PREFS, defaultViewport: { width: 1280, height: 800 },
    });
    newPage = async () => new PuppeteerPage(await browser.newPage());
    close = () => browser.close();
  } else if (engine === "chromium") {
    // The CPU fallback, as the other engines run here: SwiftShader's WebGPU is tested by e2e.mjs.
    const context = await launchChromium(profile, GPU_ARGS.cpu);
    newPage = () => context.newPage();
    close = () => context.close();
  } else if (engine === "webkit") {
    const browser = await launchWebKit();
    newPage = () => browser.newPage();
    close = () => browser.close();
  } else {
    throw new Error(`unknown engine ${engine}; use ${ENGINES.join(", ")}`);
  }
  try {
    return await body({ engine, newPage });
  } finally {
    await close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  }
}

/** A puppeteer page (Firefox over WebDriver BiDi) with the Playwright methods the tests call,
 * so that one test body runs in every engine. */
class PuppeteerPage {
  constructor(page) {
    this.page = page;
  }

  on(event, f) { this.page.on(event, f); }
  exposeFunction(name, f) { return this.page.exposeFunction(name, f); }
  addInitScript(fn) { return this.page.evaluateOnNewDocument(fn); }
  goto(url) { return this.page.goto(url); }
  reload() { return this.page.reload(); }
  evaluate(fn, arg) { return this.page.evaluate(fn, arg); }
  waitForFunction(fn, arg, { timeout = 30_000 } = {}) { return this.page.waitForFunction(fn, { timeout, polling: 100 }, arg); }
  /** Click `selector` as Playwright does: once it holds still (the same box in two animation
   * frames) and is what lies under its centre. Puppeteer clicks where the element was when it
   * asked, a round trip earlier, so a layout that moves in between clicks something else. */
  async click(selector) {
    const element = await this.page.waitForSelector(selector);
    for (let tries = 0; ; tries++) {
      const point = await element.evaluate(async (el) => {
        el.scrollIntoView({ block: "nearest", inline: "nearest" });
        const frame = () => new Promise((f) => requestAnimationFrame(f));
        const box = () => {
          const r = el.getBoundingClientRect();
          return [r.left, r.top, r.width, r.height];
        };
        await frame();
        const before = box();
        await frame();
        const [x, y, w, h] = box();
        if (before.join() !== [x, y, w, h].join()) return null;
        const hit = document.elementFromPoint(x + w / 2, y + h / 2);
        return hit && el.contains(hit) ? { x: x + w / 2, y: y + h / 2 } : null;
      });
      if (point) return this.page.mouse.click(point.x, point.y);
      if (tries === 100) throw new Error(`${selector} did not hold still under the pointer for 100 tries`);
      await new Promise((f) => setTimeout(f, 50));
    }
  }
  async setInputFiles(selector, path) { await (await this.page.$(selector)).uploadFile(path); }
  selectOption(selector, value) { return this.page.select(selector, value); }
  /** The viewport; puppeteer 24.43 sends a screen orientation beside it, which Firefox 140
   * does not know (the viewport itself is set): that refusal alone is let pass. */
  async setViewportSize(size) {
    try {
      await this.page.setViewport(size);
    } catch (e) {
      if (!/setScreenOrientationOverride/.test(e.message)) throw e;
    }
  }
  screenshot(options) { return this.page.screenshot(options); }
  close() { return this.page.close(); }
}

/** burn's whole network in one CPU build of the edge module, in `engine` (Chromium by
 * default), on the page at `url`: the page's own edge profile (`profileEdge(repeats)`,
 * median), and the build the page loaded. */
export async function edgeProfileMs(url, build, repeats, engine = "chromium") {
  return withEngine(engine, async (browser) => {
    const page = await browser.newPage();
    await page.goto(new URL(`index.html?backend=cpu&wasm=${build}&weights=all`, url).href);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: 300_000 });
    return page.evaluate(async (repeats) => {
      const p = await window.splitClient.profileEdge(repeats);
      return { ms: p.ms[p.ms.length - 1], build: window.splitClient.wasmBuild };
    }, repeats);
  });
}
