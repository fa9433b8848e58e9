//! Exact `argmax(x · wᵀ)` for one row of x, reading an 8-bit copy of `w` instead of all of it.
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
#![allow(unsafe_code)]

use std::ops::Range;
use std::sync::Mutex;

use super::parallel;
use super::simd::{self, Cpu, Isa, LANES};

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

/// How far ahead of its loads a screened dot product prefetches: past the row's end, the next
/// rows of the block.
const PREFETCH_BYTES: usize = 2048;

/// Magnitude of a quantised weight.
const QMAX: f32 = 127.0;

/// Relative margin for sums and square roots taken in f64 (at most ~`k` 2⁻⁵³ off).
const ROUND_UP: f64 = 1e-10;

/// Above this `Σ |x_i| · max |w|` a screened or exact sum could overflow f32; skip the screen.
const OVERFLOW_GUARD: f64 = 1e36;

/// An 8-bit copy of a `[n, k]` weight with per-row error bounds (see the module doc).
pub(crate) struct Screen {
    rows: usize,
    k: usize,
    /// `rows × k` quantised values (as `i8` bits).
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

/// One block's per-row scales and bound factors.
struct Block {
    scale: Vec<f32>,
    /// Per row, the bound's factors: `max |e_i|`, `‖e‖₂` and the rounding term, each to be
    /// multiplied by a norm of x; `+inf` for a row with a non-finite value.
    slack: Vec<Slack>,
}

#[derive(Clone, Copy)]
struct Slack {
    max_err: f64,
    l2_err: f64,
    rounding: f64,
}

impl Block {
    /// A block whose rows are all scored exactly.
    fn wild(rows: usize) -> Block {
        Block {
            scale: vec![0.0; rows],
            slack: vec![Slack::WILD; rows],
        }
    }
}

impl Slack {
    const WILD: Slack = Slack {
        max_err: f64::INFINITY,
        l2_err: f64::INFINITY,
        rounding: f64::INFINITY,
    };
}

/// `γ` for dot products of length `k`, with room for the lane reduction's extra additions.
fn gamma(k: usize) -> f64 {
    let nu = (k + 2 * LANES) as f64 * f64::powi(2.0, -24);
    nu / (1.0 - nu)
}

impl Screen {
    /// Bytes per row besides the quantised values: its scale and bound factors.
    pub(crate) const ROW_BYTES: usize = std::mem::size_of::<f32>() + std::mem::size_of::<Slack>();

    /// Quantise `w` (`[n, k]`), a block of rows per task. After each block is read, its bytes
    /// are handed back to the operating system ([`ScreenSource::release`]): from then on only
    /// the rows the screen keeps are read at full width.
    pub(crate) fn build(w: &impl ScreenSource) -> Screen {
        let (rows, k) = w.rows_and_k();
        let g = gamma(k);
        let n_blocks = rows.div_ceil(BLOCK_ROWS);
        let mut q = Storage::new(rows * k);
        // Each task locks only its own blocks' values, so the locks are never contended.
        let cells: Vec<Mutex<&mut [u8]>> = q
            .bytes_mut()
            .chunks_mut((BLOCK_ROWS * k).max(1))
            .map(Mutex::new)
            .collect();
        let parts = parallel::map_ranges(n_blocks, 1, 1, 1, |blocks| {
            let mut row = vec![0.0f32; k];
            blocks
                .map(|b| {
                    let range = b * BLOCK_ROWS..((b + 1) * BLOCK_ROWS).min(rows);
                    let block = match cells.get(b).map(|c| c.lock()) {
                        Some(Ok(mut values)) => {
                            quantise_block(w, range.clone(), g, &mut row, &mut values)
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
        let cpu = simd::limit(isa);
        if x.len() != self.k || x.iter().any(|v| !v.is_finite()) {
            return None;
        }
        // Rounded up: every later use is as an upper bound.
        let x_abs = x.iter().map(|v| f64::from(v.abs())).sum::<f64>() * (1.0 + ROUND_UP);
        let x_l2 = x
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt()
            * (1.0 + ROUND_UP);
        if x_abs == 0.0 || x_abs * self.max_abs.max(1.0) >= OVERFLOW_GUARD {
            return None;
        }
        let tiny = 2.0 * (self.k + 2 * LANES) as f64 * f64::powi(2.0, -149);
        let parts = parallel::map_ranges(self.blocks.len(), 1, 1, 1, |blocks| {
            let mut floor = f64::NEG_INFINITY;
            let mut kept: Vec<(usize, f64)> = Vec::new();
            for b in blocks {
                let block = &self.blocks[b];
                let values = self.q.bytes().chunks(self.k.max(1)).skip(b * BLOCK_ROWS);
                for (r, ((&s, &slack), q)) in
                    block.scale.iter().zip(&block.slack).zip(values).enumerate()
                {
                    let centre = f64::from(dot_i8(cpu, x, q)) * f64::from(s);
                    let quantised = (x_abs * slack.max_err).min(x_l2 * slack.l2_err);
                    let radius = (quantised + x_abs * slack.rounding + tiny) * (1.0 + 1e-9);
                    let (low, high) = (centre - radius, centre + radius);
                    // A row below a lower bound already seen stays below the final one.
                    if high >= floor {
                        kept.push((b * BLOCK_ROWS + r, high));
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

    /// Rows in the screened weight.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }
}

/// One block of rows: each row's scale, 8-bit values and bound factor.
fn quantise_block(
    w: &impl ScreenSource,
    range: Range<usize>,
    g: f64,
    row: &mut [f32],
    values: &mut [u8],
) -> Block {
    let k = row.len();
    let mut block = Block {
        scale: Vec::with_capacity(range.len()),
        slack: Vec::with_capacity(range.len()),
    };
    let cpu = simd::cpu();
    for (r, q) in range.zip(values.chunks_exact_mut(k)) {
        w.read_f32(r * k, row);
        let Some(Quantised {
            scale,
            max,
            max_err,
            sq_err,
        }) = quantise_row(cpu, row, q)
        else {
            block.scale.push(0.0);
            block.slack.push(Slack::WILD);
            continue;
        };
        block.scale.push(scale);
        block.slack.push(Slack {
            max_err: max_err * (1.0 + ROUND_UP),
            l2_err: sq_err.sqrt() * (1.0 + ROUND_UP),
            rounding: g * (f64::from(QMAX) * f64::from(scale) + f64::from(max)),
        });
    }
    block
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
    if scale > 0.0 {
        // Any rounding will do: the errors below are measured, not assumed.
        let inv = QMAX / max;
        for (qi, &v) in q.iter_mut().zip(row) {
            let level = (v * inv).round_ties_even().clamp(-QMAX, QMAX);
            *qi = level as i8 as u8;
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
    })
}

/// `Σ x_i q_i` in f32 (any order is covered by the bound).
fn dot_i8(cpu: Cpu, x: &[f32], q: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 and FMA were
        // confirmed.
        return unsafe { dot_i8_avx2(x, q) };
    }
    let _ = cpu;
    x.iter()
        .zip(q)
        .fold(0.0f32, |a, (&x, &q)| x.mul_add(f32::from(q as i8), a))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_i8_avx2(x: &[f32], q: &[u8]) -> f32 {
    use std::arch::x86_64::{
        __m128i, _mm256_add_ps, _mm256_cvtepi32_ps, _mm256_cvtepi8_epi32, _mm256_fmadd_ps,
        _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps, _mm_loadu_si128, _mm_prefetch,
        _mm_srli_si128, _MM_HINT_T0,
    };
    // Four accumulators, 32 elements a step: one row is one sequential stream, and the
    // multiply-add latency, not the loads, would otherwise bound it.
    const STEP: usize = 2 * LANES;
    let k = x.len().min(q.len());
    let full = k - k % STEP;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut kk = 0;
    while kk < full {
        // The rows of a block are contiguous: fetch ahead into the next ones.
        _mm_prefetch::<_MM_HINT_T0>(q.as_ptr().wrapping_add(kk + PREFETCH_BYTES).cast());
        for h in 0..2 {
            // SAFETY: reads elements `kk + 16h .. kk + 16h + 16`, below `full <= k`, inside
            // both slices; the function requires AVX2 and FMA.
            unsafe {
                let at = kk + h * LANES;
                let raw = _mm_loadu_si128(q.as_ptr().add(at).cast::<__m128i>());
                let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
                let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(raw)));
                let xp = x.as_ptr().add(at);
                acc[2 * h] = _mm256_fmadd_ps(_mm256_loadu_ps(xp), lo, acc[2 * h]);
                acc[2 * h + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), hi, acc[2 * h + 1]);
            }
        }
        kk += STEP;
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: `lanes` holds 16 f32s.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(acc[0], acc[2]));
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), _mm256_add_ps(acc[1], acc[3]));
    }
    let mut sum = simd::reduce_lanes(&lanes);
    for i in full..k {
        sum = x[i].mul_add(f32::from(q[i] as i8), sum);
    }
    sum
}
