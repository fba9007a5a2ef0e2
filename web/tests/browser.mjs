// Launching Debian's Chromium headless the way this machine needs it, for tests and benchmarks.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// Without the background-networking flags Chromium keeps dialling Google's hosts, which a
// closed network refuses; QUIC is off so every request is plain HTTP over loopback.
const BASE_ARGS = ["--headless", "--no-sandbox", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** WebGPU through SwiftShader, or no GPU at all (the CPU fallback). */
export const GPU_ARGS = { webgpu: ["--enable-unsafe-webgpu"], cpu: ["--disable-gpu"] };

/** Run `body(page)` in a fresh profile with `args`; always cleans up. */
export async function withPage(args, body) {
  const profile = mkdtempSync(join(tmpdir(), "split-browser-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: [...BASE_ARGS, ...args] });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    return await body(page);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
