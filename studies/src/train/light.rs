//! `./run.sh train light`: a light model for outages that costs less compute: the whole
//! network on a smaller input, distilled from the network at 224.
//!
//! Every stage of EfficientNet-Lite0 is a convolution or a mean over the map, so the same
//! weights run on a 128×128 input at a third of the multiply-accumulates
//! ([`split_shared::model::macs_at`]), and the classifier keeps all 1,000 classes in reach
//! (a head trained on one photo per class does not: the early exits, [`super::exits`]). A
//! smaller input shifts each channel's level (the objects are fewer pixels across), and a
//! bias is what moves a level, so by default only the convolutions' biases are trained
//! (21,008 numbers against 4.6 million weights, each shared by every class: what photos of
//! 366 classes might teach without teaching the classes); `--all` trains their weights too.
//! The classifier is never trained (its bias is one number a class). The loss is the
//! divergence of the student's answer on the view at `--size` from the whole network's on
//! the same view at 224, on burn's autodiff (the plain-op path). What it measured:
//! docs/training.md, "A light model on a smaller input".

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Gradients, Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;
use split_shared::container::TensorFile;
use split_shared::image::{RgbImage, center_crop_resize, resize_bicubic, to_input_tensor};
use split_shared::model::{
    Boundary, DEFAULT_LIGHT, EfficientNetLite0, INPUT_SIZE, MAX_BATCH, MIN_INPUT_SIZE, NUM_CLASSES,
    WEIGHTS_MAGIC, light_shards, macs_at, read_weights,
};
use split_shared::plan::wilson_lower;

use super::data::{augment, halves, listing, split};
use super::head::argmax;
use crate::adam::Adam;

/// Training photos whose centre crops show how well training fits.
const FIT_PHOTOS: usize = 100;

/// The reduced-input light model, trained by distillation on the dev photos not held back.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    photos: crate::eval::Photos,
    #[command(flatten)]
    extra: super::data::Extra,
    /// The input side the light model runs at (its cost in proportion to the maps' area).
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// The last stage trained (its biases, or all with `--all`; the classifier never).
    #[arg(long, default_value = "head")]
    through: Boundary,
    /// The temperature both answers are softened at.
    #[arg(long, default_value_t = 1.0)]
    temperature: f32,
    /// Train the convolutions' weights too, not only their biases.
    #[arg(long)]
    all: bool,
    /// Input sides the untrained network is measured at for comparison.
    #[arg(long, value_delimiter = ',', default_value = "160,144,128")]
    compare: Vec<usize>,
    /// Adam steps.
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Views a step (random resized crops of random training photos).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Adam's step size (cosine-decayed to zero).
    #[arg(long, default_value_t = 1e-3)]
    lr: f32,
    /// The seed of every random choice (views, photos).
    #[arg(long, default_value_t = 36)]
    seed: u64,
    /// Output weights file; default next to the weights,
    /// `efficientnet-lite0-light<size>.splw`.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// A parameter's name in the weights file: its path in the module (`blocks.3.expand.bias`;
/// every field, the parameter's own included, enters the path), which the loader names the
/// same way.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    fn enter(&mut self, name: &str) {
        self.0.push(name.to_string());
    }
    fn exit(&mut self) {
        self.0.pop();
    }
    fn name(&self) -> String {
        self.0.join(".")
    }
}

/// The boundary the stage a parameter path belongs to ends at (`blocks.3.…`: block3).
fn stage_of(path: &[String]) -> Option<Boundary> {
    match path.first().map(String::as_str) {
        Some("stem") => Some(Boundary::STEM),
        Some("blocks") => Boundary::block(path.get(1)?.parse().ok()?).ok(),
        Some("head") => Some(Boundary::HEAD),
        _ => None,
    }
}

/// Only the convolutions' biases of the stages up to `through` keep their gradient: not the
/// weights, and never the classifier's bias, one number per class, which photos of 366
/// classes would teach to favour those classes.
struct FreezeWeights {
    path: Path,
    through: Boundary,
    all: bool,
    /// Numbers left to train.
    trained: usize,
}

impl ModuleMapper for FreezeWeights {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let trained =
            (D == 1 || self.all) && stage_of(&self.path.0).is_some_and(|b| b <= self.through);
        if trained {
            self.trained += param.val().dims().iter().product::<usize>();
            param
        } else {
            param.set_require_grad(false)
        }
    }
}

/// One Adam step on every trained parameter (the biases, or all with `--all`), from the
/// gradients of a backward pass.
struct Step<'a> {
    path: Path,
    grads: &'a Gradients,
    adam: &'a mut HashMap<String, Adam>,
    lr: f32,
    /// Parameters moved.
    moved: usize,
}

impl ModuleMapper for Step<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let name = self.path.name();
        let value = param.val();
        let Some(grad) = value.grad(self.grads) else { return param };
        let dims = value.dims();
        let device = value.device();
        let mut x = value.into_data().try_to_vec::<f32>().expect("f32 parameter");
        let g = grad.into_data().try_to_vec::<f32>().expect("f32 gradient");
        self.adam.entry(name).or_insert_with(|| Adam::new(x.len())).step(&mut x, &g, self.lr);
        self.moved += 1;
        let t = Tensor::from_data(TensorData::new(x, dims), &device).require_grad();
        Param::initialized(param.id, t)
    }
}

/// Every parameter of the convolutions (not the classifier's, never trained) by its name in
/// the weights file, as the module holds it: its values and dims.
#[derive(Default)]
struct Convolutions {
    path: Path,
    values: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl ModuleVisitor for Convolutions {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if stage_of(&self.path.0).is_some() {
            let v = param.val();
            let dims = v.dims().to_vec();
            let values = v.into_data().try_to_vec::<f32>().expect("f32 parameter");
            self.values.push((self.path.name(), dims, values));
        }
    }
}

/// A convolution's parameter from the module's layout (a device without the fused kernels:
/// 1×1 weights as one `[1, c_in, c_out]` panel) back to the weights file's (PyTorch's
/// `[c_out, c_in, k, k]`), the loader's reordering undone.
fn file_layout(name: &str, stored: &[usize], dims: &[usize], t: &[f32]) -> Result<Vec<f32>> {
    let mut w = vec![0f32; t.len()];
    match stored {
        [_] => w.copy_from_slice(t),
        &[c_out, c_in, k, _] if name == "stem.weight" => {
            let kk = k * k;
            for o in 0..c_out {
                for i in 0..c_in {
                    for tap in 0..kk {
                        w[(o * c_in + i) * kk + tap] = t[(tap * c_in + i) * c_out + o];
                    }
                }
            }
        }
        &[c, 1, k, _] if name.ends_with("depthwise.weight") => {
            let kk = k * k;
            for ch in 0..c {
                for tap in 0..kk {
                    w[ch * kk + tap] = t[tap * c + ch];
                }
            }
        }
        &[c_out, c_in, 1, 1] if dims == [1, c_in, c_out] => {
            for o in 0..c_out {
                for i in 0..c_in {
                    w[o * c_in + i] = t[i * c_out + o];
                }
            }
        }
        _ => bail!("{name}: no way back from {dims:?} to the file's {stored:?}"),
    }
    Ok(w)
}

/// The weights with the student's convolutions in place of the teacher's.
fn trained_weights(weights: &TensorFile, student: &EfficientNetLite0) -> Result<TensorFile> {
    let mut convs = Convolutions::default();
    student.visit(&mut convs);
    let stored: HashMap<&str, Vec<usize>> =
        weights.iter().map(|(n, d, _)| (n, d.to_vec())).collect();
    let mut out = weights.clone();
    for (name, dims, values) in convs.values {
        let file_dims =
            stored.get(name.as_str()).with_context(|| format!("{name}: not in the weights"))?;
        let w = file_layout(&name, file_dims, &dims, &values)?;
        out.insert(name, file_dims.clone(), w);
    }
    Ok(out)
}

/// `[n, 1000]` logits of `imgs` (any number, run `MAX_BATCH` at a time) at their own size.
fn logits_of(model: &EfficientNetLite0, imgs: &[RgbImage], device: &Device) -> Result<Tensor<2>> {
    let mut parts = Vec::new();
    for chunk in imgs.chunks(MAX_BATCH) {
        let x = Tensor::cat(chunk.iter().map(|i| to_input_tensor(i, device)).collect(), 0);
        parts.push(model.forward_at(x)?.reshape([chunk.len(), NUM_CLASSES]));
    }
    Ok(Tensor::cat(parts, 0))
}

/// The distillation loss: the divergence (KL) of the student's answer from the teacher's,
/// both softened at `t`, × T² (the gradient's scale of a hard label), mean over
/// views; 0 when they answer alike.
fn loss(student: Tensor<2>, teacher: Tensor<2>, t: f32) -> Tensor<1> {
    let n = student.dims()[0] as f32;
    let log_target = log_softmax(teacher / t, 1);
    let log_p = log_softmax(student / t, 1);
    (log_target.clone().exp() * (log_target - log_p)).sum() * (t * t / n)
}

/// One Adam step of `student` (on `device`, an autodiff one) towards the teacher's logits `target`
/// on `views` (the student's inputs); returns the student after it and the loss before it.
fn distill_step(
    student: EfficientNetLite0,
    device: &Device,
    views: &[RgbImage],
    target: Tensor<2>,
    temperature: f32,
    lr: f32,
    adam: &mut HashMap<String, Adam>,
) -> Result<(EfficientNetLite0, f32)> {
    let target = Tensor::<2>::from_data(target.into_data(), device);
    let l = loss(logits_of(&student, views, device)?, target, temperature);
    let value = l.clone().into_data().try_to_vec::<f32>().expect("f32 loss")[0];
    let grads = l.backward();
    let mut step = Step { path: Path::default(), grads: &grads, adam, lr, moved: 0 };
    let student = student.map(&mut step);
    if step.moved == 0 {
        bail!("no parameter had a gradient");
    }
    Ok((student, value))
}

/// How a model answers the held-back photos: agreeing top-1s and milliseconds an answer.
fn agreement(
    model: &EfficientNetLite0,
    photos: &[(RgbImage, usize)],
    size: usize,
    device: &Device,
) -> Result<(u32, f64)> {
    let (mut agree, mut secs) = (0u32, 0f64);
    for (img, want) in photos {
        let view = center_crop_resize(img, size);
        let start = Instant::now();
        let z = logits_of(model, std::slice::from_ref(&view), device)?;
        secs += start.elapsed().as_secs_f64();
        let z = z.into_data().try_to_vec::<f32>().expect("f32 logits");
        agree += u32::from(argmax(&z) == *want);
    }
    Ok((agree, 1e3 * secs / photos.len().max(1) as f64))
}

/// Decoded photos with the whole network's answer on each centre crop.
fn answered(teacher: &EfficientNetLite0, files: &[PathBuf]) -> Result<Vec<(RgbImage, usize)>> {
    let device = Device::flex();
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let img = split_shared::image::decode(&bytes)?;
            let z =
                teacher.forward(to_input_tensor(&center_crop_resize(&img, INPUT_SIZE), &device))?;
            Ok((img, argmax(&z.into_data().try_to_vec::<f32>().expect("f32 logits"))))
        })
        .collect()
}

/// Train, measure against the untrained network at the same size and today's int8 light
/// model, and write the weights.
pub fn run(a: Args) -> Result<()> {
    for size in a.compare.iter().chain([&a.size]) {
        if !(MIN_INPUT_SIZE..INPUT_SIZE).contains(size) {
            bail!("--size, --compare: from {MIN_INPUT_SIZE} to {}, not {size}", INPUT_SIZE - 1);
        }
    }
    let weights = read_weights(&xtask::setup::ensure_weights()?)?;
    let flex = Device::flex();
    let teacher = EfficientNetLite0::from_weights(&weights, &flex)?;
    let (files, _) = a.photos.read()?;
    let (dev_train, held) = split(&files);
    let extra = a.extra.files()?;
    let train_files: Vec<PathBuf> = dev_train.iter().chain(&extra).cloned().collect();
    // The held-back photos in two halves: one watched while training, the other reported.
    let (watch, report) = halves(&held);
    eprintln!(
        "train: {} photos trained on ({} of them extra), {} held back to watch, {} to report; input {}×{}",
        train_files.len(),
        extra.len(),
        watch.len(),
        report.len(),
        a.size,
        a.size
    );
    let train_imgs: Vec<RgbImage> = train_files
        .iter()
        .map(|f| Ok(split_shared::image::decode(&std::fs::read(f)?)?))
        .collect::<Result<_>>()?;
    let watch = answered(&teacher, &watch)?;
    let report = answered(&teacher, &report)?;
    let fit = answered(&teacher, &train_files[..train_files.len().min(FIT_PHOTOS)])?;

    let ad = flex.clone().autodiff();
    let mut freeze =
        FreezeWeights { path: Path::default(), through: a.through, all: a.all, trained: 0 };
    let mut student = EfficientNetLite0::from_weights(&weights, &ad)?.map(&mut freeze);
    eprintln!("train: {} numbers trained (through {})", freeze.trained, a.through);
    let mut adam = HashMap::new();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let started = Instant::now();
    for step in 0..a.steps {
        let views: Vec<RgbImage> = (0..a.batch)
            .map(|_| {
                augment(
                    &train_imgs[rand::Rng::random_range(&mut rng, 0..train_imgs.len())],
                    &mut rng,
                )
            })
            .collect();
        let small: Vec<RgbImage> =
            views.iter().map(|v| resize_bicubic(v, a.size, a.size)).collect();
        let target = logits_of(&teacher, &views, &flex)?;
        let lr = a.lr * 0.5 * (1.0 + (std::f32::consts::PI * step as f32 / a.steps as f32).cos());
        let value;
        (student, value) =
            distill_step(student, &ad, &small, target, a.temperature, lr, &mut adam)?;
        if step % 50 == 0 || step + 1 == a.steps {
            let (watched, _) = agreement(&student, &watch, a.size, &ad)?;
            let (fitted, _) = agreement(&student, &fit, a.size, &ad)?;
            eprintln!(
                "train: step {step}: loss {value:.4}; agreement held back {watched}/{}, trained on {fitted}/{} ({:.0} s)",
                watch.len(),
                fit.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let trained = trained_weights(&weights, &student)?;
    let command =
        format!("./run.sh train {}", std::env::args().skip(2).collect::<Vec<_>>().join(" "));
    let mut file = trained.clone();
    file.insert_text("meta.command", command.trim());
    file.insert("meta.input_size", vec![1], vec![a.size as f32]);
    file.insert_text("meta.photos", &listing(&dev_train, &extra));
    let path = a.out.clone().unwrap_or_else(|| {
        split_paths::weights_file()
            .with_file_name(format!("efficientnet-lite0-light{}.splw", a.size))
    });
    std::fs::write(&path, file.to_bytes(WEIGHTS_MAGIC))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("train: wrote {}", path.display());

    // One table: the whole network, today's int8 light model (the same network), the
    // untrained network on smaller inputs, and the trained one, in f32 and int8.
    let int8 = |w: &TensorFile| -> Result<EfficientNetLite0> {
        let mut m = EfficientNetLite0::empty();
        for (b, bytes) in light_shards(w, DEFAULT_LIGHT) {
            m.load_light_stage_bytes(b, &bytes, &flex)?;
        }
        Ok(m)
    };
    let shard_bytes: usize =
        light_shards(&weights, DEFAULT_LIGHT).iter().map(|(_, b)| b.len()).sum();
    let full_macs = macs_at(INPUT_SIZE) as f64;
    let n = report.len() as u32;
    println!("held-back photos: {n}, centre crops, top-1 against the whole network at 224");
    println!("| model | input | MACs | int8 bytes | agreement | ≥ (95%) | native ms an answer |");
    println!("|---|---|---|---|---|---|---|");
    let trained_name = if a.all { "all convolutions distilled" } else { "biases distilled" };
    let today = int8(&weights)?;
    let mut rows: Vec<(String, EfficientNetLite0, usize)> = vec![
        (
            "whole network, f32".into(),
            EfficientNetLite0::from_weights(&weights, &flex)?,
            INPUT_SIZE,
        ),
        ("int8 light model (today's)".into(), today.clone(), INPUT_SIZE),
    ];
    for &size in &a.compare {
        rows.push(("untrained".into(), EfficientNetLite0::from_weights(&weights, &flex)?, size));
    }
    // What the browser's `lightInput` runs: today's light model, untrained, on the smaller input.
    rows.push(("int8 light model (today's), untrained".into(), today, a.size));
    rows.push((trained_name.into(), EfficientNetLite0::from_weights(&trained, &flex)?, a.size));
    rows.push((format!("{trained_name}, int8"), int8(&trained)?, a.size));
    for (name, model, size) in rows {
        let (agree, ms) = agreement(&model, &report, size, &flex)?;
        let macs = macs_at(size) as f64;
        println!(
            "| {name} | {size} | {:.0}M ({:.0}%) | {shard_bytes} | {:.1}% ({agree}/{n}) | {:.1}% | {ms:.1} |",
            macs / 1e6,
            100.0 * macs / full_macs,
            100.0 * f64::from(agree) / f64::from(n),
            100.0 * wilson_lower(agree, n),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights() -> TensorFile {
        read_weights(&split_paths::weights_file())
            .unwrap_or_else(|e| panic!("these tests need the pretrained weights: {e}"))
    }

    /// The chelsea fixture (the reference's 224×224 input).
    fn chelsea() -> RgbImage {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/tests/data/chelsea_224.rgb");
        RgbImage::new(224, 224, std::fs::read(path).expect("fixture")).expect("224×224 RGB")
    }

    fn student(weights: &TensorFile, all: bool) -> EfficientNetLite0 {
        let device = Device::flex().autodiff();
        let mut freeze =
            FreezeWeights { path: Path::default(), through: Boundary::HEAD, all, trained: 0 };
        EfficientNetLite0::from_weights(weights, &device).unwrap().map(&mut freeze)
    }

    /// Every convolution's parameter read back from the module (the layout of a device
    /// without the kernels) is the file's, bit for bit: the names and the loader's reordering
    /// undone.
    #[test]
    fn the_students_parameters_read_back_as_the_file_holds_them() {
        let weights = weights();
        assert_eq!(trained_weights(&weights, &student(&weights, true)).unwrap(), weights);
    }

    /// Steps on one view bring the student's answer at 64×64 towards the teacher's at 224,
    /// and move the biases only.
    #[test]
    fn distilling_the_biases_lowers_the_loss_and_leaves_the_weights() {
        let weights = weights();
        let flex = Device::flex();
        let ad = flex.clone().autodiff();
        let teacher = EfficientNetLite0::from_weights(&weights, &flex).unwrap();
        let view = chelsea();
        let target = logits_of(&teacher, std::slice::from_ref(&view), &flex).unwrap();
        let small = [resize_bicubic(&view, 64, 64)];
        let (mut model, mut adam, mut losses) = (student(&weights, false), HashMap::new(), vec![]);
        for _ in 0..20 {
            let loss;
            (model, loss) =
                distill_step(model, &ad, &small, target.clone(), 1.0, 1e-2, &mut adam).unwrap();
            losses.push(loss);
        }
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        assert!(last < 0.5 * first, "{losses:?}");
        let trained = trained_weights(&weights, &model).unwrap();
        let before: HashMap<&str, &[f32]> = weights.iter().map(|(n, _, v)| (n, v)).collect();
        let mut moved = 0;
        for (name, _, now) in trained.iter() {
            let same = before[name] == now;
            if name.ends_with(".weight") || name == "fc.bias" {
                assert!(same, "{name} moved");
            } else {
                moved += usize::from(!same);
            }
        }
        // The stem's, each block's two or three and the head's.
        assert!(moved > 40, "{moved} biases moved");
    }
}
