//! Scalar transcendental functions for f32 kernels, evaluated in f64 and rounded once to f32.
//! `tanh` has vector twins ([`tanh4_avx2`], [`tanh8_avx512`]) doing the same f64 operations, so
//! GELU can run 8 or 16 wide with bit-identical results, and `exp` two ([`exp4_avx2`],
//! [`exp8_avx512`]) for softmax and attention; the others use the platform's f64 libm.
//!
//! The f64 result is within about one f64 ulp of the true value, so rounding it to f32 gives
//! the correctly rounded f32 except when the true value lies within ~2^-29 (relative) of the
//! midpoint between two f32 values. That makes these agree with any accurate f32 library
//! (PyTorch's Sleef paths are within 1 ulp) and never depend on vector width or thread count.
#![allow(unsafe_code)]

/// `e^x`: in f64 as `2^n · e^r` (`r = x - n ln 2`, a Taylor polynomial of `e^r`), within a few
/// f64 ulps, rounded once to f32. Written out (rather than libm's) so [`exp4_avx2`] can do
/// exactly the same operations 4 at a time: softmax and attention take one per score, and
/// libm's, one call at a time, was a fifth of a long prompt's attention.
#[inline]
pub(crate) fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    exp_f64(f64::from(x).clamp(EXP_LOW, EXP_HIGH)) as f32
}

/// `e^y` in f64 as `2^n · e^r`, `r = y - n ln 2` in `±ln 2 / 2` and `e^r` its Taylor
/// polynomial, for `y` in `EXP_LOW..=EXP_HIGH` (`n` in -289..=145, so `2^n` is a normal
/// f64): [`exp`]'s and [`tanh`]'s, and [`exp_f64_avx2`] lane by lane.
#[inline(always)]
fn exp_f64(y: f64) -> f64 {
    let n = (y * INV_LN2).round_ties_even();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, y));
    let mut p = EXP_TAYLOR[13];
    for &c in EXP_TAYLOR[..13].iter().rev() {
        p = p.mul_add(r, c);
    }
    p * f64::from_bits(((n as i64 + 1023) as u64) << 52)
}

/// [`exp_f64`] of four f64 lanes, the same operations per lane.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn exp_f64_avx2(y: std::arch::x86_64::__m256d) -> std::arch::x86_64::__m256d {
    use std::arch::x86_64::{
        _mm256_add_epi64, _mm256_castsi256_pd, _mm256_cvtepi32_epi64, _mm256_cvtpd_epi32,
        _mm256_fmadd_pd, _mm256_fnmadd_pd, _mm256_mul_pd, _mm256_round_pd, _mm256_set1_epi64x,
        _mm256_set1_pd, _mm256_slli_epi64, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT,
    };
    // SAFETY: register-only arithmetic; the caller guarantees AVX2 and FMA.
    unsafe {
        let n = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_pd(y, _mm256_set1_pd(INV_LN2)),
        );
        let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_HI), y);
        let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_LO), r);
        let mut p = _mm256_set1_pd(EXP_TAYLOR[13]);
        for &c in EXP_TAYLOR[..13].iter().rev() {
            p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c));
        }
        let ni = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
        let scale = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_add_epi64(
            ni,
            _mm256_set1_epi64x(1023),
        )));
        _mm256_mul_pd(p, scale)
    }
}

/// Below this, `e^x` rounds to 0 in f32 (its least subnormal is about `e^-103.3`).
const EXP_LOW: f64 = -200.0;
/// Above this, `e^x` rounds to infinity in f32 (its largest value is about `e^88.7`).
const EXP_HIGH: f64 = 100.0;

/// [`exp`] of 4 f32 values held as f64 lanes (the same operations per lane, so the same
/// results), returned as 4 f32.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn exp4_avx2(x: std::arch::x86_64::__m256d) -> std::arch::x86_64::__m128 {
    use std::arch::x86_64::{
        _mm256_blendv_pd, _mm256_cmp_pd, _mm256_cvtpd_ps, _mm256_set1_pd, _CMP_GT_OQ, _CMP_LT_OQ,
        _CMP_UNORD_Q,
    };
    // SAFETY: register-only arithmetic; the caller guarantees AVX2 and FMA.
    unsafe {
        // The scalar clamps, as compares and selects (a NaN lane is put back at the end).
        let low = _mm256_set1_pd(EXP_LOW);
        let high = _mm256_set1_pd(EXP_HIGH);
        let y = _mm256_blendv_pd(x, low, _mm256_cmp_pd::<_CMP_LT_OQ>(x, low));
        let y = _mm256_blendv_pd(y, high, _mm256_cmp_pd::<_CMP_GT_OQ>(y, high));
        let e = exp_f64_avx2(y);
        let nan = _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x);
        _mm256_cvtpd_ps(_mm256_blendv_pd(e, x, nan))
    }
}

/// [`exp_f64`] of eight f64 lanes, the same operations per lane.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn exp_f64_avx512(y: std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d {
    use std::arch::x86_64::{
        _mm512_add_epi64, _mm512_castsi512_pd, _mm512_cvtepi32_epi64, _mm512_cvtpd_epi32,
        _mm512_fmadd_pd, _mm512_fnmadd_pd, _mm512_mul_pd, _mm512_roundscale_pd, _mm512_set1_epi64,
        _mm512_set1_pd, _mm512_slli_epi64, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT,
    };
    // SAFETY: register-only arithmetic; the caller guarantees AVX-512F.
    unsafe {
        let n = _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_pd(y, _mm512_set1_pd(INV_LN2)),
        );
        let r = _mm512_fnmadd_pd(n, _mm512_set1_pd(LN2_HI), y);
        let r = _mm512_fnmadd_pd(n, _mm512_set1_pd(LN2_LO), r);
        let mut p = _mm512_set1_pd(EXP_TAYLOR[13]);
        for &c in EXP_TAYLOR[..13].iter().rev() {
            p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c));
        }
        let ni = _mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(n));
        let scale = _mm512_castsi512_pd(_mm512_slli_epi64::<52>(_mm512_add_epi64(
            ni,
            _mm512_set1_epi64(1023),
        )));
        _mm512_mul_pd(p, scale)
    }
}

/// [`exp`] of 8 f32 values held as f64 lanes (the same operations per lane, so the same
/// results), returned as 8 f32.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn exp8_avx512(x: std::arch::x86_64::__m512d) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::{
        _mm512_cmp_pd_mask, _mm512_cvtpd_ps, _mm512_mask_blend_pd, _mm512_set1_pd, _CMP_GT_OQ,
        _CMP_LT_OQ, _CMP_UNORD_Q,
    };
    // SAFETY: register-only arithmetic; the caller guarantees AVX-512F.
    unsafe {
        // The scalar clamps, as compares and selects (a NaN lane is put back at the end).
        let low = _mm512_set1_pd(EXP_LOW);
        let high = _mm512_set1_pd(EXP_HIGH);
        let y = _mm512_mask_blend_pd(_mm512_cmp_pd_mask::<_CMP_LT_OQ>(x, low), x, low);
        let y = _mm512_mask_blend_pd(_mm512_cmp_pd_mask::<_CMP_GT_OQ>(y, high), y, high);
        let e = exp_f64_avx512(y);
        let nan = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_cvtpd_ps(_mm512_mask_blend_pd(nan, e, x))
    }
}

/// Below this |x| (in f64), `tanh(x)` rounds to `x` in f32 (the relative difference, about
/// x²/3, is under 2^-41) and the formula below would lose bits to cancellation.
const TANH_TINY: f64 = 1.0 / (1u64 << 20) as f64;
/// `tanh(20) = 1` in f64, so larger arguments change nothing (and `exp` cannot overflow).
const TANH_CLAMP: f64 = 40.0;
/// ln 2 split so `n · LN2_HI` is exact for the `n` used here (fdlibm's constants).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
const INV_LN2: f64 = std::f64::consts::LOG2_E;
/// `1/k!` for k = 0..=13: Taylor series of `e^r` for |r| <= ln2/2 (truncation error < 1e-17).
const EXP_TAYLOR: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// `tanh(x)`: in f64 as `sign(x) · (1 − 2 / (e^{2|x|} + 1))` (within a few f64 ulps), rounded
/// once to f32, so within an f32 ulp of the true value. Written out (rather than libm's) so
/// [`tanh4_avx2`] can do exactly the same operations 4 at a time.
#[inline]
pub(crate) fn tanh(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let xd = f64::from(x);
    let t = xd.abs();
    if t < TANH_TINY {
        return x;
    }
    let two_t = 2.0 * t;
    let y = if two_t < TANH_CLAMP {
        two_t
    } else {
        TANH_CLAMP
    };
    let e = exp_f64(y);
    (1.0 - 2.0 / (e + 1.0)).copysign(xd) as f32
}

/// [`tanh`] of 4 f32 values held as f64 lanes (the same operations per lane, so the same
/// results), returned as 4 f32.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn tanh4_avx2(x: std::arch::x86_64::__m256d) -> std::arch::x86_64::__m128 {
    use std::arch::x86_64::{
        _mm256_add_pd, _mm256_and_pd, _mm256_andnot_pd, _mm256_blendv_pd, _mm256_cmp_pd,
        _mm256_cvtpd_ps, _mm256_div_pd, _mm256_min_pd, _mm256_or_pd, _mm256_set1_pd, _mm256_sub_pd,
        _CMP_LT_OQ, _CMP_UNORD_Q,
    };
    // SAFETY: register-only arithmetic; the caller guarantees AVX2 and FMA.
    unsafe {
        let sign_mask = _mm256_set1_pd(-0.0);
        let t = _mm256_andnot_pd(sign_mask, x);
        let two_t = _mm256_add_pd(t, t);
        // `min` returns its second operand when the first is NaN, like the scalar `if`.
        let y = _mm256_min_pd(two_t, _mm256_set1_pd(TANH_CLAMP));
        let e = exp_f64_avx2(y);
        let one = _mm256_set1_pd(1.0);
        let q = _mm256_sub_pd(
            one,
            _mm256_div_pd(_mm256_set1_pd(2.0), _mm256_add_pd(e, one)),
        );
        let signed = _mm256_or_pd(_mm256_andnot_pd(sign_mask, q), _mm256_and_pd(sign_mask, x));
        let tiny = _mm256_cmp_pd::<_CMP_LT_OQ>(t, _mm256_set1_pd(TANH_TINY));
        let nan = _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x);
        let out = _mm256_blendv_pd(signed, x, _mm256_or_pd(tiny, nan));
        _mm256_cvtpd_ps(out)
    }
}

/// [`tanh`] of 8 f32 values held as f64 lanes, the same operations per lane as [`tanh`] and
/// [`tanh4_avx2`] (so the same results), returned as 8 f32. AVX-512F only: the sign and
/// select steps are integer and mask operations rather than AVX512DQ's float logic.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn tanh8_avx512(x: std::arch::x86_64::__m512d) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::{
        _mm512_add_pd, _mm512_and_si512, _mm512_andnot_si512, _mm512_castpd_si512,
        _mm512_castsi512_pd, _mm512_cmp_pd_mask, _mm512_cvtpd_ps, _mm512_div_pd,
        _mm512_mask_blend_pd, _mm512_min_pd, _mm512_or_si512, _mm512_set1_epi64, _mm512_set1_pd,
        _mm512_sub_pd, _CMP_LT_OQ, _CMP_UNORD_Q,
    };
    // SAFETY: register-only arithmetic; the caller guarantees AVX-512F.
    unsafe {
        let sign = _mm512_set1_epi64(i64::MIN);
        let xi = _mm512_castpd_si512(x);
        let t = _mm512_castsi512_pd(_mm512_andnot_si512(sign, xi));
        let two_t = _mm512_add_pd(t, t);
        // `min` returns its second operand when the first is NaN, like the scalar `if`.
        let y = _mm512_min_pd(two_t, _mm512_set1_pd(TANH_CLAMP));
        let e = exp_f64_avx512(y);
        let one = _mm512_set1_pd(1.0);
        let q = _mm512_sub_pd(
            one,
            _mm512_div_pd(_mm512_set1_pd(2.0), _mm512_add_pd(e, one)),
        );
        let signed = _mm512_castsi512_pd(_mm512_or_si512(
            _mm512_andnot_si512(sign, _mm512_castpd_si512(q)),
            _mm512_and_si512(sign, xi),
        ));
        let keep_x = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(t, _mm512_set1_pd(TANH_TINY))
            | _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_cvtpd_ps(_mm512_mask_blend_pd(keep_x, signed, x))
    }
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
        }
    }

    #[test]
    fn exp_is_libm_rounded_to_f32_over_the_whole_range() {
        // libm's f64 `exp` rounded once is the correctly rounded f32 but within ~2^-29 of a
        // midpoint; ours may differ from it there only, by one f32 ulp.
        let mut differ = 0;
        for x in sample() {
            let got = exp(x);
            let want = f64::from(x).exp() as f32;
            if want.is_nan() {
                assert!(got.is_nan(), "exp({x:e})");
                continue;
            }
            if got != want {
                differ += 1;
                let next = f32::from_bits(want.to_bits() + 1);
                let prev = f32::from_bits(want.to_bits().saturating_sub(1));
                assert!(
                    got == next || got == prev,
                    "exp({x:e}) = {got:e}, want {want:e}"
                );
            }
        }
        assert!(differ <= 2, "{differ} values off by an ulp");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-104.0), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_avx2_is_bit_identical_to_scalar() {
        use std::arch::x86_64::{_mm256_loadu_pd, _mm_storeu_ps};
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            eprintln!("no AVX2 here: the 4-lane exp is not run");
            return;
        }
        let mut xs = sample();
        // Softmax's arguments: at most zero, dense near it.
        xs.extend((0..40_000).map(|i| -(i as f32) * 0.0027));
        for quad in xs.chunks(4) {
            let mut lanes = [0.0f64; 4];
            for (l, x) in lanes.iter_mut().zip(quad) {
                *l = f64::from(*x);
            }
            let mut out = [0.0f32; 4];
            // SAFETY: AVX2 and FMA were detected above; `lanes` holds 4 f64, `out` 4 f32.
            unsafe { _mm_storeu_ps(out.as_mut_ptr(), exp4_avx2(_mm256_loadu_pd(lanes.as_ptr()))) };
            for (x, got) in quad.iter().zip(out) {
                let want = exp(*x);
                if want.is_nan() {
                    assert!(got.is_nan(), "exp({x:e})");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "exp({x:e})");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_avx512_is_bit_identical_to_scalar() {
        use std::arch::x86_64::{_mm256_storeu_ps, _mm512_loadu_pd};
        if !std::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512 here: the 8-lane exp is not run");
            return;
        }
        let mut xs = sample();
        // Softmax's arguments: at most zero, dense near it.
        xs.extend((0..40_000).map(|i| -(i as f32) * 0.0027));
        for eight in xs.chunks(8) {
            let mut lanes = [0.0f64; 8];
            for (l, x) in lanes.iter_mut().zip(eight) {
                *l = f64::from(*x);
            }
            let mut out = [0.0f32; 8];
            // SAFETY: AVX-512F was detected above; `lanes` holds 8 f64, `out` 8 f32.
            unsafe {
                _mm256_storeu_ps(
                    out.as_mut_ptr(),
                    exp8_avx512(_mm512_loadu_pd(lanes.as_ptr())),
                )
            };
            for (x, got) in eight.iter().zip(out) {
                let want = exp(*x);
                if want.is_nan() {
                    assert!(got.is_nan(), "exp({x:e})");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "exp({x:e})");
                }
            }
        }
    }

    /// f32 values from every part of the range: a stride through all bit patterns, plus the
    /// special and boundary values.
    fn sample() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
        v.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            1e-40,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            TANH_TINY as f32,
            -(TANH_TINY as f32),
            20.0,
            -20.0,
            f32::MAX,
        ]);
        v
    }

    #[test]
    fn tanh_is_within_an_f32_ulp_of_the_true_value() {
        for x in sample() {
            let got = tanh(x);
            let want = f64::from(x).tanh();
            if want.is_nan() {
                assert!(got.is_nan(), "tanh({x:e})");
                continue;
            }
            let ulp = f64::from(f32::from_bits((want as f32).abs().to_bits() + 1))
                - f64::from((want as f32).abs());
            assert!(
                (f64::from(got) - want).abs() <= ulp,
                "tanh({x:e}) = {got:e}, want {want:e}"
            );
            assert_eq!(
                got.is_sign_negative(),
                x.is_sign_negative(),
                "sign of tanh({x:e})"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn tanh_avx512_is_bit_identical_to_scalar() {
        use std::arch::x86_64::{_mm256_storeu_ps, _mm512_loadu_pd};
        if !std::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512 here: the 8-lane tanh is not run");
            return;
        }
        let xs = sample();
        for eight in xs.chunks(8) {
            let mut lanes = [0.0f64; 8];
            for (l, x) in lanes.iter_mut().zip(eight) {
                *l = f64::from(*x);
            }
            let mut out = [0.0f32; 8];
            // SAFETY: AVX-512F was detected above; `lanes` holds 8 f64, `out` 8 f32.
            unsafe {
                _mm256_storeu_ps(
                    out.as_mut_ptr(),
                    tanh8_avx512(_mm512_loadu_pd(lanes.as_ptr())),
                )
            };
            for (x, got) in eight.iter().zip(out) {
                let want = tanh(*x);
                if want.is_nan() {
                    assert!(got.is_nan(), "tanh({x:e})");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "tanh({x:e})");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn tanh_avx2_is_bit_identical_to_scalar() {
        use std::arch::x86_64::{_mm256_loadu_pd, _mm_storeu_ps};
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        let xs = sample();
        for quad in xs.chunks(4) {
            let mut lanes = [0.0f64; 4];
            for (l, x) in lanes.iter_mut().zip(quad) {
                *l = f64::from(*x);
            }
            let mut out = [0.0f32; 4];
            // SAFETY: AVX2 and FMA were detected above; `lanes` holds 4 f64, `out` 4 f32.
            unsafe {
                _mm_storeu_ps(
                    out.as_mut_ptr(),
                    tanh4_avx2(_mm256_loadu_pd(lanes.as_ptr())),
                )
            };
            for (x, got) in quad.iter().zip(out) {
                let want = tanh(*x);
                if want.is_nan() {
                    assert!(got.is_nan(), "tanh({x:e})");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "tanh({x:e})");
                }
            }
        }
    }
}
