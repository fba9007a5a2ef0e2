//! Cutting the network across a chain of devices: the device that asks runs the first blocks
//! (at least up to the privacy floor), passes the features to the next device, and so on, the
//! cloud optionally last; the answer returns to the asker.
//!
//! Devices are considered fastest first (after the asker, which always starts the chain), and
//! a dynamic programme over (device, boundary) picks which of them take part and where each
//! cut is, for one of two goals:
//!
//! - [`Goal::Latency`]: one image's time from the asker to its answer: every stage's compute
//!   plus every hop, summed;
//! - [`Goal::Throughput`]: a stream's period: the slowest stage or hop, since in a pipeline
//!   every stage works on a different frame at once.
//!
//! A device takes a range only when its weights fit its memory budget; a device on a low
//! battery counts [`LOW_POWER_PENALTY`] times slower, so it takes less.

/// How much slower a device on a low battery counts: it still helps when nothing else can.
pub const LOW_POWER_PENALTY: f64 = 4.0;

/// The network as a chain of boundaries `0..=B` (0 the input, B the logits).
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// Fraction of the whole network's compute done by boundary b (0 at the input, 1 at the
    /// logits, non-decreasing): the profiler's cumulative edge times over the total.
    pub compute: Vec<f64>,
    /// Bytes sent when the chain is cut at boundary b (at 0: the image; at B: the answer).
    pub bytes: Vec<f64>,
    /// Parameter bytes of the stages up to boundary b (cumulative, 0 at the input).
    pub params: Vec<f64>,
}

/// Bytes of the answer that returns to the asker (a result frame with the top 5).
pub const ANSWER_BYTES: f64 = 128.0;

impl Network {
    fn last(&self) -> usize {
        self.compute.len() - 1
    }

    /// The network as the cost table measured it: compute shares from the edge profile
    /// `profile`, bytes of `codec` at each boundary (a boundary where it was not measured is
    /// never a cut), the image's bytes at the input, and each stage's weights.
    ///
    /// # Errors
    /// [`ChainError::BadNetwork`] for an unknown profile or one without the whole network.
    pub fn from_cost_table(
        table: &crate::plan::CostTable,
        profile: &str,
        codec: crate::codec::Setting,
    ) -> Result<Self, ChainError> {
        let edge = table.edge.get(profile).ok_or(ChainError::BadNetwork("unknown edge profile"))?;
        let total = edge
            .ms
            .last()
            .copied()
            .flatten()
            .filter(|t| *t > 0.0)
            .ok_or(ChainError::BadNetwork("the edge profile does not reach the logits"))?;
        let mut compute = Vec::with_capacity(edge.ms.len());
        let mut at = 0.0f64;
        for ms in &edge.ms {
            // An unmeasured boundary costs what the one before it did: a cut there is as good.
            at = ms.map_or(at, |m| m.max(at));
            compute.push(at / total);
        }
        let last = compute.len() - 1;
        let bytes = (0..=last)
            .map(|b| match b {
                0 => table.image_bytes,
                b if b == last => ANSWER_BYTES,
                b => table.codecs[b]
                    .iter()
                    .find(|c| c.codec == codec)
                    .map_or(f64::INFINITY, |c| c.bytes),
            })
            .collect();
        let params = table.param_bytes.iter().map(|b| *b as f64).collect();
        Ok(Self { compute, bytes, params })
    }
}

/// A device's link to the others: its share of a hop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// Throughput in megabits per second.
    pub mbps: f64,
    /// One-way latency in milliseconds.
    pub ms: f64,
}

/// One device that may take part (the cloud is one, too).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Who it is: a group member's peer number, or [`CLOUD`].
    pub peer: u32,
    /// Milliseconds for the whole network on one image.
    pub ms_per_image: f64,
    /// Bytes of weights it may hold; `None`: no limit.
    pub memory_bytes: Option<f64>,
    /// On battery below the group's threshold.
    pub low_power: bool,
    /// Its link.
    pub link: Link,
}

/// The peer number that names the cloud in a chain.
pub const CLOUD: u32 = u32::MAX;

/// What the chain is chosen for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    /// The fastest single answer.
    Latency,
    /// The most frames per second in a stream.
    Throughput,
}

/// One device's part of a chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// Who runs it.
    pub peer: u32,
    /// First boundary (its input).
    pub from: usize,
    /// Last boundary (what it sends on).
    pub to: usize,
    /// Predicted compute, ms.
    pub compute_ms: f64,
    /// Bytes it sends on (to the next stage, or the answer back to the asker).
    pub send_bytes: f64,
    /// Predicted time of that hop, ms (0 when the last stage is the asker itself).
    pub send_ms: f64,
}

/// A chosen chain and what it is predicted to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// In order; the first is the asker's.
    pub stages: Vec<Stage>,
    /// One image, asker to answer, ms.
    pub latency_ms: f64,
    /// A stream's period (the slowest stage or hop), ms: 1000 / period frames per second.
    pub period_ms: f64,
}

/// Why no chain exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The network description is inconsistent.
    #[error("network description: {0}")]
    BadNetwork(&'static str),
    /// No device list, or the privacy floor is past the logits.
    #[error("no device can start the chain")]
    NoAsker,
    /// Memory budgets leave some range of blocks without a device.
    #[error("no device has the memory for some blocks at or after the privacy floor")]
    NoFit,
}

fn hop_ms(from: &Link, to: &Link, bytes: f64) -> f64 {
    if !bytes.is_finite() {
        return f64::INFINITY;
    }
    let mbps = from.mbps.min(to.mbps).max(1e-6);
    bytes * 8.0 / (mbps * 1000.0) + (from.ms + to.ms) / 2.0
}

fn compute_ms(node: &Node, net: &Network, from: usize, to: usize) -> f64 {
    let penalty = if node.low_power { LOW_POWER_PENALTY } else { 1.0 };
    node.ms_per_image * (net.compute[to] - net.compute[from]) * penalty
}

fn fits(node: &Node, net: &Network, from: usize, to: usize) -> bool {
    node.memory_bytes.is_none_or(|m| net.params[to] - net.params[from] <= m)
}

/// Plan a chain: `asker` starts it and keeps at least the blocks up to `privacy_floor`;
/// `others` (devices and the cloud, any order) may take later ranges.
///
/// # Errors
/// A [`ChainError`] when the description is inconsistent or nothing fits.
pub fn plan_chain(
    net: &Network,
    asker: &Node,
    others: &[Node],
    privacy_floor: usize,
    goal: Goal,
) -> Result<Chain, ChainError> {
    let n = net.compute.len();
    if n < 2 || net.bytes.len() != n || net.params.len() != n {
        return Err(ChainError::BadNetwork(
            "compute, bytes and params need one value per boundary",
        ));
    }
    if net.compute.windows(2).any(|w| w[1] < w[0]) || net.compute.iter().any(|c| !c.is_finite()) {
        return Err(ChainError::BadNetwork("compute must be finite and non-decreasing"));
    }
    let last = net.last();
    if privacy_floor > last {
        return Err(ChainError::NoAsker);
    }
    // The asker, then the rest fastest first; the cloud sorts by its speed like any device.
    let mut order: Vec<&Node> = others.iter().filter(|o| o.ms_per_image.is_finite()).collect();
    order.sort_by(|a, b| a.ms_per_image.total_cmp(&b.ms_per_image));
    order.insert(0, asker);
    let combine = |acc: f64, hop: f64, work: f64| match goal {
        Goal::Latency => acc + hop + work,
        Goal::Throughput => acc.max(hop).max(work),
    };
    // best[i][b]: the best chain whose last stage is device i ending at boundary b, with the
    // stage it came from.
    let mut best = vec![vec![(f64::INFINITY, usize::MAX, usize::MAX); n]; order.len()];
    for (b, cell) in best[0].iter_mut().enumerate().skip(privacy_floor) {
        if fits(asker, net, 0, b) {
            *cell = (compute_ms(asker, net, 0, b), usize::MAX, 0);
        }
    }
    for i in 1..order.len() {
        let (done, rest) = best.split_at_mut(i);
        let row = &mut rest[0];
        for (j, prev) in done.iter().enumerate() {
            for (a, (acc, _, _)) in prev.iter().enumerate().take(last) {
                if !acc.is_finite() {
                    continue;
                }
                let hop = hop_ms(&order[j].link, &order[i].link, net.bytes[a]);
                for (b, cell) in row.iter_mut().enumerate().skip(a + 1) {
                    if !fits(order[i], net, a, b) {
                        break;
                    }
                    let cost = combine(*acc, hop, compute_ms(order[i], net, a, b));
                    if cost < cell.0 {
                        *cell = (cost, j, a);
                    }
                }
            }
        }
    }
    // Close the chain: the answer goes back to the asker.
    let (mut end, mut score) = (usize::MAX, f64::INFINITY);
    for (i, row) in best.iter().enumerate() {
        let back = if i == 0 { 0.0 } else { hop_ms(&order[i].link, &asker.link, net.bytes[last]) };
        let total = combine(row[last].0, back, 0.0);
        if total < score {
            (end, score) = (i, total);
        }
    }
    if end == usize::MAX {
        return Err(ChainError::NoFit);
    }
    // Walk back from the last stage.
    let mut stages = Vec::new();
    let (mut i, mut b) = (end, last);
    loop {
        let (_, prev, a) = best[i][b];
        let from = if prev == usize::MAX { 0 } else { a };
        stages.push((i, from, b));
        if prev == usize::MAX {
            break;
        }
        (i, b) = (prev, a);
    }
    stages.reverse();
    let mut out = Vec::with_capacity(stages.len());
    for (k, (i, from, to)) in stages.iter().enumerate() {
        let node = order[*i];
        let next = stages.get(k + 1).map_or(asker, |(j, _, _)| order[*j]);
        let closing_on_asker = k + 1 == stages.len() && *i == 0;
        let send_bytes = net.bytes[*to];
        let send_ms =
            if closing_on_asker { 0.0 } else { hop_ms(&node.link, &next.link, send_bytes) };
        out.push(Stage {
            peer: node.peer,
            from: *from,
            to: *to,
            compute_ms: compute_ms(node, net, *from, *to),
            send_bytes,
            send_ms,
        });
    }
    let latency_ms = out.iter().map(|s| s.compute_ms + s.send_ms).sum();
    let period_ms = out.iter().map(|s| s.compute_ms.max(s.send_ms)).fold(0.0, f64::max);
    Ok(Chain { stages: out, latency_ms, period_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five boundaries with even compute, features shrinking from a 20 KB image.
    fn net() -> Network {
        Network {
            compute: vec![0.0, 0.25, 0.5, 0.75, 1.0],
            bytes: vec![20_000.0, 40_000.0, 10_000.0, 5_000.0, 200.0],
            params: vec![0.0, 1e5, 5e5, 2e6, 4e6],
        }
    }

    fn node(peer: u32, ms: f64) -> Node {
        Node {
            peer,
            ms_per_image: ms,
            memory_bytes: None,
            low_power: false,
            link: Link { mbps: 100.0, ms: 1.0 },
        }
    }

    fn placement(c: &Chain) -> Vec<(u32, usize, usize)> {
        c.stages.iter().map(|s| (s.peer, s.from, s.to)).collect()
    }

    #[test]
    fn alone_the_asker_runs_everything() {
        let c = plan_chain(&net(), &node(1, 100.0), &[], 0, Goal::Latency).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 4)]);
        assert!((c.latency_ms - 100.0).abs() < 1e-9 && (c.period_ms - 100.0).abs() < 1e-9);
    }

    #[test]
    fn latency_sends_the_image_to_a_much_faster_device() {
        let c = plan_chain(&net(), &node(1, 400.0), &[node(2, 40.0)], 0, Goal::Latency).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 0), (2, 0, 4)]);
        // With a floor the asker keeps the first two blocks.
        let c = plan_chain(&net(), &node(1, 400.0), &[node(2, 40.0)], 2, Goal::Latency).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 2), (2, 2, 4)]);
    }

    #[test]
    fn throughput_spreads_the_blocks_over_equal_devices() {
        // Six even blocks, small features: three equal devices take two blocks each.
        let sixths = Network {
            compute: (0..=6).map(|b| f64::from(b) / 6.0).collect(),
            bytes: vec![1000.0; 7],
            params: vec![0.0; 7],
        };
        let others = [node(2, 100.0), node(3, 100.0)];
        let c = plan_chain(&sixths, &node(1, 100.0), &others, 0, Goal::Throughput).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 2), (2, 2, 4), (3, 4, 6)]);
        assert!((c.period_ms - 100.0 / 3.0).abs() < 1e-9, "{c:?}");
        let alone = plan_chain(&sixths, &node(1, 100.0), &[], 0, Goal::Throughput).unwrap();
        assert!((alone.period_ms / c.period_ms - 3.0).abs() < 1e-9);
        // At quarter boundaries a third is not reachable: two devices give the best period
        // and the planner does not add a third for nothing.
        let c = plan_chain(&net(), &node(1, 100.0), &others, 0, Goal::Throughput).unwrap();
        assert_eq!((c.stages.len(), c.period_ms), (2, 50.0));
        // Latency, on the same devices, stays on one: every hop only adds.
        let c = plan_chain(&net(), &node(1, 100.0), &others, 0, Goal::Latency).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 4)]);
    }

    #[test]
    fn fastest_devices_are_preferred_and_the_answer_comes_back() {
        let others = [node(3, 300.0), node(2, 50.0), node(CLOUD, 20.0)];
        let c = plan_chain(&net(), &node(1, 400.0), &others, 1, Goal::Latency).unwrap();
        assert_eq!(c.stages[0].peer, 1);
        assert_eq!(c.stages.last().unwrap().peer, CLOUD, "{:?}", placement(&c));
        assert!(!c.stages.iter().any(|s| s.peer == 3), "the slow device is left out");
        let back = c.stages.last().unwrap();
        assert_eq!(back.send_bytes, 200.0, "the last stage sends the answer");
        assert!(back.send_ms > 0.0);
    }

    #[test]
    fn memory_and_battery_limit_what_a_device_takes() {
        // Room for blocks 1..3 (1.9 MB of weights), not for the last (2 MB more): the fast
        // device takes what fits and a slower cloud the rest.
        let mut small = node(2, 10.0);
        small.memory_bytes = Some(2e6);
        let others = [small, node(CLOUD, 300.0)];
        let c = plan_chain(&net(), &node(1, 400.0), &others, 1, Goal::Latency).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 1), (2, 1, 3), (CLOUD, 3, 4)]);
        let mut tired = node(2, 60.0);
        tired.low_power = true;
        let rested =
            plan_chain(&net(), &node(1, 100.0), &[node(2, 60.0)], 0, Goal::Latency).unwrap();
        let c = plan_chain(&net(), &node(1, 100.0), &[tired], 0, Goal::Latency).unwrap();
        assert_eq!(placement(&c), vec![(1, 0, 4)], "60 ms at 4x is slower than doing it");
        assert_ne!(placement(&rested), placement(&c));
    }

    #[test]
    fn the_shipped_cost_table_describes_the_network() {
        let text = include_str!("../../../profiles/cost-table.json");
        let table = crate::plan::CostTable::from_json(text).unwrap();
        let setting = "q6".parse().unwrap();
        let net = Network::from_cost_table(&table, "browser-wasm-cpu", setting).unwrap();
        assert_eq!(net.compute.len(), crate::model::Boundary::all().count());
        assert_eq!((net.compute[0], *net.compute.last().unwrap()), (0.0, 1.0));
        assert!(net.compute.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(net.bytes[0], table.image_bytes);
        let block5 = crate::model::Boundary::all().position(|b| b.name() == "block5").unwrap();
        assert!(
            net.bytes[block5] > 1000.0 && net.bytes[block5] < 20_000.0,
            "{}",
            net.bytes[block5]
        );
        // Three equal devices stream at about three times one's rate, cut where q6 was measured.
        let asker = node(1, 100.0);
        let others = [node(2, 100.0), node(3, 100.0)];
        let c = plan_chain(&net, &asker, &others, 0, Goal::Throughput).unwrap();
        assert_eq!(c.stages.len(), 3);
        assert!(c.period_ms < 45.0, "{c:?}");
        assert!(c.stages.iter().all(|s| s.send_bytes.is_finite()));
        assert!(Network::from_cost_table(&table, "no-such-device", setting).is_err());
    }

    #[test]
    fn bad_descriptions_are_errors() {
        let mut bad = net();
        bad.compute[2] = 0.1;
        assert!(matches!(
            plan_chain(&bad, &node(1, 1.0), &[], 0, Goal::Latency),
            Err(ChainError::BadNetwork(_))
        ));
        assert_eq!(
            plan_chain(&net(), &node(1, 1.0), &[], 9, Goal::Latency),
            Err(ChainError::NoAsker)
        );
        let mut tiny = node(1, 1.0);
        tiny.memory_bytes = Some(10.0);
        assert_eq!(plan_chain(&net(), &tiny, &[], 1, Goal::Latency), Err(ChainError::NoFit));
    }
}
