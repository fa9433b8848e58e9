//! Quick timing of the hot kernels:
//! `cargo run --release --example kernel_bench [threads] [m,k,n ...]` (`QUICK=1`: fewer shapes;
//! `DTYPES=Q5_0,...`: these weight types; `ARGMAX=1`: the head's path; `REPS=N`: N timed calls;
//! `COPIES=N`: cycle through N copies of each weight, so that calls read it from memory;
//! `ATTENTION=batch,prompt`: instead, attention at the 270m shape, a prefill and a decode step;
//! with `STEPS=N` (and `CACHES=M`, default 8), N decode steps over M caches in turn, read from
//! memory; `LAYERS=m`: instead, the 270m Q4_K_M file's seven projections of 18 layers on m rows).
//! Prints one core's issue rates of 512-bit multiply-adds, then the median of several runs for
//! each shape, in GFLOP/s (2 flops per multiply-add).
// `unsafe` only to call the issue-rate probes' `#[target_feature]` loops after detection.
#![allow(unsafe_code)]

use std::time::Instant;

use runner::kernels::{self, DType, Isa, Tensor, Weight};

/// The `runner` binary's allocator and heap tuning, so that a call here allocates as it does
/// there. On glibc's defaults two threads on Q5_0 `[8, 640] × [2048, 640]ᵀ` seemed to scale
/// 1.43× (a freed output's pages, most likely, went back and were faulted in again inside the
/// timed call); with these, 1.9×.
#[global_allocator]
static ALLOCATOR: runner::memory::heap::Allocator = runner::memory::heap::Allocator::new();

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) - 0.5
        })
        .collect()
}

/// A `[n, k]` weight of random blocks with modest f16 scales (k a multiple of the block).
fn blocks(dtype: DType, n: usize, k: usize) -> Weight {
    let size = dtype.block_bytes();
    let count = n * k / dtype.block_elems();
    let mut bytes: Vec<u8> = values(count * size, 3)
        .iter()
        .map(|v| (v.to_bits() >> 7) as u8)
        .collect();
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for blk in bytes.chunks_exact_mut(size) {
        match dtype {
            DType::Q6_K => blk[208..210].copy_from_slice(&scale),
            DType::Q4_K | DType::Q5_K => {
                blk[0..2].copy_from_slice(&scale);
                blk[2..4].copy_from_slice(&scale);
            }
            _ => blk[0..2].copy_from_slice(&scale),
        }
    }
    let len = bytes.len();
    Weight::new(dtype, vec![n, k], std::sync::Arc::new(bytes), 0..len).expect("whole blocks")
}

fn bench_linear(isa: Isa, m: usize, k: usize, n: usize, dtype: DType) {
    let x = Tensor::new(vec![m, k], values(m * k, 1)).expect("shape");
    // `COPIES=N`: cycle through N copies of the weight (a step's layers come from memory, not
    // from a cache the previous call warmed).
    let copies = std::env::var("COPIES")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c > 0)
        .unwrap_or(1);
    let ws: Vec<Weight> = (0..copies)
        .map(|_| {
            if dtype.is_quantized() {
                blocks(dtype, n, k)
            } else {
                Weight::from_values(dtype, vec![n, k], &values(n * k, 2)).expect("shape")
            }
        })
        .collect();
    let reps = (2e9 / (2.0 * (m * k * n) as f64)).clamp(5.0, 400.0) as usize;
    // `ARGMAX=1`: time `linear_argmax` (the output head's path: the screen past 16384 rows,
    // built by a first call that is not timed) instead of `linear`.
    let argmax = std::env::var_os("ARGMAX").is_some();
    let reps = if argmax { reps.max(20) } else { reps };
    // `REPS=N`: time N calls instead (a longer run for `perf record` to sample).
    let reps = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r: &usize| r > 0)
        .unwrap_or(reps);
    if argmax {
        // Each copy's screen, built outside the timed calls.
        for w in &ws {
            std::hint::black_box(kernels::linear_argmax(&x, w).expect("argmax"));
        }
    }
    let mut times = Vec::new();
    for rep in 0..reps {
        let w = &ws[rep % copies];
        let t = Instant::now();
        if argmax {
            std::hint::black_box(kernels::linear_argmax(&x, w).expect("argmax"));
        } else {
            std::hint::black_box(kernels::linear_on(isa, &x, w).expect("linear"));
        }
        times.push(t.elapsed().as_secs_f64());
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let t = median(times);
    let gflops = |t: f64| 2.0 * (m * k * n) as f64 / t / 1e9;
    let gbs = dtype.bytes_for(n * k).unwrap_or(0) as f64 / t / 1e9;
    let op = if argmax { "linear_argmax" } else { "linear" };
    println!(
        "{op} {isa:?} x[{m},{k}] w[{n},{k}] {dtype:?}: median {:.1} us {:.1} GFLOP/s \
         ({gbs:.1} GB/s weights), best {:.1} GFLOP/s",
        t * 1e6,
        gflops(t),
        gflops(best)
    );
}

/// The 270m Q4_K_M file's seven projections of a layer (their formats as in that file, which
/// gives half its layers' `v` Q5_0 and `down` Q4_K: here all take the other format), 18
/// layers of distinct weights, called back to back on `m` x rows: a decode step's `linear`
/// calls without the operations between them. Medians of whole passes.
fn bench_layers(m: usize) {
    let shapes = [
        (640, 1024, DType::Q5_0),
        (640, 256, DType::Q5_0),
        (640, 256, DType::Q8_0),
        (1024, 640, DType::Q4_K),
        (640, 2048, DType::Q5_0),
        (640, 2048, DType::Q5_0),
        (2048, 640, DType::Q6_K),
    ];
    let layers: Vec<Vec<(Tensor, Weight)>> = (0..18)
        .map(|_| {
            shapes
                .iter()
                .map(|&(k, n, dtype)| {
                    let x = Tensor::new(vec![m, k], values(m * k, 1)).expect("shape");
                    (x, blocks(dtype, n, k))
                })
                .collect()
        })
        .collect();
    let macs: usize = shapes.iter().map(|&(k, n, _)| 18 * m * k * n).sum();
    let mut times = Vec::new();
    for _ in 0..40 {
        let t = Instant::now();
        for layer in &layers {
            for (x, w) in layer {
                std::hint::black_box(kernels::linear(x, w).expect("linear"));
            }
        }
        times.push(t.elapsed().as_secs_f64());
    }
    let t = median(times);
    println!(
        "layers x[{m}, ..] 18 x 7 calls: median {:.3} ms a pass, {:.1} GFLOP/s",
        t * 1e3,
        2.0 * macs as f64 / t / 1e9
    );
}

/// Attention at the 270m model's shape (four query heads on one kv head of 256, Gemma 3's
/// scale), one global layer: a prefill of `prompt` positions for `batch` sequences into an
/// empty cache, and one decode step against those positions. Medians of several calls.
fn bench_attention(batch: usize, prompt: usize) {
    use kernels::attention::{attention, KvCache};
    let (heads, kv, d) = (4, 1, 256);
    let scale = 1.0 / 16.0;
    let tensor = |t: usize, h: usize, seed: u32| {
        Tensor::new(vec![batch, t, h, d], values(batch * t * h * d, seed)).expect("shape")
    };
    let (q, k, v) = (
        tensor(prompt, heads, 1),
        tensor(prompt, kv, 2),
        tensor(prompt, kv, 3),
    );
    let (q1, k1, v1) = (tensor(1, heads, 4), tensor(1, kv, 5), tensor(1, kv, 6));
    let pad = vec![0; batch];
    // `STEPS=N`: instead, N decode steps spread over `CACHES` filled caches (eight unless set)
    // in turn, so that each step reads its cache from memory as a decode step's layers do.
    if let Some(steps) = std::env::var("STEPS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        let n_caches = std::env::var("CACHES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(8);
        let mut caches: Vec<KvCache> = (0..n_caches)
            .map(|_| {
                let mut c = KvCache::global(batch, kv, d, prompt + steps).expect("cache");
                attention(&q, &k, &v, &mut c, &pad, scale).expect("attention");
                c
            })
            .collect();
        let mut times = Vec::new();
        for s in 0..steps {
            let c = &mut caches[s % n_caches];
            let t = Instant::now();
            std::hint::black_box(attention(&q1, &k1, &v1, c, &pad, scale).expect("attention"));
            times.push(t.elapsed().as_secs_f64());
        }
        println!(
            "attention {:?} batch {batch} prompt {prompt}: {steps} decode steps over {n_caches} \
             caches, median {:.1} us (best {:.1})",
            kernels::isa(),
            median(times.clone()) * 1e6,
            times.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
        );
        return;
    }
    let empty = KvCache::global(batch, kv, d, prompt + 1).expect("cache");
    let mut filled = empty.clone();
    attention(&q, &k, &v, &mut filled, &pad, scale).expect("attention");
    let reps = (2e9 / (2.0 * (batch * prompt * prompt * heads * d) as f64)).clamp(5.0, 50.0);
    let mut prefill = Vec::new();
    let mut step = Vec::new();
    for _ in 0..reps as usize {
        let mut c = empty.clone();
        let t = Instant::now();
        std::hint::black_box(attention(&q, &k, &v, &mut c, &pad, scale).expect("attention"));
        prefill.push(t.elapsed().as_secs_f64());
        let mut c = filled.clone();
        let t = Instant::now();
        std::hint::black_box(attention(&q1, &k1, &v1, &mut c, &pad, scale).expect("attention"));
        step.push(t.elapsed().as_secs_f64());
    }
    println!(
        "attention {:?} batch {batch} prompt {prompt}: prefill median {:.1} us (best {:.1}), \
         decode step median {:.1} us (best {:.1})",
        kernels::isa(),
        median(prefill.clone()) * 1e6,
        prefill.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
        median(step.clone()) * 1e6,
        step.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
    );
}

/// One core's issue rate of 512-bit `vfmadd231ps` and, with AVX-512 VNNI, `vpdpbusd` (the
/// batched screen's 8-bit multiply-add): twelve independent accumulators, so the rate is the
/// ports', not the latency's. On Zen 5 both issue two a cycle.
#[cfg(target_arch = "x86_64")]
fn issue_rates() {
    use std::arch::x86_64::{__m512, __m512i};
    #[target_feature(enable = "avx512f")]
    fn fma(n: usize) -> [__m512; 12] {
        use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_set1_ps};
        let (x, y) = (_mm512_set1_ps(1.0001), _mm512_set1_ps(0.9999));
        let mut a = [_mm512_set1_ps(1.0); 12];
        for _ in 0..n {
            for v in a.iter_mut() {
                *v = _mm512_fmadd_ps(*v, x, y);
            }
        }
        a
    }
    #[target_feature(enable = "avx512f,avx512vnni")]
    fn dp(n: usize) -> [__m512i; 12] {
        use std::arch::x86_64::{_mm512_dpbusd_epi32, _mm512_set1_epi32};
        let (x, y) = (
            _mm512_set1_epi32(0x0102_0304),
            _mm512_set1_epi32(0x0506_0708),
        );
        let mut a = [_mm512_set1_epi32(0); 12];
        for _ in 0..n {
            for v in a.iter_mut() {
                *v = _mm512_dpbusd_epi32(*v, x, y);
            }
        }
        a
    }
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return;
    }
    let n = 20_000_000;
    let rate = |run: &dyn Fn()| {
        let times: Vec<f64> = (0..3)
            .map(|_| {
                let t = Instant::now();
                run();
                t.elapsed().as_secs_f64()
            })
            .collect();
        (12 * n) as f64 / median(times) / 1e9
    };
    let f = rate(&|| {
        // SAFETY: AVX-512F was detected above.
        std::hint::black_box(unsafe { fma(std::hint::black_box(n)) });
    });
    print!("one core issues {f:.2} G vfmadd231ps zmm/s");
    if std::arch::is_x86_feature_detected!("avx512vnni") {
        let d = rate(&|| {
            // SAFETY: AVX-512F was detected above, and VNNI here.
            std::hint::black_box(unsafe { dp(std::hint::black_box(n)) });
        });
        print!(", {d:.2} G vpdpbusd zmm/s");
    }
    println!();
}

fn main() {
    runner::memory::heap::tune_glibc_heap();
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    kernels::set_threads(threads);
    println!("threads {} isa {:?}", kernels::threads(), kernels::isa());
    let spawn: Vec<f64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| std::hint::black_box(1));
            });
            t.elapsed().as_secs_f64()
        })
        .collect();
    println!(
        "scoped thread spawn+join: median {:.1} us",
        median(spawn) * 1e6
    );
    let big = vec![1u64; 1 << 25];
    let reads: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let s: u64 = big
                .chunks(8)
                .map(|c| c.iter().fold(0u64, |a, &b| a ^ b))
                .sum();
            std::hint::black_box(s);
            t.elapsed().as_secs_f64()
        })
        .collect();
    println!(
        "one-thread streaming read: {:.1} GB/s (median of 5 passes over 256 MiB)",
        (8usize << 25) as f64 / median(reads) / 1e9
    );
    #[cfg(target_arch = "x86_64")]
    issue_rates();
    if let Some(m) = std::env::var("LAYERS").ok().and_then(|m| m.parse().ok()) {
        bench_layers(m);
        return;
    }
    if let Ok(shape) = std::env::var("ATTENTION") {
        let v: Vec<usize> = shape.split(',').filter_map(|p| p.parse().ok()).collect();
        let &[batch, prompt] = &v[..] else {
            panic!("ATTENTION=batch,prompt (two numbers), got {shape:?}");
        };
        bench_attention(batch, prompt);
        return;
    }
    let quick = std::env::var("QUICK").is_ok();
    let custom: Vec<(usize, usize, usize)> = std::env::args()
        .skip(2)
        .filter_map(|a| {
            let v: Vec<usize> = a.split(',').filter_map(|p| p.parse().ok()).collect();
            (v.len() == 3).then(|| (v[0], v[1], v[2]))
        })
        .collect();
    let shapes: &[(usize, usize, usize)] = if !custom.is_empty() {
        &custom
    } else if quick {
        &[
            (1, 640, 2048),
            (32, 640, 2048),
            (8, 640, 32768),
            (32, 2048, 640),
        ]
    } else {
        &[
            (1, 640, 2048),
            (32, 640, 2048),
            (128, 640, 2048),
            (1, 2048, 640),
            (32, 2048, 640),
            (8, 640, 262144),
        ]
    };
    // `DTYPES=Q5_0,Q4_K`: only these (block formats included).
    let only: Option<Vec<DType>> = std::env::var("DTYPES").ok().map(|list| {
        DType::ALL
            .into_iter()
            .filter(|d| list.split(',').any(|n| n.eq_ignore_ascii_case(d.name())))
            .collect()
    });
    for &(m, k, n) in shapes {
        if let Some(only) = &only {
            for &dtype in only {
                bench_linear(kernels::isa(), m, k, n, dtype);
            }
            continue;
        }
        for dtype in [DType::BF16, DType::F32, DType::F16] {
            if (quick || n > 100_000) && dtype != DType::BF16 {
                continue;
            }
            bench_linear(kernels::isa(), m, k, n, dtype);
        }
    }
    // The portable path for scale, only in the default run: it takes seconds.
    if !quick && custom.is_empty() && only.is_none() {
        bench_linear(Isa::Portable, 32, 640, 2048, DType::BF16);
    }
}
