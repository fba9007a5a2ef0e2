//! A head trained by distillation on burn's autodiff: at each of a map's positions a 1×1
//! convolution and ReLU6, `relu6(x·W + b)`, averaged over the positions, predicts the
//! teacher's pooled features (the shape of the network's own head, on an earlier boundary),
//! and the teacher's own (frozen) classifier turns them into logits. The loss weighs both
//! targets:
//!
//! `‖h − h_t‖² / var(h_t) + λ · T² · KL(softmax(z_t / T) ‖ softmax(z / T))`, with `z = h·C + c`
//! the classifier's logits of the prediction and `z_t` the teacher's.
//!
//! Predicting features rather than classes keeps every one of the 1,000 classes within reach
//! of a head trained on photos of a few hundred (each dev photo is of its own class): the
//! feature target is the same kind of thing for every photo, and the classifier that reads it
//! is the teacher's.

use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Device, Tensor, TensorData};

/// The frozen classifier the head's features go through: `z = h·C + c`.
#[derive(Clone, Debug)]
pub struct Classifier {
    /// `[features, classes]`, row-major.
    pub weight: Vec<f32>,
    /// `[classes]`.
    pub bias: Vec<f32>,
    /// Its input width.
    pub features: usize,
    /// Its output width.
    pub classes: usize,
}

impl Classifier {
    /// From a PyTorch-layout `[classes, features]` weight (what the weights file holds).
    pub fn from_torch(weight: &[f32], bias: &[f32], classes: usize, features: usize) -> Self {
        let mut t = vec![0.0; weight.len()];
        for o in 0..classes {
            for i in 0..features {
                t[i * classes + o] = weight[o * features + i];
            }
        }
        Self { weight: t, bias: bias.to_vec(), features, classes }
    }
}

/// A batch of training examples, row-major: `x` `[n · positions, inputs]` (each example's
/// positions together), the teacher's features `[n, features]` and logits `[n, classes]`.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    /// Examples.
    pub n: usize,
    /// Positions of each example's map (1 for a pooled vector).
    pub positions: usize,
    /// The head's inputs.
    pub x: &'a [f32],
    /// The teacher's features.
    pub features: &'a [f32],
    /// The teacher's logits.
    pub logits: &'a [f32],
}

/// How the loss weighs its parts.
#[derive(Clone, Copy, Debug)]
pub struct Loss {
    /// The distillation temperature `T`.
    pub temperature: f32,
    /// `λ`: the logit term's weight beside the feature term.
    pub logit_weight: f32,
    /// `var(h_t)`: the teacher features' variance (the feature term is relative to it).
    pub feature_var: f32,
}

/// The head: `inputs → features` at each position, then the mean over positions.
#[derive(Clone, Debug)]
pub struct LinearHead {
    /// `[inputs, features]`, row-major.
    pub weight: Vec<f32>,
    /// `[features]`.
    pub bias: Vec<f32>,
    /// Input width.
    pub inputs: usize,
    /// Output width.
    pub features: usize,
}

/// A `[rows, columns]` tensor of `values` on `device`.
pub(crate) fn tensor2(values: &[f32], dims: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), dims), device)
}

/// A tensor's values, row-major.
pub(crate) fn values(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 values")
}

/// The index of the largest value (the top class of logits).
pub(crate) fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |p| p.0)
}

impl LinearHead {
    /// Zero weights, and the bias at `mean` (the teacher features' mean: the best constant).
    pub fn new(inputs: usize, mean: &[f32]) -> Self {
        Self {
            weight: vec![0.0; inputs * mean.len()],
            bias: mean.to_vec(),
            inputs,
            features: mean.len(),
        }
    }

    /// The predicted features of `n` examples of `positions` rows each (`x`: `[n ·
    /// positions, inputs]`), on any device.
    pub fn forward(&self, x: &[f32], n: usize, positions: usize, device: &Device) -> Vec<f32> {
        let w = tensor2(&self.weight, [self.inputs, self.features], device);
        let b = tensor2(&self.bias, [1, self.features], device);
        values(predict(w, b, x, n, positions, device))
    }

    /// The loss on `batch` and its gradient with respect to the weight and the bias, on an
    /// autodiff `device`.
    pub fn loss_and_gradient(
        &self,
        batch: Batch<'_>,
        classifier: &Classifier,
        loss: Loss,
        device: &Device,
    ) -> (f32, Vec<f32>, Vec<f32>) {
        let w = tensor2(&self.weight, [self.inputs, self.features], device).require_grad();
        let b = tensor2(&self.bias, [1, self.features], device).require_grad();
        let total = objective(w.clone(), b.clone(), batch, classifier, loss, device);
        let value = total.clone().into_data().try_to_vec::<f32>().expect("f32 loss")[0];
        let grads = total.backward();
        let gw = w.grad(&grads).expect("the weight is a tracked leaf");
        let gb = b.grad(&grads).expect("the bias is a tracked leaf");
        (value, values(gw), values(gb))
    }

    /// The loss on `batch` alone (no gradient), on any device.
    pub fn loss(
        &self,
        batch: Batch<'_>,
        classifier: &Classifier,
        loss: Loss,
        device: &Device,
    ) -> f32 {
        let w = tensor2(&self.weight, [self.inputs, self.features], device);
        let b = tensor2(&self.bias, [1, self.features], device);
        let total = objective(w, b, batch, classifier, loss, device);
        total.into_data().try_to_vec::<f32>().expect("f32 loss")[0]
    }
}

/// `mean over positions of relu6(x·W + b)`: `[n, features]`.
fn predict(
    w: Tensor<2>,
    b: Tensor<2>,
    x: &[f32],
    n: usize,
    positions: usize,
    device: &Device,
) -> Tensor<2> {
    let [inputs, features] = w.dims();
    let rows = tensor2(x, [n * positions, inputs], device);
    let h = (rows.matmul(w) + b).clamp(0.0, 6.0);
    h.reshape([n, positions, features]).mean_dim(1).reshape([n, features])
}

fn objective(
    w: Tensor<2>,
    b: Tensor<2>,
    batch: Batch<'_>,
    classifier: &Classifier,
    loss: Loss,
    device: &Device,
) -> Tensor<1> {
    let (n, f, k) = (batch.n, classifier.features, classifier.classes);
    let h = predict(w, b, batch.x, n, batch.positions, device);
    let target = tensor2(batch.features, [n, f], device);
    let feature_term = (h.clone() - target).square().mean() / loss.feature_var.max(1e-12);
    let z = h.matmul(tensor2(&classifier.weight, [f, k], device))
        + tensor2(&classifier.bias, [1, k], device);
    let t = loss.temperature;
    let teacher = softmax(tensor2(batch.logits, [n, k], device) / t, 1);
    // Cross-entropy against the teacher's softened answer: KL up to the teacher's entropy,
    // which has no gradient.
    let cross = -(teacher * log_softmax(z / t, 1)).sum_dim(1).mean() * (t * t);
    feature_term + cross * loss.logit_weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adam::Adam;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    /// A tiny teacher: features `3 + x·A`, logits through `classifier`; and `A`.
    fn problem(rng: &mut StdRng) -> (Vec<f32>, Vec<f32>, Vec<f32>, Classifier, usize, Vec<f32>) {
        let (n, inputs, features, classes) = (64, 5, 4, 6);
        // Features `3 + x·A` stay inside ReLU6's linear range (|x·A| ≤ 2.5).
        let a: Vec<f32> = random(inputs * features, rng).iter().map(|v| v * 0.5).collect();
        let x = random(n * inputs, rng);
        let classifier = Classifier {
            weight: random(features * classes, rng),
            bias: random(classes, rng),
            features,
            classes,
        };
        let mut h = vec![0.0; n * features];
        let mut z = vec![0.0; n * classes];
        for r in 0..n {
            for j in 0..features {
                h[r * features + j] =
                    3.0 + (0..inputs).map(|i| x[r * inputs + i] * a[i * features + j]).sum::<f32>();
            }
            for o in 0..classes {
                z[r * classes + o] = classifier.bias[o]
                    + (0..features)
                        .map(|j| h[r * features + j] * classifier.weight[j * classes + o])
                        .sum::<f32>();
            }
        }
        (x, h, z, classifier, n, a)
    }

    const LOSS: Loss = Loss { temperature: 2.0, logit_weight: 0.5, feature_var: 0.3 };

    /// Autodiff's gradient against central differences of the loss, for every parameter.
    #[test]
    fn the_gradient_matches_finite_differences() {
        let mut rng = StdRng::seed_from_u64(36);
        let (x, h, z, classifier, n, _) = problem(&mut rng);
        let batch = Batch { n, positions: 1, x: &x, features: &h, logits: &z };
        // Pre-activations inside ReLU6's open range, away from its kinks.
        let mut head = LinearHead::new(5, &[3.1, 2.8, 3.3, 3.0]);
        head.weight = random(head.weight.len(), &mut rng).iter().map(|w| w * 0.3).collect();
        let device = Device::flex().autodiff();
        let (_, gw, gb) = head.loss_and_gradient(batch, &classifier, LOSS, &device);
        let plain = Device::flex();
        let eps = 1e-2f32;
        let numeric = |head: &LinearHead, which: usize, i: usize| {
            let (mut up, mut down) = (head.clone(), head.clone());
            let (u, d) = if which == 0 {
                (&mut up.weight, &mut down.weight)
            } else {
                (&mut up.bias, &mut down.bias)
            };
            u[i] += eps;
            d[i] -= eps;
            (up.loss(batch, &classifier, LOSS, &plain)
                - down.loss(batch, &classifier, LOSS, &plain))
                / (2.0 * eps)
        };
        for (which, grad) in [(0, &gw), (1, &gb)] {
            for (i, g) in grad.iter().enumerate() {
                let want = numeric(&head, which, i);
                assert!(
                    (g - want).abs() <= 2e-3 + 2e-2 * want.abs(),
                    "parameter {which}/{i}: {g} vs {want}"
                );
            }
        }
    }

    /// Adam on the loss finds the teacher's map: the loss falls a hundredfold towards its
    /// floor (the teacher's own, where the cross-entropy keeps the teacher's entropy) and the
    /// head then names the teacher's top class for every row.
    #[test]
    fn the_loss_goes_down_and_the_head_learns_the_teacher() {
        let mut rng = StdRng::seed_from_u64(7);
        let (x, h, z, classifier, n, a) = problem(&mut rng);
        let batch = Batch { n, positions: 1, x: &x, features: &h, logits: &z };
        let mut head = LinearHead::new(5, &[3.0; 4]);
        let device = Device::flex().autodiff();
        let (first, ..) = head.loss_and_gradient(batch, &classifier, LOSS, &device);
        let (mut aw, mut ab) = (Adam::new(head.weight.len()), Adam::new(head.bias.len()));
        let mut last = first;
        for _ in 0..400 {
            let (l, gw, gb) = head.loss_and_gradient(batch, &classifier, LOSS, &device);
            aw.step(&mut head.weight, &gw, 0.05);
            ab.step(&mut head.bias, &gb, 0.05);
            last = l;
        }
        let exact = LinearHead { weight: a, bias: vec![3.0; 4], inputs: 5, features: 4 };
        let floor = exact.loss(batch, &classifier, LOSS, &Device::flex());
        assert!(last - floor < (first - floor) / 100.0, "{first} -> {last}, floor {floor}");
        let predicted = head.forward(&x, n, 1, &Device::flex());
        let argmax =
            |row: &[f32]| row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|p| p.0);
        let logits = |hs: &[f32]| -> Vec<f32> {
            (0..classifier.classes)
                .map(|o| {
                    classifier.bias[o]
                        + (0..4)
                            .map(|j| hs[j] * classifier.weight[j * classifier.classes + o])
                            .sum::<f32>()
                })
                .collect()
        };
        for r in 0..n {
            let mine = logits(&predicted[r * 4..r * 4 + 4]);
            assert_eq!(argmax(&mine), argmax(&z[r * 6..r * 6 + 6]), "row {r}");
        }
    }
}
