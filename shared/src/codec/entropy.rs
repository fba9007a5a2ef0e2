//! rANS coding of quantized symbols with `constriction`'s `AnsCoder`.
//!
//! Probabilities are integers (fixed point, [`PRECISION`] bits, every symbol at least 1), stored
//! in the calibration file or derived with integer arithmetic, so the browser and the server build
//! bit-identical models: a float `exp` that differs in the last bit between wasm and x86 would
//! otherwise desynchronize the two coders.

use constriction::stream::Decode;
use constriction::stream::model::ContiguousCategoricalEntropyModel;
use constriction::stream::stack::DefaultAnsCoder;

use super::CodecError;

/// Bits of fixed-point precision of every probability.
pub const PRECISION: usize = 16;
const TOTAL: u64 = 1 << PRECISION;

/// A categorical distribution over `0..levels` as `constriction` wants it.
pub type Model = ContiguousCategoricalEntropyModel<u32, Vec<u32>, PRECISION>;

/// Turn counts into fixed-point probabilities summing to exactly `2^PRECISION`, none zero, so
/// every symbol stays encodable however far an image is from the calibration set.
pub fn fixed_point(counts: &[u64]) -> Vec<u32> {
    let n = counts.len() as u64;
    assert!((1..=256).contains(&n), "1..=256 symbols");
    let spare = TOTAL - n;
    let total: u64 = counts.iter().sum::<u64>().max(1);
    let mut probs: Vec<u64> = counts.iter().map(|c| 1 + c * spare / total).collect();
    let short = TOTAL - probs.iter().sum::<u64>();
    // Rounding down left `short < n` units: give them to the most probable symbol.
    let argmax = (0..probs.len()).max_by_key(|&i| (probs[i], std::cmp::Reverse(i))).unwrap_or(0);
    probs[argmax] += short;
    probs.into_iter().map(|p| p as u32).collect()
}

/// Build a model from fixed-point probabilities (as [`fixed_point`] returns them).
///
/// # Errors
/// [`CodecError::BadCalibration`] when they are zero somewhere or do not sum to `2^PRECISION`.
pub fn model(probabilities: &[u32]) -> Result<Model, CodecError> {
    let sum: u64 = probabilities.iter().map(|p| u64::from(*p)).sum();
    if sum != TOTAL || probabilities.contains(&0) {
        return Err(CodecError::BadCalibration("entropy table does not sum to 2^16".into()));
    }
    Model::from_nonzero_fixed_point_probabilities(probabilities, false)
        .map_err(|()| CodecError::BadCalibration("entropy table rejected".into()))
}

/// How many two-sided geometric tables [`delta_probabilities`] offers.
pub const DELTA_TABLES: u8 = 12;
/// Decay per step of each delta table, in 1/65536: from very peaked to nearly flat.
const DELTA_DECAY: [u64; DELTA_TABLES as usize] =
    [1311, 3277, 6554, 13107, 19661, 29491, 39322, 49152, 55706, 60293, 62915, 64225];

/// The `table`-th distribution over wrapped differences `0..levels` (`d` and `levels - d` are
/// the same distance from 0): `p(d) ∝ decay^|d|`, computed in integers.
pub fn delta_probabilities(table: u8, levels: usize) -> Vec<u32> {
    let decay = DELTA_DECAY[usize::from(table.min(DELTA_TABLES - 1))];
    let mut weight = vec![0u64; levels];
    let mut w = 1u64 << 40;
    for distance in 0..=levels / 2 {
        weight[distance] = w;
        weight[(levels - distance) % levels] = w;
        w = (w * decay) >> 16;
    }
    fixed_point(&weight)
}

/// Ideal code length of `histogram` under each delta table; the encoder sends the cheapest
/// table's index. Only the encoder calls this, so floating point is fine here.
pub fn best_delta_table(histogram: &[u64]) -> u8 {
    let levels = histogram.len();
    (0..DELTA_TABLES)
        .map(|t| {
            let p = delta_probabilities(t, levels);
            let bits: f64 = histogram
                .iter()
                .zip(&p)
                .map(|(n, p)| *n as f64 * (PRECISION as f64 - f64::from(*p).log2()))
                .sum();
            (t, bits)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0, |(t, _)| t)
}

/// Encode `symbols` (`models.len()` channels, equal lengths), channel `c` with `models[c]`.
pub fn encode<'m>(symbols: &[u8], models: impl Iterator<Item = &'m Model>, out: &mut Vec<u8>) {
    let models: Vec<&Model> = models.collect();
    let per_channel = symbols.len() / models.len().max(1);
    let mut coder = DefaultAnsCoder::new();
    // A stack: encode the last channel first so the decoder reads them in order.
    for (chunk, m) in symbols.chunks_exact(per_channel.max(1)).zip(&models).rev() {
        coder
            .encode_iid_symbols_reverse(chunk.iter().map(|s| usize::from(*s)), *m)
            .expect("symbols are in range of their model");
    }
    let words = coder.into_compressed().expect("Vec never fails to grow");
    out.reserve(words.len() * 4);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// Decode `per_channel` symbols for each model in order; the payload must be used up exactly.
///
/// # Errors
/// [`CodecError::BadPayload`] when it is not a whole number of 32-bit words, does not end like
/// a finished coder, or has data left over.
pub fn decode<'m>(
    bytes: &[u8],
    models: impl Iterator<Item = &'m Model>,
    per_channel: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(CodecError::BadPayload("entropy-coded payload is not whole 32-bit words"));
    }
    let words: Vec<u32> =
        bytes.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes"))).collect();
    let mut coder = DefaultAnsCoder::from_compressed(words)
        .map_err(|_| CodecError::BadPayload("entropy-coded payload ends with a zero word"))?;
    for m in models {
        for s in coder.decode_iid_symbols(per_channel, m) {
            let s = s.map_err(|_| CodecError::BadPayload("entropy decoder failed"))?;
            out.push(s as u8);
        }
    }
    if !coder.is_empty() {
        return Err(CodecError::BadPayload("entropy-coded payload has data left over"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_sums_exactly_and_keeps_every_symbol() {
        for counts in [vec![0u64; 4], vec![1, 0, 0, 1_000_000], (0..256).collect(), vec![7]] {
            let p = fixed_point(&counts);
            assert_eq!(p.iter().map(|p| u64::from(*p)).sum::<u64>(), TOTAL);
            assert!(p.iter().all(|p| *p > 0));
            model(&p).unwrap();
        }
    }

    #[test]
    fn delta_tables_are_symmetric_and_valid() {
        for levels in [4usize, 8, 16, 64, 256] {
            for t in 0..DELTA_TABLES {
                let p = delta_probabilities(t, levels);
                model(&p).unwrap();
                for d in 1..levels / 2 {
                    assert!(p[d] >= p[d + 1], "decreasing away from zero");
                    assert_eq!(p[d], p[levels - d], "symmetric");
                }
            }
        }
        let mut peaked = vec![0u64; 16];
        peaked[0] = 1000;
        peaked[1] = 3;
        assert_eq!(best_delta_table(&peaked), 0);
    }

    #[test]
    fn round_trips_and_compresses_a_skewed_source() {
        let levels = 16;
        let mut counts = vec![1u64; levels];
        counts[3] = 500;
        counts[4] = 200;
        let models =
            [model(&fixed_point(&counts)).unwrap(), model(&fixed_point(&[1; 16])).unwrap()];
        let mut symbols: Vec<u8> = (0..2000).map(|i| if i % 7 == 0 { 4 } else { 3 }).collect();
        symbols.extend((0..2000u32).map(|i| (i * 11 % 16) as u8));
        let mut bytes = Vec::new();
        encode(&symbols, models.iter(), &mut bytes);
        // Channel 0 costs about 0.6 bits per symbol, channel 1 about 4.
        assert!(bytes.len() < 2000 * 5 / 8 + 2000 * 4 / 8 + 64, "{}", bytes.len());
        let mut back = Vec::new();
        decode(&bytes, models.iter(), 2000, &mut back).unwrap();
        assert_eq!(back, symbols);
    }

    #[test]
    fn damaged_payloads_are_errors_not_panics() {
        let models = [model(&fixed_point(&[5, 1, 1, 1])).unwrap()];
        let mut bytes = Vec::new();
        encode(&[0, 1, 2, 3, 0, 0, 0, 1], models.iter(), &mut bytes);
        let mut out = Vec::new();
        assert!(decode(&bytes[..bytes.len() - 1], models.iter(), 8, &mut out).is_err());
        let mut zero_end = bytes.clone();
        zero_end.extend_from_slice(&[0; 4]);
        assert!(decode(&zero_end, models.iter(), 8, &mut out).is_err());
        // Extra words are left over after the announced symbols.
        let mut long = vec![0x5a; 64];
        long.extend_from_slice(&bytes);
        out.clear();
        assert!(decode(&long, models.iter(), 8, &mut out).is_err());
    }
}
