//! The block decoders on AVX2: eight values per vector, the same IEEE operations as the scalar
//! decoders in the parent module (a multiply, then for the K formats a separate subtract), so
//! every value keeps its bits. Integer work (nibbles, fifth bits, offsets) is exact in any
//! order.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128, __m128i, __m256, __m256i, _mm256_and_si256, _mm256_andnot_si256, _mm256_blend_epi32,
    _mm256_broadcastsd_pd, _mm256_broadcastsi128_si256, _mm256_castpd_ps, _mm256_cmpeq_epi8,
    _mm256_cvtepi32_ps, _mm256_cvtepi8_epi32, _mm256_cvtepu8_epi32, _mm256_fmadd_ps,
    _mm256_loadu_si256, _mm256_mul_ps, _mm256_or_si256, _mm256_permute4x64_epi64,
    _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_set1_epi8, _mm256_set1_ps, _mm256_setr_epi64x,
    _mm256_setr_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_slli_epi16,
    _mm256_srl_epi16, _mm256_srlv_epi64, _mm256_storeu_ps, _mm256_sub_epi8, _mm_and_si128,
    _mm_blend_epi32, _mm_castps_pd, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32,
    _mm_loadu_si128, _mm_mul_ps, _mm_or_si128, _mm_set1_epi8, _mm_setr_epi32, _mm_setr_epi8,
    _mm_setr_ps, _mm_shuffle_epi32, _mm_shuffle_epi8, _mm_srli_epi32, _mm_srli_si128,
    _mm_srlv_epi32,
};

use super::{decode_block, for_blocks, half, k_group_factors, Halves};
use crate::kernels::dtype::DType;
use crate::kernels::simd::top_byte_controls;

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
    /// [`Blocks::prepare_f16c`] with every `ds` divided by 2^24 (not `dm`): the factors that
    /// meet [`tops`]' `q · 2^24` with no multiply of their own. A one-scale format reads its
    /// scale from `untopped`, [`super::untopped_halves`]. Exact, as [`UNTOP`] says.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn prepare_untopped(b: &[u8], untopped: &Halves) -> Self::Shared;
    /// Elements `32 g .. 32 g + 32` of block `b`: [`Blocks::halves`]' integers, widened by
    /// [`tops`] and scaled by [`Blocks::factors`].
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[inline(always)]
    unsafe fn group(b: &[u8], shared: &Self::Shared, g: usize) -> [__m256; 4] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let [lo, hi] = Self::halves(b, g);
            from_top(tops(lo, hi), Self::factors(shared, g), Self::AFFINE, UNTOP)
        }
    }
    /// Whether a value is `ds * q - dm` (the K formats with minimums) rather than `ds * q`.
    const AFFINE: bool = false;
    /// Whether [`lean_group`] (the AVX2 register kernels and strips) decodes this format
    /// through [`Blocks::paired`] rather than [`Blocks::halves`], x then read in that order
    /// ([`super::gemv`]).
    const PAIRED: bool = false;
    /// Group `g`'s 32 integers `q` as [`paired_tops`] takes them: elements 0-7 then 16-23 in
    /// the low half, 8-15 then 24-31 in the high half. By default [`Blocks::group_i8`] with its
    /// middle quarters swapped (one cross-half permute).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn paired(b: &[u8], g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_permute4x64_epi64::<0b11_01_10_00>(Self::group_i8(b, g)) }
    }
    /// Group `g`'s 32 integers `q` (one signed byte each) as [`tops`] takes them: elements
    /// 0-15 in both halves of the first vector, 16-31 in both halves of the second. Built from
    /// two broadcast loads, with no shuffle across the halves. (No `array::from_fn` or `map`
    /// in these: their closures run inside generic functions compiled without the callers'
    /// features, which cannot inline intrinsics; measured, each vector then costs a call.)
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn halves(b: &[u8], g: usize) -> [__m256i; 2];
    /// Group `g`'s 32 integers `q` in element order, which [`Blocks::factors`] turn into its
    /// values: by default [`Blocks::halves`]' first half and second half.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let [lo, hi] = Self::halves(b, g);
            _mm256_blend_epi32::<0b1111_0000>(lo, hi)
        }
    }
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

/// The bits of the f16 at the start of `b`, in one 16-bit load. Written as
/// `u16::from_le_bytes([b[0], b[1]])`, LLVM read the two bytes apart and folded the high one
/// into the table's address (two loads, a shift and an add a row and block): one x row
/// against Q8_0 `[10240, 2560]` took 646-648 µs against 580-586 in one load, Q4_0 451-456
/// against 438-448 (AVX-512, Zen 5, one thread, builds alternating).
#[inline(always)]
fn f16_bits(b: &[u8]) -> u16 {
    u16::from_le_bytes(b[..2].try_into().expect("a block holds its f16"))
}

/// The f16 at the start of block `b` (its scale) as f32: F16C's conversion, exact like the
/// scalar one.
#[target_feature(enable = "f16c")]
#[inline]
pub(super) fn half_f16c(b: &[u8]) -> f32 {
    let bits = u32::from(f16_bits(b));
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
///
/// `d` is first multiplied by `unit`, a power of two ([`UNTOP`] for factors that meet [`tops`]'
/// values): each `d * scale` is exact (an f16 times a 6-bit integer), so this is the product's
/// value times `unit`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn k_group_factors_f16c(b: &[u8], unit: f32) -> [f32; 16] {
    let (pairs, d_dmin) = k_group_pairs(b);
    let d_dmin = _mm_mul_ps(d_dmin, _mm_setr_ps(unit, 1.0, 1.0, 1.0));
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

/// The K formats' sixteen 6-bit fields of block `b` in pair order, `[sc 0, m 0, sc 1, m 1,
/// ...]` as bytes, and `(d, dmin)` in the first two f32 lanes: [`k_group_factors_f16c`]'s
/// integers, for its tail and the AVX-512 one.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn k_group_pairs(b: &[u8]) -> (__m128i, __m128) {
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
    (pairs, _mm_cvtph_ps(load_u32(&b[..4])))
}

/// [`Q6K`]'s sixteen `d * scale` in vector registers, as one function with F16C enabled: the
/// gemv's callers prepare a block inside a closure, which has no target features of its own, and
/// there each of the steps here was a call of its own (one x row against Q6_K `[640, 2048]`
/// took 280-325 µs on an AMD EPYC, Zen 4, one thread, against 101 µs as one call).
///
/// `d` is first multiplied by `unit`, a power of two, as in [`k_group_factors_f16c`] (`d` times
/// a signed byte is exact too).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn q6_k_scales_f16c(b: &[u8], unit: f32) -> [f32; 16] {
    // `b` is one whole block (210 bytes), so the loads of `load16` stay inside it.
    let d = _mm256_set1_ps(half_f16c(&b[208..]) * unit);
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

/// `1 / 2^24`: what a scale is multiplied by to meet [`tops`]' values, which are `q · 2^24`.
const UNTOP: f32 = 1.0 / 16_777_216.0;

/// The `vpshufb` controls of [`tops`]: `[0]` puts bytes 0-7 of the sixteen in both halves of a
/// vector into the top byte of one 32-bit lane each (the other three bytes zero), `[1]` bytes
/// 8-15.
#[target_feature(enable = "avx2")]
#[inline]
fn top_controls() -> [__m256i; 2] {
    const Z: i8 = -128;
    [
        _mm256_setr_epi8(
            Z, Z, Z, 0, Z, Z, Z, 1, Z, Z, Z, 2, Z, Z, Z, 3, Z, Z, Z, 4, Z, Z, Z, 5, Z, Z, Z, 6, Z,
            Z, Z, 7,
        ),
        _mm256_setr_epi8(
            Z, Z, Z, 8, Z, Z, Z, 9, Z, Z, Z, 10, Z, Z, Z, 11, Z, Z, Z, 12, Z, Z, Z, 13, Z, Z, Z,
            14, Z, Z, Z, 15,
        ),
    ]
}

/// The 32 signed bytes of `lo` and `hi` (each holding sixteen consecutive ones in both
/// halves: elements 0-15 and 16-31) as four vectors of eight consecutive values, each `q ·
/// 2^24`, exact. A byte moved to the top of its lane by one in-lane shuffle is already
/// sign-extended, times 2^24: AVX2's widening (`vpmovsxbd`) is two micro-ops on the shuffle
/// pipes of AMD's Zen 3, where it bound the one-row decode, and this is one.
#[target_feature(enable = "avx2")]
#[inline]
fn tops(lo: __m256i, hi: __m256i) -> [__m256; 4] {
    let [t0, t1] = top_controls();
    [
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(lo, t0)),
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(lo, t1)),
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(hi, t0)),
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(hi, t1)),
    ]
}

/// [`Blocks::paired`]' 32 signed bytes as four vectors of `q · 2^24`, exact, like [`tops`]
/// (by [`top_byte_controls`]):
/// elements 0-3 and 8-11, 4-7 and 12-15, 16-19 and 24-27, 20-23 and 28-31. Each lane of a
/// vector holds the same element of sixteen as that lane of the vector two before, so two
/// accumulators still add each lane's elements in ascending order, with x read in the same
/// order ([`super::gemv`]). The bit twiddling before this runs once over all 32 bytes,
/// where [`Blocks::halves`] repeat it per half.
#[target_feature(enable = "avx2")]
#[inline]
fn paired_tops(p: __m256i) -> [__m256; 4] {
    let [c0, c1, c2, c3] = top_byte_controls();
    [
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(p, c0)),
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(p, c1)),
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(p, c2)),
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(p, c3)),
    ]
}

/// The values of [`tops`]' `q · 2^24` with the factors `[(ds, dm); 2]` of the first and
/// last sixteen: `(ds / 2^24) · (q · 2^24)`, less `dm` if `affine`. `ds / 2^24` is exact (a
/// block's nonzero `ds` is at least 2^-24, f16's least), so each product is the real number
/// `ds · q` rounded once: the bits of `ds · q`.
///
/// Less `dm` in the same instruction, a fused multiply-add: the decoders' `ds · q` is exact
/// (an f16 times a 6-bit scale times a 4- or 5-bit level, at most 22 significant bits), so
/// rounding `ds · q - dm` once gives the bits of the multiply and then the subtract that
/// gguf-py does, and a group's four subtracts are gone.
///
/// `untop` is [`UNTOP`], or 1 where the factors come already divided by 2^24
/// ([`super::untopped_halves`]).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn from_top(
    v: [__m256; 4],
    f: [(f32, f32); 2],
    affine: bool,
    untop: f32,
) -> [__m256; 4] {
    let d = [
        _mm256_set1_ps(f[0].0 * untop),
        _mm256_set1_ps(f[1].0 * untop),
    ];
    if affine {
        let m = [_mm256_set1_ps(-f[0].1), _mm256_set1_ps(-f[1].1)];
        [
            _mm256_fmadd_ps(d[0], v[0], m[0]),
            _mm256_fmadd_ps(d[0], v[1], m[0]),
            _mm256_fmadd_ps(d[1], v[2], m[1]),
            _mm256_fmadd_ps(d[1], v[3], m[1]),
        ]
    } else {
        [
            _mm256_mul_ps(d[0], v[0]),
            _mm256_mul_ps(d[0], v[1]),
            _mm256_mul_ps(d[1], v[2]),
            _mm256_mul_ps(d[1], v[3]),
        ]
    }
}

/// Elements `32 g .. 32 g + 32` of block `b` in the fewest operations, as the AVX2 register
/// kernels ([`super::gemv`]) and strips ([`super::strip_avx2`]) take them: through
/// [`Blocks::paired`] and [`paired_tops`] (in their order) where the format is
/// [`Blocks::PAIRED`], else through [`Blocks::halves`] and [`tops`], with factors from
/// [`Blocks::prepare_untopped`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(super) unsafe fn lean_group<B: Blocks>(
    b: &[u8],
    untopped: &B::Shared,
    g: usize,
) -> [__m256; 4] {
    // SAFETY: the caller guarantees AVX2.
    unsafe {
        let q = if B::PAIRED {
            paired_tops(B::paired(b, g))
        } else {
            let [lo, hi] = B::halves(b, g);
            tops(lo, hi)
        };
        from_top(q, B::factors(untopped, g), B::AFFINE, 1.0)
    }
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
            DType::Q4_1 => {
                type $B = $crate::kernels::quant::avx2::Q4_1;
                $body
            }
            DType::Q5_1 => {
                type $B = $crate::kernels::quant::avx2::Q5_1;
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
            halves[usize::from(f16_bits(b))]
        }
        #[inline(always)]
        unsafe fn prepare_untopped(b: &[u8], untopped: &Halves) -> f32 {
            untopped[usize::from(f16_bits(b))]
        }
    };
}

pub(crate) struct Q8_0;
pub(crate) struct Q4_0;
pub(crate) struct Q5_0;
pub(crate) struct Q4_1;
pub(crate) struct Q5_1;
pub(crate) struct Q4K;
pub(crate) struct Q5K;
pub(crate) struct Q6K;

/// `factors` of a format with one scale per block of 32.
macro_rules! one_group {
    () => {
        #[inline(always)]
        fn factors(d: &f32, _g: usize) -> [(f32, f32); 2] {
            [(*d, 0.0); 2]
        }
    };
}

impl Blocks for Q8_0 {
    const BYTES: usize = 34;
    const GROUPS: usize = 1;
    one_f16_scale!();
    one_group!();
    #[inline(always)]
    unsafe fn halves(b: &[u8], _g: usize) -> [__m256i; 2] {
        // SAFETY: the caller guarantees AVX2.
        unsafe { [broadcast16(&b[2..18]), broadcast16(&b[18..34])] }
    }
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], _g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { load32(&b[2..34]) }
    }
}

/// `vpshufb` of `a` by `control`, as written. Given a broadcast load and a constant control
/// that only moves whole 8-byte quarters, LLVM folds the two into a plain load and one
/// `vpermq`, which crosses the halves: on AMD's Zen 3 that issues one every 1.25 cycles
/// (measured: eight independent ones in 10 cycles, against 4 for eight `vpshufb`), and it sat
/// in the chain of every Q5_0 block. With the shuffle kept, one x row against Q5_0
/// `[2048, 640]` took 131.5 µs against 140.2 at best on one thread (`kernel_bench`, 5 rounds
/// alternating), and 4 and 8 rows 2 % less; 32 rows level.
#[target_feature(enable = "avx2")]
#[inline]
fn in_lane_shuffle(a: __m256i, control: __m256i) -> __m256i {
    let out: __m256i;
    // SAFETY: one register instruction of AVX2 (which this function requires); no memory,
    // stack or flags touched.
    unsafe {
        std::arch::asm!(
            "vpshufb {out}, {a}, {control}",
            a = in(ymm_reg) a,
            control = in(ymm_reg) control,
            out = lateout(ymm_reg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// Q5_0's sixteen bytes `qs` (byte `i`: element `i` low, `16 + i` high) as the
/// nibbles of [`Blocks::paired`]' order: bytes 0-7 of `qs` spread over the low half, 8-15
/// over the high, low nibbles in the first eight bytes of a half, high in the last eight.
#[target_feature(enable = "avx2")]
#[inline]
fn paired_nibbles(qs: &[u8]) -> __m256i {
    let spread = in_lane_shuffle(
        broadcast16(qs),
        _mm256_setr_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10,
            11, 12, 13, 14, 15,
        ),
    );
    // A 64-bit shift moves the next byte's low bits into each byte's top; the mask drops them.
    let shifted = _mm256_srlv_epi64(spread, _mm256_setr_epi64x(0, 4, 0, 4));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

impl Blocks for Q4_0 {
    const BYTES: usize = 18;
    const GROUPS: usize = 1;
    one_f16_scale!();
    one_group!();
    #[inline(always)]
    unsafe fn halves(b: &[u8], _g: usize) -> [__m256i; 2] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            // Byte i holds element i (low nibble) and element 16 + i (high).
            let qs = broadcast16(&b[2..18]);
            let eight = _mm256_set1_epi8(8);
            [
                _mm256_sub_epi8(nibbles(qs, 0), eight),
                _mm256_sub_epi8(nibbles(qs, 4), eight),
            ]
        }
    }
}

/// For each byte `i` of a vector, all ones where the fifth bit of its element is clear, else
/// zero: `qh` is a block's four bytes of fifth bits, and `from[i]` names the one holding byte
/// `i`'s bit, bit `i % 8` of it.
#[target_feature(enable = "avx2")]
#[inline]
fn fifth_clear(qh: &[u8], from: [i8; 32]) -> __m256i {
    let qh = _mm256_set1_epi32(i32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]));
    // SAFETY: `from` is 32 bytes (one unaligned load).
    let from = unsafe { _mm256_loadu_si256(from.as_ptr().cast::<__m256i>()) };
    let spread = _mm256_shuffle_epi8(qh, from);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), _mm256_setzero_si256())
}

/// For each byte `i` of a vector, `0xf0` where the fifth bit of its element is clear, else
/// zero ([`fifth_clear`] of Q5_0's `qh`, block `b`'s bytes 2-5).
#[target_feature(enable = "avx2")]
#[inline]
fn q5_0_clear(b: &[u8], from: [i8; 32]) -> __m256i {
    _mm256_and_si256(fifth_clear(&b[2..6], from), _mm256_set1_epi8(-16))
}

/// `[a; 8]`, `[b; 8]`, `[c; 8]`, `[d; 8]`: which byte of `qh` each byte of a vector reads.
const fn qh_bytes(a: i8, b: i8, c: i8, d: i8) -> [i8; 32] {
    let mut out = [0i8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = [a, b, c, d][i / 8];
        i += 1;
    }
    out
}

impl Blocks for Q5_0 {
    const BYTES: usize = 22;
    const GROUPS: usize = 1;
    const PAIRED: bool = true;
    one_f16_scale!();
    one_group!();
    #[inline(always)]
    unsafe fn paired(b: &[u8], _g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            // Elements 0-7 and 16-23 in the low half (qh bytes 0 and 2), 8-15 and 24-31 in
            // the high half (bytes 1 and 3).
            let clear = q5_0_clear(b, const { qh_bytes(0, 2, 1, 3) });
            _mm256_or_si256(paired_nibbles(&b[6..22]), clear)
        }
    }
    #[inline(always)]
    unsafe fn halves(b: &[u8], _g: usize) -> [__m256i; 2] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            // Bit i of qh is element i's 16. Each byte takes the byte of qh that holds its bit;
            // where the bit is clear, the value is the nibble less 16: the nibble with the top
            // four bits set, one `or`.
            let lo = q5_0_clear(b, const { qh_bytes(0, 1, 0, 1) });
            let hi = q5_0_clear(b, const { qh_bytes(2, 3, 2, 3) });
            nibbles_with(&b[6..22], lo, hi)
        }
    }
}

/// `prepare` and the rest of a format whose blocks share an f16 scale `d` (byte 0) and an f16
/// minimum `m` (byte 2): each value is `d * q + m`, computed as the K formats' `ds * q - dm`
/// with `dm = -m` (the same IEEE operation, so the same bits as gguf-py's sum).
macro_rules! scale_and_minimum {
    () => {
        /// `(d, -m)`.
        type Shared = [f32; 2];
        #[inline(always)]
        fn prepare(b: &[u8]) -> [f32; 2] {
            let (d, dm) = super::scale_and_negated_minimum(b);
            [d, dm]
        }
        #[inline(always)]
        unsafe fn prepare_table(b: &[u8], halves: &Halves) -> [f32; 2] {
            // Both f16s in one load (as [`f16_bits`] says): one x row against Q4_1 `[10240,
            // 2560]` took 683-689 µs against 765-777, Q5_1 785-803 against 896-933 (AVX-512,
            // Zen 5, one thread, builds alternating).
            let both = u32::from_le_bytes(b[..4].try_into().expect("a block holds its scales"));
            [
                halves[(both & 0xffff) as usize],
                -halves[(both >> 16) as usize],
            ]
        }
        #[inline(always)]
        unsafe fn prepare_untopped(b: &[u8], untopped: &Halves) -> [f32; 2] {
            // Only the scale meets `q · 2^24`; the minimum is subtracted as it is.
            [untopped[usize::from(f16_bits(b))], -half(b, 2)]
        }
        const AFFINE: bool = true;
        #[inline(always)]
        fn factors(f: &[f32; 2], _g: usize) -> [(f32, f32); 2] {
            [(f[0], f[1]); 2]
        }
    };
}

impl Blocks for Q4_1 {
    const BYTES: usize = 20;
    const GROUPS: usize = 1;
    scale_and_minimum!();
    #[inline(always)]
    unsafe fn halves(b: &[u8], _g: usize) -> [__m256i; 2] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            // Byte i holds element i (low nibble) and element 16 + i (high).
            let qs = broadcast16(&b[4..20]);
            [nibbles(qs, 0), nibbles(qs, 4)]
        }
    }
}

/// For each byte `i` of a vector, `0x10` where the fifth bit of its element is set, else
/// zero ([`fifth_clear`] of Q5_1's `qh`, block `b`'s bytes 4-7).
#[target_feature(enable = "avx2")]
#[inline]
fn q5_1_set(b: &[u8], from: [i8; 32]) -> __m256i {
    _mm256_andnot_si256(fifth_clear(&b[4..8], from), _mm256_set1_epi8(0x10))
}

impl Blocks for Q5_1 {
    const BYTES: usize = 24;
    const GROUPS: usize = 1;
    scale_and_minimum!();
    #[inline(always)]
    unsafe fn halves(b: &[u8], _g: usize) -> [__m256i; 2] {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            // Bit i of qh is element i's 16.
            let lo = q5_1_set(b, const { qh_bytes(0, 1, 0, 1) });
            let hi = q5_1_set(b, const { qh_bytes(2, 3, 2, 3) });
            nibbles_with(&b[8..24], lo, hi)
        }
    }
}

/// [`Blocks::halves`] of a group whose nibbles are the sixteen bytes `qs` (byte `i`: element
/// `i` low, `16 + i` high), each half `or`-ed with its fifth bits' bytes `lo` and `hi`.
#[target_feature(enable = "avx2")]
#[inline]
fn nibbles_with(qs: &[u8], lo: __m256i, hi: __m256i) -> [__m256i; 2] {
    let qs = broadcast16(qs);
    [
        _mm256_or_si256(nibbles(qs, 0), lo),
        _mm256_or_si256(nibbles(qs, 4), hi),
    ]
}

/// The nibbles `(v >> shift) & 15` of each byte of `v`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn nibbles(v: __m256i, shift: i32) -> __m256i {
    let shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(shift));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

/// What Q4_K and Q5_K share: [`k_group_factors`]' pairs (scalar, or unpacked in vector
/// registers), each group's values `ds * q - dm` from its [`Blocks::halves`].
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
            unsafe { k_group_factors_f16c(b, 1.0) }
        }
        #[inline(always)]
        unsafe fn prepare_untopped(b: &[u8], _untopped: &Halves) -> [f32; 16] {
            // SAFETY: the caller guarantees AVX2 and F16C.
            unsafe { k_group_factors_f16c(b, UNTOP) }
        }
        const AFFINE: bool = true;
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
    unsafe fn halves(b: &[u8], g: usize) -> [__m256i; 2] {
        let q = &b[16 + 32 * (g / 2)..][..32];
        let shift = 4 * (g as i32 % 2);
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            [
                nibbles(broadcast16(&q[..16]), shift),
                nibbles(broadcast16(&q[16..]), shift),
            ]
        }
    }
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles(load32(&b[16 + 32 * (g / 2)..]), 4 * (g as i32 % 2)) }
    }
}

/// Q5_K's group `g` from its low bits' bytes `ql` and the high bits' `qh` (the same positions
/// of both).
#[target_feature(enable = "avx2")]
#[inline]
fn q5_k_bytes(ql: __m256i, qh: __m256i, g: usize) -> __m256i {
    let low = nibbles(ql, 4 * (g as i32 % 2));
    let bit = _mm256_and_si256(
        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(g as i32)),
        _mm256_set1_epi8(1),
    );
    _mm256_or_si256(low, _mm256_slli_epi16::<4>(bit))
}

impl Blocks for Q5K {
    const BYTES: usize = 176;
    const GROUPS: usize = 8;
    const PAIRED: bool = true;
    k_group_scales!();
    #[inline(always)]
    unsafe fn halves(b: &[u8], g: usize) -> [__m256i; 2] {
        let (ql, qh) = (&b[48 + 32 * (g / 2)..][..32], &b[16..48]);
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            [
                q5_k_bytes(broadcast16(&ql[..16]), broadcast16(&qh[..16]), g),
                q5_k_bytes(broadcast16(&ql[16..]), broadcast16(&qh[16..]), g),
            ]
        }
    }
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], g: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { q5_k_bytes(load32(&b[48 + 32 * (g / 2)..]), load32(&b[16..48]), g) }
    }
}

/// Q6_K's group `c` (its 32 values less 32) from its low bits' bytes `ql` and the high bits'
/// `qh` (the same positions of both).
#[target_feature(enable = "avx2")]
#[inline]
fn q6_k_bytes(ql: __m256i, qh: __m256i, c: usize) -> __m256i {
    let s = c % 4;
    let low = nibbles(ql, 4 * (s as i32 / 2));
    let high = _mm256_and_si256(
        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s as i32)),
        _mm256_set1_epi8(3),
    );
    let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
    // 0..63 less 32 fits a signed byte.
    _mm256_sub_epi8(q, _mm256_set1_epi8(32))
}

impl Blocks for Q6K {
    const BYTES: usize = 210;
    const GROUPS: usize = 8;
    const PAIRED: bool = true;
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
        unsafe { q6_k_scales_f16c(b, 1.0) }
    }
    #[inline(always)]
    unsafe fn prepare_untopped(b: &[u8], _untopped: &Halves) -> [f32; 16] {
        // SAFETY: the caller guarantees AVX2 and F16C.
        unsafe { q6_k_scales_f16c(b, UNTOP) }
    }
    #[inline(always)]
    unsafe fn halves(b: &[u8], c: usize) -> [__m256i; 2] {
        let (h, s) = (c / 4, c % 4);
        let (ql, qh) = (&b[64 * h + 32 * (s % 2)..][..32], &b[128 + 32 * h..][..32]);
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            [
                q6_k_bytes(broadcast16(&ql[..16]), broadcast16(&qh[..16]), c),
                q6_k_bytes(broadcast16(&ql[16..]), broadcast16(&qh[16..]), c),
            ]
        }
    }
    #[inline(always)]
    unsafe fn group_i8(b: &[u8], c: usize) -> __m256i {
        let (h, s) = (c / 4, c % 4);
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            q6_k_bytes(
                load32(&b[64 * h + 32 * (s % 2)..]),
                load32(&b[128 + 32 * h..]),
                c,
            )
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

/// Bytes `b[..16]` in both halves of a vector (one broadcast load).
#[target_feature(enable = "avx2")]
#[inline]
fn broadcast16(b: &[u8]) -> __m256i {
    _mm256_broadcastsi128_si256(load16(b))
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

    /// Every format's block with every f16 bit pattern as its scale (and, rotated, as the K
    /// formats' minimum), one of its quantized bytes moving with the pattern so every level
    /// meets many scales, through `decode` and the scalar decoder: the same bits.
    fn holds_for_every_f16_scale(decode: impl Fn(DType, &[u8], &mut [f32])) {
        for dtype in DType::ALL.into_iter().filter(|d| d.is_quantized()) {
            let size = dtype.block_bytes();
            // Bytes that run through every value; the scales are written over them below.
            let mut block: Vec<u8> = (0..size).map(|i| (i * 37 + 11) as u8).collect();
            let n = dtype.block_elems();
            let (mut scalar, mut vector) = (vec![0.0f32; n], vec![0.0f32; n]);
            for bits in 0..=u16::MAX {
                let scale = bits.to_le_bytes();
                let other = bits.rotate_left(5).to_le_bytes();
                match dtype {
                    DType::Q6_K => block[208..210].copy_from_slice(&scale),
                    DType::Q4_K | DType::Q5_K => {
                        block[0..2].copy_from_slice(&scale);
                        block[2..4].copy_from_slice(&other);
                    }
                    _ => block[0..2].copy_from_slice(&scale),
                }
                block[(size - 1) / 2] = bits as u8;
                super::super::read(dtype, &block, 0, &mut scalar);
                decode(dtype, &block, &mut vector);
                for (i, (&s, &v)) in scalar.iter().zip(&vector).enumerate() {
                    assert!(same(s, v), "{dtype} scale {bits:#06x} element {i}: {s} {v}");
                }
            }
        }
    }

    fn has_avx2_fma_f16c() -> bool {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }

    /// A group's values come from `(ds / 2^24) · (q · 2^24)` ([`from_top`]), which is `ds · q`
    /// only if `ds / 2^24` is exact, and the K formats' `ds · q - dm` from one fused
    /// multiply-add, which is the multiply then the subtract only if `ds · q` is exact.
    #[test]
    fn values_through_the_top_byte_are_the_scalar_ones_for_every_f16_scale() {
        if !has_avx2_fma_f16c() {
            return;
        }
        // SAFETY: AVX2, FMA and F16C detected above.
        holds_for_every_f16_scale(|dtype, block, out| unsafe { read_avx2(dtype, block, 0, out) });
    }

    /// The decode of the AVX2 register kernels and strips ([`lean_group`]: factors divided by
    /// 2^24 beforehand, and for some formats the paired order) against the scalar decoder.
    #[test]
    fn the_gemv_decode_gives_the_scalar_bits_for_every_f16_scale() {
        if !has_avx2_fma_f16c() {
            return;
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        fn decode<B: Blocks>(block: &[u8], out: &mut [f32]) {
            // SAFETY: this function's features are the ones the decoders need.
            let shared = unsafe { B::prepare_untopped(block, super::super::untopped_halves()) };
            for (g, dst) in out.chunks_exact_mut(32).enumerate() {
                // SAFETY: as above.
                let v = unsafe { lean_group::<B>(block, &shared, g) };
                let mut lanes = [0.0f32; 32];
                for (v, o) in v.into_iter().zip(lanes.chunks_exact_mut(8)) {
                    // SAFETY: `o` holds exactly 8 f32s.
                    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
                }
                // The paired order, back in element order: each vector is two runs of four.
                let order: [usize; 8] = if B::PAIRED {
                    [0, 8, 4, 12, 16, 24, 20, 28]
                } else {
                    [0, 4, 8, 12, 16, 20, 24, 28]
                };
                for (i, &at) in order.iter().enumerate() {
                    dst[at..at + 4].copy_from_slice(&lanes[4 * i..4 * i + 4]);
                }
            }
        }
        holds_for_every_f16_scale(|dtype, block, out| {
            // SAFETY: AVX2, FMA and F16C detected above.
            unsafe { by_format!(dtype, B => decode::<B>(block, out), _f => unreachable!()) }
        });
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
