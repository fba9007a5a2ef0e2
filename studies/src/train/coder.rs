//! The learned bottleneck's parts: an encoder `c → c′` and a decoder `c′ → c` applied at every
//! position of a boundary's map (1×1 convolutions, as matrices over position-major rows), each
//! a stack of dense layers with ReLU between them (one layer: linear); the codes' uniform
//! quantization; and what the codes cost once entropy coded.

use burn::tensor::{Device, Gradients, Tensor, activation::relu};
use rand::Rng;
use rand::rngs::StdRng;

use super::head::{tensor2, values};
use crate::adam::Adam;

/// One dense layer: `[inputs, outputs]` weights and a bias.
#[derive(Clone)]
struct Dense {
    w: Vec<f32>,
    b: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl Dense {
    /// Weights uniform in ±√(3 / inputs) (unit variance through a layer), the bias `bias`.
    fn new(inputs: usize, outputs: usize, bias: Vec<f32>, rng: &mut StdRng) -> Self {
        let r = (3.0 / inputs as f32).sqrt();
        let w = (0..inputs * outputs).map(|_| rng.random_range(-r..r)).collect();
        Self { w, b: bias, inputs, outputs }
    }
}

/// The encoder's and the decoder's layers.
#[derive(Clone)]
pub(super) struct Coder {
    layers: Vec<Dense>,
    /// How many of `layers` are the encoder's.
    encoder: usize,
    pub c: usize,
    pub k: usize,
}

/// The parameters as tracked leaves: each layer's weights and bias, in order.
pub(super) type Leaves = Vec<Tensor<2>>;

impl Coder {
    /// `c → [hidden →] k → [hidden →] c`; the decoder's last bias starts at `mean` (the map's
    /// mean per channel: the best constant).
    pub fn new(c: usize, k: usize, hidden: usize, mean: Vec<f32>, rng: &mut StdRng) -> Self {
        let widths: Vec<usize> =
            if hidden == 0 { vec![c, k, c] } else { vec![c, hidden, k, hidden, c] };
        let encoder = widths.len() / 2;
        let last = widths.len() - 2;
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let bias = if i == last { mean.clone() } else { vec![0.0; w[1]] };
                Dense::new(w[0], w[1], bias, rng)
            })
            .collect();
        Self { layers, encoder, c, k }
    }

    /// One Adam state per parameter tensor, in the order of [`Self::leaves`].
    pub fn optimizers(&self) -> Vec<Adam> {
        self.layers.iter().flat_map(|l| [Adam::new(l.w.len()), Adam::new(l.b.len())]).collect()
    }

    /// The parameters as tracked leaves on an autodiff `device`.
    pub fn leaves(&self, device: &Device) -> Leaves {
        self.layers
            .iter()
            .flat_map(|l| {
                [
                    tensor2(&l.w, [l.inputs, l.outputs], device).require_grad(),
                    tensor2(&l.b, [1, l.outputs], device).require_grad(),
                ]
            })
            .collect()
    }

    /// The parameters as constants on `device` (inference).
    fn constants(&self, device: &Device) -> Leaves {
        self.layers
            .iter()
            .flat_map(|l| {
                [
                    tensor2(&l.w, [l.inputs, l.outputs], device),
                    tensor2(&l.b, [1, l.outputs], device),
                ]
            })
            .collect()
    }

    /// Rows `[n, c]` to codes `[n, k]` with the parameters `p`.
    pub fn encode_with(&self, p: &Leaves, x: Tensor<2>) -> Tensor<2> {
        run(&p[..2 * self.encoder], x)
    }

    /// Codes `[n, k]` to rows `[n, c]` with the parameters `p`.
    pub fn decode_with(&self, p: &Leaves, z: Tensor<2>) -> Tensor<2> {
        run(&p[2 * self.encoder..], z)
    }

    /// One Adam step of every parameter along its gradient in `grads`.
    pub fn step(&mut self, leaves: &Leaves, grads: &Gradients, adams: &mut [Adam], lr: f32) {
        let params = self.layers.iter_mut().flat_map(|l| [&mut l.w, &mut l.b]);
        for ((leaf, adam), param) in leaves.iter().zip(adams).zip(params) {
            let g = values(leaf.grad(grads).expect("a tracked leaf"));
            adam.step(param, &g, lr);
        }
    }

    /// The codec's form of this coder: the same layers, as `learned<bits>` frames run them.
    pub fn to_codec(&self) -> split_shared::codec::LearnedCoder {
        use split_shared::codec::learned::Dense as Layer;
        let layers = self.layers.iter().map(|l| Layer { w: l.w.clone(), b: l.b.clone() }).collect();
        split_shared::codec::LearnedCoder::new(layers, self.encoder)
            .expect("a trained coder's layers chain")
    }

    /// Position-major rows to codes, on the plain device.
    pub fn encode(&self, x: &[f32], device: &Device) -> Vec<f32> {
        let n = x.len() / self.c;
        values(self.encode_with(&self.constants(device), tensor2(x, [n, self.c], device)))
    }

    /// Codes back to rows, on the plain device.
    pub fn decode(&self, z: &[f32], device: &Device) -> Vec<f32> {
        let n = z.len() / self.k;
        values(self.decode_with(&self.constants(device), tensor2(z, [n, self.k], device)))
    }
}

/// Dense layers (weights and bias pairs in `p`) with ReLU between them, none after the last.
fn run(p: &[Tensor<2>], mut x: Tensor<2>) -> Tensor<2> {
    let layers = p.len() / 2;
    for (i, wb) in p.chunks(2).enumerate() {
        x = x.matmul(wb[0].clone()) + wb[1].clone();
        if i + 1 < layers {
            x = relu(x);
        }
    }
    x
}

/// What codes cost while they are learnt, bits per code value (the mean over `z`, `[n, k]`,
/// the codes with the training's uniform noise of one step): each code's values priced by a
/// logistic density with the batch's mean and spread, integrated over one step (`steps`, per
/// code) around each value, `−log₂` of that. Differentiable, so the rate can be a term of the
/// loss; [`LevelModel`] is what the frozen codes then cost.
pub(super) fn rate_bits(z: Tensor<2>, steps: &[f32]) -> Tensor<1> {
    use burn::tensor::activation::sigmoid;
    let [_, k] = z.dims();
    let mean = z.clone().mean_dim(0);
    let spread = (z.clone() - mean.clone()).square().mean_dim(0).sqrt()
        * (3f32.sqrt() / std::f32::consts::PI)
        + 1e-6;
    let half = tensor2(steps, [1, k], &z.device()) / 2.0;
    let centred = z - mean;
    let p = sigmoid((centred.clone() + half.clone()) / spread.clone())
        - sigmoid((centred - half) / spread);
    -(p.clamp_min(1e-9).log().mean() / std::f32::consts::LN_2)
}

/// Each code's quantization range: its 0.1st and 99.9th percentiles over `codes` (`k` per row).
pub(super) fn ranges(codes: &[f32], k: usize) -> Vec<(f32, f32)> {
    (0..k)
        .map(|j| {
            let mut v: Vec<f32> = codes.iter().skip(j).step_by(k).copied().collect();
            v.sort_by(f32::total_cmp);
            let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
            (at(0.001), at(0.999))
        })
        .collect()
}

/// Each code's level (`0..2^bits`, uniform steps over its range); `z` becomes the values the
/// levels stand for.
pub(super) fn quantize(z: &mut [f32], ranges: &[(f32, f32)], bits: u32) -> Vec<u16> {
    let top = ((1u32 << bits) - 1) as f32;
    z.iter_mut()
        .enumerate()
        .map(|(i, v)| {
            let (lo, hi) = ranges[i % ranges.len()];
            let step = ((hi - lo) / top).max(1e-12);
            let level = ((*v - lo) / step).round().clamp(0.0, top);
            *v = lo + level * step;
            level as u16
        })
        .collect()
}

/// A static entropy model of the levels: per code, the frequency of each level over the
/// training codes (plus one half, so that no level is impossible). The bits it spends on a
/// photo's levels are what an arithmetic coder with these tables (shipped once, like the
/// codecs' calibration) spends, within a few bytes per frame.
pub(super) struct LevelModel {
    /// `-log2 p` of each level, per code.
    cost: Vec<Vec<f64>>,
}

impl LevelModel {
    /// From training levels (`k` per row) at `bits`.
    pub fn fit(levels: &[u16], k: usize, bits: u32) -> Self {
        let n = 1usize << bits;
        let mut counts = vec![vec![0.5f64; n]; k];
        for (i, &l) in levels.iter().enumerate() {
            counts[i % k][usize::from(l)] += 1.0;
        }
        let cost = counts
            .into_iter()
            .map(|c| {
                let total: f64 = c.iter().sum();
                c.into_iter().map(|x| -(x / total).log2()).collect()
            })
            .collect();
        Self { cost }
    }

    /// The bits these levels (`k` per row, as fitted) cost.
    pub fn bits(&self, levels: &[u16]) -> f64 {
        let k = self.cost.len();
        levels.iter().enumerate().map(|(i, &l)| self.cost[i % k][usize::from(l)]).sum()
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// A code that is always the same level costs almost nothing; one spread evenly over its
    /// levels costs its bit depth.
    #[test]
    fn the_level_model_prices_a_constant_near_zero_and_uniform_levels_at_their_depth() {
        let bits = 3;
        let rows = 8_000;
        let levels: Vec<u16> = (0..rows).flat_map(|i| [5u16, (i % 8) as u16]).collect();
        let m = LevelModel::fit(&levels, 2, bits);
        let constant: Vec<u16> = (0..100).flat_map(|_| [5u16, 0]).collect();
        let per_row = m.bits(&constant) / 100.0;
        let uniform_part = m.cost[1][0];
        assert!((uniform_part - 3.0).abs() < 0.01, "{uniform_part}");
        assert!(per_row - uniform_part < 0.01, "the constant code: {}", per_row - uniform_part);
    }

    /// The training's rate agrees with what the level model prices the quantized codes at:
    /// a code spread evenly over eight steps costs about 3 bits, one within a step about 0.
    #[test]
    fn the_training_rate_tracks_the_level_model() {
        let mut rng = StdRng::seed_from_u64(3);
        let device = Device::flex();
        let n = 20_000;
        let z: Vec<f32> = (0..n)
            .flat_map(|_| [rng.random_range(0.0f32..8.0), rng.random_range(-0.3f32..0.3)])
            .collect();
        let bits = |code: usize| {
            let v: Vec<f32> = z.iter().skip(code).step_by(2).copied().collect();
            values(rate_bits(tensor2(&v, [n, 1], &device), &[1.0]).reshape([1, 1]))[0]
        };
        let (wide, narrow) = (bits(0), bits(1));
        assert!((wide - 3.0).abs() < 0.35, "eight steps: {wide} bits");
        assert!(narrow < 0.35, "within a step: {narrow} bits");
    }

    /// Levels stand for values inside the range, one step apart; the ends clamp.
    #[test]
    fn quantizing_keeps_values_within_half_a_step() {
        let ranges = [(-1.0f32, 1.0f32)];
        let mut z = vec![-3.0, -1.0, -0.1, 0.2, 0.99, 7.0];
        let orig = z.clone();
        let levels = quantize(&mut z, &ranges, 2);
        assert_eq!(levels, vec![0, 0, 1, 2, 3, 3]);
        let step = 2.0 / 3.0;
        for (a, b) in orig.iter().zip(&z) {
            assert!((a.clamp(-1.0, 1.0) - b).abs() <= step / 2.0 + 1e-6, "{a} → {b}");
        }
    }

    /// The nonlinear coder learns to rebuild rows that lie on a curve: its loss falls well
    /// below the start's.
    #[test]
    fn the_nonlinear_coder_learns_to_rebuild() {
        let mut rng = StdRng::seed_from_u64(7);
        let (c, k, n) = (6, 2, 512);
        let rows: Vec<f32> = (0..n)
            .flat_map(|_| {
                let (s, t) = (rng.random_range(-1.0f32..1.0), rng.random_range(-1.0f32..1.0));
                [s, t, s * t, s.abs(), (s + t).max(0.0), 0.5 * s - t]
            })
            .collect();
        let device = Device::flex().autodiff();
        let plain = Device::flex();
        let error = |coder: &Coder| {
            let y = coder.decode(&coder.encode(&rows, &plain), &plain);
            y.iter().zip(&rows).map(|(a, b)| (a - b).powi(2)).sum::<f32>() / y.len() as f32
        };
        let mut coder = Coder::new(c, k, 16, vec![0.0; c], &mut rng);
        let mut adams = coder.optimizers();
        let start = error(&coder);
        for _ in 0..400 {
            let p = coder.leaves(&device);
            let x = tensor2(&rows, [n, c], &device);
            let loss =
                (coder.decode_with(&p, coder.encode_with(&p, x.clone())) - x).square().mean();
            let grads = loss.backward();
            coder.step(&p, &grads, &mut adams, 1e-2);
        }
        let end = error(&coder);
        assert!(end < start / 5.0, "{start} → {end}");
    }
}
