//! Which shard of a job this runner runs: `exec --shard K/N`, or `--shard-from-env N` with K from
//! `JOB_COMPLETION_INDEX` (what a Kubernetes Indexed Job gives each pod). The ranges are
//! [`crate::trust::shard::shard_range`]; every shard admits the whole job first.

use std::ffi::OsString;
use std::ops::Range;

use crate::trust::shard::{shard_dir_name, shard_range, ShardFacts, MAX_SHARDS};

/// The environment variable a Kubernetes Indexed Job sets to the pod's index.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// Shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// From 0.
    pub index: u32,
    /// At least 1.
    pub count: u32,
}

impl Shard {
    /// A shard, checked: `count` in 1..=65536, `index` below it.
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 || count > MAX_SHARDS {
            return Err(format!(
                "the shard count must be 1 to {MAX_SHARDS}, not {count}"
            ));
        }
        if index >= count {
            return Err(format!(
                "shard index {index} is not below the shard count {count} (indices run from 0)"
            ));
        }
        Ok(Shard { index, count })
    }

    /// Parse `K/N`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not K/N (like 0/4)"))?;
        let num = |s: &str, what| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("{what} {s:?} in {text:?} is not a whole number"))
        };
        Shard::new(num(k, "the index")?, num(n, "the count")?)
    }

    /// Shard `$JOB_COMPLETION_INDEX` of `count`, from the variable's value.
    pub fn from_env(count: u32, value: Option<OsString>) -> Result<Shard, String> {
        let value = value.ok_or_else(|| {
            format!(
                "--shard-from-env needs ${COMPLETION_INDEX_ENV} (set by a Kubernetes Indexed Job)"
            )
        })?;
        let text = value.to_string_lossy();
        let index = text
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("${COMPLETION_INDEX_ENV} is {text:?}, not a whole number"))?;
        Shard::new(index, count)
    }

    /// The inputs it runs, of `total`.
    pub fn range(&self, total: usize) -> Range<usize> {
        let r = shard_range(total as u64, self.index, self.count);
        r.start as usize..r.end as usize
    }

    /// What its receipt records, for a job of `total` inputs.
    pub fn facts(&self, total: usize) -> ShardFacts {
        ShardFacts::new(self.index, self.count, total as u64)
    }

    /// `shard-K-of-N`.
    pub fn dir_name(&self) -> String {
        shard_dir_name(self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_k_of_n_and_the_completion_index() {
        assert_eq!(Shard::parse("1/4"), Ok(Shard { index: 1, count: 4 }));
        assert!(Shard::parse("4/4")
            .unwrap_err()
            .contains("not below the shard count 4"));
        assert!(Shard::parse("0/0").unwrap_err().contains("must be 1 to"));
        assert!(Shard::parse("a/2")
            .unwrap_err()
            .contains("not a whole number"));
        assert!(Shard::parse("3").unwrap_err().contains("is not K/N"));
        assert_eq!(
            Shard::from_env(3, Some("2".into())),
            Ok(Shard { index: 2, count: 3 })
        );
        assert!(Shard::from_env(3, None)
            .unwrap_err()
            .contains("JOB_COMPLETION_INDEX"));
        assert!(Shard::from_env(3, Some("x".into())).is_err());
    }
}
