// The wasm module and the seam to it: which build to load, and how its failures become
// `SplitError`s. Also the downloads and the browser-side image preparation the client needs.

/** The wasm module in use, set by `loadWasm` (a live binding: importers see the update). */
export let wasm = null;

/** Whether this engine validates a module whose one function, `() -> v128`, is `body` (the
 * instructions before its `end`). */
function validatesV128Function(body) {
  const code = [0x00, ...body, 0x0b];                     // no locals, the body, end
  const bytes = new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,       // magic, version
    0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b,             // type: () -> v128
    0x03, 0x02, 0x01, 0x00,                               // one function of type 0
    0x0a, code.length + 2, 0x01, code.length, ...code,    // its code
  ]);
  try { return WebAssembly.validate(bytes); } catch { return false; }
}

/** `v128.const 0`. */
const V128_ZERO = [0xfd, 0x0c, ...new Array(16).fill(0)];

/** Whether this engine validates WebAssembly SIMD (simd128), which every build needs. */
function hasSimd128() {
  return validatesV128Function(V128_ZERO);
}

/** Whether this engine validates relaxed SIMD: `f32x4.relaxed_madd` of three zero vectors. */
function hasRelaxedSimd() {
  return validatesV128Function([...V128_ZERO, ...V128_ZERO, ...V128_ZERO, 0xfd, 0x85, 0x02]);
}

/** Whether WebGPU would give an adapter (`navigator.gpu` exists on some machines without one). */
async function hasWebGpuAdapter() {
  if (typeof navigator === "undefined" || !navigator.gpu) return false;
  try { return (await navigator.gpu.requestAdapter()) != null; } catch { return false; }
}

/**
 * Helper threads the threaded build may start here, given `noThreadsReason()`: none when there
 * is a reason (a page's thread, no shared memory, one core); otherwise at most three (the
 * kernels' calls gain little beyond four threads).
 */
function threadHelpers(whyNot) {
  if (whyNot != null) return 0;
  return Math.max(0, Math.min((navigator.hardwareConcurrency ?? 1) - 1, 3));
}

/**
 * Load the smallest build that can do what was asked: the WebGPU build (`pkg/`, which also has
 * the CPU backend) only when WebGPU may be used and the browser has it; otherwise the CPU-only
 * build, with relaxed SIMD's fused multiply-add where the engine has it (`pkg-cpu-relaxed/`,
 * Chromium) or plain SIMD (`pkg-cpu/`), and either with Web Worker threads where threads may
 * start (`pkg-cpu-threads/`, `pkg-cpu-threads-simd128/`: Firefox has threads and no relaxed
 * SIMD).
 */
const BUILD_DIRS = {
  webgpu: "pkg", cpu: "pkg-cpu", "cpu-relaxed": "pkg-cpu-relaxed", "cpu-threads": "pkg-cpu-threads",
  "cpu-threads-simd128": "pkg-cpu-threads-simd128",
};

/**
 * What this engine offers the edge, each with the reason when it does not: WebGPU, relaxed SIMD,
 * threads. Set by `loadWasm` (a live binding), for `client.capabilities`; a feature left out is
 * never a silent fallback.
 */
export let capabilities = null;

/** WebRTC on this thread, for a device group's direct channels (a page's thread: a worker has
 * none, and the worker's client asks its page). */
export function webRtcCapability() {
  return typeof RTCPeerConnection !== "undefined" ? { available: true, reason: null }
    : { available: false, reason: "this engine has no RTCPeerConnection: the group's members reach this page through the server's relay" };
}

/** Whether a shared WebAssembly memory can be made and sent to a worker here. */
function hasSharedWasmMemory() {
  if (typeof SharedArrayBuffer === "undefined") return false;
  try {
    const memory = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
    return memory.buffer instanceof SharedArrayBuffer;
  } catch {
    return false;
  }
}

/** Why this thread may start no helper threads (the package at `root`), or null when it may. */
function noThreadsReason(root) {
  const inWorker = typeof window === "undefined" && typeof WorkerGlobalScope !== "undefined";
  if (!inWorker) return "the client runs on the page's thread, which may not block on helper threads (the default worker: true runs it in a worker)";
  if (root.origin !== globalThis.location?.origin) return `the package comes from another origin (${root.origin}) than the page: its helper threads' script cannot start as a worker there`;
  if (!globalThis.crossOriginIsolated) return "the page is not cross-origin isolated (no COOP/COEP headers), so there is no shared memory";
  // WebKitGTK says it is isolated and still has no shared memory (2.50 here): the threaded
  // build would fail to hand its memory to the helper workers ("The object can not be cloned").
  if (!hasSharedWasmMemory()) return "this engine gives no shared memory (no SharedArrayBuffer or shared WebAssembly.Memory) even to an isolated page";
  if ((navigator.hardwareConcurrency ?? 1) < 2) return "one core";
  return null;
}

/** WebGPU here: whether an adapter was given, or why not (the caller asked for the CPU, the
 * engine has no `navigator.gpu`, or it gave no adapter). */
async function webGpuCapability(backend) {
  if (backend === "cpu") return { available: false, reason: "backend: \"cpu\" was asked for" };
  if (typeof navigator === "undefined" || !navigator.gpu) return { available: false, reason: "this engine has no WebGPU here (navigator.gpu is absent)" };
  return (await hasWebGpuAdapter())
    ? { available: true, reason: null }
    : { available: false, reason: "navigator.gpu gave no adapter (no usable GPU, or WebGPU blocked for it)" };
}

export async function loadWasm(backend, build, assetBase) {
  if (build != null && !BUILD_DIRS[build]) {
    throw new SplitError("bad_option", `unknown wasm build ${build}; use ${Object.keys(BUILD_DIRS).join(", ")}`);
  }
  if (typeof WebAssembly === "undefined" || !hasSimd128()) {
    throw new SplitError("unsupported_engine", "this engine has no WebAssembly SIMD (simd128), which every build of the edge module needs");
  }
  const threadsWhyNot = noThreadsReason(packageRoot(assetBase));
  const helpers = threadHelpers(threadsWhyNot);
  if (build?.startsWith("cpu-threads") && helpers === 0) {
    throw new SplitError("bad_option", `the ${build} build needs a worker of a cross-origin isolated page on more than one core`);
  }
  const webgpu = await webGpuCapability(backend);
  const gpu = webgpu.available;
  const relaxed = hasRelaxedSimd();
  capabilities = {
    webgpu,
    relaxedSimd: relaxed ? { available: true, reason: null }
      : { available: false, reason: "this engine does not validate relaxed SIMD (f32x4.relaxed_madd)" },
    threads: threadsWhyNot == null ? { available: true, helpers, reason: null } : { available: false, helpers: 0, reason: threadsWhyNot },
    build: null,
    buildFallback: null,
  };
  const cpuDir = relaxed ? (helpers > 0 ? "pkg-cpu-threads" : "pkg-cpu-relaxed")
    : helpers > 0 ? "pkg-cpu-threads-simd128" : "pkg-cpu";
  let dir = BUILD_DIRS[build] ?? (gpu ? "pkg" : cpuDir);
  let module;
  try {
    module = await instantiate(dir, assetBase);
  } catch (e) {
    // A build the client picked (not one the caller asked for) that does not load, e.g. one
    // `./run.sh demo` is still compiling: the single-threaded CPU build runs everywhere.
    if (build != null || dir === "pkg-cpu" || backend === "webgpu") throw e;
    capabilities.buildFallback = `the ${dir} build did not load (${e?.message ?? e}); using pkg-cpu`;
    console.warn(`split-client: ${capabilities.buildFallback}`);
    dir = "pkg-cpu";
    module = await instantiate(dir, assetBase);
  }
  if (dir.startsWith("pkg-cpu-threads")) await module.startThreads(helpers);
  capabilities.build = Object.keys(BUILD_DIRS).find((k) => BUILD_DIRS[k] === dir);
  wasm = module;
  return module;
}

/**
 * The package's root, where `client/` and the `pkg*` builds are: `assetBase` (resolved against
 * the page) when an app serves them apart from its bundled code, else the folder above this
 * file. A bundler that inlines this file into an app's bundle moves `import.meta.url` to the
 * bundle, so an app that bundles the client names the folder it copied the package to
 * (`web/examples/bundled/`).
 */
export function packageRoot(assetBase) {
  if (assetBase != null) return new URL(assetBase.endsWith("/") ? assetBase : `${assetBase}/`, globalThis.location?.href);
  return new URL("../", import.meta.url);
}

/**
 * A module worker running `url` (`name` for the browser's tools). Browsers start workers only
 * from their page's origin: for a package served from another origin (with CORS, the server's
 * `--allow-origin`), the worker is a same-origin `blob:` module that imports it.
 */
export function startModuleWorker(url, name) {
  const options = name ? { type: "module", name } : { type: "module" };
  if (url.origin === globalThis.location?.origin) return new Worker(url, options);
  // A few bytes, kept for the page's life: revoking it could race the worker's own load.
  const shim = URL.createObjectURL(new Blob([`import ${JSON.stringify(url.href)};`], { type: "text/javascript" }));
  return new Worker(shim, options);
}

/** Import and instantiate the build in `<package root>/<dir>/`. */
async function instantiate(dir, assetBase) {
  const module = await import(new URL(`${dir}/wasm_edge.js`, packageRoot(assetBase)).href);
  await module.default();
  return module;
}

/** An error with a stable, machine-readable code. */
export class SplitError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "SplitError";
    this.code = code;
  }
}

/** Set once the module trapped: a Rust panic aborts the instance mid-call, so nothing it holds
 * can be trusted again. The error every later call fails with ("wasm_trap", with the panic's
 * message). In a worker (the default) the page's side then starts a fresh one
 * (`remote.js`); a client on the page's thread must be created again. */
export let trapped = null;

/** What the wasm module threw, as this module's `SplitError`, so callers see one class whichever
 * side failed: its own errors (an `Error` named SplitError with a `code`) keep their code; a trap
 * (`WebAssembly.RuntimeError`: a panic, or memory exhausted) becomes "wasm_trap" with the
 * panic's message, which the module's panic hook kept. */
export function fromWasm(e) {
  if (e instanceof SplitError) return e;
  if (typeof WebAssembly !== "undefined" && e instanceof WebAssembly.RuntimeError) {
    if (!trapped) {
      let panic = null;
      try { panic = wasm?.takePanicMessage?.() ?? null; } catch { /* the instance is past reading */ }
      trapped = new SplitError("wasm_trap", `the wasm module stopped: ${panic ?? e.message}`);
    }
    return trapped;
  }
  return new SplitError(e?.code ?? "internal", e?.message ?? String(e));
}

/** Whether a failure may pass by itself, so that the same request can go again later: the link
 * ("network", "timeout") or a refusal the server's protocol calls transient ("busy",
 * "rate_limited", "internal": `ErrorCode::is_transient`, asked of the module so that the list
 * lives in one place). */
export function isTransient(code) {
  return code === "network" || code === "timeout" || Boolean(wasm?.isTransientError(code));
}

/** Whether sending the same request again can never succeed: the caller's own mistake
 * ("bad_option") or a refusal the protocol calls permanent (`ErrorCode::is_permanent`). */
export function isPermanent(code) {
  return code === "bad_option" || Boolean(wasm?.isPermanentError(code));
}

/** Call into the wasm module; its failures become `SplitError`s. */
export async function wasmCall(f) {
  if (trapped) throw trapped;
  try {
    return await f();
  } catch (e) {
    throw fromWasm(e);
  }
}

/** Placement changes a client keeps (`client.switches`), the newest: as many as the planner's
 * own log (`SWITCH_LOG_CAP`, shared/src/plan/controller.rs). A page open for hours switches
 * thousands of times. */
export const SWITCHES_KEPT = 64;

/** Append `item` to `list`, dropping its oldest entries beyond `max`. */
export function keepNewest(list, item, max) {
  list.push(item);
  if (list.length > max) list.splice(0, list.length - max);
}

/** A download that receives nothing for this long is abandoned (a link gone silent would
 * otherwise hold the request, and every request queued behind it, for good). */
export const STALL_TIMEOUT_MS = 20_000;

/**
 * `url`'s bytes, with `onProgress({ stage, loaded, total, fraction })` as they arrive. `size` is
 * the decoded size when the caller knows it: a compressed response has no length, or the
 * length of its compressed bytes, which is not what the reader counts. Every failure is a
 * `SplitError`: "network" when the server cannot be reached or the transfer breaks off,
 * "timeout" when nothing arrives for `STALL_TIMEOUT_MS`.
 */
export async function fetchWithProgress(url, stage, onProgress, size = 0) {
  const abort = new AbortController();
  let stalled = false;
  let timer = null;
  const watch = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      stalled = true;
      abort.abort();
    }, STALL_TIMEOUT_MS);
  };
  const failed = (e) => e instanceof SplitError ? e
    : stalled ? new SplitError("timeout", `GET ${url}: nothing received for ${STALL_TIMEOUT_MS} ms`)
    : new SplitError("network", `GET ${url} failed: ${e?.message ?? e}`);
  watch();
  try {
    const response = await fetch(url, { signal: abort.signal });
    if (!response.ok) {
      throw new SplitError("network", `GET ${url} failed: ${response.status} ${response.statusText}`);
    }
    const encoded = (response.headers.get("content-encoding") ?? "identity") !== "identity";
    const total = size || (encoded ? 0 : Number(response.headers.get("content-length")) || 0);
    const reader = response.body.getReader();
    const chunks = [];
    let loaded = 0;
    for (;;) {
      watch();
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      loaded += value.length;
      onProgress({ stage, loaded, total, fraction: total ? loaded / total : null });
    }
    const bytes = new Uint8Array(loaded);
    let offset = 0;
    for (const c of chunks) {
      bytes.set(c, offset);
      offset += c.length;
    }
    return bytes;
  } catch (e) {
    throw failed(e);
  } finally {
    clearTimeout(timer);
  }
}

/** The Cache Storage bucket of the client's downloads (weights, calibration). */
const CACHE_NAME = "split-inference";

async function openCache() {
  try {
    return typeof caches === "undefined" ? null : await caches.open(CACHE_NAME);
  } catch {
    return null; // not a secure context, or storage refused (private mode)
  }
}

/** Whether `fetchCached(url, version, …)` would answer from the cache. */
export async function isCached(url, version) {
  const key = new URL(url);
  key.searchParams.set("v", version);
  const cache = await openCache();
  return Boolean(cache && (await cache.match(key.href).catch(() => null)));
}

/** A small JSON value kept in the client's cache under `url` (a name of the client's own, not
 * fetched): `readCachedJson` gives it back, or null. */
export async function writeCachedJson(url, value) {
  const cache = await openCache();
  await cache?.put(new URL(url).href, new Response(JSON.stringify(value), { headers: { "content-type": "application/json" } })).catch(() => {});
}

export async function readCachedJson(url) {
  const cache = await openCache();
  const hit = cache ? await cache.match(new URL(url).href).catch(() => null) : null;
  return hit ? hit.json().catch(() => null) : null;
}

/** A path `/api/info` names (absolute on the server, e.g. "/weights/…") under the server's
 * base URL, which may have a path of its own. */
export function serverUrl(path, base) {
  return new URL(path.replace(/^\//, ""), base);
}

/**
 * `url`'s bytes at `version` (the file's checksum, from /api/info): read from Cache Storage when
 * this version is there, else downloaded with progress and stored, replacing older versions of
 * the same file, so a revisit downloads nothing until the server's file changes. Where Cache
 * Storage is missing or full, or no version is known (an older server), a plain download.
 * Progress says `cached: true` for a cached copy.
 */
export async function fetchCached(url, version, stage, onProgress, size = 0) {
  if (!version) return fetchWithProgress(url, stage, onProgress, size);
  const key = new URL(url);
  key.searchParams.set("v", version);
  const cache = await openCache();
  const hit = cache ? await cache.match(key.href).catch(() => null) : null;
  if (hit) {
    const bytes = new Uint8Array(await hit.arrayBuffer());
    onProgress({ stage, loaded: bytes.length, total: bytes.length, fraction: 1, cached: true });
    return bytes;
  }
  const bytes = await fetchWithProgress(key, stage, onProgress, size);
  if (cache) {
    try {
      for (const old of await cache.keys()) {
        if (new URL(old.url).pathname === key.pathname) await cache.delete(old);
      }
      await cache.put(key.href, new Response(bytes, { headers: { "content-type": "application/octet-stream" } }));
    } catch {
      // Over quota: the next visit downloads again.
    }
  }
  return bytes;
}

/**
 * A PNG of an image in a format only the browser decodes (WebP, AVIF, GIF, BMP), upright by its
 * EXIF orientation as the browser shows it; `bad_image` when the browser cannot decode it either.
 */
export async function browserDecodedPng(image) {
  let bitmap;
  try {
    if (typeof createImageBitmap === "undefined" || typeof OffscreenCanvas === "undefined") throw new Error("no decoder");
    bitmap = await createImageBitmap(new Blob([image]));
  } catch {
    throw new SplitError("bad_image", "not an image: the client reads JPEG and PNG, and what this browser decodes (WebP, AVIF, GIF)");
  }
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  canvas.getContext("2d").drawImage(bitmap, 0, 0);
  bitmap.close();
  return new Uint8Array(await (await canvas.convertToBlob({ type: "image/png" })).arrayBuffer());
}

/**
 * The 224x224 centre crop of `image` (224/256 of the short side, as the model's preprocessing
 * takes it) as a quality-90 JPEG: with the browser's own decoder, scaler and encoder where there
 * is an OffscreenCanvas (several times faster than wasm on a slow CPU, and smaller), else with
 * the wasm module's bit-exact preprocessing.
 */
export async function modelInputJpeg(image) {
  if (typeof OffscreenCanvas === "undefined" || typeof createImageBitmap === "undefined") {
    return wasmCall(() => wasm.encodeUploadJpeg(image, 90));
  }
  try {
    const bitmap = await createImageBitmap(new Blob([image]));
    const side = Math.round(Math.min(bitmap.width, bitmap.height) * 224 / 256);
    const canvas = new OffscreenCanvas(224, 224);
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingQuality = "high";
    ctx.drawImage(bitmap, Math.ceil((bitmap.width - side) / 2), Math.ceil((bitmap.height - side) / 2), side, side, 0, 0, 224, 224);
    bitmap.close();
    return new Uint8Array(await (await canvas.convertToBlob({ type: "image/jpeg", quality: 0.9 })).arrayBuffer());
  } catch {
    return wasmCall(() => wasm.encodeUploadJpeg(image, 90)); // a format the browser cannot decode: let wasm say why
  }
}

