//! The shapes the kernels take, and TensorFlow's "SAME" padding rule they apply.

/// The product of `dims`, or a panic naming `what` when it does not fit a `usize`. Every length
/// check before a kernel forms a pointer goes through this: overflow checks are off in release
/// builds, and a wrapped product could match a short slice and send the kernel past its end.
pub(crate) fn checked_len(dims: &[usize], what: &str) -> usize {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .unwrap_or_else(|| panic!("{what}: the shape's size overflows usize ({dims:?})"))
}

/// What runs on each output value after bias (and before the residual add).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Nothing: the linear projection of an MBConv block.
    Linear,
    /// `min(max(x, 0), 6)`.
    Relu6,
}

/// Output channels per weight panel of a 1x1 convolution (when `c_out` is a multiple of it;
/// else [`NARROW_PANEL`]). 16 on x86-64, where the 16-lane kernels read a panel a vector; 8
/// elsewhere.
#[cfg(target_arch = "x86_64")]
pub const PANEL: usize = 16;
/// Output channels per weight panel of a 1x1 convolution (when `c_out` is a multiple of it;
/// else [`NARROW_PANEL`]).
#[cfg(not(target_arch = "x86_64"))]
pub const PANEL: usize = 8;
/// The panel width where [`PANEL`] does not divide `c_out` but this does.
pub const NARROW_PANEL: usize = 8;

/// A 1x1 convolution over NHWC activations: `[pixels, c_in] x [c_in, c_out]`.
///
/// The weight is stored in *panels*: `[c_out / pw, c_in, pw]` with `pw =`
/// [`PointwiseShape::panel_width`], so that the `c_in × pw` block a tile of output channels
/// reads is contiguous in memory. Read row-major `[c_in, c_out]`, the same block is `c_in`
/// short pieces one matrix row apart, which the hardware prefetchers do not follow: on this
/// project's 7×7 layers, whose weights are cold in every forward, that cost 30–50% of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointwiseShape {
    /// Rows: batch × height × width.
    pub pixels: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
}

/// A kxk convolution with TF-SAME padding over `[batch, height, width, *]` images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    /// Images.
    pub batch: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Input channels (for depthwise: the channels, in and out).
    pub c_in: usize,
    /// Output channels (for depthwise: equal to `c_in`).
    pub c_out: usize,
    /// Kernel size (square).
    pub kernel: usize,
    /// Stride (both directions).
    pub stride: usize,
}

impl PointwiseShape {
    /// Output channels per weight panel: [`PANEL`], else [`NARROW_PANEL`], whichever divides
    /// `c_out` first, or all of them when neither does (one panel: the plain `[c_in, c_out]`
    /// layout).
    pub fn panel_width(&self) -> usize {
        [PANEL, NARROW_PANEL]
            .into_iter()
            .find(|p| self.c_out.is_multiple_of(*p))
            .unwrap_or(self.c_out)
    }

    /// Where weight `(i, o)` (input channel, output channel) lives in the panel layout.
    pub fn weight_index(&self, i: usize, o: usize) -> usize {
        let pw = self.panel_width();
        (o / pw * self.c_in + i) * pw + o % pw
    }

    /// Values of the input: `pixels × c_in` (panics when that overflows `usize`).
    pub fn input_len(&self) -> usize {
        checked_len(&[self.pixels, self.c_in], "pointwise input")
    }

    /// Values of the weight: `c_in × c_out` (panics when that overflows `usize`).
    pub fn weight_len(&self) -> usize {
        checked_len(&[self.c_in, self.c_out], "pointwise weight")
    }

    /// Values of the output: `pixels × c_out` (panics when that overflows `usize`).
    pub fn output_len(&self) -> usize {
        checked_len(&[self.pixels, self.c_out], "pointwise output")
    }

    /// The panel layout of a row-major `[c_in, c_out]` weight.
    ///
    /// # Panics
    /// When `w.len() != c_in * c_out`.
    pub fn pack_weight(&self, w: &[f32]) -> Vec<f32> {
        assert_eq!(w.len(), self.weight_len(), "pack_weight: weight length");
        let mut out = vec![0.0; w.len()];
        for i in 0..self.c_in {
            for o in 0..self.c_out {
                out[self.weight_index(i, o)] = w[i * self.c_out + o];
            }
        }
        out
    }
}

impl ConvShape {
    /// A depthwise shape: `channels` in and out.
    pub fn depthwise(
        batch: usize,
        height: usize,
        width: usize,
        channels: usize,
        kernel: usize,
        stride: usize,
    ) -> Self {
        Self { batch, height, width, c_in: channels, c_out: channels, kernel, stride }
    }

    /// Output height and width: `ceil(in / stride)` under SAME padding.
    pub fn out_hw(&self) -> (usize, usize) {
        (self.height.div_ceil(self.stride), self.width.div_ceil(self.stride))
    }

    /// Rows and columns of zeros before the image (top, left). TF-SAME puts the odd one after,
    /// so stride 2 on an even size pads only at the bottom/right for k = 3.
    pub fn pad_before(&self) -> (usize, usize) {
        let (oh, ow) = self.out_hw();
        let total = |out: usize, size: usize| {
            ((out - 1) * self.stride + self.kernel).saturating_sub(size) / 2
        };
        (total(oh, self.height), total(ow, self.width))
    }

    /// Values of one input batch (NCHW for the stem, NHWC for depthwise: the same count);
    /// panics when that overflows `usize`.
    pub fn input_len(&self) -> usize {
        checked_len(&[self.batch, self.height, self.width, self.c_in], "conv input")
    }

    /// Values of the output batch; panics when that overflows `usize`.
    pub fn output_len(&self) -> usize {
        let (oh, ow) = self.out_hw();
        checked_len(&[self.batch, oh, ow, self.c_out], "conv output")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_hold_eight_output_channels_contiguous_per_input_channel() {
        // 24 channels: three narrow panels on every target.
        let s = PointwiseShape { pixels: 1, c_in: 3, c_out: 24 };
        assert_eq!(s.panel_width(), 8);
        assert_eq!(s.weight_index(0, 7), 7);
        assert_eq!(s.weight_index(1, 0), 8);
        assert_eq!(s.weight_index(0, 8), 24);
        let odd = PointwiseShape { pixels: 1, c_in: 3, c_out: 12 };
        assert_eq!(odd.panel_width(), 12);
        let w: Vec<f32> = (0..36).map(|v| v as f32).collect();
        assert_eq!(odd.pack_weight(&w), w, "one panel is the row-major layout");
        let w: Vec<f32> = (0..72).map(|v| v as f32).collect();
        let packed = s.pack_weight(&w);
        assert_eq!(&packed[..10], &[0., 1., 2., 3., 4., 5., 6., 7., 24., 25.]);
        // A multiple of the wide panel takes it.
        let wide = PointwiseShape { pixels: 1, c_in: 3, c_out: 2 * PANEL };
        assert_eq!(wide.panel_width(), PANEL);
        assert_eq!(wide.weight_index(1, 0), PANEL);
    }

    #[test]
    #[should_panic(expected = "overflows usize")]
    fn a_length_that_overflows_is_refused() {
        // 2^33 × 2^33 wraps to 0 in 64 bits (2^17 × 2^17 in 32, wasm's width): an empty slice
        // would have passed an unchecked test.
        let half = 1usize << (usize::BITS / 2 + 1);
        let s = PointwiseShape { pixels: half, c_in: half, c_out: 8 };
        let _ = s.input_len();
    }

    #[test]
    fn same_padding_matches_tensorflow() {
        // Stride 2 on 112: 56 out, pad 0 before (1 after) for k3, 1 before (2 after) for k5.
        assert_eq!(ConvShape::depthwise(1, 112, 112, 8, 3, 2).pad_before(), (0, 0));
        assert_eq!(ConvShape::depthwise(1, 112, 112, 8, 5, 2).pad_before(), (1, 1));
        assert_eq!(ConvShape::depthwise(1, 14, 14, 8, 5, 1).pad_before(), (2, 2));
        assert_eq!(ConvShape::depthwise(1, 7, 7, 8, 3, 2).out_hw(), (4, 4));
        assert_eq!(ConvShape::depthwise(1, 7, 7, 8, 3, 2).pad_before(), (1, 1));
    }
}
