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
//! 3. **Context modelling** (context model 2). The expected magnitude at a position is read
//!    from the neighbours already coded in the same channel (`2·left + 2·top + top-left +
//!    top-right`, bucketed by its bit length: 12 activity buckets). A nonzero magnitude m is
//!    coarsened to `(m − 1) >> k`, with k growing with that activity so the coarsened value
//!    stays around 1 to 2, and the coarsened value's token (zero, 0–2, three bands, escape: 8
//!    letters) is range-coded with an adaptive distribution chosen by activity bucket and the
//!    channel's class (its calibration spread over its step). The low k bits and the bands'
//!    extra bits go as they are into a bypass stream; the sign is coded by a second range
//!    coder with an adaptive probability chosen by the left and top neighbours' signs. Where
//!    every neighbour is zero, one adaptive binary decision (per class) first says whether
//!    the value is zero too.
//!    Distributions start flat in every frame and adapt, so nothing per image is sent and the
//!    model costs no storage. Frames of the first context model (a binarised code: zero?,
//!    sign, above 1?, above 2?, Exp-Golomb; 1.6× slower to code at block5) are refused as
//!    `unsupported_codec`.
//!
//! A payload is three sections (`sections.rs`): the tokens' range coder, the signs' range
//! coder, the bypass bits. Signs have a coder of their own to keep their decisions off the
//! tokens' dependency chain in the decoder (what that saved was within this machine's noise;
//! it costs a few bytes of section length and flush).
//!
//! Every decision's context is computed from integers and from f32 products and quotients of
//! calibration values (IEEE-exact on every platform), so the browser and the server agree.

use super::CodecError;
use super::bypass::{BitReader, BitWriter};
use super::range::{Bit, Cdf, Decoder, Encoder, SYMBOLS};
use super::sections;

/// Finest level a setting may name (a predicted KL of 2^−24 nats: far past what any answer
/// notices; finer steps would clip real activations at [`MAX_MAGNITUDE`]).
pub const MAX_LEVEL: u8 = 24;
/// Version of the context model; a frame names the one it was coded with.
pub const CONTEXT_MODEL: u8 = 2;
/// Largest magnitude a symbol may take (larger ones are clipped by the encoder and refused by
/// the decoder): bounds decoded values and decoding work.
pub const MAX_MAGNITUDE: u32 = 1 << 15;
/// A channel whose step exceeds this many times its calibration spread is not sent.
pub const SKIP_SPREADS: f32 = 8.0;
/// Neighbour-activity bucket from which magnitudes are coarsened before modelling: in bucket
/// `SHIFT_FROM + k`, a nonzero magnitude m is coded as `(m − 1) >> k` with the context's
/// distribution and its low `k` bits as they are (nearly uniform where the neighbours say
/// magnitudes are that large). Zero keeps a token of its own everywhere: ReLU outputs are
/// mostly exact zeros, which must not pay for low bits. Measured on the three bundled photos
/// at block5/11/15 and the head (s10, s14): starting at bucket 3 costs 1.5% more bytes, at 5
/// about the same as 4.
const SHIFT_FROM: usize = 4;
/// The token of magnitude zero.
const ZERO: usize = 0;
/// Coarsened magnitudes below this are a token each (after [`ZERO`]); larger ones share
/// [`BANDS`].
const DIRECT: u32 = 3;
/// Tokens after the direct ones: (first coarsened magnitude, equiprobable bits that follow).
/// The last token is the escape: a 4-bit length, then that many bits (then the low bits).
const BANDS: [(u32, u32); 3] = [(3, 1), (5, 2), (9, 3)];
/// First coarsened magnitude of the escape token.
const ESCAPE_FROM: u32 = 17;
const _: () = assert!(1 + DIRECT as usize + BANDS.len() + 1 == SYMBOLS);

/// First coarsened magnitude and extra bits of every token but [`ZERO`] and the escape, in
/// token order from 1.
const FIRST_OF_TOKEN: [(u32, u32); SYMBOLS - 2] = {
    let mut t = [(0, 0); SYMBOLS - 2];
    let mut i = 0;
    while i < SYMBOLS - 2 {
        t[i] = if i < DIRECT as usize { (i as u32, 0) } else { BANDS[i - DIRECT as usize] };
        i += 1;
    }
    t
};
/// The token of every coarsened magnitude below [`ESCAPE_FROM`]: the encoder's lookup, the
/// inverse of [`FIRST_OF_TOKEN`].
const TOKEN_OF: [u8; ESCAPE_FROM as usize] = {
    let mut t = [0u8; ESCAPE_FROM as usize];
    let mut token = 1;
    let mut u = 0;
    while u < ESCAPE_FROM as usize {
        if token < SYMBOLS - 2 && u as u32 >= FIRST_OF_TOKEN[token].0 {
            token += 1;
        }
        t[u] = token as u8;
        u += 1;
    }
    t
};
/// Rounding offset of the quantizer: 0.5 is plain rounding; less widens the zero bin.
const ROUNDING: f32 = 0.5;
/// Reconstruction of a nonzero symbol sits this many steps toward zero from the bin's centre.
const RECONSTRUCTION_SHIFT: f32 = 0.0;

/// Expected-activity classes: spread over step below each threshold.
const CLASS_LIMITS: [f32; 9] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
const CLASSES: usize = CLASS_LIMITS.len() + 1;
/// Neighbour-activity buckets: the bit length of the weighted neighbour sum, capped.
const ACTIVITY: usize = 12;

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

/// Adaptive statistics of one frame.
struct Contexts {
    magnitude: Vec<Cdf>,
    /// Whether a value whose neighbours are all zero is zero too, per class: where a ReLU
    /// output is silent one binary decision does the work of a symbol, for less.
    quiet: [Bit; CLASSES],
    sign: [Bit; 9],
}

impl Contexts {
    fn new() -> Self {
        Self {
            magnitude: vec![Cdf::default(); CLASSES * ACTIVITY],
            quiet: [Bit::default(); CLASSES],
            sign: [Bit::default(); 9],
        }
    }
}

/// What the decoder already knows around a position of a channel's plane.
#[derive(Clone, Copy)]
struct Neighbours {
    activity: usize,
    sign: usize,
}

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
        // Magnitudes are at most MAX_MAGNITUDE (2^15): the sum fits easily.
        let m = |v: i32| v.unsigned_abs();
        let a = 2 * m(left) + 2 * m(top) + m(top_left) + m(top_right);
        let activity = ((32 - a.leading_zeros()) as usize).min(ACTIVITY - 1);
        let sign = ((left.signum() + 1) * 3 + (top.signum() + 1)) as usize;
        Neighbours { activity, sign }
    }

    /// Low bits sent as they are at an activity: the weighted sum is about six times the
    /// magnitude to expect, so this keeps coarsened magnitudes around 1 to 2.
    fn shift(n: Neighbours) -> u32 {
        n.activity.saturating_sub(SHIFT_FROM) as u32
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
    let mut out = Writers::default();
    let mut ctx = Contexts::new();
    let mut plane = Plane::new(height, width);
    for (c, channel) in values.chunks_exact(positions).enumerate() {
        let step = steps[c];
        if step == 0.0 {
            continue;
        }
        let class = class(table.spread[c], step);
        let anchor = anchor(table.center[c], step);
        // The whole channel first, in a loop of its own that vectorises (the division would
        // otherwise wait in the coding loop): a position's neighbours all come before it, so
        // the cells after it being filled already changes nothing.
        for (y, row) in channel.chunks_exact(width).enumerate() {
            let start = plane.at(y, 0);
            for (cell, v) in plane.cells[start..start + width].iter_mut().zip(row) {
                *cell = quantize(*v, anchor, step);
            }
        }
        for y in 0..height {
            let start = plane.at(y, 0);
            for p in start..start + width {
                let (n, q) = (plane.neighbours(p), plane.cells[p]);
                if n.activity == 0 {
                    out.tokens.bit(&mut ctx.quiet[class], q != 0);
                    if q == 0 {
                        continue;
                    }
                }
                let cdf = &mut ctx.magnitude[class * ACTIVITY + n.activity];
                out.symbol(cdf, &mut ctx.sign[n.sign], Plane::shift(n), q);
            }
        }
    }
    out.finish()
}

/// The three coders of a frame, each with a section of the payload: the magnitude tokens, the
/// signs, and the bits sent as they are.
#[derive(Default)]
struct Writers {
    tokens: Encoder,
    signs: Encoder,
    bypass: BitWriter,
}

impl Writers {
    /// Code a symbol: its coarsened magnitude's token with the context's distribution, the
    /// token's extra bits and the magnitude's low `shift` bits as they are, then the sign.
    fn symbol(&mut self, cdf: &mut Cdf, sign: &mut Bit, shift: u32, q: i32) {
        if q == 0 {
            self.tokens.symbol(cdf, ZERO);
            return;
        }
        let v = q.unsigned_abs() - 1;
        let u = v >> shift;
        if let Some(&token) = TOKEN_OF.get(u as usize) {
            let (from, bits) = FIRST_OF_TOKEN[usize::from(token) - 1];
            self.tokens.symbol(cdf, usize::from(token));
            // The band's extra bits above the magnitude's low bits, in one write.
            let low = v & ((1 << shift) - 1);
            self.bypass.put(((u - from) << shift) | low, bits + shift);
        } else {
            self.tokens.symbol(cdf, SYMBOLS - 1);
            let w = u - ESCAPE_FROM + 1;
            let len = 31 - w.leading_zeros();
            self.bypass.put(len, 4);
            self.bypass.put(w - (1 << len), len);
            self.bypass.put(v, shift);
        }
        self.signs.bit(sign, q < 0);
    }

    fn finish(self) -> Vec<u8> {
        let (tokens, signs) = (self.tokens.finish(), self.signs.finish());
        sections::join(&[&tokens, &signs, &self.bypass.finish()])
    }
}

/// Reads what [`Writers`] wrote.
struct Readers<'a> {
    tokens: Decoder<'a>,
    signs: Decoder<'a>,
    bypass: BitReader<'a>,
}

impl<'a> Readers<'a> {
    fn new(payload: &'a [u8]) -> Result<Self, CodecError> {
        let [tokens, signs, bypass] = sections::split::<3>(payload)?;
        Ok(Self {
            tokens: Decoder::new(tokens)?,
            signs: Decoder::new(signs)?,
            bypass: BitReader::new(bypass),
        })
    }

    fn symbol(&mut self, cdf: &mut Cdf, sign: &mut Bit, shift: u32) -> Result<i32, CodecError> {
        let token = self.tokens.symbol(cdf);
        if token == ZERO {
            return Ok(0);
        }
        let magnitude = if let Some(&(from, bits)) = FIRST_OF_TOKEN.get(token - 1) {
            let extra = self.bypass.get(bits + shift);
            let u = from + (extra >> shift);
            ((u << shift) | (extra & ((1 << shift) - 1))) + 1
        } else {
            let len = self.bypass.get(4);
            let u = ESCAPE_FROM - 1 + (1 << len) + self.bypass.get(len);
            ((u << shift) | self.bypass.get(shift)) + 1
        };
        if magnitude > MAX_MAGNITUDE {
            return Err(CodecError::BadPayload("symbol magnitude out of range"));
        }
        let q = magnitude as i32;
        Ok(if self.signs.bit(sign) { -q } else { q })
    }

    fn overran(&self) -> bool {
        self.tokens.overran() || self.signs.overran()
    }

    fn finish(self) -> Result<(), CodecError> {
        self.tokens.finish()?;
        self.signs.finish()?;
        self.bypass.finish()
    }
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
    let mut input = Readers::new(payload)?;
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
                if n.activity == 0 && !input.tokens.bit(&mut ctx.quiet[class]) {
                    plane.cells[p] = 0;
                    continue;
                }
                let cdf = &mut ctx.magnitude[class * ACTIVITY + n.activity];
                plane.cells[p] = input.symbol(cdf, &mut ctx.sign[n.sign], Plane::shift(n))?;
            }
        }
        for y in 0..height {
            let start = plane.at(y, 0);
            out.extend(
                plane.cells[start..start + width].iter().map(|q| dequantize(*q, anchor, *step)),
            );
        }
        if input.overran() {
            return Err(CodecError::BadPayload("range-coded payload ends too early"));
        }
    }
    input.finish()?;
    Ok(out)
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
