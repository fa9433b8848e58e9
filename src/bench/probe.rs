//! Short probes of what this machine can do, so benchmark results can be stated as fractions
//! of its own limits: streaming read bandwidth with every kernel thread, and the f32 throughput
//! of the `linear` kernel in use on a compute-bound shape. Also the machine facts a report
//! names (CPU model, load average).

use std::time::Instant;

use crate::kernels::{self, DType, KernelError, Tensor, Weight};

/// The shape the linear probe multiplies: `x [M, K] × w [N, K]ᵀ` with bf16 weights.
pub const LINEAR_PROBE_SHAPE: (usize, usize, usize) = (128, 2048, 2048);

/// Smallest time the linear probe keeps calling the kernel for, seconds.
const LINEAR_PROBE_SECONDS: f64 = 0.5;

/// Passes over the bandwidth buffer; the best one counts.
const BANDWIDTH_PASSES: usize = 5;

/// Streaming read bandwidth in bytes per second: the best of a few passes summing a buffer of
/// `mib` MiB, split between `threads` threads (each reads one contiguous share).
pub fn read_bandwidth(mib: usize, threads: usize) -> f64 {
    let words = (mib.max(1) << 20) / 8;
    // Distinct non-zero values, so every page is really backed and nothing folds away.
    let buf: Vec<u64> = (0..words as u64).collect();
    let threads = threads.max(1);
    let share = words.div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..BANDWIDTH_PASSES {
        let t = Instant::now();
        let total = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(share.max(1))
                .map(|chunk| s.spawn(move || sum_words(chunk)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(total);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (words * 8) as f64 / best
}

/// Sum with four independent accumulators, so the loop is limited by loads, not by one add
/// chain.
fn sum_words(words: &[u64]) -> u64 {
    let mut acc = [0u64; 4];
    let mut quads = words.chunks_exact(4);
    for q in &mut quads {
        for (a, w) in acc.iter_mut().zip(q) {
            *a = a.wrapping_add(*w);
        }
    }
    let tail = quads
        .remainder()
        .iter()
        .fold(0u64, |a, w| a.wrapping_add(*w));
    acc.iter().fold(tail, |a, w| a.wrapping_add(*w))
}

/// Best f32 throughput of `kernels::linear` on [`LINEAR_PROBE_SHAPE`], in flop/s (two per
/// multiply-add), with the kernels' current thread count.
pub fn linear_peak() -> Result<f64, KernelError> {
    let (m, k, n) = LINEAR_PROBE_SHAPE;
    let x =
        Tensor::new(vec![m, k], pseudo_random(m * k, 1)).map_err(|_| KernelError::TooLarge {
            op: "linear probe",
            shape: vec![m, k],
        })?;
    let w =
        Weight::from_values(DType::BF16, vec![n, k], &pseudo_random(n * k, 2)).map_err(|_| {
            KernelError::TooLarge {
                op: "linear probe",
                shape: vec![n, k],
            }
        })?;
    // One untimed call: thread start-up and first touches of the buffers.
    std::hint::black_box(kernels::linear(&x, &w)?);
    let flops = 2.0 * (m * k * n) as f64;
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut calls = 0;
    while calls < 3 || start.elapsed().as_secs_f64() < LINEAR_PROBE_SECONDS {
        let t = Instant::now();
        std::hint::black_box(kernels::linear(&x, &w)?);
        best = best.min(t.elapsed().as_secs_f64());
        calls += 1;
    }
    Ok(flops / best)
}

/// The machine's peak f32 multiply-add throughput in flop/s (two per multiply-add) with
/// `threads` threads, each running [`kernels::simd::fma_throughput`]: register-only FMA chains,
/// 8 lanes wide where the CPU has AVX2+FMA. The ceiling no matrix kernel on this machine can
/// pass, whatever the path.
pub fn fma_peak(threads: usize) -> f64 {
    let seconds = LINEAR_PROBE_SECONDS / 2.0;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| s.spawn(move || kernels::simd::fma_throughput(seconds)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    })
}

/// Values in [-0.5, 0.5) from a fixed xorshift stream.
fn pseudo_random(n: usize, seed: u32) -> Vec<f32> {
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

/// The CPU's model name from /proc/cpuinfo, or "unknown".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The 1, 5 and 15 minute load averages from /proc/loadavg, when readable.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_words_adds_every_word_including_the_tail() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(sum_words(&v), 55);
        assert_eq!(sum_words(&[]), 0);
    }

    #[test]
    fn bandwidth_probe_reports_a_positive_finite_rate() {
        let bw = read_bandwidth(4, 2);
        assert!(bw.is_finite() && bw > 0.0, "{bw}");
    }
}
