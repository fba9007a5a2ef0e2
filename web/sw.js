// The offline start's service worker (`offline: true` in `SplitClient.create`; the demo page
// turns it on). It keeps what a page needs to start the client — the page, its scripts, the
// client, the wasm build, `/api/info` and the cost table — so that a reload while the server
// is out of reach still starts: the client then answers with the weights its own Cache Storage
// holds (the light model where the full stages are missing) and keeps a backlog for the server.
//
// Versions never mix. Every response of the site names its version (the server's `split-site`
// header: its build, weights and served files, cloud-server/src/site.rs) and is kept in that
// version's cache. "Current" is the version whose every file a page started with: a page whose
// client started says so (`{ type: "split-started", site, urls }`, from `client/offline.js`),
// the files it and its worker loaded before this worker controlled them are added, it becomes
// current, and every other version's cache is deleted.
//
// A page always comes from the network when the network answers, revalidated (never the
// browser's HTTP cache alone, which may hold a file of an older build): its header says which
// version the server serves now. While that is the current version, the page's files come from
// its cache (no request: a warm start asks the network for the page and the API alone); when
// it is another, everything comes from the network, revalidated, until a start makes it
// current. `/api/…` always asks the server first. When the network fails (or a proxy says the
// server behind it did), everything comes from the current version's cache. Weights are not
// kept here: the client keeps them itself, under their checksums.

const SITE_HEADER = "split-site";
const PREFIX = "split-site-";
/** Where the current version's name is kept (a cache of its own, one entry). */
const STATE_CACHE = "split-offline-state";
const CURRENT_KEY = new URL("__split-offline/current", self.registration.scope).href;
/** What a reverse proxy answers when the server behind it is down or silent. */
const GATEWAY_FAILURES = [502, 503, 504];

/** The version the server served the last page with (null: unknown, as after this worker
 * restarted: then files are revalidated), or the current one when that page came from the
 * cache. */
let liveSite = null;

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin) return;
  event.respondWith(answer(event, request, url));
});

self.addEventListener("message", (event) => {
  const { type, site, urls } = event.data ?? {};
  if (type !== "split-started" || typeof site !== "string" || !/^[0-9a-f]{16}$/.test(site)) return;
  const reply = event.ports[0];
  event.waitUntil(promote(site, Array.isArray(urls) ? urls : [])
    .then((report) => reply?.postMessage(report), (e) => reply?.postMessage({ error: String(e?.message ?? e) })));
});

async function answer(event, request, url) {
  const site = await current();
  const navigation = request.mode === "navigate";
  if (!navigation && site && liveSite === site && !url.pathname.includes("/api/")) {
    const kept = await fromCache(site, request);
    if (kept) return kept;
  }
  // From the network: a page or a file the current version does not have, revalidated when it
  // is the site's (a navigation cannot be rebuilt with other options, so it is asked anew).
  const revalidated = navigation
    ? new Request(request.url, { cache: "no-cache", redirect: "manual", credentials: request.credentials })
    : (await isSiteFile(request)) ? new Request(request, { cache: "no-cache" }) : request;
  // The current version's copy, when the network cannot give one (a page served from it
  // makes its files come from it too).
  const kept = async () => {
    const hit = site && (await fromCache(site, request));
    if (navigation && hit) liveSite = site;
    return hit;
  };
  let response;
  try {
    response = await fetch(revalidated);
  } catch (error) {
    const hit = await kept();
    if (hit) return hit;
    throw error;
  }
  if (GATEWAY_FAILURES.includes(response.status)) {
    const hit = await kept();
    if (hit) return hit;
  }
  const of = response.headers.get(SITE_HEADER);
  if (navigation) liveSite = of;
  if (of && response.status === 200) {
    const copy = response.clone();
    event.waitUntil(caches.open(PREFIX + of).then((c) => c.put(request, copy)).catch(() => {}));
  }
  return response;
}

/** Whether a version's cache holds `request` (a file of the site; the client's own cache of
 * weights is not looked in). */
async function isSiteFile(request) {
  for (const name of await caches.keys()) {
    if (name.startsWith(PREFIX) && (await (await caches.open(name)).match(request, { ignoreVary: true }))) return true;
  }
  return false;
}

/** `request` from `site`'s cache (a page by its path alone when its query differs), or null. */
async function fromCache(site, request) {
  const cache = await caches.open(PREFIX + site);
  const hit = await cache.match(request, { ignoreVary: true });
  if (hit || request.mode !== "navigate") return hit ?? null;
  return (await cache.match(request, { ignoreVary: true, ignoreSearch: true })) ?? null;
}

/** The current version, read from its cache once per start of this worker (`promote` sets it). */
let currentSite;
async function current() {
  if (currentSite === undefined) {
    const hit = await (await caches.open(STATE_CACHE)).match(CURRENT_KEY);
    currentSite = hit ? await hit.text() : null;
  }
  return currentSite;
}

/**
 * Make `site` current once its cache holds every one of `urls` that belongs to the site: what
 * is missing is fetched, revalidated, and kept when the server says it is of `site`; a file
 * the server now serves as another version (it changed meanwhile), or one it could not be
 * asked for, leaves the current version as it was. Files without the header (the client's
 * data) are not the site's: their downloads are cancelled at the headers.
 * Resolves to `{ site, files, missing, promoted }`.
 */
async function promote(site, urls) {
  const cache = await caches.open(PREFIX + site);
  const missing = [];
  for (const url of new Set(urls)) {
    if (typeof url !== "string" || new URL(url).origin !== self.location.origin) continue;
    if (await cache.match(url, { ignoreVary: true })) continue;
    let response;
    try {
      response = await fetch(url, { cache: "no-cache" });
    } catch {
      missing.push(url);
      continue;
    }
    const of = response.headers.get(SITE_HEADER);
    if (of === site && response.status === 200) await cache.put(url, response);
    else {
      await response.body?.cancel().catch(() => {});
      if (of != null) missing.push(url);
    }
  }
  const promoted = missing.length === 0;
  if (promoted) {
    await (await caches.open(STATE_CACHE)).put(CURRENT_KEY, new Response(site));
    currentSite = site;
    liveSite = site;
    for (const name of await caches.keys()) {
      if (name.startsWith(PREFIX) && name !== PREFIX + site) await caches.delete(name);
    }
  }
  return { site, files: (await cache.keys()).length, missing, promoted };
}
