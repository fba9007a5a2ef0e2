//! The codec that needs no calibration: each channel's values quantized between that channel's
//! own least and greatest value in this frame, which travel with it. What a model without a
//! calibration sends instead of f32 (about a quarter of the bytes at 8 bits); any model on the
//! runtime decodes it ([`crate::runtime::SplitModel::decode_features`]'s default).
//!
//! A channel is a slice along an item's first dimension when the item is a feature map (rank 2
//! or more, at most [`MAX_RANGED_CHANNELS`] of them); a vector item is one channel. Payload:
//! `batch × channels × (lo f32, hi f32)`, then the symbols, `bits` each, packed.

use super::CodecError;
use super::quant::{ClipRange, dequantize, pack, packed_len, quantize, unpack};
use super::setting::SUPPORTED_BITS;

/// Most channels ranged separately in one item; an item with more is ranged whole.
pub const MAX_RANGED_CHANNELS: usize = 4096;

/// The parameters a ranged frame carries beside its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangedParams {
    /// Bits per value, one of [`SUPPORTED_BITS`].
    pub bits: u8,
}

/// Channels one item of `item_shape` is ranged by.
pub fn ranged_channels(item_shape: &[usize]) -> usize {
    match item_shape {
        [c, _, ..] if (1..=MAX_RANGED_CHANNELS).contains(c) => *c,
        _ => 1,
    }
}

fn check_bits(bits: u8) -> Result<u8, CodecError> {
    SUPPORTED_BITS.contains(&bits).then_some(bits).ok_or(CodecError::UnsupportedBits(bits))
}

/// Code `values` of shape `dims` (batch first) at `bits` bits a value.
///
/// # Errors
/// [`CodecError::UnsupportedBits`]; [`CodecError::BadPayload`] for values that do not fill
/// `dims` or are not finite.
pub fn encode_ranged(
    dims: &[usize],
    values: &[f32],
    bits: u8,
) -> Result<(RangedParams, Vec<u8>), CodecError> {
    let bits = check_bits(bits)?;
    if dims.is_empty() || values.len() != dims.iter().product::<usize>() {
        return Err(CodecError::BadPayload("values do not fill the shape"));
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err(CodecError::BadPayload("non-finite value in ranged features"));
    }
    let (items, channels) = (dims[0], ranged_channels(&dims[1..]));
    let per_item = values.len() / items.max(1);
    let mut ranges = Vec::with_capacity(items * channels);
    let mut symbols = Vec::with_capacity(values.len());
    let mut item_symbols = Vec::new();
    for item in values.chunks_exact(per_item.max(1)) {
        let item_ranges: Vec<ClipRange> = item
            .chunks_exact(per_item / channels)
            .map(|c| {
                let lo = c.iter().copied().fold(f32::INFINITY, f32::min);
                let hi = c.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                ClipRange { lo, hi }
            })
            .collect();
        quantize(item, &item_ranges, 1 << bits, &mut item_symbols);
        symbols.extend_from_slice(&item_symbols);
        ranges.extend(item_ranges);
    }
    let mut payload = Vec::with_capacity(ranges.len() * 8 + packed_len(symbols.len(), bits));
    for r in &ranges {
        payload.extend_from_slice(&r.lo.to_le_bytes());
        payload.extend_from_slice(&r.hi.to_le_bytes());
    }
    pack(&symbols, bits, &mut payload);
    Ok((RangedParams { bits }, payload))
}

/// The values a ranged payload of shape `dims` carries.
///
/// # Errors
/// [`CodecError::UnsupportedBits`]; [`CodecError::BadPayload`] for a payload of the wrong
/// length or a range that is not finite or runs backwards.
pub fn decode_ranged(
    dims: &[usize],
    params: RangedParams,
    payload: &[u8],
) -> Result<Vec<f32>, CodecError> {
    let bits = check_bits(params.bits)?;
    let count = dims.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
    let Some(count) = count.filter(|_| !dims.is_empty()) else {
        return Err(CodecError::BadPayload("ranged features of no shape"));
    };
    let (items, channels) = (dims[0], ranged_channels(&dims[1..]));
    let head = items.saturating_mul(channels).saturating_mul(8);
    if payload.len() != head.saturating_add(packed_len(count, bits)) {
        return Err(CodecError::BadPayload("ranged payload length does not match its shape"));
    }
    let ranges: Vec<ClipRange> = payload[..head]
        .chunks_exact(8)
        .map(|b| ClipRange {
            lo: f32::from_le_bytes(b[..4].try_into().expect("4 bytes")),
            hi: f32::from_le_bytes(b[4..].try_into().expect("4 bytes")),
        })
        .collect();
    if ranges.iter().any(|r| !(r.lo.is_finite() && r.hi.is_finite() && r.lo <= r.hi)) {
        return Err(CodecError::BadPayload("a ranged channel's range is not finite or backwards"));
    }
    let symbols = unpack(&payload[head..], bits, count);
    let per_item = count / items.max(1);
    let mut values = Vec::with_capacity(count);
    let mut item_values = Vec::new();
    for (item, item_ranges) in symbols.chunks_exact(per_item.max(1)).zip(ranges.chunks(channels)) {
        dequantize(item, item_ranges, 1 << bits, &mut item_values);
        values.extend_from_slice(&item_values);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.07).collect()
    }

    #[test]
    fn every_width_round_trips_within_half_a_step_per_channel() {
        for dims in [vec![1, 12], vec![2, 3, 4], vec![1, 5, 2, 3], vec![3, 1]] {
            let values = ramp(dims.iter().product());
            for bits in SUPPORTED_BITS {
                let (params, payload) = encode_ranged(&dims, &values, bits).unwrap();
                let back = decode_ranged(&dims, params, &payload).unwrap();
                let channels = dims[0] * ranged_channels(&dims[1..]);
                let per = values.len() / channels;
                for (c, (a, b)) in values.chunks(per).zip(back.chunks(per)).enumerate() {
                    let (lo, hi) =
                        a.iter().fold((f32::MAX, f32::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
                    let half_step = (hi - lo) / ((1u32 << bits) - 1) as f32 / 2.0 + 1e-6;
                    for (x, y) in a.iter().zip(b) {
                        assert!(
                            (x - y).abs() <= half_step,
                            "{dims:?} q{bits} channel {c}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn eight_bits_take_about_a_quarter_of_f32() {
        let dims = [1, 32, 14, 14];
        let values = ramp(32 * 14 * 14);
        let (_, payload) = encode_ranged(&dims, &values, 8).unwrap();
        assert_eq!(payload.len(), 32 * 8 + 32 * 14 * 14);
        let (_, flat) = encode_ranged(&[1, 6272], &values, 8).unwrap();
        assert_eq!(flat.len(), 8 + 6272, "a vector is one channel");
    }

    #[test]
    fn constant_channels_and_damaged_payloads() {
        let dims = [1, 2, 3];
        let values = [1.5, 1.5, 1.5, -2.0, 0.0, 2.0];
        let (p, payload) = encode_ranged(&dims, &values, 4).unwrap();
        assert_eq!(decode_ranged(&dims, p, &payload).unwrap()[..3], [1.5, 1.5, 1.5]);
        assert!(decode_ranged(&dims, p, &payload[..payload.len() - 1]).is_err());
        assert!(decode_ranged(&[1, 2, 4], p, &payload).is_err());
        let mut backwards = payload.clone();
        backwards[..4].copy_from_slice(&9.0f32.to_le_bytes());
        assert!(decode_ranged(&dims, p, &backwards).is_err());
        let mut nan = payload;
        nan[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(decode_ranged(&dims, p, &nan).is_err());
        assert_eq!(
            decode_ranged(&dims, RangedParams { bits: 5 }, &[]),
            Err(CodecError::UnsupportedBits(5))
        );
        assert!(encode_ranged(&dims, &[f32::NAN; 6], 8).is_err());
        assert!(encode_ranged(&dims, &values[..5], 8).is_err());
        assert!(decode_ranged(&[], p, &[]).is_err());
        assert!(decode_ranged(&[usize::MAX, 2], p, &[]).is_err());
    }
}
