//! What the split costs in answers and in privacy, measured on real photos with the real
//! weights: the codec's calibration (`calibrate`), accuracy and agreement of split inference
//! (`eval`), the light model's candidates, two devices' views fused, a camera pan's stream
//! residuals, and the white-box attacks on the features the server receives (`privacy`) and
//! on the language model's hidden states (`llm_invert`), and what coding those states costs in
//! answers (`llm_codec`).
//! The `split-studies` binary runs them (`./run.sh eval --help`, ...); the performance lab
//! (`split-lab`) reuses the edge and server paths of [`eval`] and the charts of [`svg`].

pub mod adam;
pub mod calibrate;
pub mod encrypted;
pub mod eval;
pub mod fusion;
pub mod light;
pub mod llm;
pub mod llm_codec;
pub mod llm_invert;
pub mod privacy;
pub mod stream_eval;
pub mod svg;
pub mod train;
