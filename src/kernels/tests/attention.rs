use proptest::prelude::*;

use super::super::attention::attention_one_row_at_a_time;
use super::super::{
    attention, attention_on, reference, with_threads, CacheKind, Isa, KernelError, KvCache, Tensor,
};
use super::{assert_close, bits, tensor, Rng};

/// Runs attention calls through a [`KvCache`] while keeping the full key/value history, so
/// each call can be checked against `reference::attention`.
struct Harness {
    cache: KvCache,
    window: Option<usize>,
    batch: usize,
    kv: usize,
    d: usize,
    /// Per sequence: every key (then value) row appended so far, `[col][kv][d]` flattened.
    k_hist: Vec<Vec<f32>>,
    v_hist: Vec<Vec<f32>>,
}

impl Harness {
    fn new(kind: CacheKind, batch: usize, kv: usize, d: usize) -> Harness {
        let window = match kind {
            CacheKind::Sliding { window } => Some(window),
            CacheKind::Global { .. } => None,
        };
        Harness {
            cache: KvCache::new(kind, batch, kv, d).expect("valid cache"),
            window,
            batch,
            kv,
            d,
            k_hist: vec![Vec::new(); batch],
            v_hist: vec![Vec::new(); batch],
        }
    }

    fn history(&self, h: &[Vec<f32>]) -> Tensor {
        let total = self.cache.len();
        let data: Vec<f32> = h.iter().flatten().copied().collect();
        Tensor::new(vec![self.batch, total, self.kv, self.d], data).expect("history shape")
    }

    /// One call; returns (fast output, reference output).
    fn step(
        &mut self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        pad: &[usize],
        scale: f32,
    ) -> (Tensor, Vec<f64>) {
        let out = attention(q, k, v, &mut self.cache, pad, scale).expect("valid attention");
        let t = q.shape()[1];
        let per = t * self.kv * self.d;
        for b in 0..self.batch {
            self.k_hist[b].extend_from_slice(&k.data()[b * per..(b + 1) * per]);
            self.v_hist[b].extend_from_slice(&v.data()[b * per..(b + 1) * per]);
        }
        let want = reference::attention(
            q,
            &self.history(&self.k_hist),
            &self.history(&self.v_hist),
            pad,
            self.window,
            scale,
        );
        (out, want)
    }
}

fn qkv(
    rng: &mut Rng,
    b: usize,
    t: usize,
    h: usize,
    kv: usize,
    d: usize,
) -> (Tensor, Tensor, Tensor) {
    (
        tensor(&[b, t, h, d], rng, 1.0),
        tensor(&[b, t, kv, d], rng, 1.0),
        tensor(&[b, t, kv, d], rng, 1.0),
    )
}

/// Left padding of up to `prefill` columns per sequence (from `pad_seed`), and a cache of
/// `window` columns, or a global one holding the prefill and the decode steps.
fn pads_and_cache(
    batch: usize,
    prefill: usize,
    steps: usize,
    window: Option<usize>,
    pad_seed: u64,
) -> (Vec<usize>, CacheKind) {
    let mut pads = Rng::new(pad_seed);
    let pad = (0..batch)
        .map(|_| (pads.next_u64() % (prefill as u64 + 1)) as usize)
        .collect();
    let kind = match window {
        Some(window) => CacheKind::Sliding { window },
        None => CacheKind::Global {
            capacity: prefill + steps,
        },
    };
    (pad, kind)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Prefill then decode steps, global or sliding, GQA, left padding: every call matches the
    /// reference computed from the full history.
    #[test]
    fn attention_matches_reference(
        batch in 1usize..4,
        kv in 1usize..3,
        group in 1usize..4,
        d in 1usize..21,
        window in proptest::option::of(1usize..7),
        prefill in 1usize..10,
        steps in 0usize..5,
        pad_seed in any::<u64>(),
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let (pad, kind) = pads_and_cache(batch, prefill, steps, window, pad_seed);
        let heads = kv * group;
        let scale = 1.0 / (d as f32).sqrt();
        let mut hs = Harness::new(kind, batch, kv, d);
        for t in std::iter::once(prefill).chain(std::iter::repeat_n(1, steps)) {
            let (q, k, v) = qkv(&mut rng, batch, t, heads, kv, d);
            let (out, want) = hs.step(&q, &k, &v, &pad, scale);
            prop_assert_eq!(out.shape(), q.shape());
            assert_close(out.data(), &want, |_| 1e-5, "attention");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Rows attended in groups (a kv head's heads at several positions, split wherever the
    /// threads' tasks end) keep the bits of each row attended alone: prefills longer and
    /// shorter than a group's span and than a sliding window, decode steps, GQA, left padding,
    /// head sizes off the 16 lanes and on them (where AVX2's score tile takes whole blocks of
    /// keys), on 1 and 3 threads.
    #[test]
    fn grouped_rows_keep_the_bits_of_each_row_alone(
        batch in 1usize..4,
        kv in 1usize..3,
        group in 1usize..6,
        d in prop_oneof![1usize..40, (1usize..4).prop_map(|m| 16 * m)],
        window in proptest::option::of(1usize..12),
        prefill in 1usize..40,
        steps in 0usize..4,
        threads in prop_oneof![Just(1usize), Just(3usize)],
        pad_seed in any::<u64>(),
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let (pad, kind) = pads_and_cache(batch, prefill, steps, window, pad_seed);
        let heads = kv * group;
        let scale = 1.0 / (d as f32).sqrt();
        let mut grouped = KvCache::new(kind, batch, kv, d).expect("valid cache");
        let mut alone = grouped.clone();
        for t in std::iter::once(prefill).chain(std::iter::repeat_n(1, steps)) {
            let (q, k, v) = qkv(&mut rng, batch, t, heads, kv, d);
            let got = with_threads(threads, || attention(&q, &k, &v, &mut grouped, &pad, scale))
                .expect("valid attention");
            let want = attention_one_row_at_a_time(&q, &k, &v, &mut alone, &pad, scale)
                .expect("valid attention");
            prop_assert_eq!(bits(&got), bits(&want), "t {}", t);
        }
    }
}

#[test]
fn sliding_ring_holds_exactly_the_last_window_positions() {
    // Keys encode their column, so the ring's content is checkable exactly.
    let key_for = |col: usize, b: usize| vec![col as f32 + 100.0 * b as f32, -(col as f32)];
    for chunks in [
        vec![10],
        vec![1; 10],
        vec![3, 1, 1, 1, 1, 1, 1, 1],
        vec![6, 4],
        vec![2, 5, 3],
    ] {
        let mut cache = KvCache::sliding(2, 1, 2, 4).expect("valid");
        let mut col = 0;
        for t in chunks.iter().copied() {
            let mut k = Vec::new();
            for b in 0..2 {
                for c in col..col + t {
                    k.extend(key_for(c, b));
                }
            }
            let k = Tensor::new(vec![2, t, 1, 2], k).expect("shape");
            let q = Tensor::zeros(vec![2, t, 1, 2]);
            attention(&q, &k, &k, &mut cache, &[0, 0], 1.0).expect("valid");
            col += t;
        }
        assert_eq!(cache.len(), 10, "{chunks:?}");
        assert_eq!(cache.held(), 6..10, "{chunks:?}");
        for c in 0..10 {
            for b in 0..2 {
                let got = cache.key(b, c, 0);
                if c >= 6 {
                    assert_eq!(got, Some(&key_for(c, b)[..]), "{chunks:?} col {c}");
                    assert_eq!(cache.value(b, c, 0), Some(&key_for(c, b)[..]));
                } else {
                    assert_eq!(got, None, "{chunks:?} col {c} should be evicted");
                }
            }
        }
    }
}

#[test]
fn global_cache_holds_every_position() {
    let mut cache = KvCache::global(1, 1, 1, 8).expect("valid");
    for c in 0..5 {
        let k = Tensor::new(vec![1, 1, 1, 1], vec![c as f32]).expect("shape");
        attention(&k, &k, &k, &mut cache, &[0], 1.0).expect("valid");
    }
    assert_eq!(cache.held(), 0..5);
    for c in 0..5 {
        assert_eq!(cache.key(0, c, 0), Some(&[c as f32][..]));
    }
    assert_eq!(cache.key(0, 5, 0), None);
    cache.reset();
    assert!(cache.is_empty());
    assert_eq!(cache.held(), 0..0);
}

/// With q = 0 every visible key gets the same weight, so the output is the mean of the visible
/// values; values hold their column index, revealing exactly which columns were attended.
fn visible_mean(kind: CacheKind, pad: &[usize], chunks: &[usize]) -> Vec<Vec<f32>> {
    let batch = pad.len();
    let mut cache = KvCache::new(kind, batch, 1, 1).expect("valid");
    let mut col = 0;
    let mut outs = vec![Vec::new(); batch];
    for &t in chunks {
        let v: Vec<f32> = (0..batch)
            .flat_map(|_| (col..col + t).map(|c| c as f32))
            .collect();
        let v = Tensor::new(vec![batch, t, 1, 1], v).expect("shape");
        let q = Tensor::zeros(vec![batch, t, 1, 1]);
        let out = attention(&q, &q, &v, &mut cache, pad, 1.0).expect("valid");
        for (b, o) in outs.iter_mut().enumerate() {
            o.extend_from_slice(&out.data()[b * t..(b + 1) * t]);
        }
        col += t;
    }
    outs
}

fn mean(cols: std::ops::RangeInclusive<usize>) -> f32 {
    let n = cols.clone().count() as f32;
    cols.map(|c| c as f32).sum::<f32>() / n
}

fn assert_near(got: f32, want: f32, what: &str) {
    assert!(
        (got - want).abs() <= 1e-5 * want.abs().max(1.0),
        "{what}: got {got}, want {want}"
    );
}

#[test]
fn sliding_query_sees_exactly_window_keys_including_itself() {
    // Window 4: column c sees max(0, c - 3)..=c, whether prefilled at once or decoded.
    for chunks in [&[10][..], &[1; 10][..], &[7, 1, 1, 1][..]] {
        let out = visible_mean(CacheKind::Sliding { window: 4 }, &[0], chunks);
        for c in 0..10 {
            assert_near(
                out[0][c],
                mean(c.saturating_sub(3)..=c),
                &format!("{chunks:?} column {c}"),
            );
        }
    }
}

#[test]
fn padded_columns_are_never_attended() {
    for kind in [
        CacheKind::Global { capacity: 10 },
        CacheKind::Sliding { window: 4 },
    ] {
        let out = visible_mean(kind, &[0, 3], &[6, 1, 1, 1, 1]);
        for c in 0..10 {
            let w = match kind {
                CacheKind::Sliding { window } => window,
                CacheKind::Global { .. } => usize::MAX,
            };
            let lo = (c + 1usize).saturating_sub(w);
            assert_near(out[0][c], mean(lo..=c), &format!("{kind:?} seq 0 col {c}"));
            if c < 3 {
                assert_eq!(out[1][c], 0.0, "{kind:?} a padded query sees nothing");
            } else {
                assert_near(
                    out[1][c],
                    mean(lo.max(3)..=c),
                    &format!("{kind:?} seq 1 col {c}"),
                );
            }
        }
    }
}

#[test]
fn query_heads_share_kv_heads_in_groups() {
    // 4 query heads over 2 kv heads: heads 0, 1 read kv head 0; heads 2, 3 read kv head 1.
    let mut cache = KvCache::global(1, 2, 1, 4).expect("valid");
    let q = Tensor::zeros(vec![1, 1, 4, 1]);
    let k = Tensor::zeros(vec![1, 1, 2, 1]);
    let v = Tensor::new(vec![1, 1, 2, 1], vec![10.0, 20.0]).expect("shape");
    let out = attention(&q, &k, &v, &mut cache, &[0], 1.0).expect("valid");
    assert_eq!(out.data(), &[10.0, 10.0, 20.0, 20.0]);
}

#[test]
fn prefill_equals_token_by_token_decode_bit_for_bit() {
    for kind in [
        CacheKind::Global { capacity: 12 },
        CacheKind::Sliding { window: 5 },
    ] {
        let mut rng = Rng::new(21);
        let (q, k, v) = qkv(&mut rng, 2, 12, 4, 2, 16);
        let pad = [0, 4];
        let mut all = KvCache::new(kind, 2, 2, 16).expect("valid");
        let whole = attention(&q, &k, &v, &mut all, &pad, 0.25).expect("valid");
        let mut step = KvCache::new(kind, 2, 2, 16).expect("valid");
        for t in 0..12 {
            let slice = |x: &Tensor, h: usize| {
                let per = h * 16;
                let data: Vec<f32> = (0..2)
                    .flat_map(|b| x.data()[(b * 12 + t) * per..(b * 12 + t + 1) * per].to_vec())
                    .collect();
                Tensor::new(vec![2, 1, h, 16], data).expect("shape")
            };
            let out = attention(
                &slice(&q, 4),
                &slice(&k, 2),
                &slice(&v, 2),
                &mut step,
                &pad,
                0.25,
            )
            .expect("valid");
            for b in 0..2 {
                let want = &whole.data()[(b * 12 + t) * 64..(b * 12 + t + 1) * 64];
                assert_eq!(
                    &out.data()[b * 64..(b + 1) * 64],
                    want,
                    "{kind:?} b {b} t {t}"
                );
            }
        }
    }
}

#[test]
fn left_padded_sequence_matches_the_same_sequence_alone() {
    // HF masks by cache column: a sequence padded by p gives, for its real tokens, exactly what
    // it gives unpadded (global and sliding alike).
    for kind in [
        CacheKind::Global { capacity: 9 },
        CacheKind::Sliding { window: 3 },
    ] {
        let mut rng = Rng::new(33);
        let (q, k, v) = qkv(&mut rng, 1, 6, 2, 1, 8);
        let p = 3;
        let padded = |x: &Tensor, h: usize| {
            let mut data = vec![7.0f32; p * h * 8];
            data.extend_from_slice(x.data());
            Tensor::new(vec![1, 6 + p, h, 8], data).expect("shape")
        };
        let mut alone = KvCache::new(kind, 1, 1, 8).expect("valid");
        let a = attention(&q, &k, &v, &mut alone, &[0], 0.5).expect("valid");
        let mut with_pad = KvCache::new(kind, 1, 1, 8).expect("valid");
        let b = attention(
            &padded(&q, 2),
            &padded(&k, 1),
            &padded(&v, 1),
            &mut with_pad,
            &[p],
            0.5,
        )
        .expect("valid");
        assert_eq!(a.data(), &b.data()[p * 16..], "{kind:?}");
    }
}

#[test]
fn attention_is_bit_identical_for_any_thread_count_and_instruction_set() {
    for kind in [
        CacheKind::Global { capacity: 40 },
        CacheKind::Sliding { window: 7 },
    ] {
        let mut rng = Rng::new(44);
        let (q, k, v) = qkv(&mut rng, 2, 20, 8, 4, 64);
        let (q2, k2, v2) = qkv(&mut rng, 2, 1, 8, 4, 64);
        let run = |threads: usize, isa: Isa| {
            with_threads(threads, || {
                let mut c = KvCache::new(kind, 2, 4, 64).expect("valid");
                let a = attention_on(isa, &q, &k, &v, &mut c, &[0, 5], 0.125).expect("valid");
                let b = attention_on(isa, &q2, &k2, &v2, &mut c, &[0, 5], 0.125).expect("valid");
                (bits(&a), bits(&b))
            })
        };
        let one = run(1, Isa::Avx2Fma);
        assert_eq!(one, run(2, Isa::Avx2Fma), "{kind:?} 2 threads");
        assert_eq!(one, run(3, Isa::Avx2Fma), "{kind:?} 3 threads");
        assert_eq!(one, run(2, Isa::Portable), "{kind:?} portable");
        // AVX-512 where the CPU has it (`available` lists only what runs here).
        for isa in crate::kernels::simd::available() {
            assert_eq!(one, run(2, isa), "{kind:?} {isa:?}");
        }
    }
}

fn cache_and_qkv() -> (KvCache, Tensor, Tensor, Tensor) {
    let mut rng = Rng::new(1);
    let (q, k, v) = qkv(&mut rng, 2, 3, 4, 2, 8);
    (KvCache::global(2, 2, 8, 16).expect("valid"), q, k, v)
}

#[test]
fn rejects_attention_k_and_v_of_different_shapes() {
    let (mut c, q, k, _) = cache_and_qkv();
    let v = Tensor::zeros(vec![2, 3, 2, 7]);
    let err = attention(&q, &k, &v, &mut c, &[0, 0], 1.0).expect_err("shapes");
    assert!(
        matches!(err, KernelError::AttentionShapes { .. }),
        "{err:?}"
    );
    assert!(c.is_empty(), "a refused call leaves the cache unchanged");
}

#[test]
fn rejects_attention_q_and_k_that_disagree() {
    let (mut c, _, k, v) = cache_and_qkv();
    let q = Tensor::zeros(vec![2, 2, 4, 8]);
    let err = attention(&q, &k, &v, &mut c, &[0, 0], 1.0).expect_err("seq");
    assert!(
        matches!(err, KernelError::AttentionShapes { .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_attention_heads_not_a_multiple_of_kv_heads() {
    let mut c = KvCache::global(1, 2, 4, 8).expect("valid");
    let q = Tensor::zeros(vec![1, 1, 3, 4]);
    let k = Tensor::zeros(vec![1, 1, 2, 4]);
    let err = attention(&q, &k, &k, &mut c, &[0], 1.0).expect_err("groups");
    assert!(
        matches!(err, KernelError::AttentionShapes { .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_attention_keys_that_do_not_fit_the_cache() {
    let (_, q, k, v) = cache_and_qkv();
    let mut c = KvCache::global(2, 1, 8, 16).expect("valid");
    let err = attention(&q, &k, &v, &mut c, &[0, 0], 1.0).expect_err("cache shape");
    assert!(
        matches!(err, KernelError::CacheShape { n_kv_heads: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_attention_wrong_pad_count() {
    let (mut c, q, k, v) = cache_and_qkv();
    let err = attention(&q, &k, &v, &mut c, &[0], 1.0).expect_err("pad");
    assert!(
        matches!(err, KernelError::PadCount { batch: 2, found: 1 }),
        "{err:?}"
    );
}

#[test]
fn rejects_attention_past_global_capacity() {
    let (_, q, k, v) = cache_and_qkv();
    let mut c = KvCache::global(2, 2, 8, 4).expect("valid");
    attention(&q, &k, &v, &mut c, &[0, 0], 1.0).expect("3 of 4 fit");
    let err = attention(&q, &k, &v, &mut c, &[0, 0], 1.0).expect_err("full");
    assert!(
        matches!(
            err,
            KernelError::CacheFull {
                capacity: 4,
                len: 3,
                adding: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(c.len(), 3, "a refused call leaves the cache unchanged");
}

#[test]
fn rejects_attention_non_finite_scale() {
    let (mut c, q, k, v) = cache_and_qkv();
    let err = attention(&q, &k, &v, &mut c, &[0, 0], f32::INFINITY).expect_err("scale");
    assert!(
        matches!(err, KernelError::BadParam { name: "scale", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_attention_q_that_is_not_rank_4() {
    let (mut c, _, k, v) = cache_and_qkv();
    let err =
        attention(&Tensor::zeros(vec![2, 3, 32]), &k, &v, &mut c, &[0, 0], 1.0).expect_err("rank");
    assert!(
        matches!(err, KernelError::Rank { name: "q", .. }),
        "{err:?}"
    );
}

#[test]
fn rejects_kv_cache_with_zero_window() {
    let err = KvCache::sliding(1, 1, 8, 0).expect_err("window");
    assert!(
        matches!(err, KernelError::BadParam { name: "window", .. }),
        "{err:?}"
    );
    let err = KvCache::global(0, 1, 8, 4).expect_err("batch");
    assert!(
        matches!(err, KernelError::BadParam { name: "batch", .. }),
        "{err:?}"
    );
}
