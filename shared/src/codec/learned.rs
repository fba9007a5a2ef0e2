//! The learned bottleneck (`learned<bits>` settings): a trained encoder maps each position's
//! channel vector to a few codes, the codes are quantized and entropy coded with calibrated
//! tables, and a trained decoder maps them back before the rest of the network. Both are stacks
//! of dense layers (1×1 convolutions over the map) with ReLU between layers and none after the
//! last; `./run.sh train bottleneck --write` fits them and writes them into a calibration file
//! ([`super::Calibration`], tensors `<b>.learned.*`).
//!
//! The cloud's rest of the network is unchanged: only the map it receives is the decoder's.
//! Tensors here are one item's activations, `[C, positions]` in C order (codes likewise
//! `[codes, positions]`).

use super::CodecError;

/// Most layers a coder may have (encoder and decoder together).
pub const MAX_LAYERS: usize = 8;
/// Widest layer a calibration may hold (inputs or outputs).
pub const MAX_WIDTH: usize = 4096;

/// One dense layer: `y = x · w + b`, `w` `[inputs, outputs]` row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    /// `[inputs, outputs]`, row-major.
    pub w: Vec<f32>,
    /// `[outputs]`.
    pub b: Vec<f32>,
}

impl Dense {
    /// Inputs of the layer.
    pub fn inputs(&self) -> usize {
        self.w.len() / self.b.len().max(1)
    }

    /// Outputs of the layer.
    pub fn outputs(&self) -> usize {
        self.b.len()
    }
}

/// A trained encoder and decoder: `layers[..encoder]` map channels to codes, the rest codes
/// back to channels.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedCoder {
    layers: Vec<Dense>,
    encoder: usize,
}

impl LearnedCoder {
    /// A coder from its layers, the first `encoder` of them the encoder's.
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] when the layers do not chain (each one's inputs the
    /// previous one's outputs), the decoder does not end where the encoder started, a layer is
    /// empty or wider than [`MAX_WIDTH`], there are more than [`MAX_LAYERS`], or a weight is not
    /// finite.
    pub fn new(layers: Vec<Dense>, encoder: usize) -> Result<Self, CodecError> {
        let bad = |m: String| Err(CodecError::BadCalibration(format!("learned coder: {m}")));
        if encoder == 0 || encoder >= layers.len() || layers.len() > MAX_LAYERS {
            return bad(format!("{} layers, {encoder} of them the encoder's", layers.len()));
        }
        for (i, l) in layers.iter().enumerate() {
            let (inputs, outputs) = (l.inputs(), l.outputs());
            if inputs == 0 || outputs == 0 || inputs * outputs != l.w.len() {
                return bad(format!("layer {i} has {} weights for {outputs} outputs", l.w.len()));
            }
            if inputs > MAX_WIDTH || outputs > MAX_WIDTH {
                return bad(format!("layer {i} is {inputs} × {outputs}, wider than {MAX_WIDTH}"));
            }
            if l.w.iter().chain(&l.b).any(|v| !v.is_finite()) {
                return bad(format!("layer {i} holds a value that is not finite"));
            }
            if i > 0 && layers[i - 1].outputs() != inputs {
                return bad(format!("layer {i} takes {inputs} inputs after {} outputs", {
                    layers[i - 1].outputs()
                }));
            }
        }
        let channels = layers[0].inputs();
        if layers[layers.len() - 1].outputs() != channels {
            return bad(format!("the decoder ends at {} channels, not {channels}", {
                layers[layers.len() - 1].outputs()
            }));
        }
        Ok(Self { layers, encoder })
    }

    /// The layers, the encoder's first.
    pub fn layers(&self) -> &[Dense] {
        &self.layers
    }

    /// How many of [`Self::layers`] are the encoder's.
    pub fn encoder_layers(&self) -> usize {
        self.encoder
    }

    /// Channels of the map it codes.
    pub fn channels(&self) -> usize {
        self.layers[0].inputs()
    }

    /// Codes per position.
    pub fn codes(&self) -> usize {
        self.layers[self.encoder - 1].outputs()
    }

    /// A map `[channels, positions]` to its codes `[codes, positions]`.
    pub fn encode(&self, x: &[f32]) -> Vec<f32> {
        run(&self.layers[..self.encoder], x)
    }

    /// Codes `[codes, positions]` back to a map `[channels, positions]`.
    pub fn decode(&self, z: &[f32]) -> Vec<f32> {
        run(&self.layers[self.encoder..], z)
    }
}

/// The layers over a plane-major tensor `[inputs, positions]`, ReLU between layers.
fn run(layers: &[Dense], x: &[f32]) -> Vec<f32> {
    let mut x = x.to_vec();
    for (i, l) in layers.iter().enumerate() {
        let (inputs, outputs) = (l.inputs(), l.outputs());
        let positions = x.len() / inputs;
        let mut y = vec![0f32; outputs * positions];
        for (o, out) in y.chunks_exact_mut(positions).enumerate() {
            out.fill(l.b[o]);
            for (k, plane) in x.chunks_exact(positions).enumerate() {
                let w = l.w[k * outputs + o];
                if w != 0.0 {
                    for (a, v) in out.iter_mut().zip(plane) {
                        *a += w * v;
                    }
                }
            }
            if i + 1 < layers.len() {
                for a in out.iter_mut() {
                    *a = a.max(0.0);
                }
            }
        }
        x = y;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(inputs: usize, outputs: usize, seed: u32) -> Dense {
        let v =
            |i: usize| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32;
        Dense {
            w: (0..inputs * outputs).map(|i| v(i) / 1000.0 - 0.5).collect(),
            b: (0..outputs).map(|i| v(i + 7) / 2000.0 - 0.25).collect(),
        }
    }

    /// The layers compute `x · w + b` per position, with ReLU between them only.
    #[test]
    fn layers_compute_per_position_with_relu_between() {
        let coder = LearnedCoder::new(vec![dense(3, 4, 1), dense(4, 2, 2), dense(2, 3, 3)], 2)
            .expect("a coder");
        let positions = 5;
        let x: Vec<f32> = (0..3 * positions).map(|i| i as f32 / 7.0 - 1.0).collect();
        let z = coder.encode(&x);
        assert_eq!((coder.channels(), coder.codes(), z.len()), (3, 2, 2 * positions));
        for p in 0..positions {
            let at = |t: &[f32], c: usize| t[c * positions + p];
            let l = &coder.layers()[0];
            let hidden: Vec<f32> = (0..4)
                .map(|o| {
                    (l.b[o] + (0..3).map(|k| l.w[k * 4 + o] * at(&x, k)).sum::<f32>()).max(0.0)
                })
                .collect();
            let l = &coder.layers()[1];
            for o in 0..2 {
                let want = l.b[o] + (0..4).map(|k| l.w[k * 2 + o] * hidden[k]).sum::<f32>();
                assert!((at(&z, o) - want).abs() < 1e-5, "position {p}, code {o}");
            }
        }
        let back = coder.decode(&z);
        let l = &coder.layers()[2];
        for p in 0..positions {
            for o in 0..3 {
                let want =
                    l.b[o] + (0..2).map(|k| l.w[k * 3 + o] * z[k * positions + p]).sum::<f32>();
                assert!((back[o * positions + p] - want).abs() < 1e-5, "no ReLU after the last");
            }
        }
    }

    #[test]
    fn layers_that_do_not_chain_are_refused() {
        let ok = || vec![dense(3, 2, 1), dense(2, 3, 2)];
        assert!(LearnedCoder::new(ok(), 1).is_ok());
        assert!(LearnedCoder::new(ok(), 0).is_err());
        assert!(LearnedCoder::new(ok(), 2).is_err());
        assert!(LearnedCoder::new(vec![dense(3, 2, 1), dense(3, 3, 2)], 1).is_err());
        assert!(LearnedCoder::new(vec![dense(3, 2, 1), dense(2, 4, 2)], 1).is_err());
        let mut nan = ok();
        nan[1].b[0] = f32::NAN;
        assert!(LearnedCoder::new(nan, 1).is_err());
        let mut ragged = ok();
        ragged[0].w.pop();
        assert!(LearnedCoder::new(ragged, 1).is_err());
    }
}
