// Launching Debian's Chromium headless the way this machine needs it, for tests and benchmarks.
import { spawn } from "node:child_process";
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Without the background-networking flags Chromium keeps dialling Google's hosts, which a
// closed network refuses; QUIC is off so every request is plain HTTP over loopback.
export const BASE_ARGS = ["--headless", "--no-sandbox", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** WebGPU through SwiftShader, or no GPU at all (the CPU fallback). */
export const GPU_ARGS = { webgpu: ["--enable-unsafe-webgpu"], cpu: ["--disable-gpu"] };

/** How many times a Chromium that dies while starting is started again. */
const LAUNCH_TRIES = 3;

/** Debian's Chromium with `args`, in the profile directory `profile`. Now and then it crashes
 * before its first page (a SIGSEGV at start, seen once in many CI runs, with nothing of this
 * project loaded yet); such a start is tried again, with a line saying so, and the last error
 * is thrown. */
export async function launchChromium(profile, args, options = {}) {
  for (let tried = 1; ; tried++) {
    try {
      return await chromium.launchPersistentContext(profile, {
        executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true,
        args: [...BASE_ARGS, ...args], ...options });
    } catch (e) {
      if (tried >= LAUNCH_TRIES) throw e;
      console.log(`chromium died while starting (try ${tried} of ${LAUNCH_TRIES}): ${String(e.message).split("\n")[0]}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** Run `body(page)` in a fresh profile with `args` (`options`: more of Playwright's context
 * options); always cleans up. */
export async function withPage(args, body, options = {}) {
  const profile = mkdtempSync(join(tmpdir(), "split-browser-"));
  const context = await launchChromium(profile, args, options);
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    // Which browser this is, for tools that look at its processes (`browserPids`).
    page.splitProfile = profile;
    return await body(page);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** Every process of the browser whose profile directory is `profile` (the browser process,
 * named by its --user-data-dir, and all below it). */
export function browserPids(profile) {
  const parent = new Map();
  const roots = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      parent.set(Number(pid), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(`--user-data-dir=${profile}`)) roots.push(Number(pid));
    } catch { /* exited meanwhile */ }
  }
  const below = (pid) => {
    for (let p = pid; p; p = parent.get(p)) if (roots.includes(p)) return true;
    return false;
  };
  return [...parent.keys()].filter(below);
}

/** CPU ms (user + system) used so far by the processes below this one (the browsers it
 * launched), from /proc; processes named in `exclude` (e.g. the link emulator) are left out. */
export function browserCpuMs(exclude = []) {
  const procs = new Map();
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.set(Number(pid), { comm, ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12])) * 10 });
    } catch { /* exited meanwhile */ }
  }
  const isBelow = (pid) => {
    for (let p = procs.get(pid)?.ppid; p; p = procs.get(p)?.ppid) if (p === process.pid) return true;
    return false;
  };
  let total = 0;
  for (const [pid, p] of procs) if (!exclude.includes(p.comm) && isBelow(pid)) total += p.ms;
  return total;
}

/** Start the link emulator (lab/src/bin/netem.rs, `$NETEM_BIN` or the cargo target's) in front
 * of `upstream` (host:port) for a profile or trace, its time axis scaled by `scale`; resolves
 * once it listens to `{ child, addr, clock }`, where `clock` resolves to the Unix ms at which
 * the first connection started the link's clock. Each connection through it gets its own link. */
export function startNetem(upstream, link, scale = 1) {
  const env = process.env;
  const bin = env.NETEM_BIN ?? `${env.CARGO_TARGET_DIR ?? `${env.HOME}/.cache/splitinfer/target`}/debug/netem`;
  const child = spawn(bin, ["--upstream", upstream, "--link", link, "--scale", String(scale)],
    { stdio: ["ignore", "pipe", "inherit"] });
  let clockStarted;
  const clock = new Promise((resolve) => { clockStarted = resolve; });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => reject(new Error(`netem exited (${code})`)));
    child.stdout.on("data", (d) => {
      const text = d.toString();
      const listening = /listening on (\S+)/.exec(text);
      const started = /clock started at (\d+)/.exec(text);
      if (started) clockStarted(Number(started[1]));
      if (listening) resolve({ child, addr: listening[1], clock });
    });
  });
}
