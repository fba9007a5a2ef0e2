// Requests answered on the device while the server could not be reached, kept to be finished
// by the server when the link returns.
//
// An entry holds what the server needs and nothing more: the features frame at the split
// (already compressed by the codec: 10 KB at block5 q6, not the photo), the split and codec,
// and the reduced answer given meanwhile. Entries live in IndexedDB, so a reload or a crash
// during an outage loses none; where IndexedDB is missing (or refused, as in some private
// modes) they live in memory for the page's lifetime. The backlog is bounded in count and
// bytes: beyond either, the oldest entries are dropped (and counted), never the new one.

/** The most entries kept. */
export const MAX_BACKLOG_ENTRIES = 64;
/** The most bytes of frames kept (64 block5 q6 frames are 0.7 MB). */
export const MAX_BACKLOG_BYTES = 8 * 1024 * 1024;

const DB_NAME = "split-inference";
const STORE = "backlog";

function openDb(name) {
  return new Promise((resolve) => {
    if (typeof indexedDB === "undefined") return resolve(null);
    let request;
    try {
      request = indexedDB.open(name, 1);
    } catch {
      return resolve(null);
    }
    request.onupgradeneeded = () => request.result.createObjectStore(STORE, { keyPath: "id" });
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => resolve(null);
    request.onblocked = () => resolve(null);
  });
}

/** Run `f(store)` in one transaction; resolves when it commits. */
function transact(db, mode, f) {
  return new Promise((resolve, reject) => {
    const tx = db.transaction(STORE, mode);
    const result = f(tx.objectStore(STORE));
    tx.oncomplete = () => resolve(result?.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

export class Backlog {
  /** The backlog of this origin (IndexedDB database `name`), or one in memory where that is
   * unavailable. */
  static async open(name = DB_NAME) {
    const backlog = new Backlog(await openDb(name));
    if (backlog.db) {
      try {
        backlog.entries = await transact(backlog.db, "readonly", (s) => s.getAll());
      } catch {
        backlog.db = null; // unusable: keep them in memory
      }
    }
    backlog.entries.sort((a, b) => a.createdAt - b.createdAt || a.seq - b.seq);
    return backlog;
  }

  constructor(db) {
    this.db = db;
    /** Entries, oldest first (a copy of what the database holds). */
    this.entries = [];
    /** Entries dropped to stay within the bounds, since the backlog was opened. */
    this.dropped = 0;
    this.seq = 0;
  }

  /** Whether entries survive a reload (IndexedDB), rather than living in memory. */
  get persistent() {
    return this.db != null;
  }

  get size() {
    return this.entries.length;
  }

  get bytes() {
    return this.entries.reduce((sum, e) => sum + e.frame.length, 0);
  }

  /** What a page shows: `{ entries, bytes, dropped, persistent }`. */
  describe() {
    return { entries: this.size, bytes: this.bytes, dropped: this.dropped, persistent: this.persistent };
  }

  /**
   * Keep `entry` (`{ id, frame, split, codec, top, model, createdAt, label }`); drops the oldest
   * entries while the bounds are exceeded. An entry with an id already kept is not added twice.
   */
  async add(entry) {
    if (this.entries.some((e) => e.id === entry.id)) return;
    entry = { ...entry, seq: this.seq++ };
    this.entries.push(entry);
    const evicted = [];
    while (this.entries.length > MAX_BACKLOG_ENTRIES || (this.bytes > MAX_BACKLOG_BYTES && this.entries.length > 1)) {
      evicted.push(this.entries.shift());
    }
    this.dropped += evicted.length;
    if (!this.db) return;
    try {
      await transact(this.db, "readwrite", (s) => {
        for (const e of evicted) s.delete(e.id);
        s.put(entry);
      });
    } catch {
      // Over quota: the entry stays in memory for this page's lifetime.
    }
  }

  /** Forget the entry `id` (finished, or given up). */
  async remove(id) {
    this.entries = this.entries.filter((e) => e.id !== id);
    if (!this.db) return;
    try {
      await transact(this.db, "readwrite", (s) => s.delete(id));
    } catch {
      // Left in the database: finishing it again after a reload is harmless (same answer).
    }
  }

  /** The oldest entry, or undefined. */
  first() {
    return this.entries[0];
  }
}
