// The browser client across a replica's shutdown behind the balancer: the replica holding the
// page's WebSocket gets SIGTERM while requests are in flight; it answers what it has, closes the
// session with 1012, and the client reconnects through the balancer and sends what was still
// unanswered. Every request must come back right, in a fixed mode (no local fallback to hide a
// lost one). `./run.sh test` runs this from the cluster check.
//
//   SPLIT_URL=http://127.0.0.1:PORT/ SPLIT_REPLICAS=pid@port,pid@port node tests/reconnect.mjs
import { withPage, GPU_ARGS } from "./browser.mjs";

const url = process.env.SPLIT_URL;
const replicas = (process.env.SPLIT_REPLICAS ?? "").split(",").filter(Boolean).map((r) => {
  const [pid, port] = r.split("@").map(Number);
  return { pid, port };
});
if (!url || replicas.length < 2) throw new Error("set SPLIT_URL and SPLIT_REPLICAS (two or more pid@port)");

/** Open WebSockets on a replica, from its /metrics. */
async function connections(port) {
  const page = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = page.split("\n").find((l) => l.startsWith("split_connections "));
  return Number(line?.split(" ")[1] ?? NaN);
}

const ROUNDS = 6;
const IN_FLIGHT = 4;
await withPage(GPU_ARGS.cpu, async (page) => {
  // A page of the server's origin without a client of its own (the demo's would open a
  // session too, since a client measures the link at start, perhaps on another replica).
  await page.goto(new URL("healthz", url).href);
  await page.evaluate(async () => {
    const { SplitClient } = await import("/split-client.js");
    window.client = await SplitClient.create({ backend: "cpu", worker: false, cacheEntries: 0 });
    window.chelsea = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
    window.results = [];
    // Rounds of requests in flight together. The client's cache is off and the replicas run
    // with `--cache-entries 0`, so every request is computed.
    window.round = async (n) => {
      const all = [];
      for (let i = 0; i < n; i++) all.push(window.client.classify(window.chelsea, "cloud"));
      for (const r of await Promise.allSettled(all)) {
        window.results.push(r.status === "fulfilled" ? r.value.top[0].class : `error: ${r.reason?.code} ${r.reason?.message}`);
      }
    };
  });
  await page.evaluate((n) => window.round(n), IN_FLIGHT);
  // The replica that holds the page's session.
  const counts = await Promise.all(replicas.map((r) => connections(r.port)));
  const holder = replicas[counts.findIndex((c) => c >= 1)];
  if (!holder) throw new Error(`no replica holds the page's session: ${counts}`);
  await page.evaluate(() => {
    window.firstSocket = window.client.connection.socket;
    window.states = [];
    window.client.connection.onStatus = (status) => window.states.push(status.state);
  });
  // Requests in flight, then the signal.
  const running = page.evaluate(async ({ rounds, n }) => {
    for (let i = 0; i < rounds; i++) await window.round(n);
  }, { rounds: ROUNDS, n: IN_FLIGHT });
  await new Promise((r) => setTimeout(r, 30));
  process.kill(holder.pid, "SIGTERM");
  await running;
  // The rounds may all be answered before the draining replica closes the session: wait for
  // the close (it comes: the replica exits once drained), then one more round, which must go
  // through the balancer to the replica that is left.
  await page.waitForFunction(() => window.states.length > 0, null, { timeout: 30_000 }).catch(() => {
    throw new Error(`the page's session was not closed within 30 s of pid ${holder.pid}'s SIGTERM (connections before: ${counts})`);
  });
  await page.evaluate((n) => window.round(n), IN_FLIGHT);
  const { results, reconnected, states } = await page.evaluate(() => ({
    results: window.results,
    reconnected: window.client.connection.socket !== window.firstSocket,
    states: window.states,
  }));
  const expected = IN_FLIGHT * (ROUNDS + 2);
  const wrong = results.filter((c) => c !== 282);
  if (results.length !== expected || wrong.length > 0) {
    throw new Error(`${results.length} of ${expected} answered, wrong or failed: ${JSON.stringify(wrong)}`);
  }
  if (!reconnected) throw new Error("the client never reconnected: did the replica close its session?");
  // What the page's connection indicator went through: the restart, then open again.
  if (states[0] !== "reconnecting" || states.at(-1) !== "open") {
    throw new Error(`connection states across the restart: ${JSON.stringify(states)}`);
  }
  console.log(`reconnect: ${expected} requests answered across a replica's SIGTERM (pid ${holder.pid}), the page reconnected through the balancer`);
});
