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

/// The calling thread's own limit ([`set_thread_max_threads`]; 0: none).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn thread_max_threads() -> usize {
    THREAD_MAX.with(std::cell::Cell::get)
}

/// The helper threads beside the caller. Natively threads of the crate's own, one fewer than
/// the machine's (the calling thread computes part 0 itself rather than sleeping while the
/// helpers work), that spin a while for the next call before they sleep: a language model's
/// decode step is some two hundred products of 20–300 µs with a few microseconds between them,
/// and waking a sleeping thread for each (what a rayon pool's idle workers need) cost more than
/// splitting them saved.
#[cfg(all(feature = "threads", not(target_family = "wasm")))]
mod pool {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
    use std::time::{Duration, Instant};

    /// How long an idle helper watches for the next call before it sleeps: many times the gaps
    /// between one step's products, far less than the time between two answers (then the core
    /// is free again).
    const SPIN: Duration = Duration::from_micros(500);

    /// A call's work offered to the helpers: each of the first `wanted` helpers to see it runs
    /// `work` once.
    struct Offer {
        work: Box<dyn Fn() + Send + Sync>,
        wanted: AtomicUsize,
    }

    struct Helpers {
        /// Threads a call may use in all: the helpers and the caller.
        threads: usize,
        /// The newest offer and its number (the number mirrored in `newest` for the spinners).
        offer: Mutex<(u64, Option<Arc<Offer>>)>,
        newest: AtomicU64,
        /// Sleeping helpers wait here for a new offer.
        wake: Condvar,
        asleep: AtomicUsize,
    }

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn helpers() -> &'static Helpers {
        static HELPERS: OnceLock<&'static Helpers> = OnceLock::new();
        HELPERS.get_or_init(|| {
            let threads = std::env::var("RAYON_NUM_THREADS")
                .ok()
                .and_then(|s| s.parse().ok())
                .filter(|&n: &usize| n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let helpers: &'static Helpers = Box::leak(Box::new(Helpers {
                threads,
                offer: Mutex::new((0, None)),
                newest: AtomicU64::new(0),
                wake: Condvar::new(),
                asleep: AtomicUsize::new(0),
            }));
            for i in 1..threads {
                // A helper that cannot be started leaves its parts to the caller.
                let _ = std::thread::Builder::new()
                    .name(format!("split-kernels-{i}"))
                    .spawn(move || helper(helpers));
            }
            helpers
        })
    }

    /// A helper's life: watch for an offer (spinning, then asleep), take it if it is still
    /// wanted, run it, watch again.
    fn helper(h: &'static Helpers) {
        let mut seen = 0u64;
        loop {
            let since = Instant::now();
            let mut spins = 0u32;
            while h.newest.load(Ordering::Acquire) == seen {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(64) && since.elapsed() >= SPIN {
                    let mut offer = lock(&h.offer);
                    h.asleep.fetch_add(1, Ordering::SeqCst);
                    while offer.0 == seen {
                        offer = h.wake.wait(offer).unwrap_or_else(|e| e.into_inner());
                    }
                    h.asleep.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
                std::hint::spin_loop();
            }
            let (number, offer) = {
                let offer = lock(&h.offer);
                (offer.0, offer.1.clone())
            };
            seen = number;
            let Some(offer) = offer else { continue };
            let taken = offer
                .wanted
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok();
            if taken {
                (offer.work)();
            }
        }
    }

    /// Threads a call may use: the helpers and the caller.
    pub(super) fn threads() -> usize {
        helpers().threads
    }

    /// Helper threads that can take parts.
    pub(super) fn helpers_available() -> usize {
        helpers().threads - 1
    }

    /// Have `helpers` of the helpers run `work` once each (fewer when fewer see it before the
    /// next offer replaces it: `work` must not need them).
    pub(super) fn offer(helpers: usize, work: impl Fn() + Send + Sync + 'static) {
        let h = self::helpers();
        let offer = Arc::new(Offer { work: Box::new(work), wanted: AtomicUsize::new(helpers) });
        {
            let mut slot = lock(&h.offer);
            slot.0 += 1;
            slot.1 = Some(offer);
            h.newest.store(slot.0, Ordering::Release);
        }
        if h.asleep.load(Ordering::SeqCst) > 0 {
            h.wake.notify_all();
        }
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

    pub(super) fn offer(helpers: usize, work: impl Fn() + Send + Sync + 'static) {
        let work = std::sync::Arc::new(work);
        for _ in 0..helpers {
            let work = std::sync::Arc::clone(&work);
            rayon::spawn(move || work());
        }
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
        let helpers = (parts - 1).min(super::pool::helpers_available());
        if helpers > 0 {
            let offered = Arc::clone(&shared);
            super::pool::offer(helpers, move || offered.work());
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

#[cfg(all(test, feature = "threads"))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Every part of every call runs exactly once, from several calling threads at once (their
    /// offers replace each other's in the helpers' slot).
    #[test]
    fn every_part_runs_once_from_several_callers() {
        let callers: Vec<_> = (0..3)
            .map(|c| {
                std::thread::spawn(move || {
                    for call in 0..300 {
                        let parts = 1 + (call + c) % 5;
                        let runs: Vec<AtomicUsize> =
                            (0..parts).map(|_| AtomicUsize::new(0)).collect();
                        run_parts(parts, |i| {
                            runs[i].fetch_add(1, Ordering::Relaxed);
                        });
                        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().expect("a caller panicked");
        }
    }

    /// Helpers that went to sleep between calls are woken for the next one: with a part long
    /// enough that the caller is busy with its own, another thread takes the other.
    #[test]
    fn sleeping_helpers_wake_for_a_call() {
        if max_threads() < 2 {
            eprintln!("one thread here: no helper to wake");
            return;
        }
        let mut helped = 0;
        for _ in 0..10 {
            // Longer than a helper spins before it sleeps.
            std::thread::sleep(std::time::Duration::from_millis(3));
            let caller = std::thread::current().id();
            let others = AtomicUsize::new(0);
            run_parts(2, |_| {
                if std::thread::current().id() != caller {
                    others.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            });
            helped += others.load(Ordering::Relaxed);
        }
        assert!(helped > 0, "no part of 10 calls ran on a helper");
    }

    /// A part that panics on a helper panics the call, and the helpers go on serving.
    #[test]
    fn a_part_that_panics_fails_the_call() {
        let outcome = std::panic::catch_unwind(|| {
            run_parts(4, |i| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                assert!(i != 3, "part 3 fails");
            })
        });
        assert!(outcome.is_err());
        let runs = AtomicUsize::new(0);
        run_parts(4, |_| {
            runs.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 4);
    }
}
