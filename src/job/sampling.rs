//! Seeded sampling that a verifier can reproduce: temperature, top-k and top-p over one
//! sequence's logits, with a random stream addressed by `(seed, step)` alone.
//!
//! The stream is counter-based: draw `t` of a sequence is BLAKE3 keyed by a key derived from
//! its seed, over `t` as 8 little-endian bytes, so it does not depend on which other sequences
//! share its batch, on the thread count or on the machine. Every number after the logits is
//! computed in f64 in a fixed order with a software `exp` (the `libm` crate, not the platform's),
//! so the same logits and seed give the same token everywhere; the logits themselves are
//! already independent of thread count, batch split and instruction set.
//!
//! An input without a seed of its own takes [`input_seed`] of the job's seed (the job's
//! `generation.seed`, or one the runner draws and records in the receipt) and its index in the
//! inputs file. docs/sampling.md writes the scheme out for auditors.

/// The scheme's name, recorded in the receipt.
pub const SAMPLING_SCHEME: &str = "runner-sampling/1";

/// The largest job seed: the receipt is RFC 8785 JSON, whose numbers hold integers exactly up
/// to 2^53 (a request's own seed may be any 64-bit integer: it stays in the inputs).
pub const MAX_JOB_SEED: u64 = (1 << 53) - 1;

const STREAM_CONTEXT: &str = "runner sampling stream v1";
const INPUT_SEED_CONTEXT: &str = "runner sampling input seed v1";

/// How one sequence picks its tokens when it does not pick greedily.
#[derive(Clone, PartialEq)]
pub struct Sampler {
    /// Logits are divided by this (> 0).
    temperature: f64,
    /// Keep the `top_k` most likely tokens (0: all).
    top_k: usize,
    /// Then keep the fewest most likely tokens whose probability reaches `top_p` (1: all).
    top_p: f64,
    /// The seed, and the stream key derived from it.
    seed: u64,
    key: [u8; 32],
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("temperature", &self.temperature)
            .field("top_k", &self.top_k)
            .field("top_p", &self.top_p)
            .finish_non_exhaustive()
    }
}

/// The seed of input `index` (0-based, in the inputs file) that has none of its own.
pub fn input_seed(job_seed: u64, index: u64) -> u64 {
    let mut material = [0u8; 16];
    material[..8].copy_from_slice(&job_seed.to_le_bytes());
    material[8..].copy_from_slice(&index.to_le_bytes());
    let key = blake3::derive_key(INPUT_SEED_CONTEXT, &material);
    u64::from_le_bytes(key[..8].try_into().unwrap_or([0; 8]))
}

impl Sampler {
    /// A sampler; `None` when `temperature` is 0 (greedy). `temperature` must be finite and
    /// positive otherwise, `top_p` in (0, 1] (checked where the settings are read).
    pub fn new(temperature: f64, top_k: usize, top_p: f64, seed: u64) -> Option<Sampler> {
        if temperature <= 0.0 || !temperature.is_finite() {
            return None;
        }
        Some(Sampler {
            temperature,
            top_k,
            top_p: top_p.clamp(f64::MIN_POSITIVE, 1.0),
            seed,
            key: blake3::derive_key(STREAM_CONTEXT, &seed.to_le_bytes()),
        })
    }

    /// The seed this sampler draws from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Draw `step` of the stream: a uniform number in [0, 1) with 53 random bits.
    pub fn uniform(&self, step: u64) -> f64 {
        let block = blake3::keyed_hash(&self.key, &step.to_le_bytes());
        let bits = u64::from_le_bytes(block.as_bytes()[..8].try_into().unwrap_or([0; 8]));
        (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The token drawn at `step` from one sequence's `logits` (non-empty).
    pub fn pick(&self, logits: &[f32], step: u64) -> u32 {
        if let Some(i) = logits.iter().position(|v| v.is_nan()) {
            // As the greedy head does: a NaN wins, so a broken model is not hidden by chance.
            return i as u32;
        }
        let scaled: Vec<f64> = logits
            .iter()
            .map(|&l| f64::from(l) / self.temperature)
            .collect();
        let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return 0;
        }
        let order = |a: &u32, b: &u32| {
            scaled[*b as usize]
                .total_cmp(&scaled[*a as usize])
                .then(a.cmp(b))
        };
        let n = scaled.len();
        let top_k = self.top_k > 0 && self.top_k < n;
        // Each weight is computed once: for the top-k only those few, else every token's once
        // (a nucleus and the draw read them again).
        let table: Vec<f64> = if top_k {
            Vec::new()
        } else {
            scaled.iter().map(|&x| libm::exp(x - max)).collect()
        };
        let weight = |i: u32| {
            if top_k {
                libm::exp(scaled[i as usize] - max)
            } else {
                table[i as usize]
            }
        };
        let mut all: Vec<u32> = (0..n as u32).collect();
        let candidates: Vec<u32> = if top_k {
            all.select_nth_unstable_by(self.top_k - 1, order);
            all.truncate(self.top_k);
            all.sort_unstable_by(order);
            all
        } else if self.top_p < 1.0 {
            all
        } else {
            // Every token, in index order: no order by probability is needed.
            return self.walk(&all, &weight, step);
        };
        if self.top_p >= 1.0 {
            return self.walk(&candidates, &weight, step);
        }
        self.walk(
            &nucleus(candidates, &weight, self.top_p, order),
            &weight,
            step,
        )
    }

    /// Draw among `candidates` in their order, each with its weight.
    fn walk(&self, candidates: &[u32], weight: &dyn Fn(u32) -> f64, step: u64) -> u32 {
        let total: f64 = candidates.iter().map(|&i| weight(i)).sum();
        let target = self.uniform(step) * total;
        let mut acc = 0.0;
        for &i in candidates {
            acc += weight(i);
            if acc > target {
                return i;
            }
        }
        // Rounding left the target at the very top: the last token with any weight.
        candidates
            .iter()
            .rev()
            .find(|&&i| weight(i) > 0.0)
            .map_or(candidates[0], |&i| i)
    }
}

/// The fewest most likely of `candidates` whose weight reaches `top_p` of theirs, most likely
/// first. Sorted only as far as needed: the top 64, then 512, ... until the mass is reached.
fn nucleus(
    mut candidates: Vec<u32>,
    weight: &dyn Fn(u32) -> f64,
    top_p: f64,
    order: impl Fn(&u32, &u32) -> std::cmp::Ordering + Copy,
) -> Vec<u32> {
    let total: f64 = {
        let mut sorted_by_index = candidates.clone();
        sorted_by_index.sort_unstable();
        sorted_by_index.iter().map(|&i| weight(i)).sum()
    };
    let goal = top_p * total;
    let mut take = 64usize;
    loop {
        let head = take.min(candidates.len());
        if head < candidates.len() {
            candidates.select_nth_unstable_by(head - 1, order);
        }
        candidates[..head].sort_unstable_by(order);
        let mut acc = 0.0;
        for (n, &i) in candidates[..head].iter().enumerate() {
            acc += weight(i);
            if acc >= goal {
                candidates.truncate(n + 1);
                return candidates;
            }
        }
        if head == candidates.len() {
            return candidates;
        }
        take = take.saturating_mul(8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919) % 101) as f32 / 10.0).collect()
    }

    #[test]
    fn zero_temperature_is_greedy_and_no_sampler() {
        assert!(Sampler::new(0.0, 0, 1.0, 1).is_none());
        assert!(Sampler::new(f64::NAN, 0, 1.0, 1).is_none());
    }

    #[test]
    fn the_stream_depends_only_on_seed_and_step() {
        let a = Sampler::new(0.7, 0, 1.0, 42).unwrap();
        let b = Sampler::new(1.3, 5, 0.5, 42).unwrap();
        let c = Sampler::new(0.7, 0, 1.0, 43).unwrap();
        for t in 0..100 {
            assert_eq!(a.uniform(t).to_bits(), b.uniform(t).to_bits());
            assert!((0.0..1.0).contains(&a.uniform(t)));
        }
        assert!((0..100).any(|t| a.uniform(t) != c.uniform(t)));
    }

    #[test]
    fn pinned_vectors_match_the_independent_python_reference() {
        // scripts/reproduce_sampling.py (the `blake3` package and Python floats) gives these.
        assert_eq!(input_seed(42, 0), 14000287857042332768);
        assert_eq!(input_seed(42, 1), 11613769335481944211);
        let s = Sampler::new(0.8, 0, 1.0, 42).unwrap();
        assert_eq!(s.uniform(0), 0.2718258162844761);
        assert_eq!(s.uniform(1), 0.30534761333473215);
        let l: Vec<f32> = (0..10).map(|i| i as f32 * 0.25).collect();
        let picks: Vec<u32> = (0..8).map(|t| s.pick(&l, t)).collect();
        assert_eq!(picks, [6, 6, 9, 8, 9, 4, 7, 2]);
    }

    #[test]
    fn top_k_1_and_tiny_top_p_are_greedy() {
        let l = logits(1000);
        let best = crate::kernels::softmax::argmax_row(&l);
        for seed in 0..20 {
            let k1 = Sampler::new(1.0, 1, 1.0, seed).unwrap();
            let p0 = Sampler::new(1.0, 0, 1e-9, seed).unwrap();
            assert_eq!(k1.pick(&l, 3), best);
            assert_eq!(p0.pick(&l, 3), best);
        }
    }

    #[test]
    fn top_k_keeps_only_the_k_most_likely() {
        let l = logits(1000);
        let mut sorted: Vec<u32> = (0..1000).collect();
        sorted.sort_by(|a, b| l[*b as usize].total_cmp(&l[*a as usize]).then(a.cmp(b)));
        let top: Vec<u32> = sorted[..5].to_vec();
        let s = Sampler::new(5.0, 5, 1.0, 9).unwrap();
        let picked: std::collections::BTreeSet<u32> = (0..400).map(|t| s.pick(&l, t)).collect();
        assert!(picked.iter().all(|p| top.contains(p)), "{picked:?} {top:?}");
        assert!(
            picked.len() > 1,
            "a hot temperature over 5 tokens picks more than one"
        );
    }

    #[test]
    fn top_p_keeps_the_nucleus_even_past_the_first_sorted_block() {
        // Flat logits: the nucleus of 0.9 is 900 tokens, past the first 64 and 512 sorted.
        let l = vec![0.0f32; 1000];
        let s = Sampler::new(1.0, 0, 0.9, 5).unwrap();
        let picked: Vec<u32> = (0..2000).map(|t| s.pick(&l, t)).collect();
        // Ties break by index, so the nucleus is tokens 0..900.
        assert!(picked.iter().all(|&p| p < 900));
        assert!(picked.iter().any(|&p| p >= 512));
    }

    #[test]
    fn sampling_follows_the_distribution() {
        // Two tokens with probabilities 0.75 and 0.25.
        let l = [(3.0f32).ln(), 0.0];
        let s = Sampler::new(1.0, 0, 1.0, 11).unwrap();
        let ones = (0..20_000).filter(|&t| s.pick(&l, t) == 1).count();
        assert!((4_500..5_500).contains(&ones), "{ones}");
    }

    #[test]
    fn nan_wins_and_all_minus_infinity_picks_zero() {
        let s = Sampler::new(1.0, 0, 1.0, 1).unwrap();
        assert_eq!(s.pick(&[0.0, f32::NAN, 1.0], 0), 1);
        assert_eq!(s.pick(&[f32::NEG_INFINITY; 3], 0), 0);
    }
}
