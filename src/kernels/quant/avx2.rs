//! The block decoders on AVX2: eight values per vector, the same IEEE operations as the scalar
//! decoders in the parent module (a multiply, then for the K formats a separate subtract), so
//! every value keeps its bits. Integer work (nibbles, fifth bits, offsets) is exact in any
//! order.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_and_si256, _mm256_castsi256_si128, _mm256_cmpeq_epi32,
    _mm256_cvtepi32_ps, _mm256_cvtepi8_epi32, _mm256_cvtepu8_epi32, _mm256_extracti128_si256,
    _mm256_loadu_si256, _mm256_mul_ps, _mm256_or_si256, _mm256_set1_epi32, _mm256_set1_epi8,
    _mm256_set1_ps, _mm256_setr_epi32, _mm256_slli_epi16, _mm256_srl_epi16, _mm256_srli_epi16,
    _mm256_storeu_ps, _mm256_sub_epi32, _mm256_sub_ps, _mm_cvtsi32_si128, _mm_loadl_epi64,
    _mm_loadu_si128, _mm_srli_si128,
};

use super::{decode_block, half, k_group_factors, MAX_BLOCK};
use crate::kernels::tensor::DType;

/// [`super::read`] with the block formats decoded eight values at a time. Callers outside this
/// module's features call it only after detecting AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn read_avx2(dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    let (per, size) = (dtype.block_elems(), dtype.block_bytes());
    if per == 1 {
        super::read(dtype, bytes, start, out);
        return;
    }
    let mut whole = [0.0f32; MAX_BLOCK];
    let (mut at, mut done) = (start, 0);
    while done < out.len() {
        let (block, within) = (at / per, at % per);
        let take = (per - within).min(out.len() - done);
        let src = &bytes[block * size..(block + 1) * size];
        if take == per {
            block_avx2(dtype, src, &mut out[done..done + per]);
        } else {
            block_avx2(dtype, src, &mut whole[..per]);
            out[done..done + take].copy_from_slice(&whole[within..within + take]);
        }
        at += take;
        done += take;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn block_avx2(dtype: DType, b: &[u8], out: &mut [f32]) {
    match dtype {
        DType::Q8_0 => q8_0(b, out),
        DType::Q4_0 => q4_0(b, out),
        DType::Q5_0 => q5_0(b, out),
        DType::Q4_K => q4_k(b, out),
        DType::Q5_K => q5_k(b, out),
        DType::Q6_K => q6_k(b, out),
        floats => decode_block(floats, b, out),
    }
}

/// Eight values `q` (i32 lanes) times `d` into `out[..8]`.
#[target_feature(enable = "avx2")]
fn store_scaled(q: __m256i, d: __m256, out: &mut [f32]) {
    let v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
    let out = &mut out[..8];
    // SAFETY: `out` holds exactly 8 f32s (one unaligned store).
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
}

/// Eight values `ds * q - dm` into `out[..8]`.
#[target_feature(enable = "avx2")]
fn store_affine(q: __m256i, ds: __m256, dm: __m256, out: &mut [f32]) {
    let v = _mm256_sub_ps(_mm256_mul_ps(ds, _mm256_cvtepi32_ps(q)), dm);
    let out = &mut out[..8];
    // SAFETY: `out` holds exactly 8 f32s (one unaligned store).
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
}

/// Bytes `b[..32]` as one vector.
#[target_feature(enable = "avx2")]
fn load32(b: &[u8]) -> __m256i {
    let b = &b[..32];
    // SAFETY: `b` holds exactly 32 bytes (one unaligned load).
    unsafe { _mm256_loadu_si256(b.as_ptr().cast::<__m256i>()) }
}

/// Bytes `b[..16]` as one vector.
#[target_feature(enable = "avx2")]
fn load16(b: &[u8]) -> __m128i {
    let b = &b[..16];
    // SAFETY: `b` holds exactly 16 bytes (one unaligned load).
    unsafe { _mm_loadu_si128(b.as_ptr().cast::<__m128i>()) }
}

/// The four groups of eight bytes of `v` widened to i32 lanes (unsigned).
#[target_feature(enable = "avx2")]
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

/// The nibbles `(v >> shift) & 15` of each byte of `v`.
#[target_feature(enable = "avx2")]
fn nibbles(v: __m256i, shift: i32) -> __m256i {
    let shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(shift));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

#[target_feature(enable = "avx2")]
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = _mm256_set1_ps(half(b, 0));
    for (i, o) in out[..32].chunks_exact_mut(8).enumerate() {
        let src = &b[2 + 8 * i..][..8];
        // SAFETY: `src` holds exactly 8 bytes (one unaligned 64-bit load).
        let raw = unsafe { _mm_loadl_epi64(src.as_ptr().cast::<__m128i>()) };
        store_scaled(_mm256_cvtepi8_epi32(raw), d, o);
    }
}

/// The 32 nibbles of 16 bytes in element order (low nibbles, then high), widened to i32 lanes.
#[target_feature(enable = "avx2")]
fn nibbles32(qs: &[u8]) -> [__m256i; 4] {
    let raw = load16(qs);
    let lo = _mm256_and_si256(_mm256_cvtepu8_epi32(raw), _mm256_set1_epi32(0x0f));
    let lo2 = _mm256_and_si256(
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(raw)),
        _mm256_set1_epi32(0x0f),
    );
    let hi = _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi32(raw));
    let hi2 = _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(raw)));
    [lo, lo2, hi, hi2]
}

#[target_feature(enable = "avx2")]
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = _mm256_set1_ps(half(b, 0));
    let eight = _mm256_set1_epi32(8);
    for (q, o) in nibbles32(&b[2..18])
        .into_iter()
        .zip(out[..32].chunks_exact_mut(8))
    {
        store_scaled(_mm256_sub_epi32(q, eight), d, o);
    }
}

#[target_feature(enable = "avx2")]
fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = _mm256_set1_ps(half(b, 0));
    let qh = _mm256_set1_epi32(i32::from_le_bytes([b[2], b[3], b[4], b[5]]));
    let sixteen = _mm256_set1_epi32(16);
    let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (i, (q, o)) in nibbles32(&b[6..22])
        .into_iter()
        .zip(out[..32].chunks_exact_mut(8))
        .enumerate()
    {
        // Bits 8i..8i + 8 of qh, one per lane, as 16 or 0.
        let mask = match i {
            0 => lanes,
            1 => _mm256_slli_epi16::<8>(lanes),
            2 => _mm256_setr_epi32(
                1 << 16,
                1 << 17,
                1 << 18,
                1 << 19,
                1 << 20,
                1 << 21,
                1 << 22,
                1 << 23,
            ),
            _ => _mm256_setr_epi32(
                1 << 24,
                1 << 25,
                1 << 26,
                1 << 27,
                1 << 28,
                1 << 29,
                1 << 30,
                i32::MIN,
            ),
        };
        let set = _mm256_cmpeq_epi32(_mm256_and_si256(qh, mask), mask);
        let fifth = _mm256_and_si256(set, sixteen);
        store_scaled(_mm256_sub_epi32(_mm256_or_si256(q, fifth), sixteen), d, o);
    }
}

#[target_feature(enable = "avx2")]
fn q4_k(b: &[u8], out: &mut [f32]) {
    let factors = k_group_factors(b);
    let qs = &b[16..144];
    for (g, group) in out[..256].chunks_exact_mut(32).enumerate() {
        let (ds, dm) = factors[g];
        let (ds, dm) = (_mm256_set1_ps(ds), _mm256_set1_ps(dm));
        let q = nibbles(load32(&qs[32 * (g / 2)..]), 4 * (g as i32 % 2));
        for (v, o) in widen_u8(q).into_iter().zip(group.chunks_exact_mut(8)) {
            store_affine(v, ds, dm, o);
        }
    }
}

#[target_feature(enable = "avx2")]
fn q5_k(b: &[u8], out: &mut [f32]) {
    let factors = k_group_factors(b);
    let (qh, qs) = (load32(&b[16..48]), &b[48..176]);
    let one = _mm256_set1_epi8(1);
    for (g, group) in out[..256].chunks_exact_mut(32).enumerate() {
        let (ds, dm) = factors[g];
        let (ds, dm) = (_mm256_set1_ps(ds), _mm256_set1_ps(dm));
        let low = nibbles(load32(&qs[32 * (g / 2)..]), 4 * (g as i32 % 2));
        let bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(g as i32)), one);
        let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(bit));
        for (v, o) in widen_u8(q).into_iter().zip(group.chunks_exact_mut(8)) {
            store_affine(v, ds, dm, o);
        }
    }
}

#[target_feature(enable = "avx2")]
fn q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
    let d = half(b, 208);
    let three = _mm256_set1_epi8(3);
    let offset = _mm256_set1_epi32(32);
    for (c, chunk) in out[..256].chunks_exact_mut(32).enumerate() {
        let (h, s) = (c / 4, c % 4);
        let low = nibbles(load32(&ql[64 * h + 32 * (s % 2)..]), 4 * (s as i32 / 2));
        let high = _mm256_and_si256(
            _mm256_srl_epi16(load32(&qh[32 * h..]), _mm_cvtsi32_si128(2 * s as i32)),
            three,
        );
        let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
        for (i, (v, o)) in widen_u8(q)
            .into_iter()
            .zip(chunk.chunks_exact_mut(8))
            .enumerate()
        {
            let ds = _mm256_set1_ps(d * f32::from(scales[2 * c + i / 2] as i8));
            store_scaled(_mm256_sub_epi32(v, offset), ds, o);
        }
    }
}
