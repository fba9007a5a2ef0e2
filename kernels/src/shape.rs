//! The shapes the kernels take, and TensorFlow's "SAME" padding rule they apply.

/// What runs on each output value after bias (and before the residual add).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Nothing: the linear projection of an MBConv block.
    Linear,
    /// `min(max(x, 0), 6)`.
    Relu6,
}

/// A 1x1 convolution over NHWC activations: `[pixels, c_in] x [c_in, c_out]`.
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

    /// Values of one input batch (NCHW for the stem, NHWC for depthwise: the same count).
    pub fn input_len(&self) -> usize {
        self.batch * self.height * self.width * self.c_in
    }

    /// Values of the output batch.
    pub fn output_len(&self) -> usize {
        let (oh, ow) = self.out_hw();
        self.batch * oh * ow * self.c_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
