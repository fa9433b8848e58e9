use proptest::prelude::*;

use super::super::screen::Screen;
use super::super::{
    argmax, linear, linear_argmax, linear_on, linear_portable, linear_t, reference, simd,
    with_threads, DType, Isa, KernelError, Tensor, Weight,
};
use super::{assert_close, bits, tensor, weight, Rng, DTYPES};

/// Error bound for a dot product of `k` terms summed in 16 fused lanes plus a 4-level tree.
fn dot_tol(k: usize, abs: f64) -> f64 {
    ((k / 16 + 6) as f64) * 2f64.powi(-24) * abs + 1e-30
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn linear_matches_reference(
        m in 1usize..9,
        k in 1usize..300,
        n in 1usize..40,
        dt in 0usize..3,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let x = tensor(&[m, k], &mut rng, 2.0);
        let w = weight(DTYPES[dt], &[n, k], &mut rng, 1.0);
        let y = linear(&x, &w).expect("valid shapes");
        prop_assert_eq!(y.shape(), &[m, n]);
        let want = reference::linear(&x, &w);
        let abs = reference::linear_abs(&x, &w);
        assert_close(y.data(), &want, |i| dot_tol(k, abs[i]), "linear");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn linear_argmax_equals_argmax_of_linear(
        m in 1usize..6,
        k in 1usize..80,
        n in 1usize..1300,
        dt in 0usize..3,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let x = tensor(&[m, k], &mut rng, 2.0);
        let w = weight(DTYPES[dt], &[n, k], &mut rng, 1.0);
        let want = argmax(&linear(&x, &w).expect("valid")).expect("non-empty");
        for t in [1, 2, 3] {
            let got = with_threads(t, || linear_argmax(&x, &w)).expect("valid");
            prop_assert_eq!(&got, &want, "{} threads", t);
        }
    }
}

#[test]
fn linear_argmax_keeps_argmax_tie_nan_and_infinity_rules_across_chunks() {
    // One input column, so each output is x times one weight; 1400 outputs cross several
    // chunks and every thread split. Per case: (weight column, the ids argmax must give for
    // x = 1 and x = -1).
    let n = 1400;
    let column = |f: &dyn Fn(usize) -> f32| -> Vec<f32> { (0..n).map(f).collect() };
    let tie = column(&|j| if j == 600 || j == 1100 { 5.0 } else { 0.0 });
    let nan = column(&|j| match j {
        5 => 1e30,
        900 | 1000 => f32::NAN,
        _ => 0.0,
    });
    let inf = column(&|_| f32::INFINITY);
    let x = Tensor::new(vec![2, 1], vec![1.0, -1.0]).expect("shape");
    for (name, values, want) in [
        ("tie", tie, [600, 0]),
        ("nan", nan, [900, 900]),
        ("inf", inf, [0, 0]),
    ] {
        let w = Weight::from_f32(vec![n, 1], &values).expect("shape");
        assert_eq!(
            argmax(&linear(&x, &w).expect("valid")).expect("non-empty"),
            want,
            "{name}: argmax of linear"
        );
        for t in [1, 2, 3] {
            let got = with_threads(t, || linear_argmax(&x, &w)).expect("valid");
            assert_eq!(got, want, "{name}: {t} threads");
        }
    }
}

#[test]
fn rejects_linear_argmax_with_no_columns() {
    let x = Tensor::new(vec![1, 2], vec![1.0, 2.0]).expect("shape");
    let w = Weight::from_f32(vec![0, 2], &[]).expect("shape");
    let err = linear_argmax(&x, &w).expect_err("nothing to pick from");
    assert!(
        matches!(err, KernelError::EmptyAxis { op: "argmax", .. }),
        "{err:?}"
    );
}

/// Every output of `y = linear(x, w)` has the bits of [`simd::dot`] of its x row and weight row.
fn assert_fixed_order_dot(y: &Tensor, x: &Tensor, w: &Weight, what: &str) {
    let (k, n) = (x.last_dim(), w.shape()[0]);
    let w32: Vec<f32> = reference::weight_values(w)
        .iter()
        .map(|&v| v as f32)
        .collect();
    for (i, xr) in x.data().chunks_exact(k).enumerate() {
        for j in 0..n {
            let want = simd::dot(xr, &w32[j * k..(j + 1) * k]);
            assert_eq!(
                y.data()[i * n + j].to_bits(),
                want.to_bits(),
                "{what} ({i}, {j})"
            );
        }
    }
}

#[test]
fn linear_output_is_the_fixed_order_dot_across_block_boundaries() {
    // Shapes crossing every blocking boundary: rows > MB, inner > KB with a tail, columns > NB;
    // row counts that leave every remainder of the 3- and 6-row micro-kernel tiles; and a
    // single row (the batch-1 path).
    let (k, n) = (1061, 37);
    let mut rng = Rng::new(7);
    for m in [70, 11, 9, 2, 1] {
        let x = tensor(&[m, k], &mut rng, 1.0);
        for dtype in DTYPES {
            let w = weight(dtype, &[n, k], &mut rng, 1.0);
            for isa in simd::available() {
                let y = linear_on(isa, &x, &w).expect("valid shapes");
                assert_fixed_order_dot(&y, &x, &w, &format!("{dtype:?} {isa:?} m={m}"));
            }
        }
    }
}

#[test]
fn linear_is_bit_identical_for_any_thread_count_and_instruction_set() {
    let mut rng = Rng::new(11);
    for (m, k) in [(5, 640), (1, 650)] {
        let x = tensor(&[m, k], &mut rng, 1.0);
        for dtype in DTYPES {
            // 603 rows: thread shares plus a remainder of fewer than the row block.
            let w = weight(dtype, &[603, k], &mut rng, 0.5);
            let one = with_threads(1, || linear(&x, &w)).expect("valid");
            for t in [2, 3] {
                let many = with_threads(t, || linear(&x, &w)).expect("valid");
                assert_eq!(bits(&one), bits(&many), "{dtype:?} m={m} {t} threads");
            }
            let portable = with_threads(2, || linear_portable(&x, &w)).expect("valid");
            assert_eq!(
                bits(&one),
                bits(&portable),
                "{dtype:?} m={m} portable vs {:?}",
                simd::isa()
            );
            for isa in simd::available() {
                let asked = with_threads(2, || linear_on(isa, &x, &w)).expect("valid");
                assert_eq!(bits(&one), bits(&asked), "{dtype:?} m={m} on {isa:?}");
            }
        }
    }
}

#[test]
fn many_rows_keep_every_output_bit_of_the_fixed_order_dot() {
    // From 24 rows `linear` takes the panel kernel (x permuted into lane segments and
    // interleaved 12 rows at a time, weights packed 16 rows at a time): every remainder of the
    // 6-row AVX2 and 12-row AVX-512 tiles, inner sizes with and
    // without a tail and below one lane block, partial panels, each dtype and `linear_t`, and
    // the head's `linear_argmax` must all give the bits of `simd::dot` and of one thread.
    let mut rng = Rng::new(23);
    for (k, n) in [(1061, 37), (7, 21), (640, 16), (1024, 17)] {
        for m in [24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 40] {
            let x = tensor(&[m, k], &mut rng, 1.0);
            for dtype in DTYPES {
                let w = weight(dtype, &[n, k], &mut rng, 1.0);
                let y = with_threads(2, || linear(&x, &w)).expect("valid shapes");
                assert_fixed_order_dot(&y, &x, &w, &format!("{dtype:?} m={m} k={k}"));
                let one = with_threads(1, || linear(&x, &w)).expect("valid");
                assert_eq!(bits(&one), bits(&y), "{dtype:?} m={m} k={k} 1 vs 2 threads");
                let ids = with_threads(2, || linear_argmax(&x, &w)).expect("valid");
                assert_eq!(ids, argmax(&y).expect("non-empty"), "{dtype:?} m={m} k={k}");
            }
            let wt = tensor(&[n, k], &mut rng, 1.0);
            let w = Weight::from_f32(vec![n, k], wt.data()).expect("shape");
            let a = linear_t(&x, &wt).expect("valid");
            let b = linear_portable(&x, &w).expect("valid");
            assert_eq!(bits(&a), bits(&b), "linear_t m={m} k={k}");
        }
    }
}

#[test]
fn many_rows_keep_their_bits_across_blocks_of_panels() {
    // Once x outgrows L2 (1 MiB) the panel kernel packs as many panels as fit its block (four
    // at k = 2048) and runs every row tile against each: 150 columns make two whole blocks and
    // a third ending in a partial panel, on one thread and split between two or three. 30 rows
    // take one panel at a time. At k = 1024 (eight panels a block) and 640 (twelve) the
    // AVX-512 tiles outside Intel take the panels of a block two at a time: 150 columns end
    // on a pair of a whole panel and a partial one, 140 columns on a panel left alone; x is
    // permuted in parallel tasks from these sizes. Past 16 MiB of x (2100 rows at k = 2048)
    // the blocks outside Intel hold eight panels: 140 columns are one of eight and one of a
    // panel and a part. Past 8 MiB of x with fewer than four panels a block (k = 4100: a panel
    // is 256 KiB, one a block, three past 16 MiB of x) the rows are taken in passes of whole
    // groups, the panels packed again for each: 520 rows are two passes, the second short, and
    // 1100 rows three; 37 columns end on a partial panel.
    let mut rng = Rng::new(29);
    for (k, n, m) in [
        (2048, 140, 2100),
        (2048, 150, 30),
        (2048, 150, 131),
        (1024, 150, 300),
        (640, 140, 420),
        (4100, 37, 520),
        (4100, 37, 1100),
    ] {
        let x = tensor(&[m, k], &mut rng, 1.0);
        for dtype in DTYPES {
            let w = weight(dtype, &[n, k], &mut rng, 1.0);
            let one = with_threads(1, || linear(&x, &w)).expect("valid shapes");
            assert_fixed_order_dot(&one, &x, &w, &format!("{dtype:?} m={m} k={k}"));
            for t in [2, 3] {
                let many = with_threads(t, || linear(&x, &w)).expect("valid");
                assert_eq!(bits(&one), bits(&many), "{dtype:?} m={m} k={k} {t} threads");
            }
            for isa in simd::available() {
                let on = with_threads(2, || linear_on(isa, &x, &w)).expect("valid");
                assert_eq!(bits(&one), bits(&on), "{dtype:?} m={m} k={k} on {isa:?}");
            }
        }
    }
}

#[test]
fn linear_accepts_any_leading_shape() {
    let mut rng = Rng::new(3);
    let w = weight(DType::BF16, &[6, 10], &mut rng, 1.0);
    let flat = tensor(&[6, 10], &mut rng, 1.0);
    let y_flat = linear(&flat, &w).expect("valid");
    let x3 = flat.clone().reshape(vec![2, 3, 10]).expect("same size");
    let y3 = linear(&x3, &w).expect("valid");
    assert_eq!(y3.shape(), &[2, 3, 6]);
    assert_eq!(y3.data(), y_flat.data());
    let row = Tensor::new(vec![10], flat.data()[..10].to_vec()).expect("shape");
    let y1 = linear(&row, &w).expect("valid");
    assert_eq!(y1.shape(), &[6]);
    assert_eq!(y1.data(), &y_flat.data()[..6]);
}

#[test]
fn linear_t_equals_linear_with_f32_weights() {
    let mut rng = Rng::new(5);
    let x = tensor(&[4, 33], &mut rng, 1.0);
    let wt = tensor(&[9, 33], &mut rng, 1.0);
    let w = Weight::from_f32(vec![9, 33], wt.data()).expect("shape");
    let a = linear_t(&x, &wt).expect("valid");
    let b = linear(&x, &w).expect("valid");
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn linear_with_empty_inner_dimension_is_zero() {
    // Two rows take the tile kernels, thirty the panel kernel.
    for m in [2, 30] {
        let x = Tensor::new(vec![m, 0], vec![]).expect("shape");
        let w = Weight::from_f32(vec![3, 0], &[]).expect("shape");
        let y = linear(&x, &w).expect("valid");
        assert_eq!(y.shape(), &[m, 3]);
        assert!(y.data().iter().all(|&v| v == 0.0));
        // Block-format rows of no blocks: strips on AVX-512 (both) and on AVX2 (thirty rows),
        // the register kernel (two rows on AVX2), the portable loops.
        let w = Weight::new(
            DType::Q8_0,
            vec![3, 0],
            std::sync::Arc::new(Vec::new()),
            0..0,
        )
        .expect("shape");
        for isa in simd::available() {
            let y = linear_on(isa, &x, &w).expect("valid");
            assert_eq!(y.shape(), &[m, 3], "{}", isa.name());
            assert!(y.data().iter().all(|&v| v == 0.0), "{}", isa.name());
        }
    }
}

#[test]
fn rejects_linear_inner_dim_mismatch() {
    let x = Tensor::zeros(vec![2, 5]);
    let w = Weight::from_f32(vec![3, 4], &[0.0; 12]).expect("shape");
    let err = linear(&x, &w).expect_err("mismatch");
    assert!(matches!(err, KernelError::InnerDim { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("[2, 5]") && msg.contains("[3, 4]"), "{msg}");
}

#[test]
fn rejects_linear_weight_that_is_not_a_matrix() {
    let x = Tensor::zeros(vec![2, 4]);
    let w = Weight::from_f32(vec![4], &[0.0; 4]).expect("shape");
    let err = linear(&x, &w).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { name: "w", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_linear_scalar_input() {
    let w = Weight::from_f32(vec![1, 1], &[1.0]).expect("shape");
    let err = linear(&Tensor::scalar(1.0), &w).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { name: "x", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_linear_t_inner_dim_mismatch() {
    let err = linear_t(&Tensor::zeros(vec![1, 3]), &Tensor::zeros(vec![2, 4])).expect_err("bad");
    assert!(
        matches!(err, KernelError::InnerDim { op: "linear_t", .. }),
        "{err:?}"
    );
}

/// The argmax rule applied to `y`'s columns `rows` only (in increasing order).
fn argmax_among(y: &[f32], rows: &[usize]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for &j in rows {
        best = match best {
            None => Some(j),
            Some(b) if y[b].is_nan() => Some(b),
            Some(b) if y[j].is_nan() || y[j] > y[b] => Some(j),
            keep => keep,
        };
    }
    best
}

/// Weight rows built to stress the screen's bound: 0 random, 1 repeated rows (exact ties),
/// 2 rows one bf16 step apart (near ties), 3 rows holding NaN, infinities, zeros and 1e30.
fn screen_rows(mode: usize, n: usize, k: usize, rng: &mut Rng) -> Vec<f32> {
    let mut v = rng.values(n * k, 1.0);
    match mode {
        1 => {
            for j in 1..n {
                if rng.next_u64().is_multiple_of(2) {
                    let src = (rng.next_u64() as usize) % j;
                    v.copy_within(src * k..(src + 1) * k, j * k);
                }
            }
        }
        2 => {
            let base: Vec<f32> = v[..k].to_vec();
            for j in 1..n {
                for (i, b) in base.iter().enumerate() {
                    let step = if rng.next_u64().is_multiple_of(3) {
                        1.0 + 1.0 / 128.0
                    } else {
                        1.0
                    };
                    v[j * k + i] = b * step;
                }
            }
        }
        3 => {
            for j in 0..n {
                let at = j * k + (rng.next_u64() as usize) % k;
                match rng.next_u64() % 8 {
                    0 => v[at] = f32::NAN,
                    1 => v[at] = f32::INFINITY,
                    2 => v[at] = f32::NEG_INFINITY,
                    3 => v[j * k..(j + 1) * k].fill(0.0),
                    4 => v[at] = 1e30,
                    _ => {}
                }
            }
        }
        _ => {}
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Scoring only the screen's candidates picks the same id as scoring every row, on both
    /// kernel paths: the best row is always kept, and so is every row that ties it or is NaN.
    #[test]
    fn screen_candidates_keep_the_argmax_of_linear(
        k in 1usize..80,
        n in 1usize..400,
        dt in 0usize..3,
        mode in 0usize..4,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let x = tensor(&[1, k], &mut rng, 2.0);
        let w = Weight::from_values(DTYPES[dt], vec![n, k], &screen_rows(mode, n, k, &mut rng))
            .expect("shape");
        let y = linear(&x, &w).expect("valid");
        let want = argmax(&y).expect("non-empty")[0] as usize;
        let screen = Screen::build(&w);
        for isa in [Isa::Portable, simd::isa()] {
            let rows = screen.candidates(isa, x.data()).expect("finite, non-zero x");
            prop_assert!(rows.windows(2).all(|p| p[0] < p[1]), "increasing");
            prop_assert_eq!(argmax_among(y.data(), &rows), Some(want), "{:?}", isa);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Batch 1's screen dismisses whole panels of sixteen rows by an f32 overestimate of their
    /// bounds before any f64 interval: it keeps exactly the rows the intervals alone keep, near
    /// ties, exact ties and non-finite rows included, at any scale of x and w (tiny ones make
    /// the products underflow in f32).
    #[test]
    fn screen_panels_dismissed_in_f32_keep_the_rows_the_intervals_keep(
        k in 1usize..80,
        n in 16usize..1200,
        mode in 0usize..4,
        x_scale in prop::sample::select(vec![1e-30f32, 1e-3, 1.0, 2.0, 1e6]),
        w_scale in prop::sample::select(vec![1e-20f32, 1.0, 1e5]),
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let x = tensor(&[1, k], &mut rng, x_scale);
        let rows: Vec<f32> = screen_rows(mode, n, k, &mut rng).iter().map(|v| v * w_scale).collect();
        let w = Weight::from_values(DType::F32, vec![n, k], &rows).expect("shape");
        let screen = Screen::build(&w);
        for isa in [Isa::Portable, simd::isa()] {
            let want = screen.candidates_unfiltered(isa, x.data());
            prop_assert_eq!(screen.candidates(isa, x.data()), want, "{:?}", isa);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The batched screen (x rounded to 8-bit integers) keeps, for every x row of a batch, every
    /// row that can be its argmax, on both kernel paths and for any batch size (the integer
    /// tile's remainders included).
    #[test]
    fn batched_screen_candidates_keep_the_argmax_of_linear(
        k in 1usize..100,
        n in 1usize..300,
        m in 2usize..11,
        dt in 0usize..3,
        mode in 0usize..4,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let mut x = tensor(&[m, k], &mut rng, 2.0);
        // Rows the bound must decline: all zero, and one holding a NaN.
        x.data_mut()[..k].fill(0.0);
        if m > 2 {
            x.data_mut()[k] = f32::NAN;
        }
        let w = Weight::from_values(DTYPES[dt], vec![n, k], &screen_rows(mode, n, k, &mut rng))
            .expect("shape");
        let y = linear(&x, &w).expect("valid");
        let screen = Screen::build(&w);
        for isa in [Isa::Portable, simd::isa()] {
            let lists = screen.candidates_many(isa, x.data(), m);
            prop_assert_eq!(lists.len(), m);
            prop_assert!(lists[0].is_none(), "an all-zero x row is declined");
            if m > 2 {
                prop_assert!(lists[1].is_none(), "an x row with a NaN is declined");
            }
            for (i, rows) in lists.iter().enumerate() {
                let Some(rows) = rows else { continue };
                let scores = &y.data()[i * n..(i + 1) * n];
                let want = argmax_among(scores, &(0..n).collect::<Vec<_>>());
                prop_assert!(rows.windows(2).all(|p| p[0] < p[1]), "increasing");
                prop_assert_eq!(argmax_among(scores, rows), want, "row {} {:?}", i, isa);
            }
            // Narrowed by the f32 bound, together: still increasing, still holding the
            // argmax, and the declined x rows declined again (asked with every row).
            let every: Vec<usize> = (0..n).collect();
            let asks: Vec<(usize, &[usize])> = lists
                .iter()
                .enumerate()
                .map(|(i, rows)| (i, rows.as_deref().unwrap_or(&every)))
                .collect();
            let narrowed = screen.refine_many(isa, x.data(), &asks);
            prop_assert_eq!(narrowed.len(), m);
            for (i, rows) in narrowed.iter().enumerate() {
                let Some(rows) = rows else {
                    prop_assert!(lists[i].is_none(), "row {} declined only here", i);
                    continue;
                };
                let listed = lists[i].as_deref().expect("declined by both or neither");
                prop_assert!(rows.iter().all(|r| listed.binary_search(r).is_ok()), "a subset");
                prop_assert!(rows.windows(2).all(|p| p[0] < p[1]), "increasing");
                let scores = &y.data()[i * n..(i + 1) * n];
                prop_assert_eq!(argmax_among(scores, rows), argmax_among(scores, &every));
            }
        }
    }
}

#[test]
fn batched_screen_narrows_a_random_head_to_a_few_rows() {
    let (n, k, m) = (8192, 640, 9);
    let mut rng = Rng::new(5);
    let w = weight(DType::BF16, &[n, k], &mut rng, 1.0);
    let screen = Screen::build(&w);
    let x = tensor(&[m, k], &mut rng, 2.0);
    for isa in [Isa::Portable, simd::isa()] {
        for rows in screen.candidates_many(isa, x.data(), m) {
            let rows = rows.expect("finite x");
            assert!(
                !rows.is_empty() && rows.len() <= 64,
                "{} candidates",
                rows.len()
            );
        }
    }
}

#[test]
fn batched_screen_lists_are_the_same_on_any_thread_count() {
    // Several blocks of 2048 rows, so that each thread's task covers its own and raises the
    // floor the others share. From the second block on the rows lean towards the x rows, so
    // the task starting at the first keeps many of its rows unless another's floor comes first;
    // whichever way the threads' timing goes, the lists must be the one-thread lists.
    let (n, k, m) = (9000, 96, 11);
    let mut rng = Rng::new(31);
    let x = tensor(&[m, k], &mut rng, 2.0);
    let mut values = rng.values(n * k, 0.5);
    for j in 2048..n {
        let i = j % m;
        for (v, &b) in values[j * k..(j + 1) * k]
            .iter_mut()
            .zip(&x.data()[i * k..])
        {
            *v += b * 0.3;
        }
    }
    let w = Weight::from_values(DType::BF16, vec![n, k], &values).expect("shape");
    let screen = Screen::build(&w);
    let y = linear(&x, &w).expect("valid");
    let every: Vec<usize> = (0..n).collect();
    for isa in [Isa::Portable, simd::isa()] {
        let one = with_threads(1, || screen.candidates_many(isa, x.data(), m));
        for (i, rows) in one.iter().enumerate() {
            let rows = rows.as_deref().expect("finite x");
            let scores = &y.data()[i * n..(i + 1) * n];
            assert_eq!(argmax_among(scores, rows), argmax_among(scores, &every));
        }
        for t in 2..=4 {
            for _ in 0..3 {
                let many = with_threads(t, || screen.candidates_many(isa, x.data(), m));
                assert_eq!(many, one, "{t} threads, {isa:?}");
            }
        }
    }
}

#[test]
fn screen_narrows_a_random_head_to_a_few_rows() {
    let (n, k) = (8192, 64);
    let mut rng = Rng::new(7);
    let w = weight(DType::BF16, &[n, k], &mut rng, 1.0);
    let screen = Screen::build(&w);
    for _ in 0..4 {
        let x = tensor(&[1, k], &mut rng, 2.0);
        let rows = screen.candidates(simd::isa(), x.data()).expect("finite x");
        assert!(
            !rows.is_empty() && rows.len() <= 64,
            "{} candidates",
            rows.len()
        );
    }
}

#[test]
fn screen_declines_inputs_its_bound_does_not_cover() {
    let w = Weight::from_f32(vec![3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("shape");
    let screen = Screen::build(&w);
    for x in [
        [f32::NAN, 1.0],
        [f32::INFINITY, 1.0],
        [0.0, 0.0],
        [1e36, 1e36],
        // Covered by the first guard with these small weights, not by the second: the AVX2
        // centres' sums, scaled by 2^24, could overflow.
        [1e28, 1e28],
    ] {
        assert_eq!(screen.candidates(Isa::Portable, &x), None, "{x:?}");
    }
}

#[test]
fn linear_argmax_through_the_screen_is_exact_for_an_x_just_inside_its_guards() {
    // Σ |x_i| near 10^26: on AVX2 the centres' sums reach ~10^35 of f32's 3.4 · 10^38.
    let (n, k) = (20_000, 48);
    let mut rng = Rng::new(41);
    let w = weight(DType::BF16, &[n, k], &mut rng, 1.0);
    let x = Tensor::new(vec![1, k], rng.values(k, 3e24)).expect("shape");
    let want = argmax(&linear(&x, &w).expect("valid")).expect("non-empty")[0] as usize;
    let screen = Screen::build(&w);
    for isa in simd::available() {
        let rows = screen
            .candidates(isa, x.data())
            .expect("the screen covers this x");
        assert!(rows.contains(&want), "{isa:?}: {want} not in {rows:?}");
    }
    assert_argmax_of_linear(&x, &w, "x near the guard");
}

#[test]
fn linear_argmax_of_a_batch_through_the_screen_equals_argmax_of_linear() {
    // Large enough for the screened path; a batch with rows the screen declines (zero, NaN,
    // infinite) next to ordinary ones, and sizes off the integer tile's multiples.
    let (n, k) = (20_000, 72);
    let mut rng = Rng::new(12);
    let w = weight(DType::BF16, &[n, k], &mut rng, 1.0);
    for m in [2, 5, 8, 13] {
        let mut x = tensor(&[m, k], &mut rng, 2.0);
        x.data_mut()[..k].fill(0.0);
        x.data_mut()[k + 3] = f32::NAN;
        if m > 2 {
            x.data_mut()[2 * k] = f32::INFINITY;
        }
        assert_argmax_of_linear(&x, &w, &format!("batch {m}"));
    }
}

#[test]
fn linear_argmax_through_the_screen_equals_argmax_of_linear() {
    // Large enough for `linear_argmax` to take the screened path at batch 1.
    let (n, k) = (20_000, 48);
    let mut rng = Rng::new(11);
    let w = weight(DType::BF16, &[n, k], &mut rng, 1.0);
    for _ in 0..3 {
        let x = tensor(&[1, k], &mut rng, 2.0);
        assert_argmax_of_linear(&x, &w, "batch 1");
    }
}

#[test]
fn linear_argmax_of_a_batch_with_long_overlapping_candidate_lists_equals_argmax_of_linear() {
    // Each x row leans towards its own family of near-duplicate weight rows, and every family
    // shares rows with the next, so each row keeps hundreds of candidates after narrowing and
    // the batch's lists overlap: the rows they list are copied out once, over several spans
    // (640 bf16 values a row), and every x row scores its own from them.
    let (n, k, m, family) = (20_000, 640, 12, 900);
    let mut rng = Rng::new(23);
    let mut values = rng.values(n * k, 0.05);
    let bases: Vec<Vec<f32>> = (0..m).map(|_| rng.values(k, 1.0)).collect();
    for (i, base) in bases.iter().enumerate() {
        for r in 0..family {
            // Families 600 rows apart, so each overlaps the next by 300 rows.
            let j = 100 + i * 600 + r * 17 % family;
            for (v, &b) in values[j * k..(j + 1) * k].iter_mut().zip(base) {
                *v = b + rng.unit() * 0.004;
            }
        }
    }
    let w = Weight::from_values(DType::BF16, vec![n, k], &values).expect("shape");
    let x = Tensor::new(vec![m, k], bases.concat()).expect("shape");
    let screen = w.screen();
    let lists = screen.candidates_many(simd::isa(), x.data(), m);
    let long: Vec<(usize, &[usize])> = (0..m)
        .map(|i| (i, lists[i].as_deref().expect("finite x")))
        .collect();
    for (i, refined) in screen
        .refine_many(simd::isa(), x.data(), &long)
        .iter()
        .enumerate()
    {
        let kept = refined.as_ref().expect("finite x").len();
        // Long lists, all scored through the batch's shared copies (below the full pass's
        // 1/16 of the rows).
        assert!((200..=n / 16).contains(&kept), "row {i}: {kept} candidates");
    }
    assert_argmax_of_linear(&x, &w, "long lists");
}

/// `linear_argmax` of x by w gives `argmax(linear(x, w))` on 1, 2 and 3 threads and on the
/// portable path.
fn assert_argmax_of_linear(x: &Tensor, w: &Weight, what: &str) {
    let want = argmax(&linear(x, w).expect("valid")).expect("non-empty");
    for t in [1, 2, 3] {
        let got = with_threads(t, || linear_argmax(x, w)).expect("valid");
        assert_eq!(got, want, "{what}, {t} threads");
    }
    let portable =
        simd::with_instruction_set(Isa::Portable, || linear_argmax(x, w)).expect("valid");
    assert_eq!(portable, want, "{what}, portable");
}

/// Weight bytes that count the hand-backs asked of them (a file mapping drops those pages).
struct CountedReleases {
    bytes: Vec<u8>,
    released: std::sync::atomic::AtomicUsize,
}

impl super::super::tensor::WeightBytes for CountedReleases {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn release(&self, _range: std::ops::Range<usize>) {
        self.released
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl CountedReleases {
    /// Hand-backs since the last call.
    fn take(&self) -> usize {
        self.released.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

/// A random bf16 `[n, k]` weight large enough to take the screen, as a plain weight and as one
/// over the same bytes that counts its hand-backs.
fn head_counting_releases(
    n: usize,
    k: usize,
    rng: &mut Rng,
) -> (Weight, Weight, std::sync::Arc<CountedReleases>) {
    let plain =
        Weight::from_values(DType::BF16, vec![n, k], &rng.values(n * k, 1.0)).expect("shape");
    let counted = std::sync::Arc::new(CountedReleases {
        bytes: plain.bytes().to_vec(),
        released: Default::default(),
    });
    let len = counted.bytes.len();
    let w = Weight::new(DType::BF16, vec![n, k], counted.clone(), 0..len).expect("shape");
    (plain, w, counted)
}

#[test]
fn a_head_the_screen_cannot_narrow_is_scored_a_span_at_a_time_and_handed_back() {
    // An x large enough that a screened sum could overflow skips the screen, and then every row
    // is scored exactly. At one x row as at several, that pass must hand the weight back span by
    // span: read through a file mapping at once, a batch-1 step kept all of the real 270M
    // model's head resident beside its screen (peak RSS 466 MiB against a 342 MiB budget).
    let (n, k) = (40_000, 64);
    let mut rng = Rng::new(31);
    let (_, w, counted) = head_counting_releases(n, k, &mut rng);
    for m in [1, 3] {
        // A first call builds the screen, which hands back what it read.
        linear_argmax(&tensor(&[m, k], &mut rng, 1.0), &w).expect("valid");
        counted.take();
        let x = Tensor::new(vec![m, k], rng.values(m * k, 1e35)).expect("shape");
        let ids = linear_argmax(&x, &w).expect("valid");
        let spans = counted.take();
        let want = argmax(&linear(&x, &w).expect("valid")).expect("rows");
        assert_eq!(ids, want, "m={m}");
        assert!(
            spans >= n / 16384,
            "m={m}: the full pass handed back {spans} spans"
        );
    }
}

#[test]
fn a_screened_head_read_whole_is_handed_back_span_by_span() {
    // A job whose greedy batches built the head's screen (and handed the head's pages back) and
    // whose later batch samples reads every logit: that `linear` must hand the head back as it
    // goes, or the whole head ends up resident beside its screen. Its outputs stay the bits of
    // a weight that has no screen, at one x row and at several.
    let (n, k) = (40_000, 64);
    let mut rng = Rng::new(37);
    let (plain, w, counted) = head_counting_releases(n, k, &mut rng);
    let xs = [
        tensor(&[1, k], &mut rng, 1.0),
        tensor(&[3, k], &mut rng, 1.0),
    ];
    let before: Vec<Tensor> = xs.iter().map(|x| linear(x, &w).expect("valid")).collect();
    assert_eq!(counted.take(), 0, "no screen yet, nothing to hand back");
    linear_argmax(&xs[0], &w).expect("valid");
    counted.take();
    for (x, before) in xs.iter().zip(&before) {
        let m = x.shape()[0];
        let after = linear(x, &w).expect("valid");
        let spans = counted.take();
        assert_eq!(bits(&after), bits(before), "m={m}");
        assert_eq!(
            bits(&after),
            bits(&linear(x, &plain).expect("valid")),
            "m={m}"
        );
        assert!(
            spans >= n / 16384,
            "m={m}: the read handed back {spans} spans"
        );
    }
}
