//! Client -> server frames.
//!
//! Features body: `boundary u8 | dtype u8 | ndim u8 | reserved u8 | dims u32 x ndim |
//! payload_len u32 | payload`. Image body: `payload_len u32 | payload` (JPEG or PNG bytes).

use super::cursor::Cursor;
use super::{HEADER_LEN, MAX_PAYLOAD_BYTES, WireError, kind, read_header, write_header};
use crate::model::Boundary;

/// Element type of a feature payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum DType {
    /// Little-endian IEEE f32.
    F32 = 1,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
        }
    }

    fn from_u8(v: u8) -> Result<Self, WireError> {
        match v {
            1 => Ok(Self::F32),
            other => Err(WireError::UnsupportedDtype(other)),
        }
    }
}

/// A request from the client.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Activations at `boundary`: the server runs the rest of the network.
    Features {
        /// Client-chosen id, echoed in the reply.
        id: u64,
        /// Where the client stopped.
        boundary: Boundary,
        /// Element type of `payload`.
        dtype: DType,
        /// Tensor shape, `[n, C, H, W]`.
        shape: Vec<u32>,
        /// Raw tensor bytes, C-order.
        payload: Vec<u8>,
    },
    /// A whole JPEG or PNG image: the server runs everything (cloud-only).
    Image {
        /// Client-chosen id, echoed in the reply.
        id: u64,
        /// Encoded image bytes.
        payload: Vec<u8>,
    },
}

impl Request {
    /// A features request for f32 activations.
    pub fn features_f32(id: u64, boundary: Boundary, shape: &[usize], values: &[f32]) -> Self {
        let mut payload = Vec::with_capacity(values.len() * 4);
        for v in values {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        Self::Features {
            id,
            boundary,
            dtype: DType::F32,
            shape: shape.iter().map(|d| *d as u32).collect(),
            payload,
        }
    }

    /// The request id.
    pub fn id(&self) -> u64 {
        match self {
            Self::Features { id, .. } | Self::Image { id, .. } => *id,
        }
    }

    /// Append the encoded frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Features { id, boundary, dtype, shape, payload } => {
                write_header(out, kind::FEATURES, *id);
                out.extend_from_slice(&[boundary.index(), *dtype as u8, shape.len() as u8, 0]);
                for d in shape {
                    out.extend_from_slice(&d.to_le_bytes());
                }
                out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                out.extend_from_slice(payload);
            }
            Self::Image { id, payload } => {
                write_header(out, kind::IMAGE, *id);
                out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                out.extend_from_slice(payload);
            }
        }
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + 32 + self.payload_len());
        self.encode(&mut out);
        out
    }

    fn payload_len(&self) -> usize {
        match self {
            Self::Features { payload, .. } | Self::Image { payload, .. } => payload.len(),
        }
    }

    /// Decode one frame, checking every length and bound before use.
    ///
    /// # Errors
    /// A [`WireError`] naming the first problem found.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let mut c = Cursor::new(frame);
        let header = read_header(&mut c)?;
        let id = header.id;
        let request = match header.kind {
            kind::FEATURES => {
                let boundary = c.u8()?;
                let boundary = Boundary::from_index(boundary)
                    .map_err(|_| WireError::UnknownBoundary(boundary))?;
                let dtype = DType::from_u8(c.u8()?)?;
                let ndim = c.u8()?;
                if ndim > 4 {
                    return Err(WireError::TooManyDims(ndim));
                }
                c.u8()?;
                let shape = (0..ndim).map(|_| c.u32()).collect::<Result<Vec<_>, _>>()?;
                let len = read_payload_len(&mut c)?;
                let expected = shape
                    .iter()
                    .try_fold(dtype.size(), |a, d| a.checked_mul(*d as usize))
                    .unwrap_or(usize::MAX);
                if expected != len {
                    return Err(WireError::LengthMismatch { shape, expected, got: len });
                }
                let payload = c.take(len)?.to_vec();
                Self::Features { id, boundary, dtype, shape, payload }
            }
            kind::IMAGE => {
                let len = read_payload_len(&mut c)?;
                Self::Image { id, payload: c.take(len)?.to_vec() }
            }
            other => return Err(WireError::UnknownKind { id, kind: other }),
        };
        c.finish()?;
        Ok(request)
    }

    /// The payload of a features request as f32 values.
    pub fn f32_values(payload: &[u8]) -> Vec<f32> {
        payload
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect()
    }
}

fn read_payload_len(c: &mut Cursor<'_>) -> Result<usize, WireError> {
    let len = c.u32()? as usize;
    if len > MAX_PAYLOAD_BYTES {
        return Err(WireError::PayloadTooLarge { len, max: MAX_PAYLOAD_BYTES });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{MAGIC, PROTOCOL_VERSION};

    fn features() -> Request {
        Request::features_f32(
            42,
            Boundary::block(5).unwrap(),
            &[1, 2, 1, 2],
            &[1.0, -2.5, 3.0, 0.25],
        )
    }

    #[test]
    fn round_trips() {
        for r in [features(), Request::Image { id: u64::MAX, payload: vec![0xff, 0xd8, 1, 2, 3] }] {
            assert_eq!(Request::decode(&r.to_bytes()).unwrap(), r);
        }
        let Request::Features { payload, .. } = features() else { unreachable!() };
        assert_eq!(Request::f32_values(&payload), vec![1.0, -2.5, 3.0, 0.25]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = features().to_bytes();
        for cut in 0..bytes.len() {
            let err = Request::decode(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, WireError::Truncated { .. } | WireError::LengthMismatch { .. }),
                "{cut}: {err}"
            );
        }
    }

    #[test]
    fn rejects_bad_headers_and_bodies() {
        let good = features().to_bytes();
        let with = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            Request::decode(&b).unwrap_err()
        };
        assert_eq!(with(0, b'X'), WireError::BadMagic);
        assert_eq!(
            with(4, 9),
            WireError::UnsupportedVersion { got: 9, supported: PROTOCOL_VERSION }
        );
        assert!(matches!(with(6, 7), WireError::UnknownKind { kind: 7, .. }));
        assert!(matches!(with(7, 3), WireError::UnknownModel { model: 3, .. }));
        assert_eq!(with(16, 21), WireError::UnknownBoundary(21));
        assert_eq!(with(17, 0), WireError::UnsupportedDtype(0));
        assert_eq!(with(18, 5), WireError::TooManyDims(5));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(Request::decode(&trailing).unwrap_err(), WireError::TrailingBytes { extra: 1 });
    }

    #[test]
    fn oversized_payload_is_refused_from_the_header() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b.extend_from_slice(&[kind::IMAGE, 1]);
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Request::decode(&b), Err(WireError::PayloadTooLarge { .. })));
    }

    #[test]
    fn shape_overflow_is_a_length_mismatch() {
        let r = Request::Features {
            id: 1,
            boundary: Boundary::STEM,
            dtype: DType::F32,
            shape: vec![u32::MAX, u32::MAX, u32::MAX, u32::MAX],
            payload: vec![0; 8],
        };
        assert!(matches!(Request::decode(&r.to_bytes()), Err(WireError::LengthMismatch { .. })));
    }
}
