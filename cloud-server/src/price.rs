//! The server's congestion price: what a millisecond of its compute costs a client now,
//! published in every reply and pong (`ServerLoad::price_milli`) and in `/api/info`.
//!
//! The queue a reply reports is instantaneous: after a burst every client sees a long queue at
//! once and the slow ones flee to their own compute together (docs/adaptive.md, "Many clients on
//! one busy server"). The price smooths it: an exponential average, over `--price-smoothing-s`,
//! of the requests ahead of a new one per worker, `u`; the price is `schedule(hour) × (1 + ū)`
//! (1 on an idle server by day; 2 when every worker has had a request waiting for the whole
//! window). The schedule (`--price-schedule`, UTC hours) lets an operator make the server
//! cheaper when it is idle by design, at night.

use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// One stretch of the day with its factor.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PriceHours {
    /// First hour (UTC) it applies to, 0..24.
    pub from_hour: u8,
    /// The hour it ends before, 1..=24.
    pub to_hour: u8,
    /// The factor.
    pub factor: f64,
}

/// `--price-schedule`: `"0-7:0.5,23-24:0.5"` (hours not named cost 1).
///
/// # Errors
/// A stretch that is not `FROM-TO:FACTOR` with `0 <= FROM < TO <= 24` and a factor above 0,
/// or stretches that overlap.
pub fn parse_schedule(text: &str) -> Result<Vec<PriceHours>, String> {
    let mut out: Vec<PriceHours> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?}: FROM-TO:FACTOR, hours 0..=24 (UTC), a factor above 0");
        let (hours, factor) = part.split_once(':').ok_or_else(bad)?;
        let (from, to) = hours.split_once('-').ok_or_else(bad)?;
        let (from, to): (u8, u8) =
            (from.trim().parse().map_err(|_| bad())?, to.trim().parse().map_err(|_| bad())?);
        let factor: f64 = factor.trim().parse().map_err(|_| bad())?;
        if from >= to || to > 24 || !(factor.is_finite() && factor > 0.0) {
            return Err(bad());
        }
        if out.iter().any(|h| from < h.to_hour && h.from_hour < to) {
            return Err(format!("{part:?} overlaps another stretch"));
        }
        out.push(PriceHours { from_hour: from, to_hour: to, factor });
    }
    Ok(out)
}

/// The smoothed load and the schedule.
#[derive(Debug)]
pub struct Pricing {
    schedule: Vec<PriceHours>,
    smoothing_s: f64,
    /// When the average was last moved, and the average.
    state: Mutex<Option<(Instant, f64)>>,
}

impl Pricing {
    /// A price smoothed over `smoothing_s` (0: the instantaneous load) on `schedule`.
    pub fn new(schedule: Vec<PriceHours>, smoothing_s: f64) -> Self {
        Self { schedule, smoothing_s: smoothing_s.max(0.0), state: Mutex::new(None) }
    }

    /// The schedule's stretches.
    pub fn schedule(&self) -> &[PriceHours] {
        &self.schedule
    }

    /// The averaging window, s.
    pub fn smoothing_s(&self) -> f64 {
        self.smoothing_s
    }

    /// The schedule's factor at `hour` (UTC).
    pub fn factor(&self, hour: u8) -> f64 {
        self.schedule
            .iter()
            .find(|h| h.from_hour <= hour && hour < h.to_hour)
            .map_or(1.0, |h| h.factor)
    }

    /// Move the average to `now` with `ahead_per_worker` (the requests ahead of a new one over
    /// the workers) seen since the last call, and the price at UTC `hour`.
    pub fn price(&self, now: Instant, ahead_per_worker: f64, hour: u8) -> f64 {
        let u = ahead_per_worker.max(0.0);
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let average = match *state {
            Some((then, avg)) if self.smoothing_s > 0.0 => {
                let dt = now.saturating_duration_since(then).as_secs_f64();
                avg + (1.0 - (-dt / self.smoothing_s).exp()) * (u - avg)
            }
            _ => u,
        };
        *state = Some((now, average));
        self.factor(hour) * (1.0 + average)
    }
}

/// The hour of the day, UTC, now.
pub fn utc_hour() -> u8 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ((secs / 3600) % 24) as u8
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn schedules_parse_and_bad_ones_are_refused() {
        let s = parse_schedule("0-7:0.5, 23-24:0.25").unwrap();
        assert_eq!(s.len(), 2);
        let p = Pricing::new(s, 10.0);
        assert_eq!((p.factor(0), p.factor(6), p.factor(7), p.factor(23)), (0.5, 0.5, 1.0, 0.25));
        assert!(parse_schedule("").unwrap().is_empty());
        for bad in ["7-3:1", "0-25:1", "0-7:0", "0-7", "a-b:1", "0-7:1,6-8:2", "0-7:nan"] {
            assert!(parse_schedule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_price_follows_the_load_smoothly() {
        let p = Pricing::new(Vec::new(), 10.0);
        let t0 = Instant::now();
        // The first reading is the load itself; an idle server costs 1.
        assert_eq!(p.price(t0, 0.0, 12), 1.0);
        // A burst of 4 requests a worker for a second moves the average a tenth of the way.
        let burst = p.price(t0 + Duration::from_secs(1), 4.0, 12);
        assert!((burst - (1.0 + 4.0 * (1.0 - (-0.1f64).exp()))).abs() < 1e-9, "{burst}");
        assert!(burst < 1.5, "one burst does not double the price");
        // A sustained queue of 1 a worker takes the price to 2 over the window.
        let mut t = t0 + Duration::from_secs(1);
        let mut last = burst;
        for _ in 0..60 {
            t += Duration::from_secs(1);
            last = p.price(t, 1.0, 12);
        }
        assert!((last - 2.0).abs() < 0.01, "{last}");
        // No smoothing: the instantaneous load; the schedule scales it.
        let raw = Pricing::new(parse_schedule("0-6:0.5").unwrap(), 0.0);
        assert_eq!(raw.price(t0, 3.0, 2), 2.0);
        assert_eq!(raw.price(t0, 3.0, 9), 4.0);
    }
}
