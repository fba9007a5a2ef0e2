//! `./run.sh profile`: measure the cost table the planner uses and write it as JSON.
//!
//! `./run.sh profile --help` lists the options. Natively (burn flex): per-stage compute times (median over the images), giving the edge
//! column `native-flex` (cumulative from the input) and the cloud column (from each boundary to
//! the logits); cloud-only time (decode + preprocess + full network); the mean JPEG (q90) size
//! of the input; and per boundary and codec, mean frame bytes and top-1 agreement with the
//! uncompressed model. `--device wgpu` (a build with the `wgpu` feature) measures the cloud
//! column and cloud-only on a GPU instead, each run read back to the host, and reports how far
//! the GPU's logits are from the CPU's. `--browser` merges edge profiles measured in Chromium by
//! `web/tests/profile.mjs`; `--with-browser` starts the server and runs that script first. Default output:
//! `profiles/cost-table.json`, which the server serves at `/api/cost-table`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::Device;
use split_shared::codec::{Calibration, Setting};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, Features, MAX_BATCH, boundary_table};
use split_shared::plan::{COST_TABLE_VERSION, CodecCost, CostTable, EdgeProfile};

use split_studies::calibrate;
use split_studies::eval::{decode_as_server, encode_as_edge};
use xtask::{paths, setup};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn values(t: burn::tensor::Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32")
}

/// Measure the planner's cost table and write it as JSON.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of images; default `web/samples`.
    #[arg(long)]
    images: Option<PathBuf>,
    /// Skip the first N images (sorted by name).
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Use at most N images.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Codec settings to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f32,q8,q4,q3,q2")]
    codecs: Vec<Setting>,
    /// Merge browser edge profiles from this JSON (written by `web/tests/profile.mjs`).
    #[arg(long, conflicts_with = "with_browser")]
    browser: Option<PathBuf>,
    /// Start the server and measure the browser edge profiles first.
    #[arg(long)]
    with_browser: bool,
    /// Output file; default `profiles/cost-table.json`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the cloud column runs: `flex` (this machine's CPU, as the server's default) or
    /// `wgpu` (a GPU through burn-wgpu, for a server started with `--device wgpu`; needs
    /// `cargo build -p split-lab --features wgpu`). The edge column always runs on the CPU.
    #[arg(long, value_enum, default_value_t = CloudDevice::Flex)]
    device: CloudDevice,
    /// Runs of each cloud part per image on a GPU (the median is kept); the first image's
    /// parts are run once more before any is timed, to compile the GPU's kernels.
    #[arg(long, default_value_t = 3)]
    gpu_repeats: usize,
    /// Also time the whole network on the first photo stacked into batches of 1, 2 and 4 (the
    /// server's `--batch` limit), on the CPU and, with `--device wgpu`, the GPU: what batching
    /// requests buys a server there. Printed, not written to the table.
    #[arg(long)]
    batch_sweep: bool,
}

/// Where the profile's cloud column is measured.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudDevice {
    /// burn flex on this machine's CPU.
    Flex,
    /// burn-wgpu on the first GPU wgpu finds.
    Wgpu,
}

/// Run the profiler.
pub fn run(a: Args) -> Result<()> {
    let Args {
        images,
        skip,
        limit,
        codecs: settings,
        browser,
        with_browser,
        out,
        device: cloud_device,
        gpu_repeats,
        batch_sweep: sweep,
    } = a;
    let gpu = match cloud_device {
        CloudDevice::Flex => None,
        CloudDevice::Wgpu => Some(gpu_device()?),
    };
    let browser = if with_browser { Some(browser_profile()?) } else { browser };
    let out = out.unwrap_or_else(|| paths::repo_root().join("profiles/cost-table.json"));
    let calibration = Calibration::load(&setup::ensure_calibration()?)?;
    let device = Device::flex();
    let weights = setup::ensure_weights()?;
    let model = EfficientNetLite0::load(&weights, &device)?;
    let dir = images.clone().unwrap_or_else(|| paths::repo_root().join("web/samples"));
    let files = calibrate::image_files(&dir, skip, limit)?;
    eprintln!("profile: {} images from {}", files.len(), dir.display());

    let n = boundary_table().len();
    let mut stage_ms: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut cloud_only = Vec::new();
    let mut jpeg = Vec::new();
    let mut bytes: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    let mut agree: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
    let mut on_gpu = match gpu {
        Some((device, name)) => Some(GpuCloud::new(device, &name, &weights, n)?),
        None => None,
    };
    let mut first_input = None;
    for (i, path) in files.iter().enumerate() {
        let file = std::fs::read(path)?;
        let start = Instant::now();
        let img = split_shared::image::preprocess(&file)?;
        if i == 0 {
            first_input = Some(split_shared::image::to_input_tensor(&img, &device).into_data());
        }
        let full = values(model.forward(split_shared::image::to_input_tensor(&img, &device))?);
        cloud_only.push(start.elapsed().as_secs_f64() * 1e3);
        let full_top = top_k(&full, 1)[0].class;
        jpeg.push(split_studies::eval::jpeg_q90_len(&img)? as f64);
        let mut x = split_shared::image::to_input_tensor(&img, &device);
        if let Some(g) = on_gpu.as_mut() {
            g.measure_cloud_only(&file, gpu_repeats, i == 0)?;
            g.measure_from(Boundary::INPUT, &x, &full, gpu_repeats, i == 0)?;
        }
        let mut at = Boundary::INPUT;
        for b in Boundary::all().skip(1) {
            let start = Instant::now();
            x = model.forward_range(x, at, b)?;
            let features = Features::from_tensor(b, x.clone())?;
            stage_ms[usize::from(b.index())].push(start.elapsed().as_secs_f64() * 1e3);
            if let Some(g) = on_gpu.as_mut() {
                g.measure_from(b, &x, &full, gpu_repeats, i == 0)?;
            }
            at = b;
            if b == Boundary::LOGITS {
                continue;
            }
            for (s, setting) in settings.iter().enumerate() {
                let Ok(frame) = encode_as_edge(0, &features, *setting, Some(&calibration), None)
                else {
                    continue;
                };
                let (back, _) = decode_as_server(&frame, Some(&calibration), None)?;
                let logits = model.forward_range(back.to_tensor(&device), b, Boundary::LOGITS)?;
                let top = top_k(&values(logits), 1)[0].class;
                let key = (usize::from(b.index()), s);
                bytes.entry(key).or_default().push(frame.len() as f64);
                let a = agree.entry(key).or_default();
                a.0 += usize::from(top == full_top);
                a.1 += 1;
            }
        }
        eprintln!("profile: {}/{}", i + 1, files.len());
    }
    if let (true, Some(x)) = (sweep, &first_input) {
        let repeats = gpu_repeats.max(3);
        eprintln!("profile: batch sweep, CPU: {}", batch_sweep(&model, &device, x, repeats)?);
        if let Some(g) = &on_gpu {
            let line = batch_sweep(&g.model, &g.device, x, repeats)?;
            eprintln!("profile: batch sweep, {}: {line}", g.name);
        }
    }
    let stage: Vec<f64> =
        stage_ms.into_iter().map(|v| if v.is_empty() { 0.0 } else { median(v) }).collect();
    let edge: Vec<Option<f64>> = (0..n).map(|k| Some(stage[..=k].iter().sum())).collect();
    let (cloud_device, cloud, cloud_only_ms) = match on_gpu {
        None => (
            "burn flex (CPU), 1 worker".to_string(),
            (0..n).map(|k| Some(stage[k + 1..].iter().sum())).collect::<Vec<_>>(),
            median(cloud_only),
        ),
        Some(g) => {
            eprintln!("{}", g.agreement());
            (format!("burn wgpu ({})", g.name), g.cloud_ms(), median(g.cloud_only))
        }
    };
    let codec_rows: Vec<Vec<CodecCost>> = (0..n)
        .map(|k| {
            settings
                .iter()
                .enumerate()
                .filter_map(|(s, setting)| {
                    let b = bytes.get(&(k, s))?;
                    let (ok, total) = agree[&(k, s)];
                    let mean = b.iter().sum::<f64>() / b.len() as f64;
                    Some(CodecCost::measured(*setting, mean, ok as u32, total as u32))
                })
                .collect()
        })
        .collect();
    let mut table = CostTable {
        version: COST_TABLE_VERSION,
        model: "efficientnet-lite0".into(),
        command: format!(
            "./run.sh profile {}",
            std::env::args().skip(2).collect::<Vec<_>>().join(" ")
        )
        .trim()
        .to_string(),
        machine: machine(),
        boundaries: boundary_table().iter().map(|b| b.name.to_string()).collect(),
        param_bytes: boundary_table().iter().map(|b| b.cumulative_param_bytes).collect(),
        edge: BTreeMap::from([(
            "native-flex".to_string(),
            EdgeProfile { device: "burn flex, native (this machine)".into(), ms: edge },
        )]),
        cloud_device,
        cloud_ms: cloud,
        cloud_only_ms,
        image_bytes: jpeg.iter().sum::<f64>() / jpeg.len().max(1) as f64,
        codecs: codec_rows,
        encrypted: None,
    };
    // The encrypted placement is measured by its own command (`./run.sh encrypted
    // --cost-table`), the learned bottleneck's rows by its trainer on the photos it held back
    // (`./run.sh train bottleneck --cost-table`): a table this one replaces keeps those parts
    // unless this run measured them itself.
    let old = std::fs::read_to_string(&out).ok().and_then(|t| CostTable::from_json(&t).ok());
    if let Some(old) = &old {
        for (rows, kept) in table.codecs.iter_mut().zip(&old.codecs) {
            let learned = |c: &&CodecCost| matches!(c.codec, Setting::Learned(_));
            let measured: Vec<Setting> = rows.iter().map(|c| c.codec).collect();
            rows.extend(
                kept.iter().filter(learned).filter(|c| !measured.contains(&c.codec)).cloned(),
            );
        }
    }
    table.encrypted =
        old.and_then(|o| o.encrypted).filter(|e| table.boundaries.contains(&e.boundary));
    if let Some(path) = browser {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let profiles: BTreeMap<String, EdgeProfile> = serde_json::from_str(&text)?;
        table.edge.extend(profiles);
    }
    let json = serde_json::to_string_pretty(&table)?;
    CostTable::from_json(&json).map_err(anyhow::Error::msg)?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, json + "\n")?;
    eprintln!("profile: wrote {}", out.display());
    Ok(())
}

/// The whole network on `x` (one image, on the host) stacked into batches of 1, 2 and
/// [`MAX_BATCH`] on `device`, uploaded and read back each time: the median of `repeats` runs
/// after one warm-up run, per pass and per image.
fn batch_sweep(
    model: &EfficientNetLite0,
    device: &Device,
    x: &burn::tensor::TensorData,
    repeats: usize,
) -> Result<String> {
    let mut parts = Vec::new();
    for n in [1, 2, MAX_BATCH] {
        let run = || -> Result<f64> {
            let start = Instant::now();
            let one = burn::tensor::Tensor::<4>::from_data(x.clone(), device);
            let batch = if n == 1 { one } else { burn::tensor::Tensor::cat(vec![one; n], 0) };
            values(model.forward(batch)?);
            Ok(start.elapsed().as_secs_f64() * 1e3)
        };
        run()?;
        let ms = median((0..repeats).map(|_| run()).collect::<Result<Vec<_>>>()?);
        parts.push(format!("batch {n} {ms:.2} ms a pass, {:.2} an image", ms / n as f64));
    }
    Ok(parts.join("; "))
}

/// The cloud column measured on a GPU: the CPU's activation at each boundary uploaded, the
/// rest of the network run there and the logits read back (what a server on that GPU does
/// with a frame once decoded), against the CPU's logits for the same photo.
struct GpuCloud {
    device: Device,
    name: String,
    model: EfficientNetLite0,
    ms: Vec<Vec<f64>>,
    cloud_only: Vec<f64>,
    same_top1: usize,
    runs: usize,
    max_diff: f32,
}

impl GpuCloud {
    fn new(device: Device, name: &str, weights: &std::path::Path, n: usize) -> Result<Self> {
        let model = EfficientNetLite0::load(weights, &device)?;
        Ok(Self {
            device,
            name: name.to_string(),
            model,
            ms: vec![Vec::new(); n],
            cloud_only: Vec::new(),
            same_top1: 0,
            runs: 0,
            max_diff: 0.0,
        })
    }

    /// Time boundary `b` to the logits on the GPU, `x` being the CPU's activation at `b`.
    fn measure_from(
        &mut self,
        b: Boundary,
        x: &burn::tensor::Tensor<4>,
        cpu_logits: &[f32],
        repeats: usize,
        warm_up: bool,
    ) -> Result<()> {
        if b == Boundary::LOGITS {
            self.ms[usize::from(b.index())].push(0.0);
            return Ok(());
        }
        let host = x.clone().into_data();
        let run = |this: &Self| -> Result<(f64, Vec<f32>)> {
            let start = Instant::now();
            let x = burn::tensor::Tensor::<4>::from_data(host.clone(), &this.device);
            let logits = values(this.model.forward_range(x, b, Boundary::LOGITS)?);
            Ok((start.elapsed().as_secs_f64() * 1e3, logits))
        };
        if warm_up {
            run(self)?;
        }
        let mut times = Vec::with_capacity(repeats);
        let mut logits = Vec::new();
        for _ in 0..repeats.max(1) {
            let (ms, l) = run(self)?;
            times.push(ms);
            logits = l;
        }
        self.ms[usize::from(b.index())].push(median(times));
        self.runs += 1;
        self.same_top1 += usize::from(top_k(&logits, 1)[0].class == top_k(cpu_logits, 1)[0].class);
        let diff = logits.iter().zip(cpu_logits).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        self.max_diff = self.max_diff.max(diff);
        Ok(())
    }

    /// Time decoding and preprocessing the photo (CPU) and the whole network on the GPU.
    fn measure_cloud_only(&mut self, file: &[u8], repeats: usize, warm_up: bool) -> Result<()> {
        let run = |this: &Self| -> Result<f64> {
            let start = Instant::now();
            let img = split_shared::image::preprocess(file)?;
            let x = split_shared::image::to_input_tensor(&img, &this.device);
            values(this.model.forward(x)?);
            Ok(start.elapsed().as_secs_f64() * 1e3)
        };
        if warm_up {
            run(self)?;
        }
        let times = (0..repeats.max(1)).map(|_| run(self)).collect::<Result<Vec<_>>>()?;
        self.cloud_only.push(median(times));
        Ok(())
    }

    fn cloud_ms(&self) -> Vec<Option<f64>> {
        self.ms.iter().map(|v| Some(if v.is_empty() { 0.0 } else { median(v.clone()) })).collect()
    }

    fn agreement(&self) -> String {
        format!(
            "profile: on {}, the top-1 was the CPU's in {} of {} runs (every photo from every \
             boundary); largest logit difference {:.2e}",
            self.name, self.same_top1, self.runs, self.max_diff
        )
    }
}

#[cfg(feature = "wgpu")]
fn gpu_device() -> Result<(Device, String)> {
    use burn::tensor::wgpu::wgpu;
    let adapters = actix_web::rt::System::new()
        .block_on(wgpu::Instance::default().enumerate_adapters(wgpu::Backends::all()));
    let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
    eprintln!("profile: wgpu adapters: {names:?}");
    let device =
        Device::wgpu_options().init().map_err(|e| anyhow::anyhow!("wgpu device: {e:?}"))?;
    Ok((device, names.first().cloned().unwrap_or_else(|| "GPU".into())))
}

#[cfg(not(feature = "wgpu"))]
fn gpu_device() -> Result<(Device, String)> {
    anyhow::bail!("--device wgpu needs split-lab built with `--features wgpu`")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

/// Edge profiles from headless Chromium (wasm CPU and WebGPU), measured against a fresh server;
/// returns the JSON file `web/tests/profile.mjs` wrote.
fn browser_profile() -> Result<PathBuf> {
    setup::ensure_weights()?;
    setup::ensure_calibration()?;
    xtask::wasm_build::build()?;
    let web = paths::repo_root().join("web");
    xtask::browser::ensure_browser_tools(&web)?;
    xtask::cmd::build_workspace()?;
    let server = xtask::server::start_server(&[])?;
    let out = std::env::temp_dir().join("splitinfer-browser-profile.json");
    xtask::cmd::run(
        std::process::Command::new("node")
            .arg("tests/profile.mjs")
            .current_dir(&web)
            .env("SPLIT_URL", &server.url)
            .env("OUT", &out),
    )?;
    drop(server);
    Ok(out)
}
