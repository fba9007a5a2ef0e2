//! The EfficientNet-Lite0 architecture as data: stages, shapes, MACs and parameter counts.
//!
//! Both sides read this table: the planner needs cost and size per boundary without loading
//! weights, and the server checks incoming shapes against it.

use std::sync::OnceLock;

use super::boundary::{Boundary, NUM_BOUNDARIES};

/// Largest batch a caller may run or send in one frame.
pub const MAX_BATCH: usize = 4;
/// Input resolution the weights were trained at.
pub const INPUT_SIZE: usize = 224;
/// Smallest input [`crate::model::EfficientNetLite0::forward_at`] runs (five stride-2 stages
/// bring it to a 1×1 map).
pub const MIN_INPUT_SIZE: usize = 32;
/// Number of ImageNet classes.
pub const NUM_CLASSES: usize = 1000;
/// Channels after the 1x1 head convolution.
pub const HEAD_CHANNELS: usize = 1280;

/// One MBConv block: optional 1x1 expansion, depthwise kxk, linear 1x1 projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSpec {
    /// Depthwise kernel size.
    pub kernel: usize,
    /// Depthwise stride.
    pub stride: usize,
    /// Expansion ratio (1 means no expansion conv).
    pub expand: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
}

impl BlockSpec {
    /// Expanded (hidden) channels.
    pub fn hidden(&self) -> usize {
        self.c_in * self.expand
    }

    /// Residual connection: only when the block keeps both resolution and width.
    pub fn residual(&self) -> bool {
        self.stride == 1 && self.c_in == self.c_out
    }
}

/// (repeats, kernel, stride, expand, in, out) per stage, from the EfficientNet-Lite0 builder.
const STAGES: [(usize, usize, usize, usize, usize, usize); 7] = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
];

/// The 16 MBConv blocks in order.
pub fn blocks() -> &'static [BlockSpec; 16] {
    static BLOCKS: OnceLock<[BlockSpec; 16]> = OnceLock::new();
    BLOCKS.get_or_init(|| {
        let mut out = Vec::with_capacity(16);
        for (repeats, kernel, stride, expand, c_in, c_out) in STAGES {
            for i in 0..repeats {
                out.push(BlockSpec {
                    kernel,
                    stride: if i == 0 { stride } else { 1 },
                    expand,
                    c_in: if i == 0 { c_in } else { c_out },
                    c_out,
                });
            }
        }
        out.try_into().expect("16 blocks")
    })
}

/// What is known about a boundary before any weights are loaded.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BoundaryInfo {
    /// Boundary name.
    pub name: &'static str,
    /// Activation shape `[C, H, W]` for one image (pool and logits use `H = W = 1`).
    pub shape: [usize; 3],
    /// Multiply-accumulates of the stage that ends here.
    pub stage_macs: u64,
    /// Multiply-accumulates from the input up to here.
    pub cumulative_macs: u64,
    /// Bytes of f32 parameters of the stage that ends here (BN folded into the convs).
    pub stage_param_bytes: u64,
    /// Bytes of f32 parameters from the input up to here: what the edge must hold to run here.
    pub cumulative_param_bytes: u64,
}

impl BoundaryInfo {
    /// Values per image at this boundary.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

fn conv_cost(c_in: usize, c_out: usize, k: usize, groups: usize, out_hw: usize) -> (u64, u64) {
    let weights = c_out * (c_in / groups) * k * k;
    ((weights * out_hw * out_hw) as u64, ((weights + c_out) * 4) as u64)
}

/// Metadata of every boundary, in order.
pub fn boundary_table() -> &'static [BoundaryInfo; NUM_BOUNDARIES] {
    static TABLE: OnceLock<[BoundaryInfo; NUM_BOUNDARIES]> = OnceLock::new();
    TABLE.get_or_init(|| table_at(INPUT_SIZE))
}

/// Multiply-accumulates of the whole network on a `size` × `size` input (the reduced-input
/// light model's cost; [`INPUT_SIZE`] gives the logits' `cumulative_macs`).
pub fn macs_at(size: usize) -> u64 {
    table_at(size)[NUM_BOUNDARIES - 1].cumulative_macs
}

/// The boundary table of the network run on a `size` × `size` input.
fn table_at(size: usize) -> [BoundaryInfo; NUM_BOUNDARIES] {
    let mut rows = Vec::with_capacity(NUM_BOUNDARIES);
    let mut push = |shape: [usize; 3], macs: u64, bytes: u64| {
        let (cm, cb) = rows
            .last()
            .map_or((0, 0), |r: &BoundaryInfo| (r.cumulative_macs, r.cumulative_param_bytes));
        let name = Boundary::from_index(rows.len() as u8).expect("index in range").name();
        rows.push(BoundaryInfo {
            name,
            shape,
            stage_macs: macs,
            cumulative_macs: cm + macs,
            stage_param_bytes: bytes,
            cumulative_param_bytes: cb + bytes,
        });
    };
    push([3, size, size], 0, 0);
    let mut hw = size.div_ceil(2);
    let (m, b) = conv_cost(3, 32, 3, 1, hw);
    push([32, hw, hw], m, b);
    for spec in blocks() {
        let (mut macs, mut bytes) = (0, 0);
        if spec.expand != 1 {
            let (m, b) = conv_cost(spec.c_in, spec.hidden(), 1, 1, hw);
            macs += m;
            bytes += b;
        }
        hw = hw.div_ceil(spec.stride);
        let (m, b) = conv_cost(spec.hidden(), spec.hidden(), spec.kernel, spec.hidden(), hw);
        let (m2, b2) = conv_cost(spec.hidden(), spec.c_out, 1, 1, hw);
        push([spec.c_out, hw, hw], macs + m + m2, bytes + b + b2);
    }
    let (m, b) = conv_cost(320, HEAD_CHANNELS, 1, 1, hw);
    push([HEAD_CHANNELS, hw, hw], m, b);
    push([HEAD_CHANNELS, 1, 1], 0, 0);
    let fc_weights = HEAD_CHANNELS * NUM_CLASSES;
    push([NUM_CLASSES, 1, 1], fc_weights as u64, ((fc_weights + NUM_CLASSES) * 4) as u64);
    rows.try_into().expect("21 boundaries")
}

impl Boundary {
    /// Shape, cost and size of this boundary.
    pub fn info(self) -> &'static BoundaryInfo {
        &boundary_table()[self.index() as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures from the reference README's boundary table (MACs in millions, rounded).
    #[test]
    fn table_matches_reference_figures() {
        let t = boundary_table();
        let m = |b: &str| {
            t[b.parse::<Boundary>().unwrap().index() as usize].cumulative_macs as f64 / 1e6
        };
        for (name, millions) in [
            ("stem", 10.8),
            ("block0", 20.9),
            ("block2", 75.8),
            ("block4", 113.7),
            ("block15", 363.8),
            ("head", 383.9),
            ("logits", 385.2),
        ] {
            assert!((m(name) - millions).abs() < 0.06, "{name}: {} vs {millions}", m(name));
        }
        assert_eq!(Boundary::STEM.info().shape, [32, 112, 112]);
        assert_eq!(Boundary::block(10).unwrap().info().shape, [112, 14, 14]);
        assert_eq!(Boundary::block(15).unwrap().info().shape, [320, 7, 7]);
        assert_eq!(Boundary::POOL.info().numel(), 1280);
        // 4.65M parameters after folding BN (conv weights + per-channel biases + fc).
        let params = t[20].cumulative_param_bytes / 4;
        assert!((4_600_000..4_700_000).contains(&params), "{params}");
    }

    /// A smaller input costs less in proportion to its maps' area (the head's 1×1 map and the
    /// classifier do not shrink); the whole input costs what the table says.
    #[test]
    fn macs_follow_the_input_size() {
        assert_eq!(macs_at(INPUT_SIZE), Boundary::LOGITS.info().cumulative_macs);
        let (full, half) = (macs_at(224) as f64, macs_at(112) as f64);
        // Every map a quarter of the area (7×7 → 4×4 at the end, a third), the classifier's
        // 1.28M whole.
        assert!((0.25..0.30).contains(&(half / full)), "{}", half / full);
        assert!(macs_at(128) < macs_at(144) && macs_at(144) < macs_at(224));
    }
}
