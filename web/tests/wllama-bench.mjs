// The language model whole in the browser, this project against wllama (llama.cpp compiled to
// wasm, `@wllama/wllama` from npm), same GGUF file, same chat prompt, greedy, in headless
// Chromium on the CPU: prefill and decode tokens/s, alternating the engines. Our side is
// `SplitChat` with every block in the page (the `pkg-cpu` build, one thread); wllama's is its
// single-threaded build (`n_threads: 1`), or its threads on a cross-origin isolated page with
// `--threads N`. A benchmark, not a test: it reports, it asserts nothing about speed.
//
//   npm install --no-save @wllama/wllama@3.13.0      # in web/
//   SPLIT_URL=http://127.0.0.1:8080/ node tests/wllama-bench.mjs [--rounds 3] [--tokens 32] [--threads 1]
import { createReadStream, existsSync, readFileSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { homedir } from "node:os";
import { extname, join, normalize } from "node:path";
import { withPage, GPU_ARGS } from "./browser.mjs";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const rounds = option("rounds", 3);
const maxTokens = option("tokens", 32);
const threads = option("threads", 1);
const url = process.env.SPLIT_URL;
if (!url) throw new Error("set SPLIT_URL to a running server with the language model");
const wllamaDir = new URL("../node_modules/@wllama/wllama/", import.meta.url).pathname;
if (!existsSync(wllamaDir)) throw new Error("npm install --no-save @wllama/wllama@3.13.0 (in web/) first");
const cache = process.env.SPLIT_CACHE ?? join(homedir(), ".cache/splitinfer");
const gguf = process.env.SPLIT_LLM ?? join(cache, "weights/SmolLM2-135M-Instruct.Q4_1.gguf");
const golden = JSON.parse(readFileSync(new URL("../../shared/tests/data/smollm2_golden.json", import.meta.url)));
const prompt = golden.prompts[1].user;

// wllama's page: its files, the GGUF file and a page, cross-origin isolated (its threads need
// shared memory), from a server of the benchmark's own.
const types = { ".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html" };
const page = `<!doctype html><script type="module">
import { Wllama } from "/wllama/esm/index.js";
window.runWllama = async (threads, prompt, maxTokens) => {
  const w = new Wllama({ default: "/wllama/esm/wasm/wllama.wasm" }, { suppressNativeLog: true });
  await w.loadModelFromUrl("/model.gguf", { n_threads: threads, n_ctx: 512, n_gpu_layers: 0, useCache: false });
  const r = await w.createChatCompletion({ messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0 });
  await w.exit();
  return { text: r.choices[0].message.content, timings: r.timings };
};
</script>`;
const server = createServer((req, res) => {
  const headers = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" };
  const path = new URL(req.url, "http://x").pathname;
  let file = null;
  if (path === "/") return res.writeHead(200, { ...headers, "content-type": "text/html" }).end(page);
  if (path === "/model.gguf") file = gguf;
  else if (path.startsWith("/wllama/")) file = normalize(join(wllamaDir, path.slice("/wllama/".length)));
  if (!file || !file.startsWith(wllamaDir) && file !== gguf || !existsSync(file)) return res.writeHead(404).end();
  res.writeHead(200, { ...headers, "content-type": types[extname(file)] ?? "application/octet-stream", "content-length": statSync(file).size });
  createReadStream(file).pipe(res);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const wllamaUrl = `http://127.0.0.1:${server.address().port}/`;

const rows = [];
await withPage(GPU_ARGS.cpu, async (tab) => {
  for (let round = 0; round < rounds; round++) {
    await tab.goto(new URL("index.html", url).href);
    const ours = await tab.evaluate(async ({ prompt, maxTokens }) => {
      const { SplitChat } = await import("/client/chat.js");
      const chat = await SplitChat.create({ blocks: 30, positions: 512 });
      const a = await chat.ask([{ role: "user", content: prompt }], { maxTokens });
      chat.close();
      return a;
    }, { prompt, maxTokens });
    rows.push({
      engine: "this project (pkg-cpu, 1 thread)",
      prefill: ours.promptTokens / (ours.firstTokenMs / 1e3),
      decode: ours.tokensPerSecond,
      tokens: ours.tokens.length,
      promptTokens: ours.promptTokens,
      text: ours.text,
    });
    await tab.goto(wllamaUrl);
    await tab.waitForFunction(() => typeof window.runWllama === "function");
    const theirs = await tab.evaluate(({ threads, prompt, maxTokens }) => window.runWllama(threads, prompt, maxTokens), { threads, prompt, maxTokens });
    rows.push({
      engine: `wllama 3.13.0 (${threads} thread${threads > 1 ? "s" : ""})`,
      prefill: theirs.timings?.prompt_per_second,
      decode: theirs.timings?.predicted_per_second,
      tokens: theirs.timings?.predicted_n,
      promptTokens: theirs.timings?.prompt_n,
      text: theirs.text,
    });
  }
});
server.close();
const fmt = (v) => (v == null ? "—" : v.toFixed(1));
console.log("| round | engine | prompt tokens | prefill tokens/s | decode tokens/s | tokens |");
console.log("| --- | --- | --- | --- | --- | --- |");
rows.forEach((r, i) => console.log(`| ${Math.floor(i / 2) + 1} | ${r.engine} | ${r.promptTokens} | ${fmt(r.prefill)} | ${fmt(r.decode)} | ${r.tokens} |`));
console.log(`prompt: ${JSON.stringify(prompt)}; answers: ${JSON.stringify([...new Set(rows.map((r) => r.text))])}`);
