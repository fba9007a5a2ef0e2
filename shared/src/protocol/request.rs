//! Client -> server frames.
//!
//! Features body: `boundary u8 | encoding u8 | ndim u8 | reserved u8 | dims u32 x ndim |
//! [coded only: bits u8 | flags u8 | rank u16 | calibration u64 | stream u32 | seq u32] |
//! [allocated only: level u8 | model u8 | reserved u16 | calibration u64] |
//! payload_len u32 | payload`, where encoding 1 is little-endian f32, 2 the quantizing codec and
//! 3 the sensitivity-allocated one (see [`crate::codec`]), 4 the calibration-free ranged one
//! (`bits u8 | reserved u8 x 3` after the dims; [`crate::codec::ranged`]), 5 the learned
//! bottleneck (`bits u8 | reserved u8 x 3 | calibration u64` after the dims;
//! [`crate::codec::learned`]); flags bit 0 = entropy-coded, bit 1 =
//! delta frame. The encoding byte versions the codec: a side that does not know an encoding
//! answers `unsupported_codec`, and frames of the encodings it knows keep decoding.
//! Image body: `payload_len u32 | payload` (JPEG or PNG bytes).
//! Ping body: `payload_len u32 | payload` (any bytes: a bandwidth probe, or none).
//! Input body: `payload_len u32 | payload` (a JPEG or PNG of exactly the model's 224x224 input).

use super::{
    FeaturesFrame, HEADER_LEN, MAX_PAYLOAD_BYTES, MODEL_EFFICIENTNET_LITE0, WireError, finish,
    kind, read_header, write_header,
};
use crate::codec::{
    AllocParams, AllocSetting, CodedParams, LearnedParams, QuantSetting, RangedParams, StreamPos,
};
use crate::container::Cursor;

/// How a features payload is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Little-endian IEEE f32, C order: `4 x prod(shape)` bytes.
    F32,
    /// The quantizing codec with these parameters.
    Coded(CodedParams),
    /// The sensitivity-allocated, context-modelled codec.
    Allocated(AllocParams),
    /// Each channel quantized within its own range in this frame: no calibration needed.
    Ranged(RangedParams),
    /// The learned bottleneck's codes, entropy coded.
    Learned(LearnedParams),
}

mod encoding_id {
    pub const F32: u8 = 1;
    pub const CODED: u8 = 2;
    pub const ALLOCATED: u8 = 3;
    pub const RANGED: u8 = 4;
    pub const LEARNED: u8 = 5;
}
const FLAG_ENTROPY: u8 = 1;
const FLAG_DELTA: u8 = 2;

/// A request from the client.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Activations at a boundary: the server runs the rest of the network.
    Features {
        /// Client-chosen id, echoed in the reply.
        id: u64,
        /// The activations, encoded ([`FeaturesFrame::encode`] / [`FeaturesFrame::decode`]).
        frame: FeaturesFrame,
    },
    /// A whole JPEG or PNG image: the server runs everything (cloud-only).
    Image {
        /// Client-chosen id, echoed in the reply.
        id: u64,
        /// Encoded image bytes.
        payload: Vec<u8>,
    },
    /// The model's input itself, already centre-cropped and resized to 224x224 by the client and
    /// encoded as JPEG or PNG: the server decodes it and runs everything without cropping again
    /// (an image of any other size is `bad_image`). What a client that shrinks photos before
    /// upload sends.
    Input {
        /// Client-chosen id, echoed in the reply.
        id: u64,
        /// Encoded 224x224 image bytes.
        payload: Vec<u8>,
    },
    /// Measure the round trip (and, with a payload, the uplink); answered with a pong that
    /// carries the server's load, without touching the model.
    Ping {
        /// Client-chosen id, echoed in the pong.
        id: u64,
        /// Probe bytes, discarded by the server.
        payload: Vec<u8>,
    },
}

impl Request {
    /// The request id.
    pub fn id(&self) -> u64 {
        match self {
            Self::Features { id, .. }
            | Self::Image { id, .. }
            | Self::Input { id, .. }
            | Self::Ping { id, .. } => *id,
        }
    }

    /// Append the encoded frame, addressed to EfficientNet-Lite0, to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_for(MODEL_EFFICIENTNET_LITE0, out);
    }

    /// Append the encoded frame, addressed to the model whose id is `model`, to `out`.
    pub fn encode_for(&self, model: u8, out: &mut Vec<u8>) {
        match self {
            Self::Features { id, frame: FeaturesFrame { boundary, encoding, shape, payload } } => {
                write_header(out, kind::FEATURES, model, *id);
                let code = match encoding {
                    Encoding::F32 => encoding_id::F32,
                    Encoding::Coded(_) => encoding_id::CODED,
                    Encoding::Allocated(_) => encoding_id::ALLOCATED,
                    Encoding::Ranged(_) => encoding_id::RANGED,
                    Encoding::Learned(_) => encoding_id::LEARNED,
                };
                out.extend_from_slice(&[*boundary, code, shape.len() as u8, 0]);
                for d in shape {
                    out.extend_from_slice(&d.to_le_bytes());
                }
                if let Encoding::Coded(p) = encoding {
                    let flags = if p.setting.entropy { FLAG_ENTROPY } else { 0 }
                        | if p.pos.delta { FLAG_DELTA } else { 0 };
                    out.extend_from_slice(&[p.setting.bits, flags]);
                    out.extend_from_slice(&p.setting.rank.to_le_bytes());
                    out.extend_from_slice(&p.calibration.to_le_bytes());
                    out.extend_from_slice(&p.pos.stream.to_le_bytes());
                    out.extend_from_slice(&p.pos.seq.to_le_bytes());
                }
                if let Encoding::Allocated(p) = encoding {
                    out.extend_from_slice(&[p.setting.level, p.model, 0, 0]);
                    out.extend_from_slice(&p.calibration.to_le_bytes());
                }
                if let Encoding::Ranged(p) = encoding {
                    out.extend_from_slice(&[p.bits, 0, 0, 0]);
                }
                if let Encoding::Learned(p) = encoding {
                    out.extend_from_slice(&[p.bits, 0, 0, 0]);
                    out.extend_from_slice(&p.calibration.to_le_bytes());
                }
                out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                out.extend_from_slice(payload);
            }
            Self::Image { id, payload }
            | Self::Input { id, payload }
            | Self::Ping { id, payload } => {
                let k = match self {
                    Self::Image { .. } => kind::IMAGE,
                    Self::Input { .. } => kind::INPUT,
                    _ => kind::PING,
                };
                write_header(out, k, model, *id);
                out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                out.extend_from_slice(payload);
            }
        }
    }

    /// The encoded frame, addressed to EfficientNet-Lite0.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_for(MODEL_EFFICIENTNET_LITE0)
    }

    /// The encoded frame, addressed to the model whose id is `model`.
    pub fn to_bytes_for(&self, model: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + 32 + self.payload_len());
        self.encode_for(model, &mut out);
        out
    }

    fn payload_len(&self) -> usize {
        match self {
            Self::Features { frame: FeaturesFrame { payload, .. }, .. }
            | Self::Image { payload, .. }
            | Self::Input { payload, .. }
            | Self::Ping { payload, .. } => payload.len(),
        }
    }

    /// Decode one frame, checking every length and bound before use.
    ///
    /// # Errors
    /// A [`WireError`] naming the first problem found.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let mut c = Cursor::new(frame);
        let header = read_header(&mut c)?;
        let id = header.id;
        let request = match header.kind {
            kind::FEATURES => {
                // An index into the addressed model's boundaries, which that model checks.
                let boundary = c.u8()?;
                let code = c.u8()?;
                let ndim = c.u8()?;
                if ndim > 4 {
                    return Err(WireError::TooManyDims(ndim));
                }
                c.u8()?;
                let shape = (0..ndim).map(|_| c.u32()).collect::<Result<Vec<_>, _>>()?;
                let encoding = match code {
                    encoding_id::F32 => Encoding::F32,
                    encoding_id::CODED => Encoding::Coded(read_params(&mut c)?),
                    encoding_id::ALLOCATED => Encoding::Allocated(read_alloc_params(&mut c)?),
                    encoding_id::RANGED => {
                        let bits = c.u8()?;
                        c.take(3)?;
                        Encoding::Ranged(RangedParams { bits })
                    }
                    encoding_id::LEARNED => {
                        let bits = c.u8()?;
                        c.take(3)?;
                        Encoding::Learned(LearnedParams { bits, calibration: c.u64()? })
                    }
                    other => return Err(WireError::UnsupportedEncoding(other)),
                };
                let len = read_payload_len(&mut c)?;
                if encoding == Encoding::F32 {
                    let expected = shape
                        .iter()
                        .try_fold(4usize, |a, d| a.checked_mul(*d as usize))
                        .unwrap_or(usize::MAX);
                    if expected != len {
                        return Err(WireError::LengthMismatch { shape, expected, got: len });
                    }
                }
                let payload = c.take(len)?.to_vec();
                Self::Features { id, frame: FeaturesFrame { boundary, encoding, shape, payload } }
            }
            kind::IMAGE => {
                let len = read_payload_len(&mut c)?;
                Self::Image { id, payload: c.take(len)?.to_vec() }
            }
            kind::PING => {
                let len = read_payload_len(&mut c)?;
                Self::Ping { id, payload: c.take(len)?.to_vec() }
            }
            kind::INPUT => {
                let len = read_payload_len(&mut c)?;
                Self::Input { id, payload: c.take(len)?.to_vec() }
            }
            other => return Err(WireError::UnknownKind { id, kind: other }),
        };
        finish(c)?;
        Ok(request)
    }
}

fn read_params(c: &mut Cursor<'_>) -> Result<CodedParams, WireError> {
    let bits = c.u8()?;
    let flags = c.u8()?;
    if flags & !(FLAG_ENTROPY | FLAG_DELTA) != 0 {
        return Err(WireError::UnknownFlags(flags));
    }
    let rank = c.u16()?;
    let calibration = c.u64()?;
    let stream = c.u32()?;
    let seq = c.u32()?;
    Ok(CodedParams {
        setting: QuantSetting { bits, rank, entropy: flags & FLAG_ENTROPY != 0 },
        calibration,
        pos: StreamPos { stream, seq, delta: flags & FLAG_DELTA != 0 },
    })
}

fn read_alloc_params(c: &mut Cursor<'_>) -> Result<AllocParams, WireError> {
    let level = c.u8()?;
    let model = c.u8()?;
    c.u16()?;
    let calibration = c.u64()?;
    Ok(AllocParams { setting: AllocSetting { level }, model, calibration })
}

fn read_payload_len(c: &mut Cursor<'_>) -> Result<usize, WireError> {
    let len = c.u32()? as usize;
    if len > MAX_PAYLOAD_BYTES {
        return Err(WireError::PayloadTooLarge { len, max: MAX_PAYLOAD_BYTES });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Boundary;
    use crate::protocol::{MAGIC, PROTOCOL_VERSION, peek_model};

    /// A wire-level frame: the shape is not checked against the boundary until it is decoded
    /// into activations, so any shape round-trips here.
    fn features() -> Request {
        let payload = [1.0f32, -2.5, 3.0, 0.25].iter().flat_map(|v| v.to_le_bytes()).collect();
        let frame = FeaturesFrame {
            boundary: Boundary::block(5).unwrap().index(),
            encoding: Encoding::F32,
            shape: vec![1, 2, 1, 2],
            payload,
        };
        Request::Features { id: 42, frame }
    }

    fn coded() -> Request {
        let frame = FeaturesFrame {
            boundary: Boundary::block(11).unwrap().index(),
            encoding: Encoding::Coded(CodedParams {
                setting: QuantSetting { bits: 3, rank: 16, entropy: true },
                calibration: 0x0123_4567_89ab_cdef,
                pos: StreamPos { stream: 7, seq: 41, delta: true },
            }),
            shape: vec![1, 112, 14, 14],
            payload: vec![1, 2, 3, 4, 5],
        };
        Request::Features { id: 9, frame }
    }

    fn allocated() -> Request {
        let frame = FeaturesFrame {
            boundary: Boundary::block(5).unwrap().index(),
            encoding: Encoding::Allocated(AllocParams {
                setting: AllocSetting { level: 12 },
                model: 1,
                calibration: 0xfedc_ba98_7654_3210,
            }),
            shape: vec![1, 40, 28, 28],
            payload: vec![0, 9, 8, 7, 6, 5],
        };
        Request::Features { id: 10, frame }
    }

    #[test]
    fn allocated_params_round_trip_and_an_unknown_encoding_is_unsupported_not_malformed() {
        let bytes = allocated().to_bytes();
        assert_eq!(Request::decode(&bytes).unwrap(), allocated());
        for cut in 0..bytes.len() {
            assert!(Request::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        // Byte 17 is the encoding: a later codec (6) is refused as unsupported.
        let mut b = bytes.clone();
        b[17] = 6;
        let err = Request::decode(&b).unwrap_err();
        assert_eq!(err, WireError::UnsupportedEncoding(6));
        assert_eq!(err.code(), crate::protocol::ErrorCode::UnsupportedCodec);
    }

    #[test]
    fn coded_params_round_trip_and_unknown_flags_are_refused() {
        let r = coded();
        let bytes = r.to_bytes();
        assert_eq!(Request::decode(&bytes).unwrap(), r);
        for cut in 0..bytes.len() {
            assert!(Request::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        let mut b = bytes.clone();
        b[16 + 4 + 16 + 1] |= 0x80;
        assert_eq!(Request::decode(&b).unwrap_err(), WireError::UnknownFlags(0x83));
    }

    #[test]
    fn round_trips() {
        for r in [
            features(),
            coded(),
            allocated(),
            Request::Features {
                id: 11,
                frame: FeaturesFrame {
                    boundary: 3,
                    encoding: Encoding::Ranged(RangedParams { bits: 6 }),
                    shape: vec![1, 4, 2],
                    payload: vec![9; 39],
                },
            },
            Request::Features {
                id: 12,
                frame: FeaturesFrame {
                    boundary: 7,
                    encoding: Encoding::Learned(LearnedParams {
                        bits: 4,
                        calibration: 0x0bad_cafe_f00d_0001,
                    }),
                    shape: vec![1, 80, 14, 14],
                    payload: vec![3; 17],
                },
            },
            Request::Image { id: u64::MAX, payload: vec![0xff, 0xd8, 1, 2, 3] },
            Request::Input { id: 9, payload: vec![0x89, b'P', b'N', b'G'] },
            Request::Ping { id: 3, payload: vec![7; 100] },
        ] {
            assert_eq!(Request::decode(&r.to_bytes()).unwrap(), r);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = features().to_bytes();
        for cut in 0..bytes.len() {
            let err = Request::decode(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, WireError::Truncated { .. } | WireError::LengthMismatch { .. }),
                "{cut}: {err}"
            );
        }
    }

    #[test]
    fn rejects_bad_headers_and_bodies() {
        let good = features().to_bytes();
        let with = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            Request::decode(&b).unwrap_err()
        };
        assert_eq!(with(0, b'X'), WireError::BadMagic);
        assert_eq!(
            with(4, 9),
            WireError::UnsupportedVersion { got: 9, supported: PROTOCOL_VERSION }
        );
        assert!(matches!(with(6, 7), WireError::UnknownKind { kind: 7, .. }));
        assert_eq!(with(17, 0), WireError::UnsupportedEncoding(0));
        assert_eq!(with(18, 5), WireError::TooManyDims(5));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(Request::decode(&trailing).unwrap_err(), WireError::TrailingBytes { extra: 1 });
    }

    /// The model byte and the boundary index belong to the model addressed, which the server
    /// looks up: the frame decodes whatever they are, and says whom it is for.
    #[test]
    fn the_model_byte_addresses_a_model_and_is_not_judged_here() {
        let r = features();
        assert_eq!(peek_model(&r.to_bytes()), Some(MODEL_EFFICIENTNET_LITE0));
        let other = r.to_bytes_for(200);
        assert_eq!((peek_model(&other), Request::decode(&other).unwrap()), (Some(200), r.clone()));
        let mut far = r.to_bytes();
        far[16] = 250;
        let Request::Features { frame, .. } = Request::decode(&far).unwrap() else { panic!() };
        assert_eq!(frame.boundary, 250);
        assert_eq!(peek_model(&far[..15]), None);
    }

    #[test]
    fn oversized_payload_is_refused_from_the_header() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b.extend_from_slice(&[kind::IMAGE, 1]);
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Request::decode(&b), Err(WireError::PayloadTooLarge { .. })));
    }

    #[test]
    fn shape_overflow_is_a_length_mismatch() {
        let frame = FeaturesFrame {
            boundary: Boundary::STEM.index(),
            encoding: Encoding::F32,
            shape: vec![u32::MAX, u32::MAX, u32::MAX, u32::MAX],
            payload: vec![0; 8],
        };
        let r = Request::Features { id: 1, frame };
        assert!(matches!(Request::decode(&r.to_bytes()), Err(WireError::LengthMismatch { .. })));
    }
}
