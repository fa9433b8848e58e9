//! Several x rows against stored weight rows on AVX2/FMA: an outer product over packed panels
//! of 16 weight rows, in exactly the per-output order of every other `linear` path.
//!
//! That order ([`simd::dot`]) gives each output 16 lane accumulators: lane `l` adds the
//! products of inner elements `l, l + 16, l + 32, ...` in that order, and the lanes are then
//! summed as a fixed tree. Read lane by lane, an output is 16 independent dot products over
//! interleaved subsequences of the inner dimension ("segments"). Here the x rows are permuted
//! so that every segment is contiguous, each panel of weight rows is transposed so that one
//! inner element's 16 weights (one per output column) are adjacent, and each segment is an
//! ordinary register-blocked outer product: 6 x rows × 16 output columns in 12 accumulator
//! registers, one broadcast x element and two weight vectors per step, that is 8 loads per 12
//! FMAs. The per-output lane layout of [`super::columns`] needs 16 loads per 12 FMAs and is
//! bound by the load ports; this one is bound by the FMA ports. The 16 segment sums of an
//! output are then added in `simd::reduce_lanes`' tree, with the same operands in the same
//! order, so every output keeps its bits.
//!
//! A panel is stored in the same segment order as x, so a tile reads each segment's weights
//! as one sequential stream. Packing it happens once per call and pays for itself from a few x
//! rows up (see [`MIN_ROWS`]): float rows are decoded to f32 and transposed 8 × 8 in
//! registers, about one shuffle per element; block-format rows are transposed as their integer
//! values, one byte each, before they are widened and scaled (`quant/panel.rs`), which made
//! packing about a third of the tiles' time at 32 x rows instead of as much again. When x is
//! larger than L2 (a prefill), a block of panels is packed before the row tiles run, so that x
//! is read once per block instead of once per panel.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256, _mm256_add_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps,
    _mm256_permute2f128_ps, _mm256_setzero_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
    _mm256_unpackhi_ps, _mm256_unpacklo_ps,
};

use super::{ColumnsMut, Rows};
use crate::kernels::parallel;
use crate::kernels::quant;
use crate::kernels::simd::{self, LineAligned, LANES};

/// Weight rows (output columns) per packed panel: two 8-wide vectors.
pub(super) const PANEL: usize = 16;
/// x rows per register tile: 6 × 2 accumulators + 2 weight vectors + 1 broadcast = 15 of the
/// 16 ymm registers.
const TILE_ROWS: usize = 6;
/// x rows per AVX-512 register tile: a panel is one zmm register, so 12 accumulators, one
/// weight vector and a broadcast make 12 FMAs from 13 loads (the AVX2 tile: 12 from 8, each
/// half as wide). Sixteen rows, with or without a software prefetch of the panel and x, ran no
/// faster at 32 rows and slower from 128 (variants alternating call by call in one process,
/// Emerald Rapids, Q5_0).
const WIDE_ROWS: usize = 12;
/// The tile rows the segment sums have room for.
const MAX_ROWS: usize = WIDE_ROWS;
/// Each tile row's sixteen segment sums for each of a panel's sixteen outputs.
type Sums = [[[f32; PANEL]; MAX_ROWS]; LANES];
/// x rows from which this path is taken. Packing costs about one cycle per weight element
/// (decode, transpose, store) against `m / 16` cycles of FMAs, so below this the tile-buffer
/// kernel, which only decodes, is as fast or faster (one thread on an AVX2 EPYC, both kernels
/// alternating in one process, the 270m shapes: 0.7x at 8 rows, 1.0x at 16, 1.1x at 24,
/// 1.45x at 128; docs/performance.md).
pub(super) const MIN_ROWS: usize = 24;
/// Bytes of packed panels a task keeps at a time: a quarter of a 2 MiB L2, so that the x rows
/// of a tile stay beside them. Every panel of a block meets each x row tile in turn, so x is
/// read once per block: a prefill's x (4096 rows x 640 f32 = 10 MiB at batch 32, prompt 128)
/// read once per 16-column panel came from L3 or memory every time.
const BLOCK_BYTES: usize = 512 << 10;
/// Bytes of x up to which one panel at a time is packed (see [`panels_per_block`]).
const X_L2_BYTES: usize = 1 << 20;
/// The longest inner dimension at which a prefill's blocks take their panels in pairs
/// (outside Intel; see [`tile2_avx512`]). 1152, the 1b model's hidden size, pays too: on an
/// AMD EPYC (Zen 5, 2 threads, `kernel_bench`, seven rounds alternating, six of them this way)
/// Q5_0 `[1024, 1152] × [6912, 1152]ᵀ` took 36.0-37.1 ms in pairs against 38.3-41.0 alone, and
/// Q8_0 `[1024, 1152] × [1024, 1152]ᵀ` 5.65-6.45 against 5.85-6.73; at 2048 pairs were slower.
const PAIRED_BLOCK_K: usize = 1152;

/// Where each lane's subsequence of the inner dimension lies once permuted: lane `l` holds
/// elements `l, l + 16, ...`, stored contiguously from [`Segments::start`].
#[derive(Clone, Copy)]
pub(super) struct Segments {
    full: usize,
    rem: usize,
}

impl Segments {
    pub(super) fn new(k: usize) -> Segments {
        Segments {
            full: k / LANES,
            rem: k % LANES,
        }
    }

    fn start(self, l: usize) -> usize {
        l * self.full + l.min(self.rem)
    }

    fn len(self, l: usize) -> usize {
        self.full + usize::from(l < self.rem)
    }
}

/// At most this many x rows are permuted together: one AVX-512 tile's rows, or two AVX2 tiles.
const GROUP: usize = WIDE_ROWS;

/// `n` split into the fewest runs of at most `max` (> 0), as even as possible: `(start, len)`.
/// Thirty-two rows are tiles of 11, 11 and 10, not 12, 12 and 8: a tile of eight rows keeps
/// only eight multiply-adds in flight, too few for two FMA ports of latency 4 (it ran at 0.4-0.5
/// of the FMA peak where twelve ran at 0.6-0.8, one Emerald Rapids core, data in L2).
fn runs(n: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let count = n.div_ceil(max);
    let base = n.checked_div(count).unwrap_or(0);
    let extra = n.checked_rem(count).unwrap_or(0);
    (0..count).map(move |i| (i * base + i.min(extra), base + usize::from(i < extra)))
}

/// x `[m, k]` with each row's inner elements permuted into segments, and the rows in groups
/// ([`runs`] of at most [`GROUP`]) interleaved: row `r` of the group starting at row `i0` (`g`
/// rows wide) has its permuted element `p` at `i0 * k + p * g + r`. A tile's broadcasts at one
/// step then come from one or two cache lines. Rows laid out one after another put the values
/// a step reads `k` floats apart, and at a `k` of 1024 or 2048 all in the same few L1 sets,
/// where they evict each other (AMD EPYC, Zen 4, AVX-512 tile, Q8_0 `[128, k]` against 2048
/// rows: 108 GFLOP/s at k 1024 against 154 at k 1152). Padding the rows apart instead cost a
/// size of allocation of its own, which the allocator kept as well (+15 MiB peak RSS at batch
/// 128).
pub(super) fn permute_rows(x: &[f32], m: usize, k: usize) -> Vec<f32> {
    let seg = Segments::new(k);
    let mut out = vec![0.0f32; m * k];
    if k == 0 {
        return out;
    }
    // Whole groups per task, each writing its own rows of the result.
    let groups: Vec<(usize, usize)> = runs(m, GROUP).collect();
    let tasks = parallel::chunk_count(m * k, PERMUTE_MIN_FLOATS, 1).min(groups.len());
    let mut parts = Vec::with_capacity(tasks);
    let mut rest = out.as_mut_slice();
    for range in parallel::split(groups.len(), tasks, 1) {
        let mine = &groups[range];
        let rows: usize = mine.iter().map(|&(_, g)| g).sum();
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(rows * k);
        rest = tail;
        parts.push((mine, dst));
    }
    parallel::for_each_part(parts, |(mine, dst)| {
        let i0 = mine.first().map_or(0, |&(i, _)| i);
        for &(i, g) in mine {
            let dst = &mut dst[(i - i0) * k..(i - i0 + g) * k];
            permute_group(&x[i * k..(i + g) * k], g, seg, dst);
        }
    });
    out
}

/// Floats of x below which [`permute_rows`] does not split its work.
const PERMUTE_MIN_FLOATS: usize = 1 << 16;

/// One group of `g` x rows (`src`, one row after another) into `dst` in segment order,
/// interleaved. Sixteen elements of each row at a time: each row's cache line is read once
/// and the sixteen places they go to are the same sixteen lines for every row of the group.
/// (Taking one lane's subsequence at a time read every line of the group's rows sixteen
/// times, from L2 once the group was larger than L1.)
fn permute_group(src: &[f32], g: usize, seg: Segments, dst: &mut [f32]) {
    let k = src.len() / g.max(1);
    let starts: [usize; LANES] = std::array::from_fn(|l| seg.start(l));
    for t in 0..k.div_ceil(LANES) {
        let lanes = LANES.min(k - t * LANES);
        for r in 0..g {
            let from = &src[r * k + t * LANES..][..lanes];
            for (l, &v) in from.iter().enumerate() {
                dst[(starts[l] + t) * g + r] = v;
            }
        }
    }
}

/// Outputs `[m, out.cols()]` from x rows already permuted (`xp`, [`permute_rows`]). Callers
/// outside this module's features call it only after detecting AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn columns_avx2<S: Rows>(
    xp: &[f32],
    m: usize,
    k: usize,
    w: &S,
    out: &mut ColumnsMut<'_>,
) {
    columns::<S, false>(xp, m, k, w, out);
}

/// [`columns_avx2`] with the AVX-512 tile: the same sums of the same products in the same
/// order. Callers outside this module's features call it only after detecting AVX-512F as
/// well as AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(super) fn columns_avx512<S: Rows>(
    xp: &[f32],
    m: usize,
    k: usize,
    w: &S,
    out: &mut ColumnsMut<'_>,
) {
    columns::<S, true>(xp, m, k, w, out);
}

/// The body of both: `WIDE` picks the AVX-512 tile, and is true only in [`columns_avx512`].
#[inline(always)]
fn columns<S: Rows, const WIDE: bool>(
    xp: &[f32],
    m: usize,
    k: usize,
    w: &S,
    out: &mut ColumnsMut<'_>,
) {
    assert!(xp.len() >= m * k, "permuted x shorter than [m, k]");
    let seg = Segments::new(k);
    let cols = out.cols();
    let groups: Vec<(usize, usize)> = runs(m, GROUP).collect();
    let passes = row_passes(&groups, m, k);
    let widest = passes.iter().map(|p| p.iter().map(|&(_, g)| g).sum()).max();
    // While x fits in L2 (a decode step) the AVX-512 tiles take two panels at a time. A
    // prefill's blocks of panels do too outside Intel while a panel is at most 72 KiB (k up
    // to 1152; see `tile2_avx512` and `PAIRED_BLOCK_K`); at k = 2048 they keep one.
    let block = panels_per_block(widest.unwrap_or(0), k);
    let pairs = WIDE && (block == 1 || (k <= PAIRED_BLOCK_K && !simd::intel()));
    let per_block = if block == 1 && pairs { 2 } else { block };
    // One spare cache line between panels: at k = 2048 a panel is 128 KiB, and panels that far
    // apart would share L2's sets.
    let stride = k * PANEL + PANEL;
    // Each panel starts on a cache line (`stride` is a whole number of lines): at the offsets
    // the heap's 16-byte alignment allows, every 64-byte load and store of a panel straddled
    // two. Aligned, alternated call by call in one process (Emerald Rapids, one thread, Q5_0),
    // 32 rows of k = 640 and 1152 ran 17-22 % faster and 128 rows 9 %.
    let mut buf = LineAligned::zeroed(per_block.min(cols.len().div_ceil(PANEL)) * stride);
    let panels = buf.as_mut_slice();
    let mut sums: Sums = [[[0.0; PANEL]; MAX_ROWS]; LANES];
    let mut sums2: Sums = [[[0.0; PANEL]; MAX_ROWS]; LANES];
    let step = if WIDE { WIDE_ROWS } else { TILE_ROWS };
    // Each pass of x rows meets every block of panels in turn.
    let starts = (cols.start..cols.end).step_by(per_block * PANEL);
    let blocks = passes
        .iter()
        .flat_map(|&pass| starts.clone().map(move |b0| (pass, b0)));
    for (pass, b0) in blocks {
        // A block of panels packed first, then every row tile against each of them: x passes
        // once per block rather than once per panel.
        let b1 = (b0 + per_block * PANEL).min(cols.end);
        for (p, panel) in panels.chunks_exact_mut(stride).enumerate() {
            let j0 = b0 + p * PANEL;
            if j0 < b1 {
                let panel = &mut panel[..k * PANEL];
                // SAFETY: both callers enable the features `pack_panel` is compiled for, and
                // `WIDE` only in `columns_avx512`, entered only after AVX-512F was detected.
                unsafe { pack_panel::<S, WIDE>(w, j0, PANEL.min(b1 - j0), panel) };
            }
        }
        for &(i0, g) in pass {
            let x = &xp[i0 * k..(i0 + g) * k];
            for (r0, rows) in runs(g, step) {
                let i = i0 + r0;
                let count = (b1 - b0).div_ceil(PANEL);
                let mut p = 0;
                while p < count {
                    let j0 = b0 + p * PANEL;
                    let panel = &panels[p * stride..][..k * PANEL];
                    if pairs && p + 1 < count {
                        let next = &panels[(p + 1) * stride..][..k * PANEL];
                        macro_rules! pair {
                            ($($r:literal)*) => {
                                match rows {
                                    $($r => {
                                        // SAFETY: `WIDE` only in `columns_avx512`, entered
                                        // only after AVX-512F was detected.
                                        unsafe { tile2_avx512::<$r>(x, k, (g, r0), [panel, next], seg, &mut sums, &mut sums2) }
                                    })*
                                    _ => unreachable!("tile rows"),
                                }
                            };
                        }
                        pair!(1 2 3 4 5 6 7 8 9 10 11 12);
                        // SAFETY: both callers enable AVX2.
                        unsafe {
                            store_rows(&sums, &mut *out, (i, rows), j0, b1);
                            store_rows(&sums2, &mut *out, (i, rows), j0 + PANEL, b1);
                        }
                        p += 2;
                        continue;
                    }
                    if WIDE {
                        macro_rules! wide {
                            ($($r:literal)*) => {
                                match rows {
                                    $($r => {
                                        // SAFETY: `WIDE` only in `columns_avx512`, entered
                                        // only after AVX-512F was detected.
                                        unsafe { tile_avx512::<$r>(x, k, (g, r0), panel, seg, &mut sums) }
                                    })*
                                    _ => unreachable!("tile rows"),
                                }
                            };
                        }
                        wide!(1 2 3 4 5 6 7 8 9 10 11 12);
                    } else {
                        // SAFETY: both callers enable AVX2 and FMA.
                        unsafe {
                            match rows {
                                6 => tile::<6>(x, k, (g, r0), panel, seg, &mut sums),
                                5 => tile::<5>(x, k, (g, r0), panel, seg, &mut sums),
                                4 => tile::<4>(x, k, (g, r0), panel, seg, &mut sums),
                                3 => tile::<3>(x, k, (g, r0), panel, seg, &mut sums),
                                2 => tile::<2>(x, k, (g, r0), panel, seg, &mut sums),
                                _ => tile::<1>(x, k, (g, r0), panel, seg, &mut sums),
                            }
                        }
                    }
                    // SAFETY: both callers enable AVX2.
                    unsafe { store_rows(&sums, &mut *out, (i, rows), j0, b1) };
                    p += 1;
                }
            }
        }
    }
}

/// Rows `i..i + rows` of the outputs of the panel at column `j0` (of a block ending at `b1`)
/// from their segment sums.
#[target_feature(enable = "avx2")]
fn store_rows(
    sums: &Sums,
    out: &mut ColumnsMut<'_>,
    (i, rows): (usize, usize),
    j0: usize,
    b1: usize,
) {
    let width = PANEL.min(b1 - j0);
    let at = j0 - out.cols().start;
    for r in 0..rows {
        let dst = &mut out.row(i + r)[at..at + width];
        // A whole panel's outputs are stored straight from the registers (a copy of 64 bytes
        // through `memcpy` cost 5 % of a prefill).
        if let Ok(whole) = <&mut [f32; PANEL]>::try_from(&mut *dst) {
            reduce(sums, r, whole);
            continue;
        }
        let mut reduced = [0.0f32; PANEL];
        reduce(sums, r, &mut reduced);
        dst.copy_from_slice(&reduced[..width]);
    }
}

/// [`tile_avx512`] against two panels at once: each broadcast x value feeds two weight vectors,
/// 24 FMAs from 14 loads. Alternated call by call with one panel at a time (Emerald Rapids, 2
/// threads, Q5_0): 7-11 % faster at 32 and 128 rows of k = 640 and 1152, within the noise at
/// k = 2048, 6 % slower at 1024 rows (a prefill's blocks of panels, where Intel does not use
/// it). On an AMD EPYC (Zen 5, 2 threads, `kernel_bench`, three rounds alternating) it is
/// 6-13 % faster there too at k = 640 and 1024 (4096 rows: Q5_0 `[2048, 640]` 27.6-29.0 →
/// 25.6-26.2 ms, `[1024, 640]` 15.3-16.4 → 13.4-14.1 ms; Q4_K `[640, 1024]` 15.1-16.7 →
/// 13.9-15.2 ms; 512 rows 1.89-1.92 → 1.70-1.73 ms) and 3-15 % slower at k = 2048.
#[target_feature(enable = "avx512f")]
fn tile2_avx512<const R: usize>(
    x: &[f32],
    k: usize,
    (g, r0): (usize, usize),
    panels: [&[f32]; 2],
    seg: Segments,
    sums: &mut Sums,
    sums2: &mut Sums,
) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };
    assert!(R <= WIDE_ROWS && r0 + R <= g && x.len() >= g * k);
    assert!(panels[0].len() >= k * PANEL && panels[1].len() >= k * PANEL);
    let xp = x.as_ptr();
    let (wa, wb) = (panels[0].as_ptr(), panels[1].as_ptr());
    for (l, (sa, sb)) in sums.iter_mut().zip(sums2.iter_mut()).enumerate() {
        let (s, len) = (seg.start(l), seg.len(l));
        // SAFETY: as in `tile_avx512`, for both panels.
        unsafe {
            let mut acc: [[__m512; 2]; R] = [[_mm512_setzero_ps(); 2]; R];
            let mut at = xp.add(s * g + r0);
            for t in 0..len {
                let va = _mm512_loadu_ps(wa.add((s + t) * PANEL));
                let vb = _mm512_loadu_ps(wb.add((s + t) * PANEL));
                let xt = at;
                at = at.add(g);
                for (r, a) in acc.iter_mut().enumerate() {
                    let xb = _mm512_set1_ps(*xt.add(r));
                    a[0] = _mm512_fmadd_ps(xb, va, a[0]);
                    a[1] = _mm512_fmadd_ps(xb, vb, a[1]);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(sa[r].as_mut_ptr(), a[0]);
                _mm512_storeu_ps(sb[r].as_mut_ptr(), a[1]);
            }
        }
    }
}

/// The x rows of each pass over the panels, as runs of [`permute_rows`]' groups: all of them in
/// one pass, or, when x is larger than [`X_PASS_BYTES`] and a block holds fewer than
/// [`FEW_PANELS`] panels (so that all of x would be read again from memory for every one or
/// two panels), passes of at most that many bytes of x (at least one group each), each of them
/// packing the panels anew.
fn row_passes(groups: &[(usize, usize)], m: usize, k: usize) -> Vec<&[(usize, usize)]> {
    let row_bytes = k * std::mem::size_of::<f32>();
    if m * row_bytes <= X_PASS_BYTES || panels_per_block(m, k) >= FEW_PANELS {
        return vec![groups];
    }
    let most = (X_PASS_BYTES / row_bytes).max(1);
    let mut passes = Vec::new();
    let mut rest = groups;
    while !rest.is_empty() {
        let (mut n, mut rows) = (1, rest[0].1);
        while n < rest.len() && rows + rest[n].1 <= most {
            rows += rest[n].1;
            n += 1;
        }
        let (pass, tail) = rest.split_at(n);
        passes.push(pass);
        rest = tail;
    }
    passes
}

/// Bytes of x a pass over the panels takes at most where a block holds few panels (see
/// [`row_passes`]). Gemma 3 27b's down projection at 512 x rows (k = 21504: a panel is 1.3
/// MiB, one a block) read its 44 MiB x from memory once per panel. On an AMD EPYC (Zen 3, 512
/// KiB L2 a core, 32 MiB L3; `kernel_bench 1`, two rounds), Q4_K `[512, 21504] × [5376,
/// 21504]ᵀ` ran at 51-55 GFLOP/s in one pass, 64-67 in passes of 4 MiB, 71-75 of 6, 75-80 of
/// 8 and 61-75 of 12; the gate projection (`[512, 5376] × [21504, 5376]ᵀ`, 11 MiB of x) at
/// 75-78 in one pass and 83-87 in passes of 8 MiB.
const X_PASS_BYTES: usize = 8 << 20;
/// Panels a block holds from which x is read whole in one pass: a block of eight panels at k =
/// 2048 reads x once per eight, and there passes of 8 MiB (repacking the panels for each) were
/// no faster (Zen 3, 2 threads, Q4_K `[4096, 2048] × [640, 2048]ᵀ`, x 32 MiB: 121-142 GFLOP/s
/// against 128-143 in one pass).
const FEW_PANELS: usize = 4;

/// Panels packed together for `m` x rows of inner length `k`: one while x fits beside them in
/// L2 (there a block gains nothing and measured a few percent slower at k = 2048), else as many
/// as fit [`BLOCK_BYTES`], or twice that for an x past [`X_BEYOND_L3_BYTES`] outside Intel.
fn panels_per_block(m: usize, k: usize) -> usize {
    let floats = std::mem::size_of::<f32>();
    let x_bytes = m * k * floats;
    if x_bytes <= X_L2_BYTES {
        return 1;
    }
    let block = if x_bytes > X_BEYOND_L3_BYTES && !simd::intel() {
        2 * BLOCK_BYTES
    } else {
        BLOCK_BYTES
    };
    (block / (k * PANEL * floats).max(1)).max(1)
}

/// Bytes of x past which, outside Intel, blocks hold twice [`BLOCK_BYTES`] of panels: x then
/// comes from memory at every pass, and halving the passes paid for panels that no longer all
/// stay in L2. On an AMD EPYC (Zen 5, 1 MiB L2 a core, 32 MiB L3; `kernel_bench 2`, three
/// rounds alternating), Q4_K `[4096, 2048] × [640, 2048]ᵀ` (x 32 MiB) took 33.7-34.6 ms in
/// blocks of 1 MiB against 40.7-45.2 in blocks of 512 KiB (earlier rounds: 34.2-40.8 against
/// 41.0-45.9, and 42.3-43.1 with x taken in 4 MiB chunks instead); at k 640 and 1024 (x 10 and
/// 16 MiB) the two block sizes were level.
const X_BEYOND_L3_BYTES: usize = 16 << 20;

/// Weight rows `j0..j0 + width` as a panel in segment order: row `j0 + c`'s inner element
/// `16 t + l` at `(seg.start(l) + t) * PANEL + c`, the order [`permute_rows`] gives x, so a
/// tile reads each segment's weights as one sequential stream; rows past `width` are zero.
/// Block formats are packed from their integers (`quant::panel_avx2`, `quant::panel_avx512`:
/// `WIDE` picks the second, the caller has detected AVX-512F then); float rows are loaded
/// eight values at a time and transposed 8 × 8 in registers.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_panel<S: Rows, const WIDE: bool>(w: &S, j0: usize, width: usize, panel: &mut [f32]) {
    let k = panel.len() / PANEL;
    let seg = Segments::new(k);
    if let Some((bytes, dtype)) = w.raw().filter(|(_, d)| d.is_quantized()) {
        let starts: [usize; LANES] = std::array::from_fn(|l| seg.start(l));
        let rows = j0..j0 + width;
        let packed = if WIDE {
            // SAFETY: `WIDE` only after AVX-512F was detected (this function's contract).
            unsafe { quant::panel_avx512(dtype, bytes, k, rows, &starts, panel) }
        } else {
            quant::panel_avx2(dtype, bytes, k, rows, &starts, panel)
        };
        assert!(packed, "a block format packs from its blocks");
        return;
    }
    let blocks = k / LANES;
    for t in 0..blocks {
        for c0 in [0, 8] {
            for l0 in [0, 8] {
                let rows: [__m256; 8] = std::array::from_fn(|r| {
                    let c = c0 + r;
                    if c < width {
                        // SAFETY: this function's features include those `load8_avx2` needs.
                        unsafe { w.load8_avx2((j0 + c) * k + t * LANES + l0) }
                    } else {
                        _mm256_setzero_ps()
                    }
                });
                for (dl, v) in transpose8(rows).into_iter().enumerate() {
                    let at = (seg.start(l0 + dl) + t) * PANEL + c0;
                    let dst = &mut panel[at..][..8];
                    // SAFETY: `dst` holds exactly 8 f32s (one unaligned store).
                    unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), v) };
                }
            }
        }
    }
    let tail = k - blocks * LANES;
    if tail > 0 {
        let mut buf = [0.0f32; LANES];
        for c in 0..PANEL {
            let buf = &mut buf[..tail];
            if c < width {
                w.decode((j0 + c) * k + blocks * LANES, buf);
            } else {
                buf.fill(0.0);
            }
            for (l, v) in buf.iter().enumerate() {
                panel[(seg.start(l) + blocks) * PANEL + c] = *v;
            }
        }
    }
}

/// The 8 × 8 transpose: element `c` of result `r` is element `r` of row `c`.
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let q0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let q1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let q2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let q3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let q4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let q5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let q6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let q7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(q0, q4),
        _mm256_permute2f128_ps::<0x20>(q1, q5),
        _mm256_permute2f128_ps::<0x20>(q2, q6),
        _mm256_permute2f128_ps::<0x20>(q3, q7),
        _mm256_permute2f128_ps::<0x31>(q0, q4),
        _mm256_permute2f128_ps::<0x31>(q1, q5),
        _mm256_permute2f128_ps::<0x31>(q2, q6),
        _mm256_permute2f128_ps::<0x31>(q3, q7),
    ]
}

/// `R` permuted x rows, rows `r0..r0 + R` of the `g` rows interleaved in `x` (`[k, g]`, see
/// [`permute_rows`]), against one panel: `sums[l][r]` = segment `l` of row `r0 + r`'s dot
/// with each of the panel's 16 rows, accumulated in inner order from zero.
#[target_feature(enable = "avx2,fma")]
fn tile<const R: usize>(
    x: &[f32],
    k: usize,
    (g, r0): (usize, usize),
    panel: &[f32],
    seg: Segments,
    sums: &mut Sums,
) {
    assert!(R <= TILE_ROWS && r0 + R <= g && x.len() >= g * k && panel.len() >= k * PANEL);
    let xp = x.as_ptr();
    let wp = panel.as_ptr();
    for (l, sum) in sums.iter_mut().enumerate() {
        let (s, len) = (seg.start(l), seg.len(l));
        // SAFETY: segment `l` lies at `s..s + len` with `s + len <= k` (the segments tile
        // `0..k`), so every x read `(s + t) * g + r0 + r` is below `k * g <= x.len()` (`r0 + r <
        // g`) and every panel read `(s + t) * PANEL + 0..16` below `k * PANEL <= panel.len()`
        // (asserted above); the stores go to `sum[r]`, 16 f32s for `r < R <= TILE_ROWS`. All
        // unaligned.
        unsafe {
            let mut acc: [[__m256; 2]; R] = [[_mm256_setzero_ps(); 2]; R];
            for t in 0..len {
                let at = (s + t) * PANEL;
                let w0 = _mm256_loadu_ps(wp.add(at));
                let w1 = _mm256_loadu_ps(wp.add(at + 8));
                for (r, a) in acc.iter_mut().enumerate() {
                    let xb = _mm256_broadcast_ss(&*xp.add((s + t) * g + r0 + r));
                    a[0] = _mm256_fmadd_ps(xb, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(xb, w1, a[1]);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(sum[r].as_mut_ptr(), a[0]);
                _mm256_storeu_ps(sum[r].as_mut_ptr().add(8), a[1]);
            }
        }
    }
}

/// [`tile`] on AVX-512: up to [`WIDE_ROWS`] x rows, each row's 16 outputs in one register.
#[target_feature(enable = "avx512f")]
fn tile_avx512<const R: usize>(
    x: &[f32],
    k: usize,
    (g, r0): (usize, usize),
    panel: &[f32],
    seg: Segments,
    sums: &mut Sums,
) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };
    assert!(R <= WIDE_ROWS && r0 + R <= g && x.len() >= g * k && panel.len() >= k * PANEL);
    let xp = x.as_ptr();
    let wp = panel.as_ptr();
    for (l, sum) in sums.iter_mut().enumerate() {
        let (s, len) = (seg.start(l), seg.len(l));
        // SAFETY: as in `tile`: every x read `(s + t) * g + r0 + r` is below `k * g`,
        // every panel read `(s + t) * PANEL + 0..16` below `k * PANEL <= panel.len()`
        // (asserted above), and the stores go to `sum[r]`, 16 f32s for `r < R <= MAX_ROWS`.
        unsafe {
            let mut acc: [__m512; R] = [_mm512_setzero_ps(); R];
            let mut at = xp.add(s * g + r0);
            for t in 0..len {
                let wv = _mm512_loadu_ps(wp.add((s + t) * PANEL));
                let xt = at;
                at = at.add(g);
                for (r, a) in acc.iter_mut().enumerate() {
                    let xb = _mm512_set1_ps(*xt.add(r));
                    *a = _mm512_fmadd_ps(xb, wv, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(sum[r].as_mut_ptr(), *a);
            }
        }
    }
}

/// Row `r`'s 16 segment sums added as `simd::reduce_lanes` adds lanes (`a[i] + a[i + h]` for
/// `h` = 8, 4, 2, 1), for the panel's 16 outputs at once.
#[target_feature(enable = "avx2")]
fn reduce(sums: &Sums, r: usize, out: &mut [f32; PANEL]) {
    for h in [0, 8] {
        // SAFETY: every `sums[l][r][h..h + 8]` and `out[h..h + 8]` is 8 f32s inside its array
        // (`h <= 8`, arrays 16 long); unaligned loads and stores.
        unsafe {
            // A loop, not `array::from_fn`: its closure would be compiled without AVX2 and
            // called once per lane.
            let mut a = [_mm256_setzero_ps(); LANES];
            for (a, sum) in a.iter_mut().zip(sums) {
                *a = _mm256_loadu_ps(sum[r].as_ptr().add(h));
            }
            let mut half = LANES / 2;
            while half > 0 {
                for i in 0..half {
                    a[i] = _mm256_add_ps(a[i], a[i + half]);
                }
                half /= 2;
            }
            _mm256_storeu_ps(out.as_mut_ptr().add(h), a[0]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{row_passes, runs, GROUP, X_PASS_BYTES};

    #[test]
    fn row_passes_take_whole_groups_in_order_within_their_bytes() {
        // k = 21504 (one panel a block): a pass holds at most 97 rows, so whole groups of up to
        // twelve make passes of 96 or fewer. k = 2048 (eight panels a block at 32 MiB of x) and
        // an x of at most 8 MiB stay one pass.
        for (m, k, many) in [(512, 21504, true), (7, 21504, false), (4096, 2048, false)] {
            let groups: Vec<(usize, usize)> = runs(m, GROUP).collect();
            let passes = row_passes(&groups, m, k);
            assert_eq!(
                passes.len() > 1,
                many,
                "m={m} k={k}: {} passes",
                passes.len()
            );
            let joined: Vec<(usize, usize)> = passes.iter().flat_map(|p| p.to_vec()).collect();
            assert_eq!(joined, groups, "m={m} k={k}: every group once, in order");
            for pass in &passes {
                let rows: usize = pass.iter().map(|&(_, g)| g).sum();
                let within = rows * k * 4 <= X_PASS_BYTES;
                assert!(
                    !pass.is_empty() && (within || !many),
                    "m={m} k={k}: {rows} rows"
                );
            }
        }
    }

    #[test]
    fn runs_cover_every_row_once_in_the_fewest_even_tiles() {
        for max in 1..20 {
            for n in 0..100 {
                let got: Vec<(usize, usize)> = runs(n, max).collect();
                assert_eq!(got.len(), n.div_ceil(max), "{n} rows, tiles of {max}");
                let mut next = 0;
                for &(start, len) in &got {
                    assert_eq!(start, next, "{n} rows, tiles of {max}: contiguous");
                    assert!(len >= 1 && len <= max, "{n} rows, tiles of {max}: {len}");
                    next += len;
                }
                assert_eq!(next, n, "{n} rows, tiles of {max}: all rows");
                let lens = got.iter().map(|r| r.1);
                let spread = lens.clone().max().unwrap_or(0) - lens.min().unwrap_or(0);
                assert!(spread <= 1, "{n} rows, tiles of {max}: uneven {got:?}");
            }
        }
    }
}
