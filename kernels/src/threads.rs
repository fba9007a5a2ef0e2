//! Splitting one kernel call across threads (builds with the `threads` feature: native, and the
//! browser module built for Web Worker threads).
//!
//! Each part computes a disjoint range of the output (pixel rows for 1x1 convs, output rows for
//! depthwise and the stem), so parts share nothing they write. Small calls stay on the calling
//! thread: below [`MIN_MACS_PER_PART`] the hand-off costs more than it saves.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Multiply-accumulates a part must have to be worth a thread (≈ 6 µs of work; the hand-off
/// to a spinning helper costs about a microsecond).
const MIN_MACS_PER_PART: usize = 1 << 18;

/// 0: every thread of rayon's pool; otherwise at most this many.
static MAX_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Limit the threads one kernel call may use (`0` = the machine's, or `RAYON_NUM_THREADS`).
/// Without the `threads` feature every call runs on the caller.
pub fn set_max_threads(n: usize) {
    MAX_THREADS.store(n, Ordering::Relaxed);
}

std::thread_local! {
    /// 0: no limit of this thread's own; otherwise its calls use at most this many threads.
    static THREAD_MAX: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Limit the threads the calling thread's kernel calls may use (`0` = no limit of its own;
/// [`set_max_threads`] still applies). For a thread that already has work for every core
/// beside it, such as one of several threads running batches of a language model's steps:
/// handing parts of its products to helpers that are busy elsewhere costs more than it saves.
pub fn set_thread_max_threads(n: usize) {
    THREAD_MAX.with(|m| m.set(n));
}

/// The helper threads beside the caller. Natively a pool of the crate's own, one thread fewer
/// than the machine's (the calling thread computes part 0 itself rather than sleeping while the
/// pool works).
#[cfg(all(feature = "threads", not(target_family = "wasm")))]
mod pool {
    struct Helpers {
        pool: rayon::ThreadPool,
        /// Threads a call may use in all: the helpers and the caller.
        threads: usize,
    }

    fn helpers() -> &'static Helpers {
        static HELPERS: std::sync::OnceLock<Helpers> = std::sync::OnceLock::new();
        HELPERS.get_or_init(|| {
            let threads = std::env::var("RAYON_NUM_THREADS")
                .ok()
                .and_then(|s| s.parse().ok())
                .filter(|&n: &usize| n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            // A pool needs a thread even on one core, where it stays idle: no call splits there.
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads.saturating_sub(1).max(1))
                .thread_name(|i| format!("split-kernels-{i}"))
                .build()
                .expect("a thread pool of at least one thread");
            Helpers { pool, threads }
        })
    }

    /// Threads a call may use: the helpers and the caller.
    pub(super) fn threads() -> usize {
        helpers().threads
    }

    /// Helper threads that can take parts.
    pub(super) fn helpers_available() -> usize {
        helpers().pool.current_num_threads()
    }

    pub(super) fn spawn(work: impl FnOnce() + Send + 'static) {
        helpers().pool.spawn(work);
    }
}

/// In a browser threads are Web Workers sharing the module's memory, which only JavaScript can
/// start: `wasm-edge` starts them as rayon's global pool and then calls [`use_worker_pool`].
/// Until then every call runs on the caller.
#[cfg(all(feature = "threads", target_family = "wasm"))]
mod pool {
    use std::sync::atomic::{AtomicUsize, Ordering};

    static HELPERS: AtomicUsize = AtomicUsize::new(0);

    pub(crate) fn use_worker_pool(helpers: usize) {
        HELPERS.store(helpers, Ordering::Relaxed);
    }

    pub(super) fn threads() -> usize {
        HELPERS.load(Ordering::Relaxed) + 1
    }

    pub(super) fn helpers_available() -> usize {
        HELPERS.load(Ordering::Relaxed)
    }

    pub(super) fn spawn(work: impl FnOnce() + Send + 'static) {
        rayon::spawn(work);
    }
}

/// Let kernel calls use rayon's global pool of `helpers` Web Workers (which the caller has
/// started: `wasm_bindgen_rayon::init_thread_pool`) beside the calling thread.
#[cfg(all(feature = "threads", target_family = "wasm"))]
pub fn use_worker_pool(helpers: usize) {
    pool::use_worker_pool(helpers);
}

/// The threads a call may use now.
pub fn max_threads() -> usize {
    #[cfg(feature = "threads")]
    {
        let all = pool::threads();
        let global = match MAX_THREADS.load(Ordering::Relaxed) {
            0 => all,
            n => n.min(all),
        };
        match THREAD_MAX.with(std::cell::Cell::get) {
            0 => global,
            n => n.min(global),
        }
    }
    #[cfg(not(feature = "threads"))]
    {
        1
    }
}

/// How many parts a call of `macs` work, divisible into `units` pieces, should run as.
pub(crate) fn parts(macs: usize, units: usize) -> usize {
    max_threads().min(macs / MIN_MACS_PER_PART).min(units).max(1)
}

/// `0..units` cut into `parts` contiguous ranges, part `i`.
pub(crate) fn range(units: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    (units * i / parts)..(units * (i + 1) / parts)
}

/// Run `f(0) .. f(parts - 1)`, in parallel where threads are available.
///
/// The caller takes parts itself until none is left, then spins (briefly, then yields) until
/// the helpers' parts are done: a kernel call lasts tens to hundreds of microseconds, about what
/// a sleeping thread takes to wake, so blocking on a condition variable (as a scope does from
/// outside the pool) would cost as much as the split saves. Parts are claimed from a counter,
/// so a helper that starts late finds nothing to do and the caller never waits on a part that
/// no thread has begun.
pub(crate) fn run_parts(parts: usize, f: impl Fn(usize) + Sync) {
    #[cfg(feature = "threads")]
    if parts > 1 {
        return shared_parts::run(parts, &f);
    }
    for i in 0..parts {
        f(i);
    }
}

#[cfg(feature = "threads")]
mod shared_parts {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// One call's parts, shared by the caller and the helpers it asked for.
    struct Parts {
        parts: usize,
        next: AtomicUsize,
        done: AtomicUsize,
        panicked: AtomicBool,
        /// The caller's closure with its lifetime erased; see the SAFETY notes below.
        f: *const (dyn Fn(usize) + Sync),
    }

    // SAFETY: `f` points to a `Sync` closure; it is only called between a successful claim
    // and the matching `done` increment, while the caller is still waiting (see `run`).
    unsafe impl Send for Parts {}
    // SAFETY: as for `Send`; the counters are atomics.
    unsafe impl Sync for Parts {}

    impl Parts {
        /// Claim and run parts until none is left.
        fn work(&self) {
            loop {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= self.parts {
                    return;
                }
                // SAFETY: part `i` was claimed and `done` has not reached `parts`, so the
                // caller is still inside `run` and the closure behind `f` is alive.
                let f = unsafe { &*self.f };
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).is_err() {
                    self.panicked.store(true, Ordering::Relaxed);
                }
                self.done.fetch_add(1, Ordering::Release);
            }
        }
    }

    pub(super) fn run(parts: usize, f: &(dyn Fn(usize) + Sync)) {
        // SAFETY: only the lifetime is erased (same fat-pointer layout); `run` does not return
        // before every claimed part has finished, and no part is claimed after that.
        let f: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        let shared = Arc::new(Parts {
            parts,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            f,
        });
        for _ in 1..parts.min(super::pool::helpers_available() + 1) {
            let shared = Arc::clone(&shared);
            super::pool::spawn(move || shared.work());
        }
        shared.work();
        let mut spins = 0u32;
        while shared.done.load(Ordering::Acquire) < parts {
            if spins < 20_000 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        if shared.panicked.load(Ordering::Relaxed) {
            panic!("a kernel part panicked on a helper thread");
        }
    }
}
