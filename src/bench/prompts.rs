//! The synthetic prompts every benchmark feeds: deterministic ids a Python script can draw
//! too (scripts/bench/compare_pytorch.py), so the peers run the very same prompts.

/// Seed of the synthetic prompt ids (scripts/bench/compare_pytorch.py draws the same ones).
pub const PROMPT_SEED: u64 = 0x5EED_0B0B_BE4C_0001;

/// The lowest id synthetic prompts draw after `bos` (0 = pad, 1 = eos and 2 = bos are skipped).
const FIRST_PLAIN_ID: u32 = 3;

/// SplitMix64: a tiny, well-known generator that a Python script can reproduce exactly.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `batch` deterministic prompts of `prompt_len` ids: `bos`, then ids drawn from
/// [`PROMPT_SEED`] in `3..vocab` (in `0..vocab` for a vocabulary of 3 or fewer), row by row.
pub fn prompts(batch: usize, prompt_len: usize, vocab: usize, bos: u32) -> Vec<Vec<u32>> {
    let vocab = u32::try_from(vocab).unwrap_or(u32::MAX).max(1);
    let lo = if vocab > FIRST_PLAIN_ID {
        FIRST_PLAIN_ID
    } else {
        0
    };
    let span = u64::from(vocab - lo);
    let mut rng = SplitMix64(PROMPT_SEED);
    (0..batch)
        .map(|_| {
            let mut p = Vec::with_capacity(prompt_len);
            if prompt_len > 0 {
                p.push(bos);
            }
            p.extend((1..prompt_len).map(|_| lo + (rng.next() % span) as u32));
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_start_with_bos_and_stay_in_the_vocabulary() {
        let a = prompts(3, 5, 300, 2);
        assert_eq!(a, prompts(3, 5, 300, 2));
        assert_eq!(a.len(), 3);
        for p in &a {
            assert_eq!(p.len(), 5);
            assert_eq!(p[0], 2);
            assert!(p[1..].iter().all(|&id| (3..300).contains(&id)), "{p:?}");
        }
        assert_ne!(a[0], a[1]);
        // The first row of a larger batch is the same prompt.
        assert_eq!(prompts(1, 5, 300, 2)[0], a[0]);
    }

    #[test]
    fn prompts_match_the_ones_compare_pytorch_draws() {
        // scripts/bench/compare_pytorch.py `prompts(2, 4, 262144, 2)` prints these.
        assert_eq!(
            prompts(2, 4, 262_144, 2),
            [[2, 148_402, 158_422, 94_601], [2, 143_304, 108_159, 19_874]]
        );
    }

    #[test]
    fn splitmix64_matches_the_published_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (from the reference implementation).
        let mut r = SplitMix64(1234567);
        assert_eq!(r.next(), 6457827717110365317);
        assert_eq!(r.next(), 3203168211198807973);
    }
}
