//! The feature codec: how activations at a boundary become the bytes of a features frame.
//!
//! A [`Setting`] composes three stages, each optional:
//!
//! 1. a learned low-rank projection of the channel vector (`-r<rank>`), inverted on the cloud;
//! 2. per-channel affine quantization to 8/6/4/3/2 bits with calibrated clip ranges;
//! 3. rANS entropy coding with calibrated per-channel distributions (or plain bit-packing,
//!    `-packed`).
//!
//! and camera streams add keyframe + residual coding ([`StreamEncoder`]). The `s<level>`
//! settings ([`alloc`]) replace stages 2 and 3: steps per channel from the channel's measured
//! effect on the answer, and context-modelled binary range coding. The `learned<bits>`
//! settings ([`learned`]) replace stage 1 with a trained nonlinear bottleneck and code its few
//! numbers per position with stages 2 and 3. Every table comes
//! from the calibration artefact ([`Calibration`]); none is compiled in. The browser encodes
//! and the server decodes with this same code.
//!
//! The codec knows no model: it codes one item's activations at a boundary named as in the
//! model's spec, shaped `[1, channels, …]` (a channel's values are the positions after it:
//! a feature map's `H × W`, a sequence's length, or one value), and the calibration's tables
//! at that name. The model checks the shape against its spec first.

pub mod alloc;
mod bypass;
mod calibration;
pub mod entropy;
mod error;
pub mod fit;
mod hidden;
pub mod learned;
mod noise;
pub mod quant;
pub mod range;
pub mod ranged;
mod sections;
mod setting;
mod stream;

pub use alloc::AllocTable;
pub use calibration::{
    BoundaryTables, CALIBRATION_MAGIC, CALIBRATION_VERSION, Calibration, LearnedTables, PcaTables,
    QuantTable,
};
pub use error::CodecError;
pub use hidden::{DEFAULT_HIDDEN_CODEC, HiddenCodec, HiddenCodecError};
pub use learned::LearnedCoder;
pub use noise::{Noise, NoiseKind};
pub use quant::{ClipRange, Projection};
pub use ranged::{RangedParams, decode_ranged, encode_ranged};
pub use setting::{AllocSetting, QuantSetting, SUPPORTED_BITS, Setting};
pub use stream::{DEFAULT_KEYFRAME_INTERVAL, MAX_STREAMS, StreamDecoder, StreamEncoder, StreamPos};

/// The setting clients use unless told otherwise: with the shipped calibration, the lowest
/// level at ≥ 99.5% top-1 agreement (or within one photo of it in 500) at block5, block11,
/// block15 and the head, and fewer bytes than q6 at each (docs/codec.md, "The default").
pub const DEFAULT_SETTING: Setting = Setting::Alloc(AllocSetting { level: 14 });

/// The default when a calibration has no sensitivities (`--sensitivity-images 0`): the `q`
/// setting with the same ≥ 99% agreement at every block.
pub const DEFAULT_QUANT_SETTING: Setting = Setting::Quant(QuantSetting::bits(6));

impl Calibration {
    /// The setting to offer by default with this calibration: [`DEFAULT_SETTING`] when every
    /// boundary it covers has the tables for it, else [`DEFAULT_QUANT_SETTING`].
    pub fn default_setting(&self) -> Setting {
        let Setting::Alloc(a) = DEFAULT_SETTING else { return DEFAULT_SETTING };
        if self.boundaries().all(|b| self.lookup_alloc(b, a).is_ok()) {
            DEFAULT_SETTING
        } else {
            DEFAULT_QUANT_SETTING
        }
    }
}

/// The codec parameters a coded features frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodedParams {
    /// The setting used.
    pub setting: QuantSetting,
    /// Id of the calibration file used ([`Calibration::id`]).
    pub calibration: u64,
    /// Stream position; `stream == 0` for a standalone image.
    pub pos: StreamPos,
}

/// The parameters an allocated (`s<level>`) frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocParams {
    /// The setting used.
    pub setting: AllocSetting,
    /// Version of the context model ([`alloc::CONTEXT_MODEL`] when this build codes).
    pub model: u8,
    /// Id of the calibration file used.
    pub calibration: u64,
}

/// The parameters a learned-bottleneck (`learned<bits>`) frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnedParams {
    /// Bits per code.
    pub bits: u8,
    /// Id of the calibration file used (it holds the trained coder).
    pub calibration: u64,
}

/// A standalone (non-stream) frame position.
pub const STANDALONE: StreamPos = StreamPos { stream: 0, seq: 0, delta: false };

/// What encoding needs besides the activations: the calibration (for every quantized setting)
/// and, for a camera stream, the encoder's state.
#[derive(Debug, Default)]
pub struct EncodeContext<'a> {
    /// The calibration both sides loaded.
    pub calibration: Option<&'a Calibration>,
    /// The stream this frame belongs to; `None` for a standalone image.
    pub stream: Option<&'a mut StreamEncoder>,
}

/// What decoding needs besides the frame: the calibration and, on a connection that carries
/// streams, their references.
#[derive(Debug, Default)]
pub struct DecodeContext<'a> {
    /// The calibration the frame must have been coded with.
    pub calibration: Option<&'a Calibration>,
    /// The connection's stream references; `None` refuses delta frames.
    pub streams: Option<&'a mut StreamDecoder>,
}

impl<'a> EncodeContext<'a> {
    /// Standalone frames with `calibration`.
    pub fn new(calibration: Option<&'a Calibration>) -> Self {
        Self { calibration, stream: None }
    }

    /// Frames of `stream`.
    pub fn with_stream(self, stream: Option<&'a mut StreamEncoder>) -> Self {
        Self { stream, ..self }
    }
}

impl<'a> DecodeContext<'a> {
    /// Standalone frames with `calibration`.
    pub fn new(calibration: Option<&'a Calibration>) -> Self {
        Self { calibration, streams: None }
    }

    /// Frames that may belong to the `streams` of one connection.
    pub fn with_streams(self, streams: Option<&'a mut StreamDecoder>) -> Self {
        Self { streams, ..self }
    }
}

/// A frame names the calibration it was coded with; only that one decodes it.
fn same_calibration(calibration: &Calibration, got: u64) -> Result<(), CodecError> {
    if got != calibration.id() {
        return Err(CodecError::CalibrationMismatch { expected: calibration.id(), got });
    }
    Ok(())
}

/// One item's channels and the plane each spans: `[1, C, H, W]` as `(C, H, W)`, `[1, C, L]` as
/// `(C, 1, L)`, `[1, C]` as `(C, 1, 1)`.
fn plane(dims: &[usize]) -> Result<(usize, usize, usize), CodecError> {
    let (channels, h, w) = match *dims {
        [_, c] => (c, 1, 1),
        [_, c, l] => (c, 1, l),
        [_, c, h, w] => (c, h, w),
        _ => return Err(CodecError::BadPayload("coded features have 2 to 4 dimensions")),
    };
    if dims[0] != 1 {
        return Err(CodecError::BatchNotOne(dims[0]));
    }
    if channels == 0 || h == 0 || w == 0 {
        return Err(CodecError::BadPayload("coded features have an empty dimension"));
    }
    Ok((channels, h, w))
}

/// [`plane`] of an item to encode, whose `values` must fill it.
fn plane_of(dims: &[usize], values: &[f32]) -> Result<(usize, usize, usize), CodecError> {
    let (channels, h, w) = plane(dims)?;
    if values.len() != channels * h * w {
        return Err(CodecError::BadPayload("values do not fill the shape"));
    }
    Ok((channels, h, w))
}

/// The tables at `boundary` must cover the item's `channels`.
fn same_channels(boundary: &str, calibrated: usize, got: usize) -> Result<(), CodecError> {
    if calibrated != got {
        return Err(CodecError::ChannelMismatch {
            boundary: boundary.to_string(),
            calibrated,
            got,
        });
    }
    Ok(())
}

/// The channels the tables a setting uses at `boundary` were calibrated on.
fn calibrated_channels(table: &QuantTable, projection: Option<&Projection>) -> usize {
    projection.map_or(table.ranges().len(), Projection::channels)
}

/// Encode one item's activations (`dims` `[1, C, …]`, `values` in that order) at the boundary
/// named `boundary` under `setting`.
///
/// # Errors
/// [`CodecError::NoCalibration`] without one, an uncalibrated setting, channels the tables do
/// not cover, or a batch of more than one item.
pub fn encode(
    boundary: &str,
    dims: &[usize],
    values: &[f32],
    setting: QuantSetting,
    ctx: EncodeContext<'_>,
) -> Result<(CodedParams, Vec<u8>), CodecError> {
    let calibration = ctx.calibration.ok_or(CodecError::NoCalibration)?;
    let setting = setting.check()?;
    let (channels, _, _) = plane_of(dims, values)?;
    let (table, projection) = calibration.lookup(boundary, setting)?;
    same_channels(boundary, calibrated_channels(table, projection), channels)?;
    let projected;
    let values = match projection {
        Some(p) => {
            projected = p.project(values, usize::from(setting.rank));
            &projected
        }
        None => values,
    };
    let used = if setting.rank > 0 { usize::from(setting.rank) } else { channels };
    let mut symbols = Vec::new();
    quant::quantize(values, &table.ranges()[..used], setting.levels(), &mut symbols);
    let pos = match ctx.stream {
        Some(s) => s.code(boundary, setting, calibration.id(), &mut symbols),
        None => STANDALONE,
    };
    let mut payload = Vec::new();
    match (setting.entropy, pos.delta) {
        (false, _) => quant::pack(&symbols, setting.bits, &mut payload),
        (true, false) => entropy::encode(&symbols, table.models()[..used].iter(), &mut payload),
        (true, true) => {
            let mut histogram = vec![0u64; setting.levels()];
            for s in &symbols {
                histogram[usize::from(*s)] += 1;
            }
            let t = entropy::best_delta_table(&histogram);
            let model = entropy::model(&entropy::delta_probabilities(t, setting.levels()))?;
            payload.push(t);
            entropy::encode(&symbols, std::iter::repeat_n(&model, used), &mut payload);
        }
    }
    Ok((CodedParams { setting, calibration: calibration.id(), pos }, payload))
}

/// Decode a coded payload back to the f32 values of one item's activations (`dims` `[1, C, …]`)
/// at the boundary named `boundary`.
///
/// # Errors
/// A [`CodecError`] for a missing or foreign calibration, an uncalibrated setting, a damaged
/// payload, or a delta the context's streams cannot apply (then the client must send a
/// keyframe).
pub fn decode(
    boundary: &str,
    dims: &[usize],
    params: &CodedParams,
    payload: &[u8],
    ctx: DecodeContext<'_>,
) -> Result<Vec<f32>, CodecError> {
    let calibration = ctx.calibration.ok_or(CodecError::NoCalibration)?;
    same_calibration(calibration, params.calibration)?;
    let setting = params.setting.check()?;
    let (channels, h, w) = plane(dims)?;
    let positions = h * w;
    let (table, projection) = calibration.lookup(boundary, setting)?;
    same_channels(boundary, calibrated_channels(table, projection), channels)?;
    let used = if setting.rank > 0 { usize::from(setting.rank) } else { channels };
    let count = used * positions;
    let mut symbols = Vec::with_capacity(count);
    match (setting.entropy, params.pos.delta) {
        (false, _) => {
            if payload.len() != quant::packed_len(count, setting.bits) {
                return Err(CodecError::BadPayload(
                    "packed payload length does not match the shape",
                ));
            }
            symbols = quant::unpack(payload, setting.bits, count);
        }
        (true, false) => {
            entropy::decode(payload, table.models()[..used].iter(), positions, &mut symbols)?
        }
        (true, true) => {
            let (&t, rest) =
                payload.split_first().ok_or(CodecError::BadPayload("empty delta payload"))?;
            if t >= entropy::DELTA_TABLES {
                return Err(CodecError::BadPayload("unknown delta table"));
            }
            let model = entropy::model(&entropy::delta_probabilities(t, setting.levels()))?;
            entropy::decode(rest, std::iter::repeat_n(&model, used), positions, &mut symbols)?;
        }
    }
    match (params.pos.stream, ctx.streams) {
        (0, _) if params.pos.delta => {
            return Err(CodecError::BadPayload("a delta frame needs a stream id"));
        }
        (0, _) => {}
        (_, Some(streams)) => {
            streams.apply(params.pos, boundary, setting, calibration.id(), &mut symbols)?
        }
        (stream, None) if params.pos.delta => {
            return Err(CodecError::KeyframeRequired {
                stream,
                reason: "this decoder keeps no stream state".into(),
            });
        }
        (_, None) => {}
    }
    let mut values = Vec::new();
    quant::dequantize(&symbols, &table.ranges()[..used], setting.levels(), &mut values);
    Ok(match projection {
        Some(p) => p.unproject(&values, used),
        None => values,
    })
}

/// Encode one item's activations (`dims` `[1, C, …]`) at the boundary named `boundary` under
/// an `s<level>` setting. Frames are always standalone:
/// the context model already takes what a residual would from a still scene's neighbours,
/// and a frame never depends on an earlier one.
///
/// # Errors
/// [`CodecError::NoCalibration`], [`CodecError::NotCalibrated`] when the calibration has no
/// allocation at this boundary, channels it does not cover, or a batch of more than one item.
pub fn encode_alloc(
    boundary: &str,
    dims: &[usize],
    values: &[f32],
    setting: AllocSetting,
    calibration: Option<&Calibration>,
) -> Result<(AllocParams, Vec<u8>), CodecError> {
    let calibration = calibration.ok_or(CodecError::NoCalibration)?;
    let setting = setting.check()?;
    let (channels, h, w) = plane_of(dims, values)?;
    let table = calibration.lookup_alloc(boundary, setting)?;
    same_channels(boundary, table.channels(), channels)?;
    let payload = alloc::encode(values, h, w, table, setting.level);
    let params =
        AllocParams { setting, model: alloc::CONTEXT_MODEL, calibration: calibration.id() };
    Ok((params, payload))
}

/// Decode an `s<level>` payload back to the f32 values of one item's activations (`dims`
/// `[1, C, …]`) at the boundary named `boundary`.
///
/// # Errors
/// A [`CodecError`] for a missing or foreign calibration, another context model, a level out
/// of range, or a damaged payload.
pub fn decode_alloc(
    boundary: &str,
    dims: &[usize],
    params: &AllocParams,
    payload: &[u8],
    calibration: Option<&Calibration>,
) -> Result<Vec<f32>, CodecError> {
    let calibration = calibration.ok_or(CodecError::NoCalibration)?;
    if params.model != alloc::CONTEXT_MODEL {
        return Err(CodecError::UnsupportedModel(params.model, alloc::CONTEXT_MODEL));
    }
    same_calibration(calibration, params.calibration)?;
    let setting = params.setting.check()?;
    let (channels, h, w) = plane(dims)?;
    let table = calibration.lookup_alloc(boundary, setting)?;
    same_channels(boundary, table.channels(), channels)?;
    alloc::decode(payload, h, w, table, setting.level)
}

/// Encode one item's activations (`dims` `[1, C, …]`) at the boundary named `boundary` with
/// the bottleneck trained there, its codes at `bits` bits, entropy coded per code.
///
/// # Errors
/// [`CodecError::NoCalibration`], [`CodecError::NotCalibrated`] when no bottleneck (or none
/// with tables at `bits`) was trained at the boundary, channels it does not take, or a batch
/// of more than one item.
pub fn encode_learned(
    boundary: &str,
    dims: &[usize],
    values: &[f32],
    bits: u8,
    calibration: Option<&Calibration>,
) -> Result<(LearnedParams, Vec<u8>), CodecError> {
    let calibration = calibration.ok_or(CodecError::NoCalibration)?;
    let (channels, _, _) = plane_of(dims, values)?;
    let (coder, table) = calibration.lookup_learned(boundary, bits)?;
    same_channels(boundary, coder.channels(), channels)?;
    let codes = coder.encode(values);
    let mut symbols = Vec::new();
    quant::quantize(&codes, table.ranges(), 1 << bits, &mut symbols);
    let mut payload = Vec::new();
    entropy::encode(&symbols, table.models().iter(), &mut payload);
    Ok((LearnedParams { bits, calibration: calibration.id() }, payload))
}

/// Decode a `learned<bits>` payload back to the f32 values of one item's activations (`dims`
/// `[1, C, …]`) at the boundary named `boundary`: the decoder's map.
///
/// # Errors
/// A [`CodecError`] for a missing or foreign calibration, no bottleneck at the boundary or
/// bit depth, or a damaged payload.
pub fn decode_learned(
    boundary: &str,
    dims: &[usize],
    params: &LearnedParams,
    payload: &[u8],
    calibration: Option<&Calibration>,
) -> Result<Vec<f32>, CodecError> {
    let calibration = calibration.ok_or(CodecError::NoCalibration)?;
    same_calibration(calibration, params.calibration)?;
    let (channels, h, w) = plane(dims)?;
    let (coder, table) = calibration.lookup_learned(boundary, params.bits)?;
    same_channels(boundary, coder.channels(), channels)?;
    let mut symbols = Vec::with_capacity(coder.codes() * h * w);
    entropy::decode(payload, table.models().iter(), h * w, &mut symbols)?;
    let mut codes = Vec::new();
    quant::dequantize(&symbols, table.ranges(), 1 << params.bits, &mut codes);
    Ok(coder.decode(&codes))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_learned;
