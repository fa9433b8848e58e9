//! The kernels' thread count and the ways they split work across threads.
//!
//! Determinism rule: a kernel only ever splits *independent outputs* (rows, columns, heads)
//! between threads, and computes each output with the same operations in the same order
//! whichever thread it lands on. So results are bit-identical for any thread count; the split
//! only changes which thread does the work.
//!
//! Work runs on one persistent pool (`kernels::pool`), started on first use: a decode step makes
//! a few hundred kernel calls, and starting threads per call cost tens of microseconds each
//! (and left a malloc arena behind per short-lived thread). The calling thread works too; small jobs (below a
//! kernel-chosen amount of work) run on it alone. Every split is a list of pieces that the
//! threads claim one at a time (`run_claimed`); column and range splits can be cut finer than
//! one piece per thread, so a core slowed by a neighbour (this VM's other tenants) does not
//! hold the other one up.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::pool::Pool;

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

/// The pool kernel jobs run on: one worker fewer than the thread count (the calling thread
/// works too), so that a 2-core machine runs exactly 2 busy threads; an extra idle worker's
/// spinning measurably slowed bandwidth-bound kernels. Sized by the first call that uses it.
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| Pool::start(threads().saturating_sub(1).max(1)))
        .as_ref()
}

/// Fill `out` (rows of `row_len` values) in parallel: `f(rows, chunk)` computes rows `rows` into
/// `chunk` (`rows.len() * row_len` values). `min_rows` is the smallest share worth a task.
pub(crate) fn for_rows<F>(out: &mut [f32], row_len: usize, min_rows: usize, f: F)
where
    F: Fn(Range<usize>, &mut [f32]) + Sync,
{
    if row_len == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / row_len;
    let ranges = split(rows, chunk_count(rows, min_rows, 1), 1);
    if ranges.len() <= 1 {
        f(0..rows, out);
        return;
    }
    let mut chunks = Vec::with_capacity(ranges.len());
    let mut rest = out;
    for r in ranges {
        let (chunk, tail) = rest.split_at_mut(r.len() * row_len);
        rest = tail;
        chunks.push((r, chunk));
    }
    for_each_part(chunks, |(r, c)| f(r, c));
}

/// Map contiguous ranges of `0..items` to results in parallel, returned in range order together
/// with their ranges. `align` keeps range boundaries on multiples of it. `per_thread` ranges
/// per thread (at most) are claimed one by one by whichever thread is free (see
/// [`run_claimed`]); 1 gives each thread one share.
pub(crate) fn map_ranges<T, F>(
    items: usize,
    min_items: usize,
    align: usize,
    per_thread: usize,
    f: F,
) -> Vec<(Range<usize>, T)>
where
    T: Send,
    F: Fn(Range<usize>) -> T + Sync,
{
    let ranges = split(items, chunk_count(items, min_items, per_thread), align);
    if ranges.len() <= 1 {
        return ranges.into_iter().map(|r| (r.clone(), f(r))).collect();
    }
    let slots: Vec<Mutex<Option<T>>> = ranges.iter().map(|_| Mutex::new(None)).collect();
    run_claimed(ranges.len(), &|i| {
        let v = f(ranges[i].clone());
        if let Ok(mut slot) = slots[i].lock() {
            *slot = Some(v);
        }
    });
    ranges
        .into_iter()
        .zip(slots)
        // Every slot was filled: `run_claimed` returns only after every index ran (a
        // panicking task re-raises on this thread instead).
        .filter_map(|(r, v)| v.into_inner().ok().flatten().map(|v| (r, v)))
        .collect()
}

/// Run `f` once on each of `parts` in parallel, each part claimed by whichever thread is free.
pub(crate) fn for_each_part<T, F>(parts: Vec<T>, f: F)
where
    T: Send,
    F: Fn(T) + Sync,
{
    if parts.len() <= 1 {
        parts.into_iter().for_each(f);
        return;
    }
    let slots: Vec<Mutex<Option<T>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    run_claimed(slots.len(), &|i| {
        let part = slots[i].lock().ok().and_then(|mut p| p.take());
        if let Some(p) = part {
            f(p);
        }
    });
}

/// How many chunks to cut `items` into: `per_thread` per thread (so one on one thread), at
/// least one, and none smaller than `min_items` (the caller's estimate of what pays for a
/// thread's share).
pub(crate) fn chunk_count(items: usize, min_items: usize, per_thread: usize) -> usize {
    let t = threads();
    if t <= 1 {
        return 1;
    }
    let by_work = items / min_items.max(1);
    t.saturating_mul(per_thread.max(1))
        .min(by_work)
        .clamp(1, items.max(1))
}

/// Run `job(i)` exactly once for every `i` in `0..chunks`, on this thread and the pool's
/// workers, each taking the next index not yet taken. A thread slowed down (a neighbour on its
/// core, a smaller core) simply takes fewer; which thread runs an index never changes what it
/// computes.
fn run_claimed(chunks: usize, job: &(dyn Fn(usize) + Sync)) {
    let next = AtomicUsize::new(0);
    let claim = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= chunks {
            break;
        }
        job(i);
    };
    let helpers = threads().saturating_sub(1).min(chunks.saturating_sub(1));
    match pool() {
        Some(p) if helpers > 0 => p.run(helpers, &claim),
        _ => claim(),
    }
}

/// A block of whole columns of a row-major `[rows, n]` buffer, handed to one task so tasks can
/// fill disjoint column ranges of one output in place.
pub(crate) struct ColumnsMut<'a> {
    ptr: *mut f32,
    /// Row stride of the buffer.
    n: usize,
    rows: usize,
    cols: Range<usize>,
    /// The column index stored at offset 0 of each buffer row.
    origin: usize,
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: a `ColumnsMut` only ever touches elements `i * n + cols` of its buffer, and the
// blocks made from one buffer (by `for_columns`) have disjoint `cols`, so sending one to
// another thread cannot create aliasing access.
unsafe impl Send for ColumnsMut<'_> {}

impl<'a> ColumnsMut<'a> {
    /// Every column of `out`, a row-major buffer `n` wide.
    pub(crate) fn whole(out: &'a mut [f32], n: usize) -> Self {
        let rows = out.len().checked_div(n).unwrap_or(0);
        ColumnsMut {
            ptr: out.as_mut_ptr(),
            n,
            rows,
            cols: 0..n,
            origin: 0,
            _out: PhantomData,
        }
    }

    /// Columns `cols` of a wider matrix, stored in `out` as a row-major `[rows, cols.len()]`
    /// buffer (a scratch window over part of an output that is never built whole).
    pub(crate) fn window(out: &'a mut [f32], cols: Range<usize>) -> Self {
        let n = cols.len();
        let rows = out.len().checked_div(n).unwrap_or(0);
        ColumnsMut {
            ptr: out.as_mut_ptr(),
            n,
            rows,
            origin: cols.start,
            cols,
            _out: PhantomData,
        }
    }

    /// The columns this block covers.
    pub(crate) fn cols(&self) -> Range<usize> {
        self.cols.clone()
    }

    /// Row `i`'s share: its elements in [`ColumnsMut::cols`]. Panics if `i` is out of range.
    pub(crate) fn row(&mut self, i: usize) -> &mut [f32] {
        assert!(i < self.rows, "row {i} of a {}-row block", self.rows);
        // SAFETY: `i < rows` and `origin <= cols.start`, `cols.end - origin <= n` (true of
        // every constructor), so the range lies inside the buffer this block borrows; blocks of
        // one buffer never share a column (see the `Send` impl), and `&mut self` keeps this
        // block from handing out two live slices.
        unsafe {
            let at = i * self.n + (self.cols.start - self.origin);
            std::slice::from_raw_parts_mut(self.ptr.add(at), self.cols.len())
        }
    }
}

/// Fill the row-major `[rows, n]` buffer `out` in parallel, split by columns: `f` gets one
/// block of whole columns. `min_cols` is the smallest share worth a task; block boundaries
/// fall on multiples of `align`; `per_thread` blocks per thread as in [`map_ranges`].
pub(crate) fn for_columns<F>(
    out: &mut [f32],
    n: usize,
    min_cols: usize,
    align: usize,
    per_thread: usize,
    f: F,
) where
    F: Fn(ColumnsMut<'_>) + Sync,
{
    if n == 0 || out.is_empty() {
        return;
    }
    let ranges = split(n, chunk_count(n, min_cols, per_thread), align);
    let whole = ColumnsMut::whole(out, n);
    if ranges.len() <= 1 {
        f(whole);
        return;
    }
    let blocks: Vec<Mutex<Option<ColumnsMut<'_>>>> = ranges
        .into_iter()
        .map(|cols| {
            Mutex::new(Some(ColumnsMut {
                ptr: whole.ptr,
                n,
                rows: whole.rows,
                cols,
                origin: 0,
                _out: PhantomData,
            }))
        })
        .collect();
    run_claimed(blocks.len(), &|i| {
        let block = blocks[i].lock().ok().and_then(|mut b| b.take());
        if let Some(block) = block {
            f(block);
        }
    });
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
    fn claimed_ranges_run_once_each_and_come_back_in_order() {
        for (threads, per_thread, want) in [(1, 4, 1), (2, 1, 2), (2, 4, 8), (3, 4, 12)] {
            let calls = AtomicUsize::new(0);
            let parts = with_threads(threads, || {
                map_ranges(1000, 10, 8, per_thread, |r| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    r.len()
                })
            });
            assert_eq!(parts.len(), want, "{threads} threads x {per_thread}");
            assert_eq!(calls.load(Ordering::Relaxed), want);
            let mut next = 0;
            for (r, len) in &parts {
                assert_eq!((r.start, r.len()), (next, *len));
                next = r.end;
            }
            assert_eq!(next, 1000);
        }
        // Never more ranges than the smallest worthwhile share allows.
        let few = with_threads(2, || map_ranges(100, 40, 1, 4, |r| r));
        assert_eq!(few.len(), 2);
    }

    #[test]
    fn claimed_column_blocks_fill_every_column_once() {
        let (rows, n) = (3, 203);
        let mut out = vec![0.0f32; rows * n];
        with_threads(2, || {
            for_columns(&mut out, n, 1, 8, 4, |mut block| {
                for i in 0..rows {
                    let cols = block.cols();
                    for (c, v) in cols.zip(block.row(i)) {
                        *v += (i * n + c) as f32;
                    }
                }
            })
        });
        let want: Vec<f32> = (0..rows * n).map(|x| x as f32).collect();
        assert_eq!(out, want);
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
