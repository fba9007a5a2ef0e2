//! Sensitivity-allocated quantization with context-modelled coding: the `s<level>` settings.
//!
//! The `q<bits>` settings give every channel the same number of levels and code each channel's
//! symbols with one static distribution. Here instead:
//!
//! 1. **Steps by sensitivity.** Calibration measures, per channel, how far noise on that channel
//!    moves the model's output (`weight`: KL divergence of the answer per unit of noise
//!    variance, summed over positions). Uniform quantization with step Δ adds noise of variance
//!    Δ²/12, so spending bits where they move the answer most means equal `weight·Δ²` across
//!    channels: Δ_c = unit_c · 2^(−level/2) with unit_c = √(12 / (C·weight_c)), and at level k
//!    the predicted mean KL is 2^(−k) nats. Channels whose step would exceed
//!    [`SKIP_SPREADS`] times their spread are not sent: the cloud uses their calibration mean.
//! 2. **Uniform quantization** on a grid anchored at zero, symbols counted from the grid
//!    point nearest the channel's calibration mean; unbounded (no clip range to choose;
//!    magnitudes up to [`MAX_MAGNITUDE`]).
//! 3. **Context modelling.** Each symbol is binarised (zero?, sign, above 1?, above 2?, then
//!    Exp-Golomb of the rest, its order growing with the channel's expected magnitude and its
//!    prefix adaptive, its suffix bits equiprobable) and every decision is range-coded ([`super::range`]) with an adaptive probability
//!    chosen by what the decoder already has: the activity of the left, top, top-left and
//!    top-right neighbours in the same channel, and the channel's expected activity (its spread
//!    over its step). The probabilities start at one half in every frame and adapt, so nothing
//!    per image is sent and the model costs no storage.
//!
//! Every decision's context is computed from integers and from f32 products and quotients of
//! calibration values (IEEE-exact on every platform), so the browser and the server agree.

use super::CodecError;
use super::range::{Bit, Decoder, Encoder};

/// Finest level a setting may name (a predicted KL of 2^−24 nats: far past what any answer
/// notices; finer steps would clip real activations at [`MAX_MAGNITUDE`]).
pub const MAX_LEVEL: u8 = 24;
/// Version of the context model; a frame names the one it was coded with.
pub const CONTEXT_MODEL: u8 = 1;
/// Largest magnitude a symbol may take (larger ones are clipped by the encoder and refused by
/// the decoder): bounds decoded values and decoding work.
pub const MAX_MAGNITUDE: u32 = 1 << 15;
/// A channel whose step exceeds this many times its calibration spread is not sent.
pub const SKIP_SPREADS: f32 = 8.0;
/// Magnitudes coded with their own adaptive decisions ("above 1?", "above 2?"); the rest of a
/// larger one is Exp-Golomb-coded.
const SMALL: u32 = 2;
/// Longest Exp-Golomb prefix a decoder accepts.
const MAX_PREFIX: u32 = 16;
/// Adaptive prefix decisions per class (later ones share the last).
const PREFIX_CONTEXTS: usize = 8;
/// Rounding offset of the quantizer: 0.5 is plain rounding; less widens the zero bin.
const ROUNDING: f32 = 0.5;
/// Reconstruction of a nonzero symbol sits this many steps toward zero from the bin's centre.
const RECONSTRUCTION_SHIFT: f32 = 0.0;

/// Expected-activity classes: spread over step below each threshold.
const CLASS_LIMITS: [f32; 9] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
const CLASSES: usize = CLASS_LIMITS.len() + 1;
/// Neighbour-activity buckets.
const ACTIVITY: usize = 5;

/// Calibrated per-channel values at one boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocTable {
    center: Vec<f32>,
    spread: Vec<f32>,
    weight: Vec<f32>,
    unit: Vec<f32>,
}

impl AllocTable {
    /// A table from per-channel means, standard deviations and sensitivities (KL per unit of
    /// noise variance on the whole channel).
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] when the lengths differ or a value is not finite, or a
    /// spread or weight is negative.
    pub fn new(center: Vec<f32>, spread: Vec<f32>, weight: Vec<f32>) -> Result<Self, CodecError> {
        let bad = |m: &str| CodecError::BadCalibration(format!("allocation table: {m}"));
        if center.len() != spread.len() || center.len() != weight.len() || center.is_empty() {
            return Err(bad("lengths differ"));
        }
        if center.iter().chain(&spread).chain(&weight).any(|v| !v.is_finite()) {
            return Err(bad("a value is not finite"));
        }
        if spread.iter().chain(&weight).any(|v| *v < 0.0) {
            return Err(bad("a spread or weight is negative"));
        }
        let channels = center.len() as f32;
        // A channel that moves nothing gets a step far past its spread: never sent.
        let unit = weight
            .iter()
            .zip(&spread)
            .map(|(w, s)| {
                let cap = 2.0 * SKIP_SPREADS * s * f32::from(1u16 << (MAX_LEVEL / 2));
                if *w > 0.0 { (12.0 / (channels * w)).sqrt().min(cap) } else { cap }
            })
            .collect();
        Ok(Self { center, spread, weight, unit })
    }

    /// Channels.
    pub fn channels(&self) -> usize {
        self.center.len()
    }

    /// Calibration mean per channel: what a skipped channel is reconstructed as.
    pub fn center(&self) -> &[f32] {
        &self.center
    }

    /// Calibration standard deviation per channel.
    pub fn spread(&self) -> &[f32] {
        &self.spread
    }

    /// Measured sensitivity per channel.
    pub fn weight(&self) -> &[f32] {
        &self.weight
    }

    /// Quantization step of each channel at `level`; 0 for a channel not sent.
    pub fn steps(&self, level: u8) -> Vec<f32> {
        let mut scale = 1.0 / f32::from(1u16 << (level.min(MAX_LEVEL) / 2));
        if level % 2 == 1 {
            scale *= std::f32::consts::FRAC_1_SQRT_2;
        }
        self.unit
            .iter()
            .zip(&self.spread)
            .map(|(u, s)| {
                let step = u * scale;
                if *s > 0.0 && step <= SKIP_SPREADS * s { step } else { 0.0 }
            })
            .collect()
    }

    /// Predicted mean KL divergence (nats) of the answer at `level`, under the high-rate
    /// approximation the allocation uses: what the level number means.
    pub fn predicted_kl(level: u8) -> f64 {
        (-f64::from(level)).exp2()
    }
}

fn class(spread: f32, step: f32) -> usize {
    let ratio = spread / step;
    CLASS_LIMITS.iter().take_while(|l| ratio >= **l).count()
}

/// Exp-Golomb order for a class: about log2 of the magnitudes its channels take.
fn golomb_order(class: usize) -> u32 {
    class.saturating_sub(4) as u32
}

/// Adaptive probabilities of one frame.
struct Contexts {
    zero: Vec<Bit>,
    sign: [Bit; 9],
    small: Vec<Bit>,
    prefix: Vec<Bit>,
}

impl Contexts {
    fn new() -> Self {
        Self {
            zero: vec![Bit::default(); CLASSES * ACTIVITY],
            sign: [Bit::default(); 9],
            small: vec![Bit::default(); CLASSES * ACTIVITY * SMALL as usize],
            prefix: vec![Bit::default(); CLASSES * PREFIX_CONTEXTS],
        }
    }
}

fn small_index(class: usize, n: Neighbours, k: u32) -> usize {
    (class * ACTIVITY + n.activity) * SMALL as usize + (k as usize - 1)
}

fn prefix_index(class: usize, i: u32) -> usize {
    class * PREFIX_CONTEXTS + (i as usize).min(PREFIX_CONTEXTS - 1)
}

/// What the decoder already knows around a position of a channel's plane.
#[derive(Clone, Copy)]
struct Neighbours {
    activity: usize,
    sign: usize,
}

/// Activity bucket of a weighted neighbour sum `2·left + 2·top + top-left + top-right` (each
/// magnitude capped at 8): 0, 1–2, 3–4, 5–8, more.
const ACTIVITY_OF_SUM: [u8; 49] = {
    let mut t = [4u8; 49];
    let mut a = 0;
    while a < 49 {
        t[a] = match a {
            0 => 0,
            1..=2 => 1,
            3..=4 => 2,
            5..=8 => 3,
            _ => 4,
        };
        a += 1;
    }
    t
};

/// The symbols of one channel as coded so far, with a border of zeros (one row above, one
/// column either side) so that every position has a left, top, top-left and top-right
/// neighbour without a bounds test; the border is never written, so a plane serves every
/// channel in turn (a position's neighbours are always written before it, in this channel).
struct Plane {
    cells: Vec<i32>,
    stride: usize,
}

impl Plane {
    fn new(height: usize, width: usize) -> Self {
        let stride = width + 2;
        Self { cells: vec![0; (height + 1) * stride], stride }
    }

    /// Index of `(y, x)` in `cells`.
    fn at(&self, y: usize, x: usize) -> usize {
        (y + 1) * self.stride + x + 1
    }

    fn neighbours(&self, p: usize) -> Neighbours {
        let above = p - self.stride;
        let (left, top) = (self.cells[p - 1], self.cells[above]);
        let (top_left, top_right) = (self.cells[above - 1], self.cells[above + 1]);
        let m = |v: i32| v.unsigned_abs().min(8);
        let a = 2 * m(left) + 2 * m(top) + m(top_left) + m(top_right);
        let activity = usize::from(ACTIVITY_OF_SUM[a as usize]);
        let sign = ((left.signum() + 1) * 3 + (top.signum() + 1)) as usize;
        Neighbours { activity, sign }
    }
}

/// The grid point nearest a channel's mean, in steps: symbols count steps from there, so the
/// symbol 0 is the most common one, while the grid itself stays anchored at zero and exact
/// zeros (most of a ReLU output) come back exactly zero instead of off by up to half a step in
/// the same direction everywhere, an error the pooling after the head adds up.
fn anchor(center: f32, step: f32) -> i32 {
    let k = (center / step).round();
    if k.is_finite() { k.clamp(-(MAX_MAGNITUDE as f32), MAX_MAGNITUDE as f32) as i32 } else { 0 }
}

/// Quantize one value to a signed symbol: steps from the anchor.
fn quantize(value: f32, anchor: i32, step: f32) -> i32 {
    let r = value / step - anchor as f32;
    // Truncation is the floor of a non-negative number; the cast saturates and makes NaN 0.
    let magnitude = ((r.abs() + ROUNDING) as u32).min(MAX_MAGNITUDE) as i32;
    if r < 0.0 { -magnitude } else { magnitude }
}

fn dequantize(symbol: i32, anchor: i32, step: f32) -> f32 {
    let shift = if symbol == 0 { 0.0 } else { symbol.signum() as f32 * RECONSTRUCTION_SHIFT };
    ((anchor + symbol) as f32 - shift) * step
}

/// Encode one image's activations (`channels × height × width`, C order) at `level`.
pub fn encode(
    values: &[f32],
    height: usize,
    width: usize,
    table: &AllocTable,
    level: u8,
) -> Vec<u8> {
    let positions = height * width;
    let steps = table.steps(level);
    let mut enc = Encoder::new();
    let mut ctx = Contexts::new();
    let mut plane = Plane::new(height, width);
    for (c, channel) in values.chunks_exact(positions).enumerate() {
        let step = steps[c];
        if step == 0.0 {
            continue;
        }
        let class = class(table.spread[c], step);
        let anchor = anchor(table.center[c], step);
        for (y, row) in channel.chunks_exact(width).enumerate() {
            let start = plane.at(y, 0);
            for (x, v) in row.iter().enumerate() {
                let n = plane.neighbours(start + x);
                let q = quantize(*v, anchor, step);
                plane.cells[start + x] = q;
                code_symbol(&mut enc, &mut ctx, class, n, q);
            }
        }
    }
    enc.finish()
}

fn code_symbol(enc: &mut Encoder, ctx: &mut Contexts, class: usize, n: Neighbours, q: i32) {
    enc.bit(&mut ctx.zero[class * ACTIVITY + n.activity], q != 0);
    if q == 0 {
        return;
    }
    enc.bit(&mut ctx.sign[n.sign], q < 0);
    let magnitude = q.unsigned_abs();
    for k in 1..=SMALL {
        let more = magnitude > k;
        enc.bit(&mut ctx.small[small_index(class, n, k)], more);
        if !more {
            return;
        }
    }
    // Exp-Golomb of order `order` of what is left: the bit length of (v >> order) + 1 in
    // unary with adaptive decisions, then its remaining bits and the low `order` bits as they are.
    let order = golomb_order(class);
    let v = magnitude - SMALL - 1;
    let w = (v >> order) + 1;
    let len = 31 - w.leading_zeros();
    for i in 0..len {
        enc.bit(&mut ctx.prefix[prefix_index(class, i)], true);
    }
    enc.bit(&mut ctx.prefix[prefix_index(class, len)], false);
    enc.raw(w - (1 << len), len);
    enc.raw(v, order);
}

/// Decode a payload [`encode`] wrote back to `channels × height × width` values.
///
/// # Errors
/// [`CodecError::BadPayload`] when the payload is damaged: a magnitude beyond
/// [`MAX_MAGNITUDE`], or bytes missing or left over.
pub fn decode(
    payload: &[u8],
    height: usize,
    width: usize,
    table: &AllocTable,
    level: u8,
) -> Result<Vec<f32>, CodecError> {
    let positions = height * width;
    let steps = table.steps(level);
    let mut dec = Decoder::new(payload)?;
    let mut ctx = Contexts::new();
    let mut plane = Plane::new(height, width);
    let mut out = Vec::with_capacity(table.channels() * positions);
    for (c, step) in steps.iter().enumerate() {
        let center = table.center[c];
        if *step == 0.0 {
            out.extend(std::iter::repeat_n(center, positions));
            continue;
        }
        let class = class(table.spread[c], *step);
        let anchor = anchor(center, *step);
        for y in 0..height {
            let start = plane.at(y, 0);
            for p in start..start + width {
                let n = plane.neighbours(p);
                let q = decode_symbol(&mut dec, &mut ctx, class, n)?;
                plane.cells[p] = q;
                out.push(dequantize(q, anchor, *step));
            }
        }
        if dec.overran() {
            return Err(CodecError::BadPayload("range-coded payload ends too early"));
        }
    }
    dec.finish()?;
    Ok(out)
}

fn decode_symbol(
    dec: &mut Decoder<'_>,
    ctx: &mut Contexts,
    class: usize,
    n: Neighbours,
) -> Result<i32, CodecError> {
    if !dec.bit(&mut ctx.zero[class * ACTIVITY + n.activity]) {
        return Ok(0);
    }
    let negative = dec.bit(&mut ctx.sign[n.sign]);
    let mut magnitude = 1;
    while magnitude <= SMALL && dec.bit(&mut ctx.small[small_index(class, n, magnitude)]) {
        magnitude += 1;
    }
    if magnitude > SMALL {
        let order = golomb_order(class);
        let mut len = 0;
        while dec.bit(&mut ctx.prefix[prefix_index(class, len)]) {
            len += 1;
            if len > MAX_PREFIX {
                return Err(CodecError::BadPayload("escape code too long"));
            }
        }
        let w = (1u32 << len) + dec.raw(len);
        let v = ((w - 1) << order) + dec.raw(order);
        magnitude = v.saturating_add(SMALL + 1);
        if magnitude > MAX_MAGNITUDE {
            return Err(CodecError::BadPayload("symbol magnitude out of range"));
        }
    }
    let q = magnitude as i32;
    Ok(if negative { -q } else { q })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(channels: usize) -> AllocTable {
        let center = (0..channels).map(|c| c as f32 * 0.1).collect();
        let spread = vec![1.0; channels];
        // Channel c matters c+1 times as much as channel 0; the last one not at all.
        let mut weight: Vec<f32> = (0..channels).map(|c| (c + 1) as f32).collect();
        weight[channels - 1] = 0.0;
        AllocTable::new(center, spread, weight).unwrap()
    }

    /// Smooth planes with some noise: neighbours are correlated, like real activations.
    fn activations(channels: usize, h: usize, w: usize) -> Vec<f32> {
        let mut state = 12345u32;
        let mut noise = move || {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            ((state >> 16) as f32 / 65536.0) - 0.5
        };
        (0..channels * h * w)
            .map(|i| {
                let (c, y, x) = (i / (h * w), (i / w) % h, i % w);
                ((x as f32 * 0.3 + c as f32).sin() + (y as f32 * 0.2).cos()) + 0.3 * noise()
            })
            .collect()
    }

    #[test]
    fn round_trips_within_half_a_step_and_skips_what_does_not_matter() {
        let (c, h, w) = (6, 14, 14);
        let t = table(c);
        let x = activations(c, h, w);
        for level in [0u8, 4, 9, 16] {
            let bytes = encode(&x, h, w, &t, level);
            let back = decode(&bytes, h, w, &t, level).unwrap();
            let steps = t.steps(level);
            assert_eq!(steps[c - 1], 0.0, "a channel without weight is not sent");
            for (i, (a, b)) in x.iter().zip(&back).enumerate() {
                let step = steps[i / (h * w)];
                if step > 0.0 {
                    assert!((a - b).abs() <= step / 2.0 + 1e-5, "level {level}, value {i}");
                } else {
                    assert_eq!(*b, t.center[i / (h * w)]);
                }
            }
        }
    }

    #[test]
    fn finer_levels_cost_more_and_sensitive_channels_get_finer_steps() {
        let (c, h, w) = (6, 14, 14);
        let t = table(c);
        let x = activations(c, h, w);
        let sizes: Vec<usize> =
            [2u8, 6, 10, 14].iter().map(|l| encode(&x, h, w, &t, *l).len()).collect();
        assert!(sizes.windows(2).all(|s| s[0] < s[1]), "{sizes:?}");
        let steps = t.steps(10);
        assert!(steps[0] > steps[1] && steps[1] > steps[4], "{steps:?}");
        // Equal predicted distortion: weight * step^2 is the same for every channel sent.
        let d0 = t.weight[0] * steps[0] * steps[0];
        let d4 = t.weight[4] * steps[4] * steps[4];
        assert!((d0 / d4 - 1.0).abs() < 1e-4);
    }

    #[test]
    fn outliers_escape_and_nan_is_the_centre() {
        let t = AllocTable::new(vec![0.0; 2], vec![1.0; 2], vec![1.0; 2]).unwrap();
        let step = t.steps(8)[0];
        let mut x = vec![0.0f32; 2 * 16];
        x[3] = 40.0 * step;
        x[5] = -1e9;
        x[7] = f32::NAN;
        let back = decode(&encode(&x, 4, 4, &t, 8), 4, 4, &t, 8).unwrap();
        assert!((back[3] - x[3]).abs() <= step / 2.0);
        assert_eq!(back[5], dequantize(-(MAX_MAGNITUDE as i32), 0, step));
        assert_eq!(back[7], 0.0);
    }

    #[test]
    fn zeros_come_back_exactly_whatever_the_mean() {
        // A ReLU-like channel: mostly exact zeros, a mean between grid points.
        let t = AllocTable::new(vec![0.37], vec![0.5], vec![1.0]).unwrap();
        let x: Vec<f32> = (0..64).map(|i| if i % 4 == 0 { 1.3 } else { 0.0 }).collect();
        for level in [2u8, 7, 12] {
            let back = decode(&encode(&x, 8, 8, &t, level), 8, 8, &t, level).unwrap();
            for (a, b) in x.iter().zip(&back) {
                if *a == 0.0 {
                    assert_eq!(*b, 0.0, "level {level}");
                }
            }
        }
    }

    #[test]
    fn damaged_payloads_are_errors() {
        let (c, h, w) = (4, 8, 8);
        let t = table(c);
        let bytes = encode(&activations(c, h, w), h, w, &t, 10);
        assert!(decode(&bytes[..bytes.len() - 2], h, w, &t, 10).is_err());
        let mut long = bytes.clone();
        long.extend_from_slice(&[1, 2, 3]);
        assert!(decode(&long, h, w, &t, 10).is_err());
        assert!(decode(&[], h, w, &t, 10).is_err());
        // Random bytes decode to something or fail; never a panic, never NaN.
        let mut state = 7u32;
        for _ in 0..200 {
            let junk: Vec<u8> = std::iter::once(0)
                .chain((0..40).map(|_| {
                    state = state.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
                    (state >> 24) as u8
                }))
                .collect();
            if let Ok(v) = decode(&junk, h, w, &t, 10) {
                assert!(v.iter().all(|v| v.is_finite()));
            }
        }
    }

    #[test]
    fn bad_tables_are_refused() {
        assert!(AllocTable::new(vec![0.0], vec![1.0], vec![-1.0]).is_err());
        assert!(AllocTable::new(vec![0.0], vec![f32::NAN], vec![1.0]).is_err());
        assert!(AllocTable::new(vec![0.0, 1.0], vec![1.0], vec![1.0]).is_err());
        assert!(AllocTable::new(vec![], vec![], vec![]).is_err());
    }
}
