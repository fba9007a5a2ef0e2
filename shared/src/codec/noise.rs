//! Noise added to the features before they leave the device: the privacy option that trades
//! agreement for how well the server (or anyone on the wire) could reconstruct the photo.
//!
//! One parameter sets it: `scale`, a fraction of each channel's calibrated range (the clip
//! range of the 8-bit table at that boundary: the spread of the values the channel takes), so
//! a channel that varies over [0, 6] gets six times the noise of one over [0, 1]. Gaussian noise
//! has that standard deviation, Laplace noise that scale (`b`, standard deviation `√2·b`). The
//! client draws a fresh seed per request, from the browser's cryptographic random source; the
//! generator itself is a small deterministic PCG so the same seed gives the same noise in wasm
//! and natively (what the tests and the measurements rely on).

use std::fmt;
use std::str::FromStr;

use super::{Calibration, CodecError};

/// The noise's distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoiseKind {
    /// Normal, standard deviation `scale · range`.
    Gaussian,
    /// Laplace (double exponential), scale `scale · range`.
    Laplace,
}

/// Noise for the features: `gauss:<scale>` or `laplace:<scale>`, scale in (0, 4].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Noise {
    /// The distribution.
    pub kind: NoiseKind,
    /// Per channel, as a fraction of its calibrated range.
    pub scale: f32,
}

impl fmt::Display for Noise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            NoiseKind::Gaussian => "gauss",
            NoiseKind::Laplace => "laplace",
        };
        write!(f, "{kind}:{}", self.scale)
    }
}

impl FromStr for Noise {
    type Err = CodecError;

    fn from_str(s: &str) -> Result<Self, CodecError> {
        let bad = || CodecError::BadNoise(s.to_string());
        let (kind, scale) = s.split_once(':').ok_or_else(bad)?;
        let kind = match kind {
            "gauss" => NoiseKind::Gaussian,
            "laplace" => NoiseKind::Laplace,
            _ => return Err(bad()),
        };
        let scale: f32 = scale.parse().map_err(|_| bad())?;
        if !(scale > 0.0 && scale <= 4.0) {
            return Err(bad());
        }
        Ok(Self { kind, scale })
    }
}

/// PCG-XSH-RR 64/32: small, fast, the same everywhere.
struct Pcg(u64);

impl Pcg {
    fn next_u32(&mut self) -> u32 {
        let old = self.0;
        self.0 =
            old.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        xorshifted.rotate_right((old >> 59) as u32)
    }

    /// Uniform in (0, 1), never 0 (the logarithms below need that).
    fn uniform(&mut self) -> f64 {
        (f64::from(self.next_u32()) + 0.5) / 4_294_967_296.0
    }
}

impl NoiseKind {
    /// One draw of unit scale.
    fn draw(self, rng: &mut Pcg) -> f64 {
        match self {
            // Box–Muller, one of the pair.
            Self::Gaussian => {
                (-2.0 * rng.uniform().ln()).sqrt() * (std::f64::consts::TAU * rng.uniform()).cos()
            }
            Self::Laplace => {
                let u = rng.uniform() - 0.5;
                -u.signum() * (1.0 - 2.0 * u.abs()).ln()
            }
        }
    }
}

impl Noise {
    /// Add this noise to `values`, a batch of activations shaped `dims` (`[n, C, …]`) at the
    /// boundary named `boundary`: channel `c` gets `scale · (hi_c − lo_c)` of it, from the
    /// calibration's 8-bit table there; `seed` picks the draw.
    ///
    /// # Errors
    /// [`CodecError::NotCalibrated`] when the calibration has no 8-bit table at the boundary
    /// (its ranges scale the noise), [`CodecError::ChannelMismatch`] when its channels are not
    /// the activations', [`CodecError::BadPayload`] when `values` does not fill `dims`.
    pub fn apply(
        self,
        boundary: &str,
        dims: &[usize],
        values: &mut [f32],
        calibration: &Calibration,
        seed: u64,
    ) -> Result<(), CodecError> {
        let table = calibration.at(boundary).and_then(|t| t.raw.get(&8)).ok_or_else(|| {
            CodecError::NotCalibrated {
                boundary: boundary.to_string(),
                setting: format!("noise {self}"),
            }
        })?;
        let channels = dims.get(1).copied().unwrap_or(0);
        let plane: usize = dims.iter().skip(2).product();
        if dims.len() < 2 || values.len() != dims.iter().product::<usize>() {
            return Err(CodecError::BadPayload("values do not fill the shape"));
        }
        let widths: Vec<f64> =
            table.ranges().iter().map(|r| f64::from(self.scale) * f64::from(r.hi - r.lo)).collect();
        if widths.len() != channels {
            return Err(CodecError::ChannelMismatch {
                boundary: boundary.to_string(),
                calibrated: widths.len(),
                got: channels,
            });
        }
        let mut rng = Pcg(seed ^ 0x9e37_79b9_7f4a_7c15);
        for (i, v) in values.iter_mut().enumerate() {
            let width = widths[(i / plane) % channels];
            *v += (width * self.kind.draw(&mut rng)) as f32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_bad_ones_are_refused() {
        for name in ["gauss:0.1", "laplace:0.05", "gauss:4"] {
            assert_eq!(name.parse::<Noise>().unwrap().to_string(), name);
        }
        for bad in
            ["gauss", "gauss:0", "gauss:-1", "gauss:5", "uniform:0.1", "gauss:x", "laplace:NaN"]
        {
            assert!(bad.parse::<Noise>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_generator_draws_the_right_spread() {
        let n = 200_000;
        for (kind, std) in
            [(NoiseKind::Gaussian, 1.0), (NoiseKind::Laplace, std::f64::consts::SQRT_2)]
        {
            let mut rng = Pcg(7);
            let draws: Vec<f64> = (0..n).map(|_| kind.draw(&mut rng)).collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            let sd = (draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
            assert!(mean.abs() < 0.02, "{kind:?}: mean {mean}");
            assert!((sd - std).abs() < 0.02 * std, "{kind:?}: sd {sd}, want {std}");
        }
    }
}
