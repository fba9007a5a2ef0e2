//! The one step both sides take between activations and a frame: the edge encodes a
//! [`FeatureView`] into a [`FeaturesFrame`], the cloud decodes the frame's values back. No
//! model is named here: the boundary travels as its index in the model's spec, the codec finds
//! its tables by the boundary's name, and the model checks the shape (see
//! [`crate::runtime::decode_frame`] and [`crate::runtime::encode_frame`]).

use crate::codec::{self, CodecError, DecodeContext, EncodeContext, Setting};

use super::Encoding;

/// The body of a features request: activations at a boundary, as they travel.
#[derive(Clone, Debug, PartialEq)]
pub struct FeaturesFrame {
    /// Where the client stopped: an index into the model's boundaries, checked by the model
    /// that decodes the frame.
    pub boundary: u8,
    /// How `payload` is encoded.
    pub encoding: Encoding,
    /// Tensor shape, `[n, …]` (one item's shape after the batch), as sent.
    pub shape: Vec<u32>,
    /// The encoded tensor.
    pub payload: Vec<u8>,
}

/// Activations at one boundary of a model, as [`FeaturesFrame::encode`] takes them.
#[derive(Clone, Copy, Debug)]
pub struct FeatureView<'a> {
    /// The boundary's index in the model's spec (what the frame carries).
    pub index: u8,
    /// The boundary's name (what a calibration's tables are found by).
    pub name: &'a str,
    /// Shape, `[n, …]`: a batch of `n` items (a calibrated setting codes one).
    pub dims: &'a [usize],
    /// The values, in C order.
    pub values: &'a [f32],
}

impl FeaturesFrame {
    /// Encode `x` under `setting`: what the edge sends.
    ///
    /// # Errors
    /// [`CodecError::NoCalibration`] for a quantized setting without a calibration in `ctx`, or
    /// what [`codec::encode`], [`codec::encode_alloc`], [`codec::encode_ranged`] or
    /// [`codec::encode_learned`] report.
    pub fn encode(
        x: FeatureView<'_>,
        setting: Setting,
        ctx: EncodeContext<'_>,
    ) -> Result<Self, CodecError> {
        let (encoding, payload) = match setting {
            Setting::F32 => {
                (Encoding::F32, x.values.iter().flat_map(|v| v.to_le_bytes()).collect())
            }
            Setting::Quant(q) => {
                let (params, payload) = codec::encode(x.name, x.dims, x.values, q, ctx)?;
                (Encoding::Coded(params), payload)
            }
            Setting::Alloc(a) => {
                let (params, payload) =
                    codec::encode_alloc(x.name, x.dims, x.values, a, ctx.calibration)?;
                (Encoding::Allocated(params), payload)
            }
            Setting::Ranged(bits) => {
                let (params, payload) = codec::encode_ranged(x.dims, x.values, bits)?;
                (Encoding::Ranged(params), payload)
            }
            Setting::Learned(bits) => {
                let (params, payload) =
                    codec::encode_learned(x.name, x.dims, x.values, bits, ctx.calibration)?;
                (Encoding::Learned(params), payload)
            }
        };
        let shape = x.dims.iter().map(|d| *d as u32).collect();
        Ok(Self { boundary: x.index, encoding, shape, payload })
    }

    /// The frame's shape as sizes.
    pub fn dims(&self) -> Vec<usize> {
        self.shape.iter().map(|d| *d as usize).collect()
    }

    /// The values the frame carries, decoded as the boundary named `name` (the caller checked
    /// the frame's shape against it: a calibrated payload's length follows from the shape).
    /// An f32 payload comes back as it is (its length is the caller's to check against the
    /// shape).
    ///
    /// # Errors
    /// [`CodecError::BadPayload`] for NaN or infinite f32 values, or what [`codec::decode`],
    /// [`codec::decode_alloc`] or [`codec::decode_ranged`] report.
    pub fn decode_values(
        &self,
        name: &str,
        ctx: DecodeContext<'_>,
    ) -> Result<Vec<f32>, CodecError> {
        let dims = self.dims();
        match &self.encoding {
            Encoding::F32 => {
                let values = self.f32_values();
                // NaN or infinite activations would come back as NaN probabilities (and be
                // cached): no network produces them, so the frame is malformed.
                if values.iter().any(|v| !v.is_finite()) {
                    return Err(CodecError::BadPayload("non-finite value in f32 features"));
                }
                Ok(values)
            }
            Encoding::Coded(params) => codec::decode(name, &dims, params, &self.payload, ctx),
            Encoding::Allocated(params) => {
                codec::decode_alloc(name, &dims, params, &self.payload, ctx.calibration)
            }
            Encoding::Ranged(params) => codec::decode_ranged(&dims, *params, &self.payload),
            Encoding::Learned(params) => {
                codec::decode_learned(name, &dims, params, &self.payload, ctx.calibration)
            }
        }
    }

    /// An f32 payload's values, little-endian, in order (a trailing partial value is dropped:
    /// the frame's decoder checked the length against the shape).
    pub fn f32_values(&self) -> Vec<f32> {
        self.payload
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect()
    }
}
