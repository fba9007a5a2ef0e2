// How much a device group gains over its fastest single device, on this machine. Not a test:
// `./run.sh demo` (or any server with --rate-limit 0 --cache-entries 0), then
//
//   SPLIT_URL=http://127.0.0.1:8080/ [AGENT_BIN=…/device-agent] [PHOTOS=30] [FRAMES=24] node tests/group-bench.mjs
//
// Devices: three Chromium instances on different wasm builds (so their speeds differ the way
// devices' do: A the threaded relaxed-SIMD build, B the single-threaded relaxed one, C plain
// SIMD), and with AGENT_BIN the native agent. For 1, 2 and 3 browsers (then + the agent):
// task-split images/s against the fastest member alone, pipeline stream frames/s (the
// planner's throughput chain, two more frames in flight than stages) against the fastest member
// alone, single-image pipeline latency P50/P95, and what the planner predicted. Every device
// shares this machine's cores; docs/multi-device.md says what that limits. With LINK (below)
// every member reaches the others through its own emulated link.
import { execFileSync, spawn } from "node:child_process";
import { GPU_ARGS, browserPids, startNetem, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const PHOTOS = Number(process.env.PHOTOS ?? 30);
const FRAMES = Number(process.env.FRAMES ?? 24);
const TIMEOUT_MS = 600_000;
const BUILDS = [["A", "cpu-threads"], ["B", "cpu-relaxed"], ["C", "cpu"]];
/** Browsers to open (1 to 3). */
const BROWSERS = Number(process.env.BROWSERS ?? 3);
/** `PIN=A:0,agent:1`: give devices cores of their own (taskset), so that two of them compute
 * in parallel as two real devices would instead of sharing both cores. */
const PIN = Object.fromEntries((process.env.PIN ?? "").split(",").filter(Boolean).map((p) => p.split(":")));
/** `LINK=fast-wifi` (a profile of lab/src/netem.rs): every member reaches the server through
 * its own emulated link and direct channels are off, so every hop crosses two emulated links
 * (the sender's up, the receiver's down). The server needs `--allow-origin '*'`: the pages'
 * group sockets then come through the emulator's address. */
const LINK = process.env.LINK ?? null;
const server = new URL(url);
const groupUrl = async () => {
  if (!LINK) return { url: undefined, stop: () => {} };
  const netem = await startNetem(`${server.hostname}:${server.port}`, LINK);
  return { url: `ws://${netem.addr}/group`, stop: () => netem.child.kill() };
};
const pin = (pids, core) => {
  for (const pid of pids) {
    try { execFileSync("taskset", ["-a", "-p", "-c", String(core), String(pid)], { stdio: "ignore" }); } catch { /* exited */ }
  }
};

async function open(page, name, build, code) {
  await page.goto(new URL(`?backend=cpu&weights=all&wasm=${build}`, url).href);
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: TIMEOUT_MS });
  const link = await groupUrl();
  links.push(link);
  return page.evaluate(async ({ name, code, url, p2p }) => {
    await window.splitClient.setCacheEntries(0);
    window.splitGroup = await window.splitClient.joinGroup({ name, id: name, code, url, p2p });
    window.photos = [];
    for (const n of ["chelsea", "coffee", "camera"]) window.photos.push(new Uint8Array(await (await fetch(`samples/${n}.png`)).arrayBuffer()));
    return { code: window.splitGroup.code, you: window.splitGroup.you };
  }, { name, code, url: link.url, p2p: !LINK });
}

/** The emulated links started, stopped at the end. */
const links = [];

async function startAgent(code) {
  const taskset = PIN.agent != null ? ["taskset", "-c", PIN.agent] : [];
  const [cmd, ...args] = [...taskset, process.env.AGENT_BIN, "--group", code];
  const link = await groupUrl();
  links.push(link);
  const server = link.url ?? new URL("group", url.replace(/^http/, "ws")).href;
  const child = spawn(cmd, [...args, "--server", server, "--id", "agent"],
    { stdio: ["ignore", "pipe", "ignore"] });
  return new Promise((resolve) => child.stdout.on("data", (d) => { if (/in group/.test(d.toString())) resolve(child); }));
}

const pct = (v, p) => v.slice().sort((x, y) => x - y)[Math.min(v.length - 1, Math.floor(p * v.length))];

/** Task split over `peers`: images per second. */
const batch = (a, peers) => a.evaluate(async ({ peers, n }) => {
  const images = Array.from({ length: n }, (_, i) => window.photos[i % 3]);
  const t = performance.now();
  const r = await window.splitGroup.classifyAll(images, { peers });
  const counts = {};
  for (const x of r) counts[x.peer] = (counts[x.peer] ?? 0) + 1;
  return { perS: n / ((performance.now() - t) / 1000), counts };
}, { peers, n: PHOTOS });

/** A stream through the planner's throughput chain over `peers`, `inFlight` frames at once. */
const stream = (a, peers) => a.evaluate(async ({ peers, n }) => {
  const g = window.splitGroup;
  const plan = await g.plan("throughput", peers);
  // Enough frames in flight to keep every stage and hop busy.
  const inFlight = plan.stages.length + 2;
  let next = 0;
  const t = performance.now();
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < n) {
      const i = next++;
      await g.classify(window.photos[i % 3], { goal: "throughput", peers });
    }
  }));
  const fps = n / ((performance.now() - t) / 1000);
  return { fps, predictedFps: 1000 / plan.periodMs, stages: plan.stages.map((s) => `${s.peer}:${s.from}→${s.to}`).join(" "),
           bytes: plan.stages.slice(0, -1).map((s) => Math.round(s.sendBytes)).join("/") };
}, { peers, n: FRAMES });

/** Single images through the planner's latency chain: P50 / P95 ms. */
const latency = (a, peers) => a.evaluate(async ({ peers }) => {
  const ms = [];
  let predicted = 0;
  for (let i = 0; i < 12; i++) {
    const r = await window.splitGroup.classify(window.photos[i % 3], { goal: "latency", peers });
    ms.push(r.totalMs);
    predicted = r.predicted.latencyMs;
  }
  return { ms, predicted };
}, { peers });

await withPage(GPU_ARGS.cpu, (pa) => withPage(GPU_ARGS.cpu, (pb) => withPage(GPU_ARGS.cpu, async (pc) => {
  const pages = [pa, pb, pc].slice(0, BROWSERS);
  pages.forEach((p, i) => { if (PIN[BUILDS[i][0]] != null) pin(browserPids(p.splitProfile), PIN[BUILDS[i][0]]); });
  const first = await open(pa, ...BUILDS[0]);
  const peers = [first.you];
  for (let i = 1; i < pages.length; i++) peers.push((await open(pages[i], ...BUILDS[i], first.code)).you);
  // Processes a page started while loading (its worker's renderer already existed) pinned too.
  pages.forEach((p, i) => { if (PIN[BUILDS[i][0]] != null) pin(browserPids(p.splitProfile), PIN[BUILDS[i][0]]); });
  const agent = process.env.AGENT_BIN ? await startAgent(first.code) : null;
  await pa.waitForFunction((n) => window.splitGroup.members.length === n, pages.length + (agent ? 1 : 0));
  const members = await pa.evaluate(() => window.splitGroup.members);
  console.log("| device | backend | measured ms / image |\n|---|---|---|");
  for (const m of members) console.log(`| ${m.name} (peer ${m.peer}) | ${m.backend} | ${m.msPerImage.toFixed(1)} |`);
  const sets = [[peers[0]], peers.slice(0, 2), peers].slice(0, pages.length);
  if (agent) sets.push(members.map((m) => m.peer));
  // Each member alone, one image after another: its images/s is also the frames/s it would
  // stream at by itself. The baseline of a set, for batches and streams, is its fastest member's.
  const alone = {};
  for (const m of members) await batch(pa, [m.peer]); // warm every member up first
  for (const m of members) alone[m.peer] = (await batch(pa, [m.peer])).perS;
  console.log("\n| device alone | img/s |\n|---|---|");
  for (const m of members) console.log(`| ${m.name} | ${alone[m.peer].toFixed(1)} |`);
  console.log("\n| devices | task split img/s | × fastest alone | counts | stream fps | × fastest alone | predicted fps | chain (peer:from→to) | bytes per hop | latency P50 / P95 ms | predicted ms |");
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const set of sets) {
    const best = Math.max(...set.map((p) => alone[p]));
    const b = await batch(pa, set);
    const s = await stream(pa, set);
    const l = await latency(pa, set);
    const names = set.map((p) => members.find((m) => m.peer === p).name).join(" + ");
    console.log(`| ${names} | ${b.perS.toFixed(1)} | ${(b.perS / best).toFixed(2)} | ${JSON.stringify(b.counts)} | ${s.fps.toFixed(1)} | ${(s.fps / best).toFixed(2)} | ${s.predictedFps.toFixed(1)} | ${s.stages} | ${s.bytes} | ${pct(l.ms, 0.5).toFixed(0)} / ${pct(l.ms, 0.95).toFixed(0)} | ${l.predicted.toFixed(0)} |`);
  }
  agent?.kill();
  for (const l of links) l.stop();
})));
