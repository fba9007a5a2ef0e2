//! Reader for PyTorch's legacy (pre-1.6, non-zip) `torch.save` format, without Python or torch.
//!
//! The file is four pickles and then raw storage bytes:
//! magic number, protocol version 1001, a `sys_info` dict, the state dict (tensors appear as
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` with storages as
//! persistent ids), the list of storage keys, then per storage an i64 element count and the
//! little-endian data. Only what a state dict of float tensors needs is understood; any other
//! global is refused, so a hostile file cannot make us execute anything.

use std::collections::HashMap;

use anyhow::{Context, Result, bail, ensure};

/// `torch.serialization.MAGIC_NUMBER`, as little-endian bytes of the pickled long.
const MAGIC_NUMBER: u128 = 0x1950a86a20f9469cfc6c;
const LEGACY_PROTOCOL: i64 = 1001;

#[derive(Clone, Debug)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    BigInt(Vec<u8>),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Global(String, String),
    Storage { key: String },
    Tensor { key: String, offset: usize, size: Vec<usize>, stride: Vec<usize> },
    Opaque,
}

impl Value {
    fn int(&self) -> Result<i64> {
        match self {
            Value::Int(i) => Ok(*i),
            Value::Bool(b) => Ok(i64::from(*b)),
            other => bail!("expected an int, found {other:?}"),
        }
    }
    fn usize_list(&self) -> Result<Vec<usize>> {
        match self {
            Value::Tuple(v) | Value::List(v) => {
                v.iter().map(|x| Ok(usize::try_from(x.int()?)?)).collect()
            }
            other => bail!("expected a tuple of ints, found {other:?}"),
        }
    }
}

/// What a persistent id says about a storage.
#[derive(Clone, Copy, Debug)]
struct StorageKind {
    /// Bytes per element.
    elem: usize,
    /// Float32 data (the only kind materialized).
    is_f32: bool,
    /// Element count.
    numel: usize,
}

struct Machine<'a> {
    buf: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    /// Storage key -> what its persistent id said about it.
    storage_kinds: HashMap<String, StorageKind>,
}

impl<'a> Machine<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end =
            self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).context("pickle truncated")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into()?))
    }
    fn line(&mut self) -> Result<String> {
        let rest = &self.buf[self.pos..];
        let n = rest.iter().position(|b| *b == b'\n').context("unterminated line in pickle")?;
        let s = String::from_utf8(rest[..n].to_vec())?;
        self.pos += n + 1;
        Ok(s)
    }
    fn pop(&mut self) -> Result<Value> {
        self.stack.pop().context("pickle stack underflow")
    }
    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        let m = self.marks.pop().context("pickle mark underflow")?;
        ensure!(m <= self.stack.len(), "pickle mark beyond stack");
        Ok(self.stack.split_off(m))
    }
    fn top(&mut self) -> Result<&mut Value> {
        self.stack.last_mut().context("pickle stack empty")
    }
    fn memo_put(&mut self, k: u32) -> Result<()> {
        let v = self.stack.last().context("memo of empty stack")?.clone();
        self.memo.insert(k, v);
        Ok(())
    }
    fn memo_get(&mut self, k: u32) -> Result<()> {
        let v = self.memo.get(&k).with_context(|| format!("pickle memo {k} missing"))?.clone();
        self.stack.push(v);
        Ok(())
    }

    /// Run one pickle to its STOP and return its value.
    fn run(&mut self) -> Result<Value> {
        self.stack.clear();
        self.marks.clear();
        self.memo.clear();
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?;
                } // PROTO
                b'.' => return self.pop(),
                b'(' => self.marks.push(self.stack.len()),
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(v.into()));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.bytes(2)?.try_into()?);
                    self.stack.push(Value::Int(v.into()));
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.bytes(4)?.try_into()?);
                    self.stack.push(Value::Int(v.into()));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.bytes(n)?.to_vec();
                    let v = if n <= 8 {
                        let mut w =
                            [if b.last().is_some_and(|x| x & 0x80 != 0) { 0xff } else { 0 }; 8];
                        w[..n].copy_from_slice(&b);
                        Value::Int(i64::from_le_bytes(w))
                    } else {
                        Value::BigInt(b)
                    };
                    self.stack.push(v);
                }
                b'G' => {
                    self.bytes(8)?;
                    self.stack.push(Value::Opaque);
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let s = String::from_utf8(self.bytes(n)?.to_vec())?;
                    self.stack.push(Value::Str(s));
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let s = String::from_utf8(self.bytes(n)?.to_vec())?;
                    self.stack.push(Value::Str(s));
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.stack.push(Value::Global(module, name));
                }
                b'q' => {
                    let k = self.u8()?;
                    self.memo_put(k.into())?;
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u32;
                    self.memo_put(k)?;
                }
                b'h' => {
                    let k = self.u8()?;
                    self.memo_get(k.into())?;
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(k)?;
                }
                b')' => self.stack.push(Value::Tuple(vec![])),
                b']' => self.stack.push(Value::List(vec![])),
                b'}' => self.stack.push(Value::Dict(vec![])),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    ensure!(self.stack.len() >= n, "pickle stack underflow");
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(items));
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.top()? {
                        Value::List(l) => l.push(v),
                        other => bail!("APPEND to {other:?}"),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.top()? {
                        Value::List(l) => l.extend(items),
                        other => bail!("APPENDS to {other:?}"),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.top()? {
                        Value::Dict(d) => d.push((k, v)),
                        other => bail!("SETITEM on {other:?}"),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    ensure!(items.len() % 2 == 0, "SETITEMS with an odd count");
                    let mut it = items.into_iter();
                    let mut pairs = Vec::new();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    match self.top()? {
                        Value::Dict(d) => d.extend(pairs),
                        other => bail!("SETITEMS on {other:?}"),
                    }
                }
                b'b' => {
                    // BUILD: sets attributes such as the state dict's `_metadata`; not needed.
                    self.pop()?;
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let (storage, kind) = persistent(pid)?;
                    if let Value::Storage { key } = &storage {
                        self.storage_kinds.insert(key.clone(), kind);
                    }
                    self.stack.push(storage);
                }
                b'R' => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    self.stack.push(reduce(func, args)?);
                }
                other => bail!("unsupported pickle opcode {other:#04x} at byte {}", self.pos - 1),
            }
        }
    }
}

fn persistent(pid: Value) -> Result<(Value, StorageKind)> {
    let Value::Tuple(items) = pid else { bail!("persistent id is not a tuple") };
    match items.as_slice() {
        [Value::Str(kind), Value::Global(module, ty), Value::Str(key), _location, numel, _view]
            if kind == "storage" =>
        {
            let elem = match (module.as_str(), ty.as_str()) {
                ("torch", "FloatStorage") => (4, true),
                ("torch", "LongStorage" | "DoubleStorage") => (8, false),
                ("torch", "IntStorage") => (4, false),
                _ => bail!("unsupported storage type {module}.{ty}"),
            };
            let numel = usize::try_from(numel.int()?)?;
            Ok((
                Value::Storage { key: key.clone() },
                StorageKind { elem: elem.0, is_f32: elem.1, numel },
            ))
        }
        _ => bail!("unexpected persistent id {items:?}"),
    }
}

fn reduce(func: Value, args: Value) -> Result<Value> {
    let Value::Global(module, name) = &func else { bail!("REDUCE of {func:?}") };
    let Value::Tuple(args) = args else { bail!("REDUCE arguments are not a tuple") };
    match (module.as_str(), name.as_str()) {
        ("collections", "OrderedDict") => Ok(Value::Dict(vec![])),
        ("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor") => {
            let [Value::Storage { key, .. }, offset, size, stride, ..] = args.as_slice() else {
                bail!("unexpected _rebuild_tensor arguments {args:?}")
            };
            Ok(Value::Tensor {
                key: key.clone(),
                offset: usize::try_from(offset.int()?)?,
                size: size.usize_list()?,
                stride: stride.usize_list()?,
            })
        }
        ("torch._utils", "_rebuild_parameter") => {
            Ok(args.into_iter().next().unwrap_or(Value::Opaque))
        }
        _ => bail!("refusing to call {module}.{name} from a weights file"),
    }
}

/// A tensor read from the file, made contiguous (C-order).
#[derive(Clone, Debug, PartialEq)]
pub struct TorchTensor {
    /// Shape.
    pub shape: Vec<usize>,
    /// Values in C-order.
    pub data: Vec<f32>,
}

/// Read every float tensor of a legacy state dict, honouring storage offsets and strides.
pub fn read_state_dict(bytes: &[u8]) -> Result<Vec<(String, TorchTensor)>> {
    let mut m = Machine {
        buf: bytes,
        pos: 0,
        stack: vec![],
        marks: vec![],
        memo: HashMap::new(),
        storage_kinds: HashMap::new(),
    };
    if bytes.starts_with(b"PK") {
        bail!(
            "this is a zip-format torch file (torch >= 1.6); this reader needs the legacy format"
        );
    }
    if !bytes.starts_with(&[0x80, 0x02]) {
        bail!("not a legacy torch file: it does not start with a protocol-2 pickle");
    }
    let magic = m.run().context("reading the magic number")?;
    let Value::BigInt(magic) = magic else {
        bail!(
            "not a legacy torch file (a zip-format file starts with PK; this reader needs the legacy format)"
        )
    };
    let mut w = [0u8; 16];
    ensure!(magic.len() <= 16, "bad magic number");
    w[..magic.len()].copy_from_slice(&magic);
    ensure!(u128::from_le_bytes(w) == MAGIC_NUMBER, "bad magic number: not a torch file");
    ensure!(m.run()?.int()? == LEGACY_PROTOCOL, "unsupported torch protocol version");
    m.run().context("reading sys_info")?;
    let Value::Dict(entries) = m.run().context("reading the state dict")? else {
        bail!("state dict is not a dict")
    };
    let Value::List(keys) = m.run().context("reading storage keys")? else {
        bail!("storage keys are not a list")
    };

    let mut storages: HashMap<String, Vec<f32>> = HashMap::new();
    for key in keys {
        let Value::Str(key) = key else { bail!("storage key is not a string") };
        let n = usize::try_from(i64::from_le_bytes(m.bytes(8)?.try_into()?))?;
        let StorageKind { elem, is_f32, numel } = *m
            .storage_kinds
            .get(&key)
            .with_context(|| format!("storage {key} never referenced"))?;
        ensure!(n == numel, "storage {key}: {n} elements on disk, {numel} in the header");
        let raw = m
            .bytes(n.checked_mul(elem).context("storage too large")?)
            .with_context(|| format!("storage {key} truncated"))?;
        if is_f32 {
            storages.insert(
                key,
                raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect(),
            );
        }
    }
    ensure!(m.pos == bytes.len(), "{} trailing bytes after the storages", bytes.len() - m.pos);

    let mut out = Vec::new();
    for (name, value) in entries {
        let (Value::Str(name), Value::Tensor { key, offset, size, stride }) = (name, value) else {
            continue;
        };
        let Some(storage) = storages.get(&key) else { continue }; // integer buffers (num_batches_tracked)
        let numel: usize = size.iter().product();
        let mut data = Vec::with_capacity(numel);
        let mut index = vec![0usize; size.len()];
        for _ in 0..numel {
            let at = offset + index.iter().zip(&stride).map(|(i, s)| i * s).sum::<usize>();
            data.push(
                *storage.get(at).with_context(|| format!("{name}: element beyond its storage"))?,
            );
            for d in (0..size.len()).rev() {
                index[d] += 1;
                if index[d] < size[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out.push((name, TorchTensor { shape: size, data }));
    }
    Ok(out)
}
