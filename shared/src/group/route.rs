//! A pipeline's route: which members run which stages of one request, and where the answer
//! goes. The asker sends it as a `signal` (`{ "route": … }`) to the member running the next
//! stage, just before the request's frame; that member runs its stage, drops it from the route,
//! and sends the rest on the same way; the last stage's member answers the asker. Browsers
//! (`web/client/group.js`, through the wasm module's `parseRoute`) and the native agent
//! (`device-agent`) read it with this one definition, so a route one sends the other takes.
//!
//! JSON, camelCase like every object the client hands to JavaScript:
//!
//! ```json
//! { "id": 7, "answerTo": 1, "codec": "s14", "hops": ["p2p"],
//!   "stages": [{ "peer": 2, "from": "block5", "to": "block11" },
//!              { "peer": 3, "from": "block11", "to": "logits" }] }
//! ```

use serde::{Deserialize, Serialize};

use crate::Boundary;
use crate::codec::Setting;

/// Stages one route may name: more members than a group holds would be a crafted route.
pub const MAX_ROUTE_STAGES: usize = super::MAX_DEVICES_PER_GROUP;

/// How one hop of a request travelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hop {
    /// A direct channel between the two members (WebRTC).
    P2p,
    /// Through the server's relay.
    Relay,
}

/// One stage still to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteStage {
    /// The member that runs it.
    pub peer: u32,
    /// Where its input comes from (the previous stage's output boundary).
    pub from: Boundary,
    /// Where it stops: `logits` for the last stage.
    pub to: Boundary,
}

/// The stages of one request still to run, and where its answer goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    /// The request's id: its frame carries the same.
    pub id: u64,
    /// The member that asked, which gets the answer.
    pub answer_to: u32,
    /// How the features travel between stages.
    pub codec: Setting,
    /// How the request has travelled so far, one entry per hop.
    #[serde(default)]
    pub hops: Vec<Hop>,
    /// The stages still to run; the first is the receiver's.
    pub stages: Vec<RouteStage>,
}

impl Route {
    /// Check what a member sent: at least one stage, at most [`MAX_ROUTE_STAGES`], each going
    /// forward through the network and starting where the one before stopped, the last ending
    /// at `logits`, and no more hops than a route of this length can have made.
    ///
    /// # Errors
    /// A message saying what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let (Some(first), Some(last)) = (self.stages.first(), self.stages.last()) else {
            return Err("a route needs at least one stage".into());
        };
        if self.stages.len() > MAX_ROUTE_STAGES {
            return Err(format!("a route names at most {MAX_ROUTE_STAGES} stages"));
        }
        if self.hops.len() > MAX_ROUTE_STAGES {
            return Err(format!("a route reports at most {MAX_ROUTE_STAGES} hops"));
        }
        if first.from >= first.to {
            return Err(format!("stage {} → {} does not go forward", first.from, first.to));
        }
        for pair in self.stages.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if b.from != a.to || b.from >= b.to {
                return Err(format!(
                    "stage {} → {} does not follow {} → {}",
                    b.from, b.to, a.from, a.to
                ));
            }
        }
        if last.to != Boundary::LOGITS {
            return Err(format!("the last stage ends at {}, not logits", last.to));
        }
        Ok(())
    }

    /// Parse and [`check`](Self::check) a route from JSON.
    ///
    /// # Errors
    /// What is malformed or wrong about it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        let route: Self = serde_json::from_value(value).map_err(|e| format!("route: {e}"))?;
        route.check().map_err(|e| format!("route: {e}"))?;
        Ok(route)
    }

    /// The route the next member gets once the first stage has run: that stage removed and
    /// `hop` (how the features go on) recorded; `None` when it was the last.
    pub fn onward(&self, hop: Hop) -> Option<Self> {
        if self.stages.len() < 2 {
            return None;
        }
        let mut next = self.clone();
        next.stages.remove(0);
        next.hops.push(hop);
        Some(next)
    }

    /// The hops so far plus `last` (the answer's own): what the asker is told.
    pub fn hops_with(&self, last: Hop) -> Vec<Hop> {
        let mut hops = self.hops.clone();
        hops.push(last);
        hops
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn two_stages() -> serde_json::Value {
        json!({ "id": 7, "answerTo": 1, "codec": "s14", "hops": ["p2p"],
                "stages": [{ "peer": 2, "from": "block5", "to": "block11" },
                           { "peer": 3, "from": "block11", "to": "logits" }] })
    }

    #[test]
    fn a_route_goes_on_stage_by_stage() {
        let route = Route::from_json(two_stages()).unwrap();
        assert_eq!(route.answer_to, 1);
        assert_eq!(route.stages[0].to, "block11".parse::<Boundary>().unwrap());
        let next = route.onward(Hop::Relay).expect("one stage is left");
        assert_eq!(next.stages.len(), 1);
        assert_eq!(next.hops, [Hop::P2p, Hop::Relay]);
        assert_eq!(next.onward(Hop::P2p), None, "the last stage answers instead");
        assert_eq!(next.hops_with(Hop::P2p), [Hop::P2p, Hop::Relay, Hop::P2p]);
        // What goes on the wire reads back the same, in camelCase.
        let text = serde_json::to_string(&next).unwrap();
        assert!(text.contains("\"answerTo\":1") && text.contains("\"relay\""), "{text}");
        assert_eq!(Route::from_json(serde_json::from_str(&text).unwrap()).unwrap(), next);
    }

    #[test]
    fn crafted_routes_are_refused_with_a_reason() {
        let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = two_stages();
            edit(&mut v);
            Route::from_json(v).unwrap_err()
        };
        assert!(refused(&|v| v["stages"] = json!([])).contains("at least one stage"));
        assert!(refused(&|v| v["stages"][1]["from"] = json!("block8")).contains("does not follow"));
        assert!(refused(&|v| v["stages"][0]["to"] = json!("stem")).contains("forward"));
        assert!(refused(&|v| v["stages"][1]["to"] = json!("head")).contains("not logits"));
        assert!(refused(&|v| v["codec"] = json!("q99")).contains("route"));
        assert!(refused(&|v| v["answer_to"] = json!(1)).contains("unknown field"));
        assert!(refused(&|v| v["hops"] = json!(["carrier pigeon"])).contains("route"));
        let many: Vec<_> = (0..=MAX_ROUTE_STAGES)
            .map(|i| json!({ "peer": i, "from": "block5", "to": "block11" }))
            .collect();
        assert!(refused(&|v| v["stages"] = json!(many)).contains("at most"));
    }
}
