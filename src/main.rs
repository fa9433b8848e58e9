//! The `runner` binary: parse the command line, run it, map the outcome to an exit code.
//! All the work lives in the library (`runner::cli`).

use std::process::ExitCode;

/// Large blocks are kept for reuse instead of being mapped afresh each time (see
/// `runner::memory::heap`). The features `system-alloc` and `mimalloc` swap in the system's or
/// mimalloc's allocator instead, to measure ours against them (`runner bench` names the one
/// it runs with; docs/performance.md has the comparison).
#[cfg(not(any(feature = "system-alloc", feature = "mimalloc")))]
#[global_allocator]
static ALLOCATOR: runner::memory::heap::Allocator = runner::memory::heap::Allocator::new();

#[cfg(all(feature = "mimalloc", not(feature = "system-alloc")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    runner::memory::heap::tune_glibc_heap();
    runner::cli::main()
}
