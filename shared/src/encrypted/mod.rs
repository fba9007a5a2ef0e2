//! The encrypted classifier: the server computes the last layer on features it cannot read.
//!
//! The device runs the network to `pool`, quantizes the 1280 pooled features to integers
//! ([`quantize_features`]), encrypts them under a BFV key only it holds and uploads one
//! ciphertext; the server multiplies it by the classifier's integer weights
//! ([`QuantizedClassifier`]) and adds the bias without decrypting ([`EncryptedClassifier`],
//! with the session's evaluation key: rotations only), and returns the logits encrypted; the
//! device decrypts them ([`DeviceKeys::decrypt`]) and takes the top-5. The server learns
//! neither the features nor the answer. Where the values sit in the slots and the order of
//! the rotations: [`layout`].
//!
//! Parameters: ring degree 4096 with the three moduli of 36, 36 and 37 bits (109 bits, the
//! largest modulus the HomomorphicEncryption.org standard allows at this degree for 128-bit
//! security with a ternary secret), plaintext modulus `PLAINTEXT_MODULUS` (28 bits, `≡ 1 mod
//! 8192` for batching), roomy enough for every integer logit.

pub mod layout;
mod quant;
#[cfg(feature = "encrypted")]
mod scheme;

pub use quant::{
    FEATURE_LEVELS, FEATURE_MAX, QuantizedClassifier, WEIGHT_LEVELS, feature_step, logits_of,
    quantize_features,
};
#[cfg(feature = "encrypted")]
pub use scheme::{DeviceKeys, EncryptedClassifier, SessionKey, parameters};

/// The plaintext modulus `t`: a prime `≡ 1 mod 2·4096`, 28 bits.
pub const PLAINTEXT_MODULUS: u64 = 268_369_921;
/// The ciphertext moduli (109 bits together).
pub const MODULI: [u64; 3] = [0xf_fffe_e001, 0xf_fffc_4001, 0x1f_fffe_0001];

/// What the encrypted classifier refuses.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EncryptedError {
    /// Bytes that are not a ciphertext or a key of these parameters.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What the bytes were meant to be.
        what: &'static str,
        /// The decoder's reason.
        reason: String,
    },
    /// An evaluation key without a rotation the evaluation uses.
    #[error("the evaluation key does not allow rotations by {0}")]
    MissingRotation(usize),
    /// A vector of the wrong length.
    #[error("{what}: {got} values, want {want}")]
    WrongLength {
        /// Which vector.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length wanted.
        want: usize,
    },
    /// The scheme's own failure.
    #[error("homomorphic encryption: {0}")]
    Scheme(String),
}

#[cfg(all(test, feature = "encrypted"))]
mod tests;
