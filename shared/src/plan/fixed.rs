//! The device's fixed work per request: what a request costs the device beside the network's
//! stages (decoding and cropping the photo, coding the features, encoding cloud-only's upload).
//!
//! The edge factor scales the cost table's stage times to this device; these costs do not
//! follow the stages, so a single factor cannot price both. In the browser lab a block3 split
//! took 72-127 ms of device time where the table's stages to block3 are 11 ms, a ratio of
//! 6.6-11.6 against edge-only's 4.4 on the same device (docs/adaptive.md): folded into the
//! factor, the fixed part made edge-only look twice as slow as it ran. Measured apart, each
//! candidate carries its own as [`Candidate::edge_fixed_ms`].

use std::collections::{BTreeMap, VecDeque};

use super::monitor::{EDGE_WINDOW, lower_median};
use super::{Candidate, Placement};

/// The latest fixed costs measured on this device, ms.
#[derive(Clone, Debug, Default)]
pub(crate) struct FixedCosts {
    /// Local runs' work beside the stages, per boundary depth (edge-only at the logits' depth).
    local: BTreeMap<usize, VecDeque<f64>>,
    /// Cloud-only uploads' preparation.
    upload_prep: VecDeque<f64>,
}

fn push(window: &mut VecDeque<f64>, ms: f64) {
    if window.len() == EDGE_WINDOW {
        window.pop_front();
    }
    window.push_back(ms);
}

impl FixedCosts {
    /// A local run to `depth` spent `ms` beside its stages.
    pub(crate) fn observe_local(&mut self, depth: usize, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            push(self.local.entry(depth).or_default(), ms);
        }
    }

    /// Making a cloud-only upload took `ms`.
    pub(crate) fn observe_upload_prep(&mut self, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            push(&mut self.upload_prep, ms);
        }
    }

    /// Cloud-only's fixed cost: the median of the latest uploads' preparation.
    pub(crate) fn upload_prep(&self) -> Option<f64> {
        lower_median(self.upload_prep.iter().copied())
    }

    /// A local run's fixed cost at `depth`: the median of the runs to that depth; for a depth
    /// not run yet, of every local run (the photo's decoding dominates; the features' coding
    /// differs by boundary); before any local run, the upload's preparation, which decodes and
    /// crops the same photo.
    #[cfg(test)] // apply() computes the same with its fallbacks once for all candidates
    pub(crate) fn local(&self, depth: usize) -> Option<f64> {
        self.own(depth).or_else(|| self.pooled()).or_else(|| self.upload_prep())
    }

    /// Write the fixed costs into the candidates (nothing measured: 0, the table's view).
    pub(crate) fn apply(&self, candidates: &mut [Candidate]) {
        // The fallbacks, once for every candidate.
        let prep = self.upload_prep();
        let pooled = self.pooled().or(prep);
        for c in candidates {
            let fixed = match c.placement {
                Placement::CloudOnly => prep,
                _ => self.own(c.depth).or(pooled),
            };
            c.edge_fixed_ms = fixed.unwrap_or(0.0);
        }
    }

    /// The median of the runs to `depth`.
    fn own(&self, depth: usize) -> Option<f64> {
        self.local.get(&depth).and_then(|w| lower_median(w.iter().copied()))
    }

    /// The median of every local run.
    fn pooled(&self) -> Option<f64> {
        lower_median(self.local.values().flatten().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_depth_not_run_yet_borrows_from_those_that_were_then_from_the_upload() {
        let mut f = FixedCosts::default();
        assert_eq!(f.local(5), None);
        f.observe_upload_prep(30.0);
        assert_eq!(f.local(5), Some(30.0), "before any local run: the upload's preparation");
        for ms in [20.0, 22.0, 90.0] {
            f.observe_local(20, ms);
        }
        assert_eq!(f.local(20), Some(22.0), "the median, not the outlier");
        assert_eq!(f.local(5), Some(22.0), "another depth: every local run's median");
        f.observe_local(5, 40.0);
        assert_eq!(f.local(5), Some(40.0));
        assert_eq!(f.local(20), Some(22.0), "each depth keeps its own");
        f.observe_local(5, f64::NAN);
        f.observe_local(5, -1.0);
        assert_eq!(f.local(5), Some(40.0), "nonsense is ignored");
    }

    #[test]
    fn only_the_latest_runs_count() {
        let mut f = FixedCosts::default();
        for _ in 0..EDGE_WINDOW {
            f.observe_local(7, 100.0);
        }
        for _ in 0..=EDGE_WINDOW / 2 {
            f.observe_local(7, 10.0);
        }
        assert_eq!(f.local(7), Some(10.0));
    }
}
