//! Exact `argmax(x · wᵀ)` for rows of x, reading an 8-bit copy of `w` instead of all of it.
//!
//! At batch 1 a decode step is bound by the bytes it reads, and Gemma 3's output head (262144
//! rows) is most of them: 63 % of the 270m model. A [`Screen`] is a copy of such a weight with
//! each row rounded to 8-bit integers times a per-row scale, plus a per-row bound on how far a
//! screened score can be from the score `linear` computes. Ranking every row by its screened
//! score, then scoring exactly (with the same kernel as `linear`) only the rows whose interval
//! reaches the best lower bound, gives the same id as the full computation: a row left out
//! provably scores below a row kept. It is not an approximation, and ties and NaN follow
//! [`argmax`](crate::kernels::argmax)'s rules because every row that could matter is scored
//! exactly and merged in index order.
//!
//! The bound. For row `j` with largest magnitude `M`, scale `s = M / 127` and rounding errors
//! `e_i = w_i - q_i s`, and `X = Σ |x_i|`:
//! - the quantisation moves the exact dot product by at most `min(X max|e_i|, ‖x‖₂ ‖e‖₂)`;
//! - a dot product of length `n` in f32, in any order, with or without fused multiply-adds, is
//!   within `γ Σ |x_i y_i|` of the exact one, `γ = n u / (1 - n u)`, `u = 2⁻²⁴` (Higham,
//!   *Accuracy and Stability of Numerical Algorithms*, §3.1), plus at most one subnormal half-ulp
//!   per operation when products underflow; the screened sum is bounded by `γ X 127 s`, the
//!   kernel's by `γ X M`.
//!
//! So `|kernel score - screened score|` is at most the quantisation term plus
//! `X γ (127 s + M) + 2 n 2⁻¹⁴⁹`, computed in f64 and rounded up. Rows holding a NaN or an
//! infinity are always scored exactly. An `x` that is not finite, is all zero, or is large
//! enough to overflow a sum skips the screen.
//!
//! Several x rows ([`Screen::candidates_many`]) are bound by arithmetic rather than bytes, so x
//! is rounded to integers as well and scored in exact integer arithmetic ([`int8`]); the bound
//! gains x's own rounding, `‖e_x‖₂ · ‖q‖₂ s`, and each row's interval comes from [`scan`].
#![allow(unsafe_code)]

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::parallel;
use super::simd::{self, Cpu, Isa, LANES};

mod int8;
mod panel;
mod scan;

/// What a screen is built from: a `[rows, k]` matrix whose rows read as f32 and whose bytes
/// can be handed back to the system once read ([`Weight`](super::Weight) is the one source).
pub(crate) trait ScreenSource: Sync {
    /// `(rows, k)`.
    fn rows_and_k(&self) -> (usize, usize);
    /// Elements `start..start + out.len()` (row-major) as f32.
    fn read_f32(&self, start: usize, out: &mut [f32]);
    /// Elements `elems` will not be read again soon: their pages may go back to the system.
    fn release(&self, elems: Range<usize>);
}

/// Rows per block: the unit the screen is built and scanned in (and released from memory).
const BLOCK_ROWS: usize = 2048;

/// x rows the batched screen rounds to integers per task.
const ROUND_ROWS: usize = 16;

/// Panels per task of [`Screen::refine_many`], at least, and tasks per thread: the lists'
/// rows need not be spread evenly over the panels, and several tasks per thread, each claimed
/// by whichever thread is free, even out what each thread is given.
const REFINE_MIN_PANELS: usize = 64;
const REFINE_TASKS: usize = 8;

/// Magnitude of a quantised weight.
const QMAX: f32 = 127.0;

/// Relative margin for sums and square roots taken in f64 (at most ~`k` 2⁻⁵³ off).
const ROUND_UP: f64 = 1e-10;

/// Above this `Σ |x_i| · max |w|` a screened or exact sum could overflow f32; skip the screen.
const OVERFLOW_GUARD: f64 = 1e36;

/// Relative widening of the f32 overestimates of a row's upper bound that dismiss rows before
/// their f64 intervals ([`Screen::panel_below`], and the batched scan's prefilter): each
/// rounds at most eight times, each by at most 2⁻²⁴ of a value no larger than
/// `|centre| + radius`, and the f64 interval it stands for is widened by 10⁻⁹; 2⁻¹⁶ covers
/// both many times over.
const UPPER_SLACK: f32 = 1.0 / 65536.0;
/// Absolute widening of the same: products that underflow in f32 (each off by at most 2⁻¹⁴⁹,
/// times at most 2³¹ for the batched scan's integer dot product) where f64's would not.
const UPPER_ABSOLUTE: f32 = 1e-27;

/// One f32 x row's multipliers for [`Screen::panel_below`], each rounded up (they multiply
/// nonnegative factors).
struct UpperOne {
    abs: f32,
    l2: f32,
    tiny: f32,
}

/// An 8-bit copy of a `[n, k]` weight with per-row error bounds (see the module doc).
pub(crate) struct Screen {
    rows: usize,
    k: usize,
    /// The quantised values (as `i8` bits), in [`panel`]s of rows.
    q: Storage,
    blocks: Vec<Block>,
    /// The largest finite magnitude in the weight.
    max_abs: f64,
}

/// The quantised values: an anonymous map asking for huge pages (a single stream reads faster
/// through them than through 4 KiB pages; docs/performance.md, "What changed the numbers"), or
/// the heap where that is not available.
enum Storage {
    Map(memmap2::MmapMut),
    Heap(Vec<u8>),
}

impl Storage {
    fn new(len: usize) -> Storage {
        match memmap2::MmapMut::map_anon(len) {
            Ok(map) if len > 0 => {
                // Only a hint: without huge pages the screen is just slower.
                let _ = map.advise(memmap2::Advice::HugePage);
                Storage::Map(map)
            }
            _ => Storage::Heap(vec![0; len]),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Map(m) => m,
            Storage::Heap(v) => v,
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Map(m) => m,
            Storage::Heap(v) => v,
        }
    }
}

/// One block's per-row scales and bound factors, a vector per factor (the batched screen
/// computes every row's interval in one pass over them).
struct Block {
    scale: Vec<f32>,
    /// The bound's factors per row, each to be multiplied by a norm of x: `max |e_i|`, `‖e‖₂`,
    /// the rounding term, and `‖q‖₂ · scale` (what x's own rounding can move a batched score
    /// by, per unit of its error's norm), all rounded up; `+inf` for a row with a non-finite
    /// value, which is then always kept. Stored as f32 rounded up ([`up`]), used in f64.
    max_err: Vec<f32>,
    l2_err: Vec<f32>,
    rounding: Vec<f32>,
    row_l2: Vec<f32>,
    /// The largest factors of each [`scan::SPAN`] rows, in order ([`Block::sealed`]).
    largest: Vec<scan::Largest>,
}

impl Block {
    /// The factors of every row of the block.
    fn factors(&self) -> scan::Factors<'_> {
        scan::Factors {
            scale: &self.scale,
            max_err: &self.max_err,
            l2_err: &self.l2_err,
            rounding: &self.rounding,
            row_l2: &self.row_l2,
            largest: &self.largest,
        }
    }

    fn with_capacity(rows: usize) -> Block {
        Block {
            scale: Vec::with_capacity(rows),
            max_err: Vec::with_capacity(rows),
            l2_err: Vec::with_capacity(rows),
            rounding: Vec::with_capacity(rows),
            row_l2: Vec::with_capacity(rows),
            largest: Vec::new(),
        }
    }

    /// The block with its spans' largest factors found: once every row is in.
    fn sealed(mut self) -> Block {
        self.largest =
            scan::Largest::spans(&self.max_err, &self.l2_err, &self.rounding, &self.row_l2);
        self
    }

    /// A block whose rows are all scored exactly.
    fn wild(rows: usize) -> Block {
        let mut block = Block::with_capacity(rows);
        for _ in 0..rows {
            block.push_wild();
        }
        block.sealed()
    }

    fn push_wild(&mut self) {
        self.scale.push(0.0);
        for v in [
            &mut self.max_err,
            &mut self.l2_err,
            &mut self.rounding,
            &mut self.row_l2,
        ] {
            v.push(f32::INFINITY);
        }
    }
}

/// What the bound needs of one x row: `Σ |x_i|` and `‖x‖₂` (rounded up), and for the batched
/// screen its integer scale and the norm of its rounding error.
struct XRow {
    abs: f64,
    l2: f64,
    scale: f32,
    err_l2: f64,
}

/// An x row as [`Screen::refine_many`] reads it: its norms ([`Screen::x_norms`]) and its
/// values padded with zeros to the panels' row length.
struct FloatX {
    norms: (f64, f64),
    padded: Vec<f32>,
}

/// `γ` for dot products of length `k`, with room for the lane reduction's extra additions.
fn gamma(k: usize) -> f64 {
    let nu = (k + 2 * LANES) as f64 * f64::powi(2.0, -24);
    nu / (1.0 - nu)
}

impl Screen {
    /// Bytes per row besides the quantised values: its scale and bound factors.
    pub(crate) const ROW_BYTES: usize = 5 * std::mem::size_of::<f32>();

    /// Quantise `w` (`[n, k]`), a block of rows per task. After each block is read, its bytes
    /// are handed back to the operating system ([`ScreenSource::release`]): from then on only
    /// the rows the screen keeps are read at full width.
    pub(crate) fn build(w: &impl ScreenSource) -> Screen {
        let (rows, k) = w.rows_and_k();
        let g = gamma(k);
        let n_blocks = rows.div_ceil(BLOCK_ROWS);
        let kp = panel::padded(k);
        let mut q = Storage::new(panel::bytes(rows, k));
        // Each task locks only its own blocks' values, so the locks are never contended.
        let cells: Vec<Mutex<&mut [u8]>> = q
            .bytes_mut()
            .chunks_mut((BLOCK_ROWS * kp).max(1))
            .map(Mutex::new)
            .collect();
        let parts = parallel::map_ranges(n_blocks, 1, 1, 1, |blocks| {
            let mut row = vec![0.0f32; k];
            let mut levels = vec![0u8; k];
            blocks
                .map(|b| {
                    let range = b * BLOCK_ROWS..((b + 1) * BLOCK_ROWS).min(rows);
                    let block = match cells.get(b).map(|c| c.lock()) {
                        Some(Ok(mut values)) => {
                            let mut out = Levels {
                                row: &mut levels,
                                panels: &mut values,
                            };
                            quantise_block(w, range.clone(), g, &mut row, &mut out)
                        }
                        // No values (k = 0), or a task that panicked: every row is scored exactly.
                        _ => Block::wild(range.len()),
                    };
                    w.release(range.start * k..range.end * k);
                    block
                })
                .collect::<Vec<_>>()
        });
        drop(cells);
        let blocks: Vec<Block> = parts.into_iter().flat_map(|(_, b)| b).collect();
        let max_abs = blocks
            .iter()
            .flat_map(|b| &b.scale)
            .fold(0.0f64, |m, &s| m.max(f64::from(s) * f64::from(QMAX)));
        Screen {
            rows,
            k,
            q,
            blocks,
            max_abs,
        }
    }

    /// The rows that may hold the argmax of `x · wᵀ`, in increasing order; `None` when `x`
    /// is outside what the bound covers (then the caller scores every row).
    /// `isa` is limited to what this CPU has (see [`simd::limit`]).
    pub(crate) fn candidates(&self, isa: Isa, x: &[f32]) -> Option<Vec<usize>> {
        self.candidates_by::<true>(isa, x)
    }

    /// [`candidates`](Self::candidates) with every row's f64 interval computed, none of its
    /// panels dismissed in f32 first: what the prefilter must give the same rows as.
    #[cfg(test)]
    pub(crate) fn candidates_unfiltered(&self, isa: Isa, x: &[f32]) -> Option<Vec<usize>> {
        self.candidates_by::<false>(isa, x)
    }

    /// [`candidates`](Self::candidates), where `PREFILTER` first dismisses whole panels whose
    /// f32 upper bounds all fall below the floor ([`Screen::panel_below`]): the same rows kept,
    /// since such a panel's rows neither pass the floor nor raise it (a row's low end is below
    /// its high end). Without it, every row's f64 interval took a sixth of a batch-1 head's time
    /// (`perf`, AMD EPYC, Zen 4).
    fn candidates_by<const PREFILTER: bool>(&self, isa: Isa, x: &[f32]) -> Option<Vec<usize>> {
        let cpu = simd::limit(isa);
        if x.len() != self.k {
            return None;
        }
        let norms = self.x_norms(x)?;
        let xp = self.padded_x(x);
        let tiny = self.tiny();
        let upper = UpperOne {
            abs: up(norms.0),
            l2: up(norms.1),
            tiny: up(tiny),
        };
        let parts = parallel::map_ranges(self.blocks.len(), 1, 1, 1, |blocks| {
            let mut floor = f64::NEG_INFINITY;
            let mut kept: Vec<(usize, f64)> = Vec::new();
            let mut dots = [0.0f32; panel::ROWS];
            let end = (blocks.end * BLOCK_ROWS).min(self.rows);
            // Blocks start on a panel (BLOCK_ROWS is a multiple of panel::ROWS).
            for first in (blocks.start * BLOCK_ROWS..end).step_by(panel::ROWS) {
                panel::centres(cpu, &xp, self.panel_of(first), &mut dots);
                let last = (first + panel::ROWS).min(end);
                if PREFILTER
                    && last - first == panel::ROWS
                    && self.panel_below(&dots, first, &upper, down(floor))
                {
                    continue;
                }
                for (row, &dot) in (first..last).zip(&dots) {
                    let (low, high) = self.interval(dot, norms, tiny, row);
                    // A row below a lower bound already seen stays below the final one.
                    if high >= floor {
                        kept.push((row, high));
                    }
                    floor = floor.max(low);
                }
            }
            (floor, kept)
        });
        let floor = parts
            .iter()
            .fold(f64::NEG_INFINITY, |m, (_, (f, _))| m.max(*f));
        Some(
            parts
                .into_iter()
                .flat_map(|(_, (_, kept))| kept)
                .filter(|&(_, high)| high >= floor)
                .map(|(row, _)| row)
                .collect(),
        )
    }

    /// For each row of `x` (`[m, k]`), rows that may hold the argmax of its scores, in
    /// increasing order, or `None` where the bound does not cover that row. Each x row is
    /// rounded to integers (8-bit, and 16-bit on the batch's outlier channels) and scored
    /// against the 8-bit rows exactly in integers ([`int8`]), so the bound has one more term
    /// than [`candidates`](Self::candidates)' (x's own rounding) and may keep a few more rows;
    /// it holds for any batch and any choice of outlier channels.
    pub(crate) fn candidates_many(&self, isa: Isa, x: &[f32], m: usize) -> Vec<Option<Vec<usize>>> {
        let cpu = simd::limit(isa);
        let k = self.k;
        if k == 0 || k > int8::MAX_K || x.len() != m * k || u32::try_from(self.rows).is_err() {
            return (0..m).map(|_| None).collect();
        }
        let m_pad = m.next_multiple_of(int8::TILE_X);
        let kp = panel::padded(k);
        // Padding rows (and rows the bound does not cover) hold x = 0: their scores are
        // computed and never looked at. Each row is padded to `kp` with zeros as well.
        let mut u = int8::XBytes {
            q: vec![0; m_pad * kp],
            qmax: int8::x_qmax(cpu),
            wide: vec![0; m_pad * int8::WIDE],
            channels: Vec::new(),
            sums: Default::default(),
        };
        let norms: Vec<Option<(f64, f64)>> = x.chunks_exact(k).map(|r| self.x_norms(r)).collect();
        let covered: Vec<bool> = norms.iter().map(Option::is_some).collect();
        u.channels = int8::outlier_channels(x, k, &covered);
        let (channels, qmax) = (&u.channels, u.qmax);
        let is_wide = int8::wide_mask(k, channels);
        // Rounded a group of rows per task: on one thread this was a millisecond of a 128-row
        // call (Zen 5) while the other thread waited.
        let mut xs: Vec<Option<XRow>> = (0..m).map(|_| None).collect();
        let groups: Vec<_> = x
            .chunks(ROUND_ROWS * k)
            .zip(norms.chunks(ROUND_ROWS))
            .zip(u.q.chunks_mut(ROUND_ROWS * kp))
            .zip(u.wide.chunks_mut(ROUND_ROWS * int8::WIDE))
            .zip(xs.chunks_mut(ROUND_ROWS))
            .collect();
        parallel::for_each_part(groups, |((((x, norms), q), wide), out)| {
            let rows = x.chunks_exact(k).zip(norms);
            let bytes = q
                .chunks_exact_mut(kp)
                .zip(wide.chunks_exact_mut(int8::WIDE));
            for (((xr, norms), (qr, wr)), out) in rows.zip(bytes).zip(out) {
                let Some((abs, l2)) = *norms else { continue };
                let rounded = int8::round_row(xr, channels, &is_wide, &mut qr[..k], wr, qmax);
                *out = Some(XRow {
                    abs,
                    l2,
                    scale: rounded.scale,
                    err_l2: rounded.err_l2,
                });
            }
        });
        if xs.iter().all(Option::is_none) {
            return (0..m).map(|_| None).collect();
        }
        let tiny = self.tiny();
        // Each x row's best lower bound over every task so far. A task's own floor starts at
        // minus infinity, and one over rarer tokens may never reach the others' on its own: on
        // the real 270M model at batch 32 the task over the second half of the vocabulary spent
        // about twice as long in the scan as the first half's, which then waited for it, and
        // the head took 13 % less time a step with the floor shared (20 % at batch 128;
        // docs/performance.md). Every lower bound is at most the final floor, so a row dropped
        // by a floor from elsewhere is dropped by the final filter too: the lists are the same
        // whatever the threads' timing.
        let shared: Vec<SharedFloor> = (0..m).map(|_| SharedFloor::default()).collect();
        let parts = parallel::map_ranges(self.blocks.len(), 1, 1, 1, |blocks| {
            let mut dots = vec![0i32; m_pad * BLOCK_ROWS];
            let mut found: Vec<Found> = (0..m).map(|_| Found::default()).collect();
            for b in blocks {
                let block = &self.blocks[b];
                let (start, n) = (b * BLOCK_ROWS, block.scale.len());
                let q = &self.q.bytes()[start * kp..(start + n.next_multiple_of(panel::ROWS)) * kp];
                int8::dots(cpu, &u, m_pad, q, n, kp, &mut dots[..m_pad * n]);
                for (i, ((xr, f), shared)) in xs.iter().zip(&mut found).zip(&shared).enumerate() {
                    let Some(xr) = xr else { continue };
                    let elsewhere = shared.get();
                    if elsewhere > f.floor {
                        f.floor = elsewhere;
                        f.kept.retain(|&(_, h)| f64::from(h) >= elsewhere);
                    }
                    let known = f.floor;
                    let x = scan::XFactors {
                        abs: xr.abs,
                        l2: xr.l2,
                        err_l2: xr.err_l2,
                        scale: f64::from(xr.scale),
                        tiny,
                    };
                    let d = &dots[i * n..(i + 1) * n];
                    // The scan raises its floor span by span: a task's first span keeps every
                    // row it sees, so spans shorter than a block keep fewer.
                    let best = scan::scan(cpu, d, &block.factors(), x, f.floor, start, &mut f.kept);
                    // A row below a lower bound already seen stays below the final one.
                    if best > f.floor {
                        f.floor = best;
                        let floor = f.floor;
                        f.kept.retain(|&(_, h)| f64::from(h) >= floor);
                    }
                    if f.floor > known {
                        shared.raise(f.floor);
                    }
                }
            }
            found
        });
        (0..m)
            .map(|i| {
                xs[i].as_ref()?;
                let floor = parts
                    .iter()
                    .fold(f64::NEG_INFINITY, |f, (_, p)| f.max(p[i].floor));
                Some(
                    parts
                        .iter()
                        .flat_map(|(_, p)| &p[i].kept)
                        .filter(|&&(_, high)| f64::from(high) >= floor)
                        .map(|&(j, _)| j as usize)
                        .collect(),
                )
            })
            .collect()
    }

    /// For each `(i, rows)` of `lists`, the rows among `rows` (increasing) that may hold the
    /// argmax of `x_i · wᵀ` over `rows`, by [`candidates`](Self::candidates)' bound (f32 x, no
    /// rounding of its own), where `x_i` is row `i` of `x` (`[.., k]`): what narrows a batched
    /// screen's candidates for x rows they are too many for. `None` as there (and for a list
    /// past the screen's rows).
    ///
    /// Work goes panel by panel, each panel's centres computed for every x row listing a row in
    /// it while the panel is in cache. A row's levels lie across all of its panel's cache lines,
    /// so narrowing one x row at a time read a whole panel from memory per listed row; a batch's
    /// long lists share most of their panels (at the start of a generation, when the model is
    /// unsure, 128 x rows listing thousands of rows each).
    pub(crate) fn refine_many(
        &self,
        isa: Isa,
        x: &[f32],
        lists: &[(usize, &[usize])],
    ) -> Vec<Option<Vec<usize>>> {
        // Most steps have no long list: then no task is handed to the pool at all.
        if lists.is_empty() {
            return Vec::new();
        }
        let cpu = simd::limit(isa);
        let k = self.k;
        let tiny = self.tiny();
        let xs: Vec<Option<FloatX>> = lists
            .iter()
            .map(|&(i, rows)| {
                let xr = x.get(i.checked_mul(k)?..(i + 1).checked_mul(k)?)?;
                if k == 0 || rows.iter().any(|&r| r >= self.rows) {
                    return None;
                }
                let norms = self.x_norms(xr)?;
                let padded = self.padded_x(xr);
                Some(FloatX { norms, padded })
            })
            .collect();
        let n_panels = self.rows.div_ceil(panel::ROWS);
        // Each task a range of panels: per list, the highest lower bound among its rows there
        // and each of those rows' upper bound, in order.
        let parts = parallel::map_ranges(n_panels, REFINE_MIN_PANELS, 1, REFINE_TASKS, |panels| {
            let first = panels.start * panel::ROWS;
            let mut at: Vec<usize> = lists
                .iter()
                .map(|(_, rows)| rows.partition_point(|&r| r < first))
                .collect();
            let mut found: Vec<(f64, Vec<f64>)> = lists
                .iter()
                .map(|_| (f64::NEG_INFINITY, Vec::new()))
                .collect();
            // The lists with rows in the current panel, their x rows and those rows' count.
            let mut touching: Vec<(usize, usize)> = Vec::new();
            let mut xrows: Vec<&[f32]> = Vec::new();
            let mut dots: Vec<[f32; panel::ROWS]> = Vec::new();
            for p in panels {
                let end_row = (p + 1) * panel::ROWS;
                touching.clear();
                xrows.clear();
                for (t, &(_, rows)) in lists.iter().enumerate() {
                    let Some(xf) = &xs[t] else { continue };
                    // At most a panel's rows: counted, not searched for (this runs for every
                    // list at every panel).
                    let here = rows[at[t]..].iter().take_while(|&&r| r < end_row).count();
                    if here > 0 {
                        touching.push((t, here));
                        xrows.push(&xf.padded);
                    }
                }
                if touching.is_empty() {
                    continue;
                }
                dots.resize(touching.len(), [0.0; panel::ROWS]);
                let panel = self.panel_of(p * panel::ROWS);
                panel::centres_many(cpu, &xrows, panel, &mut dots);
                for (&(t, here), dots) in touching.iter().zip(&dots) {
                    let (Some(xf), (_, rows)) = (&xs[t], lists[t]) else {
                        continue;
                    };
                    let (floor, highs) = &mut found[t];
                    for &r in &rows[at[t]..at[t] + here] {
                        let (low, high) = self.interval(dots[r % panel::ROWS], xf.norms, tiny, r);
                        *floor = floor.max(low);
                        highs.push(high);
                    }
                    at[t] += here;
                }
            }
            found
        });
        lists
            .iter()
            .enumerate()
            .map(|(t, &(_, rows))| {
                xs[t].as_ref()?;
                let floor = parts
                    .iter()
                    .fold(f64::NEG_INFINITY, |f, (_, p)| f.max(p[t].0));
                let highs = parts.iter().flat_map(|(_, p)| &p[t].1);
                Some(
                    rows.iter()
                        .zip(highs)
                        .filter(|&(_, &high)| high >= floor)
                        .map(|(&r, _)| r)
                        .collect(),
                )
            })
            .collect()
    }

    /// x padded with zeros to the panels' row length.
    fn padded_x(&self, x: &[f32]) -> Vec<f32> {
        let mut xp = x.to_vec();
        xp.resize(panel::padded(self.k), 0.0);
        xp
    }

    /// The panel holding row `row`.
    fn panel_of(&self, row: usize) -> &[u8] {
        let size = panel::ROWS * panel::padded(self.k);
        let start = row / panel::ROWS * size;
        &self.q.bytes()[start..start + size]
    }

    /// Whether all sixteen rows of the panel from `first` (inside one block) surely score
    /// below `floor`: each row's f32 overestimate of [`interval`](Self::interval)'s upper end,
    /// `centre + radius` widened by [`UPPER_SLACK`] and [`UPPER_ABSOLUTE`], is below it. A
    /// NaN or infinite bound (a row with a non-finite value) never is. Branch-free over the
    /// sixteen rows, so the compiler keeps it in vectors.
    fn panel_below(
        &self,
        dots: &[f32; panel::ROWS],
        first: usize,
        x: &UpperOne,
        floor: f32,
    ) -> bool {
        let block = &self.blocks[first / BLOCK_ROWS];
        let r = first % BLOCK_ROWS..first % BLOCK_ROWS + panel::ROWS;
        let (scale, max_err) = (&block.scale[r.clone()], &block.max_err[r.clone()]);
        let (l2_err, rounding) = (&block.l2_err[r.clone()], &block.rounding[r]);
        let mut below = true;
        for l in 0..panel::ROWS {
            let centre = dots[l] * scale[l];
            let quantised = (x.abs * max_err[l]).min(x.l2 * l2_err[l]);
            let radius = (quantised + x.abs * rounding[l]) + x.tiny;
            let widen = (centre.abs() + radius) * UPPER_SLACK + UPPER_ABSOLUTE;
            below &= (centre + radius) + widen < floor;
        }
        below
    }

    /// Row `row`'s interval for an f32 x with norms `(Σ |x_i|, ‖x‖₂)`, from `dot`, the f32 sum
    /// `Σ x_i q_i` of its quantised values ([`panel::centres`]).
    fn interval(&self, dot: f32, (x_abs, x_l2): (f64, f64), tiny: f64, row: usize) -> (f64, f64) {
        let block = &self.blocks[row / BLOCK_ROWS];
        let r = row % BLOCK_ROWS;
        let centre = f64::from(dot) * f64::from(block.scale[r]);
        let quantised =
            (x_abs * f64::from(block.max_err[r])).min(x_l2 * f64::from(block.l2_err[r]));
        let radius = (quantised + x_abs * f64::from(block.rounding[r]) + tiny) * (1.0 + 1e-9);
        (centre - radius, centre + radius)
    }

    /// `(Σ |x_i|, ‖x‖₂)`, rounded up (every later use is as an upper bound), or `None` for an
    /// x the bound does not cover: not finite, all zero, or large enough to overflow a sum.
    fn x_norms(&self, x: &[f32]) -> Option<(f64, f64)> {
        if x.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let x_abs = x.iter().map(|v| f64::from(v.abs())).sum::<f64>() * (1.0 + ROUND_UP);
        let x_l2 = x
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt()
            * (1.0 + ROUND_UP);
        // The AVX2 centres sum levels scaled by `CENTRES_HEADROOM` ([`panel::centres`]).
        let scaled = x_abs * f64::from(QMAX) * panel::CENTRES_HEADROOM;
        if x_abs == 0.0
            || x_abs * self.max_abs.max(1.0) >= OVERFLOW_GUARD
            || scaled >= OVERFLOW_GUARD
        {
            return None;
        }
        Some((x_abs, x_l2))
    }

    /// The subnormal half-ulps a dot product of length `k` can lose when products underflow.
    fn tiny(&self) -> f64 {
        2.0 * (self.k + 2 * LANES) as f64 * f64::powi(2.0, -149)
    }

    /// Rows in the screened weight.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }
}

/// An x row's floor shared by the batched screen's tasks: an `f64` held as a `u64` whose order
/// is the float's, so that raising it is one `fetch_max`. Only ever raised.
struct SharedFloor(AtomicU64);

impl Default for SharedFloor {
    fn default() -> SharedFloor {
        SharedFloor(AtomicU64::new(SharedFloor::key(f64::NEG_INFINITY)))
    }
}

impl SharedFloor {
    /// Negative floats (sign bit set) count down as their bits count up, so theirs are all
    /// flipped; the rest only gain the top bit, to sort above them.
    fn key(v: f64) -> u64 {
        let bits = v.to_bits();
        if bits >> 63 == 1 {
            !bits
        } else {
            bits | 1 << 63
        }
    }

    fn get(&self) -> f64 {
        let key = self.0.load(Ordering::Relaxed);
        f64::from_bits(if key >> 63 == 1 {
            key & !(1 << 63)
        } else {
            !key
        })
    }

    /// `v` must not be NaN.
    fn raise(&self, v: f64) {
        self.0.fetch_max(SharedFloor::key(v), Ordering::Relaxed);
    }
}

/// One x row's progress through a task's blocks of the batched screen.
struct Found {
    /// The best lower bound seen.
    floor: f64,
    /// `(row, upper bound)` of every row that reaches `floor`, in increasing order.
    kept: Vec<(u32, f32)>,
}

impl Default for Found {
    fn default() -> Found {
        Found {
            floor: f64::NEG_INFINITY,
            kept: Vec::new(),
        }
    }
}

/// Where [`quantise_block`] puts a block's 8-bit values: one row at a time into `row`, then
/// into the block's `panels`.
struct Levels<'a> {
    row: &'a mut [u8],
    panels: &'a mut [u8],
}

/// One block of rows: each row's scale, 8-bit values and bound factor.
fn quantise_block(
    w: &impl ScreenSource,
    range: Range<usize>,
    g: f64,
    row: &mut [f32],
    out: &mut Levels<'_>,
) -> Block {
    let k = row.len();
    let kp = panel::padded(k);
    let mut block = Block::with_capacity(range.len());
    let cpu = simd::cpu();
    for (local, r) in range.enumerate() {
        w.read_f32(r * k, row);
        let quantised = quantise_row(cpu, row, out.row);
        if quantised.is_none() {
            out.row.fill(0);
        }
        panel::scatter(out.panels, kp, local, out.row);
        let Some(Quantised {
            scale,
            max,
            max_err,
            sq_err,
            sq_sum,
        }) = quantised
        else {
            block.push_wild();
            continue;
        };
        block.scale.push(scale);
        block.max_err.push(up(max_err * (1.0 + ROUND_UP)));
        block.l2_err.push(up(sq_err.sqrt() * (1.0 + ROUND_UP)));
        let rounding = g * (f64::from(QMAX) * f64::from(scale) + f64::from(max));
        block.rounding.push(up(rounding));
        let row_l2 = sq_sum.sqrt() * f64::from(scale) * (1.0 + ROUND_UP);
        block.row_l2.push(up(row_l2));
    }
    // The rows that pad the last panel hold level zero, as the padding of every row does.
    let rows = block.scale.len();
    for local in rows..rows.next_multiple_of(panel::ROWS) {
        panel::scatter(out.panels, kp, local, &[]);
    }
    block.sealed()
}

/// `v` rounded up to an f32 (still an upper bound), as every factor is stored: half the
/// bytes of f64 per row, 4 MiB on Gemma 3's head.
pub(super) fn up(v: f64) -> f32 {
    let f = v as f32;
    if f64::from(f) < v {
        f.next_up()
    } else {
        f
    }
}

/// The largest f32 at most `v` (`-inf` for `-inf`; NaN stays NaN).
pub(super) fn down(v: f64) -> f32 {
    let f = v as f32;
    if f64::from(f) > v {
        f.next_down()
    } else {
        f
    }
}

/// One row's scale and rounding errors.
struct Quantised {
    scale: f32,
    /// Largest magnitude in the row.
    max: f32,
    /// `max |e_i|`.
    max_err: f64,
    /// `Σ e_i²`.
    sq_err: f64,
    /// `Σ q_i²`.
    sq_sum: f64,
}

/// Round `row` to `q · scale`; `None` (and `q` untouched) if it holds a NaN or an infinity.
fn quantise_row(cpu: Cpu, row: &[f32], q: &mut [u8]) -> Option<Quantised> {
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        #[target_feature(enable = "avx2,fma")]
        fn avx2(row: &[f32], q: &mut [u8]) -> Option<Quantised> {
            quantise_row_in(row, q)
        }
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 and FMA were
        // confirmed.
        return unsafe { avx2(row, q) };
    }
    let _ = cpu;
    quantise_row_in(row, q)
}

/// [`quantise_row`]'s body, written to vectorise under whichever features it is inlined into.
#[inline(always)]
fn quantise_row_in(row: &[f32], q: &mut [u8]) -> Option<Quantised> {
    if !row.iter().fold(true, |ok, v| ok & v.is_finite()) {
        return None;
    }
    let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = max / QMAX;
    let (mut max_err, mut sq_err) = (0.0f64, 0.0f64);
    let mut sq_sum = 0.0f64;
    if scale > 0.0 {
        // Any rounding will do: the errors below are measured, not assumed.
        let inv = QMAX / max;
        for (qi, &v) in q.iter_mut().zip(row) {
            let level = (v * inv).round_ties_even().clamp(-QMAX, QMAX);
            *qi = level as i8 as u8;
            sq_sum += f64::from(level) * f64::from(level);
            // Exact in f64: an 8-bit integer times an f32, subtracted from a nearby f32.
            let e = f64::from(v) - f64::from(level) * f64::from(scale);
            max_err = max_err.max(e.abs());
            sq_err += e * e;
        }
    }
    Some(Quantised {
        scale,
        max,
        max_err,
        sq_err,
        sq_sum,
    })
}

#[cfg(test)]
mod tests {
    use super::SharedFloor;

    #[test]
    fn a_shared_floor_orders_its_keys_as_the_floats_and_only_rises() {
        let values = [
            f64::NEG_INFINITY,
            -f64::MAX,
            -1.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            2.5,
            f64::MAX,
            f64::INFINITY,
        ];
        for pair in values.windows(2) {
            assert!(
                SharedFloor::key(pair[0]) < SharedFloor::key(pair[1]),
                "{pair:?}"
            );
        }
        let floor = SharedFloor::default();
        assert_eq!(floor.get(), f64::NEG_INFINITY);
        for (raise, want) in [(-3.0, -3.0), (-7.0, -3.0), (4.25, 4.25), (-0.0, 4.25)] {
            floor.raise(raise);
            assert_eq!(
                floor.get().to_bits(),
                f64::to_bits(want),
                "after raising to {raise}"
            );
        }
    }
}
