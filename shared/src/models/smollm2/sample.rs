//! Choosing the next token from logits: greedy, or temperature and top-p with a seeded
//! generator (the same seed gives the same answer on every machine).

use crate::rng::SplitMix64;

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token (the lowest id among equals).
    Greedy,
    /// Softmax at `temperature`, restricted to the smallest set of most likely tokens whose
    /// probability reaches `top_p`, drawn with a generator seeded by `seed`.
    TopP {
        /// Above 0; 1 is the model's own distribution.
        temperature: f32,
        /// In (0, 1].
        top_p: f32,
        /// The generator's seed.
        seed: u64,
    },
}

/// A sampler with its generator's state.
#[derive(Clone, Debug)]
pub struct Sampler {
    sampling: Sampling,
    draws: SplitMix64,
}

impl Sampler {
    /// A sampler; `TopP` parameters out of range are clamped into it.
    pub fn new(sampling: Sampling) -> Self {
        let sampling = match sampling {
            Sampling::TopP { temperature, top_p, seed } => Sampling::TopP {
                temperature: if temperature.is_finite() { temperature.max(1e-3) } else { 1.0 },
                top_p: if top_p.is_finite() { top_p.clamp(1e-6, 1.0) } else { 1.0 },
                seed,
            },
            greedy => greedy,
        };
        let seed = match sampling {
            Sampling::TopP { seed, .. } => seed,
            Sampling::Greedy => 0,
        };
        Sampler { sampling, draws: SplitMix64::new(seed) }
    }

    /// The next token of `logits` (one row of the vocabulary's size).
    pub fn next(&mut self, logits: &[f32]) -> u32 {
        match self.sampling {
            Sampling::Greedy => argmax(logits),
            Sampling::TopP { temperature, top_p, .. } => {
                let max = logits
                    .iter()
                    .copied()
                    .filter(|v| v.is_finite())
                    .fold(f32::NEG_INFINITY, f32::max);
                let mut probs: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| {
                        (
                            i as u32,
                            if l.is_finite() { ((l - max) / temperature).exp() } else { 0.0 },
                        )
                    })
                    .collect();
                probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                let total: f32 = probs.iter().map(|p| p.1).sum();
                let mut kept = 0.0;
                let mut n = 0;
                for p in &probs {
                    kept += p.1;
                    n += 1;
                    if kept >= top_p * total {
                        break;
                    }
                }
                let mut r = self.draws.unit_f32() * kept;
                for p in &probs[..n] {
                    r -= p.1;
                    if r <= 0.0 {
                        return p.0;
                    }
                }
                probs[n.saturating_sub(1)].0
            }
        }
    }
}

/// The index of the largest value (the first among equals; NaN never wins).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] || v[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5]), 1);
    }

    #[test]
    fn top_p_is_seeded_and_stays_in_the_nucleus() {
        let logits = [0.0, 5.0, 4.9, -3.0, 1.0];
        let draw = |seed| {
            let mut s = Sampler::new(Sampling::TopP { temperature: 1.0, top_p: 0.9, seed });
            (0..200).map(|_| s.next(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let d = draw(7);
        // Tokens 1 and 2 hold over 90% of the mass: nothing else is drawn, and both are.
        assert!(d.iter().all(|&t| t == 1 || t == 2) && d.contains(&1) && d.contains(&2));
        let mut cold = Sampler::new(Sampling::TopP { temperature: 1e-6, top_p: 1.0, seed: 1 });
        assert_eq!(cold.next(&logits), 1);
    }
}
