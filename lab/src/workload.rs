//! What the load generator sends: the frames a browser would, built with the shared code.

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use split_shared::codec::{Calibration, EncodeContext, Setting};
use split_shared::model::{Boundary, EfficientNetLite0, Features};
use split_shared::protocol::Request;

/// A request kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Upload the image file as it is (cloud-only).
    Image,
    /// Upload a quality-90 JPEG of the preprocessed 224x224 input: what a plain app would send.
    Jpeg224,
    /// Features at a boundary, coded with a setting (`features:block5:q6`).
    Features {
        /// Where the edge stops.
        split: Boundary,
        /// Codec setting.
        codec: Setting,
    },
}

impl std::str::FromStr for Workload {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let mut parts = s.split(':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("image"), None, None, None) => Ok(Self::Image),
            (Some("jpeg224"), None, None, None) => Ok(Self::Jpeg224),
            (Some("features"), Some(b), c, None) => {
                Ok(Self::Features { split: b.parse()?, codec: c.unwrap_or("f32").parse()? })
            }
            _ => bail!("workload {s:?}: use image, jpeg224 or features:<boundary>[:<codec>]"),
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Image => f.write_str("image"),
            Self::Jpeg224 => f.write_str("jpeg224"),
            Self::Features { split, codec } => write!(f, "features:{split}:{codec}"),
        }
    }
}

impl Workload {
    /// The frame for `image` (JPEG or PNG bytes): edge compute runs here once, natively.
    ///
    /// # Errors
    /// Missing weights or calibration, an undecodable image, an uncalibrated setting.
    pub fn frame(&self, image: &[u8]) -> Result<Vec<u8>> {
        match self {
            Self::Image => Ok(Request::Image { id: 0, payload: image.to_vec() }.to_bytes()),
            Self::Jpeg224 => {
                let img = split_shared::image::preprocess(image)?;
                let jpeg = split_shared::image::encode_jpeg(&img, 90)?;
                Ok(Request::Input { id: 0, payload: jpeg }.to_bytes())
            }
            Self::Features { split, codec } => {
                let device = Device::flex();
                let model = EfficientNetLite0::load(&split_paths::weights_file(), &device)?;
                let img = split_shared::image::preprocess(image)?;
                let x = model.forward_range(
                    split_shared::image::to_input_tensor(&img, &device),
                    Boundary::INPUT,
                    *split,
                )?;
                let features = Features::from_tensor(*split, x)?;
                let calibration = match codec {
                    Setting::F32 | Setting::Ranged(_) => None,
                    Setting::Quant(_) | Setting::Alloc(_) | Setting::Learned(_) => Some(
                        Calibration::load(&split_paths::calibration_file())
                            .context("run `./run.sh setup`")?,
                    ),
                };
                let ctx = EncodeContext::new(calibration.as_ref());
                let frame = features.to_frame(*codec, ctx)?;
                Ok(Request::Features { id: 0, frame }.to_bytes())
            }
        }
    }
}
