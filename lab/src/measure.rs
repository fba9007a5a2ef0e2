//! Small measuring helpers shared by the benchmarks and the lab.

use std::time::Instant;

use serde::Deserialize;

/// Median ms of `f` over `repeats` runs after two warm-up runs.
pub fn median_ms(f: impl FnMut(), repeats: usize) -> f64 {
    let mut t = times_ms(f, repeats);
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// The times of `repeats` runs of `f` after two untimed ones, ms.
pub fn times_ms(mut f: impl FnMut(), repeats: usize) -> Vec<f64> {
    for _ in 0..2 {
        f();
    }
    (0..repeats)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

/// NaN: the serde default of a figure older reports lack.
pub fn nan() -> f64 {
    f64::NAN
}

/// serde_json writes NaN (a figure that could not be measured) as `null`; read it back as NaN.
///
/// # Errors
/// When the value is neither a number nor null.
pub fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// CPU time (user + system) this process has used, ms.
pub fn self_cpu_ms() -> f64 {
    crate::process_cpu_ms(std::process::id()).unwrap_or(f64::NAN)
}
