//! The model's tensors as the kernels read them: block-quantized matrices kept quantized (the
//! `f16` scales of each GGUF block widened to `f32` once, at load), norms as floats.

use split_kernels::{QBLOCK, QuantFormat, QuantMatrix};

use super::config::block_of;
use super::{Config, LlmError};
use crate::container::half::f16_to_f32;
use crate::container::{GgmlType, Gguf, GgufTensor};

/// An owned block-quantized matrix (`rows × cols`, see [`QuantMatrix`]).
#[derive(Clone, Debug)]
pub struct QuantWeight {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    scales: Vec<f32>,
    mins: Vec<f32>,
    packed: Vec<u8>,
}

impl QuantWeight {
    /// The matrix the kernels take.
    pub fn matrix(&self) -> QuantMatrix<'_> {
        QuantMatrix {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            scales: &self.scales,
            mins: &self.mins,
            packed: &self.packed,
        }
    }

    /// Rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.packed.len() + 4 * (self.scales.len() + self.mins.len())
    }

    fn from_gguf(g: &Gguf, t: &GgufTensor, rows: usize, cols: usize) -> Result<Self, LlmError> {
        let bad = |why: String| LlmError::Tensor { name: t.name.clone(), why };
        if t.dims != [cols as u64, rows as u64] {
            return Err(bad(format!("shape {:?}, the model needs [{cols}, {rows}]", t.dims)));
        }
        let bytes = g.tensor_bytes(t)?;
        let blocks = rows * cols / QBLOCK;
        let (format, block_bytes) = match t.kind {
            GgmlType::Q4_1 => (QuantFormat::Q4_1, 20),
            GgmlType::Q8_0 => (QuantFormat::Q8_0, 34),
            other => return Err(bad(format!("type {other:?}; Q4_1 or Q8_0 expected"))),
        };
        let mut w = QuantWeight {
            format,
            rows,
            cols,
            scales: Vec::with_capacity(blocks),
            mins: Vec::new(),
            packed: Vec::with_capacity(blocks * format.packed_bytes()),
        };
        for block in bytes.chunks_exact(block_bytes) {
            w.scales.push(f16_to_f32(u16::from_le_bytes([block[0], block[1]])));
            match format {
                QuantFormat::Q4_1 => {
                    w.mins.push(f16_to_f32(u16::from_le_bytes([block[2], block[3]])));
                    w.packed.extend_from_slice(&block[4..]);
                }
                QuantFormat::Q8_0 => w.packed.extend_from_slice(&block[2..]),
            }
        }
        w.matrix().check().map_err(|e| bad(e.to_string()))?;
        Ok(w)
    }
}

/// One transformer block's weights.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub(crate) attn_norm: Vec<f32>,
    pub(crate) q: QuantWeight,
    pub(crate) k: QuantWeight,
    pub(crate) v: QuantWeight,
    pub(crate) o: QuantWeight,
    pub(crate) ffn_norm: Vec<f32>,
    pub(crate) gate: QuantWeight,
    pub(crate) up: QuantWeight,
    pub(crate) down: QuantWeight,
}

/// Every weight of the model.
#[derive(Clone, Debug)]
pub struct Weights {
    /// The token embedding, which is also the output projection (tied).
    pub(crate) embedding: QuantWeight,
    /// The block `layers[0]` is.
    pub(crate) first_block: usize,
    /// The blocks the file holds, in order.
    pub(crate) layers: Vec<LayerWeights>,
    pub(crate) output_norm: Vec<f32>,
}

impl Weights {
    /// The tensors of a Llama GGUF file, checked against `config`: the embedding, the final
    /// norm and a run of consecutive blocks — every block, or the share of a split that one
    /// side runs ([`Gguf::write_subset`] makes such a file).
    pub fn from_gguf(g: &Gguf, config: &Config) -> Result<Self, LlmError> {
        let find = |name: &str| {
            g.tensor(name)
                .ok_or_else(|| LlmError::Tensor { name: name.into(), why: "missing".into() })
        };
        let matrix = |name: &str, rows, cols| QuantWeight::from_gguf(g, find(name)?, rows, cols);
        let vector = |name: &str, len: usize| -> Result<Vec<f32>, LlmError> {
            let t = find(name)?;
            if t.kind != GgmlType::F32 || t.dims != [len as u64] {
                return Err(LlmError::Tensor {
                    name: name.into(),
                    why: format!("{:?} {:?}; F32 [{len}] expected", t.kind, t.dims),
                });
            }
            Ok(g.tensor_bytes(t)?
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect())
        };
        if g.tensor("output.weight").is_some() {
            return Err(LlmError::Tensor {
                name: "output.weight".into(),
                why: "an untied output projection is not supported".into(),
            });
        }
        let (d, kv, f) = (config.dim, config.kv_dim(), config.ffn);
        let blocks = held_blocks(g, config.layers)?;
        let layers = blocks
            .clone()
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                Ok(LayerWeights {
                    attn_norm: vector(&n("attn_norm"), d)?,
                    q: matrix(&n("attn_q"), d, d)?,
                    k: matrix(&n("attn_k"), kv, d)?,
                    v: matrix(&n("attn_v"), kv, d)?,
                    o: matrix(&n("attn_output"), d, d)?,
                    ffn_norm: vector(&n("ffn_norm"), d)?,
                    gate: matrix(&n("ffn_gate"), f, d)?,
                    up: matrix(&n("ffn_up"), f, d)?,
                    down: matrix(&n("ffn_down"), d, f)?,
                })
            })
            .collect::<Result<_, LlmError>>()?;
        Ok(Weights {
            embedding: matrix("token_embd.weight", config.vocab, d)?,
            first_block: blocks.start,
            layers,
            output_norm: vector("output_norm.weight", d)?,
        })
    }

    /// Bytes the weights hold in memory.
    pub fn bytes(&self) -> usize {
        let layer = |l: &LayerWeights| {
            [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                .iter()
                .map(|w| w.bytes())
                .sum::<usize>()
                + 4 * (l.attn_norm.len() + l.ffn_norm.len())
        };
        self.embedding.bytes()
            + self.layers.iter().map(layer).sum::<usize>()
            + 4 * self.output_norm.len()
    }
}

/// The blocks whose tensors the file holds: one run of consecutive blocks inside the model's
/// `layers` (a block is there when its first tensor is; the rest are then required).
fn held_blocks(g: &Gguf, layers: usize) -> Result<std::ops::Range<usize>, LlmError> {
    let present: Vec<usize> =
        (0..layers).filter(|i| g.tensor(&format!("blk.{i}.attn_norm.weight")).is_some()).collect();
    let (Some(&first), Some(&last)) = (present.first(), present.last()) else {
        return Ok(0..0);
    };
    if last - first + 1 != present.len() {
        return Err(LlmError::Tensor {
            name: format!("blk.{first}..{last}"),
            why: format!("blocks {present:?} are not one run of consecutive blocks"),
        });
    }
    if let Some(t) = g.tensors.iter().find(|t| block_of(&t.name).is_some_and(|i| i >= layers)) {
        return Err(LlmError::Tensor {
            name: t.name.clone(),
            why: format!("a block past the model's {layers}"),
        });
    }
    Ok(first..last + 1)
}
