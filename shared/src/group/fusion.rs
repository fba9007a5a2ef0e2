//! Fusing several devices' answers about one object (two cameras on it, different crops of
//! one photo) into one top-k list.
//!
//! Each device sends only its top-k (what a reply frame carries), so a class outside a
//! device's list counts as probability 0 there: the fused probability of a class is a lower
//! bound, exact for the classes every device listed. Two rules:
//!
//! - [`Rule::Mean`]: the average of the devices' probabilities. Every view counts the same:
//!   the safe choice when the views are equally good.
//! - [`Rule::Confidence`]: each device's probabilities weighted by its own top-1 probability,
//!   so a clear view outweighs a blurred or badly framed one that spreads its answer.
//!
//! `./run.sh fusion` measures both against single views on the dev set (docs/multi-device.md).

use crate::labels::Prediction;

/// How several answers become one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The mean of the probabilities.
    Mean,
    /// Weighted by each view's top-1 probability.
    Confidence,
}

impl std::str::FromStr for Rule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mean" => Ok(Self::Mean),
            "confidence" => Ok(Self::Confidence),
            other => Err(format!("unknown fusion rule {other:?}; use \"mean\" or \"confidence\"")),
        }
    }
}

/// The fused top-`k` of `views` (each a top list, best first) under `rule`; empty without
/// views. Ties keep the lower class id first.
pub fn fuse(views: &[Vec<Prediction>], rule: Rule, k: usize) -> Vec<Prediction> {
    let weights: Vec<f64> = views
        .iter()
        .map(|v| match rule {
            Rule::Mean => 1.0,
            Rule::Confidence => v.first().map_or(0.0, |p| f64::from(p.prob).max(0.0)),
        })
        .collect();
    let total: f64 = weights.iter().sum();
    if total <= 0.0 || !total.is_finite() {
        return Vec::new();
    }
    let mut sums: std::collections::BTreeMap<u16, f64> = std::collections::BTreeMap::new();
    for (view, w) in views.iter().zip(&weights) {
        for p in view {
            if p.prob.is_finite() {
                *sums.entry(p.class).or_default() += w * f64::from(p.prob);
            }
        }
    }
    let mut fused: Vec<Prediction> =
        sums.into_iter().map(|(class, s)| Prediction { class, prob: (s / total) as f32 }).collect();
    fused.sort_by(|a, b| b.prob.total_cmp(&a.prob).then(a.class.cmp(&b.class)));
    fused.truncate(k);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(class: u16, prob: f32) -> Prediction {
        Prediction { class, prob }
    }

    #[test]
    fn the_mean_adds_what_views_agree_on() {
        // Two views disagree on top-1 but both list 282 high: the mean picks it.
        let a = vec![p(281, 0.5), p(282, 0.4), p(7, 0.1)];
        let b = vec![p(285, 0.45), p(282, 0.44), p(281, 0.05)];
        let fused = fuse(&[a, b], Rule::Mean, 3);
        assert_eq!(fused[0].class, 282);
        assert!((fused[0].prob - 0.42).abs() < 1e-6);
        assert_eq!(fused.iter().map(|p| p.class).collect::<Vec<_>>(), vec![282, 281, 285]);
    }

    #[test]
    fn confidence_lets_a_clear_view_outweigh_a_vague_one() {
        let clear = vec![p(1, 0.9), p(2, 0.05)];
        let vague = vec![p(2, 0.3), p(3, 0.25), p(1, 0.2)];
        assert_eq!(fuse(&[clear.clone(), vague.clone()], Rule::Confidence, 1)[0].class, 1);
        // The mean agrees here, but weights differ: 0.9 against 0.3.
        let c = fuse(&[clear, vague], Rule::Confidence, 5);
        let expected = (0.9 * 0.9 + 0.3 * 0.2) / 1.2;
        assert!((f64::from(c[0].prob) - expected).abs() < 1e-6);
    }

    #[test]
    fn one_view_is_itself_and_nothing_is_nothing() {
        let a = vec![p(10, 0.7), p(11, 0.2)];
        assert_eq!(fuse(std::slice::from_ref(&a), Rule::Mean, 5), a);
        assert_eq!(fuse(std::slice::from_ref(&a), Rule::Confidence, 5), a);
        assert!(fuse(&[], Rule::Mean, 5).is_empty());
        assert!(fuse(&[vec![]], Rule::Confidence, 5).is_empty());
        assert_eq!("confidence".parse::<Rule>(), Ok(Rule::Confidence));
        assert!("max".parse::<Rule>().is_err());
    }
}
