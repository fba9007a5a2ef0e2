//! Any bytes as an uploaded image: format sniffing, the JPEG and PNG decoders, the size and
//! truncation checks, then the crop and bicubic resize a cloud-only request runs. Nothing may
//! panic, and an accepted image is exactly what its dimensions say.
#![no_main]

use libfuzzer_sys::fuzz_target;
use split_shared::image::{MAX_DECODED_PIXELS, decode, preprocess};

fuzz_target!(|data: &[u8]| {
    if let Ok(img) = decode(data) {
        assert_eq!(img.pixels.len(), img.width * img.height * 3);
        assert!((img.width * img.height) as u64 <= MAX_DECODED_PIXELS);
        let input = preprocess(data).expect("an image that decodes also preprocesses");
        assert_eq!((input.width, input.height), (224, 224));
    }
});
