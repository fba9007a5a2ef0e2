//! The edge half as plain Rust: platform-independent, so it is tested natively and the wasm
//! exports in `lib.rs` only convert types.

use burn::tensor::{Device, Tensor};
use split_shared::labels::{Prediction, top_k};
use split_shared::model::{Boundary, EfficientNetLite0, NUM_CLASSES, WeightsFile};
use split_shared::protocol::Request;

/// Predictions reported per image.
pub const TOP_K: usize = 5;

/// What the edge produced for one image.
#[derive(Clone, Debug, PartialEq)]
pub enum EdgeOutput {
    /// The split was `logits`: the whole network ran here.
    Local {
        /// Top-5, best first.
        top: Vec<Prediction>,
    },
    /// A features frame to send to the server.
    Remote {
        /// The encoded request frame.
        frame: Vec<u8>,
    },
}

/// The model on the edge device.
pub struct EdgeRunner {
    model: EfficientNetLite0,
    device: Device,
}

/// Read a tensor's values; asynchronous because WebGPU results arrive through a callback.
async fn read_values(t: Tensor<4>) -> split_shared::Result<Vec<f32>> {
    let data =
        t.into_data_async().await.map_err(|e| split_shared::Error::Backend(format!("{e:?}")))?;
    data.try_to_vec::<f32>().map_err(|e| split_shared::Error::Backend(format!("{e:?}")))
}

impl EdgeRunner {
    /// Load the weights file onto `device`.
    ///
    /// # Errors
    /// When the file is not a valid weights file for this model.
    pub fn new(weights: &[u8], device: Device) -> split_shared::Result<Self> {
        let model = EfficientNetLite0::from_weights(&WeightsFile::from_bytes(weights)?, &device)?;
        Ok(Self { model, device })
    }

    /// Preprocess an encoded image and run the network up to `split`.
    ///
    /// # Errors
    /// When the image does not decode, or the backend fails.
    pub async fn run(
        &self,
        image: &[u8],
        split: Boundary,
        id: u64,
    ) -> split_shared::Result<EdgeOutput> {
        let img = split_shared::image::preprocess(image)?;
        self.run_pixels(&img, split, id).await
    }

    /// Run already-preprocessed pixels (224x224 RGB) up to `split`.
    ///
    /// # Errors
    /// When the backend fails.
    pub async fn run_pixels(
        &self,
        img: &split_shared::image::RgbImage,
        split: Boundary,
        id: u64,
    ) -> split_shared::Result<EdgeOutput> {
        let x = split_shared::image::to_input_tensor(img, &self.device);
        let features = self.model.forward_range(x, Boundary::INPUT, split)?;
        let dims = features.dims();
        let values = read_values(features).await?;
        if split == Boundary::LOGITS {
            return Ok(EdgeOutput::Local { top: top_k(&values[..NUM_CLASSES], TOP_K) });
        }
        Ok(EdgeOutput::Remote {
            frame: Request::features_f32(id, split, &dims, &values).to_bytes(),
        })
    }

    /// Run a dummy image through the whole network once, so shader compilation and buffer
    /// allocation do not land on the user's first request.
    ///
    /// # Errors
    /// When the backend fails.
    pub async fn warm_up(&self) -> split_shared::Result<()> {
        let x = Tensor::<4>::zeros([1, 3, 224, 224], &self.device);
        read_values(self.model.forward(x)?).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use split_shared::protocol::Reply;

    fn runner() -> EdgeRunner {
        let path = split_shared::model::default_weights_path();
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask setup`", path.display()));
        EdgeRunner::new(&bytes, Device::flex()).expect("valid weights")
    }

    #[test]
    fn edge_only_and_split_agree_on_a_bundled_photo() {
        let runner = runner();
        let photo =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/samples/chelsea.png"))
                .unwrap();
        let local = futures_executor::block_on(runner.run(&photo, Boundary::LOGITS, 1)).unwrap();
        let EdgeOutput::Local { top } = local else { panic!("edge-only must answer locally") };
        assert!((281..=285).contains(&top[0].class), "chelsea is a cat, got {}", top[0].class);
        let remote =
            futures_executor::block_on(runner.run(&photo, Boundary::block(5).unwrap(), 2)).unwrap();
        let EdgeOutput::Remote { frame } = remote else { panic!("a split must produce a frame") };
        assert!(matches!(Request::decode(&frame).unwrap(), Request::Features { id: 2, .. }));
        assert!(Reply::decode(&frame).is_err(), "requests are not replies");
    }

    #[test]
    fn bad_images_are_errors() {
        let runner = runner();
        let err = futures_executor::block_on(runner.run(b"GIF89a", Boundary::STEM, 1)).unwrap_err();
        assert!(matches!(err, split_shared::Error::ImageDecode(_)), "{err}");
    }
}
