//! One vector abstraction over the instruction sets the kernels target, so each kernel is written
//! once and compiled per target with the right registers.
//!
//! Every method is `unsafe` and `#[inline(always)]`: callers guarantee the pointers are valid for
//! `LANES` floats, and the methods inline into the `#[target_feature]` function that instantiates
//! the kernel, which is where the instruction set is enabled.

/// A vector of `LANES` f32 values and the few operations the kernels need.
pub(crate) trait Simd: Copy {
    /// Floats per vector.
    const LANES: usize;
    /// The register type.
    type V: Copy;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// Load `LANES` floats from `p` (no alignment needed).
    unsafe fn load(p: *const f32) -> Self::V;
    /// Store `LANES` floats to `p` (no alignment needed).
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `a * b + c`, fused where the target has FMA.
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a + b`.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// `min(max(v, lo), hi)` lane-wise.
    unsafe fn clamp(v: Self::V, lo: Self::V, hi: Self::V) -> Self::V;
    /// Ask for the cache line holding `p` ahead of its use; a hint that never faults, so `p`
    /// may point anywhere. Nothing where the target has no prefetch instruction.
    #[inline(always)]
    unsafe fn prefetch(_p: *const f32) {}
}

/// Plain arrays of 4: what any target vectorises (SSE2 on x86-64, NEON on aarch64).
#[derive(Clone, Copy)]
pub(crate) struct Portable;

impl Simd for Portable {
    const LANES: usize = 4;
    type V = [f32; 4];
    #[inline(always)]
    unsafe fn splat(x: f32) -> [f32; 4] {
        [x; 4]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; 4] {
        // SAFETY: the caller guarantees 4 readable floats at `p`.
        unsafe { p.cast::<[f32; 4]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; 4]) {
        // SAFETY: the caller guarantees 4 writable floats at `p`.
        unsafe { p.cast::<[f32; 4]>().write_unaligned(v) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: [f32; 4], b: [f32; 4], c: [f32; 4]) -> [f32; 4] {
        // Not `f32::mul_add`: without hardware FMA that is a libm call per lane.
        std::array::from_fn(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    unsafe fn add(a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|i| a[i] + b[i])
    }
    #[inline(always)]
    unsafe fn clamp(v: [f32; 4], lo: [f32; 4], hi: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|i| v[i].max(lo[i]).min(hi[i]))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Simd;
    use std::arch::x86_64::*;

    /// 8 lanes in a ymm register with FMA (x86-64-v3). Compiled with AVX-512VL enabled as well,
    /// the same code gets 32 registers instead of 16, which the larger tiles use.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2;

    impl Simd for Avx2 {
        const LANES: usize = 8;
        type V = __m256;
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m256 {
            // SAFETY: only instantiated inside functions compiled with avx2+fma, called after
            // run-time detection.
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            // SAFETY: as above; the caller guarantees 8 readable floats.
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            // SAFETY: as above; the caller guarantees 8 writable floats.
            unsafe { _mm256_storeu_ps(p, v) }
        }
        #[inline(always)]
        unsafe fn mul_add(a: __m256, b: __m256, c: __m256) -> __m256 {
            // SAFETY: as above.
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        unsafe fn add(a: __m256, b: __m256) -> __m256 {
            // SAFETY: as above.
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn clamp(v: __m256, lo: __m256, hi: __m256) -> __m256 {
            // SAFETY: as above.
            unsafe { _mm256_min_ps(_mm256_max_ps(v, lo), hi) }
        }
        #[inline(always)]
        unsafe fn prefetch(p: *const f32) {
            // SAFETY: a prefetch is a hint; it does not fault on any address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
        }
    }

    /// 16 lanes in a zmm register (x86-64-v4): half the instructions of [`Avx2`] for the same
    /// work, which a core whose AVX-512 units are a full 512 bits wide (AMD Zen 5, Intel's
    /// server cores) runs in the time of 8 lanes.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512;

    impl Simd for Avx512 {
        const LANES: usize = 16;
        type V = __m512;
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m512 {
            // SAFETY: only instantiated inside functions compiled with avx512f, called after
            // run-time detection.
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m512 {
            // SAFETY: as above; the caller guarantees 16 readable floats.
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m512) {
            // SAFETY: as above; the caller guarantees 16 writable floats.
            unsafe { _mm512_storeu_ps(p, v) }
        }
        #[inline(always)]
        unsafe fn mul_add(a: __m512, b: __m512, c: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        unsafe fn add(a: __m512, b: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn clamp(v: __m512, lo: __m512, hi: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_min_ps(_mm512_max_ps(v, lo), hi) }
        }
        #[inline(always)]
        unsafe fn prefetch(p: *const f32) {
            // SAFETY: a prefetch is a hint; it does not fault on any address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use wasm::Wasm128;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::Simd;
    use std::arch::wasm32::*;

    /// WebAssembly's 128-bit SIMD: 4 lanes, no FMA (relaxed SIMD adds one: the `relaxed-simd`
    /// feature).
    #[derive(Clone, Copy)]
    pub(crate) struct Wasm128;

    impl Simd for Wasm128 {
        const LANES: usize = 4;
        type V = v128;
        #[inline(always)]
        unsafe fn splat(x: f32) -> v128 {
            f32x4_splat(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> v128 {
            // SAFETY: the caller guarantees 16 readable bytes; v128_load has no alignment needs.
            unsafe { v128_load(p.cast()) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: v128) {
            // SAFETY: the caller guarantees 16 writable bytes.
            unsafe { v128_store(p.cast(), v) }
        }
        #[inline(always)]
        unsafe fn mul_add(a: v128, b: v128, c: v128) -> v128 {
            // With the feature, the kernels' wasm entries are compiled with `relaxed-simd`
            // (`entries.rs`) and this inlines into them.
            #[cfg(feature = "relaxed-simd")]
            {
                f32x4_relaxed_madd(a, b, c)
            }
            #[cfg(not(feature = "relaxed-simd"))]
            {
                f32x4_add(f32x4_mul(a, b), c)
            }
        }
        #[inline(always)]
        unsafe fn add(a: v128, b: v128) -> v128 {
            f32x4_add(a, b)
        }
        #[inline(always)]
        unsafe fn clamp(v: v128, lo: v128, hi: v128) -> v128 {
            // pmin/pmax: plain compare-and-select, cheaper than the NaN-propagating min/max.
            f32x4_pmin(f32x4_pmax(v, lo), hi)
        }
    }
}
