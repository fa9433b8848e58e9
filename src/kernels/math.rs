//! Scalar transcendental functions for f32 kernels, evaluated in f64 and rounded once to f32.
//!
//! The f64 result is within about one f64 ulp of the true value, so rounding it to f32 gives
//! the correctly rounded f32 except when the true value lies within ~2^-29 (relative) of the
//! midpoint between two f32 values. That makes these agree with any accurate f32 library
//! (PyTorch's Sleef paths are within 1 ulp) and never depend on vector width or thread count.

/// `e^x`.
#[inline]
pub(crate) fn exp(x: f32) -> f32 {
    f64::from(x).exp() as f32
}

/// `tanh(x)`.
#[inline]
pub(crate) fn tanh(x: f32) -> f32 {
    f64::from(x).tanh() as f32
}

/// `(cos(x), sin(x))`.
#[inline]
pub(crate) fn cos_sin(x: f32) -> (f32, f32) {
    let (s, c) = f64::from(x).sin_cos();
    (c as f32, s as f32)
}

/// `base^e`.
#[inline]
pub(crate) fn powf(base: f32, e: f32) -> f32 {
    f64::from(base).powf(f64::from(e)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_within_half_an_f32_ulp_of_f64() {
        for i in -2000..2000 {
            let x = i as f32 * 0.0173;
            let e = f64::from(x).exp();
            assert!((f64::from(exp(x)) - e).abs() <= e * 2f64.powi(-24) * 1.0001);
            let t = f64::from(x).tanh();
            assert!((f64::from(tanh(x)) - t).abs() <= t.abs() * 2f64.powi(-24) * 1.0001);
        }
    }
}
