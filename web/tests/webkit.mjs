// WebKitGTK (Debian's webkit2gtk-driver and its MiniBrowser) driven over W3C WebDriver, with
// the Playwright page methods the engine tests call. MiniBrowser has no headless mode, so it
// draws on an Xvfb display of its own. WebDriver's HTTP commands are few and plain; a client
// of a dozen lines each serves here instead of another package.
import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import net from "node:net";

const DRIVER = process.env.WEBKIT_DRIVER ?? "/usr/bin/WebKitWebDriver";
const MINIBROWSER = process.env.WEBKIT_BROWSER ?? "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser";
/** The longest a script may run in the page (an edge pass on a slow machine, a page load). */
const SCRIPT_TIMEOUT_MS = 300_000;

/** A free TCP port on loopback. */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

/** Start `bin args` and resolve once `ready()` says it serves (polled), or reject on exit. */
async function startProcess(bin, args, env, ready) {
  const child = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
  let stderr = "";
  child.stderr.on("data", (d) => { stderr += d; });
  const exited = new Promise((_, reject) => child.on("exit", (code) => reject(new Error(`${bin} exited (${code}): ${stderr.slice(-500)}`))));
  for (let i = 0; i < 100; i++) {
    if (await Promise.race([ready().catch(() => false), exited])) return child;
    await new Promise((f) => setTimeout(f, 100));
  }
  child.kill();
  throw new Error(`${bin} did not start: ${stderr.slice(-500)}`);
}

/** WebKitGTK on an Xvfb display of its own: `newPage()` opens a browser window (its own
 * WebKitWebDriver, which holds one session at a time, and MiniBrowser); `close()` ends them. */
export async function launchWebKit() {
  let display = 99;
  while (existsSync(`/tmp/.X11-unix/X${display}`)) display++;
  const xvfb = await startProcess("Xvfb", [`:${display}`, "-screen", "0", "1280x1024x24", "-nolisten", "tcp"], {},
    async () => existsSync(`/tmp/.X11-unix/X${display}`));
  const pages = [];
  return {
    async newPage() {
      const port = await freePort();
      const base = `http://127.0.0.1:${port}`;
      const driver = await startProcess(DRIVER, [`--port=${port}`], { DISPLAY: `:${display}` },
        async () => (await fetch(`${base}/status`)).ok);
      try {
        const created = await command(base, "POST", "/session", {
          capabilities: { alwaysMatch: { "webkitgtk:browserOptions": { binary: MINIBROWSER, args: ["--automation"] } } },
        });
        const page = new WebDriverPage(`${base}/session/${created.sessionId}`, driver);
        pages.push(page);
        await page.send("POST", "/timeouts", { script: SCRIPT_TIMEOUT_MS, pageLoad: SCRIPT_TIMEOUT_MS });
        return page;
      } catch (e) {
        driver.kill();
        throw e;
      }
    },
    async close() {
      for (const p of pages) await p.close().catch(() => {});
      xvfb.kill();
    },
  };
}

/** One WebDriver command; its `value`, or its error as an exception. */
async function command(base, method, path, body) {
  const r = await fetch(`${base}${path}`, {
    method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await r.json();
  if (!r.ok || json.value?.error) throw new Error(`WebDriver ${method} ${path}: ${json.value?.error}: ${json.value?.message}`);
  return json.value;
}

/** A WebDriver session as a page with the Playwright methods the tests call. WebDriver
 * classic reports no page events: `on` keeps nothing (a failure shows in the page's state). */
class WebDriverPage {
  constructor(session, driver) {
    this.session = session;
    this.driver = driver;
  }

  send(method, path, body) {
    return command(this.session, method, path, body);
  }

  on() {}
  goto(url) { return this.send("POST", "/url", { url }); }
  reload() { return this.send("POST", "/refresh", {}); }
  /** The WebDriver id of the first element `selector` matches. */
  async element(selector) {
    const found = await this.send("POST", "/element", { using: "css selector", value: selector });
    return Object.values(found)[0];
  }
  async click(selector) { await this.send("POST", `/element/${await this.element(selector)}/click`, {}); }
  /** A file input given a file by its path (WebDriver types the path into it). */
  async setInputFiles(selector, path) { await this.send("POST", `/element/${await this.element(selector)}/value`, { text: path }); }
  selectOption(selector, value) {
    return this.evaluate(([selector, value]) => {
      const select = document.querySelector(selector);
      select.value = value;
      select.dispatchEvent(new Event("change", { bubbles: true }));
    }, [selector, value]);
  }
  setViewportSize({ width, height }) { return this.send("POST", "/window/rect", { width, height }); }
  async screenshot({ path }) {
    const png = await this.send("GET", "/screenshot");
    writeFileSync(path, Buffer.from(png, "base64"));
  }

  /** `fn(arg)` in the page, awaited there; its JSON-able result, or its error thrown here. */
  async evaluate(fn, arg) {
    const script = `const done = arguments[arguments.length - 1];
      Promise.resolve().then(() => (${fn.toString()})(arguments[0]))
        .then((v) => done({ value: v === undefined ? null : v }), (e) => done({ error: String(e?.stack ?? e) }));`;
    const out = await this.send("POST", "/execute/async", { script, args: [arg ?? null] });
    if (out?.error) throw new Error(`in the page: ${out.error}`);
    return out?.value;
  }

  /** Poll `fn(arg)` until it is truthy, every 100 ms, for at most `timeout` ms. */
  async waitForFunction(fn, arg, { timeout = 30_000 } = {}) {
    const until = Date.now() + timeout;
    for (;;) {
      const v = await this.evaluate(fn, arg);
      if (v) return v;
      if (Date.now() > until) throw new Error(`waitForFunction: not true within ${timeout} ms: ${fn.toString().slice(0, 200)}`);
      await new Promise((f) => setTimeout(f, 100));
    }
  }

  async close() {
    try {
      await this.send("DELETE", "");
    } finally {
      this.driver.kill();
    }
  }
}
