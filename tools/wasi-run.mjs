// Runs a `wasm32-wasip1` test binary under Node's WASI: the runner `./run.sh test` gives cargo
// for the kernels' tests in WebAssembly (xtask/src/toolchain.rs, `wasm_kernels`).
//
//   node tools/wasi-run.mjs FILE.wasm [ARGS...]
import { readFileSync } from "node:fs";
import { WASI } from "node:wasi";

const [file, ...args] = process.argv.slice(2);
if (!file) throw new Error("usage: node tools/wasi-run.mjs FILE.wasm [ARGS...]");
const wasi = new WASI({ version: "preview1", args: [file, ...args], env: process.env, preopens: { "/": "/" }, returnOnExit: true });
const { instance } = await WebAssembly.instantiate(readFileSync(file), wasi.getImportObject());
process.exitCode = wasi.start(instance);
