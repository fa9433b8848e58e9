//! Fast kernels against their slow twins in `reference`, determinism across thread counts and
//! instruction sets, and the refusals (`rejects_*`).

// Index loops read closer to the formulas being checked.
#![allow(clippy::needless_range_loop)]

mod attention;
mod linear;
mod ops;
mod quant;

use super::tensor::{DType, Tensor, Weight};

/// A small deterministic generator (xorshift64*), so failures reproduce from the seed.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    pub(super) fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub(super) fn values(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }
}

pub(super) fn tensor(shape: &[usize], rng: &mut Rng, scale: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape.to_vec(), rng.values(n, scale)).expect("test shape")
}

pub(super) fn weight(dtype: DType, shape: &[usize], rng: &mut Rng, scale: f32) -> Weight {
    let n = shape.iter().product();
    Weight::from_values(dtype, shape.to_vec(), &rng.values(n, scale)).expect("test shape")
}

pub(super) const DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];

pub(super) fn bits(t: &Tensor) -> Vec<u32> {
    t.data().iter().map(|v| v.to_bits()).collect()
}

/// `|got - want| <= tol(i)` for every element, with a message naming the first failure.
pub(super) fn assert_close(got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= tol(i),
            "{what}: element {i}: got {g}, want {w}, error {err:e} > {:e}",
            tol(i)
        );
    }
}
