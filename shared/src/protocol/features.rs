//! The one step both sides take between activations and a frame: the edge encodes
//! [`Features`] into a [`FeaturesFrame`], the cloud decodes the frame back into [`Features`].

use crate::codec::{self, CodecError, DecodeContext, EncodeContext, Setting};
use crate::model::{Boundary, Features};

use super::Encoding;

/// The body of a features request: activations at a boundary, as they travel.
#[derive(Clone, Debug, PartialEq)]
pub struct FeaturesFrame {
    /// Where the client stopped: an index into the model's boundaries (for EfficientNet-Lite0,
    /// [`Boundary::index`]), checked by the model that decodes the frame.
    pub boundary: u8,
    /// How `payload` is encoded.
    pub encoding: Encoding,
    /// Tensor shape, `[n, C, H, W]`, as sent (checked against the boundary on decoding).
    pub shape: Vec<u32>,
    /// The encoded tensor.
    pub payload: Vec<u8>,
}

impl FeaturesFrame {
    /// Encode `features` under `setting`: what the edge sends.
    ///
    /// # Errors
    /// [`CodecError::NoCalibration`] for a quantized setting without a calibration in `ctx`, or
    /// what [`codec::encode`] reports.
    pub fn encode(
        features: &Features,
        setting: Setting,
        ctx: EncodeContext<'_>,
    ) -> Result<Self, CodecError> {
        let (encoding, payload) = match setting {
            Setting::F32 => {
                let mut payload = Vec::with_capacity(features.values().len() * 4);
                for v in features.values() {
                    payload.extend_from_slice(&v.to_le_bytes());
                }
                (Encoding::F32, payload)
            }
            Setting::Quant(q) => {
                let (params, payload) = codec::encode(features, q, ctx)?;
                (Encoding::Coded(params), payload)
            }
            Setting::Alloc(a) => {
                let (params, payload) = codec::encode_alloc(features, a, ctx.calibration)?;
                (Encoding::Allocated(params), payload)
            }
            Setting::Ranged(bits) => {
                let (params, payload) =
                    codec::encode_ranged(&features.dims(), features.values(), bits)?;
                (Encoding::Ranged(params), payload)
            }
        };
        Ok(Self {
            boundary: features.boundary().index(),
            encoding,
            shape: features.dims().iter().map(|d| *d as u32).collect(),
            payload,
        })
    }

    /// The activations the frame carries: what the cloud computes on. The shape is checked
    /// against the boundary here, once.
    ///
    /// # Errors
    /// [`crate::model::ModelError::ShapeMismatch`] for a shape that does not fit the boundary,
    /// [`CodecError::BadPayload`] for NaN or infinite f32 values, or any [`CodecError`] of
    /// [`codec::decode`].
    pub fn decode(&self, ctx: DecodeContext<'_>) -> crate::Result<Features> {
        let boundary = Boundary::from_index(self.boundary)?;
        let dims: Vec<usize> = self.shape.iter().map(|d| *d as usize).collect();
        crate::model::check_shape(boundary, &dims)?;
        let values = match &self.encoding {
            Encoding::F32 => {
                let values = self.f32_values();
                // NaN or infinite activations would come back as NaN probabilities (and be
                // cached): no network produces them, so the frame is malformed.
                if values.iter().any(|v| !v.is_finite()) {
                    return Err(CodecError::BadPayload("non-finite value in f32 features").into());
                }
                values
            }
            Encoding::Coded(params) => codec::decode(boundary, &dims, params, &self.payload, ctx)?,
            Encoding::Allocated(params) => {
                codec::decode_alloc(boundary, &dims, params, &self.payload, ctx.calibration)?
            }
            Encoding::Ranged(params) => codec::decode_ranged(&dims, *params, &self.payload)?,
        };
        Ok(Features::new(boundary, &dims, values)?)
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
