//! Any bytes as a weights file, a light-model shard, a codec calibration or a GGUF model file:
//! the container parsers, with the magic and the checksum supplied so the fuzzer reaches past
//! them (a download is checked against its checksum first; what is behind it must not panic
//! either), and for GGUF the language model's readers of its metadata (numbers, tokenizer, chat
//! template). The first byte picks the kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use split_shared::codec::Calibration;
use split_shared::container::{Gguf, TensorFile, dequantize, fnv1a64};
use split_shared::models::smollm2::{ChatTemplate, Config, Message, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else { return };
    if kind % 4 == 3 {
        return gguf(body);
    }
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

fn gguf(bytes: &[u8]) {
    let Ok(g) = Gguf::parse(bytes) else { return };
    for t in &g.tensors {
        drop(g.tensor_bytes(t));
    }
    drop(Config::from_gguf(&g));
    if let Ok(tok) = Tokenizer::from_gguf(&g) {
        let ids = tok.encode_with_controls("Hello, world! 123 <|im_end|> é");
        drop(tok.decode(&ids));
        if let Ok(template) = ChatTemplate::from_gguf(&g) {
            drop(template.encode(&tok, &[Message { role: "user".into(), content: "hi".into() }]));
        }
    }
}
