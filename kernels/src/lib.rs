//! Fused CPU kernels for the three convolutions of EfficientNet-Lite0, on NHWC activations.
//!
//! burn's `flex` backend runs each convolution as a generic NCHW operation followed by separate
//! bias, clamp and add passes, and its depthwise kernel vectorises only along 7- or 14-wide rows.
//! These kernels do each convolution in one pass with everything after it fused:
//!
//! - [`pointwise`]: 1x1 conv + bias + ReLU6 (or linear) + residual add, a register-tiled GEMM;
//! - [`depthwise`]: kxk depthwise, stride 1 or 2, TF-SAME padding in the index ranges, + bias + ReLU6;
//! - [`conv_nchw_to_nhwc`]: the stem, reading the NCHW input and writing NHWC;
//! - [`mbconv`]: a whole MBConv block in bands of rows, so an early block's large expanded
//!   activation stays in cache between its three convolutions;
//! - [`quant_matmul`]: a matrix product over GGUF's block-quantized weights (`Q4_1`, `Q8_0`),
//!   dequantized in registers: the language model's every projection.
//!
//! Each is written once over a small vector trait and compiled for AVX-512 (x86-64-v4: the same
//! 8-lane code with 32 registers and larger tiles), AVX2+FMA (x86-64-v3), WebAssembly simd128,
//! and plain arrays; x86 picks at run time ([`Isa::detect`]). [`reference`] holds the scalar
//! definitions the tests compare every path against. Shapes whose channel counts the vector
//! width does not divide run the reference.
//!
//! This crate is the only one in the workspace that uses `unsafe`: raw pointers inside tiles and
//! SIMD intrinsics. The public functions are safe: they check every length before any pointer
//! is formed.

use std::mem::MaybeUninit;

use shape::checked_len;

mod alloc;
mod depthwise;
mod mbconv;
mod pointwise;
mod quant;
mod quant_q8;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod quant_wasm;
pub mod reference;
mod shape;
mod simd;
mod stem;
mod threads;

#[cfg(test)]
mod tests;

// The tests name the crate's public paths as a user does.
#[cfg(test)]
extern crate self as split_kernels;

pub use alloc::{conv_nchw_to_nhwc_new, depthwise_new, mbconv_new, pointwise_new};
pub use mbconv::{BAND_BYTES, BAND_MIN_BYTES, Conv, MbConvParams, MbConvShape, mbconv};
pub use quant::{
    QBLOCK, QuantFormat, QuantMatrix, QuantShapeError, quant_matmul, quant_matmul_groups,
};
pub use quant_q8::quant_matmul_q8;
pub use shape::{Activation, ConvShape, PANEL, PointwiseShape};
#[cfg(all(feature = "threads", target_family = "wasm"))]
pub use threads::use_worker_pool;
pub use threads::{max_threads, set_max_threads, set_thread_max_threads};

/// An instruction set the kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// The scalar reference implementation.
    Reference,
    /// 4-lane arrays the compiler vectorises for the baseline target.
    Portable,
    /// x86-64-v3: AVX2 + FMA, 16 ymm registers.
    Avx2,
    /// x86-64-v4: AVX-512F/VL; the 8-lane kernels with 32 registers and larger tiles.
    Avx512,
    /// x86-64-v4 with 16-lane (512-bit) vectors; a call whose channels are not multiples of
    /// 16 runs [`Isa::Avx512`]'s kernels instead ([`Isa::fitting`]).
    Avx512Zmm,
    /// WebAssembly 128-bit SIMD (the module is built with `+simd128`).
    Simd128,
}

impl Isa {
    /// The best instruction set this machine runs (checked once per process on x86).
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
            *BEST.get_or_init(|| {
                if std::env::var_os("SPLIT_KERNELS_NO_AVX512").is_none() && x86_has_avx512() {
                    match std::env::var("SPLIT_KERNELS_ZMM").as_deref() {
                        Ok("1") => Isa::Avx512Zmm,
                        Ok("0") => Isa::Avx512,
                        _ => faster_avx512(),
                    }
                } else if x86_has_avx2() {
                    Isa::Avx2
                } else {
                    Isa::Portable
                }
            })
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            Isa::Simd128
        }
        #[cfg(not(any(
            target_arch = "x86_64",
            all(target_arch = "wasm32", target_feature = "simd128")
        )))]
        {
            Isa::Portable
        }
    }

    /// Every instruction set this machine can run, the reference first (for tests and benches).
    pub fn available() -> Vec<Isa> {
        let mut out = vec![Isa::Reference, Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if x86_has_avx2() {
                out.push(Isa::Avx2);
            }
            if x86_has_avx512() {
                out.extend([Isa::Avx512, Isa::Avx512Zmm]);
            }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        out.push(Isa::Simd128);
        out
    }

    /// Floats per vector; channel counts must be a multiple of this for the SIMD path.
    pub fn lanes(self) -> usize {
        match self {
            Isa::Reference => 1,
            Isa::Portable | Isa::Simd128 => 4,
            Isa::Avx2 | Isa::Avx512 => 8,
            Isa::Avx512Zmm => 16,
        }
    }

    /// The instruction set a call with these channel counts (each must be a multiple of the
    /// lanes) runs: this one, or for [`Isa::Avx512Zmm`] where one is not a multiple of 16,
    /// [`Isa::Avx512`]'s 8-lane kernels.
    pub fn fitting(self, channels: &[usize]) -> Isa {
        match self {
            Isa::Avx512Zmm if !channels.iter().all(|c| c.is_multiple_of(16)) => Isa::Avx512,
            isa => isa,
        }
    }
}

/// The faster of the 8- and 16-lane AVX-512 kernels on this machine: a core whose 512-bit
/// units are full width (AMD Zen 5, Intel's server cores) runs 16 lanes in the time of 8,
/// one that runs them as two halves (Zen 4) does not, and CPUID does not say which. Each
/// runs a 1×1 layer of the network's (14×14 pixels, 80 → 480 channels, 7.5 M multiply-adds)
/// on one thread, alternating, five times; the 16 lanes win only when at least 5% faster.
/// About 10 ms, once per process (`SPLIT_KERNELS_ZMM=1` or `0` decides instead).
#[cfg(target_arch = "x86_64")]
fn faster_avx512() -> Isa {
    let s = PointwiseShape { pixels: 196, c_in: 80, c_out: 480 };
    let x = vec![0.5f32; s.input_len()];
    let w = vec![0.01f32; s.weight_len()];
    let b = vec![0.0f32; s.c_out];
    let mut out = vec![0.0f32; s.output_len()];
    let mut best = [f64::INFINITY; 2];
    let before = threads::thread_max_threads();
    set_thread_max_threads(1);
    for _ in 0..5 {
        for (i, isa) in [Isa::Avx512, Isa::Avx512Zmm].into_iter().enumerate() {
            let start = std::time::Instant::now();
            pointwise(isa, s, &x, &w, &b, Activation::Relu6, None, &mut out);
            best[i] = best[i].min(start.elapsed().as_secs_f64());
        }
    }
    set_thread_max_threads(before);
    if best[1] < 0.95 * best[0] { Isa::Avx512Zmm } else { Isa::Avx512 }
}

/// Every feature the AVX2 entries are compiled with (`entries::x86::v3`).
#[cfg(target_arch = "x86_64")]
fn x86_has_avx2() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Every feature the AVX-512 entries are compiled with (`entries::x86::v4`: the AVX2 set
/// plus AVX-512F/VL): a CPU or hypervisor may report AVX-512 with AVX2 or FMA masked off.
#[cfg(target_arch = "x86_64")]
fn x86_has_avx512() -> bool {
    x86_has_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
}

/// 1x1 convolution over NHWC with everything after it fused:
/// `out[p, o] = act(bias[o] + Σ_i x[p, i] · weight[i, o]) + residual[p, o]`.
///
/// # Shapes
/// `x: [pixels, c_in]`, `weight: [c_out / pw, c_in, pw]` (panels; see [`PointwiseShape`] and
/// [`PointwiseShape::pack_weight`]), `bias: [c_out]`, `residual` and `out: [pixels, c_out]`,
/// all row-major.
///
/// # Panics
/// When a slice length does not match the shape, or `isa` cannot run on this machine.
#[allow(clippy::too_many_arguments)]
pub fn pointwise(
    isa: Isa,
    s: PointwiseShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    residual: Option<&[f32]>,
    out: &mut [f32],
) {
    pointwise_uninit(isa, s, x, weight, bias, act, residual, as_uninit(out))
}

/// [`pointwise`] into an output that may be uninitialised: every element is written before
/// it returns.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pointwise_uninit(
    isa: Isa,
    s: PointwiseShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    residual: Option<&[f32]>,
    out: &mut [MaybeUninit<f32>],
) {
    assert_eq!(x.len(), s.input_len(), "pointwise: input length");
    assert_eq!(weight.len(), s.weight_len(), "pointwise: weight length");
    assert_eq!(bias.len(), s.c_out, "pointwise: bias length");
    assert_eq!(out.len(), s.output_len(), "pointwise: output length");
    if let Some(r) = residual {
        assert_eq!(r.len(), out.len(), "pointwise: residual length");
    }
    let isa = isa.fitting(&[s.panel_width()]);
    if !s.panel_width().is_multiple_of(isa.lanes()) || isa == Isa::Reference {
        return reference::pointwise(s, x, weight, bias, act, residual, zeroed(out));
    }
    let a = pointwise::Args {
        s,
        x: x.as_ptr(),
        w: weight.as_ptr(),
        bias: bias.as_ptr(),
        act,
        residual: residual.map(<[f32]>::as_ptr),
        out: out.as_mut_ptr().cast(),
        cols: 0..s.c_out,
    };
    check_isa(isa);
    // Only sizes the threads' shares (saturating: wasm32's usize is 32 bits).
    let macs = s.pixels.saturating_mul(s.c_in).saturating_mul(s.c_out);
    // Split where each thread then reads the least: by pixel rows, every thread reads all the
    // weights and its share of the input; by output channels, all the input and its share of
    // the weights. Layers with more output channels than pixels (the 7×7 and 14×14 expansions,
    // the head) have more weight than input, so they split by channels.
    let cols = column_unit(s).filter(|_| s.c_out > s.pixels);
    if let Some(unit) = cols {
        let units = s.c_out.div_ceil(unit);
        let parts = threads::parts(macs, units);
        threads::run_parts(parts, |i| {
            let r = threads::range(units, parts, i);
            let sub =
                pointwise::Args { cols: r.start * unit..(r.end * unit).min(s.c_out), ..a.clone() };
            // SAFETY: lengths checked above; the column range is at multiples of the panel
            // width, itself a multiple of the lanes; the ISA is available; parts write
            // disjoint columns.
            unsafe { dispatch!(isa, pointwise_entry, &sub) }
        });
        return;
    }
    // Parts of whole tiles: 24 rows is a multiple of every tile height (4, 6), so only the last
    // part has a partial tile.
    const ROWS: usize = 24;
    let units = s.pixels.div_ceil(ROWS);
    let parts = threads::parts(macs, units);
    threads::run_parts(parts, |i| {
        let rows = threads::range(units, parts, i);
        let sub = a.rows(rows.start * ROWS, (rows.end * ROWS).min(s.pixels));
        // SAFETY: lengths checked above; `c_out` is a multiple of the lanes; the ISA is
        // available; parts write disjoint pixel rows.
        unsafe { dispatch!(isa, pointwise_entry, &sub) }
    });
}

/// Output channels per part when a 1x1 call splits by channels: whole 32-wide tiles (the
/// widest any instruction set uses) where possible, never less than a panel.
fn column_unit(s: PointwiseShape) -> Option<usize> {
    let pw = s.panel_width();
    (pw < s.c_out).then(|| [32, 16, pw].into_iter().find(|u| s.c_out.is_multiple_of(*u)))?
}

/// Depthwise kxk convolution over NHWC, TF-SAME padding, bias and activation fused.
///
/// # Shapes
/// `x: [batch, height, width, c]`, `weight: [k, k, c]`, `bias: [c]`,
/// `out: [batch, ceil(height / stride), ceil(width / stride), c]`.
///
/// # Panics
/// When a slice length does not match the shape, `c_in != c_out`, or `isa` cannot run here.
pub fn depthwise(
    isa: Isa,
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [f32],
) {
    depthwise_uninit(isa, s, x, weight, bias, act, as_uninit(out))
}

/// [`depthwise`] into an output that may be uninitialised: every element is written before
/// it returns.
pub(crate) fn depthwise_uninit(
    isa: Isa,
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [MaybeUninit<f32>],
) {
    assert_eq!(s.c_in, s.c_out, "depthwise: channels in and out differ");
    assert!(s.kernel > 0 && s.stride > 0, "depthwise: empty kernel or stride");
    assert_eq!(x.len(), s.input_len(), "depthwise: input length");
    let weight_len = checked_len(&[s.kernel, s.kernel, s.c_in], "depthwise weight");
    assert_eq!(weight.len(), weight_len, "depthwise: weight length");
    assert_eq!(bias.len(), s.c_in, "depthwise: bias length");
    assert_eq!(out.len(), s.output_len(), "depthwise: output length");
    let isa = isa.fitting(&[s.c_in]);
    if !s.c_in.is_multiple_of(isa.lanes()) || isa == Isa::Reference {
        return reference::depthwise(s, x, weight, bias, act, zeroed(out));
    }
    let a = depthwise::Args {
        s,
        x: x.as_ptr(),
        w: weight.as_ptr(),
        bias: bias.as_ptr(),
        act,
        out: out.as_mut_ptr().cast(),
        pad_left: s.pad_before().1,
        rows: 0..0,
        x_row0: 0,
        out_row0: 0,
    };
    check_isa(isa);
    // Parts of whole output rows: every channel of a pixel stays in one part, so each part
    // writes whole cache lines.
    let (oh, _) = s.out_hw();
    let rows = s.batch * oh;
    let parts = threads::parts(out.len().saturating_mul(s.kernel * s.kernel), rows);
    threads::run_parts(parts, |i| {
        let sub = depthwise::Args { rows: threads::range(rows, parts, i), ..a.clone() };
        // SAFETY: as in `pointwise`; parts write disjoint output rows.
        unsafe { dispatch!(isa, depthwise_entry, &sub) }
    });
}

/// Dense kxk convolution from an NCHW input to an NHWC output (the stem), TF-SAME padding,
/// bias and activation fused.
///
/// # Shapes
/// `x: [batch, c_in, height, width]`, `weight: [k, k, c_in, c_out]`, `bias: [c_out]`,
/// `out: [batch, ceil(height / stride), ceil(width / stride), c_out]`.
///
/// # Panics
/// When a slice length does not match the shape or `isa` cannot run here.
pub fn conv_nchw_to_nhwc(
    isa: Isa,
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [f32],
) {
    conv_nchw_to_nhwc_uninit(isa, s, x, weight, bias, act, as_uninit(out))
}

/// [`conv_nchw_to_nhwc`] into an output that may be uninitialised: every element is written
/// before it returns.
pub(crate) fn conv_nchw_to_nhwc_uninit(
    isa: Isa,
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [MaybeUninit<f32>],
) {
    assert!(s.kernel > 0 && s.stride > 0, "stem: empty kernel or stride");
    assert_eq!(x.len(), s.input_len(), "stem: input length");
    let weight_len = checked_len(&[s.kernel, s.kernel, s.c_in, s.c_out], "stem weight");
    assert_eq!(weight.len(), weight_len, "stem: weight length");
    assert_eq!(bias.len(), s.c_out, "stem: bias length");
    assert_eq!(out.len(), s.output_len(), "stem: output length");
    let isa = isa.fitting(&[s.c_out]);
    if !s.c_out.is_multiple_of(isa.lanes()) || isa == Isa::Reference {
        return reference::conv_nchw_to_nhwc(s, x, weight, bias, act, zeroed(out));
    }
    let a = stem::Args {
        s,
        x: x.as_ptr(),
        w: weight.as_ptr(),
        bias: bias.as_ptr(),
        act,
        out: out.as_mut_ptr().cast(),
        rows: 0..0,
    };
    check_isa(isa);
    let (oh, _) = s.out_hw();
    let rows = s.batch * oh;
    let parts = threads::parts(out.len().saturating_mul(weight_len / s.c_out.max(1)), rows);
    threads::run_parts(parts, |i| {
        let sub = stem::Args { rows: threads::range(rows, parts, i), ..a.clone() };
        // SAFETY: as in `pointwise`; parts write disjoint output rows.
        unsafe { dispatch!(isa, stem_entry, &sub) }
    });
}

/// `out` seen as possibly-uninitialised floats, for the `*_uninit` functions, which only ever
/// write initialised values into it.
fn as_uninit(out: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has the layout of `f32`; the callee writes only initialised
    // floats, so the slice is still all initialised when the borrow ends.
    unsafe { &mut *(std::ptr::from_mut(out) as *mut [MaybeUninit<f32>]) }
}

/// `out` filled with zeros and seen as floats: for the scalar reference, which takes
/// initialised slices (it writes each value once and never reads its output; the zeros only
/// make the slice a valid `&mut [f32]`). Runs only for shapes the SIMD kernels do not take.
fn zeroed(out: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    out.fill(MaybeUninit::new(0.0));
    // SAFETY: every element was just initialised; same layout.
    unsafe { &mut *(std::ptr::from_mut(out) as *mut [f32]) }
}

/// Refuse an instruction set this machine does not run, before any kernel is entered.
pub(crate) fn check_isa(isa: Isa) {
    static AVAILABLE: std::sync::OnceLock<Vec<Isa>> = std::sync::OnceLock::new();
    let available = AVAILABLE.get_or_init(Isa::available);
    assert!(available.contains(&isa), "{isa:?} kernels do not run on this machine");
}

/// Call `$entry::<isa>`; the caller ran [`check_isa`].
macro_rules! dispatch {
    ($isa:expr, $entry:ident, $args:expr) => {
        match $isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => $crate::entries::x86::$entry::avx512($args),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Zmm => $crate::entries::x86::$entry::avx512_zmm($args),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => $crate::entries::x86::$entry::avx2($args),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Isa::Simd128 => $crate::entries::$entry::simd128($args),
            Isa::Portable => $crate::entries::$entry::portable($args),
            other => panic!("{other:?} kernels are not compiled for this target"),
        }
    };
}
pub(crate) use dispatch;

mod entries;
