//! Owned outputs without a zero-fill: the SIMD kernels write every output value exactly once,
//! so clearing the buffer first would be one more pass over memory per layer for nothing.

use crate::{Activation, ConvShape, Isa, MbConvParams, MbConvShape, PointwiseShape};

/// A `len`-float vector filled by `fill`, which must write every element of the slice it gets.
///
/// Where the kernel would fall back to the reference (which accumulates into its output),
/// the caller passes `zeroed = true`.
fn filled(len: usize, zeroed: bool, fill: impl FnOnce(&mut [f32])) -> Vec<f32> {
    if zeroed {
        let mut v = vec![0.0; len];
        fill(&mut v);
        return v;
    }
    let mut v: Vec<f32> = Vec::with_capacity(len);
    // SAFETY: the spare capacity holds `len` floats; f32 has no invalid bit patterns, so the
    // slice is only "uninitialised" in the sense that its contents are arbitrary, and `fill` (a
    // SIMD kernel) overwrites every element before anything reads it. The length is set after.
    unsafe {
        let spare = std::slice::from_raw_parts_mut(v.as_mut_ptr(), len);
        fill(spare);
        v.set_len(len);
    }
    v
}

fn simd(isa: Isa, channels: usize) -> bool {
    isa != Isa::Reference && channels.is_multiple_of(isa.lanes())
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
    filled(s.pixels * s.c_out, !simd(isa, s.panel_width()), |out| {
        crate::pointwise(isa, s, x, weight, bias, act, residual, out)
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
    filled(s.output_len(), !simd(isa, s.c_in), |out| {
        crate::depthwise(isa, s, x, weight, bias, act, out)
    })
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
    filled(s.output_len(), !simd(isa, s.c_out), |out| {
        crate::conv_nchw_to_nhwc(isa, s, x, weight, bias, act, out)
    })
}

/// [`crate::mbconv`] into a new vector.
pub fn mbconv_new(
    isa: Isa,
    s: MbConvShape,
    x: &[f32],
    p: &MbConvParams,
    residual: bool,
) -> Vec<f32> {
    // The block's last step is the 1x1 projection: its kernel or its reference decides.
    let project = PointwiseShape { pixels: 1, c_in: s.c_mid, c_out: s.c_out };
    filled(s.output_len(), !simd(isa, project.panel_width()), |out| {
        crate::mbconv(isa, s, x, p, residual, out)
    })
}
