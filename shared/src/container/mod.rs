//! The ground floor: reading and writing bytes, below the model, the codec and the protocol.
//!
//! - `Cursor` (crate-internal): a bounds-checked little-endian reader; every read past the
//!   end is a [`Truncated`] error, never a panic. The protocol decodes frames with it, the
//!   tensor file its header.
//! - [`TensorFile`]: named tensors (f32, or 16-bit integers) with a checksum, the container of
//!   the weights (magic "SPLW") and of the codec calibration ("SPLC"); the layers above choose
//!   the magic.
//! - [`Gguf`]: llama.cpp's model file (typed metadata, tensor descriptions, aligned data),
//!   what the language model's weights come in;
//! - [`quantize`] / [`dequantize`]: the same tensors in 8 or 4 bits per weight ("SPLQ"), the
//!   file of the light model;
//! - [`half`]: IEEE half and bfloat16 numbers (GGUF's scales, the chat's hidden states).
//!
//! Nothing here knows what the bytes mean; errors say what is wrong with the bytes.

mod cursor;
mod gguf;
mod gguf_write;
pub mod half;
mod quantized;
mod tensor_file;

pub(crate) use cursor::Cursor;
pub use cursor::Truncated;
pub use gguf::{GgmlType, Gguf, GgufError, GgufTensor, GgufValue};
pub use quantized::{QUANTIZED_FILE_VERSION, QUANTIZED_MAGIC, Quantization, dequantize, quantize};
pub use tensor_file::{ContainerError, TENSOR_FILE_VERSION, TensorFile, fnv1a64};
