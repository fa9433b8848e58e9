use proptest::prelude::*;

use super::super::{
    add, argmax, embed, gelu_tanh, mul, reference, rms_norm, rope, rope_inv_freq, round_to_dtype,
    scale, softmax, with_instruction_set, with_threads, DType, Isa, KernelError, Tensor, Weight,
};
use super::{assert_close, bits, tensor, weight, Rng, DTYPES};

const ULP: f64 = 1.0 / (1u64 << 23) as f64;

// ---- add, mul, scale ----

#[test]
fn add_and_mul_broadcast_suffixes_and_scalars() {
    let mut rng = Rng::new(1);
    let a = tensor(&[2, 3, 4], &mut rng, 3.0);
    for bshape in [vec![2, 3, 4], vec![3, 4], vec![4], vec![]] {
        let b = tensor(&bshape, &mut rng, 3.0);
        for (got, want, name) in [
            (add(&a, &b), reference::add(&a, &b), "add"),
            (mul(&a, &b), reference::mul(&a, &b), "mul"),
            // The smaller operand may come first; the result takes the larger shape.
            (add(&b, &a), reference::add(&a, &b), "add swapped"),
            (mul(&b, &a), reference::mul(&a, &b), "mul swapped"),
        ] {
            let got = got.expect("broadcastable");
            assert_eq!(got.shape(), a.shape(), "{name} {bshape:?}");
            // One f32 rounding of the exact result.
            assert_close(got.data(), &want, |i| want[i].abs() * ULP, name);
        }
    }
}

#[test]
fn add_is_bit_identical_across_thread_counts() {
    let mut rng = Rng::new(2);
    let a = tensor(&[300, 640], &mut rng, 1.0);
    let b = tensor(&[640], &mut rng, 1.0);
    let one = with_threads(1, || add(&a, &b)).expect("valid");
    let two = with_threads(2, || add(&a, &b)).expect("valid");
    assert_eq!(bits(&one), bits(&two));
    let same = tensor(&[300, 640], &mut rng, 1.0);
    let one = with_threads(1, || mul(&a, &same)).expect("valid");
    let two = with_threads(2, || mul(&a, &same)).expect("valid");
    assert_eq!(bits(&one), bits(&two));
}

#[test]
fn scale_multiplies_every_element() {
    let x = Tensor::new(vec![2, 2], vec![1.0, -2.0, 0.5, 3.0]).expect("shape");
    assert_eq!(scale(&x, 2.0).data(), &[2.0, -4.0, 1.0, 6.0]);
}

#[test]
fn rejects_add_of_non_broadcastable_shapes() {
    let a = Tensor::zeros(vec![2, 3]);
    let b = Tensor::zeros(vec![2]);
    let err = add(&a, &b).expect_err("not a suffix");
    assert!(
        matches!(err, KernelError::Broadcast { op: "add", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("[2, 3]"), "{err}");
}

#[test]
fn rejects_mul_of_non_broadcastable_shapes() {
    let err = mul(&Tensor::zeros(vec![4, 3]), &Tensor::zeros(vec![4, 1])).expect_err("no");
    assert!(
        matches!(err, KernelError::Broadcast { op: "mul", .. }),
        "{err:?}"
    );
}

// ---- gelu_tanh ----

#[test]
fn gelu_tanh_matches_reference() {
    let mut rng = Rng::new(3);
    let x = tensor(&[10_000], &mut rng, 8.0);
    let got = gelu_tanh(&x);
    let want = reference::gelu_tanh(&x);
    // A handful of f32 roundings on values of size |x|.
    let xs = x.data();
    assert_close(
        got.data(),
        &want,
        |i| 8.0 * ULP * f64::from(xs[i].abs()) + 1e-37,
        "gelu",
    );
}

#[test]
fn gelu_tanh_is_bit_identical_on_every_instruction_set() {
    let mut rng = Rng::new(9);
    // Lengths around the 8-wide vector step and the parallel chunk.
    for n in [1, 7, 8, 9, 4095, 4096 * 3 + 5] {
        let x = tensor(&[n], &mut rng, 6.0);
        let fast = gelu_tanh(&x);
        let slow = with_instruction_set(Isa::Portable, || gelu_tanh(&x));
        assert_eq!(bits(&fast), bits(&slow), "n = {n}");
    }
}

#[test]
fn gelu_tanh_follows_pytorch_operation_order() {
    // Spell out torch's f32 steps for a few values (tanh computed in f64 and rounded; these
    // values are not near an f32 rounding boundary, so every accurate tanh agrees).
    let beta = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    for &x in &[-3.7f32, -0.5, 0.0, 0.1234, 1.0, 2.5, 7.25] {
        let cube = x * x * x;
        let inner = beta * (x + 0.044715f32 * cube);
        let want = 0.5 * x * (1.0 + (f64::from(inner).tanh() as f32));
        let got = gelu_tanh(&Tensor::new(vec![1], vec![x]).expect("shape"));
        assert_eq!(got.data()[0].to_bits(), want.to_bits(), "x = {x}");
    }
}

// ---- rms_norm ----

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn rms_norm_matches_reference(
        rows in 1usize..6,
        d in 1usize..700,
        dt in 0usize..3,
        offset in prop_oneof![Just(0.0f32), Just(1.0f32)],
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let x = tensor(&[rows, d], &mut rng, 4.0);
        let w = weight(DTYPES[dt], &[d], &mut rng, 0.5);
        let got = rms_norm(&x, &w, 1e-6, offset).expect("valid");
        let want = reference::rms_norm(&x, &w, 1e-6, offset);
        assert_close(got.data(), &want, |i| want[i].abs() * 8.0 * ULP + 1e-30, "rms_norm");
    }

    #[test]
    fn softmax_matches_reference(rows in 1usize..5, d in 1usize..300, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let x = tensor(&[rows, d], &mut rng, 20.0);
        let got = softmax(&x).expect("valid");
        let want = reference::softmax(&x);
        assert_close(got.data(), &want, |i| want[i] * 64.0 * ULP + 1e-37, "softmax");
    }

    #[test]
    fn rope_matches_reference(
        b in 1usize..3,
        s in 1usize..5,
        h in 1usize..4,
        half in 1usize..40,
        global in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let d = 2 * half;
        let mut rng = Rng::new(seed);
        let x = tensor(&[b, s, h, d], &mut rng, 2.0);
        let positions: Vec<i64> =
            (0..b * s).map(|_| (rng.next_u64() % 40_000) as i64 - 5).collect();
        let (theta, scaling) = if global { (1e6, 8.0) } else { (1e4, 1.0) };
        let got = rope(&x, &positions, theta, scaling).expect("valid");
        let want = reference::rope(&x, &positions, theta, scaling);
        // Same angles; two f32 products and a sum of values up to 2.
        assert_close(got.data(), &want, |_| 8.0 * ULP * 2.0, "rope");
    }
}

#[test]
fn rms_norm_follows_hf_operation_order() {
    let x = [0.3f32, -1.7, 2.25, 0.001, -0.5];
    let w = [0.1f32, -0.2, 0.0, 0.7, 1.5];
    let xt = Tensor::new(vec![1, 5], x.to_vec()).expect("shape");
    let wt = Weight::from_f32(vec![5], &w).expect("shape");
    let got = rms_norm(&xt, &wt, 1e-6, 1.0).expect("valid");
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = sum as f32 / 5.0;
    let r = 1.0 / (mean + 1e-6f32).sqrt();
    for i in 0..5 {
        let want = (x[i] * r) * (1.0 + w[i]);
        assert_eq!(got.data()[i].to_bits(), want.to_bits(), "element {i}");
    }
}

#[test]
fn rms_norm_is_bit_identical_across_thread_counts() {
    let mut rng = Rng::new(4);
    let x = tensor(&[200, 640], &mut rng, 1.0);
    let w = weight(DType::BF16, &[640], &mut rng, 1.0);
    let one = with_threads(1, || rms_norm(&x, &w, 1e-6, 1.0)).expect("valid");
    let two = with_threads(2, || rms_norm(&x, &w, 1e-6, 1.0)).expect("valid");
    assert_eq!(bits(&one), bits(&two));
}

#[test]
fn rms_norm_of_many_rows_equals_each_row_alone() {
    // Rows are normed in interleaved groups; each must still get exactly its lone-row result.
    let mut rng = Rng::new(9);
    for d in [1usize, 7, 13, 256, 640] {
        let mut x = tensor(&[19, d], &mut rng, 3.0);
        // Squares that overflow, underflow and are NaN, in some rows of the groups.
        let extremes = [1e30f32, -2e20, 1e-30, 3e-39, f32::NAN, f32::INFINITY];
        for (i, v) in x
            .data_mut()
            .iter_mut()
            .enumerate()
            .skip(d / 2)
            .step_by(3 * d + 1)
        {
            *v = extremes[i % extremes.len()];
        }
        let w = weight(DType::BF16, &[d], &mut rng, 0.5);
        let all = rms_norm(&x, &w, 1e-6, 1.0).expect("valid");
        for (r, row) in x.data().chunks_exact(d).enumerate() {
            let one = Tensor::new(vec![1, d], row.to_vec()).expect("shape");
            let alone = rms_norm(&one, &w, 1e-6, 1.0).expect("valid");
            assert_eq!(
                bits(&alone),
                bits(&all)[r * d..(r + 1) * d].to_vec(),
                "row {r} of d {d}"
            );
        }
    }
}

#[test]
fn rejects_rms_norm_weight_of_wrong_length() {
    let x = Tensor::zeros(vec![2, 8]);
    let w = Weight::from_f32(vec![7], &[0.0; 7]).expect("shape");
    let err = rms_norm(&x, &w, 1e-6, 1.0).expect_err("length");
    assert!(
        matches!(err, KernelError::FeatureWeight { d: 8, .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_rms_norm_of_a_scalar() {
    let w = Weight::from_f32(vec![1], &[0.0]).expect("shape");
    let err = rms_norm(&Tensor::scalar(1.0), &w, 1e-6, 1.0).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { op: "rms_norm", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_rms_norm_negative_eps() {
    let w = Weight::from_f32(vec![2], &[0.0; 2]).expect("shape");
    let err = rms_norm(&Tensor::zeros(vec![2]), &w, -1.0, 1.0).expect_err("eps");
    assert!(
        matches!(err, KernelError::BadParam { name: "eps", .. }),
        "{err:?}"
    );
}

// ---- softmax, argmax ----

#[test]
fn softmax_rows_sum_to_one_and_masked_entries_are_zero() {
    let x = Tensor::new(
        vec![2, 4],
        vec![1.0, f32::NEG_INFINITY, 3.0, -2.0, 0.0, 0.0, 0.0, 0.0],
    )
    .expect("shape");
    let p = softmax(&x).expect("valid");
    assert_eq!(p.data()[1], 0.0);
    for row in p.data().chunks(4) {
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-6, "{s}");
    }
    assert!(p.data()[4..].iter().all(|&v| v == 0.25));
}

#[test]
fn softmax_of_a_row_with_nan_is_nan() {
    let x = Tensor::new(vec![3], vec![1.0, f32::NAN, 2.0]).expect("shape");
    assert!(softmax(&x)
        .expect("valid")
        .data()
        .iter()
        .all(|v| v.is_nan()));
}

#[test]
fn argmax_breaks_ties_to_the_lowest_index() {
    let x = Tensor::new(
        vec![3, 4],
        vec![1.0, 5.0, 5.0, 2.0, 7.0, 7.0, 7.0, 7.0, -1.0, 0.0, 3.0, 3.0],
    )
    .expect("shape");
    assert_eq!(argmax(&x).expect("valid"), vec![1, 0, 2]);
    assert_eq!(argmax(&x).expect("valid"), reference::argmax(&x));
}

#[test]
fn argmax_takes_the_first_nan_like_torch() {
    let x = Tensor::new(vec![5], vec![1.0, 9.0, f32::NAN, 10.0, f32::NAN]).expect("shape");
    assert_eq!(argmax(&x).expect("valid"), vec![2]);
    let inf = Tensor::new(vec![3], vec![f32::NEG_INFINITY; 3]).expect("shape");
    assert_eq!(argmax(&inf).expect("valid"), vec![0]);
}

#[test]
fn argmax_matches_reference_and_thread_counts() {
    let mut rng = Rng::new(9);
    // Coarse values so ties happen often.
    let v: Vec<f32> = (0..64 * 1000).map(|_| (rng.unit() * 4.0).round()).collect();
    let x = Tensor::new(vec![64, 1000], v).expect("shape");
    let one = with_threads(1, || argmax(&x)).expect("valid");
    let two = with_threads(2, || argmax(&x)).expect("valid");
    assert_eq!(one, two);
    assert_eq!(one, reference::argmax(&x));
}

#[test]
fn rejects_argmax_over_an_empty_axis() {
    let err = argmax(&Tensor::zeros(vec![2, 0])).expect_err("empty");
    assert!(matches!(err, KernelError::EmptyAxis { .. }), "{err:?}");
}

#[test]
fn rejects_argmax_of_a_scalar() {
    let err = argmax(&Tensor::scalar(1.0)).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { op: "argmax", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_softmax_of_a_scalar() {
    let err = softmax(&Tensor::scalar(1.0)).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { op: "softmax", .. }),
        "{err:?}"
    );
}

// ---- embed ----

#[test]
fn embed_gathers_decodes_and_scales_rows() {
    let mut rng = Rng::new(5);
    for dtype in DTYPES {
        let w = weight(dtype, &[50, 12], &mut rng, 1.0);
        let ids = [3u32, 0, 49, 3];
        let s = round_to_dtype(12f32.sqrt(), dtype);
        let got = embed(&ids, &w, s).expect("valid");
        assert_eq!(got.shape(), &[4, 12]);
        let want = reference::embed(&ids, &w, s);
        // One f32 rounding of an exact product.
        let want32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_eq!(got.data(), &want32[..], "{dtype:?}");
    }
}

#[test]
fn round_to_dtype_gives_hf_gemma_embedding_scales() {
    let s = (640f64).sqrt() as f32;
    assert_eq!(round_to_dtype(s, DType::BF16), 25.25);
    assert_eq!(round_to_dtype(s, DType::F16), 25.296875);
    assert_eq!(round_to_dtype(s, DType::F32), s);
}

#[test]
fn rejects_embed_id_beyond_vocabulary() {
    let w = Weight::from_f32(vec![4, 2], &[0.0; 8]).expect("shape");
    let err = embed(&[1, 4], &w, 1.0).expect_err("out of range");
    assert!(
        matches!(
            err,
            KernelError::TokenOutOfRange {
                id: 4,
                vocab: 4,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("token id 4") && msg.contains("4 rows"),
        "{msg}"
    );
}

#[test]
fn rejects_embed_weight_that_is_not_a_matrix() {
    let w = Weight::from_f32(vec![4], &[0.0; 4]).expect("shape");
    let err = embed(&[0], &w, 1.0).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { op: "embed", .. }),
        "{err:?}"
    );
}

// ---- rope ----

#[test]
fn rope_inv_freq_follows_hf() {
    let f = rope_inv_freq(256, 10_000.0, 1.0);
    assert_eq!(f.len(), 128);
    assert_eq!(f[0], 1.0);
    // 10000^(128/256) = 100 exactly.
    assert_eq!(f[64], 1.0f32 / 100.0);
    let scaled = rope_inv_freq(256, 1e6, 8.0);
    let plain = rope_inv_freq(256, 1e6, 1.0);
    for (s, p) in scaled.iter().zip(&plain) {
        assert_eq!(*s, p / 8.0);
    }
    for i in 0..128 {
        let want = 1.0 / 1e6f64.powf(2.0 * i as f64 / 256.0);
        assert!(
            (f64::from(plain[i]) - want).abs() <= want * 2.0 * ULP,
            "{i}"
        );
    }
}

#[test]
fn rope_at_position_zero_is_the_identity() {
    let mut rng = Rng::new(6);
    let x = tensor(&[1, 2, 3, 8], &mut rng, 1.0);
    let y = rope(&x, &[0, 0], 1e4, 1.0).expect("valid");
    assert_eq!(bits(&y), bits(&x));
}

#[test]
fn rope_rotates_each_half_pair_by_position_times_frequency() {
    // head_dim 2: one pair, frequency 1, so position p rotates (x1, x2) by p radians.
    let x = Tensor::new(vec![1, 1, 1, 2], vec![1.0, 0.0]).expect("shape");
    let y = rope(&x, &[1], 1e4, 1.0).expect("valid");
    assert_eq!(y.data(), &[1f64.cos() as f32, 1f64.sin() as f32]);
}

#[test]
fn rope_tables_kept_between_calls_answer_only_their_own_parameters() {
    // A decode step repeats its rope calls in every layer, so tables are kept from recent
    // calls: one that differs from a kept table in head size, base, scaling or any position
    // must not be given it. Five kinds of call, more than are kept, in rounds.
    let mut rng = Rng::new(9);
    let x8 = tensor(&[2, 3, 2, 8], &mut rng, 1.0);
    let x16 = tensor(&[2, 3, 1, 16], &mut rng, 1.0);
    let pos: Vec<i64> = vec![5, 6, 7, 5, 6, 7];
    let mut moved = pos.clone();
    moved[4] = 9;
    let calls = [
        (&x8, &pos, 1e4, 1.0),
        (&x8, &pos, 1e6, 1.0),
        (&x8, &pos, 1e4, 8.0),
        (&x8, &moved, 1e4, 1.0),
        (&x16, &pos, 1e4, 1.0),
    ];
    for round in 0..3 {
        for (i, &(x, p, theta, scaling)) in calls.iter().enumerate() {
            let got = rope(x, p, theta, scaling).expect("valid");
            let want = reference::rope(x, p, theta, scaling);
            assert_close(
                got.data(),
                &want,
                |_| 8.0 * ULP * 2.0,
                &format!("round {round}, call {i}"),
            );
        }
    }
}

#[test]
fn rope_is_bit_identical_across_thread_counts() {
    let mut rng = Rng::new(8);
    let x = tensor(&[4, 16, 4, 256], &mut rng, 1.0);
    let pos: Vec<i64> = (0..64).map(|i| i * 37 % 500).collect();
    let one = with_threads(1, || rope(&x, &pos, 1e6, 8.0)).expect("valid");
    let two = with_threads(2, || rope(&x, &pos, 1e6, 8.0)).expect("valid");
    assert_eq!(bits(&one), bits(&two));
}

#[test]
fn rejects_rope_odd_head_dim() {
    let err = rope(&Tensor::zeros(vec![1, 1, 1, 3]), &[0], 1e4, 1.0).expect_err("odd");
    assert!(
        matches!(err, KernelError::OddHeadDim { head_dim: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_rope_wrong_position_count() {
    let err = rope(&Tensor::zeros(vec![2, 3, 1, 4]), &[0, 1, 2], 1e4, 1.0).expect_err("count");
    assert!(
        matches!(
            err,
            KernelError::Positions {
                expected: 6,
                found: 3,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn rejects_rope_input_that_is_not_rank_4() {
    let err = rope(&Tensor::zeros(vec![2, 4]), &[0, 1], 1e4, 1.0).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { op: "rope", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_rope_non_positive_theta_or_scaling() {
    let x = Tensor::zeros(vec![1, 1, 1, 2]);
    let err = rope(&x, &[0], 0.0, 1.0).expect_err("theta");
    assert!(
        matches!(err, KernelError::BadParam { name: "theta", .. }),
        "{err:?}"
    );
    let err = rope(&x, &[0], 1e4, f32::NAN).expect_err("scaling");
    assert!(
        matches!(
            err,
            KernelError::BadParam {
                name: "scaling",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn rms_norm_adds_each_rows_squares_in_ascending_column_order() {
    // 1 + 2⁻²⁴ is a tie that rounds down to 1 in f32; three squares of 2⁻⁵⁴ added after the 1
    // are each lost in f64, but added before it they push the sum past the tie. So a sum taken
    // in any order that puts one of them first gives another f32 mean, and another output.
    let pattern = [
        1.0f32,
        2f32.powi(-12),
        2f32.powi(-27),
        2f32.powi(-27),
        2f32.powi(-27),
    ];
    let sum = |order: &[f32]| order.iter().fold(0.0f64, |s, &v| s + f64::from(v * v)) as f32;
    let mut reversed = pattern;
    reversed.reverse();
    assert_ne!(
        sum(&pattern),
        sum(&reversed),
        "the pattern must depend on the order"
    );
    for d in [8usize, 13, 640] {
        let rows = 19;
        let mut values = vec![0.0f32; rows * d];
        for r in 0..rows {
            let at = (3 * r) % (d - pattern.len() + 1);
            values[r * d + at..][..pattern.len()].copy_from_slice(&pattern);
        }
        let x = Tensor::new(vec![rows, d], values.clone()).expect("shape");
        let w = Weight::from_f32(vec![d], &vec![0.0f32; d]).expect("shape");
        let all = bits(&rms_norm(&x, &w, 0.0, 1.0).expect("valid"));
        for (r, row) in values.chunks_exact(d).enumerate() {
            let inv = 1.0 / (sum(row) / d as f32).sqrt();
            let want: Vec<u32> = row.iter().map(|&v| (v * inv).to_bits()).collect();
            assert_eq!(all[r * d..(r + 1) * d].to_vec(), want, "row {r} of d {d}");
        }
    }
}
