//! Helpers shared by the integration tests: the weights and the golden fixtures.
#![allow(dead_code, missing_docs)]

use std::path::PathBuf;

use burn::tensor::{Device, Tensor};
use split_shared::EfficientNetLite0;
use split_shared::image::RgbImage;

pub fn model(device: &Device) -> EfficientNetLite0 {
    EfficientNetLite0::load(&split_paths::weights_file(), device)
        .unwrap_or_else(|e| panic!("these tests need the pretrained weights: {e}"))
}

pub fn data(name: &str) -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name))
        .expect("fixture")
}

/// The reference's preprocessed 224x224 input for `chelsea` or `coffee`.
pub fn fixture_image(name: &str) -> RgbImage {
    RgbImage::new(224, 224, data(&format!("{name}_224.rgb"))).expect("224x224 RGB")
}

/// The reference's float32 logits.
pub fn fixture_logits(name: &str) -> Vec<f32> {
    data(&format!("{name}_logits.f32"))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn values(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 tensor")
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
