// The app's code: esbuild bundles it with the client into `dist/app.js`. The client's worker
// and wasm builds are not bundled: `build.mjs` copies the package's folder beside the bundle,
// and `assetBase` says where (a bundle moves `import.meta.url` to itself).
import { SplitClient, SplitError } from "split-inference-client";

const out = document.getElementById("out");
try {
  const client = await SplitClient.create({
    assetBase: new URL("split-inference-client/", import.meta.url).href,
    onProgress: (p) => { out.textContent = `${p.stage}${p.fraction != null ? ` ${Math.round(p.fraction * 100)}%` : ""}…`; },
  });
  // The server serves the demo's sample photos; an app would take the user's.
  const photo = new Uint8Array(await (await fetch("/samples/chelsea.png")).arrayBuffer());
  const r = await client.classify(photo, "block5");
  out.textContent = `${r.top[0].name}, ${(r.top[0].prob * 100).toFixed(1)}% (${r.mode}, ${r.totalMs.toFixed(0)} ms)`;
  Object.assign(document.body.dataset, { top1: String(r.top[0].class), build: client.wasmBuild, worker: String(client.inWorker) });
} catch (e) {
  out.textContent = e instanceof SplitError ? `${e.code}: ${e.message}` : String(e);
  document.body.dataset.failed = "true";
}
