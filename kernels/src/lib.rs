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
//!   activation stays in cache between its three convolutions.
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

mod alloc;
mod depthwise;
mod mbconv;
mod pointwise;
pub mod reference;
mod shape;
mod simd;
mod stem;
mod threads;

pub use alloc::{conv_nchw_to_nhwc_new, depthwise_new, mbconv_new, pointwise_new};
pub use mbconv::{BAND_BYTES, BAND_MIN_BYTES, Conv, MbConvParams, MbConvShape, mbconv};
pub use shape::{Activation, ConvShape, PANEL, PointwiseShape};
#[cfg(all(feature = "threads", target_family = "wasm"))]
pub use threads::use_worker_pool;
pub use threads::{max_threads, set_max_threads};

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
                if std::env::var_os("SPLIT_KERNELS_NO_AVX512").is_none()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("fma")
                {
                    Isa::Avx512
                } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
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
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                out.push(Isa::Avx2);
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
                out.push(Isa::Avx512);
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
        }
    }
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
    assert_eq!(x.len(), s.pixels * s.c_in, "pointwise: input length");
    assert_eq!(weight.len(), s.c_in * s.c_out, "pointwise: weight length");
    assert_eq!(bias.len(), s.c_out, "pointwise: bias length");
    assert_eq!(out.len(), s.pixels * s.c_out, "pointwise: output length");
    if let Some(r) = residual {
        assert_eq!(r.len(), out.len(), "pointwise: residual length");
    }
    if !s.panel_width().is_multiple_of(isa.lanes()) || isa == Isa::Reference {
        return reference::pointwise(s, x, weight, bias, act, residual, out);
    }
    let a = pointwise::Args {
        s,
        x: x.as_ptr(),
        w: weight.as_ptr(),
        bias: bias.as_ptr(),
        act,
        residual: residual.map(<[f32]>::as_ptr),
        out: out.as_mut_ptr(),
        cols: 0..s.c_out,
    };
    check_isa(isa);
    let macs = s.pixels * s.c_in * s.c_out;
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
    assert_eq!(s.c_in, s.c_out, "depthwise: channels in and out differ");
    assert!(s.kernel > 0 && s.stride > 0, "depthwise: empty kernel or stride");
    assert_eq!(x.len(), s.input_len(), "depthwise: input length");
    assert_eq!(weight.len(), s.kernel * s.kernel * s.c_in, "depthwise: weight length");
    assert_eq!(bias.len(), s.c_in, "depthwise: bias length");
    assert_eq!(out.len(), s.output_len(), "depthwise: output length");
    if !s.c_in.is_multiple_of(isa.lanes()) || isa == Isa::Reference {
        return reference::depthwise(s, x, weight, bias, act, out);
    }
    let a = depthwise::Args {
        s,
        x: x.as_ptr(),
        w: weight.as_ptr(),
        bias: bias.as_ptr(),
        act,
        out: out.as_mut_ptr(),
        pad_left: s.pad_before().1,
        rows: 0..0,
        x_row0: 0,
        out_row0: 0,
    };
    check_isa(isa);
    // Parts of whole output rows: every channel of a pixel stays in one part, so each part
    // writes whole cache lines.
    let (oh, ow) = s.out_hw();
    let rows = s.batch * oh;
    let parts = threads::parts(rows * ow * s.c_in * s.kernel * s.kernel, rows);
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
    assert!(s.kernel > 0 && s.stride > 0, "stem: empty kernel or stride");
    assert_eq!(x.len(), s.input_len(), "stem: input length");
    assert_eq!(weight.len(), s.kernel * s.kernel * s.c_in * s.c_out, "stem: weight length");
    assert_eq!(bias.len(), s.c_out, "stem: bias length");
    assert_eq!(out.len(), s.output_len(), "stem: output length");
    if !s.c_out.is_multiple_of(isa.lanes()) || isa == Isa::Reference {
        return reference::conv_nchw_to_nhwc(s, x, weight, bias, act, out);
    }
    let a = stem::Args {
        s,
        x: x.as_ptr(),
        w: weight.as_ptr(),
        bias: bias.as_ptr(),
        act,
        out: out.as_mut_ptr(),
        rows: 0..0,
    };
    check_isa(isa);
    let (oh, ow) = s.out_hw();
    let rows = s.batch * oh;
    let parts = threads::parts(rows * ow * s.c_out * s.c_in * s.kernel * s.kernel, rows);
    threads::run_parts(parts, |i| {
        let sub = stem::Args { rows: threads::range(rows, parts, i), ..a.clone() };
        // SAFETY: as in `pointwise`; parts write disjoint output rows.
        unsafe { dispatch!(isa, stem_entry, &sub) }
    });
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
