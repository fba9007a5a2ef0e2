// A server of a test's own, which the test may kill and start again: `SPLIT_SERVER_CMD` is
// its command line as JSON (set by `cargo xtask test`). Every server started here is killed
// when the test's process exits, however it exits: a failed assertion must not leave one
// serving after the test.
import { spawn } from "node:child_process";
import net from "node:net";

const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** A port free on loopback now (the kernel's choice), for a server that must come back on
 * the same origin. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** Start the server on `port` (0: any) with `extra` flags; resolves to `{ child, port, url,
 * stop }` once it listens, `stop()` killing it (SIGKILL: no goodbye) and resolving when it is gone. */
export function startOwnServer(port = 0, extra = []) {
  const [bin, ...args] = JSON.parse(process.env.SPLIT_SERVER_CMD ?? "null") ?? [];
  args.push(...extra);
  if (!bin) throw new Error("set SPLIT_SERVER_CMD to the server's command line as JSON (cargo xtask test does)");
  const at = args.indexOf("--port");
  if (at >= 0) args[at + 1] = String(port);
  else args.push("--port", String(port));
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, RUST_LOG: "warn" } });
  running.add(child);
  const gone = new Promise((resolve) => child.once("exit", () => {
    running.delete(child);
    resolve();
  }));
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`the test's own server exited (${code})`)));
    let text = "";
    child.stdout.on("data", (d) => {
      text += d;
      const m = /split-inference demo: (\S+)/.exec(text);
      if (m) {
        const url = new URL(m[1]);
        resolve({ child, port: Number(url.port), url: url.href, stop: () => { child.kill("SIGKILL"); return gone; } });
      }
    });
  });
}
