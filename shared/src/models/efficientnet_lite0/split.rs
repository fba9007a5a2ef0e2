//! EfficientNet-Lite0 on the split runtime: its 21 boundaries as a [`ModelSpec`], its codec
//! calibration as the frames' tables, its preprocessing as the image input. The network and its answers are
//! those of [`EfficientNetLite0::forward_range`]; this is the adapter the server hosts.

use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};

use super::{Boundary, EfficientNetLite0, ModelError, lite0_spec};
use crate::codec::{Calibration, CodecError};
use crate::runtime::{Activations, ModelSpec, SplitModel};

/// EfficientNet-Lite0 as a [`SplitModel`]: the network on its device, and the calibration its
/// coded frames need (without one only f32 features decode).
#[derive(Debug)]
pub struct Lite0Split {
    model: EfficientNetLite0,
    device: Device,
    calibration: Option<Arc<Calibration>>,
    spec: ModelSpec,
}

impl Lite0Split {
    /// Host `model` (its weights on `device`), decoding coded frames with `calibration`.
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] when the calibration's tables are not this network's
    /// ([`Calibration::check_spec`]).
    pub fn new(
        model: EfficientNetLite0,
        device: Device,
        calibration: Option<Arc<Calibration>>,
    ) -> Result<Self, CodecError> {
        let spec = lite0_spec();
        if let Some(c) = &calibration {
            c.check_spec(&spec)?;
        }
        Ok(Self { model, device, calibration, spec })
    }

    /// The network.
    pub fn network(&self) -> &EfficientNetLite0 {
        &self.model
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
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

    fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_deref()
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
