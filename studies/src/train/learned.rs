//! `./run.sh train bottleneck --write`: the trained coder into a calibration file, as the
//! codec's `learned<bits>` settings, and those settings measured through the codec itself.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use burn::tensor::{Device, Tensor, TensorData};
use split_shared::codec::{
    Calibration, ClipRange, DecodeContext, EncodeContext, LearnedTables, QuantTable, Setting, quant,
};
use split_shared::model::{Boundary, EfficientNetLite0};
use split_shared::plan::{CodecCost, CostTable, wilson_lower};
use split_shared::protocol::{FeatureView, FeaturesFrame, Request};

use super::coder::Coder;
use super::head::argmax;

/// Position-major rows `[positions, c]` as the codec's plane-major `[c, positions]`.
pub(super) fn planes(rows: &[f32], c: usize) -> Vec<f32> {
    let positions = rows.len() / c;
    let mut out = vec![0f32; rows.len()];
    for i in 0..positions {
        for j in 0..c {
            out[j * positions + i] = rows[i * c + j];
        }
    }
    out
}

/// Tables over the codes at `bits`: the training codes' (`codes`, position-major) levels
/// counted per code within `range`.
fn table(codes: &[f32], range: &[ClipRange], bits: u8) -> Result<QuantTable> {
    let k = range.len();
    let mut symbols = Vec::new();
    quant::quantize(&planes(codes, k), range, 1 << bits, &mut symbols);
    let positions = symbols.len() / k;
    let mut counts = vec![vec![0u64; 1 << bits]; k];
    for (i, s) in symbols.iter().enumerate() {
        counts[i / positions][usize::from(*s)] += 1;
    }
    Ok(QuantTable::from_counts(bits, range.to_vec(), &counts)?)
}

/// Where the trained coder goes.
pub struct Outputs<'a> {
    /// The calibration file written: the installed one with the coder added.
    pub calibration: &'a Path,
    /// A cost table whose rows at the boundary get the `learned<bits>` settings as measured.
    pub cost_table: Option<&'a Path>,
}

/// Write `coder` at `at` with tables at every depth of `bits` into a copy of the installed
/// calibration, then code every held-back map (`held`: position-major rows and the whole
/// network's answer) through the written file as the browser and the server do, print frame
/// bytes and agreement, and put them in the cost table when one is named.
#[allow(clippy::too_many_arguments)]
pub fn write(
    out: &Outputs<'_>,
    at: Boundary,
    bits: &[u8],
    coder: &Coder,
    range: &[(f32, f32)],
    codes: &[f32],
    held: &[(&[f32], usize)],
    model: &EfficientNetLite0,
) -> Result<()> {
    let range: Vec<ClipRange> = range.iter().map(|&(lo, hi)| ClipRange { lo, hi }).collect();
    let tables = bits
        .iter()
        .map(|&b| Ok((b, table(codes, &range, b)?)))
        .collect::<Result<BTreeMap<_, _>>>()?;
    let command =
        format!("./run.sh train {}", std::env::args().skip(2).collect::<Vec<_>>().join(" "));
    let learned = LearnedTables { coder: coder.to_codec(), tables, command };
    let base = Calibration::load(&xtask::setup::ensure_calibration()?)?;
    let name = at.info().name;
    let path = out.calibration;
    std::fs::write(path, base.with_learned(name, learned).to_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    // Measured as a server reads it: from the file's bytes.
    let cal = Calibration::load(path)?;
    eprintln!("train: wrote {} ({:016x}), learned tables at {name}", path.display(), cal.id());
    let device = Device::flex();
    let [c, h, w] = at.info().shape;
    let dims = [1, c, h, w];
    println!(
        "| setting | frame bytes per photo (payload) | payload bits per original value | top-1 agreement (held-back photos) |"
    );
    println!("|---|---|---|---|");
    let mut rows = Vec::new();
    for &b in bits {
        let (mut agree, mut frames, mut payloads) = (0u32, 0usize, 0usize);
        for (map, top) in held {
            let x = planes(map, c);
            let view = FeatureView { index: at.index(), name, dims: &dims, values: &x };
            let frame =
                FeaturesFrame::encode(view, Setting::Learned(b), EncodeContext::new(Some(&cal)))?;
            payloads += frame.payload.len();
            let back = frame.decode_values(name, DecodeContext::new(Some(&cal)))?;
            frames += Request::Features { id: 0, frame }.to_bytes().len();
            let t = Tensor::<4>::from_data(TensorData::new(back, dims), &device);
            let logits = model.forward_range(t, at, Boundary::LOGITS)?;
            let answer = argmax(&logits.into_data().try_to_vec::<f32>().expect("f32 logits"));
            agree += u32::from(answer == *top);
        }
        let n = held.len() as u32;
        let (frame, payload) = (frames as f64 / f64::from(n), payloads as f64 / f64::from(n));
        println!(
            "| learned{b} | {frame:.0} ({payload:.0}) | {:.2} | {:.1}% ({agree}/{n}), ≥ {:.1}% |",
            payload * 8.0 / (c * h * w) as f64,
            100.0 * f64::from(agree) / f64::from(n),
            100.0 * wilson_lower(agree, n)
        );
        rows.push(CodecCost::measured(Setting::Learned(b), frame, agree, n));
    }
    if let Some(path) = out.cost_table {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut table = CostTable::from_json(&text).map_err(anyhow::Error::msg)?;
        let k = table
            .boundaries
            .iter()
            .position(|b| b == name)
            .with_context(|| format!("{} has no boundary {name}", path.display()))?;
        table.codecs[k].retain(|c| !matches!(c.codec, Setting::Learned(_)));
        table.codecs[k].extend(rows);
        let json = serde_json::to_string_pretty(&table)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("train: the learned rows at {name} written into {}", path.display());
    }
    Ok(())
}
