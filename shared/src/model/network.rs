//! The burn module. Each stage is a named field so that a split is a range of stages.

use burn::module::{Module, Param};
use burn::nn::conv::Conv2d;
use burn::nn::{Linear, PaddingConfig2d};
use burn::tensor::{Device, Tensor, TensorData};

use super::arch::{HEAD_CHANNELS, NUM_CLASSES, blocks};
use super::boundary::Boundary;
use super::weights::WeightsFile;
use crate::error::{Error, Result};

/// Largest batch a caller may run or send in one frame.
pub const MAX_BATCH: usize = 4;

/// One MBConv block with batch norm folded into each convolution.
#[derive(Module, Debug)]
pub struct MbConv {
    expand: Option<Conv2d>,
    depthwise: Conv2d,
    project: Conv2d,
}

impl MbConv {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let input = x.clone();
        let x = match &self.expand {
            Some(conv) => relu6(conv.forward(x)), // [n, c_in * e, h, w]
            None => x,
        };
        let x = relu6(self.depthwise.forward(x)); // [n, c_in * e, h / s, w / s]
        let x = self.project.forward(x); // [n, c_out, h / s, w / s], linear
        if self.depthwise.stride == [1, 1] && input.dims() == x.dims() { x + input } else { x }
    }
}

/// EfficientNet-Lite0 for inference. Build it with [`EfficientNetLite0::from_weights`].
///
/// Activations are always rank 4 (`[n, C, H, W]`); at `pool` and `logits` `H = W = 1`, so any
/// boundary's tensor travels and checks the same way.
#[derive(Module, Debug)]
pub struct EfficientNetLite0 {
    stem: Conv2d,
    blocks: Vec<MbConv>,
    head: Conv2d,
    fc: Linear,
}

fn relu6(x: Tensor<4>) -> Tensor<4> {
    x.clamp(0.0, 6.0)
}

impl EfficientNetLite0 {
    /// Build the network from converted weights, on `device`.
    ///
    /// # Errors
    /// [`Error::BadWeights`] when a tensor is missing or has the wrong shape.
    pub fn from_weights(weights: &WeightsFile, device: &Device) -> Result<Self> {
        let conv =
            |name: &str, c_in: usize, c_out: usize, k: usize, stride: usize, groups: usize| {
                let w = weights.tensor(&format!("{name}.weight"), &[c_out, c_in / groups, k, k])?;
                let b = weights.tensor(&format!("{name}.bias"), &[c_out])?;
                Ok::<_, Error>(Conv2d {
                    weight: Param::from_tensor(Tensor::<4>::from_data(
                        TensorData::new(w.to_vec(), [c_out, c_in / groups, k, k]),
                        device,
                    )),
                    bias: Some(Param::from_tensor(Tensor::<1>::from_data(
                        TensorData::new(b.to_vec(), [c_out]),
                        device,
                    ))),
                    stride: [stride, stride],
                    kernel_size: [k, k],
                    dilation: [1, 1],
                    groups,
                    padding: PaddingConfig2d::Same,
                })
            };
        let stem = conv("stem", 3, 32, 3, 2, 1)?;
        let mut block_modules = Vec::with_capacity(16);
        for (i, spec) in blocks().iter().enumerate() {
            let p = format!("blocks.{i}");
            let hidden = spec.hidden();
            let expand = if spec.expand == 1 {
                None
            } else {
                Some(conv(&format!("{p}.expand"), spec.c_in, hidden, 1, 1, 1)?)
            };
            block_modules.push(MbConv {
                expand,
                depthwise: conv(
                    &format!("{p}.depthwise"),
                    hidden,
                    hidden,
                    spec.kernel,
                    spec.stride,
                    hidden,
                )?,
                project: conv(&format!("{p}.project"), hidden, spec.c_out, 1, 1, 1)?,
            });
        }
        let head = conv("head", 320, HEAD_CHANNELS, 1, 1, 1)?;
        // Stored as [out, in] like PyTorch; burn's Linear multiplies by [in, out].
        let fc_w = weights.tensor("fc.weight", &[NUM_CLASSES, HEAD_CHANNELS])?;
        let fc_b = weights.tensor("fc.bias", &[NUM_CLASSES])?;
        let fc = Linear {
            weight: Param::from_tensor(
                Tensor::<2>::from_data(
                    TensorData::new(fc_w.to_vec(), [NUM_CLASSES, HEAD_CHANNELS]),
                    device,
                )
                .transpose(),
            ),
            bias: Some(Param::from_tensor(Tensor::<1>::from_data(
                TensorData::new(fc_b.to_vec(), [NUM_CLASSES]),
                device,
            ))),
        };
        Ok(Self { stem, blocks: block_modules, head, fc })
    }

    /// Apply stage `k` (1..=20): the one that ends at boundary `k`.
    fn stage(&self, k: u8, x: Tensor<4>) -> Tensor<4> {
        match k {
            1 => relu6(self.stem.forward(x)), // [n, 32, 112, 112]
            2..=17 => self.blocks[k as usize - 2].forward(x), // [n, c_out, h, w]
            18 => relu6(self.head.forward(x)), // [n, 1280, 7, 7]
            19 => x.mean_dims(&[2, 3]),       // [n, 1280, 1, 1]
            20 => {
                let [n, c, _, _] = x.dims();
                let logits = self.fc.forward(x.reshape([n, c])); // [n, 1000]
                logits.reshape([n, NUM_CLASSES, 1, 1])
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
    /// [`Error::BackwardRange`] when `to < from`; [`Error::ShapeMismatch`] when `x` does not have
    /// `from`'s shape.
    pub fn forward_range(&self, x: Tensor<4>, from: Boundary, to: Boundary) -> Result<Tensor<4>> {
        if to < from {
            return Err(Error::BackwardRange { from, to });
        }
        check_shape(from, &x.dims())?;
        Ok((from.index() + 1..=to.index()).fold(x, |x, k| self.stage(k, x)))
    }

    /// The whole network: normalized input `[n, 3, 224, 224]` to logits `[n, 1000, 1, 1]`.
    pub fn forward(&self, x: Tensor<4>) -> Result<Tensor<4>> {
        self.forward_range(x, Boundary::INPUT, Boundary::LOGITS)
    }
}

/// Activations as a tensor on `device`, as [`crate::codec::features_values`] returns them.
///
/// # Shapes
/// `dims` must have 4 dimensions, `[n, C, H, W]`, and match `values.len()`.
pub fn features_tensor(dims: &[usize], values: Vec<f32>, device: &Device) -> Tensor<4> {
    Tensor::from_data(TensorData::new(values, dims.to_vec()), device)
}

/// Check that `dims` is a batch of activations at `boundary`.
///
/// # Errors
/// [`Error::ShapeMismatch`] otherwise.
pub fn check_shape(boundary: Boundary, dims: &[usize]) -> Result<()> {
    let expected = boundary.info().shape;
    let ok = dims.len() == 4 && (1..=MAX_BATCH).contains(&dims[0]) && dims[1..] == expected;
    if ok {
        Ok(())
    } else {
        Err(Error::ShapeMismatch { boundary, expected, got: dims.to_vec(), max_batch: MAX_BATCH })
    }
}
