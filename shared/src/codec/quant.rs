//! Per-channel affine quantization with clipping, the optional low-rank channel projection, and
//! bit-packing. Tensors here are one image's activations, `[C, H*W]` in C order.

/// Clip range of one channel; `lo == hi` for a channel that never varies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipRange {
    /// Values below are clipped up to this.
    pub lo: f32,
    /// Values above are clipped down to this.
    pub hi: f32,
}

impl ClipRange {
    /// Quantization step for `levels` levels (0 for a constant channel).
    pub fn step(self, levels: usize) -> f32 {
        if self.hi > self.lo { (self.hi - self.lo) / (levels - 1) as f32 } else { 0.0 }
    }
}

/// Quantize `values` (`ranges.len()` channels of `positions` values each) to symbols in
/// `0..levels`.
pub fn quantize(values: &[f32], ranges: &[ClipRange], levels: usize, out: &mut Vec<u8>) {
    let positions = values.len() / ranges.len().max(1);
    out.clear();
    out.reserve(values.len());
    let top = (levels - 1) as f32;
    for (channel, range) in values.chunks_exact(positions.max(1)).zip(ranges) {
        let step = range.step(levels);
        if step == 0.0 {
            out.extend(std::iter::repeat_n(0, channel.len()));
            continue;
        }
        let inv = 1.0 / step;
        // NaN clamps to nothing, so map it explicitly to the lowest level.
        out.extend(channel.iter().map(|v| {
            let q = ((v - range.lo) * inv).round();
            if q >= 0.0 { q.min(top) as u8 } else { 0 }
        }));
    }
}

/// Reconstruct values from symbols.
pub fn dequantize(symbols: &[u8], ranges: &[ClipRange], levels: usize, out: &mut Vec<f32>) {
    let positions = symbols.len() / ranges.len().max(1);
    out.clear();
    out.reserve(symbols.len());
    for (channel, range) in symbols.chunks_exact(positions.max(1)).zip(ranges) {
        let step = range.step(levels);
        out.extend(channel.iter().map(|q| range.lo + f32::from(*q) * step));
    }
}

/// A learned linear map from `channels` to `rank` components: `y = basisᵀ (x - mean)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    /// Per-channel mean subtracted before projecting.
    pub mean: Vec<f32>,
    /// `[channels, max_rank]`, row-major; columns are orthonormal, most variance first.
    pub basis: Vec<f32>,
    /// Columns stored (the most any setting can use).
    pub max_rank: usize,
}

impl Projection {
    /// Channels of the unprojected tensor.
    pub fn channels(&self) -> usize {
        self.mean.len()
    }

    /// Project `x` (`[channels, positions]`) onto the first `rank` components.
    pub fn project(&self, x: &[f32], rank: usize) -> Vec<f32> {
        let c = self.channels();
        let positions = x.len() / c;
        let mut y = vec![0.0f32; rank * positions];
        for (ch, row) in x.chunks_exact(positions).enumerate() {
            let mean = self.mean[ch];
            let weights = &self.basis[ch * self.max_rank..ch * self.max_rank + rank];
            for (k, w) in weights.iter().enumerate() {
                let out = &mut y[k * positions..(k + 1) * positions];
                for (o, v) in out.iter_mut().zip(row) {
                    *o += w * (v - mean);
                }
            }
        }
        y
    }

    /// Map `rank` components (`[rank, positions]`) back to channels.
    pub fn unproject(&self, y: &[f32], rank: usize) -> Vec<f32> {
        let c = self.channels();
        let positions = y.len() / rank.max(1);
        let mut x = vec![0.0f32; c * positions];
        for (ch, out) in x.chunks_exact_mut(positions).enumerate() {
            out.fill(self.mean[ch]);
            let weights = &self.basis[ch * self.max_rank..ch * self.max_rank + rank];
            for (w, comp) in weights.iter().zip(y.chunks_exact(positions)) {
                for (o, v) in out.iter_mut().zip(comp) {
                    *o += w * v;
                }
            }
        }
        x
    }
}

/// Pack `bits`-bit symbols, least significant bit first.
pub fn pack(symbols: &[u8], bits: u8, out: &mut Vec<u8>) {
    let mut acc = 0u32;
    let mut filled = 0u8;
    for s in symbols {
        acc |= u32::from(*s) << filled;
        filled += bits;
        while filled >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            filled -= 8;
        }
    }
    if filled > 0 {
        out.push(acc as u8);
    }
}

/// Bytes [`pack`] writes for `count` symbols.
pub fn packed_len(count: usize, bits: u8) -> usize {
    (count * usize::from(bits)).div_ceil(8)
}

/// Unpack `count` symbols; `bytes` must be exactly [`packed_len`] long.
pub fn unpack(bytes: &[u8], bits: u8, count: usize) -> Vec<u8> {
    let mask = (1u32 << bits) - 1;
    let mut out = Vec::with_capacity(count);
    let mut acc = 0u32;
    let mut filled = 0u8;
    let mut input = bytes.iter();
    while out.len() < count {
        while filled < bits {
            acc |= u32::from(*input.next().unwrap_or(&0)) << filled;
            filled += 8;
        }
        out.push((acc & mask) as u8);
        acc >>= bits;
        filled -= bits;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization_error_is_at_most_half_a_step_inside_the_range() {
        let ranges = [ClipRange { lo: -1.0, hi: 3.0 }, ClipRange { lo: 0.0, hi: 6.0 }];
        let values: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        for bits in [2u8, 3, 4, 6, 8] {
            let levels = 1usize << bits;
            let mut q = Vec::new();
            quantize(&values, &ranges, levels, &mut q);
            assert!(q.iter().all(|s| usize::from(*s) < levels));
            let mut back = Vec::new();
            dequantize(&q, &ranges, levels, &mut back);
            for (i, (v, b)) in values.iter().zip(&back).enumerate() {
                let r = ranges[i / 32];
                let clipped = v.clamp(r.lo, r.hi);
                assert!((clipped - b).abs() <= r.step(levels) / 2.0 + 1e-6, "{bits} bits, {i}");
            }
        }
    }

    #[test]
    fn constant_channels_and_nan_quantize_to_zero() {
        let ranges = [ClipRange { lo: 2.0, hi: 2.0 }, ClipRange { lo: 0.0, hi: 1.0 }];
        let mut q = Vec::new();
        quantize(&[5.0, -1.0, f32::NAN, 7.0], &ranges, 16, &mut q);
        assert_eq!(q, vec![0, 0, 0, 15]);
        let mut back = Vec::new();
        dequantize(&q, &ranges, 16, &mut back);
        assert_eq!(back, vec![2.0, 2.0, 0.0, 1.0]);
    }

    #[test]
    fn pack_round_trips_every_width() {
        for bits in 1..=8u8 {
            let symbols: Vec<u8> = (0..101u32).map(|i| (i * 37 % (1 << bits)) as u8).collect();
            let mut bytes = Vec::new();
            pack(&symbols, bits, &mut bytes);
            assert_eq!(bytes.len(), packed_len(symbols.len(), bits));
            assert_eq!(unpack(&bytes, bits, symbols.len()), symbols);
        }
    }

    #[test]
    fn full_rank_projection_is_invertible() {
        // A rotation by 30 degrees in the plane of two channels.
        let (s, c) = (0.5f32, 0.75f32.sqrt());
        let p = Projection { mean: vec![1.0, -2.0], basis: vec![c, -s, s, c], max_rank: 2 };
        let x = vec![1.0, 2.0, 3.0, -1.0, 0.5, 4.0];
        let back = p.unproject(&p.project(&x, 2), 2);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() < 1e-5, "{x:?} vs {back:?}");
        }
        // Rank 1 keeps the first component only: the reconstruction lies on that line.
        let one = p.unproject(&p.project(&x, 1), 1);
        for i in 0..3 {
            let (dx, dy) = (one[i] - 1.0, one[3 + i] + 2.0);
            assert!((dx * s - dy * c).abs() < 1e-5);
        }
    }
}
