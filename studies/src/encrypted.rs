//! `./run.sh encrypted`: the encrypted classifier over a folder of photos: how often its
//! answer is the network's, what it costs each side, and what crosses the wire.
//!
//! Each photo runs to `pool` natively; its pooled features are quantized, encrypted under one
//! session's key, evaluated by the server's half (`EncryptedClassifier`) and decrypted, as the
//! browser and the server would (no network between them here). The float network's top-1 is
//! the reference. With `--cost-table`, the figures become that table's `encrypted` part, which
//! the planner prices the encrypted placement by (the rest of the table is left as it is).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::{Device, Tensor};
use split_shared::encrypted::{
    DeviceKeys, EncryptedClassifier, QuantizedClassifier, quantize_features,
};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, NUM_CLASSES, read_weights};
use split_shared::plan::{CostTable, EncryptedCost, NATIVE_PROFILE, wilson_lower};
use split_shared::protocol::{EncryptedFrame, PARAMETERS_ID};
use xtask::setup;

/// The pooled features' width.
const HEAD: usize = 1280;

/// Agreement, accuracy, time and bytes of the encrypted classifier.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    photos: crate::eval::Photos,
    /// Write the figures into this cost table's `encrypted` part (e.g.
    /// profiles/cost-table.json), the device's time as its `native-flex` profile's.
    #[arg(long)]
    cost_table: Option<PathBuf>,
}

fn values(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 activations")
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Run the comparison and print a markdown table.
pub fn run(o: Args) -> Result<()> {
    let weights = read_weights(&setup::ensure_weights()?)?;
    let device = Device::flex();
    let model = EfficientNetLite0::from_weights(&weights, &device)?;
    let classifier = QuantizedClassifier::new(
        weights.tensor("fc.weight", &[NUM_CLASSES, HEAD])?,
        weights.tensor("fc.bias", &[NUM_CLASSES])?,
    );
    let (files, labels) = o.photos.read()?;

    let mut rng = rand::rng();
    let start = Instant::now();
    let keys = DeviceKeys::generate(&mut rng);
    let key_bytes = keys.evaluation_key(&mut rng)?;
    let keygen_ms = ms(start);
    let start = Instant::now();
    let server = EncryptedClassifier::new(&classifier)?;
    let setup_ms = ms(start);
    let start = Instant::now();
    EncryptedClassifier::read_key(&key_bytes)?;
    let read_key_ms = ms(start);
    let key_frame =
        EncryptedFrame::Key { id: 1, parameters: PARAMETERS_ID, key: key_bytes.clone() }
            .encode()
            .len();

    let (mut agree, mut agree5, mut correct, mut correct_float, mut labelled) = (0, 0, 0, 0, 0);
    let (mut encrypt, mut evaluate, mut decrypt) = (Vec::new(), Vec::new(), Vec::new());
    let (mut upload, mut answer_bytes) = (0, 0);
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let img = split_shared::image::preprocess(&std::fs::read(path)?)
            .with_context(|| format!("preprocessing {name}"))?;
        let input = split_shared::image::to_input_tensor(&img, &device);
        let pooled = model.forward_range(input, Boundary::INPUT, Boundary::POOL)?;
        let float =
            values(model.forward_range(pooled.clone(), Boundary::POOL, Boundary::LOGITS)?);
        let features = quantize_features(&values(pooled));

        let t = Instant::now();
        let parts = keys.encrypt(&features, &mut rng)?;
        encrypt.push(ms(t));
        // What crosses the wire: the frames around the ciphertexts.
        upload =
            EncryptedFrame::Classify { id: 1, parameters: PARAMETERS_ID, parts: parts.clone() }
                .encode()
                .len();
        let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        // The server reads the session's key again for each evaluation (held as sent: read, a
        // key takes 5.7 MiB), so that is its time too.
        let t = Instant::now();
        let key = EncryptedClassifier::read_key(&key_bytes)?;
        let answer = server.evaluate(&slices, &key)?;
        evaluate.push(ms(t));
        answer_bytes =
            EncryptedFrame::Answer { id: 1, queue_us: 0, server_us: 0, ciphertext: answer.clone() }
                .encode()
                .len();
        let t = Instant::now();
        let integer = keys.decrypt(&answer)?;
        decrypt.push(ms(t));

        let got = top_k(&classifier.logits(&integer), 5);
        let want = top_k(&float, 5);
        agree += u32::from(got[0].class == want[0].class);
        agree5 += u32::from(got.iter().map(|p| p.class).eq(want.iter().map(|p| p.class)));
        if let Some(l) = labels.as_ref().and_then(|l| l.get(&name)).copied() {
            labelled += 1;
            correct += u32::from(got[0].class as usize == l);
            correct_float += u32::from(want[0].class as usize == l);
        }
        if (i + 1) % 50 == 0 {
            eprintln!("encrypted: {}/{} images", i + 1, files.len());
        }
    }
    let n = files.len() as u32;
    println!("images: {n} from {}", o.photos.images.display());
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| top-1 agreement with the float network | {:.2}% ({agree}/{n}), ≥ {:.2}% (95%) |",
        100.0 * f64::from(agree) / f64::from(n),
        100.0 * wilson_lower(agree, n)
    );
    println!(
        "| top-5 identical, in order | {:.2}% ({agree5}/{n}) |",
        100.0 * f64::from(agree5) / f64::from(n)
    );
    if labelled > 0 {
        println!(
            "| top-1 accuracy, encrypted / float | {:.1}% / {:.1}% ({labelled} labelled) |",
            100.0 * f64::from(correct) / f64::from(labelled),
            100.0 * f64::from(correct_float) / f64::from(labelled)
        );
    }
    println!("| device: keys (once a session) | {keygen_ms:.0} ms |");
    let (encrypt, decrypt, evaluate) = (median(encrypt), median(decrypt), median(evaluate));
    println!("| device: encrypt a photo's features (median) | {encrypt:.1} ms |");
    println!("| device: decrypt an answer (median) | {decrypt:.1} ms |");
    println!("| server: encode the classifier (once) | {setup_ms:.0} ms |");
    println!("| server: read a session's key | {read_key_ms:.1} ms |");
    println!("| server: read the key and evaluate (median, one thread) | {evaluate:.1} ms |");
    println!("| evaluation key frame | {key_frame} bytes |");
    println!("| upload a photo (frame) | {upload} bytes |");
    println!("| answer (frame) | {answer_bytes} bytes |");
    if let Some(path) = o.cost_table {
        let cost = EncryptedCost {
            command: format!(
                "./run.sh encrypted {}",
                std::env::args().skip(2).collect::<Vec<_>>().join(" ")
            ),
            boundary: "pool".into(),
            device_ms: BTreeMap::from([(NATIVE_PROFILE.to_string(), encrypt + decrypt)]),
            upload_bytes: upload as f64,
            answer_bytes: answer_bytes as f64,
            key_bytes: key_frame as f64,
            cloud_ms: evaluate,
            agreement: f64::from(agree) / f64::from(n),
            images: n,
            agreement_low: wilson_lower(agree, n),
        };
        write_cost(&path, cost)?;
    }
    Ok(())
}

/// Replace the `encrypted` part of the cost table at `path`, the rest kept.
fn write_cost(path: &std::path::Path, cost: EncryptedCost) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut table = CostTable::from_json(&text).map_err(anyhow::Error::msg)?;
    table.encrypted = Some(cost);
    let json = serde_json::to_string_pretty(&table)?;
    CostTable::from_json(&json).map_err(anyhow::Error::msg)?;
    std::fs::write(path, json + "\n")?;
    eprintln!("encrypted: wrote the encrypted placement into {}", path.display());
    Ok(())
}
