//! The kernels' thread count and the two ways they split work across threads.
//!
//! Determinism rule: a kernel only ever splits *independent outputs* (rows, columns, heads)
//! between threads, and computes each output with the same operations in the same order
//! whichever thread it lands on. So results are bit-identical for any thread count; the split
//! only changes which thread does the work.
//!
//! Threads are `std::thread::scope` threads started per call; the calling thread does the first
//! share itself, and small jobs (below a kernel-chosen amount of work) run on the calling thread
//! alone so the spawn cost never dominates.

use std::cell::Cell;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// 0 = not resolved yet (read `RUNNER_THREADS` / available parallelism on first use).
static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// A per-thread override set by [`with_threads`]; 0 = none.
    static OVERRIDE: Cell<usize> = const { Cell::new(0) };
}

/// The environment variable that sets the default thread count.
pub const THREADS_ENV: &str = "RUNNER_THREADS";

fn default_threads() -> usize {
    let from_env = std::env::var(THREADS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0);
    from_env.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Set the number of threads kernels use from now on, process-wide. `0` restores the default:
/// `RUNNER_THREADS` if it holds a positive integer, else the machine's available parallelism.
pub fn set_threads(n: usize) {
    let n = if n == 0 { default_threads() } else { n };
    THREADS.store(n, Ordering::Relaxed);
}

/// The number of threads the next kernel call on this thread will use (at least 1).
pub fn threads() -> usize {
    let o = OVERRIDE.with(Cell::get);
    if o > 0 {
        return o;
    }
    match THREADS.load(Ordering::Relaxed) {
        0 => {
            let n = default_threads().max(1);
            THREADS.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

/// Run `f` with kernels called from this thread using `n` threads (`n` >= 1), then restore
/// the previous setting. Other threads are unaffected.
pub fn with_threads<R>(n: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|c| c.replace(n.max(1))));
    f()
}

/// How many tasks to cut `items` into: at most [`threads()`], at least one, and none smaller
/// than `min_items` items (the caller's estimate of what pays for a thread start).
fn task_count(items: usize, min_items: usize) -> usize {
    let by_work = items / min_items.max(1);
    threads().min(by_work).clamp(1, items.max(1))
}

/// `0..n` cut into `parts` contiguous ranges whose lengths differ by at most one, each a
/// multiple of `align` except the last.
pub(crate) fn split(n: usize, parts: usize, align: usize) -> Vec<Range<usize>> {
    let align = align.max(1);
    let units = n.div_ceil(align);
    let parts = parts.clamp(1, units.max(1));
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for p in 0..parts {
        let units_here = units / parts + usize::from(p < units % parts);
        let end = (start + units_here * align).min(n);
        out.push(start..end);
        start = end;
    }
    out
}

/// Fill `out` (rows of `row_len` values) in parallel: `f(rows, chunk)` computes rows `rows` into
/// `chunk` (`rows.len() * row_len` values). `min_rows` is the smallest share worth a thread.
pub(crate) fn for_rows<F>(out: &mut [f32], row_len: usize, min_rows: usize, f: F)
where
    F: Fn(Range<usize>, &mut [f32]) + Sync,
{
    if row_len == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / row_len;
    let ranges = split(rows, task_count(rows, min_rows), 1);
    if ranges.len() <= 1 {
        f(0..rows, out);
        return;
    }
    std::thread::scope(|s| {
        let mut rest = out;
        let mut mine = None;
        for r in ranges {
            let (chunk, tail) = rest.split_at_mut(r.len() * row_len);
            rest = tail;
            if mine.is_none() {
                mine = Some((r, chunk));
            } else {
                let f = &f;
                s.spawn(move || f(r, chunk));
            }
        }
        if let Some((r, chunk)) = mine {
            f(r, chunk);
        }
    });
}

/// Map contiguous ranges of `0..items` to results in parallel, returned in range order together
/// with their ranges. `align` keeps range boundaries on multiples of it.
pub(crate) fn map_ranges<T, F>(
    items: usize,
    min_items: usize,
    align: usize,
    f: F,
) -> Vec<(Range<usize>, T)>
where
    T: Send,
    F: Fn(Range<usize>) -> T + Sync,
{
    let ranges = split(items, task_count(items, min_items), align);
    if ranges.len() <= 1 {
        return ranges.into_iter().map(|r| (r.clone(), f(r))).collect();
    }
    std::thread::scope(|s| {
        let f = &f;
        let mut iter = ranges.into_iter();
        let first = iter.next();
        let handles: Vec<_> = iter.map(|r| (r.clone(), s.spawn(move || f(r)))).collect();
        let mut out = Vec::with_capacity(handles.len() + 1);
        if let Some(r) = first {
            out.push((r.clone(), f(r)));
        }
        for (r, h) in handles {
            match h.join() {
                Ok(v) => out.push((r, v)),
                // A kernel task only panics on a bug; re-raise it on the caller's thread.
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_everything_in_order() {
        for n in 0..40 {
            for parts in 1..6 {
                for align in 1..5 {
                    let r = split(n, parts, align);
                    let mut next = 0;
                    for (i, x) in r.iter().enumerate() {
                        assert_eq!(x.start, next);
                        if i + 1 < r.len() {
                            assert_eq!(x.len() % align, 0, "n={n} parts={parts} align={align}");
                        }
                        next = x.end;
                    }
                    assert_eq!(next, n);
                    assert!(r.len() <= parts);
                }
            }
        }
    }

    #[test]
    fn with_threads_overrides_and_restores() {
        let before = threads();
        with_threads(3, || {
            assert_eq!(threads(), 3);
            with_threads(1, || assert_eq!(threads(), 1));
            assert_eq!(threads(), 3);
        });
        assert_eq!(threads(), before);
    }

    #[test]
    fn for_rows_gives_each_row_to_exactly_one_task() {
        let mut out = vec![0.0f32; 7 * 3];
        with_threads(3, || {
            for_rows(&mut out, 3, 1, |rows, chunk| {
                for (i, row) in rows.zip(chunk.chunks_mut(3)) {
                    for v in row {
                        *v += i as f32;
                    }
                }
            })
        });
        let want: Vec<f32> = (0..7).flat_map(|i| [i as f32; 3]).collect();
        assert_eq!(out, want);
    }
}
