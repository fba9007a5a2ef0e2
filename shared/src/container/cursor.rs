//! A bounds-checked reader over a byte slice: every read returns [`Truncated`] instead of
//! panicking.

/// A read ran past the end of the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("truncated: needed {needed} bytes, got {got}")]
pub struct Truncated {
    /// Bytes the read needed, counted from the start.
    pub needed: usize,
    /// Bytes there were.
    pub got: usize,
}

/// Little-endian reads from the front of a slice.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    consumed: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, consumed: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        if self.buf.len() < n {
            return Err(Truncated {
                needed: self.consumed + n,
                got: self.consumed + self.buf.len(),
            });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        self.consumed += n;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }

    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Truncated> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, Truncated> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, Truncated> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn f32(&mut self) -> Result<f32, Truncated> {
        self.array().map(f32::from_le_bytes)
    }

    /// The bytes left over: empty when the reader consumed everything.
    pub fn rest(self) -> &'a [u8] {
        self.buf
    }
}
