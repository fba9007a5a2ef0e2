//! A payload made of several byte sections: each but the last preceded by its length (LEB128),
//! so that independent coders can write side by side and a decoder can find each one.

use super::CodecError;

/// Most bytes a section's length is written in: 2^28 is past any payload the limits admit.
const MAX_LENGTH_BYTES: usize = 4;

/// Join `parts` into one payload.
pub fn join(parts: &[&[u8]]) -> Vec<u8> {
    let total = parts.iter().map(|p| p.len() + MAX_LENGTH_BYTES).sum();
    let mut payload = Vec::with_capacity(total);
    if let Some((last, rest)) = parts.split_last() {
        for part in rest {
            let mut len = part.len();
            while len >= 0x80 {
                payload.push((len as u8) | 0x80);
                len >>= 7;
            }
            payload.push(len as u8);
            payload.extend_from_slice(part);
        }
        payload.extend_from_slice(last);
    }
    payload
}

/// Split a payload [`join`] wrote back into `N` sections.
///
/// # Errors
/// [`CodecError::BadPayload`] when a length is missing, too long, or past the payload's end.
pub fn split<const N: usize>(mut payload: &[u8]) -> Result<[&[u8]; N], CodecError> {
    let bad = || CodecError::BadPayload("payload sections do not add up");
    let mut parts = [&payload[..0]; N];
    for part in parts.iter_mut().take(N.saturating_sub(1)) {
        let mut len = 0usize;
        let mut at = 0;
        loop {
            let byte = *payload.get(at).filter(|_| at < MAX_LENGTH_BYTES).ok_or_else(bad)?;
            len |= usize::from(byte & 0x7f) << (7 * at);
            at += 1;
            if byte < 0x80 {
                break;
            }
        }
        let rest = &payload[at..];
        if len > rest.len() {
            return Err(bad());
        }
        (*part, payload) = rest.split_at(len);
    }
    if let Some(last) = parts.last_mut() {
        *last = payload;
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_does_not_add_up() {
        let long = vec![7u8; 300];
        let parts: [&[u8]; 3] = [&long, &[], &[1, 2, 3]];
        let payload = join(&parts);
        assert_eq!(payload.len(), 300 + 2 + 1 + 3);
        assert_eq!(split::<3>(&payload).unwrap(), parts);
        assert!(split::<3>(&payload[..200]).is_err());
        assert!(split::<3>(&[]).is_err());
        assert!(split::<2>(&[0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        assert_eq!(split::<1>(&[9, 9]).unwrap(), [&[9u8, 9][..]]);
    }
}
