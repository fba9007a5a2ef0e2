//! `./run.sh adversarial`: the seed's third defence measured. An attacker with the public
//! model crafts photos that change the answer (PGD within an L∞ budget); the feature noise,
//! drawn afresh for every request, is meant to keep such photos from working. Measured against
//! an attacker who ignores the noise and one who averages over it.

use anyhow::{Result, bail};
use burn::tensor::Device;
use split_shared::codec::{Calibration, Noise};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, Features};

use super::attack::{WhiteBox, one_image};
use super::{AdversarialArgs, image_pixels, received};
use crate::eval;
use xtask::setup;

/// The pipeline a request takes: edge to the split, noise, codec, server.
struct Pipeline {
    model: EfficientNetLite0,
    calibration: Calibration,
    split: Boundary,
    codec: String,
}

impl Pipeline {
    /// Top-1 of `pixels` through the split with `noise` drawn from `seed`.
    fn answer(&self, pixels: &[f32], noise: Option<Noise>, seed: u64) -> Result<u16> {
        let (b, calibration) = (self.split, &self.calibration);
        let (decoded, _) = received(&self.model, pixels, b, &self.codec, noise, calibration, seed)?;
        let x = decoded.to_tensor(&Device::flex());
        let logits = self.model.forward_range(x, b, Boundary::LOGITS)?;
        Ok(top_k(&logits.into_data().try_to_vec::<f32>().expect("f32 logits"), 1)[0].class)
    }

    /// The noise alone, as `[1, C, H, W]` values at the split.
    fn noise_values(&self, noise: Noise, seed: u64) -> Result<Vec<f32>> {
        let dims = one_image(self.split);
        let zero = Features::new(self.split, &dims, vec![0.0; dims.iter().product()])?;
        Ok(zero.with_noise(noise, &self.calibration, seed)?.into_values())
    }

    /// Of `trials` fresh draws of `noise`, how many answer `pixels` other than `class`.
    fn changed(
        &self,
        pixels: &[f32],
        class: u16,
        noise: Option<Noise>,
        trials: u64,
        seed: &mut u64,
    ) -> Result<u64> {
        let mut changed = 0;
        for _ in 0..(if noise.is_some() { trials } else { 1 }) {
            *seed += 1;
            changed += u64::from(self.answer(pixels, noise, *seed)? != class);
        }
        Ok(if noise.is_some() { changed } else { changed * trials })
    }
}

/// Run the attacks and print the table.
pub fn run(o: AdversarialArgs) -> Result<()> {
    let weights = setup::ensure_weights()?;
    let pipeline = Pipeline {
        model: EfficientNetLite0::load(&weights, &Device::flex())?,
        calibration: Calibration::load(&setup::ensure_calibration()?)?,
        split: o.split,
        codec: o.codec.clone(),
    };
    let attacker = WhiteBox::load(&weights)?;
    let noises: Vec<Noise> = o.noise.iter().map(|n| n.parse()).collect::<Result<_, _>>()?;
    let files: Vec<_> = eval::image_files(&o.images)?.into_iter().take(o.limit).collect();
    if files.is_empty() {
        bail!("no .jpg or .png images in {}", o.images.display());
    }
    let trials = o.trials.max(1) as u64;
    // (eps, defence, attack) -> changed answers out of photos x trials.
    let mut tally: Vec<(f32, String, &str, u64)> = Vec::new();
    let mut add = |eps: f32, defence: String, attack: &'static str, n: u64| match tally
        .iter_mut()
        .find(|t| t.0 == eps && t.1 == defence && t.2 == attack)
    {
        Some(t) => t.3 += n,
        None => tally.push((eps, defence, attack, n)),
    };
    let mut seed = 0u64;
    for (i, path) in files.iter().enumerate() {
        let pixels = image_pixels(path)?;
        let class = pipeline.answer(&pixels, None, 0)?;
        for n in &noises {
            add(
                0.0,
                n.to_string(),
                "none (clean photo)",
                pipeline.changed(&pixels, class, Some(*n), trials, &mut seed)?,
            );
        }
        for &eps in &o.eps {
            let budget = eps / 255.0;
            let plain =
                attacker.pgd(&pixels, class as usize, budget, o.steps, || Ok(Vec::new()))?;
            add(
                eps,
                "none".into(),
                "PGD",
                pipeline.changed(&plain, class, None, trials, &mut seed)?,
            );
            for n in &noises {
                add(
                    eps,
                    n.to_string(),
                    "PGD",
                    pipeline.changed(&plain, class, Some(*n), trials, &mut seed)?,
                );
                if o.eot > 0 {
                    let mut draw_seed = 1u64 << 40 | (i as u64) << 20;
                    let adaptive =
                        attacker.pgd(&pixels, class as usize, budget, o.steps, || {
                            (0..o.eot)
                                .map(|_| {
                                    draw_seed += 1;
                                    Ok((pipeline.split, pipeline.noise_values(*n, draw_seed)?))
                                })
                                .collect()
                        })?;
                    add(
                        eps,
                        n.to_string(),
                        "PGD + EOT",
                        pipeline.changed(&adaptive, class, Some(*n), trials, &mut seed)?,
                    );
                }
            }
        }
        eprintln!("adversarial: {}/{} photos", i + 1, files.len());
    }
    let total = files.len() as u64 * trials;
    println!(
        "{} photos from {}, split {} {}, PGD {} steps, {} noise draws per answer, EOT over {} draws\n",
        files.len(),
        o.images.display(),
        o.split.name(),
        o.codec,
        o.steps,
        trials,
        o.eot
    );
    println!("| L∞ budget | photo | noise | answers changed |\n|---|---|---|---|");
    for (eps, defence, attack, n) in &tally {
        let budget = if *eps == 0.0 { "–".to_string() } else { format!("{eps}/255") };
        println!(
            "| {budget} | {attack} | {defence} | {:.1}% ({n}/{total}) |",
            100.0 * *n as f64 / total as f64
        );
    }
    Ok(())
}
