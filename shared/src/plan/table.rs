//! The cost table: what the profiler measured, per boundary, as versioned JSON. The server
//! serves it (`/api/cost-table`); the page loads it, replaces the edge column with its own
//! warm-up measurements, and plans with it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::planner::{Candidate, Placement, depth_of};
use crate::codec::Setting;
use crate::model::{Boundary, boundary_table};

/// Format version of [`CostTable`]; readers refuse other versions.
pub const COST_TABLE_VERSION: u32 = 1;

/// Bytes and accuracy of one codec setting at one boundary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodecCost {
    /// The setting (JSON: its name, `f32`, `q4`, ...).
    pub codec: Setting,
    /// Mean frame bytes per image.
    pub bytes: f64,
    /// Top-1 agreement with the uncompressed model on the profiling images.
    pub agreement: f64,
}

/// Edge compute of one device class: cumulative ms from the input to each boundary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EdgeProfile {
    /// What ran it.
    pub device: String,
    /// Per boundary in forward order; `None` where not measured.
    pub ms: Vec<Option<f64>>,
}

/// The profile of one deployment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostTable {
    /// [`COST_TABLE_VERSION`].
    pub version: u32,
    /// Model name.
    pub model: String,
    /// The command that produced it.
    pub command: String,
    /// Where it was measured.
    pub machine: String,
    /// Boundary names in forward order (`input` .. `logits`).
    pub boundaries: Vec<String>,
    /// Edge profiles by name (`native-flex`, `browser-wasm-cpu`, `browser-webgpu`, ...).
    pub edge: BTreeMap<String, EdgeProfile>,
    /// Device of the cloud column.
    pub cloud_device: String,
    /// Cloud compute from each boundary to the logits, ms; `None` where not measured.
    pub cloud_ms: Vec<Option<f64>>,
    /// Cloud-only: decoding and running the uploaded image, ms.
    pub cloud_only_ms: f64,
    /// Cloud-only: bytes uploaded per image (a JPEG of the input).
    pub image_bytes: f64,
    /// Codec options per boundary (empty where none were measured).
    pub codecs: Vec<Vec<CodecCost>>,
}

impl CostTable {
    /// Parse and check the version and the column lengths.
    ///
    /// # Errors
    /// A message naming the problem.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let t: Self = serde_json::from_str(text).map_err(|e| format!("cost table: {e}"))?;
        if t.version != COST_TABLE_VERSION {
            return Err(format!(
                "cost table version {}, this build reads {COST_TABLE_VERSION}",
                t.version
            ));
        }
        let n = t.boundaries.len();
        if t.cloud_ms.len() != n || t.codecs.len() != n || t.edge.values().any(|e| e.ms.len() != n)
        {
            return Err(format!("cost table columns do not all have {n} rows"));
        }
        if t.boundaries.iter().zip(boundary_table()).any(|(a, b)| a != b.name) {
            return Err("cost table boundaries are not this model's".into());
        }
        Ok(t)
    }

    /// Every placement it can price for `edge_profile`: edge-only, cloud-only, and each
    /// measured (boundary, codec) pair between `stem` and `pool`. `None` for an unknown profile.
    pub fn candidates(&self, edge_profile: &str) -> Option<Vec<Candidate>> {
        let edge = self.edge.get(edge_profile)?;
        let mut out = Vec::new();
        for b in Boundary::all() {
            let i = usize::from(b.index());
            let info = b.info();
            let Some(edge_ms) = edge.ms.get(i).copied().flatten() else { continue };
            if b == Boundary::LOGITS {
                out.push(Candidate {
                    placement: Placement::EdgeOnly,
                    depth: depth_of(b),
                    edge_ms,
                    bytes: 0.0,
                    cloud_ms: 0.0,
                    agreement: 1.0,
                    edge_param_bytes: info.cumulative_param_bytes,
                });
                continue;
            }
            if b == Boundary::INPUT {
                continue;
            }
            let Some(cloud_ms) = self.cloud_ms.get(i).copied().flatten() else { continue };
            for c in &self.codecs[i] {
                out.push(Candidate {
                    placement: Placement::Split { boundary: b, codec: c.codec },
                    depth: depth_of(b),
                    edge_ms,
                    bytes: c.bytes,
                    cloud_ms,
                    agreement: c.agreement,
                    edge_param_bytes: info.cumulative_param_bytes,
                });
            }
        }
        out.push(Candidate {
            placement: Placement::CloudOnly,
            depth: 0,
            edge_ms: 0.0,
            bytes: self.image_bytes,
            cloud_ms: self.cloud_only_ms,
            agreement: 1.0,
            edge_param_bytes: 0,
        });
        Some(out)
    }

    /// A copy with the edge profile `name` replaced by `ms` (the page's own measurements).
    pub fn with_edge(&self, name: &str, device: &str, ms: Vec<Option<f64>>) -> Self {
        let mut t = self.clone();
        t.edge.insert(name.into(), EdgeProfile { device: device.into(), ms });
        t
    }
}
