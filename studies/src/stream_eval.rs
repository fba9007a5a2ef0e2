//! `./run.sh stream-eval`: bytes per frame of a synthetic camera pan with and without stream
//! residuals, and top-1 agreement with the uncompressed model per frame.
//!
//! `./run.sh stream-eval --help` lists the options. The pan: a 256x256 window slides 2 pixels right (and 1 down every other frame) over the photo,
//! each view gets fresh noise of up to ±3 levels per pixel (a camera's sensor noise), and is
//! resized to 224 as the real preprocessing does. Modes: every frame standalone; a stream with
//! exact residuals (dead zone 0); a stream with dead zone 1 (what the browser uses).

use std::path::PathBuf;

use anyhow::{Context, Result};
use burn::tensor::Device;
use split_shared::codec::{
    Calibration, DEFAULT_KEYFRAME_INTERVAL, Setting, StreamDecoder, StreamEncoder,
};
use split_shared::image::{RgbImage, resize_bicubic, to_input_tensor};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, Features, INPUT_SIZE};

use crate::eval::{decode_as_server, encode_as_edge};
use xtask::{paths, setup};

/// The frames of the pan.
pub fn camera_pan(photo: &RgbImage, frames: usize) -> Vec<RgbImage> {
    let side = 256.min(photo.width).min(photo.height);
    let mut rng = 0x1234_5678u32;
    (0..frames)
        .map(|f| {
            let left = (2 * f).min(photo.width - side);
            let top = (f / 2).min(photo.height - side);
            let mut view = photo.crop(left, top, side, side);
            for p in &mut view.pixels {
                rng ^= rng << 13;
                rng ^= rng >> 17;
                rng ^= rng << 5;
                let noise = (rng % 7) as i16 - 3;
                *p = (i16::from(*p) + noise).clamp(0, 255) as u8;
            }
            resize_bicubic(&view, INPUT_SIZE, INPUT_SIZE)
        })
        .collect()
}

/// Bytes per frame of a synthetic camera pan with and without stream residuals.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The photo the camera pans over; default the bundled chelsea.
    #[arg(long)]
    photo: Option<PathBuf>,
    /// Frames in the pan.
    #[arg(long, default_value_t = 30)]
    frames: usize,
    /// Boundaries to split at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "block5,block8,block11")]
    splits: Vec<Boundary>,
    /// Codec settings, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "q6,q4,q3,q2-r16")]
    codecs: Vec<Setting>,
    /// Calibration file; default: the one setup writes.
    #[arg(long)]
    calibration: Option<PathBuf>,
}

/// Run the measurement.
pub fn run(a: Args) -> Result<()> {
    let Args { photo, frames, splits, codecs, calibration: calibration_path } = a;
    let photo = photo.unwrap_or_else(|| paths::repo_root().join("web/samples/chelsea.png"));
    let calibration_path = match calibration_path {
        Some(p) => p,
        None => setup::ensure_calibration()?,
    };
    let calibration = Calibration::load(&calibration_path)?;
    let device = Device::flex();
    let model = EfficientNetLite0::load(&setup::ensure_weights()?, &device)?;
    let img = split_shared::image::decode(
        &std::fs::read(&photo).with_context(|| photo.display().to_string())?,
    )?;
    let views = camera_pan(&img, frames);
    println!(
        "camera pan: {} frames over {}, calibration {}",
        views.len(),
        photo.display(),
        calibration_path.display()
    );
    println!(
        "| split | codec | mode | keyframe bytes | mean bytes/frame | vs standalone | agreement with f32 |"
    );
    println!("|---|---|---|---|---|---|---|");
    for split in &splits {
        let feats: Vec<(Features, u16)> = views
            .iter()
            .map(|v| -> Result<_> {
                let x =
                    model.forward_range(to_input_tensor(v, &device), Boundary::INPUT, *split)?;
                let features = Features::from_tensor(*split, x)?;
                let x = features.clone().to_tensor(&device);
                let logits = model
                    .forward_range(x, *split, Boundary::LOGITS)?
                    .into_data()
                    .try_to_vec::<f32>()
                    .expect("f32");
                Ok((features, top_k(&logits, 1)[0].class))
            })
            .collect::<Result<_>>()?;
        for codec in &codecs {
            let mut standalone_mean = 0.0;
            for (mode, deadzone) in [
                ("standalone", None),
                ("stream, exact", Some(0u8)),
                ("stream, dead zone 1", Some(1u8)),
            ] {
                let mut enc = deadzone.map(|d| StreamEncoder::new(1, DEFAULT_KEYFRAME_INTERVAL, d));
                let mut dec = StreamDecoder::new();
                let (mut sizes, mut agree) = (Vec::new(), 0usize);
                for (i, (features, f32_top)) in feats.iter().enumerate() {
                    let frame = encode_as_edge(
                        i as u64,
                        features,
                        *codec,
                        Some(&calibration),
                        enc.as_mut(),
                    )?;
                    let (back, _) = decode_as_server(&frame, Some(&calibration), Some(&mut dec))?;
                    let logits = model
                        .forward_range(back.to_tensor(&device), *split, Boundary::LOGITS)?
                        .into_data()
                        .try_to_vec::<f32>()
                        .expect("f32");
                    agree += usize::from(top_k(&logits, 1)[0].class == *f32_top);
                    sizes.push(frame.len());
                }
                let mean =
                    sizes[1..].iter().sum::<usize>() as f64 / (sizes.len() - 1).max(1) as f64;
                if deadzone.is_none() {
                    standalone_mean = mean;
                }
                println!(
                    "| {split} | {codec} | {mode} | {} | {mean:.0} | {:.2} | {agree}/{} |",
                    sizes[0],
                    mean / standalone_mean,
                    sizes.len()
                );
            }
        }
    }
    Ok(())
}
