//! `GET /api/info`: what a client needs to know before its first frame. The struct is the
//! contract with `web/split-client.js` (which reads these field names), so it is typed here
//! rather than assembled as loose JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use split_shared::codec::{Calibration, DEFAULT_SETTING, SUPPORTED_BITS, Setting};
use split_shared::model::{BoundaryInfo, NUM_BOUNDARIES, boundary_table};
use split_shared::protocol::{MAX_FRAME_BYTES, PROTOCOL_VERSION};

use crate::state::AppState;

/// Where browsers fetch the calibration.
pub const CALIBRATION_URL: &str = "/calibration/efficientnet-lite0.splc";
/// Where browsers fetch the weights.
pub const WEIGHTS_URL: &str = "/weights/efficientnet-lite0.splw";
/// Where clients fetch the planner's cost table.
pub const COST_TABLE_URL: &str = "/api/cost-table";

/// The server's answer to `GET /api/info`.
#[derive(Debug, Serialize)]
pub struct ServerInfo {
    /// The codec calibration, when the server has one (else only f32 features are accepted).
    pub calibration: Option<CalibrationInfo>,
    /// The codec setting clients should use unless told otherwise.
    pub default_codec: Setting,
    /// Where the cost table is, when the server has one.
    pub cost_table_url: Option<&'static str>,
    /// The wire protocol version this server speaks.
    pub protocol_version: u16,
    /// Largest WebSocket message accepted.
    pub max_frame_bytes: usize,
    /// The model served.
    pub model: &'static str,
    /// The device the cloud half runs on.
    pub device: &'static str,
    /// Where the weights are.
    pub weights_url: &'static str,
    /// Every boundary with its shape, MACs and parameter bytes.
    pub boundaries: &'static [BoundaryInfo; NUM_BOUNDARIES],
}

/// The calibration a client must load to send coded features.
#[derive(Debug, Serialize)]
pub struct CalibrationInfo {
    /// Where to fetch it.
    pub url: &'static str,
    /// Its id (hex), which every coded frame carries.
    pub id: String,
    /// Images it was fitted on.
    pub images: u32,
    /// Boundaries it has tables for.
    pub boundaries: Vec<&'static str>,
    /// Bit depths supported.
    pub bits: [u8; SUPPORTED_BITS.len()],
    /// Per boundary, the largest projection rank calibrated (0: none).
    pub max_rank: BTreeMap<&'static str, usize>,
}

impl CalibrationInfo {
    fn of(c: &Calibration) -> Self {
        let rank = |b| c.at(b).and_then(|t| t.pca.as_ref()).map_or(0, |p| p.projection.max_rank);
        Self {
            url: CALIBRATION_URL,
            id: format!("{:016x}", c.id()),
            images: c.images(),
            boundaries: c.boundaries().map(|b| b.name()).collect(),
            bits: SUPPORTED_BITS,
            max_rank: c.boundaries().map(|b| (b.name(), rank(b))).collect(),
        }
    }
}

impl ServerInfo {
    /// What this server tells clients.
    pub fn of(state: &AppState) -> Self {
        let calibration = state.calibration.as_ref().map(|(c, _)| CalibrationInfo::of(c));
        let default_codec = if calibration.is_some() { DEFAULT_SETTING } else { Setting::F32 };
        Self {
            calibration,
            default_codec,
            cost_table_url: state.cost_table.as_ref().map(|_| COST_TABLE_URL),
            protocol_version: PROTOCOL_VERSION,
            max_frame_bytes: MAX_FRAME_BYTES,
            model: "efficientnet-lite0",
            device: state.device_name,
            weights_url: WEIGHTS_URL,
            boundaries: boundary_table(),
        }
    }
}
