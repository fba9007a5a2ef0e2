//! Splitting one kernel call across threads (native builds with the `threads` feature).
//!
//! Each part computes a disjoint range of the output (pixel rows for 1x1 convs, channels for
//! depthwise and the stem), so parts share nothing they write. Small calls stay on the calling
//! thread: below [`MIN_MACS_PER_PART`] the hand-off costs more than it saves.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Multiply-accumulates a part must have to be worth a thread (≈ 20 µs of work).
const MIN_MACS_PER_PART: usize = 1 << 20;

/// 0: every thread of rayon's pool; otherwise at most this many.
static MAX_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Limit the threads one kernel call may use (`0` = all of rayon's global pool, which
/// `RAYON_NUM_THREADS` sizes). Without the `threads` feature every call runs on the caller.
pub fn set_max_threads(n: usize) {
    MAX_THREADS.store(n, Ordering::Relaxed);
}

/// The threads a call may use now.
pub fn max_threads() -> usize {
    #[cfg(feature = "threads")]
    {
        let pool = rayon::current_num_threads();
        match MAX_THREADS.load(Ordering::Relaxed) {
            0 => pool,
            n => n.min(pool),
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
pub(crate) fn run_parts(parts: usize, f: impl Fn(usize) + Sync) {
    #[cfg(feature = "threads")]
    if parts > 1 {
        let f = &f;
        rayon::scope(|s| {
            for i in 1..parts {
                s.spawn(move |_| f(i));
            }
            f(0);
        });
        return;
    }
    for i in 0..parts {
        f(i);
    }
}
