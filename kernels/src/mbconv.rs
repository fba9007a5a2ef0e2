//! A whole MBConv block (1x1 expansion + ReLU6, kxk depthwise + ReLU6, linear 1x1 projection
//! + residual) in bands of output rows, so the expanded activation never leaves the cache.
//!
//! Run as three calls, the early blocks write their expanded activation to memory and read it
//! back: block 1's is 112 × 112 × 96 floats (4.8 MB), blocks 2–3's 1.8 MB, and the depthwise
//! output goes the same way before the projection. Here each thread walks its output rows a
//! band at a time: it expands only the input rows the band's windows read (into a scratch
//! buffer of about [`BAND_BYTES`]), runs the depthwise over the band into a second small
//! buffer, and projects that straight into the output. Rows shared by two consecutive bands'
//! windows (`kernel - stride` of them) move to the front of the buffer instead of being
//! expanded again, so no work is repeated except at the first band of each thread's part.
//!
//! Blocks whose expanded activation is small (the 14×14 and 7×7 ones, whose cost is their
//! weights) gain nothing from bands and would lose the 1x1 kernel's split by output channels,
//! so below [`BAND_MIN_BYTES`] the block runs as the three ordinary calls.

use crate::depthwise;
use crate::pointwise;
use crate::shape::{Activation, ConvShape, PointwiseShape, checked_len};
use crate::simd::Simd;
use crate::{Isa, threads};
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Bytes of expanded rows one band holds: with the depthwise band and the weights it stays
/// in a 1 MB L2. 64, 128, 192 and 384 KB measured alike here (docs/kernels.md). Under Miri,
/// 512 bytes: bands of a row or two on the small blocks the interpreter can get through.
pub const BAND_BYTES: usize = if cfg!(miri) { 512 } else { 192 * 1024 };

/// Expanded activations (per image) below this run as three calls. In EfficientNet-Lite0 that
/// puts blocks 0–5 (112×112 to 28×28, 752 KB to 4.8 MB expanded) in bands and leaves the
/// 14×14 and 7×7 blocks (≤ 527 KB, weight-bound) as they were: banding those too measured no
/// better at one thread and worse at two (docs/kernels.md). Under Miri, 1 KiB, so that blocks
/// small enough to interpret take the banded path.
pub const BAND_MIN_BYTES: usize = if cfg!(miri) { 1024 } else { 640 * 1024 };

/// An MBConv block's shape over NHWC activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MbConvShape {
    /// Images.
    pub batch: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Input channels.
    pub c_in: usize,
    /// Channels after the expansion (equal to `c_in` when the block has none).
    pub c_mid: usize,
    /// Output channels.
    pub c_out: usize,
    /// Depthwise kernel size.
    pub kernel: usize,
    /// Depthwise stride.
    pub stride: usize,
}

impl MbConvShape {
    /// The depthwise convolution inside the block, over `images` images.
    pub fn depthwise(&self, images: usize) -> ConvShape {
        ConvShape::depthwise(images, self.height, self.width, self.c_mid, self.kernel, self.stride)
    }

    fn expand(&self, pixels: usize) -> PointwiseShape {
        PointwiseShape { pixels, c_in: self.c_in, c_out: self.c_mid }
    }

    fn project(&self, pixels: usize) -> PointwiseShape {
        PointwiseShape { pixels, c_in: self.c_mid, c_out: self.c_out }
    }

    /// Values of the input batch; panics when that overflows `usize`.
    pub fn input_len(&self) -> usize {
        checked_len(&[self.batch, self.height, self.width, self.c_in], "mbconv input")
    }

    /// Values of the output batch; panics when that overflows `usize`.
    pub fn output_len(&self) -> usize {
        let (oh, ow) = self.depthwise(1).out_hw();
        checked_len(&[self.batch, oh, ow, self.c_out], "mbconv output")
    }

    /// Output rows per band: about [`BAND_BYTES`] of expanded input rows, at least one.
    fn band_rows(&self) -> usize {
        (BAND_BYTES / (self.stride * self.width * self.c_mid * 4)).max(1)
    }
}

/// One convolution's parameters in the kernels' layouts (see [`crate::pointwise`] and
/// [`crate::depthwise`]).
#[derive(Clone, Copy, Debug)]
pub struct Conv<'a> {
    /// The weight.
    pub weight: &'a [f32],
    /// The bias, one per output channel.
    pub bias: &'a [f32],
}

/// The three convolutions of a block.
#[derive(Clone, Copy, Debug)]
pub struct MbConvParams<'a> {
    /// 1x1 `c_in → c_mid` + ReLU6; `None` when the block has no expansion (`c_mid == c_in`).
    pub expand: Option<Conv<'a>>,
    /// kxk depthwise over `c_mid` channels + ReLU6.
    pub depthwise: Conv<'a>,
    /// Linear 1x1 `c_mid → c_out`.
    pub project: Conv<'a>,
}

/// An MBConv block: `project(depthwise(expand(x))) (+ x)`, each convolution with its bias
/// and (but the projection) ReLU6; the same values as the three calls one after the other
/// (`Isa::Reference` runs exactly those, with the scalar kernels).
///
/// # Shapes
/// `x: [batch, height, width, c_in]`, `out: [batch, ceil(height / stride), ceil(width / stride),
/// c_out]`; weights as [`crate::pointwise`] (panels) and [`crate::depthwise`] take them.
///
/// # Panics
/// When a length does not match the shape, `residual` is asked for a block that changes the
/// shape, or `isa` cannot run here.
pub fn mbconv(
    isa: Isa,
    s: MbConvShape,
    x: &[f32],
    p: &MbConvParams,
    residual: bool,
    out: &mut [f32],
) {
    mbconv_uninit(isa, s, x, p, residual, crate::as_uninit(out))
}

/// [`mbconv`] into an output that may be uninitialised: every element is written before it
/// returns.
pub(crate) fn mbconv_uninit(
    isa: Isa,
    s: MbConvShape,
    x: &[f32],
    p: &MbConvParams,
    residual: bool,
    out: &mut [MaybeUninit<f32>],
) {
    let c_mid = s.c_mid;
    assert!(s.kernel > 0 && s.stride > 0, "mbconv: empty kernel or stride");
    assert_eq!(x.len(), s.input_len(), "mbconv: input length");
    assert_eq!(out.len(), s.output_len(), "mbconv: output length");
    match p.expand {
        Some(e) => {
            assert_eq!(e.weight.len(), s.expand(1).weight_len(), "mbconv: expand weight length");
            assert_eq!(e.bias.len(), c_mid, "mbconv: expand bias length");
        }
        None => assert_eq!(s.c_in, c_mid, "mbconv: no expansion but c_mid != c_in"),
    }
    let dw_len = checked_len(&[s.kernel, s.kernel, c_mid], "mbconv depthwise weight");
    assert_eq!(p.depthwise.weight.len(), dw_len, "mbconv: depthwise weight length");
    assert_eq!(p.depthwise.bias.len(), c_mid, "mbconv: depthwise bias length");
    assert_eq!(p.project.weight.len(), s.project(1).weight_len(), "mbconv: project weight length");
    assert_eq!(p.project.bias.len(), s.c_out, "mbconv: project bias length");
    assert!(
        !residual || (s.stride == 1 && s.c_in == s.c_out),
        "mbconv: a residual needs stride 1 and c_in == c_out"
    );
    let isa = isa.fitting(&[c_mid, s.project(1).panel_width(), s.expand(1).panel_width()]);
    let lanes = isa.lanes();
    let simd = isa != Isa::Reference
        && c_mid.is_multiple_of(lanes)
        && s.project(1).panel_width().is_multiple_of(lanes)
        && s.expand(1).panel_width().is_multiple_of(lanes);
    let expanded_bytes = checked_len(&[s.height, s.width, c_mid, 4], "mbconv expanded rows");
    if !simd || expanded_bytes < BAND_MIN_BYTES {
        return three_calls(isa, s, x, p, residual, out);
    }
    crate::check_isa(isa);
    let (oh, ow) = s.depthwise(1).out_hw();
    let rows = s.batch * oh;
    // Only sizes the threads' shares (saturating: wasm32's usize is 32 bits).
    let per_pixel = (s.stride * s.stride * s.c_in * c_mid * usize::from(p.expand.is_some()))
        .saturating_add(dw_len)
        .saturating_add(p.project.weight.len());
    let macs = (rows * ow).saturating_mul(per_pixel);
    let a = Args {
        s,
        x: x.as_ptr(),
        expand: p.expand.map(|e| (e.weight.as_ptr(), e.bias.as_ptr())),
        dw: (p.depthwise.weight.as_ptr(), p.depthwise.bias.as_ptr()),
        project: (p.project.weight.as_ptr(), p.project.bias.as_ptr()),
        residual,
        out: out.as_mut_ptr().cast(),
        rows: 0..0,
        band: s.band_rows(),
    };
    let parts = threads::parts(macs, rows);
    threads::run_parts(parts, |i| {
        let sub = Args { rows: threads::range(rows, parts, i), ..a.clone() };
        // SAFETY: every length was checked above, the channel counts and panel widths are
        // multiples of the lanes, the ISA is available, and parts write disjoint output rows.
        unsafe { crate::dispatch!(isa, mbconv_entry, &sub) }
    });
}

/// The block as three calls (each split across threads its own way), through new buffers.
fn three_calls(
    isa: Isa,
    s: MbConvShape,
    x: &[f32],
    p: &MbConvParams,
    residual: bool,
    out: &mut [MaybeUninit<f32>],
) {
    let pixels = s.batch * s.height * s.width;
    let mid = match p.expand {
        Some(e) => Cow::Owned(crate::pointwise_new(
            isa,
            s.expand(pixels),
            x,
            e.weight,
            e.bias,
            Activation::Relu6,
            None,
        )),
        None => Cow::Borrowed(x),
    };
    let dw = p.depthwise;
    let dw_shape = s.depthwise(s.batch);
    let mid = crate::depthwise_new(isa, dw_shape, &mid, dw.weight, dw.bias, Activation::Relu6);
    let (oh, ow) = dw_shape.out_hw();
    let project = s.project(s.batch * oh * ow);
    let pj = p.project;
    let res = residual.then_some(x);
    crate::pointwise_uninit(isa, project, &mid, pj.weight, pj.bias, Activation::Linear, res, out);
}

/// Raw operands of one part; lengths were checked by the safe entry point.
#[derive(Clone)]
pub(crate) struct Args {
    s: MbConvShape,
    x: *const f32,
    expand: Option<(*const f32, *const f32)>,
    dw: (*const f32, *const f32),
    project: (*const f32, *const f32),
    residual: bool,
    out: *mut f32,
    /// The output rows this part computes, counted over the batch (`n * out_height + oy`).
    rows: std::ops::Range<usize>,
    /// Output rows per band.
    band: usize,
}

// SAFETY: the pointers are only read, except `out`, and the parts of one call write disjoint
// output rows; every part has its own scratch buffers (thread-local); the buffers outlive
// the call.
unsafe impl Sync for Args {}

thread_local! {
    /// Each thread's band buffers, kept between calls so they stay allocated (and in cache).
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The output rows `a.rows`, a band at a time.
///
/// # Safety
/// Pointers valid for the shape; `c_mid` and both 1x1 panel widths multiples of `S::LANES`;
/// `a.rows` inside `batch * out_height`; tile sizes as the 1x1 and depthwise kernels accept.
#[inline(always)]
pub(crate) unsafe fn run<
    S: Simd,
    const MR: usize,
    const PNV: usize,
    const OX: usize,
    const DNV: usize,
>(
    a: &Args,
) {
    let s = a.s;
    let dws = s.depthwise(1);
    let (oh, ow) = dws.out_hw();
    let (pt, pl) = dws.pad_before();
    let (h, w, st, k, c_mid) = (s.height, s.width, s.stride, s.kernel, s.c_mid);
    // Input rows a band's windows read: at most `(band - 1) * stride + kernel`.
    let exp_rows = ((a.band - 1) * st + k).min(h);
    let exp_len = if a.expand.is_some() { exp_rows * w * c_mid } else { 0 };
    let mut scratch = SCRATCH.take();
    if scratch.len() < exp_len + a.band * ow * c_mid {
        scratch.resize(exp_len + a.band * ow * c_mid, 0.0);
    }
    let exp = scratch.as_mut_ptr();
    // SAFETY: (the whole body) `exp_len` is inside `scratch`, and the band offsets below stay
    // inside the buffers and the images: the expanded rows of a band are `ia..ib` with
    // `ib - ia <= exp_rows`, its depthwise output `(ob - oy) * ow * c_mid <= band * ow * c_mid`,
    // its input and output rows inside image `n`.
    unsafe {
        let dwb = exp.add(exp_len);
        let mut r = a.rows.start;
        while r < a.rows.end {
            let n = r / oh;
            let seg_end = a.rows.end.min((n + 1) * oh);
            let x_img = a.x.add(n * h * w * s.c_in);
            let out_img = a.out.add(n * oh * ow * s.c_out);
            // Expanded image rows held at the front of `exp`.
            let mut have: std::ops::Range<usize> = 0..0;
            let (mut oy, oy_end) = (r - n * oh, seg_end - n * oh);
            while oy < oy_end {
                let ob = (oy + a.band).min(oy_end);
                // Rows the windows of outputs `oy..ob` read (TF-SAME: `pt < kernel`).
                let ia = (oy * st).saturating_sub(pt);
                let ib = ((ob - 1) * st + k - pt).min(h);
                let (dx, x_row0) = match a.expand {
                    None => (x_img, 0),
                    Some((ew, eb)) => {
                        // Rows `ia..have.end` were expanded for the previous band.
                        let keep = have.end.saturating_sub(ia.max(have.start));
                        if keep > 0 && ia > have.start {
                            let from = exp.add((ia - have.start) * w * c_mid);
                            std::ptr::copy(from, exp, keep * w * c_mid);
                        }
                        let first_new = if keep > 0 { have.end } else { ia };
                        if ib > first_new {
                            pointwise::run::<S, MR, PNV>(&pointwise::Args {
                                s: s.expand((ib - first_new) * w),
                                x: x_img.add(first_new * w * s.c_in),
                                w: ew,
                                bias: eb,
                                act: Activation::Relu6,
                                residual: None,
                                out: exp.add((first_new - ia) * w * c_mid),
                                cols: 0..c_mid,
                            });
                        }
                        have = ia..ib;
                        (exp.cast_const(), ia)
                    }
                };
                depthwise::run::<S, OX, DNV>(&depthwise::Args {
                    s: dws,
                    x: dx,
                    w: a.dw.0,
                    bias: a.dw.1,
                    act: Activation::Relu6,
                    out: dwb,
                    pad_left: pl,
                    rows: oy..ob,
                    x_row0,
                    out_row0: oy,
                });
                pointwise::run::<S, MR, PNV>(&pointwise::Args {
                    s: s.project((ob - oy) * ow),
                    x: dwb,
                    w: a.project.0,
                    bias: a.project.1,
                    act: Activation::Linear,
                    residual: a.residual.then(|| x_img.add(oy * ow * s.c_in)),
                    out: out_img.add(oy * ow * s.c_out),
                    cols: 0..s.c_out,
                });
                oy = ob;
            }
            r = seg_end;
        }
    }
    SCRATCH.set(scratch);
}
