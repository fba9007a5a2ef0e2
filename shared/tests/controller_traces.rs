//! The adaptive controller on synthetic traces (no network): it converges to the best placement
//! after a step, does not chase an oscillation, falls back to the edge in an outage, and never
//! breaks the privacy floor.

use split_shared::model::Boundary;
use split_shared::plan::sim::{SimResult, Trace, simulate, standard_traces};
use split_shared::plan::{Candidate, Conditions, Constraints, ControllerConfig, Placement};

/// A browser-like profile: wasm-CPU edge times, a CPU server, q4 feature sizes.
fn candidates() -> Vec<Candidate> {
    let split = |b: &str, edge_ms: f64, bytes: f64, cloud_ms: f64, agreement: f64| {
        let boundary: Boundary = b.parse().unwrap();
        Candidate {
            placement: Placement::Split {
                boundary: b.parse().unwrap(),
                codec: "q4".parse().unwrap(),
            },
            depth: usize::from(boundary.index()),
            edge_ms,
            edge_fixed_ms: 0.0,
            bytes,
            cloud_ms,
            agreement,
            edge_param_bytes: boundary.info().cumulative_param_bytes,
        }
    };
    let mut c = vec![
        split("stem", 18.0, 200_000.0, 59.0, 0.999),
        split("block5", 108.0, 9_500.0, 30.0, 0.997),
        split("block11", 160.0, 5_000.0, 14.0, 0.997),
        split("head", 205.0, 20_000.0, 1.2, 0.999),
    ];
    c.push(Candidate {
        placement: Placement::EdgeOnly,
        depth: usize::from(Boundary::LOGITS.index()),
        edge_ms: 210.0,
        edge_fixed_ms: 0.0,
        bytes: 0.0,
        cloud_ms: 0.0,
        agreement: 1.0,
        edge_param_bytes: Boundary::LOGITS.info().cumulative_param_bytes,
    });
    c.push(Candidate {
        placement: Placement::CloudOnly,
        depth: 0,
        edge_ms: 0.0,
        edge_fixed_ms: 0.0,
        bytes: 20_000.0,
        cloud_ms: 68.0,
        agreement: 1.0,
        edge_param_bytes: 0,
    });
    c
}

fn run(name: &str, constraints: &Constraints) -> SimResult {
    let trace: Trace = standard_traces().into_iter().find(|t| t.name == name).unwrap();
    let r = simulate(&trace, &candidates(), constraints, ControllerConfig::default(), 500.0);
    println!(
        "{name}: adaptive/oracle {:.3}, adaptive/best fixed {:.3} ({}), switches {}",
        r.adaptive_ms / r.oracle_ms,
        r.adaptive_ms / r.best_fixed.1,
        r.best_fixed.0,
        r.switches
    );
    r
}

/// After `from_ms` + `settle_ms`, every request is within 1% of the best possible.
fn converged(r: &SimResult, from_ms: f64, settle_ms: f64) {
    for (t, p, lat, best) in &r.requests {
        if *t >= from_ms + settle_ms && *t < from_ms + 20_000.0 {
            assert!(
                lat <= &(best * 1.01),
                "{}: at {t} ms {p} costs {lat:.0}, best {best:.0}",
                r.trace
            );
        }
    }
}

#[test]
fn converges_within_three_periods_after_a_step() {
    let period = ControllerConfig::default().period_ms;
    for name in ["step-down", "step-up"] {
        let r = run(name, &Constraints::default());
        converged(&r, 0.0, 3.0 * period);
        converged(&r, 30_000.0, 3.0 * period);
        assert!(r.switches <= 2, "{name}: {} switches", r.switches);
    }
}

/// The device is 1.6x slower than the profile says (the policy starts at the profile's speed,
/// as a browser whose warm-up timed the bare stages does): its own edge runs teach it, and it
/// moves to cloud-only, the best placement at that speed, within three periods.
#[test]
fn a_device_slower_than_its_profile_is_found_out_by_its_requests() {
    let link = Conditions {
        rtt_ms: 100.0,
        uplink_bytes_per_ms: 400.0,
        edge_factor: 1.6,
        ..Conditions::default()
    };
    let trace = Trace { name: "slow-device", duration_ms: 30_000.0, at: Box::new(move |_| link) };
    let r = simulate(
        &trace,
        &candidates(),
        &Constraints::default(),
        ControllerConfig::default(),
        500.0,
    );
    assert_eq!(r.requests[0].1, Placement::EdgeOnly, "the profile's speed: 210 ms against 218");
    converged(&r, 0.0, 3.0 * ControllerConfig::default().period_ms);
    assert_eq!(r.requests.last().unwrap().1, Placement::CloudOnly);
}

#[test]
fn does_not_chase_an_oscillating_link() {
    let config = ControllerConfig::default();
    let r = run("oscillation", &Constraints::default());
    // The link flips every 3 s; the dwell time allows a switch at most every 6 s.
    let bound = (60_000.0 / config.min_dwell_ms) as usize + 1;
    assert!(r.switches <= bound, "{} switches, bound {bound}", r.switches);
}

#[test]
fn falls_back_to_the_edge_during_an_outage_and_returns() {
    let r = run("outage", &Constraints::default());
    for (t, p, _, _) in &r.requests {
        if (21_000.0..35_000.0).contains(t) {
            assert_eq!(*p, Placement::EdgeOnly, "at {t} ms");
        }
    }
    converged(&r, 35_000.0, 3.0 * ControllerConfig::default().period_ms);
}

#[test]
fn an_rtt_spike_moves_work_to_the_edge_at_once() {
    let r = run("rtt-spike", &Constraints::default());
    let first_local =
        r.requests.iter().find(|(t, p, _, _)| *t >= 20_000.0 && *p == Placement::EdgeOnly);
    let (t, _, _, _) = first_local.expect("moves to the edge during the spike");
    assert!(*t <= 21_000.0, "reacted at {t} ms");
    converged(&r, 40_000.0, 3.0 * ControllerConfig::default().period_ms);
}

#[test]
fn the_privacy_floor_holds_on_every_trace() {
    let floor = usize::from(Boundary::block(5).unwrap().index());
    let constraints = Constraints { privacy_floor: floor, ..Default::default() };
    let cands = candidates();
    for trace in standard_traces() {
        let r = simulate(&trace, &cands, &constraints, ControllerConfig::default(), 500.0);
        for (t, p, _, _) in &r.requests {
            let c = cands.iter().find(|c| c.placement == *p).unwrap();
            assert!(*p != Placement::CloudOnly && c.depth >= floor, "{}: {p} at {t} ms", r.trace);
        }
    }
}

#[test]
fn adaptive_stays_close_to_the_oracle_on_steps_and_ramps() {
    for name in ["step-down", "step-up", "slow-ramp", "rtt-spike"] {
        let r = run(name, &Constraints::default());
        assert!(
            r.adaptive_ms <= r.best_fixed.1 * 1.0001,
            "{name}: never worse than the best fixed choice"
        );
        assert!(
            r.adaptive_ms <= r.oracle_ms * 1.15,
            "{name}: {:.3} x oracle",
            r.adaptive_ms / r.oracle_ms
        );
    }
}
