//! The encrypted classifier on the real network: the bundled photos' pooled features,
//! encrypted, classified by the server's half without decrypting, decrypted on the device.
#![cfg(feature = "encrypted")]

mod common;

use burn::tensor::Device;
use common::*;
use split_shared::encrypted::{
    DeviceKeys, EncryptedClassifier, QuantizedClassifier, quantize_features,
};
use split_shared::image::to_input_tensor;
use split_shared::labels::top_k;
use split_shared::model::{NUM_CLASSES, read_weights};
use split_shared::{Boundary, EfficientNetLite0};

const HEAD: usize = 1280;

fn classifier() -> QuantizedClassifier {
    let weights = read_weights(&split_paths::weights_file()).expect("the pretrained weights");
    QuantizedClassifier::new(
        weights.tensor("fc.weight", &[NUM_CLASSES, HEAD]).unwrap(),
        weights.tensor("fc.bias", &[NUM_CLASSES]).unwrap(),
    )
}

fn pooled(model: &EfficientNetLite0, device: &Device, name: &str) -> Vec<f32> {
    let input = to_input_tensor(&fixture_image(name), device);
    values(model.forward_range(input, Boundary::INPUT, Boundary::POOL).unwrap())
}

#[test]
fn the_encrypted_classifier_answers_as_the_network() {
    let device = Device::flex();
    let model = model(&device);
    let classifier = classifier();
    let server = EncryptedClassifier::new(&classifier).unwrap();
    let mut rng = rand::rng();
    let keys = DeviceKeys::generate(&mut rng);
    let key = EncryptedClassifier::read_key(&keys.evaluation_key(&mut rng).unwrap()).unwrap();
    for name in ["chelsea", "coffee"] {
        let features = quantize_features(&pooled(&model, &device, name));
        let upload = keys.encrypt(&features, &mut rng).unwrap();
        let parts: Vec<&[u8]> = upload.iter().map(Vec::as_slice).collect();
        let answer = server.evaluate(&parts, &key).unwrap();
        let integer = keys.decrypt(&answer).unwrap();
        assert_eq!(integer, classifier.evaluate(&features), "{name}: exactly the clear integers");
        let logits = classifier.logits(&integer);
        let reference = fixture_logits(name);
        assert_eq!(
            top_k(&logits, 5).iter().map(|p| p.class).collect::<Vec<_>>(),
            top_k(&reference, 5).iter().map(|p| p.class).collect::<Vec<_>>(),
            "{name}: the reference's top-5, in order"
        );
        let worst = max_abs_diff(&logits, &reference);
        assert!(worst < 0.1, "{name}: integer rounding moved a logit by {worst}");
    }
}
