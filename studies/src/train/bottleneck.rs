//! `./run.sh train bottleneck`: a learned bottleneck at a boundary, towards the learned
//! codec. At every position of the boundary's map an encoder `c → c′` (a 1×1 convolution, or
//! two with ReLU between them: `--hidden`) keeps `c′` numbers, each quantized uniformly to `b`
//! bits between its training range's 0.1st and 99.9th percentiles; a decoder `c′ → c` (the
//! mirror) puts the map back before the rest of the network, which is the teacher's, untouched.
//! Trained on burn's autodiff to rebuild the maps of the training views (relative squared
//! error), then, for the widths of `--distill-widths`, through the rest of the network: the
//! cross-entropy against the teacher's softened answer on the same view (the rest of the
//! network frozen, on the plain-op path), uniform noise of one quantization step standing in
//! for the rounding. No labels. Measured: top-1 agreement with the whole network on every
//! held-back photo (centre crops), and the bits per original value, at `c′ · b / c` and entropy
//! coded (a static model of each code's levels fitted on the training views, `coder::LevelModel`).

use anyhow::{Result, bail};
use burn::tensor::{Device, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use split_shared::codec::SUPPORTED_BITS;
use split_shared::model::{Boundary, EfficientNetLite0, read_weights};
use split_shared::plan::wilson_lower;

use super::coder::{Coder, LevelModel, quantize, ranges, rate_bits};
use super::data::{augment, split};
use super::head::{argmax, tensor2};

/// A learned bottleneck, measured at several widths and bit depths.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    photos: crate::eval::Photos,
    #[command(flatten)]
    extra: super::data::Extra,
    /// Where the bottleneck sits.
    #[arg(long, default_value = "block5")]
    at: Boundary,
    /// Numbers kept per position (`c′`).
    #[arg(long, value_delimiter = ',', default_value = "8,16,24,32")]
    widths: Vec<usize>,
    /// Bits per kept number.
    #[arg(long, value_delimiter = ',', default_value = "2,3,4,6")]
    bits: Vec<u32>,
    /// Random views per training photo.
    #[arg(long, default_value_t = 4)]
    views: usize,
    /// Adam steps per width.
    #[arg(long, default_value_t = 800)]
    steps: usize,
    /// The rebuilding's learning rate (cosine schedule to 0).
    #[arg(long, default_value_t = 1e-2)]
    lr: f32,
    /// Width of a hidden layer (ReLU) in the encoder and in the decoder; 0: both linear.
    #[arg(long, default_value_t = 0)]
    hidden: usize,
    /// Positions per step.
    #[arg(long, default_value_t = 4096)]
    batch: usize,
    /// The seed of every random choice.
    #[arg(long, default_value_t = 36)]
    seed: u64,
    /// Widths trained further through the rest of the network.
    #[arg(long, value_delimiter = ',', default_value = "24,32")]
    distill_widths: Vec<usize>,
    /// Adam steps of that training.
    #[arg(long, default_value_t = 150)]
    distill_steps: usize,
    /// Views per step of it (at most the network's batch limit, 4).
    #[arg(long, default_value_t = 4)]
    distill_batch: usize,
    /// The bit depth it trains for.
    #[arg(long, default_value_t = 3)]
    distill_bits: u32,
    /// Weight of the rate (bits per original value, `coder::rate_bits`) in that training's
    /// loss; above 0 the distilled codes keep the steps they were trained with (fixed steps,
    /// not a fixed number of levels), so that what the rate saves is measured.
    #[arg(long, default_value_t = 0.0)]
    rate: f32,
    /// Write the trained bottleneck (the one width of `--widths`, distilled when
    /// `--distill-widths` names it) with tables over its codes at every bit depth of `--bits`
    /// into a copy of the installed calibration at this path: the `learned<bits>` settings. Its
    /// frames are then measured through the codec itself on the held-back photos.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
    /// With `--write`: put the `learned<bits>` settings, as measured on the held-back photos,
    /// in this cost table's rows at the boundary (those rows only).
    #[arg(long, requires = "write")]
    cost_table: Option<std::path::PathBuf>,
    /// Weigh each channel's rebuild error by its sensitivity (the KL of the answer per unit
    /// noise the installed calibration measured there, the `s<level>` codecs' weights), so
    /// that the error counts as it moves the answer; without it every channel counts alike.
    #[arg(long)]
    sensitivity: bool,
}

/// The training views: their maps (position-major rows, one view after another) and the
/// teacher's logits.
struct Training {
    rows: Vec<f32>,
    logits: Vec<f32>,
    positions: usize,
}

/// `[1, C, H, W]` as position-major rows `[H·W, C]`.
fn rows_of(t: Tensor<4>) -> (Vec<f32>, usize) {
    let [_, c, h, w] = t.dims();
    let v = t.into_data().try_to_vec::<f32>().expect("f32 activations");
    let p = h * w;
    let mut out = vec![0f32; p * c];
    for k in 0..c {
        for i in 0..p {
            out[i * c + k] = v[k * p + i];
        }
    }
    (out, c)
}

/// Per channel, what its squared rebuild error counts (`weights`), scaled so that rebuilding
/// every channel as its mean costs 1: the loss is relative.
fn error_weights(rows: &[f32], c: usize, weights: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let n = rows.len() / c;
    let mean: Vec<f32> =
        (0..c).map(|j| rows.iter().skip(j).step_by(c).sum::<f32>() / n as f32).collect();
    let mut var = vec![0f32; c];
    for (i, v) in rows.iter().enumerate() {
        var[i % c] += (v - mean[i % c]).powi(2) / n as f32;
    }
    let total: f32 = weights.iter().zip(&var).map(|(w, v)| w * v).sum::<f32>() / c as f32;
    (weights.iter().map(|w| w / total.max(1e-12)).collect(), mean)
}

/// Train the coder on `rows` (`[n, c]`) to rebuild them, each channel's squared error
/// weighted by `weights`.
fn train(rows: &[f32], c: usize, k: usize, weights: &[f32], a: &Args, rng: &mut StdRng) -> Coder {
    let n = rows.len() / c;
    let (weights, mean) = error_weights(rows, c, weights);
    let mut coder = Coder::new(c, k, a.hidden, mean, rng);
    let mut adams = coder.optimizers();
    let device = Device::flex().autodiff();
    for step in 0..a.steps {
        let idx: Vec<usize> = (0..a.batch.min(n)).map(|_| rng.random_range(0..n)).collect();
        let x: Vec<f32> =
            idx.iter().flat_map(|&i| rows[i * c..(i + 1) * c].iter().copied()).collect();
        let b = idx.len();
        let leaves = coder.leaves(&device);
        let x = tensor2(&x, [b, c], &device);
        let y = coder.decode_with(&leaves, coder.encode_with(&leaves, x.clone()));
        let loss = ((y - x).square() * tensor2(&weights, [1, c], &device)).mean();
        let value = loss.clone().into_data().try_to_vec::<f32>().expect("f32 loss")[0];
        let grads = loss.backward();
        let lr = a.lr * 0.5 * (1.0 + (std::f32::consts::PI * step as f32 / a.steps as f32).cos());
        coder.step(&leaves, &grads, &mut adams, lr);
        if step % 200 == 0 || step + 1 == a.steps {
            eprintln!("train: c′ {k}: step {step}: relative error {value:.4}");
        }
    }
    coder
}

/// Train `coder` further through the rest of the network (frozen, on autodiff's plain-op
/// path): `T² · CE(softmax(z_t / T), softmax(z / T)) + 0.1 · relative squared error + rate ·
/// bits per original value`, T = 2, with uniform noise of one step at `a.distill_bits` on the
/// codes.
fn distill(
    coder: &mut Coder,
    range: &[(f32, f32)],
    data: &Training,
    tail: &EfficientNetLite0,
    a: &Args,
    rng: &mut StdRng,
) -> Result<()> {
    use burn::tensor::activation::{log_softmax, softmax};
    const T: f32 = 2.0;
    let (c, k, p) = (coder.c, coder.k, data.positions);
    let [_, h, w] = a.at.info().shape;
    let views = data.rows.len() / (p * c);
    let classes = data.logits.len() / views;
    let n = data.rows.len() as f32;
    let mean = data.rows.iter().sum::<f32>() / n;
    let var = data.rows.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n;
    let levels = ((1u32 << a.distill_bits) - 1) as f32;
    let steps: Vec<f32> = range.iter().map(|(lo, hi)| (hi - lo) / levels).collect();
    let device = Device::flex().autodiff();
    let mut adams = coder.optimizers();
    for step in 0..a.distill_steps {
        let pick: Vec<usize> = (0..a.distill_batch).map(|_| rng.random_range(0..views)).collect();
        let b = pick.len();
        let x: Vec<f32> = pick
            .iter()
            .flat_map(|&v| data.rows[v * p * c..(v + 1) * p * c].iter().copied())
            .collect();
        let teacher: Vec<f32> = pick
            .iter()
            .flat_map(|&v| data.logits[v * classes..(v + 1) * classes].iter().copied())
            .collect();
        let noise: Vec<f32> =
            (0..b * p * k).map(|i| steps[i % k] * rng.random_range(-0.5..0.5)).collect();
        let leaves = coder.leaves(&device);
        let xs = tensor2(&x, [b * p, c], &device);
        let z = coder.encode_with(&leaves, xs.clone()) + tensor2(&noise, [b * p, k], &device);
        let rate = rate_bits(z.clone(), &steps) * (k as f32 / c as f32);
        let y = coder.decode_with(&leaves, z);
        let rebuilt = (y.clone() - xs).square().mean() / var.max(1e-12);
        let map = y.reshape([b, p, c]).swap_dims(1, 2).reshape([b, c, h, w]);
        let logits = tail.forward_range(map, a.at, Boundary::LOGITS)?.reshape([b, classes]);
        let soft = softmax(tensor2(&teacher, [b, classes], &device) / T, 1);
        let cross = -(soft * log_softmax(logits / T, 1)).sum_dim(1).mean() * (T * T);
        let loss = cross + rebuilt * 0.1 + rate * a.rate;
        let value = loss.clone().into_data().try_to_vec::<f32>().expect("f32 loss")[0];
        let grads = loss.backward();
        let lr = 1e-3
            * 0.5
            * (1.0 + (std::f32::consts::PI * step as f32 / a.distill_steps as f32).cos());
        coder.step(&leaves, &grads, &mut adams, lr);
        if step % 25 == 0 || step + 1 == a.distill_steps {
            eprintln!("train: c′ {k}: distillation step {step}: loss {value:.4}");
        }
    }
    Ok(())
}

/// Train at every width, measure at every bit depth, print a table.
pub fn run(a: Args) -> Result<()> {
    if a.at <= Boundary::INPUT || a.at >= Boundary::POOL {
        bail!("--at: a boundary between stem and head");
    }
    if a.write.is_some() {
        if a.widths.len() != 1 {
            bail!("--write: one width in --widths (the coder written)");
        }
        if let Some(b) = a.bits.iter().find(|b| !SUPPORTED_BITS.contains(&(**b as u8))) {
            bail!("--write: {b} bits; the codec's depths are {SUPPORTED_BITS:?}");
        }
    }
    let weights = read_weights(&xtask::setup::ensure_weights()?)?;
    let device = Device::flex();
    let model = EfficientNetLite0::from_weights(&weights, &device)?;
    let (files, _) = a.photos.read()?;
    let (mut train_files, held) = split(&files);
    train_files.extend(a.extra.files()?);
    let [c, h, w] = a.at.info().shape;
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut rows = Vec::new();
    let mut train_logits = Vec::new();
    for path in &train_files {
        let img = split_shared::image::decode(&std::fs::read(path)?)?;
        for _ in 0..a.views {
            let x = split_shared::image::to_input_tensor(&augment(&img, &mut rng), &device);
            let map = model.forward_range(x, Boundary::INPUT, a.at)?;
            let logits = model.forward_range(map.clone(), a.at, Boundary::LOGITS)?;
            train_logits.extend(logits.into_data().try_to_vec::<f32>().expect("f32 logits"));
            rows.extend(rows_of(map).0);
        }
    }
    // Every held-back photo's map at the boundary and the whole network's answer.
    let mut held_maps = Vec::new();
    for path in &held {
        let img = split_shared::image::preprocess(&std::fs::read(path)?)?;
        let x = split_shared::image::to_input_tensor(&img, &device);
        let map = model.forward_range(x, Boundary::INPUT, a.at)?;
        let logits = model.forward_range(map.clone(), a.at, Boundary::LOGITS)?;
        let top = argmax(&logits.into_data().try_to_vec::<f32>().expect("f32 logits"));
        held_maps.push((rows_of(map).0, top));
    }
    eprintln!(
        "train: {} photos × {} views trained on ({} positions), {} held back",
        train_files.len(),
        a.views,
        rows.len() / c,
        held.len()
    );
    let data = Training { rows, logits: train_logits, positions: h * w };
    let channel_weights = if a.sensitivity {
        let path = xtask::setup::ensure_calibration()?;
        let cal = split_shared::codec::Calibration::load(&path)?;
        let name = a.at.info().name;
        let table = cal.at(name).and_then(|t| t.alloc.as_ref()).ok_or_else(|| {
            anyhow::anyhow!("--sensitivity: {} measured no sensitivities at {name}", path.display())
        })?;
        table.weight().to_vec()
    } else {
        vec![1.0; c]
    };
    let tail = (!a.distill_widths.is_empty())
        .then(|| {
            use burn::module::Module;
            EfficientNetLite0::from_weights(&weights, &Device::flex().autodiff())
                .map(Module::no_grad)
        })
        .transpose()?;
    println!(
        "| c′ | hidden | trained | bits | bits per original value, fixed / entropy coded | bytes per photo, fixed / entropy coded | top-1 agreement (held-back photos) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut runs = Vec::new();
    for &k in &a.widths {
        let coder = train(&data.rows, c, k, &channel_weights, &a, &mut rng);
        let range = ranges(&coder.encode(&data.rows, &device), k);
        if let Some(tail) = tail.as_ref().filter(|_| a.distill_widths.contains(&k)) {
            let mut distilled = coder.clone();
            distill(&mut distilled, &range, &data, tail, &a, &mut rng)?;
            // Trained with a rate, the codes keep their steps: new ranges would rescale them to
            // as many levels as before and undo what the rate saved.
            let after = if a.rate > 0.0 {
                range.clone()
            } else {
                ranges(&distilled.encode(&data.rows, &device), k)
            };
            runs.push((coder, range, "rebuild"));
            runs.push((
                distilled,
                after,
                if a.rate > 0.0 { "+ distilled, rate" } else { "+ distilled" },
            ));
        } else {
            runs.push((coder, range, "rebuild"));
        }
    }
    for (coder, range, how) in &runs {
        let k = coder.k;
        let train_codes = coder.encode(&data.rows, &device);
        for &bits in &a.bits {
            // The entropy model's tables from the training views' levels.
            let levels = LevelModel::fit(&quantize(&mut train_codes.clone(), range, bits), k, bits);
            let (mut agree, mut coded_bits) = (0u32, 0f64);
            for (map, top) in &held_maps {
                let mut z = coder.encode(map, &device);
                coded_bits += levels.bits(&quantize(&mut z, range, bits));
                let back = coder.decode(&z, &device);
                // Back to `[1, C, H, W]` for the rest of the network.
                let chw = super::learned::planes(&back, c);
                let x = Tensor::<4>::from_data(TensorData::new(chw, [1, c, h, w]), &device);
                let logits = model.forward_range(x, a.at, Boundary::LOGITS)?;
                agree += u32::from(
                    argmax(&logits.into_data().try_to_vec::<f32>().expect("f32 logits")) == *top,
                );
            }
            let n = held_maps.len() as u32;
            let coded = coded_bits / f64::from(n);
            println!(
                "| {k} | {} | {how} | {bits} | {:.2} / {:.2} | {:.0} / {:.0} | {:.1}% ({agree}/{n}), ≥ {:.1}% |",
                a.hidden,
                (k as f64 * f64::from(bits)) / c as f64,
                coded / (c * h * w) as f64,
                (k * h * w) as f64 * f64::from(bits) / 8.0,
                coded / 8.0,
                100.0 * f64::from(agree) / f64::from(n),
                100.0 * wilson_lower(agree, n)
            );
        }
    }
    if let Some(path) = &a.write {
        let (coder, range, _) = runs.last().expect("one width trained");
        let codes = coder.encode(&data.rows, &device);
        let bits: Vec<u8> = a.bits.iter().map(|b| *b as u8).collect();
        let held: Vec<(&[f32], usize)> =
            held_maps.iter().map(|(m, t)| (m.as_slice(), *t)).collect();
        let out =
            super::learned::Outputs { calibration: path, cost_table: a.cost_table.as_deref() };
        super::learned::write(&out, a.at, &bits, coder, range, &codes, &held, &model)?;
    }
    Ok(())
}
