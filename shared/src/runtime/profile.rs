//! A cost table for any model on the runtime, measured where it is called: each stage timed
//! on the host, the bytes of each codec that needs no calibration at each inner boundary, and
//! how often the answer through that codec keeps the uncoded answer's best class.
//!
//! The host runs both columns, so the table prices a split between two machines like this one;
//! a browser replaces the edge column with its own warm-up measurements, as it does for
//! EfficientNet-Lite0's table (whose profiler, `./run.sh profile`, also prices the calibrated
//! codecs and a GPU cloud). Time is read through a clock the caller passes (milliseconds), so
//! this stays plain Rust that also builds for wasm32.

use std::collections::BTreeMap;

use super::{Activations, ModelSpec, RuntimeError, SplitModel, encode_plain};
use crate::codec::{Setting, StreamDecoder};
use crate::plan::{COST_TABLE_VERSION, CodecCost, CostTable, EdgeProfile};

/// What to measure and how to label it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileSetup {
    /// Codec settings priced at each boundary between the input and the answer: f32 and
    /// ranged ones (a calibrated setting is refused).
    pub settings: Vec<Setting>,
    /// Timed runs of each input, after one run that is not timed.
    pub repeats: usize,
    /// The edge profile's name in the table (`native-flex`).
    pub edge_profile: String,
    /// What ran it, for both columns.
    pub device: String,
    /// Where: the machine's description.
    pub machine: String,
    /// The command that made the table, recorded in it.
    pub command: String,
}

impl Default for ProfileSetup {
    fn default() -> Self {
        Self {
            settings: vec![Setting::F32, Setting::Ranged(8), Setting::Ranged(4)],
            repeats: 3,
            edge_profile: "native-flex".into(),
            device: "this host".into(),
            machine: String::new(),
            command: String::new(),
        }
    }
}

impl ProfileSetup {
    /// The cost table of `model` on `inputs` (each one item at boundary 0): per stage the
    /// median of `repeats` timings over all inputs, the edge column cumulative from the input,
    /// the cloud column from each boundary to the answer; cloud-only sends the input as f32
    /// features at boundary 0 and runs the whole model; agreement is the share of inputs whose
    /// best class survives the codec, with its 95% lower bound.
    ///
    /// # Errors
    /// [`RuntimeError::BadProfile`] for no inputs, no repeats or a calibrated setting; an input
    /// not at boundary 0 of one item; what the model reports.
    pub fn measure(
        &self,
        model: &dyn SplitModel,
        inputs: &[Activations],
        clock: &dyn Fn() -> f64,
    ) -> crate::Result<CostTable> {
        let spec = model.spec();
        self.check(spec, inputs)?;
        let n = spec.boundaries.len();
        let last = spec.output();
        let mut stage_ms: Vec<Vec<f64>> = vec![Vec::new(); n];
        let mut whole_ms = Vec::new();
        // Per (boundary, setting): bytes of every input's frame, and how many kept the class.
        let mut bytes: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
        let mut kept: BTreeMap<(usize, usize), u32> = BTreeMap::new();
        for x in inputs {
            let at = self.forward_timed(model, x, &mut stage_ms, clock)?;
            for _ in 0..self.repeats {
                let start = clock();
                model.forward_range(x.clone(), last)?;
                whole_ms.push(clock() - start);
            }
            let answer = best(at[usize::from(last)].values());
            for (k, a) in at.iter().enumerate().take(usize::from(last)).skip(1) {
                for (s, setting) in self.settings.iter().enumerate() {
                    let bits = match setting {
                        Setting::Ranged(bits) => Some(*bits),
                        _ => None,
                    };
                    let frame = encode_plain(a, bits)?;
                    bytes.entry((k, s)).or_default().push(frame.payload.len() as f64);
                    let decoded = model.decode_features(&frame, &mut StreamDecoder::new())?;
                    let out = model.forward_range(decoded, last)?;
                    *kept.entry((k, s)).or_default() += u32::from(best(out.values()) == answer);
                }
            }
        }
        let stage: Vec<f64> = stage_ms.into_iter().map(median).collect();
        // Folded from +0.0: an empty `sum` of floats is -0.0.
        let total = |s: &[f64]| s.iter().fold(0.0, |a, b| a + b);
        let edge = (0..n).map(|k| Some(total(&stage[..=k]))).collect();
        let cloud = (0..n).map(|k| Some(total(&stage[k + 1..]))).collect();
        let images = inputs.len() as u32;
        let codecs = (0..n)
            .map(|k| {
                (0..self.settings.len())
                    .filter_map(|s| {
                        let b = bytes.get(&(k, s))?;
                        let mean = b.iter().sum::<f64>() / b.len() as f64;
                        Some(CodecCost::measured(self.settings[s], mean, kept[&(k, s)], images))
                    })
                    .collect()
            })
            .collect();
        let input_bytes = (spec.boundaries[0].len() * 4) as f64;
        Ok(CostTable {
            version: COST_TABLE_VERSION,
            model: spec.name.clone(),
            command: self.command.clone(),
            machine: self.machine.clone(),
            boundaries: spec.boundaries.iter().map(|b| b.name.clone()).collect(),
            param_bytes: spec.boundaries.iter().map(|b| b.param_bytes).collect(),
            edge: BTreeMap::from([(
                self.edge_profile.clone(),
                EdgeProfile { device: self.device.clone(), ms: edge },
            )]),
            cloud_device: self.device.clone(),
            cloud_ms: cloud,
            cloud_only_ms: median(whole_ms),
            image_bytes: input_bytes,
            codecs,
            encrypted: None,
        })
    }

    fn check(&self, spec: &ModelSpec, inputs: &[Activations]) -> crate::Result<()> {
        let bad = |why: &str| Err(RuntimeError::BadProfile(format!("{}: {why}", spec.name)).into());
        if inputs.is_empty() {
            return bad("no inputs to run");
        }
        if self.repeats == 0 {
            return bad("0 repeats");
        }
        if let Some(s) =
            self.settings.iter().find(|s| !matches!(s, Setting::F32 | Setting::Ranged(_)))
        {
            return bad(&format!("{s} needs a calibration; profile f32 and ranged settings"));
        }
        for x in inputs {
            spec.check(x.boundary(), x.dims(), 1)?;
            if x.boundary() != 0 {
                return bad("an input not at boundary 0");
            }
        }
        Ok(())
    }

    /// `x` run stage by stage, each stage timed `repeats` times after an untimed run; the
    /// activations at every boundary.
    fn forward_timed(
        &self,
        model: &dyn SplitModel,
        x: &Activations,
        stage_ms: &mut [Vec<f64>],
        clock: &dyn Fn() -> f64,
    ) -> crate::Result<Vec<Activations>> {
        let mut at = vec![x.clone()];
        for k in 1..stage_ms.len() {
            let from = at[k - 1].clone();
            let to = k as u8;
            let out = model.forward_range(from.clone(), to)?;
            for _ in 0..self.repeats {
                let start = clock();
                model.forward_range(from.clone(), to)?;
                stage_ms[k].push(clock() - start);
            }
            at.push(out);
        }
        Ok(at)
    }
}

/// The index of the greatest value (the first of equals).
fn best(scores: &[f32]) -> usize {
    scores
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, v)| if *v > bv { (i, *v) } else { (bi, bv) })
        .0
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::plan::{Conditions, Constraints, Placement, plan};
    use crate::runtime::BoundarySpec;

    /// Doubles its input, then sums pairs: `[4]` → `[4]` → `[2]`. The clock advances 1 ms
    /// per value a stage takes in, so the timings are known.
    struct Pairs {
        spec: ModelSpec,
    }

    impl Pairs {
        fn new() -> Self {
            let b = vec![
                BoundarySpec::new("input", &[4]),
                BoundarySpec::new("doubled", &[4]).with_param_bytes(0),
                BoundarySpec::new("sums", &[2]).with_param_bytes(64),
            ];
            Self { spec: ModelSpec::new(7, "pairs", b, 2).unwrap() }
        }
    }

    thread_local! { static NOW: Cell<f64> = const { Cell::new(0.0) }; }

    impl SplitModel for Pairs {
        fn spec(&self) -> &ModelSpec {
            &self.spec
        }

        fn forward_range(&self, x: Activations, to: u8) -> crate::Result<Activations> {
            let mut at = x.boundary();
            let mut v = x.into_values();
            while at < to {
                NOW.with(|t| t.set(t.get() + v.len() as f64));
                v = if at == 0 {
                    v.iter().map(|x| x * 2.0).collect()
                } else {
                    v.chunks(2).map(|p| p[0] + p[1]).collect()
                };
                at += 1;
            }
            let len = self.spec.boundaries[usize::from(at)].len();
            Ok(Activations::new(&self.spec, at, &[v.len() / len, len], v)?)
        }
    }

    fn input(m: &Pairs, v: [f32; 4]) -> Activations {
        Activations::new(&m.spec, 0, &[1, 4], v.to_vec()).unwrap()
    }

    #[test]
    fn a_model_of_its_own_is_profiled_and_planned() {
        let m = Pairs::new();
        let inputs = [input(&m, [1.0, 2.0, 3.0, 4.0]), input(&m, [4.0, 3.0, 2.0, 1.0])];
        let clock = || NOW.with(Cell::get);
        let setup = ProfileSetup { command: "test".into(), ..ProfileSetup::default() };
        let t = setup.measure(&m, &inputs, &clock).unwrap();
        let t = CostTable::from_json(&serde_json::to_string(&t).unwrap()).unwrap();
        t.check_spec(&m.spec).unwrap();
        assert_eq!(t.edge["native-flex"].ms, [Some(0.0), Some(4.0), Some(8.0)]);
        assert_eq!(t.cloud_ms, [Some(8.0), Some(4.0), Some(0.0)]);
        assert_eq!((t.cloud_only_ms, t.image_bytes), (8.0, 16.0));
        assert_eq!(t.param_bytes, [0, 0, 64]);
        let at = |s: &str| t.codecs[1].iter().find(|c| c.codec.to_string() == s).unwrap();
        // f32: 4 values; ranged: a (lo, hi) pair and a byte or half a byte a value.
        assert_eq!((at("f32").bytes, at("ranged8").bytes, at("ranged4").bytes), (16.0, 12.0, 10.0));
        assert!(t.codecs.iter().enumerate().all(|(k, c)| c.is_empty() == (k != 1)));
        assert_eq!(at("f32").agreement, 1.0);
        // The planner picks from it like from EfficientNet-Lite0's table (two inputs bound
        // the splits' agreement at 34%, below the default floor: no floor here).
        assert!((at("f32").reliable_agreement() - 0.342).abs() < 1e-3);
        let slow = Conditions { rtt_ms: 0.0, uplink_bytes_per_ms: 0.001, ..Default::default() };
        let k = Constraints { min_agreement: 0.0, ..Constraints::default() };
        assert_eq!(plan(&t, "native-flex", &slow, &k).unwrap()[0].placement, Placement::EdgeOnly);
        let far = Conditions { rtt_ms: 1.0, uplink_bytes_per_ms: 1e6, edge_factor: 10.0, ..slow };
        let best = &plan(&t, "native-flex", &far, &k).unwrap()[0];
        assert_eq!(best.placement, Placement::CloudOnly);
        let private = Constraints { privacy_floor: 1, ..k };
        let best = &plan(&t, "native-flex", &far, &private).unwrap()[0];
        assert!(
            matches!(&best.placement, Placement::Split { boundary, .. } if boundary == "doubled"),
            "{best:?}"
        );
        let small = Constraints { max_edge_param_bytes: Some(10), ..private };
        let only = plan(&t, "native-flex", &slow, &small).unwrap();
        assert!(only.iter().all(|e| e.placement != Placement::EdgeOnly));
    }

    #[test]
    fn what_cannot_be_measured_is_refused() {
        let m = Pairs::new();
        let clock = || 0.0;
        let setup = ProfileSetup::default();
        let err = |r: crate::Result<CostTable>| r.unwrap_err().to_string();
        assert!(err(setup.measure(&m, &[], &clock)).contains("no inputs"));
        let two = Activations::new(&m.spec, 0, &[2, 4], vec![0.0; 8]).unwrap();
        assert!(err(setup.measure(&m, &[two], &clock)).contains("shape"));
        let coded = ProfileSetup { settings: vec!["q6".parse().unwrap()], ..setup.clone() };
        let one = input(&m, [0.0; 4]);
        assert!(
            err(coded.measure(&m, std::slice::from_ref(&one), &clock))
                .contains("q6 needs a calibration")
        );
        let none = ProfileSetup { repeats: 0, ..setup };
        assert!(err(none.measure(&m, &[one], &clock)).contains("0 repeats"));
    }
}
