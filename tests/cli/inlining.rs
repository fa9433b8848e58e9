//! The release binary's block decoders: the small helpers that make or take one vector are
//! inlined into the kernels. One left out of line turns every vector it touches into a call,
//! with the vector passed through memory. Closures are where that happens unseen: one inside
//! a kernel that is generic rather than `#[target_feature]` has none of the caller's features,
//! so nothing with features inlines into it. The one-row AVX-512 `gemv` ran Q6_K at a third of
//! its speed that way (AMD EPYC, Zen 4).

use std::process::Command;

/// The per-vector helpers of `src/kernels/quant/avx2.rs` and `avx512.rs`. The per-block ones
/// (`k_group_factors_f16c`, `k_group_factors_512`, `q6_k_scales_f16c`,
/// `q6_k_quarter_scales_512`) may be calls: one a block is cheap.
const PER_VECTOR: &[&str] = &[
    "broadcast16",
    "five_bit_indices",
    "from_minus",
    "from_top",
    "half_f16c",
    "load16",
    "load32",
    "load_u32",
    "nibbles",
    "pair_nibbles",
    "paired_nibbles",
    "paired_tops",
    "q5_0_clear",
    "q5_k_bytes",
    "q6_k_bytes",
    "scaled",
    "top_controls",
    "top_byte_controls",
    "tops",
    "widen32",
];

#[test]
fn the_block_decoders_per_vector_helpers_are_inlined_in_the_release_binary() {
    if cfg!(debug_assertions) || !cfg!(target_arch = "x86_64") {
        eprintln!(
            "skipped: only an optimised x86-64 build inlines the decoders (cargo test --release)"
        );
        return;
    }
    let exe = env!("CARGO_BIN_EXE_runner");
    let out = Command::new("nm")
        .args(["-C", exe])
        .output()
        .unwrap_or_else(|e| panic!("running nm (binutils) on {exe}: {e}"));
    assert!(
        out.status.success(),
        "nm {exe}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let symbols = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = symbols
        .lines()
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .collect();
    // The kernels the helpers go into are there under this name (the one-row loop of each
    // format, compiled apart from the dispatch): the check below can see them.
    let kernel = "runner::kernels::quant::avx512::rows";
    assert!(names.contains(&kernel), "{exe} has no symbol {kernel}");
    let stray: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| {
            ["avx2", "avx512"].iter().any(|m| {
                name.strip_prefix("runner::kernels::quant::")
                    .and_then(|n| n.strip_prefix(m))
                    .and_then(|n| n.strip_prefix("::"))
                    .is_some_and(|helper| PER_VECTOR.contains(&helper))
            })
        })
        .collect();
    assert!(stray.is_empty(), "compiled out of line in {exe}: {stray:?}");
}
