//! EfficientNet-Lite0 as the runtime describes a model: what both halves (and the codec's
//! calibration, [`crate::codec::Calibration::check_spec`]) agree on, without the network.

use super::{MAX_BATCH, boundary_table};
use crate::protocol::MODEL_EFFICIENTNET_LITE0;
use crate::runtime::{BoundarySpec, ModelSpec};

/// The name clients ask for and `/api/info` lists.
pub const LITE0_NAME: &str = "efficientnet-lite0";

/// The network's description: id 1, the boundaries of [`boundary_table`], batches up to
/// [`MAX_BATCH`].
pub fn lite0_spec() -> ModelSpec {
    let boundaries = boundary_table()
        .iter()
        .map(|b| BoundarySpec::new(b.name, &b.shape).with_param_bytes(b.cumulative_param_bytes))
        .collect();
    ModelSpec::new(MODEL_EFFICIENTNET_LITE0, LITE0_NAME, boundaries, MAX_BATCH)
        .expect("the architecture table is a valid spec")
}
