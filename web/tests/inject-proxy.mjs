// An HTTP proxy that puts a script at the top of every HTML page it passes, before the page's
// own scripts: what an init script does, for engines whose driver has none (WebKitGTK's
// WebDriver classic). Everything else, WebSockets included, passes unchanged.
import http from "node:http";
import net from "node:net";

export class InjectingProxy {
  /** `upstream`: the server's base URL; `script`: the source put into each page. */
  constructor(upstream, script) {
    this.upstream = new URL(upstream);
    this.script = script;
    this.server = http.createServer((req, res) => this.forward(req, res));
    this.server.on("upgrade", (req, socket, head) => this.tunnel(req, socket, head));
  }

  /** Listen on loopback; the proxy's base URL. */
  listen() {
    return new Promise((resolve) => this.server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${this.server.address().port}/`)));
  }

  forward(req, res) {
    const headers = { ...req.headers };
    delete headers["accept-encoding"]; // the page's text, not compressed, to edit
    const out = http.request({ host: this.upstream.hostname, port: this.upstream.port, method: req.method, path: req.url, headers }, (up) => {
      if (!/^text\/html/.test(up.headers["content-type"] ?? "")) {
        res.writeHead(up.statusCode, up.headers);
        return up.pipe(res);
      }
      const chunks = [];
      up.on("data", (c) => chunks.push(c));
      up.on("end", () => {
        const page = Buffer.concat(chunks).toString("utf8").replace(/<head>/i, (h) => `${h}<script>${this.script}</script>`);
        const body = Buffer.from(page, "utf8");
        const { "content-length": _, "transfer-encoding": __, ...rest } = up.headers;
        res.writeHead(up.statusCode, { ...rest, "content-length": body.length });
        res.end(body);
      });
    });
    out.on("error", () => res.destroy());
    req.pipe(out);
  }

  tunnel(req, socket, head) {
    const up = net.connect(Number(this.upstream.port), this.upstream.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      up.write(`${lines.join("\r\n")}\r\n\r\n`);
      up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    for (const s of [up, socket]) s.on("error", () => { up.destroy(); socket.destroy(); });
  }

  close() {
    this.server.closeAllConnections?.();
    this.server.close();
  }
}
