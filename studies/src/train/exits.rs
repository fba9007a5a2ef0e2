//! `./run.sh train exits`: early-exit heads. At each chosen boundary the activations, averaged
//! down to a 7×7 grid, go through a 1×1 convolution to 1,280 channels and ReLU6 and are pooled:
//! a prediction of the teacher's pooled head features, which the teacher's own classifier
//! reads ([`super::head`]); a confidence threshold per exit, chosen on held-back photos, says
//! when its answer may stand without the rest of the network.
//!
//! The teacher (the whole network, frozen, on the fused CPU path) runs once per view and its
//! targets are cached (`<cache>/train/`), so a second run with the same photos, views and seed
//! trains without running the network again.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use split_shared::container::TensorFile;
use split_shared::model::{Boundary, EfficientNetLite0, NUM_CLASSES, read_weights};
use split_shared::plan::wilson_lower;

use super::data::{augment, halves, listing, split};
use super::head::{Batch, Classifier, LinearHead, Loss, argmax};
use crate::adam::Adam;

/// The pooled head features' width.
const FEATURES: usize = 1280;
/// The grid an exit reads its boundary's activations at (7×7, the head's own resolution).
const GRID: usize = 7;
/// Positions of that grid.
const POSITIONS: usize = GRID * GRID;
/// The exits file's magic.
pub const EXITS_MAGIC: [u8; 4] = *b"SPLX";

/// Early-exit heads, trained by distillation on the dev photos not held back.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    photos: crate::eval::Photos,
    #[command(flatten)]
    extra: super::data::Extra,
    /// Also measure on up to this many more photos of each folder of `--extra`, the next by
    /// name, never trained on: new photos of the categories training saw (a diagnostic).
    #[arg(long, default_value_t = 0)]
    extra_measured: usize,
    /// Boundaries to exit at.
    #[arg(long, value_delimiter = ',', default_value = "block11,block15")]
    at: Vec<Boundary>,
    /// Random views per training photo.
    #[arg(long, default_value_t = 16)]
    views: usize,
    /// Random views per held-back photo (beside its centre crop).
    #[arg(long, default_value_t = 8)]
    held_views: usize,
    /// Adam steps per exit.
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Views per step.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Adam's step size (cosine-decayed to zero).
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// The agreement with the whole network the exits' thresholds are chosen for.
    #[arg(long, default_value_t = 0.99)]
    agreement: f64,
    /// The seed of every random choice (views, batches).
    #[arg(long, default_value_t = 36)]
    seed: u64,
    /// Output file; default next to the weights, `efficientnet-lite0-exits.splx`.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// What the teacher gives for a set of views: per exit boundary its activations on the grid
/// (`[positions, channels]` a view), and the pooled head features and logits.
struct Views {
    n: usize,
    maps: Vec<Vec<f32>>,
    features: Vec<f32>,
    logits: Vec<f32>,
}

/// `[1, C, H, W]` averaged down to the grid, position-major (`[GRID², C]`).
fn on_grid(t: Tensor<4>) -> Result<Vec<f32>> {
    let [_, c, h, w] = t.dims();
    if h % GRID != 0 || w % GRID != 0 {
        bail!("a {h}×{w} map does not fall on a {GRID}×{GRID} grid");
    }
    let (sh, sw) = (h / GRID, w / GRID);
    let v = t.into_data().try_to_vec::<f32>().expect("f32 activations");
    let mut out = vec![0f32; POSITIONS * c];
    for k in 0..c {
        for y in 0..h {
            for x in 0..w {
                out[((y / sh) * GRID + x / sw) * c + k] +=
                    v[(k * h + y) * w + x] / (sh * sw) as f32;
            }
        }
    }
    Ok(out)
}

fn mean_hw(t: Tensor<4>) -> Vec<f32> {
    let [_, c, h, w] = t.dims();
    let v = t.into_data().try_to_vec::<f32>().expect("f32 activations");
    (0..c).map(|k| v[k * h * w..(k + 1) * h * w].iter().sum::<f32>() / (h * w) as f32).collect()
}

/// Largest softmax probability and its class.
fn confidence(row: &[f32]) -> (f32, usize) {
    let k = argmax(row);
    let sum: f32 = row.iter().map(|z| (z - row[k]).exp()).sum();
    (1.0 / sum, k)
}

/// The teacher on every view of `files`: `views` random ones each, and the centre crop when
/// `centre`.
fn teacher_views(
    model: &EfficientNetLite0,
    files: &[PathBuf],
    at: &[Boundary],
    views: usize,
    centre: bool,
    rng: &mut StdRng,
) -> Result<Views> {
    let device = Device::flex();
    let mut out =
        Views { n: 0, maps: vec![Vec::new(); at.len()], features: Vec::new(), logits: Vec::new() };
    for (i, path) in files.iter().enumerate() {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let img = split_shared::image::decode(&bytes)?;
        let mut imgs: Vec<_> = (0..views).map(|_| augment(&img, rng)).collect();
        if centre {
            imgs.push(split_shared::image::center_crop_resize(
                &img,
                split_shared::model::INPUT_SIZE,
            ));
        }
        for view in imgs {
            let mut x = split_shared::image::to_input_tensor(&view, &device);
            let mut from = Boundary::INPUT;
            for (k, b) in at.iter().enumerate() {
                x = model.forward_range(x, from, *b)?;
                from = *b;
                out.maps[k].extend(on_grid(x.clone())?);
            }
            let pooled = model.forward_range(x, from, Boundary::POOL)?;
            let logits = model.forward_range(pooled.clone(), Boundary::POOL, Boundary::LOGITS)?;
            out.features.extend(mean_hw(pooled));
            out.logits.extend(mean_hw(logits));
            out.n += 1;
        }
        if (i + 1) % 50 == 0 {
            eprintln!("train: the teacher on {}/{} photos", i + 1, files.len());
        }
    }
    Ok(out)
}

/// The cached teacher outputs, or the teacher run and its outputs cached.
fn cached_views(
    model: &EfficientNetLite0,
    name: &str,
    files: &[PathBuf],
    at: &[Boundary],
    views: usize,
    centre: bool,
    seed: u64,
) -> Result<Views> {
    let list: String = files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join("\n");
    let names: Vec<&str> = at.iter().map(|b| b.name()).collect();
    let key = format!("{name}|grid{GRID}|{list}|{}|{views}|{centre}|{seed}", names.join(","));
    let path = split_paths::cache_dir()
        .join("train")
        .join(format!("teacher-{:016x}.splw", split_shared::container::fnv1a64(key.as_bytes())));
    let width = |b: &Boundary| b.info().shape[0] * POSITIONS;
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(file) = TensorFile::from_bytes(&bytes, *b"SPLT")
    {
        let n = file.tensor("n", &[1])?[0] as usize;
        let maps = at
            .iter()
            .map(|b| file.tensor(b.name(), &[n, width(b)]).map(<[f32]>::to_vec))
            .collect::<Result<_, _>>()?;
        eprintln!("train: {name}: the teacher's outputs from {}", path.display());
        return Ok(Views {
            n,
            maps,
            features: file.tensor("features", &[n, FEATURES])?.to_vec(),
            logits: file.tensor("logits", &[n, NUM_CLASSES])?.to_vec(),
        });
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let v = teacher_views(model, files, at, views, centre, &mut rng)?;
    let mut file = TensorFile::new();
    file.insert("n", vec![1], vec![v.n as f32]);
    for (b, p) in at.iter().zip(&v.maps) {
        file.insert(b.name(), vec![v.n, width(b)], p.clone());
    }
    file.insert("features", vec![v.n, FEATURES], v.features.clone());
    file.insert("logits", vec![v.n, NUM_CLASSES], v.logits.clone());
    std::fs::create_dir_all(path.parent().expect("a cache folder"))?;
    std::fs::write(&path, file.to_bytes(*b"SPLT"))?;
    Ok(v)
}

impl Views {
    /// The first `n` views.
    fn first(&self, n: usize) -> Self {
        let n = n.min(self.n);
        let cut = |v: &Vec<f32>| v[..v.len() / self.n.max(1) * n].to_vec();
        Self {
            n,
            maps: self.maps.iter().map(cut).collect(),
            features: cut(&self.features),
            logits: cut(&self.logits),
        }
    }
}

fn rows(v: &[f32], width: usize, idx: &[usize]) -> Vec<f32> {
    idx.iter().flat_map(|&i| v[i * width..(i + 1) * width].iter().copied()).collect()
}

/// Train one exit's head on `train` (its `k`-th boundary).
fn train_head(
    train: &Views,
    k: usize,
    classifier: &Classifier,
    a: &Args,
    rng: &mut StdRng,
) -> LinearHead {
    let inputs = train.maps[k].len() / train.n / POSITIONS;
    let mut mean = vec![0f32; FEATURES];
    for row in train.features.chunks_exact(FEATURES) {
        for (m, v) in mean.iter_mut().zip(row) {
            *m += v / train.n as f32;
        }
    }
    let var =
        train.features.iter().zip(mean.iter().cycle()).map(|(v, m)| (v - m).powi(2)).sum::<f32>()
            / train.features.len() as f32;
    let loss = Loss { temperature: 2.0, logit_weight: 1.0, feature_var: var };
    let mut head = LinearHead::new(inputs, &mean);
    let (mut aw, mut ab) = (Adam::new(head.weight.len()), Adam::new(head.bias.len()));
    let device = Device::flex().autodiff();
    let started = Instant::now();
    for step in 0..a.steps {
        let idx: Vec<usize> =
            (0..a.batch.min(train.n)).map(|_| rng.random_range(0..train.n)).collect();
        let (x, f, z) = (
            rows(&train.maps[k], inputs * POSITIONS, &idx),
            rows(&train.features, FEATURES, &idx),
            rows(&train.logits, NUM_CLASSES, &idx),
        );
        let batch = Batch { n: idx.len(), positions: POSITIONS, x: &x, features: &f, logits: &z };
        let (l, gw, gb) = head.loss_and_gradient(batch, classifier, loss, &device);
        let lr = a.lr * 0.5 * (1.0 + (std::f32::consts::PI * step as f32 / a.steps as f32).cos());
        aw.step(&mut head.weight, &gw, lr);
        ab.step(&mut head.bias, &gb, lr);
        if step % 500 == 0 || step + 1 == a.steps {
            eprintln!("train: step {step}: loss {l:.4} ({:.0} s)", started.elapsed().as_secs_f64());
        }
    }
    head
}

/// The exit's logits for every row of `v`, and the teacher's top class of each.
fn exit_answers(
    head: &LinearHead,
    v: &Views,
    k: usize,
    classifier: &Classifier,
) -> Vec<(f32, bool)> {
    let device = Device::flex();
    let h = head.forward(&v.maps[k], v.n, POSITIONS, &device);
    (0..v.n)
        .map(|r| {
            let hs = &h[r * FEATURES..(r + 1) * FEATURES];
            let z: Vec<f32> = (0..NUM_CLASSES)
                .map(|o| {
                    classifier.bias[o]
                        + hs.iter()
                            .enumerate()
                            .map(|(j, x)| x * classifier.weight[j * NUM_CLASSES + o])
                            .sum::<f32>()
                })
                .collect();
            let (p, class) = confidence(&z);
            (p, class == argmax(&v.logits[r * NUM_CLASSES..(r + 1) * NUM_CLASSES]))
        })
        .collect()
}

/// The lowest threshold whose confident answers agree at least `target` of the time (at
/// least 20 of them); 1.0 (never exit) if none does.
fn threshold(answers: &[(f32, bool)], target: f64) -> f32 {
    let mut sorted = answers.to_vec();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut agree = 0usize;
    let mut best = 1.0f32;
    for (i, (p, ok)) in sorted.iter().enumerate() {
        agree += usize::from(*ok);
        let n = i + 1;
        let next_lower = sorted.get(i + 1).is_none_or(|q| q.0 < *p);
        if n >= 20 && next_lower && agree as f64 / n as f64 >= target {
            best = *p;
        }
    }
    best
}

/// `(early, early that agree, all that agree)` at threshold `t`.
fn tally(answers: &[(f32, bool)], t: f32) -> (u32, u32, u32) {
    let early: Vec<_> = answers.iter().filter(|a| a.0 >= t).collect();
    (
        early.len() as u32,
        early.iter().filter(|a| a.1).count() as u32,
        answers.iter().filter(|a| a.1).count() as u32,
    )
}

/// Train, choose the thresholds, report, and write the exits file.
pub fn run(a: Args) -> Result<()> {
    if a.at.is_empty() || a.at.iter().any(|b| *b <= Boundary::INPUT || *b >= Boundary::HEAD) {
        bail!("--at: boundaries between stem and block15");
    }
    let mut at = a.at.clone();
    at.sort_by_key(|b| b.index());
    at.dedup();
    let weights = read_weights(&xtask::setup::ensure_weights()?)?;
    let model = EfficientNetLite0::from_weights(&weights, &Device::flex())?;
    let classifier = Classifier::from_torch(
        weights.tensor("fc.weight", &[NUM_CLASSES, FEATURES])?,
        weights.tensor("fc.bias", &[NUM_CLASSES])?,
        NUM_CLASSES,
        FEATURES,
    );
    let (files, _) = a.photos.read()?;
    let (dev_train, held) = split(&files);
    let extra = a.extra.files()?;
    let train_files: Vec<PathBuf> = dev_train.iter().chain(&extra).cloned().collect();
    // The held-back photos in two halves: one chooses the thresholds, the other is reported.
    let (choose, report) = halves(&held);
    eprintln!(
        "train: {} photos trained on ({} of them extra; {} views each), {} held back to choose thresholds, {} to report",
        train_files.len(),
        extra.len(),
        a.views,
        choose.len(),
        report.len()
    );
    let train = cached_views(&model, "train", &train_files, &at, a.views, false, a.seed)?;
    let chosen = cached_views(&model, "choose", &choose, &at, a.held_views, true, a.seed + 1)?;
    let reported = cached_views(&model, "report", &report, &at, 0, true, a.seed + 2)?;
    let reported_views =
        cached_views(&model, "report-views", &report, &at, a.held_views, false, a.seed + 3)?;

    // Photos of the extra folders' categories that training did not see (a diagnostic: how
    // the exits answer photos of classes they were trained on).
    let measured_files = a.extra.measured(a.extra_measured)?;
    let measured = (!measured_files.is_empty())
        .then(|| cached_views(&model, "extra-measured", &measured_files, &at, 0, true, a.seed + 5))
        .transpose()?;
    let mut measured_rows = Vec::new();

    let mut rng = StdRng::seed_from_u64(a.seed + 4);
    let mut out = TensorFile::new();
    let total = Boundary::LOGITS.info().cumulative_macs as f64;
    println!(
        "| exit | MACs to answer | threshold | answered early (centre crops) | of those agreeing | agreement without threshold | answered early (views) | of those agreeing | agreement on training views |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let seen = train.first(640);
    for (k, b) in at.iter().enumerate() {
        eprintln!("train: the exit at {b}");
        let head = train_head(&train, k, &classifier, &a, &mut rng);
        let t = threshold(&exit_answers(&head, &chosen, k, &classifier), a.agreement);
        let centre = exit_answers(&head, &reported, k, &classifier);
        let views = exit_answers(&head, &reported_views, k, &classifier);
        let (early, ok, all) = tally(&centre, t);
        let (early_v, ok_v, _) = tally(&views, t);
        let (_, _, fit) = tally(&exit_answers(&head, &seen, k, &classifier), 1.0);
        let macs = b.info().cumulative_macs as f64
            + (POSITIONS * head.inputs * FEATURES + FEATURES * NUM_CLASSES) as f64;
        let pct = |x: u32, n: usize| 100.0 * f64::from(x) / n.max(1) as f64;
        let bound = |ok: u32, n: u32| {
            if n == 0 {
                "—".to_string()
            } else {
                format!("{ok}/{n}, ≥ {:.1}%", 100.0 * wilson_lower(ok, n))
            }
        };
        println!(
            "| {b} | {:.0}M ({:.0}%) | {t:.3} | {:.0}% ({early}/{}) | {} | {:.1}% ({all}/{}) | {:.0}% ({early_v}/{}) | {} | {:.1}% ({fit}/{}) |",
            macs / 1e6,
            100.0 * macs / total,
            pct(early, centre.len()),
            centre.len(),
            bound(ok, early),
            pct(all, centre.len()),
            centre.len(),
            pct(early_v, views.len()),
            views.len(),
            bound(ok_v, early_v),
            pct(fit, seen.n),
            seen.n,
        );
        if let Some(m) = &measured {
            let (early, ok, all) = tally(&exit_answers(&head, m, k, &classifier), t);
            measured_rows.push(format!(
                "| {b} | {t:.3} | {:.0}% ({early}/{}) | {} | {:.1}% ({all}/{}) |",
                pct(early, m.n),
                m.n,
                bound(ok, early),
                pct(all, m.n),
                m.n,
            ));
        }
        out.insert(format!("{b}.weight"), vec![head.inputs, FEATURES], head.weight);
        out.insert(format!("{b}.bias"), vec![FEATURES], head.bias);
        out.insert(format!("{b}.threshold"), vec![1], vec![t]);
    }
    if !measured_rows.is_empty() {
        println!(
            "\nphotos of the extra folders' categories, not trained on ({}, centre crops):\n",
            measured_files.len()
        );
        println!(
            "| exit | threshold | answered early | of those agreeing | agreement without threshold |"
        );
        println!("|---|---|---|---|---|");
        for row in measured_rows {
            println!("{row}");
        }
    }
    let command =
        format!("./run.sh train {}", std::env::args().skip(2).collect::<Vec<_>>().join(" "));
    out.insert_text("meta.command", command.trim());
    out.insert_text("meta.photos", &listing(&dev_train, &extra));
    let path = a.out.clone().unwrap_or_else(|| {
        split_paths::weights_file().with_file_name("efficientnet-lite0-exits.splx")
    });
    std::fs::write(&path, out.to_bytes(EXITS_MAGIC))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("train: wrote {}", path.display());
    Ok(())
}
