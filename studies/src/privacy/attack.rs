//! The white-box attacks, on burn's autodiff (the `invert` feature of xtask).
//!
//! The network runs on `flex` wrapped in autodiff; the fused kernels have no backward pass, so
//! on that device the model takes its plain burn-op path (`shared::model::fused` picks it for
//! any device other than bare `flex`): the same operations WebGPU runs.

use std::path::Path;

use anyhow::{Context, Result};
use burn::module::Module;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};
use split_shared::model::{Boundary, EfficientNetLite0, INPUT_SIZE};

use crate::adam::Adam;

/// The pixels of one image as the attacks see them: `[3, 224, 224]`, values in `[0, 1]`.
pub type Pixels = Vec<f32>;

const SHAPE: [usize; 4] = [1, 3, INPUT_SIZE, INPUT_SIZE];

/// `[1, C, H, W]` at `boundary`.
pub fn one_image(boundary: Boundary) -> [usize; 4] {
    let [c, h, w] = boundary.info().shape;
    [1, c, h, w]
}

/// The public model with gradients through its input.
pub struct WhiteBox {
    model: EfficientNetLite0,
    device: Device,
}

/// How the inversion optimises.
#[derive(Clone, Copy, Debug)]
pub struct InvertOptions {
    /// Adam steps.
    pub steps: usize,
    /// Adam's step size in pixel units (`[0, 1]`), decayed to zero on a cosine.
    pub lr: f64,
    /// Weight of the total-variation prior against the relative feature error.
    pub tv: f64,
}

/// A reconstruction and how well it explains the features.
pub struct Inversion {
    /// The reconstructed pixels.
    pub pixels: Pixels,
    /// `‖f_k(x̂) − z‖² / ‖z‖²` at the last step.
    pub feature_error: f64,
}

impl WhiteBox {
    /// The model from converted weights, on `flex` with autodiff, its weights frozen.
    pub fn load(weights: &Path) -> Result<Self> {
        let device = Device::flex().autodiff();
        let model = EfficientNetLite0::load(weights, &device)
            .with_context(|| format!("loading {}", weights.display()))?
            .no_grad();
        Ok(Self { model, device })
    }

    /// A leaf tensor of pixels that collects its gradient.
    fn leaf(&self, pixels: &[f32]) -> Tensor<4> {
        Tensor::from_data(TensorData::new(pixels.to_vec(), SHAPE), &self.device).require_grad()
    }

    fn constant(&self, values: &[f32], dims: [usize; 4]) -> Tensor<4> {
        Tensor::from_data(TensorData::new(values.to_vec(), dims), &self.device)
    }

    /// Pixels in `[0, 1]` to the network's input, `(255 p − 127) / 128`, as the browser
    /// normalizes (`shared::image::normalize`).
    fn input(pixels: Tensor<4>) -> Tensor<4> {
        pixels * (255.0 / 128.0) - 127.0 / 128.0
    }

    fn gradient(leaf: &Tensor<4>, loss: &Tensor<1>) -> Vec<f32> {
        let grads = loss.backward();
        let g = leaf.grad(&grads).expect("the pixels are a tracked leaf");
        g.into_data().try_to_vec::<f32>().expect("f32 gradient")
    }

    /// Reconstruct the pixels whose features at `boundary` are closest to `target` (the
    /// features the server received, `[1, C, H, W]` values), from a flat grey start:
    /// minimise `‖f_k(x) − z‖² / ‖z‖² + tv · TV²(x)` with Adam.
    pub fn invert(
        &self,
        boundary: Boundary,
        target: &[f32],
        o: &InvertOptions,
        mut progress: impl FnMut(usize, f64),
    ) -> Result<Inversion> {
        let dims = one_image(boundary);
        let z = self.constant(target, dims);
        let energy = f64::from(target.iter().map(|v| v * v).sum::<f32>()) / target.len() as f64;
        let mut pixels = vec![0.5f32; SHAPE.iter().product()];
        let mut adam = Adam::new(pixels.len());
        let mut feature_error = f64::NAN;
        for step in 0..o.steps {
            let p = self.leaf(&pixels);
            let f = self.model.forward_range(Self::input(p.clone()), Boundary::INPUT, boundary)?;
            let fit = (f - z.clone()).square().mean() / energy.max(1e-12);
            let n = INPUT_SIZE;
            let dh = p.clone().narrow(2, 1, n - 1) - p.clone().narrow(2, 0, n - 1);
            let dw = p.clone().narrow(3, 1, n - 1) - p.clone().narrow(3, 0, n - 1);
            let loss = fit.clone() + (dh.square().mean() + dw.square().mean()) * o.tv;
            let g = Self::gradient(&p, &loss);
            feature_error = f64::from(fit.into_scalar::<f32>());
            let lr =
                o.lr * 0.5 * (1.0 + (std::f64::consts::PI * step as f64 / o.steps as f64).cos());
            adam.step(&mut pixels, &g, lr as f32);
            // The pixels stay in `[0, 1]`.
            pixels.iter_mut().for_each(|p| *p = p.clamp(0.0, 1.0));
            progress(step, feature_error);
        }
        Ok(Inversion { pixels, feature_error })
    }

    /// Logits of `pixels` through the unsplit network, with `noise` (a `[1, C, H, W]` tensor of
    /// values) added at `boundary` when given.
    fn logits(&self, p: Tensor<4>, noise: Option<(Boundary, &[f32])>) -> Result<Tensor<2>> {
        let x = Self::input(p);
        let y = match noise {
            Some((b, values)) => {
                let f = self.model.forward_range(x, Boundary::INPUT, b)?;
                let n = self.constant(values, one_image(b));
                self.model.forward_range(f + n, b, Boundary::LOGITS)?
            }
            None => self.model.forward(x)?,
        };
        Ok(y.reshape([1, 1000]))
    }

    /// Projected gradient ascent on the cross-entropy of `class` (the clean answer) within an
    /// L∞ ball of `eps` around `pixels`: `steps` signed steps of `eps / 4`. `draws` gives, for
    /// each step, the feature noise (`[1, C, H, W]` values at a boundary) the gradient is
    /// averaged over: none for an attacker who ignores the defence, a few fresh draws for one
    /// who knows it (expectation over transformation).
    pub fn pgd(
        &self,
        pixels: &[f32],
        class: usize,
        eps: f32,
        steps: usize,
        mut draws: impl FnMut() -> Result<Vec<(Boundary, Vec<f32>)>>,
    ) -> Result<Pixels> {
        let mut x = pixels.to_vec();
        let alpha = eps / 4.0;
        for _ in 0..steps {
            let mut g = vec![0.0f32; x.len()];
            let noises = draws()?;
            let runs: Vec<Option<(Boundary, &[f32])>> = if noises.is_empty() {
                vec![None]
            } else {
                noises.iter().map(|(b, v)| Some((*b, v.as_slice()))).collect()
            };
            for noise in runs {
                let p = self.leaf(&x);
                let logits = self.logits(p.clone(), noise)?;
                let loss = -log_softmax(logits, 1).narrow(1, class, 1).reshape([1]);
                for (a, b) in g.iter_mut().zip(Self::gradient(&p, &loss)) {
                    *a += b;
                }
            }
            for i in 0..x.len() {
                let stepped = x[i] + alpha * g[i].signum();
                x[i] = stepped.clamp(pixels[i] - eps, pixels[i] + eps).clamp(0.0, 1.0);
            }
        }
        Ok(x)
    }
}
