//! The `runner` binary: parse the command line, run it, map the outcome to an exit code.
//! All the work lives in the library (`runner::cli`).

use std::process::ExitCode;

/// Large blocks are kept for reuse instead of being mapped afresh each time (see `runner::heap`).
#[global_allocator]
static ALLOCATOR: runner::heap::Allocator = runner::heap::Allocator::new();

fn main() -> ExitCode {
    fix_heap_growth();
    runner::cli::main()
}

/// Every allocation of 1 MiB or more that the allocator above does not take (over-aligned ones)
/// gets its own mapping, returned to the system when freed.
///
/// glibc raises this threshold whenever a mapped block is freed (up to 32 MiB), after which
/// activations of a few MiB come from the heap instead, and a run whose sizes vary (a warm-up,
/// prefill chunks, then decode steps) fragments the heap and keeps growing: 270m at batch 32
/// peaked at 819 MiB instead of 591 MiB with the threshold fixed. Smaller blocks stay on the
/// heap, where reuse is cheap.
///
/// Reuse is cheap only while the heap keeps its free top: glibc gives it back to the system
/// once more than 128 KiB of it is free, so each decode step's few-hundred-KiB activations
/// faulted their pages in afresh (a 270m batch-32 decode step spent a third of a `mul` in page
/// faults). Keeping up to 16 MiB of free top cut a bench's page faults from 646k to 414k
/// without raising any peak RSS by more than 1 MiB.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn fix_heap_growth() {
    const THRESHOLD: libc::c_int = 1 << 20;
    const KEEP_TOP: libc::c_int = 16 << 20;
    // SAFETY: `mallopt` only sets an allocator parameter; it is called before any thread
    // starts. A failure (0) leaves glibc's default, which is only slower to give memory back.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP_TOP);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_heap_growth() {}
