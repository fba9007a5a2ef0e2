//! Activations at a boundary: what the edge computes up to its split and the cloud resumes
//! from. The shape is checked once, when the value is made; everything downstream trusts it.

#[cfg(feature = "model")]
use burn::tensor::{Device, Tensor, TensorData};

use super::{Boundary, MAX_BATCH, ModelError, Result};
use crate::cache::ContentKey;
use crate::codec::{Calibration, CodecError, DecodeContext, EncodeContext, Noise, Setting};
use crate::protocol::{FeatureView, FeaturesFrame};

/// A batch of activations at `boundary`, NCHW `[n, C, H, W]`, values in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct Features {
    boundary: Boundary,
    dims: [usize; 4],
    values: Vec<f32>,
}

/// Check that `dims` is a batch of activations at `boundary`.
///
/// # Errors
/// [`ModelError::ShapeMismatch`] otherwise.
pub fn check_shape(boundary: Boundary, dims: &[usize]) -> Result<[usize; 4]> {
    let expected = boundary.info().shape;
    match *dims {
        [n, c, h, w] if (1..=MAX_BATCH).contains(&n) && [c, h, w] == expected => Ok([n, c, h, w]),
        _ => Err(ModelError::ShapeMismatch {
            boundary,
            expected,
            got: dims.to_vec(),
            max_batch: MAX_BATCH,
        }),
    }
}

impl Features {
    /// Activations at `boundary` with shape `dims`.
    ///
    /// # Errors
    /// [`ModelError::ShapeMismatch`] when `dims` is not a batch at `boundary`,
    /// [`ModelError::LengthMismatch`] when `values` does not fill it.
    pub fn new(boundary: Boundary, dims: &[usize], values: Vec<f32>) -> Result<Self> {
        let dims = check_shape(boundary, dims)?;
        if values.len() != dims.iter().product::<usize>() {
            return Err(ModelError::LengthMismatch { dims: dims.to_vec(), values: values.len() });
        }
        Ok(Self { boundary, dims, values })
    }

    #[cfg(feature = "model")]
    /// Activations read back from a tensor's data (after `into_data`, or `into_data_async` in
    /// the browser).
    ///
    /// # Errors
    /// [`ModelError::Backend`] when the data is not f32, else as [`Self::new`].
    pub fn from_data(boundary: Boundary, data: TensorData) -> Result<Self> {
        let dims = data.shape().to_vec();
        let values =
            data.try_into_vec::<f32>().map_err(|e| ModelError::Backend(format!("{e:?}")))?;
        Self::new(boundary, &dims, values)
    }

    #[cfg(feature = "model")]
    /// Run `tensor` back to host memory (native; the browser awaits `into_data_async`).
    ///
    /// # Errors
    /// As [`Self::from_data`].
    pub fn from_tensor(boundary: Boundary, tensor: Tensor<4>) -> Result<Self> {
        Self::from_data(boundary, tensor.into_data())
    }

    /// Where these activations are.
    pub fn boundary(&self) -> Boundary {
        self.boundary
    }

    /// Their shape `[n, C, H, W]`.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }

    /// Images in the batch.
    pub fn batch(&self) -> usize {
        self.dims[0]
    }

    /// The values, C order.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The values, taken.
    pub fn into_values(self) -> Vec<f32> {
        self.values
    }

    /// The key a result computed from these activations is cached under: boundary, shape and
    /// values, hashed in place (no byte copy of the values).
    pub fn content_key(&self) -> ContentKey {
        ContentKey::of_tensor(b"features", &[self.boundary.index()], &self.dims, &self.values)
    }

    /// The frame that carries these activations coded under `setting` (the codec's tables found
    /// at the boundary's name).
    ///
    /// # Errors
    /// What [`FeaturesFrame::encode`] reports.
    pub fn to_frame(
        &self,
        setting: Setting,
        ctx: EncodeContext<'_>,
    ) -> std::result::Result<FeaturesFrame, CodecError> {
        let view = FeatureView {
            index: self.boundary.index(),
            name: self.boundary.name(),
            dims: &self.dims,
            values: &self.values,
        };
        FeaturesFrame::encode(view, setting, ctx)
    }

    /// These activations with `noise` added ([`Noise::apply`], scaled by the calibration's
    /// ranges at the boundary), drawn from `seed`.
    ///
    /// # Errors
    /// What [`Noise::apply`] reports.
    pub fn with_noise(
        mut self,
        noise: Noise,
        calibration: &Calibration,
        seed: u64,
    ) -> std::result::Result<Self, CodecError> {
        noise.apply(self.boundary.name(), &self.dims, &mut self.values, calibration, seed)?;
        Ok(self)
    }

    /// The activations `frame` carries: its boundary one of this network's, its shape checked
    /// against it, then its payload decoded.
    ///
    /// # Errors
    /// [`ModelError::UnknownBoundary`] or [`ModelError::ShapeMismatch`], what
    /// [`FeaturesFrame::decode_values`] reports, or [`ModelError::LengthMismatch`].
    pub fn from_frame(frame: &FeaturesFrame, ctx: DecodeContext<'_>) -> crate::Result<Self> {
        let boundary = Boundary::from_index(frame.boundary)?;
        let dims = frame.dims();
        check_shape(boundary, &dims)?;
        let values = frame.decode_values(boundary.name(), ctx)?;
        Ok(Self::new(boundary, &dims, values)?)
    }

    #[cfg(feature = "model")]
    /// As a tensor on `device`, ready for `forward_range(_, self.boundary(), _)`.
    pub fn to_tensor(self, device: &Device) -> Tensor<4> {
        Tensor::from_data(TensorData::new(self.values, self.dims.to_vec()), device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_length_are_checked_once_here() {
        let b = Boundary::block(15).unwrap();
        let [c, h, w] = b.info().shape;
        let f = Features::new(b, &[1, c, h, w], vec![0.5; c * h * w]).unwrap();
        assert_eq!((f.batch(), f.dims()), (1, [1, c, h, w]));
        assert!(matches!(
            Features::new(b, &[1, c + 1, h, w], vec![0.0; (c + 1) * h * w]),
            Err(ModelError::ShapeMismatch { .. })
        ));
        assert!(matches!(
            Features::new(b, &[1, c, h, w], vec![0.0; 3]),
            Err(ModelError::LengthMismatch { .. })
        ));
        assert!(matches!(
            Features::new(b, &[MAX_BATCH + 1, c, h, w], vec![]),
            Err(ModelError::ShapeMismatch { .. })
        ));
        assert!(Features::new(b, &[c, h, w], vec![]).is_err());
    }

    #[test]
    fn content_keys_follow_every_value() {
        let b = Boundary::block(15).unwrap();
        let [c, h, w] = b.info().shape;
        let values: Vec<f32> = (0..c * h * w).map(|i| i as f32 * 0.25).collect();
        let f = Features::new(b, &[1, c, h, w], values.clone()).unwrap();
        assert_eq!(f.content_key(), f.clone().content_key());
        let mut moved = values;
        *moved.last_mut().unwrap() += 1.0;
        let g = Features::new(b, &[1, c, h, w], moved).unwrap();
        assert_ne!(f.content_key(), g.content_key());
    }
}
