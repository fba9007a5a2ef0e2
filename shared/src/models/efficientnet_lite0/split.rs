//! EfficientNet-Lite0 on the split runtime: its 21 boundaries as a [`ModelSpec`], its codec as
//! the frames' decoder, its preprocessing as the image input. The network and its answers are
//! those of [`EfficientNetLite0::forward_range`]; this is the adapter the server hosts.

use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};

use super::{Boundary, EfficientNetLite0, MAX_BATCH, ModelError, boundary_table};
use crate::codec::{Calibration, DecodeContext, Setting, StreamDecoder};
use crate::protocol::{FeaturesFrame, MODEL_EFFICIENTNET_LITE0};
use crate::runtime::{Activations, BoundarySpec, ModelSpec, SplitModel};

/// The name clients ask for and `/api/info` lists.
pub const LITE0_NAME: &str = "efficientnet-lite0";

/// EfficientNet-Lite0 as a [`SplitModel`]: the network on its device, and the calibration its
/// coded frames need (without one only f32 features decode).
#[derive(Debug)]
pub struct Lite0Split {
    model: EfficientNetLite0,
    device: Device,
    calibration: Option<Arc<Calibration>>,
    spec: ModelSpec,
}

/// The network's description: id 1, the boundaries of [`boundary_table`], batches up to
/// [`MAX_BATCH`].
pub fn lite0_spec() -> ModelSpec {
    let boundaries = boundary_table()
        .iter()
        .map(|b| BoundarySpec::new(b.name, &b.shape).with_param_bytes(b.cumulative_param_bytes))
        .collect();
    ModelSpec::new(MODEL_EFFICIENTNET_LITE0, LITE0_NAME, boundaries, MAX_BATCH)
        .expect("the architecture table is a valid spec")
}

impl Lite0Split {
    /// Host `model` (its weights on `device`), decoding coded frames with `calibration`.
    pub fn new(
        model: EfficientNetLite0,
        device: Device,
        calibration: Option<Arc<Calibration>>,
    ) -> Self {
        Self { model, device, calibration, spec: lite0_spec() }
    }

    /// The network.
    pub fn network(&self) -> &EfficientNetLite0 {
        &self.model
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The calibration its coded frames use, if it has one.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_deref()
    }
}

impl SplitModel for Lite0Split {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn forward_range(&self, x: Activations, to: u8) -> crate::Result<Activations> {
        let (from, to_boundary) = (Boundary::from_index(x.boundary())?, Boundary::from_index(to)?);
        let dims = x.dims().to_vec();
        let x = Tensor::<4>::from_data(TensorData::new(x.into_values(), dims), &self.device);
        let data = self.model.forward_range(x, from, to_boundary)?.into_data();
        let dims = data.shape().to_vec();
        let values =
            data.try_into_vec::<f32>().map_err(|e| ModelError::Backend(format!("{e:?}")))?;
        Ok(Activations::new(&self.spec, to, &dims, values)?)
    }

    fn decode_features(
        &self,
        frame: &FeaturesFrame,
        streams: &mut StreamDecoder,
    ) -> crate::Result<Activations> {
        let ctx = DecodeContext::new(self.calibration.as_deref()).with_streams(Some(streams));
        let features = frame.decode(ctx)?;
        let (boundary, dims) = (features.boundary().index(), features.dims());
        Ok(Activations::new(&self.spec, boundary, &dims, features.into_values())?)
    }

    fn default_codec(&self) -> Setting {
        self.calibration.as_ref().map_or(Setting::F32, |c| c.default_setting())
    }

    fn image_input(&self, bytes: &[u8], exact: bool) -> crate::Result<Activations> {
        let img = if exact {
            crate::image::decode_input(bytes)?
        } else {
            crate::image::preprocess(bytes)?
        };
        let dims = [1, 3, img.height, img.width];
        Ok(Activations::new(&self.spec, 0, &dims, crate::image::normalize(&img))?)
    }
}
