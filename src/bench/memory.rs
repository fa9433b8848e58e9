//! Memory facts for the benchmark: the process's peak resident set (Linux `VmHWM`), the bytes
//! a batch's KV caches hold, and the memory budget a run must stay under: the weights as
//! stored, plus the KV caches, plus 100 MiB for everything else.
//!
//! The weights are memory-mapped, so their pages count in the resident set once touched; the
//! budget's weight bytes are what covers them.

use crate::model::config::{LayerKind, ModelConfig};

/// Allowance above weights and KV caches: activations, the plan, the binary, the allocator.
pub const OVERHEAD_BYTES: u64 = 100 << 20;

/// This process's peak resident set in bytes (`VmHWM` in /proc/self/status), where the
/// platform reports one.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_kib(&status, "VmHWM:").map(|kib| kib * 1024)
}

/// A `Name:   123 kB` field of /proc/self/status, in KiB.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let mut parts = line.get(field.len()..)?.split_whitespace();
    let value = parts.next()?.parse().ok()?;
    (parts.next() == Some("kB")).then_some(value)
}

/// Bytes of f32 KV cache (keys and values) all layers hold for `batch` sequences, when a
/// sliding layer holds `sliding_columns` columns and a global layer `global_columns`.
fn kv_bytes(c: &ModelConfig, batch: usize, sliding_columns: usize, global_columns: usize) -> u64 {
    let per_column = 2 * batch as u64 * c.num_kv_heads as u64 * c.head_dim as u64 * 4;
    c.layer_kinds
        .iter()
        .map(|kind| {
            per_column
                * match kind {
                    LayerKind::Sliding => sliding_columns as u64,
                    LayerKind::Full => global_columns as u64,
                }
        })
        .sum()
}

/// KV cache bytes a run of `batch` sequences of `total_len` tokens (prompt + new) can hold:
/// a sliding layer keeps at most `min(window, total_len)` columns, a global layer `total_len`.
pub fn kv_bytes_held(c: &ModelConfig, batch: usize, total_len: usize) -> u64 {
    kv_bytes(c, batch, c.sliding_window.min(total_len), total_len)
}

/// KV cache bytes counting a full window for every sliding layer (what long runs reach).
pub fn kv_bytes_full_window(c: &ModelConfig, batch: usize, total_len: usize) -> u64 {
    kv_bytes(c, batch, c.sliding_window, total_len)
}

/// The memory budget: weights + KV caches + [`OVERHEAD_BYTES`].
pub fn budget(weight_bytes: u64, kv_bytes: u64) -> u64 {
    weight_bytes + kv_bytes + OVERHEAD_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vm_hwm_in_kib() {
        let status = "Name:\trunner\nVmPeak:\t  9000 kB\nVmHWM:\t   1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(status_kib(status, "VmHWM:"), Some(1234));
        assert_eq!(status_kib("VmHWM:\t12 MB\n", "VmHWM:"), None);
        assert_eq!(status_kib("", "VmHWM:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peak_rss_is_reported_on_linux() {
        assert!(peak_rss().is_some_and(|b| b > 0));
    }
}
