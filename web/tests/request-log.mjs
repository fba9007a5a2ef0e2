// What a page and its workers request, in any engine (WebDriver reports no requests): a TCP
// proxy in front of the server that notes the path of every HTTP request through it.
import net from "node:net";

/**
 * A TCP proxy in front of the server that notes the path of every HTTP request through it,
 * the pages' and their workers' alike in whichever engine (WebDriver reports no requests),
 * until a connection becomes a WebSocket.
 */
export class RequestLog {
  constructor(upstreamPort) {
    this.upstreamPort = upstreamPort;
    this.paths = [];
    this.server = net.createServer((client) => this.accept(client));
  }

  /** Listen on loopback; the proxy's base URL. */
  listen() {
    return new Promise((resolve) => this.server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${this.server.address().port}/`)));
  }

  accept(client) {
    const upstream = net.connect(this.upstreamPort, "127.0.0.1");
    for (const [a, b] of [[client, upstream], [upstream, client]]) {
      a.on("error", () => b.destroy());
      a.on("close", () => b.destroy());
    }
    upstream.on("data", (chunk) => client.write(chunk));
    let pending = Buffer.alloc(0);
    let body = 0; // bytes of a request body still to pass
    let scanning = true;
    client.on("data", (chunk) => {
      upstream.write(chunk);
      if (!scanning) return;
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        if (body > 0) {
          const n = Math.min(body, pending.length);
          pending = pending.subarray(n);
          body -= n;
          if (body > 0) return;
        }
        const end = pending.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = pending.subarray(0, end).toString("latin1");
        pending = pending.subarray(end + 4);
        const line = /^[A-Z]+ (\S+) HTTP\/1\.[01]/.exec(head);
        if (line) this.paths.push(new URL(line[1], "http://x").pathname);
        if (/\r\nupgrade: *websocket/i.test(head)) { scanning = false; return; }
        body = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      }
    });
  }

  close() {
    this.server.close();
  }
}
