//! Shards: a job's inputs cut into N contiguous ranges, one per runner, that depend only on
//! the number of inputs and N (so every party computes the same ranges), and what a shard's
//! receipt records of its place.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// The most shards a job may be cut into.
pub const MAX_SHARDS: u32 = 1 << 16;

/// A shard's place in its job, as its receipt records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardFacts {
    /// Its index, from 0.
    pub index: u32,
    /// How many shards the job has.
    pub count: u32,
    /// The first input (0-based, in file order) it ran.
    pub start: u64,
    /// One past the last input it ran.
    pub end: u64,
    /// How many inputs the whole job has.
    pub inputs_total: u64,
}

impl ShardFacts {
    /// The facts of shard `index` of `count` over `total` inputs.
    pub fn new(index: u32, count: u32, total: u64) -> ShardFacts {
        let r = shard_range(total, index, count);
        ShardFacts {
            index,
            count,
            start: r.start,
            end: r.end,
            inputs_total: total,
        }
    }

    /// Whether the facts are self-consistent: the range is the one `shard_range` gives.
    pub fn is_consistent(&self) -> bool {
        self.count >= 1
            && self.count <= MAX_SHARDS
            && self.index < self.count
            && shard_range(self.inputs_total, self.index, self.count) == (self.start..self.end)
    }
}

/// `shard-K-of-N`.
pub fn shard_dir_name(index: u32, count: u32) -> String {
    format!("shard-{index}-of-{count}")
}

/// Shard `index` of `count` over `total` inputs: `[total*index/count, total*(index+1)/count)`.
/// The ranges tile `0..total` in order, and differ in length by at most one.
pub fn shard_range(total: u64, index: u32, count: u32) -> Range<u64> {
    let at = |i: u32| (u128::from(total) * u128::from(i) / u128::from(count.max(1))) as u64;
    at(index)..at(index + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_tile_every_input_once_in_order() {
        for total in [0u64, 1, 2, 7, 10, 1000, 10_007] {
            for count in [1u32, 2, 3, 7, 16] {
                let mut next = 0;
                for index in 0..count {
                    let r = shard_range(total, index, count);
                    assert_eq!(r.start, next);
                    assert!(r.end - r.start <= total / u64::from(count) + 1);
                    next = r.end;
                    assert!(ShardFacts::new(index, count, total).is_consistent());
                }
                assert_eq!(next, total);
            }
        }
        let mut f = ShardFacts::new(1, 2, 10);
        f.end += 1;
        assert!(!f.is_consistent());
    }
}
