//! The burn module. Each stage is a named field so that a split is a range of stages.
//!
//! Inside the network activations are NHWC (`[n, h, w, c]`), the layout the fused kernels of
//! [`super::fused`] want; `forward_range` takes and returns NCHW so that boundaries, frames and
//! the codec keep one meaning whatever runs in between.

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::{Device, Tensor, TensorData};

use super::arch::{HEAD_CHANNELS, INPUT_SIZE, MAX_BATCH, MIN_INPUT_SIZE, NUM_CLASSES, blocks};
use super::boundary::Boundary;
use super::fused;
use super::{ModelError, Result, check_shape};
use crate::container::TensorFile;

/// A 1x1 convolution, batch norm folded in. Weight in panels `[c_out / pw, c_in, pw]`
/// ([`fused::pointwise`]).
#[derive(Module, Debug)]
pub struct Pointwise {
    weight: Param<Tensor<3>>,
    bias: Param<Tensor<1>>,
}

impl Pointwise {
    /// `x: [n, h, w, c_in]` to `[n, h, w, c_out]`, ReLU6 or linear, plus `residual` if given.
    fn forward(&self, x: Tensor<4>, relu6: bool, residual: Option<Tensor<4>>) -> Tensor<4> {
        fused::pointwise(x, self.weight.val(), self.bias.val(), relu6, residual)
    }
}

/// A depthwise kxk convolution with ReLU6, batch norm folded in. Weight `[k * k, c]`.
#[derive(Module, Debug)]
pub struct Depthwise {
    weight: Param<Tensor<2>>,
    bias: Param<Tensor<1>>,
    kernel: usize,
    stride: usize,
}

/// The stem: 3x3 stride 2 over the NCHW image, ReLU6. Weight `[k * k * 3, 32]`.
#[derive(Module, Debug)]
pub struct Stem {
    weight: Param<Tensor<2>>,
    bias: Param<Tensor<1>>,
    kernel: usize,
    stride: usize,
}

/// One MBConv block with batch norm folded into each convolution.
#[derive(Module, Debug)]
pub struct MbConv {
    expand: Option<Pointwise>,
    depthwise: Depthwise,
    project: Pointwise,
    residual: bool,
}

impl MbConv {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let params = |p: &Pointwise| (p.weight.val(), p.bias.val());
        let dw = &self.depthwise;
        fused::mbconv(
            x,
            self.expand.as_ref().map(params),
            (dw.weight.val(), dw.bias.val()),
            params(&self.project),
            [dw.kernel, dw.stride],
            self.residual,
        ) // [n, h / s, w / s, c_out]
    }
}

/// EfficientNet-Lite0 for inference. Build it with [`EfficientNetLite0::from_weights`], or
/// stage by stage from [`EfficientNetLite0::empty`] with [`EfficientNetLite0::load_stage`]
/// (a browser downloads only the stages its split runs).
///
/// Activations at boundaries are always rank 4 NCHW (`[n, C, H, W]`); at `pool` and `logits`
/// `H = W = 1`, so any boundary's tensor travels and checks the same way.
#[derive(Module, Debug)]
pub struct EfficientNetLite0 {
    stem: Option<Stem>,
    blocks: Vec<Option<MbConv>>,
    head: Option<Pointwise>,
    fc: Option<Linear>,
}

/// The converted weights' tensors rearranged into the kernels' layouts.
struct Loader<'a> {
    weights: &'a TensorFile,
    device: &'a Device,
}

impl Loader<'_> {
    fn tensor<const D: usize>(&self, values: Vec<f32>, shape: [usize; D]) -> Param<Tensor<D>> {
        Param::from_tensor(Tensor::from_data(TensorData::new(values, shape), self.device))
    }

    fn bias(&self, name: &str, c: usize) -> Result<Param<Tensor<1>>> {
        let b = self.weights.tensor(&format!("{name}.bias"), &[c])?;
        Ok(self.tensor(b.to_vec(), [c]))
    }

    /// PyTorch `[c_out, c_in, 1, 1]` to panels `[c_out / pw, c_in, pw]`.
    fn pointwise(&self, name: &str, c_in: usize, c_out: usize) -> Result<Pointwise> {
        let w = self.weights.tensor(&format!("{name}.weight"), &[c_out, c_in, 1, 1])?;
        let dims = fused::pointwise_weight_dims(c_in, c_out, self.device);
        let panels = fused::pointwise_shape(c_in, c_out);
        let mut t = vec![0.0; c_in * c_out];
        for o in 0..c_out {
            for i in 0..c_in {
                let at = if dims[0] == 1 { i * c_out + o } else { panels.weight_index(i, o) };
                t[at] = w[o * c_in + i];
            }
        }
        let weight = self.tensor(t, dims);
        Ok(Pointwise { weight, bias: self.bias(name, c_out)? })
    }

    /// PyTorch `[c, 1, k, k]` to `[k * k, c]`.
    fn depthwise(&self, name: &str, c: usize, kernel: usize, stride: usize) -> Result<Depthwise> {
        let kk = kernel * kernel;
        let w = self.weights.tensor(&format!("{name}.weight"), &[c, 1, kernel, kernel])?;
        let mut t = vec![0.0; kk * c];
        for ch in 0..c {
            for tap in 0..kk {
                t[tap * c + ch] = w[ch * kk + tap];
            }
        }
        let (weight, bias) = (self.tensor(t, [kk, c]), self.bias(name, c)?);
        Ok(Depthwise { weight, bias, kernel, stride })
    }

    /// PyTorch `[c_out, c_in, k, k]` to `[k * k * c_in, c_out]`.
    fn stem(&self, name: &str, c_in: usize, c_out: usize, kernel: usize) -> Result<Stem> {
        let w = self.weights.tensor(&format!("{name}.weight"), &[c_out, c_in, kernel, kernel])?;
        let mut t = vec![0.0; kernel * kernel * c_in * c_out];
        for o in 0..c_out {
            for i in 0..c_in {
                for tap in 0..kernel * kernel {
                    t[(tap * c_in + i) * c_out + o] = w[(o * c_in + i) * kernel * kernel + tap];
                }
            }
        }
        let rows = kernel * kernel * c_in;
        let (weight, bias) = (self.tensor(t, [rows, c_out]), self.bias(name, c_out)?);
        Ok(Stem { weight, bias, kernel, stride: 2 })
    }
}

impl EfficientNetLite0 {
    /// The network with no stage loaded: what the edge starts from before its weights arrive.
    pub fn empty() -> Self {
        Self {
            stem: None,
            blocks: (0..blocks().len()).map(|_| None).collect(),
            head: None,
            fc: None,
        }
    }

    /// Build the whole network from converted weights, on `device`.
    ///
    /// # Errors
    /// [`ModelError::BadWeights`] when a tensor is missing or has the wrong shape.
    pub fn from_weights(weights: &TensorFile, device: &Device) -> Result<Self> {
        let mut model = Self::empty();
        for b in Boundary::all().skip(1) {
            model.load_stage(b, weights, device)?;
        }
        Ok(model)
    }

    /// Load the stage that ends at boundary `end` (the stem for `stem`, block i for `block{i}`,
    /// the head conv for `head`, the classifier for `logits`; `pool` has no weights) from
    /// `weights`, which may hold that stage alone (a shard, [`super::weight_shard`]) or more.
    /// Loading a stage again replaces it.
    ///
    /// # Errors
    /// [`ModelError::BadWeights`] when one of the stage's tensors is missing or misshaped;
    /// [`ModelError::UnknownBoundary`] for `input`, which ends no stage.
    pub fn load_stage(
        &mut self,
        end: Boundary,
        weights: &TensorFile,
        device: &Device,
    ) -> Result<()> {
        let load = Loader { weights, device };
        match end.index() {
            0 => return Err(ModelError::UnknownBoundary("input (no stage ends there)".into())),
            1 => self.stem = Some(load.stem("stem", 3, 32, 3)?),
            k @ 2..=17 => {
                let i = usize::from(k) - 2;
                let spec = &blocks()[i];
                let p = format!("blocks.{i}");
                let hidden = spec.hidden();
                let expand = if spec.expand == 1 {
                    None
                } else {
                    Some(load.pointwise(&format!("{p}.expand"), spec.c_in, hidden)?)
                };
                self.blocks[i] = Some(MbConv {
                    expand,
                    depthwise: load.depthwise(
                        &format!("{p}.depthwise"),
                        hidden,
                        spec.kernel,
                        spec.stride,
                    )?,
                    project: load.pointwise(&format!("{p}.project"), hidden, spec.c_out)?,
                    residual: spec.residual(),
                });
            }
            18 => self.head = Some(load.pointwise("head", 320, HEAD_CHANNELS)?),
            19 => {} // pool: a mean, no weights
            _ => {
                // Stored as [out, in] like PyTorch; burn's Linear multiplies by [in, out].
                let fc_w = weights.tensor("fc.weight", &[NUM_CLASSES, HEAD_CHANNELS])?;
                let weight = Tensor::<2>::from_data(
                    TensorData::new(fc_w.to_vec(), [NUM_CLASSES, HEAD_CHANNELS]),
                    device,
                )
                .transpose();
                let bias = Some(load.bias("fc", NUM_CLASSES)?);
                self.fc = Some(Linear { weight: Param::from_tensor(weight), bias });
            }
        }
        Ok(())
    }

    /// Whether the stage ending at `end` can run (`input` and `pool` need no weights).
    pub fn has_stage(&self, end: Boundary) -> bool {
        match end.index() {
            0 | 19 => true,
            1 => self.stem.is_some(),
            k @ 2..=17 => self.blocks[usize::from(k) - 2].is_some(),
            18 => self.head.is_some(),
            _ => self.fc.is_some(),
        }
    }

    /// The deepest boundary the loaded stages reach from the input (`input` when the stem is
    /// missing): how far this device can run an image.
    pub fn loaded_through(&self) -> Boundary {
        Boundary::all().skip(1).take_while(|b| self.has_stage(*b)).last().unwrap_or(Boundary::INPUT)
    }

    /// Apply stage `k` (1..=20), the one that ends at boundary `k`, on NHWC activations (the
    /// stem takes the NCHW image).
    /// `forward_range` checked first that the stage is loaded.
    fn stage(&self, k: u8, x: Tensor<4>) -> Tensor<4> {
        const LOADED: &str = "forward_range checks the stages are loaded";
        match k {
            1 => {
                let s = self.stem.as_ref().expect(LOADED);
                fused::stem(x, s.weight.val(), s.bias.val(), s.kernel, s.stride) // [n, 112, 112, 32]
            }
            2..=17 => self.blocks[k as usize - 2].as_ref().expect(LOADED).forward(x), // [n, h, w, c_out]
            18 => self.head.as_ref().expect(LOADED).forward(x, true, None), // [n, 7, 7, 1280]
            19 => x.mean_dims(&[1, 2]),                                     // [n, 1, 1, 1280]
            20 => {
                let [n, _, _, c] = x.dims();
                let logits = self.fc.as_ref().expect(LOADED).forward(x.reshape([n, c])); // [n, 1000]
                logits.reshape([n, 1, 1, NUM_CLASSES])
            }
            _ => unreachable!("stage index comes from a Boundary"),
        }
    }

    /// Run the stages between two boundaries: `x` is the activation at `from`, the result is the
    /// activation at `to`. `from == to` returns `x` unchanged.
    ///
    /// # Shapes
    /// `x: [n, C, H, W]` as [`Boundary::info`] gives for `from`; returns the same for `to`.
    ///
    /// # Errors
    /// [`ModelError::BackwardRange`] when `to < from`; [`ModelError::ShapeMismatch`] when `x` does not have
    /// `from`'s shape; [`ModelError::StageNotLoaded`] when a stage in between has no weights here.
    pub fn forward_range(&self, x: Tensor<4>, from: Boundary, to: Boundary) -> Result<Tensor<4>> {
        let mut steps = self.steps(x, from, to)?;
        while self.step(&mut steps) {}
        Ok(steps.finish())
    }

    /// [`Self::forward_range`] one stage at a time: checks the range as it does, then each
    /// [`Self::step`] runs the next stage, and [`Steps::finish`] gives the activation at `to`
    /// (the same tensor, bit for bit). Between stages the activations stay in the network's own
    /// layout, so stepping costs nothing over one call; a caller may do other work between
    /// steps (the browser's edge lets its event loop turn).
    ///
    /// # Errors
    /// As [`Self::forward_range`].
    pub fn steps(&self, x: Tensor<4>, from: Boundary, to: Boundary) -> Result<Steps> {
        if to < from {
            return Err(ModelError::BackwardRange { from, to });
        }
        check_shape(from, &x.dims())?;
        if let Some(missing) = Boundary::all()
            .skip(usize::from(from.index()) + 1)
            .take(usize::from(to.index() - from.index()))
            .find(|b| !self.has_stage(*b))
        {
            return Err(ModelError::StageNotLoaded { stage: missing, from, to });
        }
        // The image stays NCHW for the stem; any later boundary becomes NHWC.
        let nhwc = from != to;
        let x = if from == Boundary::INPUT || !nhwc { x } else { x.permute([0, 2, 3, 1]) };
        Ok(Steps { x: Some(x), next: from.index() + 1, to: to.index(), nhwc })
    }

    /// Run the next stage of `steps`; `false` (nothing run) once they reach their end.
    pub fn step(&self, steps: &mut Steps) -> bool {
        if steps.next > steps.to {
            return false;
        }
        // Taken, not cloned: a stage may then reuse the activation's buffer.
        let x = steps.x.take().expect("a step holds its activation between stages");
        steps.x = Some(self.stage(steps.next, x));
        steps.next += 1;
        true
    }

    /// The whole network: normalized input `[n, 3, 224, 224]` to logits `[n, 1000, 1, 1]`.
    pub fn forward(&self, x: Tensor<4>) -> Result<Tensor<4>> {
        self.forward_range(x, Boundary::INPUT, Boundary::LOGITS)
    }

    /// The whole network on a square input of another size, `[n, 3, s, s]` with
    /// `MIN_INPUT_SIZE <= s <= 224`, to logits `[n, 1000, 1, 1]`: every stage is a convolution
    /// or a mean over the map, so the same weights run on any size, at a cost in proportion to
    /// its area ([`super::macs_at`]). The reduced-input light model runs this way
    /// (`./run.sh train light`); the boundaries in between do not have their table shapes, so
    /// there is no split of such a run.
    ///
    /// # Errors
    /// [`ModelError::InputSize`] for any other shape; [`ModelError::StageNotLoaded`] as
    /// [`Self::forward_range`].
    pub fn forward_at(&self, x: Tensor<4>) -> Result<Tensor<4>> {
        let dims = x.dims();
        let [n, c, h, w] = dims;
        if !(1..=MAX_BATCH).contains(&n)
            || c != 3
            || h != w
            || !(MIN_INPUT_SIZE..=INPUT_SIZE).contains(&h)
        {
            return Err(ModelError::InputSize {
                got: dims.to_vec(),
                min: MIN_INPUT_SIZE,
                max: INPUT_SIZE,
                max_batch: MAX_BATCH,
            });
        }
        if let Some(missing) = Boundary::all().skip(1).find(|b| !self.has_stage(*b)) {
            return Err(ModelError::StageNotLoaded {
                stage: missing,
                from: Boundary::INPUT,
                to: Boundary::LOGITS,
            });
        }
        let mut steps = Steps { x: Some(x), next: 1, to: Boundary::LOGITS.index(), nhwc: true };
        while self.step(&mut steps) {}
        Ok(steps.finish())
    }
}

/// A run between two boundaries in progress ([`EfficientNetLite0::steps`]).
pub struct Steps {
    /// The activation after the last stage run (NHWC after the stem); `None` only inside
    /// [`EfficientNetLite0::step`].
    x: Option<Tensor<4>>,
    /// The index of the boundary the next stage ends at.
    next: u8,
    /// The index of the last boundary.
    to: u8,
    /// Whether the activation is in the network's NHWC layout (any run of one stage or more).
    nhwc: bool,
}

impl Steps {
    /// Whether every stage has run.
    pub fn done(&self) -> bool {
        self.next > self.to
    }

    /// The activation at the last boundary reached (NCHW, as [`Boundary::info`] gives it).
    pub fn finish(self) -> Tensor<4> {
        let x = self.x.expect("a step holds its activation between stages");
        if self.nhwc { x.permute([0, 3, 1, 2]) } else { x }
    }
}
