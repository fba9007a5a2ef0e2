//! The adaptive planner for JavaScript: the cost table, the network monitor and the controller
//! from `split_shared::plan`, with time passed in (`performance.now()`), values in and JSON out.

use split_shared::plan::{
    Candidate, Constraints, Controller, ControllerConfig, CostTable, NetworkMonitor, Placement,
    plan_candidates,
};
use wasm_bindgen::prelude::*;

/// Chooses where to split, live. See `web/split-client.js` (`split: "auto"`) for how the client
/// feeds it.
#[wasm_bindgen]
pub struct AdaptivePlanner {
    table: CostTable,
    candidates: Vec<Candidate>,
    profile: String,
    monitor: NetworkMonitor,
    controller: Controller,
    constraints: Constraints,
}

fn json_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

#[wasm_bindgen]
impl AdaptivePlanner {
    /// From the server's cost table (`/api/cost-table`, JSON text) and the edge profile to start
    /// from (`"browser-wasm-cpu"`, `"browser-webgpu"`; falls back to `"native-flex"`).
    #[wasm_bindgen(constructor)]
    pub fn new(cost_table: &str, edge_profile: &str) -> Result<AdaptivePlanner, JsError> {
        let table = CostTable::from_json(cost_table).map_err(json_error)?;
        let profile =
            if table.edge.contains_key(edge_profile) { edge_profile } else { "native-flex" };
        let candidates = table.candidates(profile).ok_or_else(|| {
            JsError::new(&format!("the cost table has no edge profile {profile:?}"))
        })?;
        Ok(Self {
            table,
            candidates,
            profile: profile.into(),
            monitor: NetworkMonitor::new(),
            controller: Controller::new(ControllerConfig::default()),
            constraints: Constraints::default(),
        })
    }

    /// The edge profile in use.
    #[wasm_bindgen(getter)]
    pub fn profile(&self) -> String {
        self.profile.clone()
    }

    /// This device's measured edge times (cumulative ms from the input, per boundary name):
    /// the edge column is scaled by their median ratio to the profile's.
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
        self.monitor.set_edge_factor(factor);
        factor
    }

    /// The size of the image a cloud-only request would upload now (the table assumes a typical
    /// JPEG; a PNG or a large photo costs more).
    #[wasm_bindgen(js_name = setImageBytes)]
    pub fn set_image_bytes(&mut self, bytes: f64) {
        for c in &mut self.candidates {
            if c.placement == Placement::CloudOnly {
                c.bytes = bytes;
            }
        }
    }

    /// Constraints as JSON: `{ "privacy_floor": 7, "min_agreement": 0.99,
    /// "max_edge_param_bytes": null }`.
    #[wasm_bindgen(js_name = setConstraints)]
    pub fn set_constraints(&mut self, json: &str) -> Result<(), JsError> {
        self.constraints = serde_json::from_str(json).map_err(json_error)?;
        Ok(())
    }

    /// Controller tuning as JSON (see `ControllerConfig`).
    #[wasm_bindgen(js_name = setConfig)]
    pub fn set_config(&mut self, json: &str) -> Result<(), JsError> {
        let config: ControllerConfig = serde_json::from_str(json).map_err(json_error)?;
        self.controller = Controller::new(config);
        Ok(())
    }

    /// A round trip of `ms` observed at `now`.
    #[wasm_bindgen(js_name = observeRtt)]
    pub fn observe_rtt(&mut self, now: f64, ms: f64) {
        self.monitor.observe_rtt(now, ms);
    }

    /// `bytes` uploaded in `ms` (round trip minus server time minus the base RTT).
    #[wasm_bindgen(js_name = observeUpload)]
    pub fn observe_upload(&mut self, now: f64, bytes: f64, ms: f64) {
        self.monitor.observe_upload(now, bytes, ms);
    }

    /// The server's expected queue wait, from a reply's or pong's load.
    #[wasm_bindgen(js_name = observeQueue)]
    pub fn observe_queue(&mut self, now: f64, ms: f64) {
        self.monitor.observe_queue(now, ms);
    }

    /// A request or probe failed.
    #[wasm_bindgen(js_name = observeOutage)]
    pub fn observe_outage(&mut self, now: f64) {
        self.monitor.observe_outage(now);
    }

    /// Re-plan if due; returns the decision as JSON (`{"decision":"keep"}` or
    /// `{"decision":"switch","at_ms":…,"from":…,"to":{…breakdown…},"reason":"…"}`).
    pub fn tick(&mut self, now: f64) -> String {
        let forecast = self.monitor.forecast(5_000.0);
        let d = self.controller.tick(now, &self.candidates, &forecast, &self.constraints);
        serde_json::to_string(&d).unwrap_or_else(|_| "{\"decision\":\"keep\"}".into())
    }

    /// The placement in force as JSON (`{"mode":"split","boundary":"block5","codec":"q4"}`,
    /// `{"mode":"edge_only"}`, `{"mode":"cloud_only"}`), or `null` before the first tick.
    pub fn current(&self) -> String {
        serde_json::to_string(&self.controller.current()).unwrap_or_else(|_| "null".into())
    }

    /// Pin a placement (manual override, JSON as [`Self::current`] returns).
    #[wasm_bindgen(js_name = setPlacement)]
    pub fn set_placement(&mut self, now: f64, json: &str) -> Result<(), JsError> {
        let p: Placement = serde_json::from_str(json).map_err(json_error)?;
        self.controller.set(now, p);
        Ok(())
    }

    /// Conditions now and forecast, and every allowed candidate ranked under the forecast, as
    /// JSON: what the page shows to explain the choice.
    pub fn explain(&self) -> String {
        let forecast = self.monitor.forecast(5_000.0);
        let ranked = plan_candidates(&self.candidates, &forecast.predicted, &self.constraints)
            .unwrap_or_default();
        let predicted = self.controller.predicted(&self.candidates, &forecast.predicted);
        serde_json::json!({
            "forecast": forecast,
            "current": self.controller.current(),
            "predicted": predicted,
            "ranked": ranked.iter().take(8).collect::<Vec<_>>(),
            "switches": self.controller.log(),
        })
        .to_string()
    }
}
