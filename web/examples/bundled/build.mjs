// `npm run build`: the app's code and the client bundled by esbuild into `dist/app.js`, the
// page beside it, and the installed package's files (its worker, the wasm builds) copied to
// `dist/split-inference-client/`, where `src/main.js` tells the client they are.
import { build } from "esbuild";
import { copyFileSync, cpSync, mkdirSync, rmSync } from "node:fs";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist");
await build({
  entryPoints: ["src/main.js"],
  bundle: true,
  format: "esm",
  target: "es2022",
  outfile: "dist/app.js",
  logLevel: "info",
});
copyFileSync("index.html", "dist/index.html");
cpSync("node_modules/split-inference-client", "dist/split-inference-client", { recursive: true });
