//! Any bytes as a weights file, a light-model shard or a codec calibration: the container
//! parsers, with the magic and the checksum supplied so the fuzzer reaches past them (a
//! download is checked against its checksum first; what is behind it must not panic either).
//! The first byte picks the kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use split_shared::codec::Calibration;
use split_shared::container::{TensorFile, dequantize, fnv1a64};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else { return };
    let magic: &[u8; 4] = match kind % 3 {
        0 => b"SPLW",
        1 => b"SPLQ",
        _ => b"SPLC",
    };
    let mut bytes = magic.to_vec();
    bytes.extend_from_slice(body);
    let sum = fnv1a64(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    match kind % 3 {
        0 => drop(TensorFile::from_bytes(&bytes, *magic)),
        1 => {
            if let Ok(file) = dequantize(&bytes) {
                for (_, dims, values) in file.iter() {
                    assert_eq!(dims.iter().product::<usize>(), values.len());
                }
            }
        }
        _ => drop(Calibration::from_bytes(&bytes)),
    }
});
