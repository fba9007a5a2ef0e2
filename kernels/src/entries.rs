//! One function per (kernel, instruction set) with the tile sizes chosen for its register file.
//! The x86 ones carry `#[target_feature]`, so the generic kernel inlined into them is compiled
//! for that instruction set; the dispatcher calls them only after run-time detection.

#![allow(unsafe_op_in_unsafe_fn)] // each body is one call whose contract is the function's own

use crate::simd::Portable;
use crate::{depthwise, mbconv, pointwise, stem};

/// Tile sizes: pointwise `MR × NV`, depthwise `OX × NV`, stem `NV`.
macro_rules! entry_set {
    ($vis:vis mod $name:ident, $simd:ty, $($feat:literal)?, pw: ($mr:literal, $pnv:literal),
     dw: ($ox:literal, $dnv:literal), stem: ($sox:literal, $snv:literal)) => {
        $vis mod $name {
            use super::*;
            /// # Safety
            /// Valid arguments for the shape and the instruction set available.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn pointwise_entry(a: &pointwise::Args) {
                pointwise::run::<$simd, $mr, $pnv>(a)
            }
            /// # Safety
            /// As above.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn depthwise_entry(a: &depthwise::Args) {
                depthwise::run::<$simd, $ox, $dnv>(a)
            }
            /// # Safety
            /// As above.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn stem_entry(a: &stem::Args) {
                stem::run::<$simd, $sox, $snv>(a)
            }
            /// # Safety
            /// As above.
            $(#[target_feature(enable = $feat)])?
            pub(crate) unsafe fn mbconv_entry(a: &mbconv::Args) {
                mbconv::run::<$simd, $mr, $pnv, $ox, $dnv>(a)
            }
        }
    };
}

entry_set!(mod portable_set, Portable, , pw: (4, 2), dw: (4, 2), stem: (2, 4));

/// Per kernel, the portable entry.
pub(crate) mod pointwise_entry {
    pub(crate) use super::portable_set::pointwise_entry as portable;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(crate) use super::wasm_set::pointwise_entry as simd128;
}
/// Per kernel, the portable entry.
pub(crate) mod depthwise_entry {
    pub(crate) use super::portable_set::depthwise_entry as portable;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(crate) use super::wasm_set::depthwise_entry as simd128;
}
/// Per kernel, the portable entry.
pub(crate) mod stem_entry {
    pub(crate) use super::portable_set::stem_entry as portable;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(crate) use super::wasm_set::stem_entry as simd128;
}
/// Per kernel, the portable entry.
pub(crate) mod mbconv_entry {
    pub(crate) use super::portable_set::mbconv_entry as portable;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(crate) use super::wasm_set::mbconv_entry as simd128;
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use crate::simd::Wasm128;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(feature = "relaxed-simd")))]
entry_set!(mod wasm_set, Wasm128, , pw: (4, 3), dw: (4, 2), stem: (2, 4));
// Relaxed SIMD's fused multiply-add in these functions only (`Wasm128::mul_add` inlines into
// them), so the crates around the kernels compile the same as for the plain-SIMD module.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", feature = "relaxed-simd"))]
entry_set!(mod wasm_set, Wasm128, "relaxed-simd", pw: (4, 3), dw: (4, 2), stem: (2, 4));

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::*;
    use crate::simd::{Avx2, Avx512};
    entry_set!(mod v3, Avx2, "avx2,fma", pw: (6, 2), dw: (4, 2), stem: (2, 4));
    entry_set!(mod v4, Avx2, "avx2,fma,avx512f,avx512vl", pw: (6, 4), dw: (4, 4), stem: (4, 4));
    // The same tiles in channels as `v4` (32 a tile), in zmm registers.
    entry_set!(mod v4z, Avx512, "avx2,fma,avx512f,avx512vl", pw: (6, 2), dw: (4, 2), stem: (4, 2));

    /// Per kernel, the x86 entries.
    pub(crate) mod pointwise_entry {
        pub(crate) use super::v3::pointwise_entry as avx2;
        pub(crate) use super::v4::pointwise_entry as avx512;
        pub(crate) use super::v4z::pointwise_entry as avx512_zmm;
    }
    /// Per kernel, the x86 entries.
    pub(crate) mod depthwise_entry {
        pub(crate) use super::v3::depthwise_entry as avx2;
        pub(crate) use super::v4::depthwise_entry as avx512;
        pub(crate) use super::v4z::depthwise_entry as avx512_zmm;
    }
    /// Per kernel, the x86 entries.
    pub(crate) mod stem_entry {
        pub(crate) use super::v3::stem_entry as avx2;
        pub(crate) use super::v4::stem_entry as avx512;
        pub(crate) use super::v4z::stem_entry as avx512_zmm;
    }
    /// Per kernel, the x86 entries.
    pub(crate) mod mbconv_entry {
        pub(crate) use super::v3::mbconv_entry as avx2;
        pub(crate) use super::v4::mbconv_entry as avx512;
        pub(crate) use super::v4z::mbconv_entry as avx512_zmm;
    }
}
