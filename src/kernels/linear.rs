//! `linear`: `x [..., in] × w [out, in]ᵀ -> [..., out]`, with weights in their stored dtype
//! (f32, bf16, f16) decoded a tile at a time, and `linear_t` for an f32 activation matrix.
//!
//! Numerics: every output is `dot(x_row, w_row)` in the fixed order of [`super::simd`] (16 lane
//! accumulators with fused multiply-add, lanes summed as a fixed tree), in f32. Blocking over
//! rows, columns and the inner dimension only changes when a lane is updated, never the order of
//! its updates, so the result is the same for any tile size, thread count or instruction set.
//!
//! Loop structure (portable, cache-blocked): the columns are split between threads; each thread
//! walks tiles of `NB` weight rows × `KB` inner elements, decodes the tile to f32 once, and
//! reuses it for every block of `MB` x rows with an `MR × NR` register micro-kernel whose lane
//! accumulators persist across inner blocks. Faster paths (AVX-512, AMX) plug in at [`Isa`].

use std::ops::Range;

use super::error::KernelError;
use super::parallel;
use super::simd::{self, Isa, LANES};
use super::tensor::{DType, Tensor, Weight};

/// Weight rows per decoded tile.
const NB: usize = 8;
/// Inner elements per decoded tile (a multiple of `LANES`, so lane order is preserved).
const KB: usize = 1024;
/// x rows per block sharing one decoded tile.
const MB: usize = 64;
/// Micro-kernel rows of x.
const MR: usize = 3;
/// Micro-kernel rows of w.
const NR: usize = 2;
/// Multiply-adds below which a thread start does not pay off.
const MIN_TASK_MACS: usize = 1 << 18;

/// `x [..., in] × w [out, in]ᵀ -> [..., out]` on the best instruction set of this CPU.
pub fn linear(x: &Tensor, w: &Weight) -> Result<Tensor, KernelError> {
    linear_on(simd::isa(), x, w)
}

/// [`linear`] on the portable path (same results, for comparison and machines without FMA).
pub fn linear_portable(x: &Tensor, w: &Weight) -> Result<Tensor, KernelError> {
    linear_on(Isa::Portable, x, w)
}

/// [`linear`] on a chosen instruction set: [`Isa::Portable`], or any other value for the one
/// detected on this CPU (so an unsupported request can never run). Results are identical.
pub fn linear_on(isa: Isa, x: &Tensor, w: &Weight) -> Result<Tensor, KernelError> {
    let isa = if isa == Isa::Portable {
        isa
    } else {
        simd::isa()
    };
    let (m, k, n, shape) = check("linear", x.shape(), w.shape())?;
    let src = WeightRows {
        bytes: w.bytes(),
        dtype: w.dtype(),
    };
    let data = run(isa, x.data(), m, k, n, &src);
    make(shape, data)
}

/// `x [..., in] × w [out, in]ᵀ -> [..., out]` for an f32 tensor `w` (an activation, or a weight
/// already in f32).
pub fn linear_t(x: &Tensor, w: &Tensor) -> Result<Tensor, KernelError> {
    let (m, k, n, shape) = check("linear_t", x.shape(), w.shape())?;
    let data = run(simd::isa(), x.data(), m, k, n, &F32Rows(w.data()));
    make(shape, data)
}

fn make(shape: Vec<usize>, data: Vec<f32>) -> Result<Tensor, KernelError> {
    Tensor::new(shape.clone(), data).map_err(|_| KernelError::TooLarge {
        op: "linear",
        shape,
    })
}

/// Validate shapes; returns (rows of x, in, out, output shape).
fn check(
    op: &'static str,
    x: &[usize],
    w: &[usize],
) -> Result<(usize, usize, usize, Vec<usize>), KernelError> {
    let [n, k] = *w else {
        return Err(KernelError::Rank {
            op,
            name: "w",
            shape: w.to_vec(),
            need: "[out, in]",
        });
    };
    let Some((&xk, lead)) = x.split_last() else {
        return Err(KernelError::Rank {
            op,
            name: "x",
            shape: x.to_vec(),
            need: "[..., in] with at least one dimension",
        });
    };
    if xk != k {
        return Err(KernelError::InnerDim {
            op,
            x: x.to_vec(),
            w: w.to_vec(),
        });
    }
    let mut shape = lead.to_vec();
    shape.push(n);
    let m = lead.iter().product::<usize>();
    let too_large = || KernelError::TooLarge {
        op,
        shape: shape.clone(),
    };
    m.checked_mul(n).ok_or_else(too_large)?;
    Ok((m, k, n, shape))
}

/// Something whose row-major elements can be decoded to f32 a range at a time.
trait Rows: Sync {
    /// Decode elements `start..start + out.len()` into `out`.
    fn decode(&self, start: usize, out: &mut [f32]);
    /// The stored bytes and dtype, when the rows are a stored weight.
    fn raw(&self) -> Option<(&[u8], DType)> {
        None
    }
    /// [`Rows::decode`] for the AVX2 path; same values.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn decode_avx2(&self, start: usize, out: &mut [f32]) {
        self.decode(start, out);
    }
}

struct WeightRows<'a> {
    bytes: &'a [u8],
    dtype: DType,
}

impl Rows for WeightRows<'_> {
    fn raw(&self) -> Option<(&[u8], DType)> {
        Some((self.bytes, self.dtype))
    }

    #[inline(always)]
    fn decode(&self, start: usize, out: &mut [f32]) {
        let s = self.dtype.size();
        let bytes = &self.bytes[start * s..(start + out.len()) * s];
        match self.dtype {
            DType::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            DType::BF16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = simd::bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            DType::F16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = simd::f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn decode_avx2(&self, start: usize, out: &mut [f32]) {
        let bytes = &self.bytes[start * 2..(start + out.len()) * 2];
        match self.dtype {
            DType::F32 => self.decode(start, out),
            // SAFETY: the caller guarantees AVX2, FMA and F16C (this trait method's contract).
            DType::BF16 => unsafe { simd::decode16_avx2(bytes, false, out) },
            // SAFETY: as above.
            DType::F16 => unsafe { simd::decode16_avx2(bytes, true, out) },
        }
    }
}

struct F32Rows<'a>(&'a [f32]);

impl Rows for F32Rows<'_> {
    #[inline(always)]
    fn decode(&self, start: usize, out: &mut [f32]) {
        out.copy_from_slice(&self.0[start..start + out.len()]);
    }
}

/// Split the output columns between threads and assemble `[m, n]`.
fn run<S: Rows>(isa: Isa, x: &[f32], m: usize, k: usize, n: usize, w: &S) -> Vec<f32> {
    let per_col = m.saturating_mul(k).max(1);
    let min_cols = MIN_TASK_MACS.div_ceil(per_col);
    let parts = parallel::map_ranges(n, min_cols, NB, |cols| columns_on(isa, x, m, k, w, cols));
    if parts.len() == 1 {
        if let Some((_, only)) = parts.into_iter().next() {
            return only;
        }
        return Vec::new();
    }
    let mut out = vec![0.0f32; m * n];
    for (cols, part) in parts {
        let nc = cols.len();
        if nc == 0 {
            continue;
        }
        for (row, src) in out.chunks_exact_mut(n).zip(part.chunks_exact(nc)) {
            row[cols.clone()].copy_from_slice(src);
        }
    }
    out
}

/// [`columns`] on the chosen instruction set.
fn columns_on<S: Rows>(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    w: &S,
    cols: Range<usize>,
) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn avx2<S: Rows>(x: &[f32], m: usize, k: usize, w: &S, cols: Range<usize>) -> Vec<f32> {
        if m == 1 {
            if let Some((bytes, dtype)) = w.raw() {
                return gemv_avx2(x, bytes, dtype, k, cols);
            }
        }
        columns::<S, true>(x, m, k, w, cols)
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2Fma` only reaches here from `simd::isa()` (see `linear_on`), which
        // returns it only after `is_x86_feature_detected!` confirmed AVX2, FMA and F16C.
        Isa::Avx2Fma => unsafe { avx2(x, m, k, w, cols) },
        _ => columns::<S, false>(x, m, k, w, cols),
    }
}

/// Outputs `[m, cols]` (row-major, `cols.len()` wide).
#[inline(always)]
fn columns<S: Rows, const AVX2: bool>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &S,
    cols: Range<usize>,
) -> Vec<f32> {
    let nc = cols.len();
    let mut out = vec![0.0f32; m * nc];
    let mut wbuf = vec![0.0f32; NB * KB];
    let mut acc = vec![0.0f32; m.min(MB) * NB * LANES];
    let mut n0 = cols.start;
    while n0 < cols.end {
        let nb = NB.min(cols.end - n0);
        let mut m0 = 0;
        while m0 < m {
            let mb = MB.min(m - m0);
            acc[..mb * nb * LANES].fill(0.0);
            let mut k0 = 0;
            while k0 < k {
                let kb = KB.min(k - k0);
                for j in 0..nb {
                    let dst = &mut wbuf[j * KB..j * KB + kb];
                    #[cfg(target_arch = "x86_64")]
                    if AVX2 {
                        // SAFETY: `AVX2` is true only in the instantiation `columns_on` runs
                        // after detecting AVX2, FMA and F16C.
                        unsafe { w.decode_avx2((n0 + j) * k + k0, dst) };
                        continue;
                    }
                    w.decode((n0 + j) * k + k0, dst);
                }
                let t = Tile {
                    x,
                    k,
                    m0,
                    k0,
                    kb,
                    wbuf: &wbuf,
                    nb,
                };
                t.run::<AVX2>(mb, &mut acc);
                k0 += kb;
            }
            for i in 0..mb {
                let row = &mut out[(m0 + i) * nc + (n0 - cols.start)..][..nb];
                for (j, o) in row.iter_mut().enumerate() {
                    let lanes = &acc[(i * nb + j) * LANES..][..LANES];
                    let mut a = [0.0f32; LANES];
                    a.copy_from_slice(lanes);
                    *o = simd::reduce_lanes(&a);
                }
            }
            m0 += mb;
        }
        n0 += nb;
    }
    out
}

/// One decoded weight tile against one block of x rows.
struct Tile<'a> {
    x: &'a [f32],
    k: usize,
    m0: usize,
    k0: usize,
    kb: usize,
    wbuf: &'a [f32],
    nb: usize,
}

impl Tile<'_> {
    #[inline(always)]
    fn run<const AVX2: bool>(&self, mb: usize, acc: &mut [f32]) {
        let mut i = 0;
        while i < mb {
            let r = MR.min(mb - i);
            let mut j = 0;
            while j < self.nb {
                let c = NR.min(self.nb - j);
                match (r, c) {
                    (3, 2) => self.micro::<AVX2, 3, 2>(i, j, acc),
                    (3, _) => self.micro::<AVX2, 3, 1>(i, j, acc),
                    (2, 2) => self.micro::<AVX2, 2, 2>(i, j, acc),
                    (2, _) => self.micro::<AVX2, 2, 1>(i, j, acc),
                    (_, 2) => self.micro::<AVX2, 1, 2>(i, j, acc),
                    _ => self.micro::<AVX2, 1, 1>(i, j, acc),
                }
                j += c;
            }
            i += r;
        }
    }

    /// `R` x rows (block-local `i..`) against `C` tile rows (`j..`), lanes kept in registers.
    #[inline(always)]
    fn micro<const AVX2: bool, const R: usize, const C: usize>(
        &self,
        i: usize,
        j: usize,
        acc: &mut [f32],
    ) {
        let kb = self.kb;
        let xs: [&[f32]; R] =
            std::array::from_fn(|r| &self.x[(self.m0 + i + r) * self.k + self.k0..][..kb]);
        let ws: [&[f32]; C] = std::array::from_fn(|c| &self.wbuf[(j + c) * KB..][..kb]);
        let full = kb - kb % LANES;
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: `AVX2` is true only in the instantiation called from `columns_on`'s
            // AVX2+FMA wrapper, which runs only after those features were detected.
            unsafe { micro_avx2::<R, C>(&xs, &ws, full, acc, (i, j, self.nb)) };
            self.tail::<R, C>(&xs, &ws, full, acc, i, j);
            return;
        }
        let nb = self.nb;
        let mut a = [[[0.0f32; LANES]; C]; R];
        for (r, ar) in a.iter_mut().enumerate() {
            for (c, arc) in ar.iter_mut().enumerate() {
                arc.copy_from_slice(&acc[((i + r) * nb + j + c) * LANES..][..LANES]);
            }
        }
        let mut kk = 0;
        while kk < full {
            for r in 0..R {
                let xv = &xs[r][kk..kk + LANES];
                for c in 0..C {
                    let wv = &ws[c][kk..kk + LANES];
                    for l in 0..LANES {
                        a[r][c][l] = xv[l].mul_add(wv[l], a[r][c][l]);
                    }
                }
            }
            kk += LANES;
        }
        for (r, ar) in a.iter().enumerate() {
            for (c, arc) in ar.iter().enumerate() {
                acc[((i + r) * nb + j + c) * LANES..][..LANES].copy_from_slice(arc);
            }
        }
        self.tail::<R, C>(&xs, &ws, full, acc, i, j);
    }

    /// The last `kb % LANES` inner elements, into lanes `0..` of each accumulator.
    #[inline(always)]
    fn tail<const R: usize, const C: usize>(
        &self,
        xs: &[&[f32]; R],
        ws: &[&[f32]; C],
        full: usize,
        acc: &mut [f32],
        i: usize,
        j: usize,
    ) {
        for r in 0..R {
            for c in 0..C {
                let lanes = &mut acc[((i + r) * self.nb + j + c) * LANES..][..LANES];
                for ((x, w), a) in xs[r][full..].iter().zip(&ws[c][full..]).zip(lanes) {
                    *a = x.mul_add(*w, *a);
                }
            }
        }
    }
}

/// Rows of w decoded straight into registers, for a single x row (decode at batch 1 is
/// bandwidth-bound, so the tile buffer's extra store and load would only cost). Same per-lane
/// order as every other path; `cols` are the output columns (weight rows) to compute.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn gemv_avx2(x: &[f32], bytes: &[u8], dtype: DType, k: usize, cols: Range<usize>) -> Vec<f32> {
    use std::arch::x86_64::{
        __m128i, __m256, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps,
        _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_slli_epi32, _mm256_storeu_ps,
        _mm_loadu_si128,
    };
    /// 16 consecutive elements of a weight row, decoded into two registers.
    #[inline(always)]
    fn load16(bytes: &[u8], dtype: DType, at: usize) -> [__m256; 2] {
        let s = dtype.size();
        let b = &bytes[at * s..(at + LANES) * s];
        // SAFETY: `b` was just bounds-checked to hold 16 elements of `dtype` (64 bytes for f32,
        // 32 for bf16/f16); each unaligned load reads 8 elements of it. This function is only
        // inlined into `gemv_avx2`, which requires AVX2, FMA and F16C.
        unsafe {
            match dtype {
                DType::F32 => {
                    let p = b.as_ptr().cast::<f32>();
                    [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
                }
                DType::BF16 => {
                    let p = b.as_ptr().cast::<__m128i>();
                    let wide =
                        |v| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v)));
                    [wide(_mm_loadu_si128(p)), wide(_mm_loadu_si128(p.add(1)))]
                }
                DType::F16 => {
                    let p = b.as_ptr().cast::<__m128i>();
                    [
                        _mm256_cvtph_ps(_mm_loadu_si128(p)),
                        _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
                    ]
                }
            }
        }
    }
    const ROWS: usize = 4;
    let x = &x[..k];
    let full = k - k % LANES;
    let mut out = vec![0.0f32; cols.len()];
    let mut tail = vec![0.0f32; k - full];
    for (oc, j0) in out.chunks_mut(ROWS).zip(cols.clone().step_by(ROWS)) {
        let rows = oc.len();
        let mut a = [[_mm256_setzero_ps(); 2]; ROWS];
        let mut kk = 0;
        while kk < full {
            let xs = &x[kk..kk + LANES];
            // SAFETY: `xs` holds exactly 16 f32s; each load reads 8 of them.
            let xv = unsafe {
                [
                    _mm256_loadu_ps(xs.as_ptr()),
                    _mm256_loadu_ps(xs.as_ptr().add(8)),
                ]
            };
            for (r, ar) in a.iter_mut().enumerate().take(rows) {
                let wv = load16(bytes, dtype, (j0 + r) * k + kk);
                ar[0] = _mm256_fmadd_ps(xv[0], wv[0], ar[0]);
                ar[1] = _mm256_fmadd_ps(xv[1], wv[1], ar[1]);
            }
            kk += LANES;
        }
        for (r, o) in oc.iter_mut().enumerate() {
            let mut lanes = [0.0f32; LANES];
            // SAFETY: `lanes` holds exactly 16 f32s; each store writes 8 of them.
            unsafe {
                _mm256_storeu_ps(lanes.as_mut_ptr(), a[r][0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[r][1]);
            }
            if full < k {
                let row = (j0 + r) * k;
                WeightRows { bytes, dtype }.decode(row + full, &mut tail);
                for ((l, xv), wv) in lanes.iter_mut().zip(&x[full..]).zip(&tail) {
                    *l = xv.mul_add(*wv, *l);
                }
            }
            *o = simd::reduce_lanes(&lanes);
        }
    }
    out
}

/// The AVX2 register micro-kernel: the same per-lane fused multiply-adds as the portable loop,
/// each 16-lane accumulator held in two `__m256` registers for the whole inner block.
/// `at` = (block-local x row, tile row, tile width) locating the accumulators in `acc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn micro_avx2<const R: usize, const C: usize>(
    xs: &[&[f32]; R],
    ws: &[&[f32]; C],
    full: usize,
    acc: &mut [f32],
    at: (usize, usize, usize),
) {
    use std::arch::x86_64::{__m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_storeu_ps};
    let (i, j, nb) = at;
    let load8 = |s: &[f32]| -> [__m256; 2] {
        let s = &s[..LANES];
        // SAFETY: `s` was just bounds-checked to hold 16 f32s; both unaligned loads read 8
        // of them.
        unsafe {
            [
                _mm256_loadu_ps(s.as_ptr()),
                _mm256_loadu_ps(s.as_ptr().add(8)),
            ]
        }
    };
    let mut a: [[[__m256; 2]; C]; R] = std::array::from_fn(|r| {
        std::array::from_fn(|c| load8(&acc[((i + r) * nb + j + c) * LANES..]))
    });
    let mut kk = 0;
    while kk < full {
        let wv: [[__m256; 2]; C] = std::array::from_fn(|c| load8(&ws[c][kk..]));
        for r in 0..R {
            let xv = load8(&xs[r][kk..]);
            for c in 0..C {
                a[r][c][0] = _mm256_fmadd_ps(xv[0], wv[c][0], a[r][c][0]);
                a[r][c][1] = _mm256_fmadd_ps(xv[1], wv[c][1], a[r][c][1]);
            }
        }
        kk += LANES;
    }
    for (r, ar) in a.iter().enumerate() {
        for (c, arc) in ar.iter().enumerate() {
            let s = &mut acc[((i + r) * nb + j + c) * LANES..][..LANES];
            // SAFETY: `s` holds exactly 16 f32s; the two stores write 8 each.
            unsafe {
                _mm256_storeu_ps(s.as_mut_ptr(), arc[0]);
                _mm256_storeu_ps(s.as_mut_ptr().add(8), arc[1]);
            }
        }
    }
}
