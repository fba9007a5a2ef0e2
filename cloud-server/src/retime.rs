//! The cost table's cloud column as this server runs it. The table is measured once by
//! `./run.sh profile`, on whatever machine ran it and with that run's overheads; a server on
//! another host can be twice as fast or as slow, and clients would plan with the wrong price of
//! every remote placement. At start the server times the network's tail from a few boundaries
//! on a blank input and serves the table with its cloud figures scaled by the median ratio
//! (`--keep-cost-table` serves the file as it is).

use std::time::Instant;

use burn::tensor::{Device, Tensor};
use split_shared::model::{Boundary, EfficientNetLite0};
use split_shared::plan::CostTable;

/// Where the tail is timed from: the whole network (`input`), and the blocks clients split
/// after most often.
const FROM_BLOCKS: [usize; 2] = [5, 11];
/// Timed runs from each boundary, after one to warm up; the median is kept.
const RUNS: usize = 5;

/// This server's time over the table's, the median over `input` and [`FROM_BLOCKS`]; `None` when the table has
/// none of those figures or the model fails (the table is then served as it is).
pub fn cloud_factor(model: &EfficientNetLite0, device: &Device, table: &CostTable) -> Option<f64> {
    let from = std::iter::once(Boundary::INPUT)
        .chain(FROM_BLOCKS.iter().filter_map(|&k| Boundary::block(k).ok()));
    let mut ratios: Vec<f64> = from
        .filter_map(|b| {
            let i = table.boundaries.iter().position(|n| *n == b.name())?;
            let expected = table.cloud_ms.get(i).copied().flatten().filter(|ms| *ms > 0.1)?;
            let measured = tail_ms(model, device, b)?;
            Some(measured / expected)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied()
}

/// The median time of the network from `from` to the logits on a blank input, ms.
fn tail_ms(model: &EfficientNetLite0, device: &Device, from: Boundary) -> Option<f64> {
    let [c, h, w] = from.info().shape;
    let mut times = Vec::with_capacity(RUNS);
    for run in 0..=RUNS {
        let x = Tensor::<4>::zeros([1, c, h, w], device);
        let start = Instant::now();
        let logits = model.forward_range(x, from, Boundary::LOGITS).ok()?;
        logits.into_data();
        if run > 0 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    times.get(RUNS / 2).copied()
}
