//! The adaptive policy for JavaScript: [`AdaptivePolicy`] from `split_shared::plan` (the
//! controller, the network monitor, probing and deadlines) over the server's cost table, with
//! time passed in (`performance.now()`) and plain objects out. The page only carries bytes and
//! reports what it saw; every rule lives in Rust, where the trace simulator runs it too.

use split_shared::plan::{
    AdaptivePolicy, Constraints, ControllerConfig, CostTable, PingObservation, Placement,
    RequestObservation,
};
use wasm_bindgen::prelude::*;

use crate::js::{from_object, to_object};

/// Chooses where to split, live. See `web/split-client.js` (`split: "auto"`) for how the client
/// feeds it.
#[wasm_bindgen]
pub struct AdaptivePlanner {
    table: CostTable,
    profile: String,
    policy: AdaptivePolicy,
}

#[wasm_bindgen]
impl AdaptivePlanner {
    /// From the server's cost table (`/api/cost-table`, JSON text) and the edge profile to start
    /// from (`"browser-wasm-cpu"`, `"browser-webgpu"`; falls back to `"native-flex"`).
    #[wasm_bindgen(constructor)]
    pub fn new(cost_table: &str, edge_profile: &str) -> Result<AdaptivePlanner, JsValue> {
        let table = lite0_table(cost_table)?;
        let profile =
            if table.edge.contains_key(edge_profile) { edge_profile } else { "native-flex" };
        let candidates = table.candidates(profile).ok_or_else(|| {
            crate::js::error("bad_cost_table", format!("no edge profile {profile:?}"))
        })?;
        let mut policy = AdaptivePolicy::new(candidates);
        // Every page needs its own coin: clients of one busy server must not switch in step.
        policy.set_seed((js_sys::Math::random() * 9_007_199_254_740_992.0) as u64);
        Ok(Self { table, profile: profile.into(), policy })
    }

    /// The edge profile in use.
    #[wasm_bindgen(getter)]
    pub fn profile(&self) -> String {
        self.profile.clone()
    }

    /// How often a timer should ask [`Self::probe_due`], ms.
    #[wasm_bindgen(getter, js_name = probePeriodMs)]
    pub fn probe_period_ms(&self) -> f64 {
        self.policy.probe_config().period_ms
    }

    /// This device's measured edge times (cumulative ms from the input, per boundary name):
    /// the edge column is scaled by their median ratio to the profile's; returns the ratio.
    #[wasm_bindgen(js_name = setEdgeTimes)]
    pub fn set_edge_times(&mut self, names: Vec<String>, ms: Vec<f64>) -> f64 {
        let column = &self.table.edge[&self.profile].ms;
        let mut ratios: Vec<f64> = names
            .iter()
            .zip(&ms)
            .filter_map(|(n, m)| {
                let i = self.table.boundaries.iter().position(|b| b == n)?;
                let p = column[i]?;
                (p > 0.5 && *m > 0.0).then(|| m / p)
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let factor = ratios.get(ratios.len() / 2).copied().unwrap_or(1.0);
        self.policy.set_edge_factor(factor);
        factor
    }

    /// At `now`, a request's edge part ran here to `boundary` (`"logits"`: the whole network) in `ms`,
    /// everything on the device included, `stagesMs` of it in the network's stages (the
    /// `stagesMs` of `EdgeSession.run`; omitted: not timed apart). The edge factor follows
    /// the stages' time, and the rest is the run's fixed cost at that boundary (decoding the
    /// photo, coding the features), priced apart. Only the full model's runs count (not the
    /// light model's, not a cache hit).
    #[wasm_bindgen(js_name = observeEdge)]
    pub fn observe_edge(&mut self, now: f64, boundary: &str, ms: f64, stages_ms: Option<f64>) {
        if let Some(depth) = self.table.boundaries.iter().position(|b| b == boundary) {
            self.policy.observe_edge(now, depth, ms, stages_ms);
        }
    }

    /// The size of the image a cloud-only request would upload now (the table assumes a typical
    /// JPEG; a PNG or a large photo costs more).
    #[wasm_bindgen(js_name = setImageBytes)]
    pub fn set_image_bytes(&mut self, bytes: f64) {
        for c in self.policy.candidates_mut() {
            if c.placement == Placement::CloudOnly {
                c.bytes = bytes;
            }
        }
    }

    /// Constraints: `{ privacyFloor: 7, minAgreement: 0.98, maxEdgeParamBytes: null, mode:
    /// "battery", radio: "lte", realtime: { class: "soft", deadlineMs: 200 }, encrypted: false }`
    /// (the goal's fields are optional). `encrypted: true` asks for placements the server reads
    /// nothing of, and is refused (`bad_option`) by a table that prices no encrypted placement.
    #[wasm_bindgen(js_name = setConstraints)]
    pub fn set_constraints(&mut self, constraints: JsValue) -> Result<(), JsValue> {
        let k: Constraints = from_object(&constraints, "bad_option")?;
        k.check().map_err(|why| crate::js::error("bad_option", why))?;
        if k.encrypted && self.encrypted_candidate().is_none() {
            return Err(crate::js::error(
                "bad_option",
                "encrypted: the server's cost table prices no encrypted placement",
            ));
        }
        self.policy.set_constraints(k);
        Ok(())
    }

    /// The device's cryptography for one encrypted request as measured here (encrypting and
    /// decrypting, ms): it replaces the table's estimate in the encrypted placement's edge time.
    #[wasm_bindgen(js_name = observeEncryptedMs)]
    pub fn observe_encrypted_ms(&mut self, ms: f64) {
        let Some(e) = &self.table.encrypted else { return };
        let at = self.table.boundaries.iter().position(|b| *b == e.boundary);
        let edge = at.and_then(|i| self.table.edge[&self.profile].ms[i]);
        let (Some(edge), true) = (edge, ms.is_finite() && ms >= 0.0) else { return };
        // Candidates are in the profile's time; the policy scales them by the edge factor.
        let factor = self.policy.forecast().now.edge_factor;
        if let Some(c) = self.encrypted_candidate() {
            c.edge_ms = edge + ms / factor;
        }
    }

    fn encrypted_candidate(&mut self) -> Option<&mut split_shared::plan::Candidate> {
        self.policy
            .candidates_mut()
            .iter_mut()
            .find(|c| matches!(c.placement, Placement::Encrypted { .. }))
    }

    /// What making a cloud-only upload took on this device (decoding, cropping and encoding
    /// the photo as JPEG), ms: cloud-only's edge time from now on.
    #[wasm_bindgen(js_name = observeUploadPrep)]
    pub fn observe_upload_prep(&mut self, ms: f64) {
        self.policy.observe_upload_prep(ms);
    }

    /// The server's congestion price, from a reply or a pong (`load.price`): what a
    /// millisecond of its compute costs now; goals that weigh the server's cost use it.
    #[wasm_bindgen(js_name = observePrice)]
    pub fn observe_price(&mut self, price: f64) {
        self.policy.observe_price(price);
    }

    /// Controller tuning (see `ControllerConfig`: `period_ms`, `min_gain`, `min_dwell_ms`,
    /// `jump_factor`, `horizon_ms`).
    #[wasm_bindgen(js_name = setConfig)]
    pub fn set_config(&mut self, config: JsValue) -> Result<(), JsValue> {
        let c: ControllerConfig = from_object(&config, "bad_option")?;
        self.policy.set_config(c);
        Ok(())
    }

    /// Re-plan if due: `{ decision: "keep" }` or `{ decision: "switch", at_ms, from, to, reason }`.
    pub fn tick(&mut self, now: f64) -> JsValue {
        to_object(&self.policy.tick(now))
    }

    /// The placement in force: `{ mode: "split", boundary: "block5", codec: "q4" }`,
    /// `{ mode: "edge_only" }`, `{ mode: "cloud_only" }` or `{ mode: "encrypted", boundary:
    /// "pool" }`.
    pub fn current(&self) -> JsValue {
        to_object(&self.policy.current())
    }

    /// Pin a placement (manual override, an object as [`Self::current`] returns).
    #[wasm_bindgen(js_name = setPlacement)]
    pub fn set_placement(&mut self, now: f64, placement: JsValue) -> Result<(), JsValue> {
        let p: Placement = from_object(&placement, "bad_option")?;
        self.policy.set_placement(now, p);
        Ok(())
    }

    /// How long a request placed now may wait for the server before running locally, ms.
    #[wasm_bindgen(js_name = deadlineMs)]
    pub fn deadline_ms(&self, timeout_ms: f64) -> f64 {
        self.policy.deadline_ms(timeout_ms)
    }

    /// A request came back: bytes it sent, its round trip, the server's time, the queue wait
    /// from the reply's load and the time the request itself waited in the queue (both `NaN`
    /// when there was no reply).
    #[wasm_bindgen(js_name = observeRequest)]
    pub fn observe_request(
        &mut self,
        now: f64,
        bytes_sent: f64,
        round_trip_ms: f64,
        server_ms: f64,
        queue_wait_ms: f64,
        waited_ms: f64,
    ) {
        let queue_wait_ms = queue_wait_ms.is_finite().then_some(queue_wait_ms);
        let waited_ms = waited_ms.is_finite().then_some(waited_ms);
        let r =
            RequestObservation { bytes_sent, round_trip_ms, server_ms, queue_wait_ms, waited_ms };
        self.policy.observe_request(now, r);
    }

    /// A request or a ping failed (closed, unreachable, past its deadline) at `now`; `sent`:
    /// when it was sent (`now` when not given). One sent before something that was answered
    /// does not mark the link down.
    #[wasm_bindgen(js_name = observeFailure)]
    pub fn observe_failure(&mut self, now: f64, sent: Option<f64>) {
        self.policy.observe_failure_of(now, sent.unwrap_or(now));
    }

    /// Whether the server is believed reachable: no failure since the last answer or pong.
    #[wasm_bindgen(getter, js_name = linkUp)]
    pub fn link_up(&self) -> bool {
        self.policy.forecast().link_up
    }

    /// Whether a probe is due.
    #[wasm_bindgen(js_name = probeDue)]
    pub fn probe_due(&self, now: f64) -> bool {
        self.policy.probe_due(now)
    }

    /// Start a probe: send a bare ping, then, when this returns more than 0, a ping with this
    /// many bytes of padding (the uplink probe).
    #[wasm_bindgen(js_name = startProbe)]
    pub fn start_probe(&mut self, now: f64) -> u32 {
        self.policy.start_probe(now)
    }

    /// How long to wait for the pong of a ping with `probe_bytes` of padding, ms.
    #[wasm_bindgen(js_name = pingTimeoutMs)]
    pub fn ping_timeout_ms(&self, probe_bytes: u32, timeout_ms: f64) -> f64 {
        self.policy.ping_timeout_ms(probe_bytes, timeout_ms)
    }

    /// A pong came back after `ms`; `skewed` when an edge run overlapped the ping; `gap_ms`,
    /// the pong's `gapMs` (the server's time since the frame before the ping).
    #[wasm_bindgen(js_name = observePing)]
    pub fn observe_ping(
        &mut self,
        now: f64,
        probe_bytes: u32,
        ms: f64,
        queue_wait_ms: f64,
        skewed: bool,
        gap_ms: Option<f64>,
    ) {
        let p = PingObservation { probe_bytes, ms, queue_wait_ms, skewed, server_gap_ms: gap_ms };
        self.policy.observe_ping(now, p);
    }

    /// Conditions now and forecast, the current choice and its predicted breakdown, the best
    /// candidates, the deadline and every switch: what the page shows to explain the choice.
    pub fn explain(&self, timeout_ms: f64) -> JsValue {
        to_object(&self.policy.explain(timeout_ms))
    }
}

/// One device as the page describes it to [`plan_chain`].
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChainDevice {
    peer: u32,
    ms_per_image: f64,
    #[serde(default)]
    memory_bytes: Option<f64>,
    #[serde(default)]
    low_power: bool,
    mbps: f64,
    latency_ms: f64,
}

impl From<ChainDevice> for split_shared::group::chain::Node {
    fn from(d: ChainDevice) -> Self {
        Self {
            peer: d.peer,
            ms_per_image: d.ms_per_image,
            memory_bytes: d.memory_bytes,
            low_power: d.low_power,
            link: split_shared::group::chain::Link { mbps: d.mbps, ms: d.latency_ms },
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChainRequest {
    asker: ChainDevice,
    others: Vec<ChainDevice>,
    #[serde(default)]
    privacy_floor: String,
    goal: String,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ChainStage {
    peer: u32,
    from: &'static str,
    to: &'static str,
    compute_ms: f64,
    send_bytes: f64,
    send_ms: f64,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ChainPlan {
    stages: Vec<ChainStage>,
    latency_ms: f64,
    period_ms: f64,
}

/// See `planChain` in `lib.rs`.
pub fn plan_chain(
    cost_table: &str,
    profile: &str,
    codec: &str,
    request: JsValue,
) -> Result<JsValue, JsValue> {
    use split_shared::group::chain::{Goal, Network};
    use split_shared::model::Boundary;
    let table = lite0_table(cost_table)?;
    let codec = codec.parse().map_err(|e| crate::js::error("bad_option", e))?;
    let net = Network::from_cost_table(&table, profile, codec)
        .map_err(|e| crate::js::error("bad_cost_table", e))?;
    let request: ChainRequest = from_object(&request, "bad_option")?;
    let goal = match request.goal.as_str() {
        "latency" => Goal::Latency,
        "throughput" => Goal::Throughput,
        other => {
            return Err(crate::js::error(
                "bad_option",
                format!("unknown goal {other:?}; use \"latency\" or \"throughput\""),
            ));
        }
    };
    let floor = if request.privacy_floor.is_empty() {
        0
    } else {
        let b: Boundary =
            request.privacy_floor.parse().map_err(|e| crate::js::error("bad_option", e))?;
        usize::from(b.index())
    };
    let others: Vec<_> = request.others.into_iter().map(Into::into).collect();
    let chain =
        split_shared::group::chain::plan_chain(&net, &request.asker.into(), &others, floor, goal)
            .map_err(|e| crate::js::error("no_plan", e))?;
    let name = |i: usize| Boundary::all().nth(i).map_or("logits", |b| b.name());
    let plan = ChainPlan {
        stages: chain
            .stages
            .iter()
            .map(|s| ChainStage {
                peer: s.peer,
                from: name(s.from),
                to: name(s.to),
                compute_ms: s.compute_ms,
                send_bytes: s.send_bytes,
                send_ms: s.send_ms,
            })
            .collect(),
        latency_ms: chain.latency_ms,
        period_ms: chain.period_ms,
    };
    Ok(to_object(&plan))
}

/// The server's cost table (JSON text), checked to be EfficientNet-Lite0's: the model this
/// module runs.
fn lite0_table(text: &str) -> Result<CostTable, JsValue> {
    let table = CostTable::from_json(text).map_err(|e| crate::js::error("bad_cost_table", e))?;
    table
        .check_spec(&split_shared::model::lite0_spec())
        .map_err(|e| crate::js::error("bad_cost_table", e))?;
    Ok(table)
}
