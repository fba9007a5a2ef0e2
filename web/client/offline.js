// The offline start, the page's side (`offline: true` in `SplitClient.create`): register the
// service worker (`sw.js` at the package's root, or the embedder's own copy), and once the
// client has started tell it which site version started and which files the page and the
// client's worker loaded, so that a reload with the server out of reach starts the same way.
// See `sw.js` for what it keeps and why versions never mix.

import { packageRoot } from "./wasm.js";

/** How long a new service worker may take to activate before the client stops waiting. */
const ACTIVATE_TIMEOUT_MS = 10_000;

/** `capabilities.offline` of a client that did not ask for the offline start. */
export const notAsked = () => ({ available: false, reason: "offline: true was not asked for" });

/**
 * Register the service worker when `option` asks for it (`true`, or `{ serviceWorker, scope }`
 * for an app that serves its own copy of `sw.js`). Never throws: resolves to
 * `{ registration, reason }`, the reason set when there is no registration.
 */
export async function registerOffline(option, assetBase) {
  if (!option) return { registration: null, reason: notAsked().reason };
  if (typeof navigator === "undefined" || !navigator.serviceWorker) {
    return { registration: null, reason: "this page has no service workers (not a secure context, private browsing, or an engine without them)" };
  }
  const script = typeof option === "object" && option.serviceWorker
    ? new URL(option.serviceWorker, location.href) : new URL("sw.js", packageRoot(assetBase));
  const scope = typeof option === "object" && option.scope ? { scope: new URL(option.scope, location.href).href } : undefined;
  try {
    return { registration: await navigator.serviceWorker.register(script, scope), reason: null };
  } catch (e) {
    // Started offline: the update check cannot fetch the script, but the worker that served
    // this page is registered and active.
    const existing = await navigator.serviceWorker.getRegistration(scope?.scope ?? script).catch(() => null);
    if (existing?.active) return { registration: existing, reason: null };
    return { registration: null, reason: `the service worker ${script.pathname} was refused: ${e.message}` };
  }
}

/** The registration's active worker, once it has one (a first visit waits for it to install). */
function activeWorker(registration) {
  if (registration.active) return Promise.resolve(registration.active);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the service worker did not activate within ${ACTIVATE_TIMEOUT_MS / 1000} s`)), ACTIVATE_TIMEOUT_MS);
    const worker = registration.installing ?? registration.waiting;
    if (!worker) return reject(new Error("the service worker is neither active nor installing"));
    worker.addEventListener("statechange", () => {
      if (worker.state === "activated") {
        clearTimeout(timer);
        resolve(worker);
      } else if (worker.state === "redundant") {
        clearTimeout(timer);
        reject(new Error("the service worker failed to install"));
      }
    });
  });
}

/** The same-origin files this context loaded, as the browser's resource timing lists them. */
export function loadedUrls() {
  const here = [globalThis.location?.href ?? ""];
  const entries = globalThis.performance?.getEntriesByType?.("resource") ?? [];
  return [...here, ...entries.map((e) => e.name)].filter((u) => u.startsWith(globalThis.location.origin));
}

/**
 * `urls` without the model's data files that `/api/info` names (weights, their shards, the
 * light model, the calibration, the language model's blocks): the client keeps those in its
 * own cache under their checksums, and the service worker would only download them to find
 * they are not the site's.
 */
export function withoutData(urls, info) {
  const data = [
    info?.weights_url, info?.calibration?.url, info?.llm?.edge_url, info?.llm?.tokenizer_url,
    ...(info?.weights_shards ?? []).map((s) => s.url),
    ...(info?.light_model?.shards ?? []).map((s) => s.url),
    ...(info?.calibration?.parts ?? []).map((p) => p.url),
  ].filter(Boolean);
  return urls.filter((u) => {
    const path = new URL(u).pathname;
    return !data.some((d) => path.endsWith(d) || (d.endsWith("/") && path.includes(d)));
  });
}

/**
 * Tell the service worker that the client started with site version `site` and loaded `urls`:
 * resolves to the capability (`{ available, reason, site, files }`) once the worker kept
 * them and made the version current, or says why not.
 */
export async function reportStarted(registration, site, urls) {
  if (!registration) return notAsked();
  if (!site) return { available: false, reason: "the server names no site version (/api/info has no site): an older server" };
  try {
    const worker = await activeWorker(registration);
    const report = await new Promise((resolve, reject) => {
      const channel = new MessageChannel();
      const timer = setTimeout(() => reject(new Error("the service worker did not answer within 60 s")), 60_000);
      channel.port1.onmessage = ({ data }) => {
        clearTimeout(timer);
        resolve(data);
      };
      worker.postMessage({ type: "split-started", site, urls }, [channel.port2]);
    });
    if (report.error) return { available: false, reason: `the service worker failed: ${report.error}` };
    if (!report.promoted) {
      return { available: false, reason: `${report.missing.length} of the files this page loaded could not be kept for site ${site} (the server went out of reach, or its files changed meanwhile); the next start tries again` };
    }
    return { available: true, reason: null, site, files: report.files };
  } catch (e) {
    return { available: false, reason: e.message };
  }
}
