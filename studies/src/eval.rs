//! `./run.sh eval`: split inference over a folder of images, the way the product runs it.
//!
//! For every image: preprocess, run the edge half to the split, encode the frame the browser would
//! send, decode it as the server does, run the cloud half, and compare with the unsplit network
//! (and, when given, with labels and with another implementation's top-1 predictions).
//!
//! `./run.sh eval --help` lists the options. `--codecs` lists codec settings (`f32`, `q<bits>[-r<rank>][-packed]`, `s<level>`); a rank written `/k`
//! means "channels / k" at each split. Every (split, codec) pair gets a row with bytes per image,
//! bits per value, ratios to f32 and to a JPEG (quality 90) of the 224x224 input, agreement with
//! the unsplit model, accuracy, and codec encode/decode time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor};
use split_shared::codec::{Calibration, DecodeContext, EncodeContext, Setting, StreamDecoder};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, Features};
use split_shared::protocol::Request;

use xtask::setup;

/// Split inference over a folder of images, the way the product runs it.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of JPEG/PNG images (e.g. `web/samples`).
    #[arg(long)]
    images: PathBuf,
    /// `file,class` labels; default `<images>/labels.csv` when it exists.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Boundaries to split at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "block5")]
    splits: Vec<Boundary>,
    /// Skip the first N images (sorted by name).
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Use at most N images.
    #[arg(long, default_value_t = usize::MAX, hide_default_value = true)]
    limit: usize,
    /// Codec settings: `f32`, `q<bits>[-r<rank>][-packed]`, `s<level>`; a rank `/k` means
    /// channels / k.
    #[arg(long, value_delimiter = ',', default_value = "f32")]
    codecs: Vec<String>,
    /// Calibration file; default: the one setup writes.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Another implementation's predictions (`file,top1`) to measure agreement with.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Weights file; default: the one setup writes.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Noise added to the features before they are coded (the privacy option):
    /// `gauss:<scale>` or `laplace:<scale>`, a fraction of each channel's calibrated range.
    #[arg(long)]
    noise: Option<split_shared::codec::Noise>,
    /// Also draw the rate curves: `<PREFIX>-agreement.svg` (answers changed against bits per
    /// value) and `<PREFIX>-kl.svg` (mean KL of the answers, −log10), a series per split and
    /// codec family.
    #[arg(long, value_name = "PREFIX")]
    svg: Option<PathBuf>,
}

/// `file,class_index,...` rows (a header line is allowed first); also reads `file,top1`
/// prediction files.
///
/// # Errors
/// A row without a class, or whose class is not an integer, names its line: a label silently
/// dropped would skew every accuracy figure.
pub(crate) fn read_csv_classes(path: &PathBuf) -> Result<HashMap<String, usize>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_csv_classes(&text).with_context(|| format!("in {}", path.display()))
}

fn parse_csv_classes(text: &str) -> Result<HashMap<String, usize>> {
    let mut out = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut f = line.splitn(3, ',');
        let file = f.next().unwrap_or_default().trim();
        let class = f.next().map(str::trim);
        match class.map(str::parse::<usize>) {
            Some(Ok(c)) => {
                out.insert(file.to_string(), c);
            }
            // A header: the first line, naming its columns.
            Some(Err(_)) if i == 0 => {}
            Some(Err(_)) => bail!("line {}: class {:?} is not an integer", i + 1, class.unwrap()),
            None => bail!("line {}: expected `file,class`, got {line:?}", i + 1),
        }
    }
    Ok(out)
}

/// The class of each labelled photo, by file name (`labels.csv`).
pub type Labels = HashMap<String, usize>;

/// A folder of labelled photos, as the studies that walk one take it.
#[derive(clap::Args, Debug)]
pub struct Photos {
    /// Folder of JPEG/PNG images (e.g. ../shared/data/imagenet-dev); `labels.csv` there is read.
    #[arg(long)]
    pub images: PathBuf,
    /// Use at most N images (sorted by name).
    #[arg(long, default_value_t = usize::MAX, hide_default_value = true)]
    pub limit: usize,
}

impl Photos {
    /// The files to use (at least one), and the class of each labelled one by file name.
    pub fn read(&self) -> Result<(Vec<PathBuf>, Option<Labels>)> {
        let labels = self.images.join("labels.csv");
        let labels = labels.exists().then(|| read_csv_classes(&labels)).transpose()?;
        let mut files = image_files(&self.images)?;
        files.truncate(self.limit);
        if files.is_empty() {
            bail!("no .jpg or .png images in {}", self.images.display());
        }
        Ok((files, labels))
    }
}

/// The JPEG and PNG files of `dir`, sorted by name.
pub(crate) fn image_files(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_image(p))
        .collect();
    files.sort();
    Ok(files)
}

/// Whether a file is a photo the tools read, by its extension.
pub(crate) fn is_image(p: &std::path::Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("jpg" | "jpeg" | "png" | "JPEG"))
}

fn logits_of(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 logits")
}

#[derive(Default)]
struct Tally {
    n: usize,
    top1: usize,
    top5: usize,
    agree_full: usize,
    /// Summed KL(unsplit ‖ split) of the answers, nats.
    kl: f64,
    bytes: usize,
    payload: usize,
    values: usize,
    jpeg: usize,
    edge_s: f64,
    encode_s: f64,
    decode_s: f64,
    cloud_s: f64,
}

/// A codec name with `-r/k` resolved to `channels / k` at `split` (at most the calibrated rank).
pub(crate) fn setting_at(
    name: &str,
    split: Boundary,
    calibration: Option<&Calibration>,
) -> Result<Setting> {
    let max_rank = calibration
        .and_then(|c| c.at(split.name()))
        .and_then(|t| t.pca.as_ref())
        .map_or(usize::MAX, |p| p.projection.max_rank);
    let resolved = match name.split_once("-r/") {
        Some((head, rest)) => {
            let (k, tail) = rest.split_once('-').map_or((rest, ""), |(k, t)| (k, t));
            let rank = (split.info().shape[0] / k.parse::<usize>()?.max(1)).min(max_rank);
            let tail = if tail.is_empty() { String::new() } else { format!("-{tail}") };
            format!("{head}-r{}{tail}", rank.max(1))
        }
        None => name.to_string(),
    };
    Ok(resolved.parse()?)
}

/// Encode activations into a request frame exactly as the browser does.
pub fn encode_as_edge(
    id: u64,
    features: &Features,
    setting: Setting,
    calibration: Option<&Calibration>,
    stream: Option<&mut split_shared::codec::StreamEncoder>,
) -> Result<Vec<u8>> {
    let ctx = EncodeContext::new(calibration).with_stream(stream);
    let frame = features.to_frame(setting, ctx)?;
    Ok(Request::Features { id, frame }.to_bytes())
}

/// Decode a request frame exactly as the server does; returns the activations and the
/// payload's length.
pub fn decode_as_server(
    frame: &[u8],
    calibration: Option<&Calibration>,
    streams: Option<&mut StreamDecoder>,
) -> Result<(Features, usize)> {
    let Request::Features { frame, .. } = Request::decode(frame)? else {
        bail!("not a features frame");
    };
    let ctx = DecodeContext::new(calibration).with_streams(streams);
    Ok((Features::from_frame(&frame, ctx)?, frame.payload.len()))
}

/// Bytes of a quality-90 JPEG of the preprocessed input: what a plain app would upload.
pub fn jpeg_q90_len(img: &split_shared::image::RgbImage) -> Result<usize> {
    Ok(split_shared::image::encode_jpeg(img, 90)?.len())
}

/// Which calibration a run used, for its report: the file, its id, and what it was fitted on
/// (figures measured on photos the calibration saw flatter it).
pub fn describe_calibration(path: &std::path::Path, c: &Calibration) -> String {
    let shipped = std::fs::read(setup::shipped_calibration())
        .ok()
        .and_then(|b| Calibration::from_bytes(&b).ok())
        .is_some_and(|s| s.id() == c.id());
    format!(
        "calibration: {} ({:016x}{}): fitted on {} images, channel sensitivities on {}",
        path.display(),
        c.id(),
        if shipped { ", the shipped one" } else { "" },
        c.images(),
        match c.sensitivity_images() {
            0 => "an unrecorded number".to_string(),
            n => n.to_string(),
        }
    )
}

/// Run the evaluation and print a table.
pub fn run(mut o: Args) -> Result<()> {
    if o.labels.is_none() && o.images.join("labels.csv").exists() {
        o.labels = Some(o.images.join("labels.csv"));
    }
    let weights_path = match &o.weights {
        Some(p) => p.clone(),
        None => setup::ensure_weights()?,
    };
    let device = Device::flex();
    let model = EfficientNetLite0::load(&weights_path, &device)?;
    let labels = o.labels.as_ref().map(read_csv_classes).transpose()?;
    let needs_calibration = o.codecs.iter().any(|c| c != "f32") || o.noise.is_some();
    let calibration = match (&o.calibration, needs_calibration) {
        (_, false) => None,
        (Some(p), true) => Some(p.clone()),
        (None, true) => Some(setup::ensure_calibration()?),
    }
    .map(|p| -> Result<(PathBuf, Calibration)> {
        let c = Calibration::load(&p)?;
        Ok((p, c))
    })
    .transpose()?;
    let calibration_line = calibration.as_ref().map(|(p, c)| describe_calibration(p, c));
    let calibration = calibration.map(|(_, c)| c);
    let reference = o.reference.as_ref().map(read_csv_classes).transpose()?;

    let files: Vec<PathBuf> =
        image_files(&o.images)?.into_iter().skip(o.skip).take(o.limit).collect();
    if files.is_empty() {
        bail!("no .jpg or .png images in {}", o.images.display());
    }

    let mut splits = o.splits.clone();
    splits.sort();
    splits.dedup();
    let rows: Vec<(Boundary, String)> =
        splits.iter().flat_map(|s| o.codecs.iter().map(move |c| (*s, c.clone()))).collect();
    let mut tallies: Vec<Tally> = rows.iter().map(|_| Tally::default()).collect();
    let (mut full_top1, mut ref_agree, mut ref_n, mut labelled) = (0, 0, 0, 0);
    let mut ref_disagreements = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let img = split_shared::image::preprocess(&std::fs::read(path)?)
            .with_context(|| format!("preprocessing {name}"))?;
        let input = split_shared::image::to_input_tensor(&img, &device);
        let full_logits = logits_of(model.forward(input.clone())?);
        let full = top_k(&full_logits, 5);
        let label = labels.as_ref().and_then(|l| l.get(&name)).copied();
        if let Some(l) = label {
            labelled += 1;
            full_top1 += usize::from(full[0].class as usize == l);
        }
        if let Some(r) = reference.as_ref().and_then(|r| r.get(&name)) {
            ref_n += 1;
            ref_agree += usize::from(full[0].class as usize == *r);
            if full[0].class as usize != *r {
                let margin = full[0].prob - full[1].prob;
                ref_disagreements.push(format!(
                    "{name}: ours {} (p {:.3}, margin {margin:.3}), reference {r}",
                    full[0].class, full[0].prob
                ));
            }
        }
        let jpeg = jpeg_q90_len(&img)?;
        // Run the edge forward once, stage by stage, timing the prefix up to each split.
        let mut x = input.clone();
        let (mut at, mut edge_s) = (Boundary::INPUT, 0.0);
        for split in &splits {
            let start = Instant::now();
            x = model.forward_range(x, at, *split)?;
            let mut features = Features::from_tensor(*split, x.clone())?;
            edge_s += start.elapsed().as_secs_f64();
            if let (Some(noise), Some(c)) = (o.noise, calibration.as_ref()) {
                features = features.with_noise(noise, c, i as u64)?;
            }
            at = *split;
            for ((_, codec), t) in rows.iter().zip(&mut tallies).filter(|((s, _), _)| s == split) {
                let setting = setting_at(codec, *split, calibration.as_ref())?;
                let start = Instant::now();
                let frame =
                    encode_as_edge(i as u64, &features, setting, calibration.as_ref(), None)?;
                t.encode_s += start.elapsed().as_secs_f64();
                let start = Instant::now();
                let (decoded, payload_len) = decode_as_server(&frame, calibration.as_ref(), None)?;
                t.decode_s += start.elapsed().as_secs_f64();
                let start = Instant::now();
                let x = decoded.to_tensor(&device);
                let logits = logits_of(model.forward_range(x, *split, Boundary::LOGITS)?);
                let top = top_k(&logits, 5);
                t.kl += kl_divergence(&full_logits, &logits);
                t.cloud_s += start.elapsed().as_secs_f64();
                t.edge_s += edge_s;
                t.n += 1;
                t.bytes += frame.len();
                t.payload += payload_len;
                t.values += features.values().len();
                t.jpeg += jpeg;
                t.agree_full += usize::from(top[0].class == full[0].class);
                if let Some(l) = label {
                    t.top1 += usize::from(top[0].class as usize == l);
                    t.top5 += usize::from(top.iter().any(|p| p.class as usize == l));
                }
            }
        }
        if (i + 1) % 50 == 0 {
            eprintln!("eval: {}/{} images", i + 1, files.len());
        }
    }

    let pct = |a: usize, b: usize| if b == 0 { f64::NAN } else { 100.0 * a as f64 / b as f64 };
    // Without labels there is no accuracy: a dash, not "NaN%".
    let accuracy =
        |a: usize, b: usize| if b == 0 { "–".to_string() } else { format!("{:.1}%", pct(a, b)) };
    println!("images: {} from {}", files.len(), o.images.display());
    if let Some(line) = &calibration_line {
        println!("{line}");
    }
    if let Some(noise) = o.noise {
        println!("noise: {noise} added to the features before coding");
    }
    if labelled > 0 {
        println!(
            "unsplit model top-1 accuracy: {:.1}% ({full_top1}/{labelled})",
            pct(full_top1, labelled)
        );
    }
    if ref_n > 0 {
        println!(
            "top-1 agreement with reference predictions: {:.2}% ({ref_agree}/{ref_n})",
            pct(ref_agree, ref_n)
        );
        for d in &ref_disagreements {
            println!("  differs: {d}");
        }
    }
    println!(
        "| split | codec | bytes/image | bits/value | vs f32 | vs JPEG q90 | agreement | 95% interval | KL, nats | top-1 | top-5 | edge ms | encode ms | decode ms | cloud ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for ((split, codec), t) in rows.iter().zip(&tallies) {
        let n = t.n.max(1) as f64;
        println!(
            "| {split} | {codec} | {} | {:.3} | {:.1}x | {:.3} | {:.2}% | {:.1}–{:.1}% | {:.2e} | {} | {} | {:.1} | {:.2} | {:.2} | {:.1} |",
            t.bytes / t.n.max(1),
            8.0 * t.payload as f64 / t.values.max(1) as f64,
            (4 * t.values) as f64 / t.payload.max(1) as f64,
            t.bytes as f64 / t.jpeg.max(1) as f64,
            pct(t.agree_full, t.n),
            100.0 * wilson(t.agree_full, t.n).0,
            100.0 * wilson(t.agree_full, t.n).1,
            t.kl / n,
            accuracy(t.top1, labelled),
            accuracy(t.top5, labelled),
            1e3 * t.edge_s / n,
            1e3 * t.encode_s / n,
            1e3 * t.decode_s / n,
            1e3 * t.cloud_s / n,
        );
    }
    if let Some(t) = tallies.first() {
        println!("mean JPEG q90 of the 224x224 input: {} bytes", t.jpeg / t.n.max(1));
    }
    if let Some(prefix) = &o.svg {
        write_curves(prefix, &rows, &tallies, files.len())?;
    }
    Ok(())
}

/// The rate curves of a run: one series per split and codec family (`q`: fixed bit depths,
/// `s`: allocated levels), f32 and projections left out.
fn write_curves(
    prefix: &std::path::Path,
    rows: &[(Boundary, String)],
    tallies: &[Tally],
    images: usize,
) -> Result<()> {
    use crate::svg::{Series, Style, xy_chart};
    let mut agreement: Vec<Series> = Vec::new();
    let mut kl: Vec<Series> = Vec::new();
    for ((split, codec), t) in rows.iter().zip(tallies) {
        let family = match codec.chars().next() {
            Some('q') if !codec.contains('-') => "q",
            Some('s') => "s",
            _ => continue,
        };
        let name = format!("{split} {family}");
        let bits = 8.0 * t.payload as f64 / t.values.max(1) as f64;
        let n = t.n.max(1) as f64;
        let changed = 100.0 - 100.0 * t.agree_full as f64 / n;
        // Points past 10% changed would flatten the region that matters.
        let points = [
            (&mut agreement, (changed <= 10.0).then_some(changed)),
            (&mut kl, Some(-(t.kl / n).max(1e-9).log10())),
        ];
        for (list, y) in points {
            let Some(y) = y else { continue };
            match list.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push((bits, y)),
                None => list.push(Series {
                    name: name.clone(),
                    points: vec![(bits, y)],
                    style: Style::Line { dashed: family == "q" },
                }),
            }
        }
    }
    for s in agreement.iter_mut().chain(kl.iter_mut()) {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let write = |suffix: &str, svg: String| -> Result<()> {
        let mut path = prefix.as_os_str().to_owned();
        path.push(suffix);
        std::fs::write(&path, svg)
            .with_context(|| format!("writing {}", PathBuf::from(&path).display()))?;
        eprintln!("eval: wrote {}", PathBuf::from(path).display());
        Ok(())
    };
    write(
        "-agreement.svg",
        xy_chart(
            &format!(
                "Top-1 answers changed by the codec ({images} photos; goal ≤ 0.5%; ≤ 10% shown)"
            ),
            "bits per value",
            "changed, %",
            &agreement,
            None,
        ),
    )?;
    write(
        "-kl.svg",
        xy_chart(
            &format!("Mean KL(unsplit ‖ split) of the answers ({images} photos; higher is closer)"),
            "bits per value",
            "−log10 KL (nats)",
            &kl,
            None,
        ),
    )
}

/// Log-probabilities of a logit vector (softmax, computed stably in f64).
pub(crate) fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|v| f64::from(v - max).exp()).sum();
    logits.iter().map(|v| f64::from(v - max) - sum.ln()).collect()
}

/// KL(p ‖ q) in nats between two distributions given as log-probabilities.
pub(crate) fn kl_of_log_probs(lp: &[f64], lq: &[f64]) -> f64 {
    lp.iter().zip(lq).map(|(a, b)| a.exp() * (a - b)).sum::<f64>().max(0.0)
}

/// KL(p ‖ q) in nats between the softmax of two logit vectors.
pub(crate) fn kl_divergence(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    kl_of_log_probs(&log_softmax(p_logits), &log_softmax(q_logits))
}

/// 95% Wilson interval of `k` agreements in `n` photos, as fractions.
pub(crate) fn wilson(k: usize, n: usize) -> (f64, f64) {
    use split_shared::plan::wilson_lower;
    let (k, n) = (k as u32, n as u32);
    if n == 0 { (0.0, 1.0) } else { (wilson_lower(k, n), 1.0 - wilson_lower(n - k, n)) }
}

#[cfg(test)]
mod tests {
    use super::{kl_divergence, parse_csv_classes, wilson};

    #[test]
    fn kl_is_zero_for_equal_answers_and_grows_with_the_difference() {
        let a = [1.0f32, 2.0, 3.0];
        assert!(kl_divergence(&a, &a) < 1e-12);
        // Shifting every logit alike changes nothing.
        assert!(kl_divergence(&a, &[11.0, 12.0, 13.0]) < 1e-9);
        let near = kl_divergence(&a, &[1.0, 2.0, 2.5]);
        let far = kl_divergence(&a, &[3.0, 2.0, 1.0]);
        assert!(0.0 < near && near < far, "{near} {far}");
    }

    #[test]
    fn wilson_interval_brackets_the_rate_and_narrows_with_n() {
        let (lo, hi) = wilson(398, 400);
        assert!(lo < 0.995 && 0.995 < hi && lo > 0.98, "{lo} {hi}");
        let (lo2, hi2) = wilson(3980, 4000);
        assert!(hi2 - lo2 < hi - lo);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        assert!(wilson(10, 10).1 <= 1.0);
    }

    #[test]
    fn labels_parse_strictly() {
        let ok = parse_csv_classes("file,class\na.jpg,3\nb.jpg, 7,extra\n\n").unwrap();
        assert_eq!((ok["a.jpg"], ok["b.jpg"], ok.len()), (3, 7, 2));
        let err = parse_csv_classes("a.jpg,3\nb.jpg,cat\n").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        let err = parse_csv_classes("a.jpg,3\nb.jpg\n").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
