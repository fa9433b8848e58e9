//! Block rows decoded into the sixteen-row panels of `linear`'s panel kernel, where a vector
//! holds one inner element of sixteen weight rows.
//!
//! A block decodes to its own row's elements side by side, so a panel made from decoded f32
//! rows needs a transpose of the f32 values: about one shuffle per element, as much work as
//! the decode itself, and at 32 x rows the two together cost as much as the panel's
//! multiply-adds. Here the transpose is done on the integers `q` instead, one byte each, 32 of
//! them to a register: sixteen rows' groups of 32 are transposed by 64 byte unpacks, and each
//! resulting sixteen bytes (one element of the sixteen rows) is widened, converted and scaled
//! with the sixteen rows' factors side by side in one vector. The values are the decoders'
//! (`ds * q`, then less `dm` for the K formats: the same two roundings on the same operands),
//! so the panel holds exactly what decoding each row would give.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256i, _mm256_castsi256_si128, _mm256_cvtepi32_ps, _mm256_cvtepi8_epi32,
    _mm256_extracti128_si256, _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_si256,
    _mm256_storeu_ps, _mm256_sub_ps, _mm256_unpackhi_epi16, _mm256_unpackhi_epi32,
    _mm256_unpackhi_epi64, _mm256_unpackhi_epi8, _mm256_unpacklo_epi16, _mm256_unpacklo_epi32,
    _mm256_unpacklo_epi64, _mm256_unpacklo_epi8, _mm512_cvtepi32_ps, _mm512_cvtepi8_epi32,
    _mm512_loadu_ps, _mm512_mul_ps, _mm512_storeu_ps, _mm512_sub_ps, _mm_srli_si128,
};
use std::ops::Range;

use super::avx2::{by_format, Blocks};
use crate::kernels::dtype::DType;
use crate::kernels::simd;

/// Rows per panel, and inner elements per lane segment.
const ROWS: usize = 16;

/// Rows `rows` (at most 16) of the row-major block-format weight `bytes` (rows of `k`
/// elements) as one panel: inner element `e` of row `rows.start + c` at
/// `panel[(starts[e % 16] + e / 16) * 16 + c]`, zero for `c` past the rows. False (nothing
/// written) for a float dtype. Callers outside this module's features call it only after
/// detecting AVX2, FMA and F16C.
///
/// Panics if `k` is not whole blocks, `bytes` does not hold the rows, or a position falls
/// outside `panel`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn panel_avx2(
    dtype: DType,
    bytes: &[u8],
    k: usize,
    rows: Range<usize>,
    starts: &[usize; ROWS],
    panel: &mut [f32],
) -> bool {
    by_format!(dtype, B => pack::<B, false>(bytes, k, rows, starts, panel), _f => return false);
    true
}

/// [`panel_avx2`] storing sixteen values a vector. Callers outside this module's features call
/// it only after detecting AVX-512F, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn panel_avx512(
    dtype: DType,
    bytes: &[u8],
    k: usize,
    rows: Range<usize>,
    starts: &[usize; ROWS],
    panel: &mut [f32],
) -> bool {
    by_format!(dtype, B => pack::<B, true>(bytes, k, rows, starts, panel), _f => return false);
    true
}

#[inline(always)]
fn pack<B: Blocks, const WIDE: bool>(
    bytes: &[u8],
    k: usize,
    rows: Range<usize>,
    starts: &[usize; ROWS],
    panel: &mut [f32],
) {
    let elems = 32 * B::GROUPS;
    assert!(k.is_multiple_of(elems), "panel rows must be whole blocks");
    assert!(rows.len() <= ROWS, "a panel holds sixteen rows");
    // Every lane has k / 16 elements (k is whole groups of 32), so this bounds every store.
    let last = starts.iter().max().copied().unwrap_or(0) + k / ROWS;
    assert!(
        last * ROWS <= panel.len(),
        "panel shorter than its positions"
    );
    let row_bytes = k / elems * B::BYTES;
    let src = &bytes[rows.start * row_bytes..rows.end * row_bytes];
    let width = rows.len();
    // Rows past `width` read a block of zero bytes with zero factors: their values are zero.
    let zero = [0u8; 256];
    // The next panel's rows, a share per block in address order: this panel's sixteen rows
    // are read a block of each at a time, a pattern the hardware prefetcher did not follow
    // (the loads of the blocks were half of the packing's time at 32 x rows).
    let blocks = k / elems;
    let (ahead, share) = (
        rows.end * row_bytes,
        (ROWS * row_bytes).div_ceil(blocks.max(1)),
    );
    for blk in 0..blocks {
        simd::prefetch(bytes.as_ptr().wrapping_add(ahead + blk * share), share);
        let block = |c: usize| {
            if c < width {
                &src[c * row_bytes + blk * B::BYTES..][..B::BYTES]
            } else {
                &zero[..B::BYTES]
            }
        };
        // A loop, not `array::from_fn`, whose closure was not inlined here.
        let mut shared = [B::prepare(&zero[..B::BYTES]); ROWS];
        for (c, shared) in shared.iter_mut().enumerate().take(width) {
            *shared = B::prepare(block(c));
        }
        for g in 0..B::GROUPS {
            // SAFETY: this function is only inlined into `panel_avx2` and `panel_avx512`, both
            // compiled with AVX2 (and AVX-512F for `WIDE`); so for every `unsafe` below.
            let zeros = unsafe { _mm256_setzero_si256() };
            let mut q = [zeros; ROWS];
            for (c, q) in q.iter_mut().enumerate().take(width) {
                // SAFETY: as above.
                *q = unsafe { B::group_i8(block(c), g) };
            }
            let mut ds = [[0.0f32; ROWS]; 2];
            let mut dm = [[0.0f32; ROWS]; 2];
            for c in 0..width {
                for (h, (s, m)) in B::factors(&shared[c], g).into_iter().enumerate() {
                    ds[h][c] = s;
                    dm[h][c] = m;
                }
            }
            // SAFETY: as above, for AVX2.
            let t = unsafe { transpose(q) };
            let first = (blk * elems + 32 * g) / ROWS;
            for (e, v) in t.iter().enumerate() {
                // SAFETY: as above, for AVX2.
                let halves = unsafe {
                    [
                        _mm256_castsi256_si128(*v),
                        _mm256_extracti128_si256::<1>(*v),
                    ]
                };
                for (h, q) in halves.into_iter().enumerate() {
                    // Element 32 g + 16 h + e of the block: lane e, step `first + h`.
                    let at = (starts[e] + first + h) * ROWS;
                    let dst = &mut panel[at..at + ROWS];
                    // SAFETY: as above; `WIDE` only in `panel_avx512`, compiled with
                    // AVX-512F.
                    unsafe { store::<WIDE>(q, &ds[h], &dm[h], B::AFFINE, dst) };
                }
            }
        }
    }
}

/// Sixteen rows' 32 bytes each into 16 vectors: the low half of vector `e` holds byte `e` of
/// every row (row `c` at byte `c`), the high half byte `16 + e`. Four rounds of unpacks, each
/// interleaving twice as many bytes of two rows (or sets of rows) as the last.
#[target_feature(enable = "avx2")]
fn transpose(r: [__m256i; ROWS]) -> [__m256i; ROWS] {
    // Round 1: rows 2i and 2i + 1 byte by byte; [2i] holds bytes 0-7 of each lane, [2i + 1]
    // bytes 8-15.
    let mut a = [_mm256_setzero_si256(); ROWS];
    for i in 0..ROWS / 2 {
        a[2 * i] = _mm256_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    // Round 2: pairs of rows 4j..4j + 2 and 4j + 2..4j + 4; [4j + q] holds bytes 4q..4q + 4.
    let mut b = [_mm256_setzero_si256(); ROWS];
    for j in 0..ROWS / 4 {
        for half in 0..2 {
            let (x, y) = (a[4 * j + half], a[4 * j + 2 + half]);
            b[4 * j + 2 * half] = _mm256_unpacklo_epi16(x, y);
            b[4 * j + 2 * half + 1] = _mm256_unpackhi_epi16(x, y);
        }
    }
    // Round 3: quads of rows 8i..8i + 4 and 8i + 4..8i + 8; [8i + p] holds bytes 2p, 2p + 1.
    let mut c = [_mm256_setzero_si256(); ROWS];
    for i in 0..2 {
        for q in 0..4 {
            let (x, y) = (b[8 * i + q], b[8 * i + 4 + q]);
            c[8 * i + 2 * q] = _mm256_unpacklo_epi32(x, y);
            c[8 * i + 2 * q + 1] = _mm256_unpackhi_epi32(x, y);
        }
    }
    // Round 4: rows 0-7 and 8-15; [2p] holds byte 2p of all sixteen, [2p + 1] byte 2p + 1.
    let mut out = [_mm256_setzero_si256(); ROWS];
    for p in 0..8 {
        out[2 * p] = _mm256_unpacklo_epi64(c[p], c[8 + p]);
        out[2 * p + 1] = _mm256_unpackhi_epi64(c[p], c[8 + p]);
    }
    out
}

/// Sixteen signed bytes `q` (one per row) as `ds * q`, less `dm` if `affine`, into `dst`.
#[target_feature(enable = "avx2")]
#[inline]
fn store<const WIDE: bool>(
    q: __m128i,
    ds: &[f32; ROWS],
    dm: &[f32; ROWS],
    affine: bool,
    dst: &mut [f32],
) {
    let dst = &mut dst[..ROWS];
    if WIDE {
        // SAFETY: `WIDE` only when the caller has AVX-512F (`panel_avx512`); `ds`, `dm` and
        // `dst` hold 16 f32s each (unaligned loads and store).
        unsafe { store_wide(q, ds, dm, affine, dst) };
        return;
    }
    for (h, q) in [q, _mm_srli_si128::<8>(q)].into_iter().enumerate() {
        // SAFETY: `ds`, `dm` and `dst` hold 16 f32s each, so each 8-wide access at `8 h`
        // (h < 2) is inside them; all unaligned.
        unsafe {
            let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
            let mut f = _mm256_mul_ps(_mm256_loadu_ps(ds.as_ptr().add(8 * h)), v);
            if affine {
                f = _mm256_sub_ps(f, _mm256_loadu_ps(dm.as_ptr().add(8 * h)));
            }
            _mm256_storeu_ps(dst.as_mut_ptr().add(8 * h), f);
        }
    }
}

#[target_feature(enable = "avx512f,avx2")]
#[inline]
fn store_wide(q: __m128i, ds: &[f32; ROWS], dm: &[f32; ROWS], affine: bool, dst: &mut [f32]) {
    let dst = &mut dst[..ROWS];
    // SAFETY: `ds`, `dm` and `dst` hold 16 f32s each (unaligned loads and store).
    unsafe {
        let v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
        let mut f = _mm512_mul_ps(_mm512_loadu_ps(ds.as_ptr()), v);
        if affine {
            f = _mm512_sub_ps(f, _mm512_loadu_ps(dm.as_ptr()));
        }
        _mm512_storeu_ps(dst.as_mut_ptr(), f);
    }
}
