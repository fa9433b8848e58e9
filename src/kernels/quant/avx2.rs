//! The block decoders on AVX2: eight values per vector, the same IEEE operations as the scalar
//! decoders in the parent module (a multiply, then for the K formats a separate subtract), so
//! every value keeps its bits. Integer work (nibbles, fifth bits, offsets) is exact in any
//! order.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_and_si256, _mm256_broadcastsd_pd, _mm256_castpd_ps,
    _mm256_castsi128_si256, _mm256_castsi256_si128, _mm256_cmpeq_epi32, _mm256_cmpeq_epi8,
    _mm256_cvtepi32_ps, _mm256_cvtepi8_epi32, _mm256_cvtepu8_epi32, _mm256_extracti128_si256,
    _mm256_inserti128_si256, _mm256_loadu_si256, _mm256_mul_ps, _mm256_or_si256, _mm256_set1_epi32,
    _mm256_set1_epi64x, _mm256_set1_epi8, _mm256_set1_ps, _mm256_setr_epi32, _mm256_setr_epi8,
    _mm256_setzero_ps, _mm256_shuffle_epi8, _mm256_slli_epi16, _mm256_slli_epi32,
    _mm256_sllv_epi32, _mm256_srl_epi16, _mm256_srli_epi16, _mm256_storeu_ps, _mm256_sub_epi32,
    _mm256_sub_epi8, _mm256_sub_ps, _mm_and_si128, _mm_blend_epi32, _mm_castps_pd, _mm_cvtph_ps,
    _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_loadl_epi64, _mm_loadu_si128, _mm_or_si128,
    _mm_set1_epi8, _mm_setr_epi32, _mm_setr_epi8, _mm_shuffle_epi32, _mm_shuffle_epi8,
    _mm_srli_epi16, _mm_srli_epi32, _mm_srli_si128, _mm_srlv_epi32,
};

use super::{decode_block, for_blocks, half, k_group_factors, Halves};
use crate::kernels::dtype::DType;

/// [`super::read`] with the block formats decoded eight values at a time. Callers outside this
/// module's features call it only after detecting AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn read_avx2(dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    if !dtype.is_quantized() {
        super::read(dtype, bytes, start, out);
        return;
    }
    // The closure inherits this function's target features, so `block_avx2` is a safe call.
    for_blocks(dtype, bytes, start, out, |b, o| block_avx2(dtype, b, o));
}

#[target_feature(enable = "avx2,fma,f16c")]
fn block_avx2(dtype: DType, b: &[u8], out: &mut [f32]) {
    by_format!(dtype, B => store_block::<B>(b, out), floats => decode_block(floats, b, out))
}

/// One block format's AVX2 decoder: a block is [`Blocks::GROUPS`] groups of 32 elements, each
/// decoded to four vectors of eight consecutive values, after [`Blocks::prepare`] read what
/// the groups share (scales).
pub(crate) trait Blocks {
    /// Bytes per block.
    const BYTES: usize;
    /// Groups of 32 elements per block.
    const GROUPS: usize;
    /// What the groups of one block share.
    type Shared: Copy;
    /// Read the shared part of block `b` (`BYTES` long).
    fn prepare(b: &[u8]) -> Self::Shared;
    /// [`Blocks::prepare`] with F16C's f16 conversion where the format has one f16 scale: the
    /// same value in one instruction; the K formats unpack and scale in vector registers, the
    /// same values too. Faster in the AVX2 `gemv` (measured on an AVX2 EPYC: Q8_0
    /// 113 -> 77 µs for one row of `[2048, 1024]`), in AVX-512 strips, and in the AVX2 few-row
    /// kernel since [`half_f16c`] stopped waiting on an accumulator (AVX2 code on an AMD EPYC,
    /// Zen 4, in-process alternation: Q8_0 and Q5_0 `[2048, 640]` at 4, 8 and 16 x rows took
    /// 0.84-1.0 of software's time, Q4_K level), and in the AVX-512 `gemv` for the K formats.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn prepare_f16c(b: &[u8]) -> Self::Shared {
        Self::prepare(b)
    }
    /// [`Blocks::prepare`] with a format's one f16 scale read from the table [`Halves`]: the
    /// same value in one load, where F16C takes a move in and a convert. The formats with more
    /// scales take [`Blocks::prepare_f16c`].
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn prepare_table(b: &[u8], _halves: &Halves) -> Self::Shared {
        // SAFETY: the caller guarantees AVX2 and F16C.
        unsafe { Self::prepare_f16c(b) }
    }
    /// Elements `32 g .. 32 g + 32` of block `b`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn group(b: &[u8], shared: &Self::Shared, g: usize) -> [__m256; 4];
    /// Whether a value is `ds * q - dm` (the K formats with minimums) rather than `ds * q`.
    const AFFINE: bool = false;
    /// Group `g`'s 32 integers `q` (element order, one signed byte each), which
    /// [`Blocks::factors`] turn into its values.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn group_i8(b: &[u8], g: usize) -> __m256i;
    /// `(ds, dm)` of group `g`'s first and last sixteen elements: each value is `ds * q`, then
    /// less `dm` if [`Blocks::AFFINE`] (a multiply, then a subtract), the values
    /// [`Blocks::group`] gives.
    fn factors(shared: &Self::Shared, g: usize) -> [(f32, f32); 2];
}

/// Every element of block `b` into `out`.
#[target_feature(enable = "avx2,fma,f16c")]
fn store_block<B: Blocks>(b: &[u8], out: &mut [f32]) {
    let shared = B::prepare(b);
    for (g, dst) in out[..32 * B::GROUPS].chunks_exact_mut(32).enumerate() {
        // SAFETY: this function's features are the ones `group` needs.
        let v = unsafe { B::group(b, &shared, g) };
        for (v, o) in v.into_iter().zip(dst.chunks_exact_mut(8)) {
            // SAFETY: `o` holds exactly 8 f32s (one unaligned store).
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
        }
    }
}

/// The f16 at the start of block `b` (its scale) as f32: F16C's conversion, exact like the
/// scalar one.
#[target_feature(enable = "f16c")]
#[inline]
fn half_f16c(b: &[u8]) -> f32 {
    let bits = u32::from(u16::from_le_bytes([b[0], b[1]]));
    // `vmovd` zeroes the rest of the register. Written with intrinsics, LLVM sees that only
    // lane 0 is used and inserts the two bytes into whatever register is at hand (`vpinsrw`),
    // which in the `linear` loops was an accumulator: each block's scale then waited for the
    // previous block's multiply-adds, a chain through every decode. Without it, one x row
    // against Q5_0 and Q8_0 `[2048, 640]` took 0.87-0.94 of the time, and strips at 8 rows,
    // which had kept the slower software conversion for this reason, 0.84-0.86 (Emerald Rapids,
    // alternating call by call in one process).
    let v: __m128i;
    // SAFETY: two register instructions (`vmovd` of AVX, implied by F16C); no memory, stack
    // or flags touched.
    unsafe {
        std::arch::asm!(
            "vmovd {v}, {bits:e}",
            bits = in(reg) bits,
            v = lateout(xmm_reg) v,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    _mm_cvtss_f32(_mm_cvtph_ps(v))
}

/// [`k_group_factors`] in vector registers: the twelve 6-bit scale and minimum fields unpacked
/// by masks and shifts on 32-bit lanes, put in pair order by one byte shuffle, then converted
/// and multiplied eight at a time. The same integers and the same IEEE products, so the same
/// bits; in software the unpacking and sixteen scalar converts and multiplies were a quarter of
/// one x row's time against Q4_K blocks (`perf` on `kernel_bench`, AMD EPYC, Zen 5).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn k_group_factors_f16c(b: &[u8]) -> [f32; 16] {
    // Bytes 4..16 are the fields, in 32-bit lanes: s0-3 (sc 0-3, high bits of sc 4-7),
    // s4-7 (m 0-3, high bits of m 4-7), s8-11 (low bits of sc 4-7 and m 4-7).
    let s = load16(&b[4..20]);
    let x = _mm_shuffle_epi32::<0b01_00_01_00>(s);
    let y = _mm_shuffle_epi32::<0b10_10_10_10>(s);
    let first = _mm_and_si128(x, _mm_set1_epi8(0x3f));
    // A 32-bit shift moves a neighbour's bits into each byte's top; the masks drop them.
    let low_bits = _mm_and_si128(
        _mm_srlv_epi32(y, _mm_setr_epi32(0, 0, 0, 4)),
        _mm_set1_epi8(0x0f),
    );
    let high_bits = _mm_and_si128(_mm_srli_epi32::<2>(x), _mm_set1_epi8(0x30));
    let last = _mm_or_si128(low_bits, high_bits);
    // [sc 0-3, m 0-3, sc 4-7, m 4-7], then [sc 0, m 0, sc 1, m 1, ...].
    let fields = _mm_blend_epi32::<0b1100>(first, last);
    let pairs = _mm_shuffle_epi8(
        fields,
        _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15),
    );
    // (d, dmin) in every pair of lanes.
    let d_dmin = _mm_cvtph_ps(load_u32(&b[..4]));
    let d_dmin = _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(d_dmin)));
    let mut f = [0.0f32; 16];
    let hi = _mm_srli_si128::<8>(pairs);
    // SAFETY: `f` holds sixteen f32s: two unaligned 8-wide stores.
    unsafe {
        _mm256_storeu_ps(f.as_mut_ptr(), scaled(_mm256_cvtepu8_epi32(pairs), d_dmin));
        _mm256_storeu_ps(
            f.as_mut_ptr().add(8),
            scaled(_mm256_cvtepu8_epi32(hi), d_dmin),
        );
    }
    f
}

/// [`Q6K`]'s sixteen `d * scale` in vector registers, as one function with F16C enabled: the
/// gemv's callers prepare a block inside a closure, which has no target features of its own, and
/// there each of the steps here was a call of its own (one x row against Q6_K `[640, 2048]`
/// took 280-325 µs on an AMD EPYC, Zen 4, one thread, against 101 µs as one call).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn q6_k_scales_f16c(b: &[u8]) -> [f32; 16] {
    // `b` is one whole block (210 bytes), so the loads of `load16` stay inside it.
    let d = _mm256_set1_ps(half_f16c(&b[208..]));
    let s = load16(&b[192..208]);
    let mut ds = [0.0f32; 16];
    let hi = _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(s));
    // SAFETY: `ds` holds sixteen f32s: two unaligned 8-wide stores.
    unsafe {
        _mm256_storeu_ps(ds.as_mut_ptr(), scaled(_mm256_cvtepi8_epi32(s), d));
        _mm256_storeu_ps(ds.as_mut_ptr().add(8), scaled(hi, d));
    }
    ds
}

/// Bytes `b[..4]` in the low lane of a vector, the rest zero.
#[target_feature(enable = "avx2")]
#[inline]
fn load_u32(b: &[u8]) -> __m128i {
    _mm_cvtsi32_si128(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Eight values `q` (i32 lanes) times `d`.
#[target_feature(enable = "avx2")]
#[inline]
fn scaled(q: __m256i, d: __m256) -> __m256 {
    _mm256_mul_ps(d, _mm256_cvtepi32_ps(q))
}

/// Eight values `ds * q - dm`: a multiply, then a subtract (never fused).
#[target_feature(enable = "avx2")]
#[inline]
fn affine(q: __m256i, ds: __m256, dm: __m256) -> __m256 {
    _mm256_sub_ps(_mm256_mul_ps(ds, _mm256_cvtepi32_ps(q)), dm)
}

/// [`affine`] of four vectors.
#[target_feature(enable = "avx2")]
#[inline]
fn affine4(q: [__m256i; 4], ds: __m256, dm: __m256) -> [__m256; 4] {
    [
        affine(q[0], ds, dm),
        affine(q[1], ds, dm),
        affine(q[2], ds, dm),
        affine(q[3], ds, dm),
    ]
}

/// `$body` with `$B` the [`Blocks`] type of block format `$dtype`, or `$floats` (bound to the
/// dtype) for a float format: the one place a dtype picks its decoder.
macro_rules! by_format {
    ($dtype:expr, $B:ident => $body:expr, $f:ident => $floats:expr) => {
        match $dtype {
            DType::Q8_0 => {
                type $B = $crate::kernels::quant::avx2::Q8_0;
                $body
            }
            DType::Q4_0 => {
                type $B = $crate::kernels::quant::avx2::Q4_0;
                $body
            }
            DType::Q5_0 => {
                type $B = $crate::kernels::quant::avx2::Q5_0;
                $body
            }
            DType::Q4_K => {
                type $B = $crate::kernels::quant::avx2::Q4K;
                $body
            }
            DType::Q5_K => {
                type $B = $crate::kernels::quant::avx2::Q5K;
                $body
            }
            DType::Q6_K => {
                type $B = $crate::kernels::quant::avx2::Q6K;
                $body
            }
            $f @ (DType::F32 | DType::BF16 | DType::F16) => $floats,
        }
    };
}
pub(crate) use by_format;

/// `prepare` and `prepare_f16c` of a format whose blocks share one f16 scale, at byte 0.
macro_rules! one_f16_scale {
    () => {
        type Shared = f32;
        #[inline(always)]
        fn prepare(b: &[u8]) -> f32 {
            half(b, 0)
        }
        #[inline(always)]
        unsafe fn prepare_f16c(b: &[u8]) -> f32 {
            // SAFETY: the caller guarantees F16C.
            unsafe { half_f16c(b) }
        }
        #[inline(always)]
        unsafe fn prepare_table(b: &[u8], halves: &Halves) -> f32 {
            halves[usize::from(u16::from_le_bytes([b[0], b[1]]))]
        }
    };
}

pub(crate) struct Q8_0;
pub(crate) struct Q4_0;
pub(crate) struct Q5_0;
pub(crate) struct Q4K;
pub(crate) struct Q5K;
pub(crate) struct Q6K;

/// `factors` and `group_i8` of a format with one scale per block of 32, its `q` made by the
/// function `$q`.
macro_rules! one_group {
    ($q:ident) => {
        #[inline(always)]
        fn factors(d: &f32, _g: usize) -> [(f32, f32); 2] {
            [(*d, 0.0); 2]
        }
        #[inline(always)]
        unsafe fn group_i8(b: &[u8], _g: usize) -> __m256i {
            // SAFETY: the caller guarantees AVX2.
            unsafe { $q(b) }
        }
    };
}

/// Q8_0's 32 values.
#[target_feature(enable = "avx2")]
#[inline]
fn q8_0_bytes(b: &[u8]) -> __m256i {
    load32(&b[2..34])
}

impl Blocks for Q8_0 {
    const BYTES: usize = 34;
    const GROUPS: usize = 1;
    one_f16_scale!();
    one_group!(q8_0_bytes);
    #[inline(always)]
    unsafe fn group(b: &[u8], d: &f32, _g: usize) -> [__m256; 4] {
        let q = &b[2..34];
        // SAFETY: the caller guarantees AVX2; each load reads 8 of `q`'s 32 bytes. (No
        // `array::from_fn` or `map` here or below: their closures run inside a generic function
        // compiled without these features, which cannot inline them; measured, each vector
        // then costs a call.)
        unsafe {
            let d = _mm256_set1_ps(*d);
            let at = |i: usize| q.as_ptr().add(8 * i).cast::<__m128i>();
            let (q0, q1) = (_mm_loadl_epi64(at(0)), _mm_loadl_epi64(at(1)));
            let (q2, q3) = (_mm_loadl_epi64(at(2)), _mm_loadl_epi64(at(3)));
            [
                scaled(_mm256_cvtepi8_epi32(q0), d),
                scaled(_mm256_cvtepi8_epi32(q1), d),
                scaled(_mm256_cvtepi8_epi32(q2), d),
                scaled(_mm256_cvtepi8_epi32(q3), d),
            ]
        }
    }
}

/// The 32 nibbles of 16 bytes in element order (low nibbles, then high), widened to i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn nibbles32(qs: &[u8]) -> [__m256i; 4] {
    let raw = load16(qs);
    let mask = _mm256_set1_epi32(0x0f);
    let lo = _mm256_cvtepu8_epi32(raw);
    let lo2 = _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(raw));
    [
        _mm256_and_si256(lo, mask),
        _mm256_and_si256(lo2, mask),
        _mm256_srli_epi16::<4>(lo),
        _mm256_srli_epi16::<4>(lo2),
    ]
}

/// The 32 nibbles of 16 bytes in element order (low nibbles, then high), one byte each.
#[target_feature(enable = "avx2")]
#[inline]
fn nibble_bytes(qs: &[u8]) -> __m256i {
    let raw = load16(qs);
    let both = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(raw), _mm_srli_epi16::<4>(raw));
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

/// Q4_0's 32 values less 8, one signed byte each.
#[target_feature(enable = "avx2")]
#[inline]
fn q4_0_bytes(b: &[u8]) -> __m256i {
    _mm256_sub_epi8(nibble_bytes(&b[2..18]), _mm256_set1_epi8(8))
}

impl Blocks for Q4_0 {
    const BYTES: usize = 18;
    const GROUPS: usize = 1;
    one_f16_scale!();
    one_group!(q4_0_bytes);
    #[inline(always)]
    unsafe fn group(b: &[u8], d: &f32, _g: usize) -> [__m256; 4] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let (d, eight) = (_mm256_set1_ps(*d), _mm256_set1_epi32(8));
            let q = nibbles32(&b[2..18]);
            [
                scaled(_mm256_sub_epi32(q[0], eight), d),
                scaled(_mm256_sub_epi32(q[1], eight), d),
                scaled(_mm256_sub_epi32(q[2], eight), d),
                scaled(_mm256_sub_epi32(q[3], eight), d),
            ]
        }
    }
}

/// Q5_0's 32 values less 16, one signed byte each: the nibbles, and bit `i` of the u32 `qh`
/// as element `i`'s 16.
#[target_feature(enable = "avx2")]
#[inline]
fn q5_0_bytes(b: &[u8]) -> __m256i {
    let qh = _mm256_set1_epi32(i32::from_le_bytes([b[2], b[3], b[4], b[5]]));
    // Byte i takes byte i / 8 of qh, then tests its bit i % 8.
    let spread = _mm256_shuffle_epi8(
        qh,
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    let fifth = _mm256_and_si256(set, _mm256_set1_epi8(16));
    let q = _mm256_or_si256(nibble_bytes(&b[6..22]), fifth);
    _mm256_sub_epi8(q, _mm256_set1_epi8(16))
}

impl Blocks for Q5_0 {
    const BYTES: usize = 22;
    const GROUPS: usize = 1;
    one_f16_scale!();
    one_group!(q5_0_bytes);
    #[inline(always)]
    unsafe fn group(b: &[u8], d: &f32, _g: usize) -> [__m256; 4] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let d = _mm256_set1_ps(*d);
            let qh = _mm256_set1_epi32(i32::from_le_bytes([b[2], b[3], b[4], b[5]]));
            let sixteen = _mm256_set1_epi32(16);
            let q = nibbles32(&b[6..22]);
            // Bits 8i..8i + 8 of qh, one per lane: lane l of vector i tests bit 8i + l.
            let lane = _mm256_sllv_epi32(
                _mm256_set1_epi32(1),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            );
            let masks = [
                lane,
                _mm256_slli_epi32::<8>(lane),
                _mm256_slli_epi32::<16>(lane),
                _mm256_slli_epi32::<24>(lane),
            ];
            let mut out = [_mm256_setzero_ps(); 4];
            for i in 0..4 {
                let set = _mm256_cmpeq_epi32(_mm256_and_si256(qh, masks[i]), masks[i]);
                let fifth = _mm256_and_si256(set, sixteen);
                out[i] = scaled(_mm256_sub_epi32(_mm256_or_si256(q[i], fifth), sixteen), d);
            }
            out
        }
    }
}

/// The nibbles `(v >> shift) & 15` of each byte of `v`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn nibbles(v: __m256i, shift: i32) -> __m256i {
    let shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(shift));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

/// The four groups of eight bytes of `v` widened to i32 lanes (signed).
#[target_feature(enable = "avx2")]
#[inline]
fn widen_i8(v: __m256i) -> [__m256i; 4] {
    let lo = _mm256_castsi256_si128(v);
    let hi = _mm256_extracti128_si256::<1>(v);
    [
        _mm256_cvtepi8_epi32(lo),
        _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(lo)),
        _mm256_cvtepi8_epi32(hi),
        _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(hi)),
    ]
}

/// The four groups of eight bytes of `v` widened to i32 lanes (unsigned).
#[target_feature(enable = "avx2")]
#[inline]
fn widen_u8(v: __m256i) -> [__m256i; 4] {
    let lo = _mm256_castsi256_si128(v);
    let hi = _mm256_extracti128_si256::<1>(v);
    [
        _mm256_cvtepu8_epi32(lo),
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(lo)),
        _mm256_cvtepu8_epi32(hi),
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(hi)),
    ]
}

/// What Q4_K and Q5_K share: [`k_group_factors`]' pairs (scalar, or unpacked in vector
/// registers), each group's values `ds * q - dm` from its `group_i8`.
macro_rules! k_group_scales {
    () => {
        /// [`k_group_factors`]' pairs.
        type Shared = [f32; 16];
        #[inline(always)]
        fn prepare(b: &[u8]) -> [f32; 16] {
            k_group_factors(b)
        }
        #[inline(always)]
        unsafe fn prepare_f16c(b: &[u8]) -> [f32; 16] {
            // SAFETY: the caller guarantees AVX2 and F16C.
            unsafe { k_group_factors_f16c(b) }
        }
        const AFFINE: bool = true;
        #[inline(always)]
        unsafe fn group(b: &[u8], f: &[f32; 16], g: usize) -> [__m256; 4] {
            // SAFETY: the caller guarantees AVX2.
            unsafe {
                let (ds, dm) = (_mm256_set1_ps(f[2 * g]), _mm256_set1_ps(f[2 * g + 1]));
                affine4(widen_u8(Self::group_i8(b, g)), ds, dm)
            }
        }
        #[inline(always)]
        fn factors(f: &[f32; 16], g: usize) -> [(f32, f32); 2] {
            [(f[2 * g], f[2 * g + 1]); 2]
        }
    };
}

impl Blocks for Q4K {
    const BYTES: usize = 144;
    const GROUPS: usize = 8;
    k_group_scales!();
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles(load32(&b[16 + 32 * (g / 2)..]), 4 * (g as i32 % 2)) }
    }
}

impl Blocks for Q5K {
    const BYTES: usize = 176;
    const GROUPS: usize = 8;
    k_group_scales!();
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let low = nibbles(load32(&b[48 + 32 * (g / 2)..]), 4 * (g as i32 % 2));
            let qh = load32(&b[16..48]);
            let bit = _mm256_and_si256(
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(g as i32)),
                _mm256_set1_epi8(1),
            );
            _mm256_or_si256(low, _mm256_slli_epi16::<4>(bit))
        }
    }
}

impl Blocks for Q6K {
    const BYTES: usize = 210;
    const GROUPS: usize = 8;
    /// `d * scale` of each 16 elements.
    type Shared = [f32; 16];
    #[inline(always)]
    fn prepare(b: &[u8]) -> [f32; 16] {
        let d = half(b, 208);
        std::array::from_fn(|i| d * f32::from(b[192 + i] as i8))
    }
    #[inline(always)]
    unsafe fn prepare_f16c(b: &[u8]) -> [f32; 16] {
        // SAFETY: the caller guarantees AVX2 and F16C.
        unsafe { q6_k_scales_f16c(b) }
    }
    #[inline(always)]
    unsafe fn group(b: &[u8], ds: &[f32; 16], c: usize) -> [__m256; 4] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let v = widen_i8(Self::group_i8(b, c));
            let (d0, d1) = (_mm256_set1_ps(ds[2 * c]), _mm256_set1_ps(ds[2 * c + 1]));
            [
                scaled(v[0], d0),
                scaled(v[1], d0),
                scaled(v[2], d1),
                scaled(v[3], d1),
            ]
        }
    }
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], c: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let (h, s) = (c / 4, c % 4);
            let low = nibbles(load32(&b[64 * h + 32 * (s % 2)..]), 4 * (s as i32 / 2));
            let high = _mm256_and_si256(
                _mm256_srl_epi16(load32(&b[128 + 32 * h..]), _mm_cvtsi32_si128(2 * s as i32)),
                _mm256_set1_epi8(3),
            );
            let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
            // 0..63 less 32 fits a signed byte.
            _mm256_sub_epi8(q, _mm256_set1_epi8(32))
        }
    }
    #[inline(always)]
    fn factors(ds: &[f32; 16], c: usize) -> [(f32, f32); 2] {
        [(ds[2 * c], 0.0), (ds[2 * c + 1], 0.0)]
    }
}

/// Bytes `b[..32]` as one vector.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn load32(b: &[u8]) -> __m256i {
    let b = &b[..32];
    // SAFETY: `b` holds exactly 32 bytes (one unaligned load).
    unsafe { _mm256_loadu_si256(b.as_ptr().cast::<__m256i>()) }
}

/// Bytes `b[..16]` as one vector.
#[target_feature(enable = "avx2")]
#[inline]
fn load16(b: &[u8]) -> __m128i {
    let b = &b[..16];
    // SAFETY: `b` holds exactly 16 bytes (one unaligned load).
    unsafe { _mm_loadu_si128(b.as_ptr().cast::<__m128i>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bitwise equal, or both NaN (F16C quiets a signalling NaN's payload).
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// The K formats' scales unpacked in vector registers are the scalar ones: every f16 bit
    /// pattern as `d` (and as `dmin`, beside it), every byte value in every scale byte.
    #[test]
    fn vector_k_scales_are_the_scalar_ones_for_every_scale_byte_and_f16() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")) {
            return;
        }
        let mut q4k = [0u8; 144];
        let mut q6k = [0u8; 210];
        for bits in 0..=u16::MAX {
            let other = bits.rotate_left(7) ^ 0x3c00;
            q4k[..2].copy_from_slice(&bits.to_le_bytes());
            q4k[2..4].copy_from_slice(&other.to_le_bytes());
            q6k[208..].copy_from_slice(&bits.to_le_bytes());
            // Byte i of the scales takes every value as `bits` runs through 256 of them.
            let at = |i: usize| (bits as usize).wrapping_mul(37).wrapping_add(i * 101) as u8;
            for i in 0..12 {
                q4k[4 + i] = at(i);
            }
            for i in 0..16 {
                q6k[192 + i] = at(i);
            }
            let (scalar, vector) = (<Q4K as Blocks>::prepare(&q4k), {
                // SAFETY: AVX2 and F16C detected above.
                unsafe { <Q4K as Blocks>::prepare_f16c(&q4k) }
            });
            for (i, (&s, &v)) in scalar.iter().zip(&vector).enumerate() {
                assert!(same(s, v), "Q4_K bits {bits:#06x} factor {i}");
            }
            let scalar = <Q6K as Blocks>::prepare(&q6k);
            // SAFETY: AVX2 and F16C detected above.
            let vector = unsafe { <Q6K as Blocks>::prepare_f16c(&q6k) };
            for (i, (&s, &v)) in scalar.iter().zip(&vector).enumerate() {
                assert!(same(s, v), "Q6_K bits {bits:#06x} scale {i}");
            }
        }
    }

    /// The kernels pick the table, F16C or the software conversion by path and format, so all
    /// must give every scale the same bits.
    #[test]
    fn table_and_f16c_scales_are_the_software_scales_for_every_bit_pattern() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")) {
            return;
        }
        let mut block = [0u8; 34];
        for bits in 0..=u16::MAX {
            block[..2].copy_from_slice(&bits.to_le_bytes());
            let software = <Q8_0 as Blocks>::prepare(&block);
            // SAFETY: AVX2 and F16C detected above.
            let f16c = unsafe { <Q8_0 as Blocks>::prepare_f16c(&block) };
            assert!(same(f16c, software), "bits {bits:#06x}");
            // SAFETY: as above (the table is read the same way on every CPU).
            let table = unsafe { <Q8_0 as Blocks>::prepare_table(&block, super::super::halves()) };
            assert_eq!(
                table.to_bits(),
                software.to_bits(),
                "table, bits {bits:#06x}"
            );
        }
    }
}
