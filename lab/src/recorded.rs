//! Recorded cellular links: the capacity a phone saw on real carriers, replayed by the link
//! emulator ([`crate::netem`]) beside the lab's synthetic profiles.
//!
//! The source is the Mahimahi project's trace files (recorded with the Saturator tool of Winstein
//! et al., "Stochastic Forecasts Achieve High Throughput and Low Delay over Cellular Networks",
//! NSDI 2013): each line a millisecond at which one 1,500-byte packet could cross the link.
//! `split-lab import-trace` turns a pair of them (uplink, downlink) into the rate of each window
//! of `window_ms` over a stretch of the recording, which is what `lab/traces/*.json` hold and
//! the emulator replays as segments of fixed rate (a window without a packet is an outage of
//! that window). The recordings carry no delay: each trace names the round trip the lab adds
//! (its profiles' for the radio: 50 ms for LTE, 150 for UMTS).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::netem::{LinkProfile, Schedule};

/// Bits a Mahimahi delivery opportunity carries (one 1,500-byte packet).
const PACKET_BITS: f64 = 1500.0 * 8.0;

/// A stretch of a recorded link, as the rate of each window in each direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedTrace {
    /// The lab's name for it.
    pub name: String,
    /// Where the recording comes from (the files, the repository and its commit).
    pub source: String,
    /// The recording's licence.
    pub licence: String,
    /// The stretch of the recording, s from its start.
    pub start_s: f64,
    /// The length of a window, ms.
    pub window_ms: f64,
    /// The round trip the lab adds, ms.
    pub rtt_ms: f64,
    /// Uplink capacity per window, kbit/s.
    pub up_kbps: Vec<f64>,
    /// Downlink capacity per window, kbit/s.
    pub down_kbps: Vec<f64>,
}

/// Packets per window of `window_ms` from `start_s` for `duration_s`, from a Mahimahi file.
fn windows(text: &str, start_s: f64, duration_s: f64, window_ms: f64) -> Result<Vec<f64>> {
    let count = (duration_s * 1000.0 / window_ms).round() as usize;
    let (from, to) = (start_s * 1000.0, start_s * 1000.0 + duration_s * 1000.0);
    let mut packets = vec![0.0; count];
    let mut last = 0u64;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let ms: u64 = line.parse().with_context(|| format!("line {}: {line:?}", i + 1))?;
        if ms < last {
            bail!("line {}: {ms} ms comes before {last}", i + 1);
        }
        last = ms;
        let at = ms as f64;
        if at >= from && at < to {
            let w = ((at - from) / window_ms) as usize;
            packets[w.min(count - 1)] += 1.0;
        }
    }
    if (last as f64) < to {
        bail!("the recording ends at {last} ms, before {to} ms");
    }
    Ok(packets)
}

impl RecordedTrace {
    /// `duration_s` of a recording's uplink and downlink files from `start_s`, in windows of
    /// `window_ms`.
    ///
    /// # Errors
    /// A line that is not a millisecond count, times that go back, a recording shorter than
    /// the stretch, a window that does not divide it.
    #[allow(clippy::too_many_arguments)]
    pub fn from_mahimahi(
        name: &str,
        source: &str,
        licence: &str,
        up: &str,
        down: &str,
        (start_s, duration_s): (f64, f64),
        window_ms: f64,
        rtt_ms: f64,
    ) -> Result<Self> {
        if !(window_ms >= 1.0 && duration_s > 0.0 && start_s >= 0.0) {
            bail!("a window of 1 ms or more, a positive duration, a start at 0 s or later");
        }
        let kbps = |packets: Vec<f64>| -> Vec<f64> {
            packets.iter().map(|p| p * PACKET_BITS / window_ms).collect()
        };
        Ok(Self {
            name: name.into(),
            source: source.into(),
            licence: licence.into(),
            start_s,
            window_ms,
            rtt_ms,
            up_kbps: kbps(windows(up, start_s, duration_s, window_ms).context("the uplink")?),
            down_kbps: kbps(windows(down, start_s, duration_s, window_ms).context("the downlink")?),
        })
    }

    /// How long it lasts, s.
    pub fn duration_s(&self) -> f64 {
        self.up_kbps.len() as f64 * self.window_ms / 1000.0
    }

    /// The emulator's schedule: one segment per window.
    pub fn schedule(&self) -> Schedule {
        let segments = self
            .up_kbps
            .iter()
            .zip(&self.down_kbps)
            .enumerate()
            .map(|(i, (&up_kbps, &down_kbps))| {
                let link =
                    LinkProfile { name: "recorded", up_kbps, down_kbps, rtt_ms: self.rtt_ms };
                (i as f64 * self.window_ms / 1000.0, link)
            })
            .collect();
        // Replayed in a loop past its end, as Mahimahi does: a window without a packet at the
        // end must not become an outage forever.
        Schedule { name: self.name.clone(), segments, duration_s: self.duration_s(), looped: true }
    }

    /// `p` (0..=1) of the uplink's windows carry at most this, kbit/s.
    pub fn up_quantile(&self, p: f64) -> f64 {
        let mut v = self.up_kbps.clone();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

/// `split-lab import-trace`'s flags.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The lab's name for the trace (the file written is `lab/traces/<name>.json`).
    #[arg(long)]
    pub name: String,
    /// The uplink file (Mahimahi's format: a millisecond per line, one packet each).
    #[arg(long)]
    pub up: std::path::PathBuf,
    /// The downlink file.
    #[arg(long)]
    pub down: std::path::PathBuf,
    /// Where the recording comes from, as the report cites it.
    #[arg(long)]
    pub source: String,
    /// The recording's licence.
    #[arg(long)]
    pub licence: String,
    /// The stretch's start in the recording, s.
    #[arg(long, default_value_t = 0.0)]
    pub start_s: f64,
    /// The stretch's length, s (the lab's traces run 60 s).
    #[arg(long, default_value_t = 60.0)]
    pub duration_s: f64,
    /// The window the rate is averaged over, ms.
    #[arg(long, default_value_t = 100.0)]
    pub window_ms: f64,
    /// The round trip the lab adds, ms.
    #[arg(long)]
    pub rtt_ms: f64,
    /// Where to write it (default `lab/traces/<name>.json`).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// `split-lab import-trace`.
///
/// # Errors
/// Files that cannot be read or are not a recording (see [`RecordedTrace::from_mahimahi`]).
pub fn import(a: ImportArgs) -> Result<()> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let trace = RecordedTrace::from_mahimahi(
        &a.name,
        &a.source,
        &a.licence,
        &read(&a.up)?,
        &read(&a.down)?,
        (a.start_s, a.duration_s),
        a.window_ms,
        a.rtt_ms,
    )?;
    let out = a.out.unwrap_or_else(|| {
        xtask::paths::repo_root().join("lab/traces").join(format!("{}.json", a.name))
    });
    std::fs::write(&out, serde_json::to_string(&trace)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{}: {} windows of {} ms, uplink median {:.0} kbit/s (10th percentile {:.0}), written to {}",
        trace.name,
        trace.up_kbps.len(),
        trace.window_ms,
        trace.up_quantile(0.5),
        trace.up_quantile(0.1),
        out.display()
    );
    Ok(())
}

/// The recorded traces the lab replays (`lab/traces/`).
pub fn recorded() -> Vec<RecordedTrace> {
    [
        include_str!("../traces/verizon-lte.json"),
        include_str!("../traces/att-lte-driving.json"),
        include_str!("../traces/tmobile-umts-driving.json"),
    ]
    .iter()
    .map(|text| serde_json::from_str(text).expect("a committed trace parses"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_become_rates_per_window() {
        // 100 ms windows from 1 s for 0.3 s: 3 packets, then none, then 1.
        let up = "900\n1000\n1010\n1099\n1150\n1250\n1300\n1400\n";
        let down = "1\n2\n1500\n";
        let t =
            RecordedTrace::from_mahimahi("t", "s", "l", up, down, (1.0, 0.3), 100.0, 50.0).unwrap();
        // A packet per 100 ms is 1500 × 8 bits / 0.1 s = 120 kbit/s.
        assert_eq!(t.up_kbps, vec![360.0, 120.0, 120.0]);
        assert_eq!(t.down_kbps, vec![0.0, 0.0, 0.0]);
        assert!((t.duration_s() - 0.3).abs() < 1e-9);
        let s = t.schedule();
        assert_eq!(s.segments.len(), 3);
        assert_eq!(s.segments[1].0, 0.1);
        // 360 kbit/s: 36,000 bits leave in 0.1 s; the second window takes 12,000 more a 0.1 s.
        assert!((s.finish(0.0, 48_000.0, true).unwrap() - 0.2).abs() < 1e-9);
        // The downlink carries nothing in the stretch: an outage, and it loops (never carries).
        assert_eq!(s.finish(0.0, 1.0, false), None);
        assert!(
            RecordedTrace::from_mahimahi("t", "s", "l", up, "1\nx\n", (1.0, 0.3), 100.0, 0.0)
                .is_err()
        );
        assert!(
            RecordedTrace::from_mahimahi("t", "s", "l", "5\n3\n", down, (0.0, 0.001), 1.0, 0.0)
                .is_err()
        );
        assert!(
            RecordedTrace::from_mahimahi("t", "s", "l", up, down, (1.0, 9.0), 100.0, 0.0).is_err(),
            "shorter than the stretch"
        );
    }

    #[test]
    fn the_committed_traces_are_a_minute_of_real_capacity() {
        let all = recorded();
        assert_eq!(all.len(), 3);
        for t in all {
            assert_eq!(t.duration_s(), 60.0, "{}", t.name);
            assert_eq!(t.up_kbps.len(), t.down_kbps.len());
            assert!(t.source.contains("mahimahi") && t.licence.contains("GPL"), "{}", t.name);
            let median = t.up_quantile(0.5);
            assert!(median > 0.0 && median < 100_000.0, "{}: median uplink {median}", t.name);
            assert!(crate::netem::schedule(&t.name).is_ok(), "the emulator knows {}", t.name);
            // A 20 kB photo leaves from any moment of two rounds, the trace's outages waited
            // out and its end looped over (a hundred-millisecond window's end, reached by
            // adding, is never located back into the window it ends).
            let s = t.schedule();
            for k in 0..2400 {
                let at = f64::from(k) * 0.05;
                let done = s.finish(at, 160_000.0, true).expect("a recorded link carries");
                assert!(done > at && done < at + 30.0, "{}: from {at} s, done at {done}", t.name);
            }
        }
    }
}
