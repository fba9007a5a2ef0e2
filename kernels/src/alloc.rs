//! Owned outputs without a zero-fill: the kernels write every output value exactly once, so
//! clearing the buffer first would be one more pass over memory per layer for nothing.

use std::mem::MaybeUninit;

use crate::{Activation, ConvShape, Isa, MbConvParams, MbConvShape, PointwiseShape};

/// A `len`-float vector filled by `fill`, which must initialise every element of the slice it
/// gets (the `*_uninit` kernels do, or panic).
fn filled(len: usize, fill: impl FnOnce(&mut [MaybeUninit<f32>])) -> Vec<f32> {
    let mut v: Vec<f32> = Vec::with_capacity(len);
    fill(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: the capacity is at least `len` and `fill` initialised elements `0..len` (it
    // returns only after writing all of them; a panic leaves `v` empty, and it is dropped).
    unsafe { v.set_len(len) };
    v
}

/// [`crate::pointwise`] into a new vector.
#[allow(clippy::too_many_arguments)]
pub fn pointwise_new(
    isa: Isa,
    s: PointwiseShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    residual: Option<&[f32]>,
) -> Vec<f32> {
    filled(s.output_len(), |out| {
        crate::pointwise_uninit(isa, s, x, weight, bias, act, residual, out)
    })
}

/// [`crate::depthwise`] into a new vector.
pub fn depthwise_new(
    isa: Isa,
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
) -> Vec<f32> {
    filled(s.output_len(), |out| crate::depthwise_uninit(isa, s, x, weight, bias, act, out))
}

/// [`crate::conv_nchw_to_nhwc`] into a new vector.
pub fn conv_nchw_to_nhwc_new(
    isa: Isa,
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
) -> Vec<f32> {
    filled(s.output_len(), |out| crate::conv_nchw_to_nhwc_uninit(isa, s, x, weight, bias, act, out))
}

/// [`crate::mbconv`] into a new vector.
pub fn mbconv_new(
    isa: Isa,
    s: MbConvShape,
    x: &[f32],
    p: &MbConvParams,
    residual: bool,
) -> Vec<f32> {
    filled(s.output_len(), |out| crate::mbconv::mbconv_uninit(isa, s, x, p, residual, out))
}
