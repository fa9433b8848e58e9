//! The block decoders on AVX-512, sixteen values per vector, and the kernel that multiplies one
//! x row by blocks decoded straight into those registers (several rows go through
//! [`super::strip`], which decodes with these).
//!
//! At batch 1 (and a few rows) a step on quantized weights is bound by decoding, not by
//! memory: on an AVX-512 Xeon the AVX2 decoders feed `linear` at 6 GB/s of Q5_0 blocks out of
//! 14-20 GB/s read bandwidth. A decoded group of 32 is two vectors here instead of four, and
//! Q5_0's and Q5_1's fifth bits are rotated into place in every lane at once instead of four
//! compare-and-mask steps.
//!
//! The values are the AVX2 decoders' and the scalar ones' (the same integer steps, then the same
//! IEEE convert and multiply, and for the formats with a minimum a subtract, fused here into one
//! multiply-subtract where the product is exact, which rounds the same). Where a group's integers
//! take at most 32 values (Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K), those steps are done once per group on the
//! values themselves, `0..16` or `0..32`, into a table of one or two vectors, and each element
//! is looked up by a permute: the same operations on the same operands, so the same bits, and
//! one shuffle per sixteen elements instead of a convert, a multiply and a subtract. On one
//! Intel Xeon (Emerald Rapids), alternating call by call, one x row against `[2048, 640]` or
//! `[640, 1024]` took 0.91-0.93 of the time in Q5_0 and Q4_K, 0.81 in Q4_0; Q5_K's two-vector
//! table was level (0.99). Q6_K (64 values) and Q8_0 (256) keep the multiply; Q6_K builds the
//! values of four groups at once (see its `Blocks512::run512`).
//!
//! The dot products keep the order of every `linear` path: element `e` goes to lane `e % 16` in
//! ascending order and the lanes are summed by `simd::reduce_lanes`' tree; a group's first
//! vector holds its elements 0-15 and its second 16-31, both into the same sixteen-lane
//! accumulator.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256i, __m512, __m512i, _mm256_loadu_si256, _mm512_and_si512,
    _mm512_broadcast_i64x4, _mm512_castsi512_si128, _mm512_cvtepi32_ps, _mm512_cvtepi8_epi32,
    _mm512_cvtepu8_epi32, _mm512_extracti32x4_epi32, _mm512_fmadd_ps, _mm512_fmsub_ps,
    _mm512_loadu_ps, _mm512_loadu_si512, _mm512_mul_ps, _mm512_permutex2var_ps,
    _mm512_permutexvar_ps, _mm512_rolv_epi32, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setr_epi32,
    _mm512_setzero_ps, _mm512_slli_epi32, _mm512_sllv_epi32, _mm512_srli_epi32, _mm512_storeu_ps,
    _mm512_sub_epi32, _mm512_ternarylogic_epi32, _mm512_xor_si512, _mm_loadu_si128,
};
use std::ops::Range;

use super::avx2::{
    by_format, half_f16c, k_group_pairs, Blocks, Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0,
};
use super::{decode_block, for_blocks, halves, Halves};
use crate::kernels::dtype::DType;
use crate::kernels::simd::{self, LANES};

/// [`super::read`] with the block formats decoded sixteen values at a time. Callers outside
/// this module's features call it only after detecting AVX-512F, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn read_avx512(dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    if !dtype.is_quantized() {
        super::read(dtype, bytes, start, out);
        return;
    }
    for_blocks(dtype, bytes, start, out, |b, o| block_avx512(dtype, b, o));
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn block_avx512(dtype: DType, b: &[u8], out: &mut [f32]) {
    by_format!(dtype, B => store_block::<B>(b, out), floats => decode_block(floats, b, out))
}

/// Block `b` decoded into `out[..32 * GROUPS]`, a run of groups at a time (also the strips'
/// decode, [`super::strip`]).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
pub(super) fn store_block<B: Blocks512>(b: &[u8], out: &mut [f32]) {
    // SAFETY: this function's features are the ones `prepare512_f16c` needs.
    let shared = unsafe { B::prepare512_f16c(b) };
    let runs = out[..32 * B::GROUPS].chunks_exact_mut(32 * B::RUN);
    for (j, dst) in runs.enumerate() {
        // SAFETY: this function's features are the ones `run512` and `group512` need.
        let run = unsafe { B::run512(b, j) };
        for (s, dst) in dst.chunks_exact_mut(32).enumerate() {
            // SAFETY: as above.
            let v = unsafe { B::group512(b, &run, &shared, B::RUN * j + s) };
            // SAFETY: `dst` holds exactly 32 f32s: two unaligned 16-wide stores.
            unsafe {
                _mm512_storeu_ps(dst.as_mut_ptr(), v[0]);
                _mm512_storeu_ps(dst.as_mut_ptr().add(16), v[1]);
            }
        }
    }
}

/// A block format's AVX-512 decoder, beside its AVX2 one ([`Blocks`]: sizes and shared parts).
pub(crate) trait Blocks512: Blocks {
    /// Elements `32 g .. 32 g + 16` and `32 g + 16 .. 32 g + 32` of block `b`, from `run`, the
    /// shared part of the run of groups `g` is in (`g / RUN` is its index), made by
    /// [`Blocks512::run512`] from the same block.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2, FMA and F16C.
    unsafe fn group512(b: &[u8], run: &Self::Run, shared: &Self::Shared, g: usize) -> [__m512; 2];
    /// Whether one x row meets [`WIDE_ROWS`] weight rows at a time in `gemv`.
    const WIDE: bool = true;
    /// The shared part of block `b` as these decoders take it: [`Blocks::prepare_table`]'s,
    /// unless a format's decode here scales its integers (Q6_K's scales come divided by 4).
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn prepare512(b: &[u8], halves: &Halves) -> Self::Shared {
        // SAFETY: the caller's guarantees are `prepare_table`'s.
        unsafe { Self::prepare_table(b, halves) }
    }
    /// [`Blocks512::prepare512`] from [`Blocks::prepare_f16c`] (the same values).
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn prepare512_f16c(b: &[u8]) -> Self::Shared {
        // SAFETY: the caller's guarantees are `prepare_f16c`'s.
        unsafe { Self::prepare_f16c(b) }
    }
    /// What a run of [`Blocks512::RUN`] consecutive groups shares, worked out once for all of
    /// them ([`Blocks512::run512`]); nothing for the formats that decode group by group.
    type Run: Copy;
    /// Groups per run: a divisor of [`Blocks::GROUPS`].
    const RUN: usize = 1;
    /// The shared part of groups `RUN · j .. RUN · (j + 1)` of block `b`.
    ///
    /// # Safety
    /// As [`Blocks512::group512`].
    unsafe fn run512(b: &[u8], j: usize) -> Self::Run;
}

/// The [`Blocks512::Run`] items of the formats that decode group by group.
macro_rules! no_runs {
    () => {
        type Run = ();
        #[inline(always)]
        unsafe fn run512(_b: &[u8], _j: usize) {}
    };
}

/// Sixteen i32 values `q` times `d`.
#[target_feature(enable = "avx512f")]
#[inline]
fn scaled(q: __m512i, d: __m512) -> __m512 {
    _mm512_mul_ps(d, _mm512_cvtepi32_ps(q))
}

/// Lane `i` holds `i - base` (exact in f32): the integers a table of values is made from.
#[target_feature(enable = "avx512f")]
#[inline]
fn from_minus(base: i32) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_sub_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(base),
    ))
}

/// Bytes `b[..16]`.
#[target_feature(enable = "avx512f")]
#[inline]
fn load16(b: &[u8]) -> __m128i {
    let b = &b[..16];
    // SAFETY: `b` holds exactly 16 bytes (one unaligned load).
    unsafe { _mm_loadu_si128(b.as_ptr().cast::<__m128i>()) }
}

/// Bytes `b[..32]`, each widened to a 32-bit lane as it is: bytes 0-15, then 16-31.
#[target_feature(enable = "avx512f")]
#[inline]
fn widen32(b: &[u8]) -> [__m512i; 2] {
    [
        _mm512_cvtepu8_epi32(load16(&b[..16])),
        _mm512_cvtepu8_epi32(load16(&b[16..32])),
    ]
}

/// The K formats' group `g` from the widened bytes its pair of groups shares ([`widen32`]):
/// the low nibbles for an even group, the high ones shifted down for an odd one. Bits above
/// the nibble are left for the caller to ignore (a permute reads only its index's low bits).
#[target_feature(enable = "avx512f")]
#[inline]
fn pair_nibbles(wide: &[__m512i; 2], g: usize) -> [__m512i; 2] {
    if g.is_multiple_of(2) {
        *wide
    } else {
        [
            _mm512_srli_epi32::<4>(wide[0]),
            _mm512_srli_epi32::<4>(wide[1]),
        ]
    }
}

/// The 32 five-bit indices of a Q5_0 or Q5_1 group in element order (elements 0-15, then
/// 16-31), from its fifth bits `qh` (bit `i` for element `i`) and its 16 nibble bytes `qs`
/// (low nibbles first): lane `l` of the first vector rotates bit `l` of `qh` to bit 4, of the
/// second bit `16 + l`, and one three-way select takes bits 0-3 from the nibble and the rest
/// from the rotated bits. Bits above 4 are left for the permute to ignore. Against the bits as
/// two mask registers ORed in (and a mask for the low nibbles), one x row of Q5_0 `[10240,
/// 2560]` took 711-721 µs against 745-756 and eight rows of `[1024, 2048]` 208-211 against
/// 214-217; Q5_1 (four rows at a time) 903-940 against 979-999 (Zen 5, one thread, builds
/// alternating).
#[target_feature(enable = "avx512f")]
#[inline]
fn five_bit_indices(qh: &[u8], qs: &[u8]) -> [__m512i; 2] {
    let qh = _mm512_set1_epi32(i32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]));
    let wide = _mm512_cvtepu8_epi32(load16(qs));
    let first = _mm512_rolv_epi32(
        qh,
        _mm512_setr_epi32(4, 3, 2, 1, 0, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21),
    );
    let second = _mm512_rolv_epi32(
        qh,
        _mm512_setr_epi32(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5),
    );
    let low4 = _mm512_set1_epi32(0x0f);
    // Bits 0-3 from the nibble, the rest from the rotated fifth bits: `c ? a : b`.
    [
        _mm512_ternarylogic_epi32::<0xE4>(wide, first, low4),
        _mm512_ternarylogic_epi32::<0xE4>(_mm512_srli_epi32::<4>(wide), second, low4),
    ]
}

impl Blocks512 for Q8_0 {
    no_runs!();
    #[inline(always)]
    unsafe fn group512(b: &[u8], _run: &(), d: &f32, _g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let d = _mm512_set1_ps(*d);
            [
                scaled(_mm512_cvtepi8_epi32(load16(&b[2..18])), d),
                scaled(_mm512_cvtepi8_epi32(load16(&b[18..34])), d),
            ]
        }
    }
}

impl Blocks512 for Q4_0 {
    no_runs!();
    #[inline(always)]
    unsafe fn group512(b: &[u8], _run: &(), d: &f32, _g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let t = _mm512_mul_ps(_mm512_set1_ps(*d), from_minus(8));
            // A permute reads only an index's low four bits: the low nibbles need no mask.
            let wide = _mm512_cvtepu8_epi32(load16(&b[2..18]));
            [
                _mm512_permutexvar_ps(wide, t),
                _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(wide), t),
            ]
        }
    }
}

impl Blocks512 for Q5_0 {
    no_runs!();
    #[inline(always)]
    unsafe fn group512(b: &[u8], _run: &(), d: &f32, _g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let d = _mm512_set1_ps(*d);
            let [i0, i1] = five_bit_indices(&b[2..6], &b[6..22]);
            let (lo, hi) = (
                _mm512_mul_ps(d, from_minus(16)),
                _mm512_mul_ps(d, from_minus(0)),
            );
            [
                _mm512_permutex2var_ps(lo, i0, hi),
                _mm512_permutex2var_ps(lo, i1, hi),
            ]
        }
    }
}

impl Blocks512 for Q4_1 {
    no_runs!();
    #[inline(always)]
    unsafe fn group512(b: &[u8], _run: &(), f: &[f32; 2], _g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let (ds, dm) = (_mm512_set1_ps(f[0]), _mm512_set1_ps(f[1]));
            // One fused multiply-subtract: `d · q` is exact (an f16 times a 4-bit integer), so
            // rounding once gives the scalar decoder's multiply-then-subtract bits.
            let t = _mm512_fmsub_ps(ds, from_minus(0), dm);
            // A permute reads only an index's low four bits: the low nibbles need no mask.
            let wide = _mm512_cvtepu8_epi32(load16(&b[4..20]));
            [
                _mm512_permutexvar_ps(wide, t),
                _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(wide), t),
            ]
        }
    }
}

impl Blocks512 for Q5_1 {
    /// Four rows at a time: eight took 1043-1067 µs against four's 979-999 (one x row against
    /// `[10240, 2560]`, Zen 5, one thread, before [`five_bit_indices`]).
    const WIDE: bool = false;
    no_runs!();
    #[inline(always)]
    unsafe fn group512(b: &[u8], _run: &(), f: &[f32; 2], _g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let (ds, dm) = (_mm512_set1_ps(f[0]), _mm512_set1_ps(f[1]));
            let [i0, i1] = five_bit_indices(&b[4..8], &b[8..24]);
            // As Q5_0: the sixteen values below 16 in one table and those from 16 in the other.
            let (lo, hi) = (
                _mm512_fmsub_ps(ds, from_minus(0), dm),
                _mm512_fmsub_ps(ds, from_minus(-16), dm),
            );
            [
                _mm512_permutex2var_ps(lo, i0, hi),
                _mm512_permutex2var_ps(lo, i1, hi),
            ]
        }
    }
}

/// [`Blocks::prepare_f16c`]'s factors of a Q4_K or Q5_K block, converted and multiplied
/// sixteen at a time: the same integers and products as the AVX2 unpacking (the same bits), in
/// one widening, convert, multiply and store where eight lanes took two of each and a shift.
/// One function with its features, for the callers that prepare inside a closure. One x row
/// against Q4_K `[10240, 2560]` took 643-646 µs against 688-700 (Zen 5, one thread, builds
/// alternating, three rounds); with the factors not computed at all it would take ~560.
#[target_feature(enable = "avx512f,avx2,f16c")]
#[inline]
fn k_group_factors_512(b: &[u8]) -> [f32; 16] {
    use std::arch::x86_64::{_mm512_broadcastsd_pd, _mm512_castpd_ps, _mm_castps_pd};
    let (pairs, d_dmin) = k_group_pairs(b);
    let d_dmin = _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castps_pd(d_dmin)));
    let mut f = [0.0f32; 16];
    // SAFETY: `f` holds sixteen f32s: one unaligned 16-wide store.
    unsafe { _mm512_storeu_ps(f.as_mut_ptr(), scaled(_mm512_cvtepu8_epi32(pairs), d_dmin)) };
    f
}

/// The prepare items of a format whose sixteen factors a block are made on AVX-512 by `$f`
/// ([`k_group_factors_512`], [`q6_k_quarter_scales_512`]), with or without the f16 table.
macro_rules! factors_512 {
    ($f:ident) => {
        #[inline(always)]
        unsafe fn prepare512(b: &[u8], _halves: &Halves) -> [f32; 16] {
            // SAFETY: the caller guarantees AVX-512F (the only callers), AVX2 and F16C.
            unsafe { $f(b) }
        }
        #[inline(always)]
        unsafe fn prepare512_f16c(b: &[u8]) -> [f32; 16] {
            // SAFETY: as above.
            unsafe { $f(b) }
        }
    };
}

impl Blocks512 for Q4K {
    factors_512!(k_group_factors_512);
    /// Groups 2j and 2j + 1 are the low and high nibbles of the same 32 bytes. Each byte
    /// widens to a lane as it is, once for both groups (a run of two), and a permute reads only
    /// an index's low four bits, so the low nibbles need no mask and the high ones one shift:
    /// no byte-wide unpacking and no narrow-to-wide extract, shuffles Zen 4's one-row decode was
    /// bound by. Widened once for the two groups rather than once each (LLVM had moved each
    /// group's shift before its own widening), one x row against `[10240, 2560]` took 661-677
    /// µs against 731-741, `[640, 2048]` 31.6-32.1 against 35.3-36.6, and eight rows (the strips)
    /// 208-216 against 218-222 (Zen 5, one thread, builds alternating, three rounds).
    type Run = [__m512i; 2];
    const RUN: usize = 2;
    #[inline(always)]
    unsafe fn run512(b: &[u8], j: usize) -> [__m512i; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { widen32(&b[16 + 32 * j..]) }
    }
    #[inline(always)]
    unsafe fn group512(_b: &[u8], run: &[__m512i; 2], f: &[f32; 16], g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let (ds, dm) = (_mm512_set1_ps(f[2 * g]), _mm512_set1_ps(f[2 * g + 1]));
            // One fused multiply-subtract, the bits of the scalar decoder's multiply then
            // subtract: `(d · sc) · q` is exact (at most 21 significant bits), so only the
            // subtraction rounds either way. One operation a table fewer: one x row against
            // Q4_K `[10240, 2560]` took 738-747 µs against 771-784 (Zen 5, one thread, builds
            // alternating, three rounds).
            let t = _mm512_fmsub_ps(ds, from_minus(0), dm);
            let v = pair_nibbles(run, g);
            [
                _mm512_permutexvar_ps(v[0], t),
                _mm512_permutexvar_ps(v[1], t),
            ]
        }
    }
}

impl Blocks512 for Q5K {
    /// Four rows at a time: eight, even with one row's run live at a time ([`dots`]), took
    /// 1024-1029 µs against four's 965-979 (one x row against `[10240, 2560]`, Zen 5).
    const WIDE: bool = false;
    factors_512!(k_group_factors_512);
    /// Groups 2j and 2j + 1 share 32 bytes of low bits (their low and high nibbles), and every
    /// group of the block the same 32 bytes of fifth bits (bit g for group g): both are widened
    /// to 32-bit lanes once for the two groups, and each index is the nibble's four bits with
    /// the fifth bit rotated into bit 4 (one rotate and one three-way select per sixteen; the
    /// permute reads bits 0-4 only), where a group at a time took its bits apart in bytes and
    /// widened them again. The run holds four vectors a row. One x row against `[10240, 2560]`
    /// took 1100-1128 µs against 1178-1195, `[640, 2048]` 54-55 against 57-60; eight and 32
    /// rows level (Zen 5, one thread, builds alternating, three rounds).
    type Run = [__m512i; 4];
    const RUN: usize = 2;
    #[inline(always)]
    unsafe fn run512(b: &[u8], j: usize) -> [__m512i; 4] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let (low, fifth) = (widen32(&b[48 + 32 * j..]), widen32(&b[16..48]));
            [low[0], low[1], fifth[0], fifth[1]]
        }
    }
    #[inline(always)]
    unsafe fn group512(_b: &[u8], run: &[__m512i; 4], f: &[f32; 16], g: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let (ds, dm) = (_mm512_set1_ps(f[2 * g]), _mm512_set1_ps(f[2 * g + 1]));
            let lo = _mm512_fmsub_ps(ds, from_minus(0), dm);
            let hi = _mm512_fmsub_ps(ds, from_minus(-16), dm);
            // Written out, not as closures: a closure has none of the caller's target features,
            // and its intrinsics could become calls.
            let [w0, w1] = pair_nibbles(&[run[0], run[1]], g);
            // Bit g of each fifth-bits byte to bit 4 (a left rotate by 4 - g, modulo 32).
            let to_bit4 = _mm512_set1_epi32((4 - g as i32).rem_euclid(32));
            let (h0, h1) = (
                _mm512_rolv_epi32(run[2], to_bit4),
                _mm512_rolv_epi32(run[3], to_bit4),
            );
            // Bits 0-3 from the nibble, the rest from the rotated fifth bits: `c ? a : b`.
            let low4 = _mm512_set1_epi32(0x0f);
            let i0 = _mm512_ternarylogic_epi32::<0xE4>(w0, h0, low4);
            let i1 = _mm512_ternarylogic_epi32::<0xE4>(w1, h1, low4);
            [
                _mm512_permutex2var_ps(lo, i0, hi),
                _mm512_permutex2var_ps(lo, i1, hi),
            ]
        }
    }
}

/// Q6_K's sixteen `d · scale / 4` ([`Blocks512::prepare512`]), converted and multiplied sixteen
/// at a time: `d / 4` is exact (an f16, never below f32's normal range), and so is each product
/// (an f16 times an 8-bit integer). One function with its features, for the callers that
/// prepare inside a closure.
#[target_feature(enable = "avx512f,avx2,f16c")]
#[inline]
fn q6_k_quarter_scales_512(b: &[u8]) -> [f32; 16] {
    let d = _mm512_set1_ps(half_f16c(&b[208..]) * 0.25);
    let mut ds = [0.0f32; 16];
    // SAFETY: `ds` holds sixteen f32s: one unaligned 16-wide store.
    unsafe {
        _mm512_storeu_ps(
            ds.as_mut_ptr(),
            scaled(_mm512_cvtepi8_epi32(load16(&b[192..208])), d),
        );
    }
    ds
}

impl Blocks512 for Q6K {
    const WIDE: bool = false;
    factors_512!(q6_k_quarter_scales_512);
    /// The four groups of a half block share its 64 low-bit bytes and 32 high-bit bytes, so
    /// their values are assembled for all four at once, by 32-bit shifts and masks (AVX-512F
    /// has no byte instructions): nine operations for 128 values, where a group at a time took
    /// about seven for 32. Each value `q` (stored plus 32) goes into its byte as `(q ^ 32) << 2`
    /// (the top bit of each two-bit high field flipped once in `qh`), which as a signed byte is
    /// `4 (q - 32)`: the widening is then the signed one, with no subtract, and the scales come
    /// divided by 4 ([`Blocks512::prepare512`]). Both factors are exact (a 6-bit integer times
    /// 4, an f16 times an 8-bit scale over 4, never below f32's normal range), so each product
    /// has the bits of `(q - 32) · (d · scale)`, the other paths' value.
    type Run = [__m512i; 2];
    const RUN: usize = 4;
    #[inline(always)]
    unsafe fn run512(b: &[u8], h: usize) -> [__m512i; 2] {
        let (ql, qh) = (&b[64 * h..][..64], &b[128 + 32 * h..][..32]);
        // SAFETY: `ql` holds 64 bytes and `qh` 32 (one unaligned load each); the caller
        // guarantees AVX-512F and AVX2.
        unsafe {
            let ql = _mm512_loadu_si512(ql.as_ptr().cast());
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(qh.as_ptr().cast::<__m256i>()));
            let qh = _mm512_xor_si512(qh, _mm512_set1_epi32(0xaaaa_aaaa_u32 as i32));
            let (low, top) = (
                _mm512_set1_epi32(0x3c3c_3c3c),
                _mm512_set1_epi32(0xc0c0_c0c0_u32 as i32),
            );
            // Group 4h + s takes bits 2s, 2s + 1 of each `qh` byte as its bits 6 and 7: the
            // first 32 bytes of each vector are group s = 0 or 2, the last 32 s = 1 or 3.
            let shift =
                |a: i32, b: i32| _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
            let high01 = _mm512_sllv_epi32(qh, shift(6, 4));
            let high23 = _mm512_sllv_epi32(qh, shift(2, 0));
            // The nibbles as bits 2-5: the low ones of `ql` for s = 0, 1, the high for 2, 3.
            let low01 = _mm512_and_si512(_mm512_slli_epi32::<2>(ql), low);
            let low23 = _mm512_and_si512(_mm512_srli_epi32::<2>(ql), low);
            // (high & 0xc0) | low.
            [
                _mm512_ternarylogic_epi32::<0xEA>(high01, top, low01),
                _mm512_ternarylogic_epi32::<0xEA>(high23, top, low23),
            ]
        }
    }
    #[inline(always)]
    unsafe fn group512(_b: &[u8], run: &[__m512i; 2], ds: &[f32; 16], c: usize) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe {
            let bytes = run[(c % 4) / 2];
            let (first, second) = if c.is_multiple_of(2) {
                (
                    _mm512_castsi512_si128(bytes),
                    _mm512_extracti32x4_epi32::<1>(bytes),
                )
            } else {
                (
                    _mm512_extracti32x4_epi32::<2>(bytes),
                    _mm512_extracti32x4_epi32::<3>(bytes),
                )
            };
            [
                scaled(_mm512_cvtepi8_epi32(first), _mm512_set1_ps(ds[2 * c])),
                scaled(_mm512_cvtepi8_epi32(second), _mm512_set1_ps(ds[2 * c + 1])),
            ]
        }
    }
}

/// The most groups a [`Blocks512::RUN`] holds.
const MAX_RUN: usize = 4;

/// Weight rows one x row meets at a time: their accumulators are independent chains, enough
/// to hide the multiply-add latency behind the decode.
const ROWS: usize = 4;

/// Rows at a time where the format's decode leaves the registers for it: a block's x vectors,
/// loop and prefetch then serve eight rows. One x row against `[2048, 640]`, `[1024, 640]` and
/// `[256, 640]` took 0.90-0.95 of the time in Q8_0, Q4_0, Q5_0 and Q4_K, and Q5_K was level;
/// Q6_K, whose decode holds more registers, took 1.15 and keeps [`ROWS`] (AMD EPYC, Zen 5, 2
/// threads, `kernel_bench`, builds alternating). On an Intel Xeon (Emerald Rapids), with the
/// scales from the table, one thread: Q5_0 `[2048, 640]` 0.86 of four rows' time, Q8_0 0.90,
/// and Q6_K `[640, 2048]` 1.06 (156 against 147 µs). On an AMD EPYC (Zen 4), one thread, with
/// Q6_K's scales inlined at last, eight Q6_K rows took 109-117 µs against four's 101.
const WIDE_ROWS: usize = 8;

/// `out[j] = dot(x, w_row(cols.start + j))` for a block-format `dtype`; false (nothing written)
/// for a float dtype. Callers outside this module's features call it only after detecting
/// AVX-512F, AVX2, FMA and F16C.
///
/// Panics if `out` is not `cols.len()` long, `x` is shorter than `k`, `k` is not whole blocks,
/// or `bytes` does not hold the rows `cols`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn gemv_blocks_avx512(
    dtype: DType,
    x: &[f32],
    bytes: &[u8],
    k: usize,
    cols: Range<usize>,
    out: &mut [f32],
) -> bool {
    by_format!(dtype, B => rows::<B>(x, bytes, k, cols, out), _floats => return false);
    true
}

// Each format's loop compiled on its own, not inlined into the dispatch: as the K formats' decode
// grew this session, Q8_0's one-row loop (whose code did not change) drifted 4-8 % slower inlined
// with the others, 630-649 -> 671-699 µs against `[10240, 2560]`, and back to 626-648 apart
// (Zen 5, one thread, builds alternating, three rounds).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline(never)]
fn rows<B: Blocks512>(x: &[f32], bytes: &[u8], k: usize, cols: Range<usize>, out: &mut [f32]) {
    let elems = 32 * B::GROUPS;
    assert_eq!(out.len(), cols.len(), "gemv output length");
    assert!(k.is_multiple_of(elems), "gemv rows must be whole blocks");
    let x = &x[..k];
    let row_bytes = k / elems * B::BYTES;
    let rows = &bytes[cols.start * row_bytes..cols.end * row_bytes];
    // One f16 scale a block is read from a table ([`Blocks::prepare_table`]), the K formats'
    // scales unpacked in vector registers with F16C. On an AMD EPYC (Zen 5, 2 threads, builds
    // alternating) one x row against `[2048, 640]` took 0.88 of F16C's time in Q5_0, 0.91 in
    // Q8_0 and 0.81 in Q4_0. On an Intel Xeon (Emerald Rapids, one thread, `kernel_bench`),
    // against the scales converted in software, which that core once ran faster than F16C:
    // Q5_0 `[2048, 640]` 0.91, Q8_0 0.80, Q4_K and Q6_K `[640, 2048]` 0.73 and 0.77 (and 0.79,
    // 0.72 for Q5_0, Q8_0 with eight rows at a time); the real 270M file's batch-1 decode went
    // from 68-70 to 77-79 tokens/s.
    let halves = halves();
    let mut at = 0;
    if B::WIDE {
        at = rows_by::<B, WIDE_ROWS>(x, rows, row_bytes, at, out, halves);
    }
    at = rows_by::<B, ROWS>(x, rows, row_bytes, at, out, halves);
    rows_by::<B, 1>(x, rows, row_bytes, at, out, halves);
}

/// Rows `at..` of `rows` (each `row_bytes` long) into `out[at..]`, `R` at a time while `R` are
/// left; returns the first row not done.
#[inline(always)]
fn rows_by<B: Blocks512, const R: usize>(
    x: &[f32],
    rows: &[u8],
    row_bytes: usize,
    mut at: usize,
    out: &mut [f32],
    halves: &Halves,
) -> usize {
    for o in out[at..].chunks_exact_mut(R) {
        let w: [&[u8]; R] = std::array::from_fn(|r| &rows[(at + r) * row_bytes..][..row_bytes]);
        // The rows after the next `R`: the next were asked for while the last ones ran, and
        // one group ahead the loads still waited on memory. On the real 270M file, batch-1
        // decode went 189.6 -> 196.0 tokens/s with two groups ahead, and four groups ahead
        // was slower than two, 192.5 against 200.0 (AMD EPYC, Zen 5, builds alternating, 4
        // rounds).
        let next = rows.as_ptr().wrapping_add((at + 2 * R) * row_bytes);
        for (o, lanes) in o.iter_mut().zip(dots::<B, R>(x, w, next, halves)) {
            *o = simd::reduce_lanes(&lanes);
        }
        at += R;
    }
    at
}

/// The 16 lane sums of `x · w[r]` for `R` rows of whole blocks, each as long as `x`. `next` is
/// where `R` rows still to come start (the rows are contiguous): while block `b` of each row is
/// decoded, `R` blocks' worth of those rows is prefetched ([`simd::prefetch`]).
/// `halves`: the f16 table one-scale formats read their scales from.
///
/// A [`Blocks512::RUN`] of groups at a time: the run's x vectors are loaded once, then each
/// row's run is made and its groups decoded and multiplied, row after row, so only one row's
/// run is live at a time (each accumulator still takes its row's groups in ascending order,
/// the same sums). Where all `R` rows' runs were made first and the groups then went across
/// the rows, one x row against `[10240, 2560]` took, in Q5_K (four vectors a run), 1100-1227
/// µs against 934-1001 now, and `[640, 2048]` 53-61 against 46-50; Q6_K 937-944 against
/// 887-925; Q4_K level (605-641 against 624-676; `[640, 2048]` 30.0-31.7 against 29.8-32.6).
/// Zen 5, one thread, builds alternating, five rounds.
#[inline(always)]
fn dots<B: Blocks512, const R: usize>(
    x: &[f32],
    w: [&[u8]; R],
    next: *const u8,
    halves: &Halves,
) -> [[f32; LANES]; R] {
    let elems = 32 * B::GROUPS;
    let blocks = x.len() / elems;
    for row in &w {
        assert_eq!(row.len(), blocks * B::BYTES, "gemv weight row length");
    }
    // Every unsafe block below relies on the asserts above (each row is `blocks` whole blocks,
    // `x` is `blocks * elems` f32s) and on the only callers being `target_feature` functions
    // requiring AVX-512F, AVX2, FMA and F16C, into which this is inlined.
    // SAFETY: a register intrinsic; it touches no memory.
    let mut acc: [__m512; R] = [unsafe { _mm512_setzero_ps() }; R];
    let step = R * B::BYTES;
    for b in 0..blocks {
        simd::prefetch(next.wrapping_add(b * step), step);
        let blk: [&[u8]; R] = std::array::from_fn(|r| &w[r][b * B::BYTES..][..B::BYTES]);
        // The closure has none of the callers' target features, so whatever `prepare_table`
        // calls with features must be one function (as `k_group_factors_f16c` is), or each of
        // its intrinsics becomes a call (Q6_K ran at a third of its speed on Zen 4). Inlined
        // here instead, Q4_K kept its accumulators in memory and was 1.1x slower.
        // SAFETY: the callers enable AVX2, FMA and F16C.
        let shared: [B::Shared; R] =
            std::array::from_fn(|r| unsafe { B::prepare512(blk[r], halves) });
        const { assert!(B::RUN <= MAX_RUN, "a run's x vectors fit `xs`") };
        for j in 0..B::GROUPS / B::RUN {
            // The run's x vectors, then each row's run decoded group by group: each row's
            // accumulator still takes the groups in ascending order.
            // SAFETY: a register intrinsic.
            let mut xs = [[unsafe { _mm512_setzero_ps() }; 2]; MAX_RUN];
            for (s, xs) in xs.iter_mut().enumerate().take(B::RUN) {
                let at = b * elems + 32 * (B::RUN * j + s);
                // SAFETY: reads `x[at..at + 32]`, with `at + 32 <= blocks * elems == x.len()`.
                *xs = unsafe {
                    let p = x.as_ptr().add(at);
                    [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))]
                };
            }
            for r in 0..R {
                // SAFETY: `blk[r]` is one whole block (asserted lengths above).
                let run = unsafe { B::run512(blk[r], j) };
                for (s, [x0, x1]) in xs.iter().enumerate().take(B::RUN) {
                    // SAFETY: `blk[r]` is one whole block, `run` made from it.
                    let v = unsafe { B::group512(blk[r], &run, &shared[r], B::RUN * j + s) };
                    // SAFETY: register intrinsics.
                    acc[r] =
                        unsafe { _mm512_fmadd_ps(*x1, v[1], _mm512_fmadd_ps(*x0, v[0], acc[r])) };
                }
            }
        }
    }
    let mut lanes = [[0.0f32; LANES]; R];
    for (l, a) in lanes.iter_mut().zip(&acc) {
        // SAFETY: `l` holds 16 f32s: one unaligned store.
        unsafe { _mm512_storeu_ps(l.as_mut_ptr(), *a) };
    }
    lanes
}
