//! BFV (fhe.rs) on the layout: keys and encryption on the device, evaluation on the server.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use fhe::bfv::{
    BfvParameters, BfvParametersBuilder, Ciphertext, Encoding, EvaluationKey, EvaluationKeyBuilder,
    Plaintext, SecretKey, dot_product_scalar,
};
use fhe_traits::{
    DeserializeParametrized, FheDecoder, FheDecrypter, FheEncoder, FheEncrypter, Serialize,
};
use rand::{CryptoRng, RngCore};

use super::layout::{self, IN, ROTATIONS, SLOTS};
use super::quant::QuantizedClassifier;
use super::{EncryptedError, MODULI, PLAINTEXT_MODULUS};

/// The parameters both sides use (built once).
pub fn parameters() -> Arc<BfvParameters> {
    static PARAMETERS: OnceLock<Arc<BfvParameters>> = OnceLock::new();
    Arc::clone(PARAMETERS.get_or_init(|| {
        BfvParametersBuilder::new()
            .set_degree(SLOTS)
            .set_plaintext_modulus(PLAINTEXT_MODULUS)
            .set_moduli(&MODULI)
            .build_arc()
            .expect("the fixed parameters are valid (checked by the tests)")
    }))
}

fn fhe_error(e: fhe::Error) -> EncryptedError {
    EncryptedError::Scheme(e.to_string())
}

fn encode(slots: &[i64], par: &Arc<BfvParameters>) -> Result<Plaintext, EncryptedError> {
    Plaintext::try_encode(slots, Encoding::simd(), par).map_err(fhe_error)
}

/// The device's keys: the secret key never leaves it.
pub struct DeviceKeys {
    secret: SecretKey,
}

impl DeviceKeys {
    /// Fresh keys.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        Self { secret: SecretKey::random(&parameters(), rng) }
    }

    /// The evaluation key the server needs (the rotations of [`ROTATIONS`]), serialized: sent
    /// once per session.
    ///
    /// # Errors
    /// When the scheme fails (not expected with these parameters).
    pub fn evaluation_key<R: RngCore + CryptoRng>(
        &self,
        rng: &mut R,
    ) -> Result<Vec<u8>, EncryptedError> {
        self.evaluation_key_for(&ROTATIONS, rng)
    }

    /// An evaluation key for `rotations` (the tests make one that lacks some).
    pub(super) fn evaluation_key_for<R: RngCore + CryptoRng>(
        &self,
        rotations: &[usize],
        rng: &mut R,
    ) -> Result<Vec<u8>, EncryptedError> {
        let mut builder = EvaluationKeyBuilder::new(&self.secret).map_err(fhe_error)?;
        for r in rotations {
            builder.enable_column_rotation(*r).map_err(fhe_error)?;
        }
        Ok(builder.build(rng).map_err(fhe_error)?.to_bytes())
    }

    /// The quantized pooled features, encrypted in the layout's slots and serialized: one
    /// ciphertext per baby step (`layout::BABY`), each fresh.
    ///
    /// # Errors
    /// [`EncryptedError::WrongLength`] unless `features` has `IN` values.
    pub fn encrypt<R: RngCore + CryptoRng>(
        &self,
        features: &[i64],
        rng: &mut R,
    ) -> Result<Vec<Vec<u8>>, EncryptedError> {
        if features.len() != IN {
            return Err(EncryptedError::WrongLength {
                what: "features",
                got: features.len(),
                want: IN,
            });
        }
        let par = parameters();
        layout::pack_features(features)
            .iter()
            .map(|slots| {
                let ct: Ciphertext =
                    self.secret.try_encrypt(&encode(slots, &par)?, rng).map_err(fhe_error)?;
                Ok(ct.to_bytes())
            })
            .collect()
    }

    /// The integer logits (`OUT`, each in `(−t/2, t/2]`) from the server's encrypted answer.
    ///
    /// # Errors
    /// [`EncryptedError::Malformed`] when the bytes are not a ciphertext of these parameters.
    pub fn decrypt(&self, answer: &[u8]) -> Result<Vec<i64>, EncryptedError> {
        let par = parameters();
        let ct = Ciphertext::from_bytes(answer, &par)
            .map_err(|e| EncryptedError::Malformed { what: "ciphertext", reason: e.to_string() })?;
        let pt = self.secret.try_decrypt(&ct).map_err(fhe_error)?;
        let slots = Vec::<u64>::try_decode(&pt, Encoding::simd()).map_err(fhe_error)?;
        let t = PLAINTEXT_MODULUS;
        let centered: Vec<i64> = slots
            .iter()
            .map(|v| if *v > t / 2 { *v as i64 - t as i64 } else { *v as i64 })
            .collect();
        Ok(layout::unpack_logits(&centered))
    }
}

/// A session's evaluation key as the server holds it: rotations only, nothing that decrypts.
#[derive(Debug)]
pub struct SessionKey(EvaluationKey);

/// The server's half: the classifier's diagonals encoded once, then any number of
/// evaluations on ciphertexts it cannot read.
pub struct EncryptedClassifier {
    diagonals: Vec<Plaintext>,
    bias: Plaintext,
}

impl EncryptedClassifier {
    /// Encode the quantized classifier's diagonals (about 130 kB of memory each, `D` of
    /// them).
    ///
    /// # Errors
    /// When the scheme fails (not expected with these parameters).
    pub fn new(classifier: &QuantizedClassifier) -> Result<Self, EncryptedError> {
        let par = parameters();
        let diagonals = layout::diagonals(&classifier.weights)
            .iter()
            .map(|d| encode(d, &par))
            .collect::<Result<_, _>>()?;
        let bias = encode(&layout::pack_bias(&classifier.bias), &par)?;
        Ok(Self { diagonals, bias })
    }

    /// Read a session's evaluation key, and check it allows the rotations the evaluation uses.
    ///
    /// # Errors
    /// [`EncryptedError::Malformed`] when the bytes are not an evaluation key of these
    /// parameters; [`EncryptedError::MissingRotation`] when it lacks one.
    pub fn read_key(bytes: &[u8]) -> Result<SessionKey, EncryptedError> {
        let key = EvaluationKey::from_bytes(bytes, &parameters()).map_err(|e| {
            EncryptedError::Malformed { what: "evaluation key", reason: e.to_string() }
        })?;
        match ROTATIONS.into_iter().find(|r| !key.supports_column_rotation_by(*r)) {
            Some(r) => Err(EncryptedError::MissingRotation(r)),
            None => Ok(SessionKey(key)),
        }
    }

    /// The logits, encrypted under the same key as the baby steps `features` (serialized
    /// both).
    ///
    /// # Errors
    /// [`EncryptedError::WrongLength`] unless there are `layout::BABY` ciphertexts;
    /// [`EncryptedError::Malformed`] when one is not a fresh ciphertext of these parameters.
    pub fn evaluate(
        &self,
        features: &[&[u8]],
        key: &SessionKey,
    ) -> Result<Vec<u8>, EncryptedError> {
        let key = &key.0;
        if features.len() != layout::BABY {
            return Err(EncryptedError::WrongLength {
                what: "baby steps",
                got: features.len(),
                want: layout::BABY,
            });
        }
        let par = parameters();
        let babies =
            features.iter().map(|bytes| read_fresh(bytes, &par)).collect::<Result<Vec<_>, _>>()?;
        let failure = RefCell::new(None);
        let fail = |e: fhe::Error| {
            failure.borrow_mut().get_or_insert(fhe_error(e));
            Ciphertext::zero(&par)
        };
        let z = layout::schedule(
            &babies,
            |c, by| key.rotates_columns_by(c, by).unwrap_or_else(fail),
            |cs, range| {
                dot_product_scalar(cs.iter(), self.diagonals[range].iter()).unwrap_or_else(fail)
            },
            |a, b| a + b,
        );
        if let Some(e) = failure.into_inner() {
            return Err(e);
        }
        let mut y = &z + &self.bias;
        // The answer goes back on two of the three moduli: a third smaller, with room to
        // spare for the noise (the tests decrypt it).
        y.switch_to_level(1).map_err(fhe_error)?;
        Ok(y.to_bytes())
    }
}

/// A ciphertext as the device encrypts it: two parts on all the moduli.
pub(super) fn read_fresh(
    bytes: &[u8],
    par: &Arc<BfvParameters>,
) -> Result<Ciphertext, EncryptedError> {
    let ct = Ciphertext::from_bytes(bytes, par)
        .map_err(|e| EncryptedError::Malformed { what: "ciphertext", reason: e.to_string() })?;
    let level = ct.first().map(|p| par.level_of_context(p.ctx()));
    if ct.len() != 2 || !matches!(level, Some(Ok(0))) {
        return Err(EncryptedError::Malformed {
            what: "ciphertext",
            reason: format!("{} parts, not a fresh ciphertext of two", ct.len()),
        });
    }
    Ok(ct)
}
