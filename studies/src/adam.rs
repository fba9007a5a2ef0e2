//! Adam on flat parameter vectors: the optimizer of the attacks (pixels) and of training
//! (heads' weights). The gradients come from burn's autodiff; the step is plain Rust.

/// Adam's moments for `n` parameters.
#[derive(Clone, Debug)]
pub struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
    t: i32,
}

impl Adam {
    /// State for `n` parameters.
    pub fn new(n: usize) -> Self {
        Self { m: vec![0.0; n], v: vec![0.0; n], t: 0 }
    }

    /// One step of size `lr` along the gradient `g`.
    pub fn step(&mut self, x: &mut [f32], g: &[f32], lr: f32) {
        const B1: f32 = 0.9;
        const B2: f32 = 0.999;
        self.t += 1;
        let (c1, c2) = (1.0 - B1.powi(self.t), 1.0 - B2.powi(self.t));
        for i in 0..x.len() {
            self.m[i] = B1 * self.m[i] + (1.0 - B1) * g[i];
            self.v[i] = B2 * self.v[i] + (1.0 - B2) * g[i] * g[i];
            x[i] -= lr * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + 1e-8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On `(x − 3)²` it walks to the minimum, about `lr` a step at first.
    #[test]
    fn adam_finds_a_parabolas_minimum() {
        let mut x = [0.0f32];
        let mut adam = Adam::new(1);
        let g = [2.0 * (x[0] - 3.0)];
        adam.step(&mut x, &g, 0.1);
        assert!((x[0] - 0.1).abs() < 1e-4, "{}", x[0]);
        for _ in 0..500 {
            let g = [2.0 * (x[0] - 3.0)];
            adam.step(&mut x, &g, 0.05);
        }
        assert!((x[0] - 3.0).abs() < 0.05, "{}", x[0]);
    }
}
