//! The cost table: what the profiler measured, per boundary of one model, as versioned JSON.
//! The server serves it (`/api/cost-table` for EfficientNet-Lite0, `cost_table_url` of each
//! model in `/api/info`); the page loads it, replaces the edge column with its own warm-up
//! measurements, and plans with it. Nothing here knows a model: the boundaries are the names of
//! its [`ModelSpec`], checked with [`CostTable::check_spec`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::planner::{Candidate, Placement};
use crate::codec::Setting;
use crate::runtime::ModelSpec;

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
    /// How many images `agreement` was measured on (0 in tables from before it was recorded).
    #[serde(default)]
    pub images: u32,
    /// The lower end of the 95% Wilson interval of `agreement` over `images`: what the planner
    /// holds against `min_agreement`, so a setting measured on few photos is not trusted
    /// beyond what they show (150 photos all agreeing still only bound it at 97.5%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement_low: Option<f64>,
}

impl CodecCost {
    /// A measurement: `agree` of `images` photos gave the uncompressed model's top-1.
    pub fn measured(codec: Setting, bytes: f64, agree: u32, images: u32) -> Self {
        let agreement = f64::from(agree) / f64::from(images.max(1));
        let agreement_low = Some(wilson_lower(agree, images));
        Self { codec, bytes, agreement, images, agreement_low }
    }

    /// The agreement the planner may rely on: the interval's lower end when known.
    pub fn reliable_agreement(&self) -> f64 {
        self.agreement_low.unwrap_or(self.agreement)
    }
}

/// The lower end of the 95% Wilson score interval for `ok` successes in `n` trials (0 when
/// `n` is 0). Unlike the normal approximation it stays inside [0, 1] and is not 1 at `ok = n`.
pub fn wilson_lower(ok: u32, n: u32) -> f64 {
    if n == 0 {
        return 0.0;
    }
    const Z: f64 = 1.959_963_984_540_054; // the 97.5th percentile of the standard normal
    let (n, p) = (f64::from(n), f64::from(ok) / f64::from(n));
    let z2 = Z * Z;
    let centre = p + z2 / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - spread) / (1.0 + z2 / n)).max(0.0)
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
    /// Boundary names in forward order, as the model's spec has them (`input` .. `logits`).
    pub boundaries: Vec<String>,
    /// Parameter bytes the edge holds to run from the input to each boundary (what a memory
    /// budget is held against). Tables from before it was recorded lack it and are refused.
    #[serde(default)]
    pub param_bytes: Vec<u64>,
    /// Edge profiles by name (`native-flex`, `browser-wasm-cpu`, `browser-webgpu`, ...).
    pub edge: BTreeMap<String, EdgeProfile>,
    /// Device of the cloud column.
    pub cloud_device: String,
    /// Cloud compute from each boundary to the logits, ms; `None` where not measured.
    pub cloud_ms: Vec<Option<f64>>,
    /// Cloud-only: decoding and running the uploaded input, ms.
    pub cloud_only_ms: f64,
    /// Cloud-only: bytes uploaded per input (for a picture, a JPEG of it; for another model,
    /// its input frame at boundary 0).
    pub image_bytes: f64,
    /// Codec options per boundary (empty where none were measured).
    pub codecs: Vec<Vec<CodecCost>>,
    /// The encrypted placement's costs, where the model has one and it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<EncryptedCost>,
}

/// What the encrypted placement ([`Placement::Encrypted`]) costs: measured by the command it
/// names (EfficientNet-Lite0: `./run.sh encrypted --cost-table …`), which writes this part of
/// the table alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EncryptedCost {
    /// The command that measured it.
    pub command: String,
    /// Where the edge stops and encrypts (`pool`).
    pub boundary: String,
    /// The device's own cryptography per request (encrypting the upload and decrypting the
    /// answer), ms, by edge profile; a profile not measured is priced by `native-flex`'s figure
    /// scaled as its edge column is to `native-flex`'s at `boundary`.
    pub device_ms: BTreeMap<String, f64>,
    /// Bytes uploaded per request (the ciphertexts and the frame around them).
    pub upload_bytes: f64,
    /// Bytes of the encrypted answer.
    pub answer_bytes: f64,
    /// Bytes of the evaluation key, sent once a session (not priced per request).
    pub key_bytes: f64,
    /// The server's time per request, ms: reading the session's key and evaluating.
    pub cloud_ms: f64,
    /// Top-1 agreement with the float network (integer rounding is its only loss).
    pub agreement: f64,
    /// How many photos `agreement` was measured on.
    pub images: u32,
    /// The lower end of its 95% Wilson interval: what the planner holds against the floor.
    pub agreement_low: f64,
}

impl EncryptedCost {
    /// The device's cryptography on `profile`, ms (see [`Self::device_ms`]); `None` where
    /// neither it nor the scaling is known.
    fn device_ms_on(&self, table: &CostTable, profile: &str, at: usize) -> Option<f64> {
        if let Some(ms) = self.device_ms.get(profile) {
            return Some(*ms);
        }
        let native = *self.device_ms.get(NATIVE_PROFILE)?;
        let edge = |p: &str| table.edge.get(p)?.ms.get(at).copied().flatten();
        let (here, there) = (edge(profile)?, edge(NATIVE_PROFILE)?);
        (there > 0.0).then(|| native * here / there)
    }
}

/// The edge profile measured natively by the profiler (the fallback of the others).
pub const NATIVE_PROFILE: &str = "native-flex";

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
        if n < 2 {
            return Err(format!("cost table has {n} boundaries; a model has at least 2"));
        }
        if t.param_bytes.is_empty() {
            return Err("cost table has no param_bytes column (made before it was recorded: \
                        run the profiler again)"
                .into());
        }
        if t.cloud_ms.len() != n
            || t.codecs.len() != n
            || t.param_bytes.len() != n
            || t.edge.values().any(|e| e.ms.len() != n)
        {
            return Err(format!("cost table columns do not all have {n} rows"));
        }
        if let Some(e) = &t.encrypted
            && !t.boundaries.contains(&e.boundary)
        {
            return Err(format!("cost table: encrypted at {:?}, not a boundary", e.boundary));
        }
        Ok(t)
    }

    /// Scale the cloud column and cloud-only's time by `factor` (a server timing itself
    /// against the table's figures, which another machine may have measured), saying so in
    /// `cloud_device`. A factor that is not finite and positive changes nothing.
    pub fn scale_cloud(&mut self, factor: f64, why: &str) {
        if !(factor.is_finite() && factor > 0.0) {
            return;
        }
        for ms in self.cloud_ms.iter_mut().flatten() {
            *ms *= factor;
        }
        self.cloud_only_ms *= factor;
        self.cloud_device = format!("{} × {factor:.2} ({why})", self.cloud_device);
    }

    /// Keep only the codec rows `codes(boundary, setting)` accepts (a server offering what its
    /// calibration can decode); returns how many were dropped.
    pub fn retain_codecs(&mut self, codes: impl Fn(&str, Setting) -> bool) -> usize {
        let mut dropped = 0;
        for (name, rows) in self.boundaries.iter().zip(&mut self.codecs) {
            let before = rows.len();
            rows.retain(|c| codes(name, c.codec));
            dropped += before - rows.len();
        }
        dropped
    }

    /// Whether the table describes the model `spec` describes: its name and its boundaries'
    /// names, in order.
    ///
    /// # Errors
    /// A message naming what differs.
    pub fn check_spec(&self, spec: &ModelSpec) -> Result<(), String> {
        if self.model != spec.name {
            return Err(format!("cost table is of {:?}, not {:?}", self.model, spec.name));
        }
        if !self.boundaries.iter().map(String::as_str).eq(spec.boundaries.iter().map(|b| &*b.name))
        {
            return Err(format!("cost table boundaries are not {}'s", spec.name));
        }
        Ok(())
    }

    /// Every placement it can price for `edge_profile`: edge-only (the last boundary), cloud-only,
    /// and each measured (boundary, codec) pair between the first and the last boundary. `None`
    /// for an unknown profile.
    pub fn candidates(&self, edge_profile: &str) -> Option<Vec<Candidate>> {
        let edge = self.edge.get(edge_profile)?;
        let last = self.boundaries.len() - 1;
        let mut out = Vec::new();
        for (i, name) in self.boundaries.iter().enumerate().skip(1) {
            let Some(edge_ms) = edge.ms.get(i).copied().flatten() else { continue };
            let edge_param_bytes = self.param_bytes[i];
            if i == last {
                out.push(Candidate {
                    placement: Placement::EdgeOnly,
                    depth: i,
                    edge_ms,
                    edge_fixed_ms: 0.0,
                    bytes: 0.0,
                    cloud_ms: 0.0,
                    agreement: 1.0,
                    edge_param_bytes,
                });
                continue;
            }
            let Some(cloud_ms) = self.cloud_ms.get(i).copied().flatten() else { continue };
            for c in &self.codecs[i] {
                out.push(Candidate {
                    placement: Placement::Split { boundary: name.clone(), codec: c.codec },
                    depth: i,
                    edge_ms,
                    edge_fixed_ms: 0.0,
                    bytes: c.bytes,
                    cloud_ms,
                    agreement: c.reliable_agreement(),
                    edge_param_bytes,
                });
            }
        }
        out.push(Candidate {
            placement: Placement::CloudOnly,
            depth: 0,
            edge_ms: 0.0,
            edge_fixed_ms: 0.0,
            bytes: self.image_bytes,
            cloud_ms: self.cloud_only_ms,
            agreement: 1.0,
            edge_param_bytes: 0,
        });
        if let Some(c) = self.encrypted_candidate(edge_profile) {
            out.push(c);
        }
        Some(out)
    }

    /// The encrypted placement as a candidate for `edge_profile`: the edge's compute to its
    /// boundary plus the cryptography; `None` where the table has none or cannot price it.
    fn encrypted_candidate(&self, edge_profile: &str) -> Option<Candidate> {
        let e = self.encrypted.as_ref()?;
        let at = self.boundaries.iter().position(|b| *b == e.boundary)?;
        let edge_ms = self.edge.get(edge_profile)?.ms.get(at).copied().flatten()?;
        Some(Candidate {
            placement: Placement::Encrypted { boundary: e.boundary.clone() },
            depth: at,
            edge_ms: edge_ms + e.device_ms_on(self, edge_profile, at)?,
            edge_fixed_ms: 0.0,
            bytes: e.upload_bytes,
            cloud_ms: e.cloud_ms,
            agreement: e.agreement_low,
            edge_param_bytes: self.param_bytes[at],
        })
    }

    /// A copy with the edge profile `name` replaced by `ms` (the page's own measurements).
    pub fn with_edge(&self, name: &str, device: &str, ms: Vec<Option<f64>>) -> Self {
        let mut t = self.clone();
        t.edge.insert(name.into(), EdgeProfile { device: device.into(), ms });
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wilson_bound_is_below_the_rate_and_tightens_with_more_photos() {
        // Reference values of the 95% Wilson lower bound.
        assert!((wilson_lower(150, 150) - 0.9750).abs() < 1e-4);
        assert!((wilson_lower(499, 500) - 0.9888).abs() < 1e-4);
        assert!((wilson_lower(45, 50) - 0.7864).abs() < 1e-4);
        assert_eq!(wilson_lower(0, 0), 0.0);
        assert_eq!(wilson_lower(0, 10), 0.0);
        assert!(wilson_lower(990, 1000) > wilson_lower(99, 100));
    }

    /// The shipped table's learned bottleneck at block5 is a candidate like the others: under
    /// the default floor its bound (134 held-back photos) keeps it out; with a floor it meets,
    /// on a slow uplink with the edge held to block5's weights, it sends the fewest bytes.
    #[test]
    fn the_learned_codec_is_planned_when_the_floor_allows_it() {
        use crate::plan::{Conditions, Constraints, plan};
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/cost-table.json"
        ))
        .unwrap();
        let t = CostTable::from_json(&text).unwrap();
        let k = t.boundaries.iter().position(|b| b == "block5").unwrap();
        let slow = Conditions { rtt_ms: 50.0, uplink_bytes_per_ms: 1.0, ..Conditions::default() };
        let budget =
            Constraints { max_edge_param_bytes: Some(t.param_bytes[k]), ..Constraints::default() };
        let chosen =
            |k: &Constraints| plan(&t, "native-flex", &slow, k).unwrap()[0].placement.clone();
        let Placement::Split { boundary, codec } = chosen(&budget) else { panic!("a split") };
        assert_eq!(boundary, "block5");
        assert!(!matches!(codec, Setting::Learned(_)), "{codec} under the default floor");
        let loose = Constraints { min_agreement: 0.92, ..budget };
        assert_eq!(
            chosen(&loose),
            Placement::Split { boundary: "block5".into(), codec: Setting::Learned(3) }
        );
    }

    /// The planner holds a setting's lower bound against the accuracy floor: 150 of 150 agreeing
    /// does not pass a 99% floor, 500 of 500 does; a table without the bound keeps its rate.
    #[test]
    fn candidates_price_agreement_by_its_lower_bound() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/cost-table.json"
        ))
        .unwrap();
        let mut t = CostTable::from_json(&text).unwrap();
        t.check_spec(&crate::model::lite0_spec()).unwrap();
        let k = t.boundaries.iter().position(|b| b == "block5").unwrap();
        let q6: Setting = "q6".parse().unwrap();
        let agreement = |t: &CostTable| {
            let c = t.candidates("native-flex").unwrap();
            c.iter()
                .find(|c| c.placement == Placement::Split { boundary: "block5".into(), codec: q6 })
                .map(|c| c.agreement)
                .unwrap()
        };
        t.codecs[k] = vec![CodecCost::measured(q6, 1e4, 150, 150)];
        assert!(agreement(&t) < 0.99);
        t.codecs[k] = vec![CodecCost::measured(q6, 1e4, 500, 500)];
        assert!(agreement(&t) > 0.99);
        let old = r#"{"codec":"q6","bytes":10000.0,"agreement":0.995}"#;
        let old: CodecCost = serde_json::from_str(old).unwrap();
        assert_eq!((old.images, old.agreement_low), (0, None));
        t.codecs[k] = vec![old];
        assert_eq!(agreement(&t), 0.995);
    }

    /// A table is held to a model by its name and boundaries; one without the parameter
    /// column (made before it was recorded) or with a short column is refused.
    #[test]
    fn a_table_names_its_model_and_has_every_column() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/cost-table.json"
        ))
        .unwrap();
        let t = CostTable::from_json(&text).unwrap();
        let lite0 = crate::model::lite0_spec();
        t.check_spec(&lite0).unwrap();
        let mut renamed = lite0.clone();
        renamed.name = "another".into();
        assert!(t.check_spec(&renamed).unwrap_err().contains("not \"another\""));
        let mut moved = lite0;
        moved.boundaries.swap(3, 4);
        assert!(t.check_spec(&moved).unwrap_err().contains("boundaries"));
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json.as_object_mut().unwrap().remove("param_bytes");
        let err = CostTable::from_json(&json.to_string()).unwrap_err();
        assert!(err.contains("no param_bytes column"), "{err}");
        json["param_bytes"] = serde_json::json!([0, 1]);
        let err = CostTable::from_json(&json.to_string()).unwrap_err();
        assert!(err.contains("do not all have 21 rows"), "{err}");
    }

    /// The shipped table prices the encrypted placement: at `pool`, on every edge profile (a
    /// profile whose own cryptography was not measured scaled from the native one), as the
    /// study measured it; a table naming a boundary it lacks is refused.
    #[test]
    fn the_encrypted_placement_is_priced_on_every_profile() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/cost-table.json"
        ))
        .unwrap();
        let t = CostTable::from_json(&text).unwrap();
        let e = t.encrypted.as_ref().expect("profiles/cost-table.json has an encrypted part");
        assert_eq!(e.boundary, "pool");
        let pool = t.boundaries.iter().position(|b| b == "pool").unwrap();
        let crypto = e.device_ms[NATIVE_PROFILE];
        for (name, profile) in &t.edge {
            let c = t.candidates(name).unwrap();
            let enc = c
                .iter()
                .find(|c| matches!(c.placement, Placement::Encrypted { .. }))
                .unwrap_or_else(|| panic!("{name}: no encrypted candidate"));
            let edge = profile.ms[pool].unwrap();
            let native = t.edge[NATIVE_PROFILE].ms[pool].unwrap();
            let want = edge + e.device_ms.get(name).copied().unwrap_or(crypto * edge / native);
            assert!((enc.edge_ms - want).abs() < 1e-9, "{name}: {} vs {want}", enc.edge_ms);
            assert_eq!((enc.bytes, enc.cloud_ms, enc.depth), (e.upload_bytes, e.cloud_ms, pool));
            assert_eq!(enc.agreement, e.agreement_low);
        }
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json["encrypted"]["boundary"] = "nowhere".into();
        let err = CostTable::from_json(&json.to_string()).unwrap_err();
        assert!(err.contains("\"nowhere\", not a boundary"), "{err}");
    }
}
