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
//! reuses it for every block of `MB` x rows with a register micro-kernel whose lane
//! accumulators persist across inner blocks. The micro-kernel exists per [`Isa`]: portable
//! Rust (3 × 2), AVX2 (3 × 4, one half of the 16 lanes at a time, so each accumulator is one
//! 256-bit register) and AVX-512 (6 × 4, each accumulator in one 512-bit register). One x row
//! instead streams the stored weights straight into registers (`linear/gemv.rs`), and on AVX2
//! 24 or more rows take the panel kernel (`linear/panel.rs`), an outer product per lane. On
//! AVX-512, 2 to 128 rows (more while x is small) against block-format weights go through
//! strips instead (`quant/strip.rs`: rows decoded once into L1, then a tile of vector
//! operands).
#![allow(unsafe_code)]

use std::ops::Range;

use super::error::KernelError;
use super::parallel::{self, ColumnsMut};
use super::quant;
use super::screen::Screen;
use super::simd::{self, Cpu, Isa, LineAligned, LANES};
use super::softmax::argmax_row;
use super::tensor::{DType, Tensor, Weight};

#[cfg(target_arch = "x86_64")]
mod gemv;
#[cfg(target_arch = "x86_64")]
mod panel;

/// Weight rows per decoded tile.
const NB: usize = 8;
/// Where a thread's share of the output columns may start: a whole number of the panel
/// kernel's panels (`linear/panel.rs`), which holds 16.
const ALIGN: usize = 16;
/// Inner elements per decoded tile (a multiple of `LANES`, so lane order is preserved).
const KB: usize = 2048;
/// x rows per block sharing one decoded tile.
const MB: usize = 64;
/// Micro-kernel rows of x.
const MR: usize = 3;
/// Micro-kernel rows of w.
const NR: usize = 2;
/// The AVX2 micro-kernel's rows of x and of w. It runs over each half of the 16 lanes in turn,
/// so an accumulator is one 256-bit register: 12 accumulators, 3 x vectors and one weight
/// vector fill the 16 ymm registers, and a step makes 12 FMAs from 7 loads.
const HALF_MR: usize = 3;
const HALF_NR: usize = 4;
/// Inner elements the AVX2 micro-kernel covers per pass over one half of the lanes, so that
/// the second half finds its operands still in L1 (7 rows × 2 KiB).
const HALF_KB: usize = 512;
/// The AVX-512 micro-kernel's rows of x and of w: 24 accumulators, 4 weight vectors and one x
/// vector fill 29 of the 32 zmm registers.
const WIDE_MR: usize = 6;
const WIDE_NR: usize = 4;
/// Which loops [`columns`] is compiled with (a const parameter: one copy per path).
const PORTABLE: u8 = 0;
const AVX2: u8 = 1;
const AVX512: u8 = 2;
/// Multiply-adds below which a task of its own does not pay off.
const MIN_TASK_MACS: usize = 1 << 18;
/// The same for one x row: bandwidth-bound, so a second thread's extra read stream pays off
/// on much less work (~64 KiB of bf16 weights).
const MIN_TASK_MACS_GEMV: usize = 1 << 15;
/// Column blocks per thread when x has several rows (see [`per_thread`]).
const BLOCKS_PER_THREAD: usize = 4;
/// Output columns [`linear_argmax`] computes at a time per task (its scratch is `[m, this]`).
const ARGMAX_CHUNK: usize = 512;
/// Rows from which [`linear_argmax`] of a single x row goes through the weight's [`Screen`]
/// (built on first use: an 8-bit copy, half the bytes of bf16). Below it the copy would not
/// pay for itself; Gemma 3's output head has 262144 rows. A weight stored in fewer bytes than
/// its screen would take is never screened ([`takes_screen`]).
const SCREEN_MIN_ROWS: usize = 16384;
/// The screen is given up for a call when more than this fraction (1 / it) of the rows are
/// candidates: scoring them one by one would cost more than the full pass.
const SCREEN_MAX_SHARE: usize = 64;
/// The same for one x row of several: the full pass it falls back to is then a row of a
/// matrix product, which costs more per row than a pass of its own does at batch 1.
const SCREEN_MAX_SHARE_MANY: usize = 16;
/// Weight rows the screened path's full pass scores between two hand-backs of their pages.
const SCREEN_FULL_SPAN: usize = 16384;
/// Candidate rows copied out of the weight and scored at a time.
const SCREEN_GATHER_ROWS: usize = 256;
/// Bytes of the rows a batch's candidates list, copied out of the weight at a time (at least
/// [`SCREEN_GATHER_ROWS`] rows).
const SCREEN_UNION_BYTES: usize = 2 << 20;
/// Candidates of one x row of several above which they are narrowed by the single-row bound
/// (f32 x) before being scored.
const SCREEN_REFINE_FROM: usize = 32;

/// `x [..., in] × w [out, in]ᵀ -> [..., out]` on the best instruction set of this CPU.
pub fn linear(x: &Tensor, w: &Weight) -> Result<Tensor, KernelError> {
    linear_on(simd::isa(), x, w)
}

/// [`linear`] on the portable path (same results, for comparison and machines without FMA).
pub fn linear_portable(x: &Tensor, w: &Weight) -> Result<Tensor, KernelError> {
    linear_on(Isa::Portable, x, w)
}

/// [`linear`] on a chosen instruction set, or the best below it this CPU has (so an unsupported
/// request can never run). Results are identical on every set.
pub fn linear_on(isa: Isa, x: &Tensor, w: &Weight) -> Result<Tensor, KernelError> {
    let cpu = simd::limit(isa);
    let (m, k, n, shape) = check("linear", x.shape(), w.shape())?;
    let src = WeightRows {
        bytes: w.bytes(),
        dtype: w.dtype(),
    };
    let data = if w.has_screen() {
        run_in_spans(cpu, x.data(), m, k, w)
    } else {
        run(cpu, x.data(), m, k, n, &src)
    };
    make(shape, data)
}

/// [`run`] over a weight whose screen is built (an output head that greedy steps read through
/// its screen, here read whole by a step that samples): a span of rows at a time, each handed
/// back after it, so that the whole weight is never resident beside its screen. The outputs
/// are those of `run`: every column is the same dot product wherever its span starts.
fn run_in_spans(cpu: Cpu, x: &[f32], m: usize, k: usize, w: &Weight) -> Vec<f32> {
    let n = w.shape()[0];
    // A screen is built only over rows of whole blocks; anything else is read as `run` reads it.
    let Some(row_bytes) = w.dtype().bytes_for(k).filter(|&b| b > 0) else {
        let rows = WeightRows {
            bytes: w.bytes(),
            dtype: w.dtype(),
        };
        return run(cpu, x, m, k, n, &rows);
    };
    let mut out = vec![0.0f32; m * n];
    for start in (0..n).step_by(SCREEN_FULL_SPAN) {
        let span = start..(start + SCREEN_FULL_SPAN).min(n);
        let rows = WeightRows {
            bytes: &w.bytes()[span.start * row_bytes..span.end * row_bytes],
            dtype: w.dtype(),
        };
        let part = run(cpu, x, m, k, span.len(), &rows);
        for (dst, src) in out.chunks_exact_mut(n).zip(part.chunks_exact(span.len())) {
            dst[span.clone()].copy_from_slice(src);
        }
        w.release(span.start * k..span.end * k);
    }
    out
}

/// `x [..., in] × w [out, in]ᵀ -> [..., out]` for an f32 tensor `w` (an activation, or a weight
/// already in f32).
pub fn linear_t(x: &Tensor, w: &Tensor) -> Result<Tensor, KernelError> {
    let (m, k, n, shape) = check("linear_t", x.shape(), w.shape())?;
    let data = run(simd::cpu(), x.data(), m, k, n, &F32Rows(w.data()));
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
    /// [`Rows::decode`] for the AVX-512 path; same values.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn decode_avx512(&self, start: usize, out: &mut [f32]) {
        // SAFETY: the caller guarantees more than `decode_avx2` needs.
        unsafe { self.decode_avx2(start, out) }
    }
    /// Elements `start..start + 8` as one vector, the values [`Rows::decode`] gives.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8_avx2(&self, start: usize) -> std::arch::x86_64::__m256 {
        let mut v = [0.0f32; 8];
        self.decode(start, &mut v);
        // SAFETY: `v` holds 8 f32s (one unaligned load); the caller guarantees AVX.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(v.as_ptr()) }
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
        let n = out.len();
        let floats = |size: usize| &self.bytes[start * size..(start + n) * size];
        match self.dtype {
            DType::F32 => {
                for (o, c) in out.iter_mut().zip(floats(4).chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            DType::BF16 => {
                for (o, c) in out.iter_mut().zip(floats(2).chunks_exact(2)) {
                    *o = simd::bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            DType::F16 => {
                for (o, c) in out.iter_mut().zip(floats(2).chunks_exact(2)) {
                    *o = simd::f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            blocks => quant::read(blocks, self.bytes, start, out),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn decode_avx2(&self, start: usize, out: &mut [f32]) {
        let halves = || &self.bytes[start * 2..(start + out.len()) * 2];
        match self.dtype {
            DType::F32 => self.decode(start, out),
            // SAFETY: the caller guarantees AVX2, FMA and F16C (this trait method's contract).
            DType::BF16 => unsafe { simd::decode16_avx2(halves(), false, out) },
            // SAFETY: as above.
            DType::F16 => unsafe { simd::decode16_avx2(halves(), true, out) },
            // SAFETY: as above.
            blocks => unsafe { quant::read_avx2(blocks, self.bytes, start, out) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn decode_avx512(&self, start: usize, out: &mut [f32]) {
        match self.dtype {
            // SAFETY: the caller guarantees AVX-512F, AVX2, FMA and F16C (this trait method's
            // contract).
            blocks if blocks.is_quantized() => unsafe {
                quant::read_avx512(blocks, self.bytes, start, out)
            },
            // SAFETY: as above, more than `decode_avx2` needs.
            _ => unsafe { self.decode_avx2(start, out) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8_avx2(&self, start: usize) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::{
            __m128i, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps, _mm256_loadu_ps,
            _mm256_slli_epi32, _mm_loadu_si128,
        };
        let floats = |size: usize| &self.bytes[start * size..(start + 8) * size];
        // SAFETY: each float arm's slice holds exactly the 8 elements (32 bytes of f32, 16 of
        // bf16 or f16: one unaligned load); `v` holds 8 f32s; the caller guarantees AVX2, FMA
        // and F16C.
        unsafe {
            match self.dtype {
                DType::F32 => _mm256_loadu_ps(floats(4).as_ptr().cast::<f32>()),
                DType::BF16 => {
                    let raw = _mm_loadu_si128(floats(2).as_ptr().cast::<__m128i>());
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(raw)))
                }
                DType::F16 => {
                    _mm256_cvtph_ps(_mm_loadu_si128(floats(2).as_ptr().cast::<__m128i>()))
                }
                // Eight elements cost their block; the panel packer reads blocks itself
                // (`quant::panel_avx2`), so this is only ever a slow fallback.
                _ => {
                    let mut v = [0.0f32; 8];
                    self.decode(start, &mut v);
                    _mm256_loadu_ps(v.as_ptr())
                }
            }
        }
    }
}

struct F32Rows<'a>(&'a [f32]);

impl Rows for F32Rows<'_> {
    #[inline(always)]
    fn decode(&self, start: usize, out: &mut [f32]) {
        out.copy_from_slice(&self.0[start..start + out.len()]);
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8_avx2(&self, start: usize) -> std::arch::x86_64::__m256 {
        let v = &self.0[start..start + 8];
        // SAFETY: `v` holds exactly 8 f32s (one unaligned load); the caller guarantees AVX.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(v.as_ptr()) }
    }
}

/// `[m, n]`, the output columns split between threads, each filling its own columns in place.
fn run<S: Rows>(cpu: Cpu, x: &[f32], m: usize, k: usize, n: usize, w: &S) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    let min_cols = min_task_cols(m, k);
    let lhs = Lhs::new(cpu, x, m, k, reading(cpu, m, k, w));
    parallel::for_columns(&mut out, n, min_cols, ALIGN, per_thread(m), |mut block| {
        columns_on(cpu, &lhs, m, k, w, &mut block)
    });
    out
}

/// x as the kernels read it: its rows, and for the panel kernel the same rows with their inner
/// elements permuted into lane segments (once per call, shared by every thread).
struct Lhs<'a> {
    x: &'a [f32],
    /// A copy of x starting on a cache line, when x does not.
    aligned: Option<LineAligned>,
    permuted: Option<Vec<f32>>,
    /// x's rows in the paired order, for the AVX2 kernels of several rows of a format that
    /// reads them so.
    paired: Option<LineAligned>,
}

/// How the kernel a call takes reads x ([`reading`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reading {
    Rows,
    /// The panel kernel's lane segments ([`takes_panels`]).
    Panels,
    /// The paired order of the AVX2 kernels of several rows ([`quant::reads_paired`]).
    Paired,
}

/// How `m` x rows times `w` read x on this CPU.
fn reading<S: Rows>(cpu: Cpu, m: usize, k: usize, w: &S) -> Reading {
    if takes_panels(cpu, m, k, w) {
        return Reading::Panels;
    }
    // The kernels that read the shared paired copy, as `columns_on` picks them: one row goes
    // to `row_gemv`, which pairs its own copy, so it gets none.
    #[cfg(target_arch = "x86_64")]
    if cpu.isa() == Isa::Avx2Fma
        && m > 1
        && w.raw().is_some_and(|(_, d)| {
            let several = quant::takes_strips_avx2(d, m) || quant::takes_registers(d, m);
            quant::reads_paired(d) && several
        })
    {
        return Reading::Paired;
    }
    Reading::Rows
}

impl<'a> Lhs<'a> {
    fn new(cpu: Cpu, x: &'a [f32], m: usize, k: usize, reading: Reading) -> Lhs<'a> {
        #[cfg(target_arch = "x86_64")]
        match reading {
            Reading::Panels => {
                return Lhs {
                    x,
                    aligned: None,
                    permuted: Some(panel::permute_rows(x, m, k)),
                    paired: None,
                };
            }
            // One copy for every thread: each thread's own, at 32 rows of 2048, cost the
            // strips more than the paired decode saved.
            Reading::Paired => {
                let mut paired = LineAligned::zeroed(m * k);
                quant::paired_order(&x[..m * k], paired.as_mut_slice());
                return Lhs {
                    x,
                    aligned: None,
                    permuted: None,
                    paired: Some(paired),
                };
            }
            Reading::Rows => {}
        }
        let _ = (k, reading);
        // The few-row kernels load x sixteen floats at a time, one load per multiply-add or
        // two, and from the heap's 16-byte alignment most of those loads straddled two cache
        // lines. A copy on a line boundary, alternated call by call in one process with one
        // 16 bytes off (Emerald Rapids, one thread): Q5_0 x[8, 640] 15-23 % faster, Q8_0
        // 15-43 %, 16 rows 15-40 %. One row, whose x load feeds four weight rows, ran the same
        // either way, so it is not copied; nor is x for the portable loops, which load no
        // vectors of their own.
        let vectors = cpu.isa() >= Isa::Avx2Fma;
        let misaligned = vectors && m > 1 && !LineAligned::starts_on_line(x);
        Lhs {
            x,
            aligned: misaligned.then(|| LineAligned::copy_of(x)),
            permuted: None,
            paired: None,
        }
    }

    /// x's rows, from the aligned copy if there is one.
    fn rows(&self) -> &[f32] {
        self.aligned.as_ref().map_or(self.x, LineAligned::as_slice)
    }

    /// x's rows as the AVX2 kernels of several rows of blocks read them: in the paired order
    /// if [`Reading::Paired`].
    fn block_rows(&self) -> &[f32] {
        self.paired
            .as_ref()
            .map_or_else(|| self.rows(), LineAligned::as_slice)
    }
}

/// Whether `m` x rows times `w` go through the panel kernel on this CPU (AVX2 or AVX-512: on an
/// AMD EPYC, Zen 4, its AVX-512 tile beats the wide-register tile kernel from 32 rows up, 146
/// against 150-188 GFLOP/s at 512 rows over several runs of a noisy host; docs/performance.md),
/// unless block rows go through strips there ([`quant::takes_strips`]).
fn takes_panels<S: Rows>(cpu: Cpu, m: usize, k: usize, w: &S) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let strips = match cpu.isa() {
            Isa::Avx512 => w.raw().is_some_and(|(_, d)| quant::takes_strips(d, m, k)),
            Isa::Avx2Fma => w.raw().is_some_and(|(_, d)| quant::takes_strips_avx2(d, m)),
            Isa::Portable => false,
        };
        cpu.isa() >= Isa::Avx2Fma && m >= panel::MIN_ROWS && !strips
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, m, k, w);
        false
    }
}

/// Column blocks per thread. Several rows of x make a call compute-bound, and then blocks
/// claimed one at a time keep both threads busy when one of them is slowed down; a single row
/// streams its weights, and one long stream per thread reads them fastest.
fn per_thread(m: usize) -> usize {
    if m == 1 {
        1
    } else {
        BLOCKS_PER_THREAD
    }
}

/// The fewest output columns worth a task of their own.
fn min_task_cols(m: usize, k: usize) -> usize {
    let per_col = m.saturating_mul(k).max(1);
    let min_macs = if m == 1 {
        MIN_TASK_MACS_GEMV
    } else {
        MIN_TASK_MACS
    };
    min_macs.div_ceil(per_col)
}

/// `argmax(linear(x, w))` along the last axis, one id per row of x, without building the
/// `[..., out]` result: each task computes its columns a chunk at a time and keeps each row's
/// best. Identical to [`linear`] then [`argmax`](super::argmax) (first maximum; the first NaN
/// beats everything), for any thread count: chunks are merged in column order.
///
/// The output head of a language model is the one place this matters: `[batch, vocab]` f32
/// logits are 128 MiB at batch 128 with Gemma 3's 262144-token vocabulary.
pub fn linear_argmax(x: &Tensor, w: &Weight) -> Result<Vec<u32>, KernelError> {
    let (m, k, n, shape) = check("linear", x.shape(), w.shape())?;
    if n == 0 {
        return Err(KernelError::EmptyAxis {
            op: "argmax",
            shape,
        });
    }
    if u32::try_from(n - 1).is_err() {
        return Err(KernelError::IndexOverflow {
            op: "argmax",
            shape,
        });
    }
    let cpu = simd::cpu();
    let src = WeightRows {
        bytes: w.bytes(),
        dtype: w.dtype(),
    };
    let x = x.data();
    if takes_screen(w) {
        if m == 1 {
            if let Some(id) = screened_argmax(cpu, x, w.screen(), w) {
                return Ok(vec![id]);
            }
            // An x the screen cannot bound, or too many candidates: every row, but a span at a
            // time and handed back, as for a batch.
            let best = argmax_in_spans(cpu, x, 1, k, w);
            return Ok(best.into_iter().map(|b| b.index as u32).collect());
        }
        return Ok(screened_argmax_many(cpu, x, m, w));
    }
    Ok(argmax_all(cpu, x, m, k, n, &src))
}

/// [`linear_argmax`] of `m` x rows by scoring every weight row.
fn argmax_all(cpu: Cpu, x: &[f32], m: usize, k: usize, n: usize, src: &WeightRows<'_>) -> Vec<u32> {
    let lhs = Lhs::new(cpu, x, m, k, reading(cpu, m, k, src));
    let best = argmax_cols(cpu, &lhs, m, k, 0..n, src);
    // Every row saw at least one column (n > 0), and ids are below n, which fits u32.
    best.into_iter().map(|b| b.index as u32).collect()
}

/// Each of the `m` x rows' best among the weight rows `cols`.
fn argmax_cols(
    cpu: Cpu,
    lhs: &Lhs<'_>,
    m: usize,
    k: usize,
    cols: Range<usize>,
    src: &WeightRows<'_>,
) -> Vec<Best> {
    let base = cols.start;
    let parts = parallel::map_ranges(cols.len(), min_task_cols(m, k), ALIGN, per_thread(m), |c| {
        let cols = base + c.start..base + c.end;
        let mut best = vec![Best::NONE; m];
        let mut scratch = vec![0.0f32; m * ARGMAX_CHUNK.min(cols.len())];
        let mut c0 = cols.start;
        while c0 < cols.end {
            let chunk = c0..(c0 + ARGMAX_CHUNK).min(cols.end);
            let buf = &mut scratch[..m * chunk.len()];
            columns_on(
                cpu,
                lhs,
                m,
                k,
                src,
                &mut ColumnsMut::window(buf, chunk.clone()),
            );
            for (b, row) in best.iter_mut().zip(buf.chunks_exact(chunk.len())) {
                let i = argmax_row(row) as usize;
                *b = b.then(Best::at(chunk.start + i, row[i]));
            }
            c0 = chunk.end;
        }
        best
    });
    let mut best = vec![Best::NONE; m];
    for (_, part) in parts {
        for (b, p) in best.iter_mut().zip(part) {
            *b = b.then(p);
        }
    }
    best
}

/// Bytes of weight data one [`linear_argmax`] call of a single x row reads through `w`'s
/// screen (the 8-bit values and per-row bounds; the few candidate rows it then scores at full
/// width are not counted), or `None` if such a call reads every row of `w` at full width.
pub fn argmax_screen_bytes(w: &Weight) -> Option<u64> {
    takes_screen(w).then(|| screen_bytes(w) as u64)
}

/// Whether [`linear_argmax`] over `w` goes through its screen: a weight of many rows, stored in
/// at least the bytes its screen holds. The screen stands in for the weight in memory (the
/// weight's own pages are handed back once it is built), so a head stored below 8 bits (the
/// Q6_K `token_embd` llama.cpp's K presets give Gemma 3 from 4B up, or a Q5_1 one) would hold
/// more memory screened than read whole, past the budget of file + KV cache + 100 MiB (the
/// 270M with a Q5_1 head: 367.6 MiB against 352.0 at batch 32). Such a head is read whole
/// each step instead, through its mapping: fewer bytes than its screen at batch 1, and from
/// batch 8 on about 40 % slower decode on the 270M, whose head is most of a step.
fn takes_screen(w: &Weight) -> bool {
    match *w.shape() {
        [n, _] => n >= SCREEN_MIN_ROWS && screen_bytes(w) <= w.bytes().len(),
        _ => false,
    }
}

/// Bytes [`Screen`] of the `[n, k]` weight `w` holds (the 8-bit values and per-row bounds).
fn screen_bytes(w: &Weight) -> usize {
    match *w.shape() {
        [n, k] => n.saturating_mul(k.saturating_add(Screen::ROW_BYTES)),
        _ => 0,
    }
}

/// `linear_argmax` of one x row through `screen` (of the weight `w` holds): the candidate rows,
/// scored by the same kernel as every other column and merged in index order. `None` when the
/// screen cannot bound this x or keeps too many rows; the caller then scores every row.
fn screened_argmax(cpu: Cpu, x: &[f32], screen: &Screen, weight: &Weight) -> Option<u32> {
    let rows = screen.candidates(cpu.isa(), x)?;
    if rows.len() > screen.rows() / SCREEN_MAX_SHARE {
        return None;
    }
    let best = best_among(cpu, x, &rows, weight);
    // A screen of a weight with rows keeps at least one (the one with the best lower bound).
    (!best.empty).then_some(best.index as u32)
}

/// `linear_argmax` of `m` x rows through `screen`: each row's candidates scored exactly, the
/// rows the screen leaves out (an x it cannot bound, or too many candidates) scored against
/// every weight row, together. Every output is the same dot product in either case, so the ids
/// are those of the full pass.
fn screened_argmax_many(cpu: Cpu, x: &[f32], m: usize, weight: &Weight) -> Vec<u32> {
    let k = x.len() / m;
    let screen = weight.screen();
    let lists = screen.candidates_many(cpu.isa(), x, m);
    let limit = screen.rows() / SCREEN_MAX_SHARE_MANY;
    // Long lists narrowed by the f32 bound, which costs a fraction of scoring them exactly.
    let long: Vec<(usize, &[usize])> = lists
        .iter()
        .enumerate()
        .filter_map(|(i, l)| Some((i, l.as_deref()?)))
        .filter(|(_, l)| l.len() > SCREEN_REFINE_FROM)
        .collect();
    let refined = screen.refine_many(cpu.isa(), x, &long);
    let mut narrowed: Vec<Option<Vec<usize>>> = lists
        .iter()
        .map(|l| {
            l.as_ref()
                .filter(|l| l.len() <= SCREEN_REFINE_FROM)
                .cloned()
        })
        .collect();
    for (&(i, _), rows) in long.iter().zip(refined) {
        narrowed[i] = rows;
    }
    for rows in &mut narrowed {
        if rows.as_ref().is_some_and(|r| r.len() > limit) {
            *rows = None;
        }
    }
    let row_bytes = weight.dtype().bytes_for(k).unwrap_or(0).max(1);
    let span = (SCREEN_UNION_BYTES / row_bytes).max(SCREEN_GATHER_ROWS);
    let mut ids: Vec<Option<u32>> = best_of_lists(cpu, x, k, &narrowed, weight, span)
        .into_iter()
        .map(|b| (!b.empty).then_some(b.index as u32))
        .collect();
    let rest: Vec<usize> = (0..m).filter(|&i| ids[i].is_none()).collect();
    if !rest.is_empty() {
        let xs: Vec<f32> = rest
            .iter()
            .flat_map(|&i| &x[i * k..(i + 1) * k])
            .copied()
            .collect();
        let best = argmax_in_spans(cpu, &xs, rest.len(), k, weight);
        for (&i, b) in rest.iter().zip(best) {
            ids[i] = Some(b.index as u32);
        }
    }
    ids.into_iter().map(|id| id.unwrap_or(0)).collect()
}

/// Each of the `m` x rows' best over every row of `weight` (`[n, k]`, n > 0), a span of
/// weight rows at a time, each handed back after it: a full pass next to the weight's screen
/// never holds the whole weight resident as well. (At batch 1 the whole head was read through
/// its file mapping at once: one step the screen could not narrow, in 200 new tokens on the
/// real 270M Q4_K_M file, raised the peak RSS from 298 to 466 MiB, past the 342 MiB budget.)
fn argmax_in_spans(cpu: Cpu, x: &[f32], m: usize, k: usize, weight: &Weight) -> Vec<Best> {
    let w = WeightRows {
        bytes: weight.bytes(),
        dtype: weight.dtype(),
    };
    let lhs = Lhs::new(cpu, x, m, k, reading(cpu, m, k, &w));
    let mut best = vec![Best::NONE; m];
    let n = weight.shape()[0];
    for start in (0..n).step_by(SCREEN_FULL_SPAN) {
        let span = start..(start + SCREEN_FULL_SPAN).min(n);
        let part = argmax_cols(cpu, &lhs, m, k, span, &w);
        for (b, p) in best.iter_mut().zip(part) {
            *b = b.then(p);
        }
        weight.release(0..weight.numel());
    }
    best
}

/// Each x row's best among the weight rows `lists[i]` lists for it (increasing; `None` for
/// none, and then [`Best::NONE`]). The rows of a batch's lists overlap: at the start of a
/// generation, when the model is unsure, 128 x rows (the real 270M model, the bench's prompts)
/// listed 194 thousand rows in all but 29 thousand different ones, and copying a row out costs
/// a file read (see [`best_among`]), so each listed row is copied once per call, `span_rows` of
/// them at a time, and every x row listing it scores it from there.
fn best_of_lists(
    cpu: Cpu,
    x: &[f32],
    k: usize,
    lists: &[Option<Vec<usize>>],
    weight: &Weight,
    span_rows: usize,
) -> Vec<Best> {
    let m = lists.len();
    let mut best = vec![Best::NONE; m];
    let [n, _] = *weight.shape() else {
        return best;
    };
    // A weight whose rows are not whole blocks has no screen, so no lists either.
    let Some(row_bytes) = weight.dtype().bytes_for(k).filter(|&b| b > 0) else {
        return best;
    };
    let union = union_of(lists, n);
    // Where each x row's list has got to: the spans, like the lists, go in index order.
    let mut next = vec![0usize; m];
    for span in union.chunks(span_rows.max(1)) {
        let copies = parallel::map_ranges(span.len(), SCREEN_GATHER_ROWS, 1, 1, |r| {
            let mut bytes = Vec::new();
            weight.copy_rows(&span[r], &mut bytes);
            bytes
        });
        let copied = Copied {
            parts: &copies,
            row_bytes,
        };
        let last = span[span.len() - 1];
        let mine: Vec<&[usize]> = lists
            .iter()
            .zip(&mut next)
            .map(|(list, at)| {
                let list = list.as_deref().unwrap_or(&[]);
                let end = *at + list[*at..].partition_point(|&j| j <= last);
                let here = &list[*at..end];
                *at = end;
                here
            })
            .collect();
        let found = parallel::map_ranges(m, 1, 1, m, |rows| {
            let mut bytes = Vec::new();
            rows.map(|i| {
                let xr = &x[i * k..(i + 1) * k];
                let mut best = Best::NONE;
                for chunk in mine[i].chunks(SCREEN_GATHER_ROWS) {
                    bytes.clear();
                    for j in chunk {
                        // The union holds every listed row, and this span those up to `last`
                        // that no earlier span took.
                        let at = span.binary_search(j).expect("a listed row is in its span");
                        bytes.extend_from_slice(copied.row(at));
                    }
                    best = best.then(best_in(cpu, xr, chunk, &bytes, weight.dtype()));
                }
                best
            })
            .collect::<Vec<_>>()
        });
        for (b, f) in best.iter_mut().zip(found.into_iter().flat_map(|(_, f)| f)) {
            *b = b.then(f);
        }
    }
    best
}

/// Every row that any of `lists` holds, in increasing order (all below `n`).
fn union_of(lists: &[Option<Vec<usize>>], n: usize) -> Vec<usize> {
    let mut words = vec![0u64; n.div_ceil(64)];
    for &j in lists.iter().flatten().flatten() {
        words[j / 64] |= 1 << (j % 64);
    }
    let mut rows = Vec::new();
    for (w, &word) in words.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            rows.push(w * 64 + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
    }
    rows
}

/// A span of rows copied out of a weight, a share per task: `(positions in the span, bytes)`.
struct Copied<'a> {
    parts: &'a [(Range<usize>, Vec<u8>)],
    row_bytes: usize,
}

impl Copied<'_> {
    /// The bytes of the span's row at position `at`.
    fn row(&self, at: usize) -> &[u8] {
        let p = self.parts.partition_point(|(r, _)| r.end <= at);
        let (range, bytes) = &self.parts[p];
        let from = (at - range.start) * self.row_bytes;
        &bytes[from..from + self.row_bytes]
    }
}

/// The best of `rows` (increasing) of `weight` for one x row, each scored by the kernel every
/// column uses. The rows are copied out first ([`Weight::copy_rows`]): read where they lie in a
/// file mapping, each would map the file around it, and a few hundred scattered rows of the
/// head would make much of it resident again next to its screen.
fn best_among(cpu: Cpu, x: &[f32], rows: &[usize], weight: &Weight) -> Best {
    let mut bytes = Vec::new();
    weight.copy_rows(rows, &mut bytes);
    best_in(cpu, x, rows, &bytes, weight.dtype())
}

/// The best of `rows` (increasing) for one x row, whose stored bytes are `bytes`, one row after
/// another in `dtype`.
fn best_in(cpu: Cpu, x: &[f32], rows: &[usize], bytes: &[u8], dtype: DType) -> Best {
    let k = x.len();
    let lhs = Lhs::new(cpu, x, 1, k, Reading::Rows);
    let gathered = WeightRows { bytes, dtype };
    let mut scores = vec![0.0f32; rows.len()];
    // One output per row, each the same dot product wherever the row sits in the operand.
    columns_on(
        cpu,
        &lhs,
        1,
        k,
        &gathered,
        &mut ColumnsMut::window(&mut scores, 0..rows.len()),
    );
    let mut best = Best::NONE;
    for (&j, &s) in rows.iter().zip(&scores) {
        best = best.then(Best::at(j, s));
    }
    best
}

/// The best column of a row so far, by [`argmax`](super::argmax)'s rule.
#[derive(Clone, Copy)]
struct Best {
    index: usize,
    value: f32,
    /// No column seen yet.
    empty: bool,
}

impl Best {
    const NONE: Best = Best {
        index: 0,
        value: f32::NEG_INFINITY,
        empty: true,
    };

    fn at(index: usize, value: f32) -> Best {
        Best {
            index,
            value,
            empty: false,
        }
    }

    /// The best of `self` and `later`, whose columns all come after `self`'s: an earlier NaN
    /// stays, a later one wins over numbers, and otherwise only a strictly larger value wins.
    fn then(self, later: Best) -> Best {
        if later.empty {
            return self;
        }
        if self.empty {
            return later;
        }
        if self.value.is_nan() {
            return self;
        }
        if later.value.is_nan() || later.value > self.value {
            return later;
        }
        self
    }
}

/// [`columns`] (or the panel or single-row kernel) on the chosen instruction set.
fn columns_on<S: Rows>(
    cpu: Cpu,
    lhs: &Lhs<'_>,
    m: usize,
    k: usize,
    w: &S,
    out: &mut ColumnsMut<'_>,
) {
    let x = lhs.rows();
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn avx2<S: Rows>(lhs: &Lhs<'_>, m: usize, k: usize, w: &S, out: &mut ColumnsMut<'_>) {
        if let Some(xp) = &lhs.permuted {
            panel::columns_avx2(xp, m, k, w, out);
            return;
        }
        // SAFETY: this function's own features are the ones `row_gemv` needs.
        if unsafe { row_gemv(lhs.rows(), m, k, w, out) } {
            return;
        }
        if let Some((bytes, dtype)) = w.raw().filter(|(_, d)| quant::takes_strips_avx2(*d, m)) {
            if quant::gemm_strips_avx2(dtype, lhs.block_rows(), m, k, bytes, out) {
                return;
            }
        }
        // A few x rows against blocks: decoded in registers, no tile buffer.
        let few = |d: DType| d.is_quantized() && quant::takes_registers(d, m);
        if let Some((bytes, dtype)) = w.raw().filter(|(_, d)| few(*d)) {
            if quant::gemm_blocks_avx2(dtype, lhs.block_rows(), m, k, bytes, out) {
                return;
            }
        }
        columns::<S, AVX2>(lhs.rows(), m, k, w, out)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    fn avx512<S: Rows>(lhs: &Lhs<'_>, m: usize, k: usize, w: &S, out: &mut ColumnsMut<'_>) {
        if let Some(xp) = &lhs.permuted {
            panel::columns_avx512(xp, m, k, w, out);
            return;
        }
        // One row of blocks is bound by their decode: sixteen values per register.
        if m == 1 {
            if let Some((bytes, dtype)) = w.raw().filter(|(_, d)| d.is_quantized()) {
                let cols = out.cols();
                if quant::gemv_blocks_avx512(dtype, lhs.rows(), bytes, k, cols, out.row(0)) {
                    return;
                }
            }
        }
        // One row of floats is bound by memory bandwidth, where wider registers gain nothing.
        // SAFETY: as in `avx2`.
        if unsafe { row_gemv(lhs.rows(), m, k, w, out) } {
            return;
        }
        if let Some((bytes, dtype)) = w.raw().filter(|(_, d)| quant::takes_strips(*d, m, k)) {
            if quant::gemm_strips_avx512(dtype, lhs.rows(), m, k, bytes, out) {
                return;
            }
        }
        columns::<S, AVX512>(lhs.rows(), m, k, w, out)
    }
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only detection makes a `Cpu`, and `Isa::Avx512` in one means
        // `is_x86_feature_detected!` confirmed AVX-512F as well as AVX2, FMA and F16C.
        Isa::Avx512 => unsafe { avx512(lhs, m, k, w, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2, FMA and F16C.
        Isa::Avx2Fma => unsafe { avx2(lhs, m, k, w, out) },
        _ => columns::<S, PORTABLE>(x, m, k, w, out),
    }
}

/// [`gemv::gemv_avx2`] when `x` is one row and `w` a stored weight; false (nothing written)
/// otherwise.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn row_gemv<S: Rows>(
    x: &[f32],
    m: usize,
    k: usize,
    w: &S,
    out: &mut ColumnsMut<'_>,
) -> bool {
    let Some((bytes, dtype)) = w.raw().filter(|_| m == 1) else {
        return false;
    };
    let cols = out.cols();
    let dst = out.row(0);
    // SAFETY: the caller guarantees the features `gemv_avx2` is compiled for.
    unsafe {
        match dtype {
            DType::F32 => gemv::gemv_avx2::<{ gemv::F32 }>(x, bytes, k, cols, dst),
            DType::BF16 => gemv::gemv_avx2::<{ gemv::BF16 }>(x, bytes, k, cols, dst),
            DType::F16 => gemv::gemv_avx2::<{ gemv::F16 }>(x, bytes, k, cols, dst),
            blocks => return quant::gemv_blocks_avx2(blocks, x, bytes, k, cols, dst),
        }
    }
    true
}

/// Outputs `[m, out.cols()]`, written into `out`.
#[inline(always)]
fn columns<S: Rows, const P: u8>(x: &[f32], m: usize, k: usize, w: &S, out: &mut ColumnsMut<'_>) {
    let cols = out.cols();
    let mut wbuf = vec![0.0f32; NB * KB];
    let mut acc = vec![0.0f32; m.min(MB) * NB * LANES];
    // x blocks outermost: one block of x rows stays in cache while every weight tile of this
    // task's columns passes by (re-decoding a tile per block costs 1/MB of its multiply-adds).
    let mut m0 = 0;
    while m0 < m {
        let mb = MB.min(m - m0);
        let mut n0 = cols.start;
        while n0 < cols.end {
            let nb = NB.min(cols.end - n0);
            acc[..mb * nb * LANES].fill(0.0);
            let mut k0 = 0;
            while k0 < k {
                let kb = KB.min(k - k0);
                for j in 0..nb {
                    let dst = &mut wbuf[j * KB..j * KB + kb];
                    #[cfg(target_arch = "x86_64")]
                    if P == AVX512 {
                        // SAFETY: `P == AVX512` only in the instantiation `columns_on` runs
                        // after detecting AVX-512F, AVX2, FMA and F16C.
                        unsafe { w.decode_avx512((n0 + j) * k + k0, dst) };
                        continue;
                    }
                    #[cfg(target_arch = "x86_64")]
                    if P >= AVX2 {
                        // SAFETY: `P >= AVX2` only in the instantiations `columns_on` runs
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
                t.run::<P>(mb, &mut acc);
                k0 += kb;
            }
            for i in 0..mb {
                let row = &mut out.row(m0 + i)[n0 - cols.start..][..nb];
                #[cfg(target_arch = "x86_64")]
                if P >= AVX2 && nb == NB {
                    // SAFETY: `P >= AVX2` only in the instantiations `columns_on` runs after
                    // detecting AVX2 and FMA.
                    unsafe { reduce8_avx2(&acc[i * NB * LANES..][..NB * LANES], row) };
                    continue;
                }
                for (j, o) in row.iter_mut().enumerate() {
                    let lanes = &acc[(i * nb + j) * LANES..][..LANES];
                    let mut a = [0.0f32; LANES];
                    a.copy_from_slice(lanes);
                    *o = simd::reduce_lanes(&a);
                }
            }
            n0 += nb;
        }
        m0 += mb;
    }
}

/// [`simd::reduce_lanes`] of 8 outputs' 16-lane accumulators at once (`acc` = 8 × 16 lanes,
/// output-major), into `out[..8]`. The same additions of the same lane pairs as the scalar
/// tree (lane i + lane i+8, then +4, +2, +1), done for 8 outputs per instruction by
/// transposing as it goes; a sum does not depend on which register lane it happens in.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn reduce8_avx2(acc: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_permutevar8x32_ps,
        _mm256_setr_epi32, _mm256_shuffle_ps, _mm256_storeu_ps,
    };
    let (acc, out) = (&acc[..8 * LANES], &mut out[..8]);
    // SAFETY: `acc` holds 128 f32s (8 outputs × 16 lanes; the loads read lanes 0..16 of each)
    // and `out` 8 (one store); every load and store is unaligned.
    unsafe {
        let p = acc.as_ptr();
        // Lane i + lane i+8: output o in register v[o], lanes 0..8.
        let v: [_; 8] = std::array::from_fn(|o| {
            _mm256_add_ps(
                _mm256_loadu_ps(p.add(o * LANES)),
                _mm256_loadu_ps(p.add(o * LANES + 8)),
            )
        });
        // + lane i+4: outputs (a, b) -> [a0..a3 | b0..b3].
        let four = |a, b| {
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(a, b),
                _mm256_permute2f128_ps::<0x31>(a, b),
            )
        };
        let s01 = four(v[0], v[1]);
        let s23 = four(v[2], v[3]);
        let s45 = four(v[4], v[5]);
        let s67 = four(v[6], v[7]);
        // + lane i+2: [a0 a1 c0 c1 | b0 b1 d0 d1] from (a|b, c|d).
        let two = |e, f| {
            _mm256_add_ps(
                _mm256_shuffle_ps::<0x44>(e, f),
                _mm256_shuffle_ps::<0xEE>(e, f),
            )
        };
        let t0 = two(s01, s23);
        let t1 = two(s45, s67);
        // + lane i+1: [o0 o2 o4 o6 | o1 o3 o5 o7].
        let r = _mm256_add_ps(
            _mm256_shuffle_ps::<0x88>(t0, t1),
            _mm256_shuffle_ps::<0xDD>(t0, t1),
        );
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_permutevar8x32_ps(r, order));
    }
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
    fn run<const P: u8>(&self, mb: usize, acc: &mut [f32]) {
        if P == AVX512 {
            self.run_wide(mb, acc);
            return;
        }
        if P == AVX2 {
            self.run_avx2(mb, acc);
            return;
        }
        let mut i = 0;
        while i < mb {
            let r = MR.min(mb - i);
            let mut j = 0;
            while j < self.nb {
                let c = NR.min(self.nb - j);
                match (r, c) {
                    (3, 2) => self.micro::<P, 3, 2>(i, j, acc),
                    (3, _) => self.micro::<P, 3, 1>(i, j, acc),
                    (2, 2) => self.micro::<P, 2, 2>(i, j, acc),
                    (2, _) => self.micro::<P, 2, 1>(i, j, acc),
                    (_, 2) => self.micro::<P, 1, 2>(i, j, acc),
                    _ => self.micro::<P, 1, 1>(i, j, acc),
                }
                j += c;
            }
            i += r;
        }
    }

    /// [`Tile::run`] with the AVX2 tile: `HALF_MR × HALF_NR` where it fits, shorter tiles for
    /// the block's last rows and the tile's last weight rows.
    #[inline(always)]
    fn run_avx2(&self, mb: usize, acc: &mut [f32]) {
        let mut i = 0;
        while i < mb {
            let r = HALF_MR.min(mb - i);
            let mut j = 0;
            while j < self.nb {
                let c = HALF_NR.min(self.nb - j);
                macro_rules! cols {
                    ($r:literal) => {
                        match c {
                            4 => self.micro::<AVX2, $r, 4>(i, j, acc),
                            3 => self.micro::<AVX2, $r, 3>(i, j, acc),
                            2 => self.micro::<AVX2, $r, 2>(i, j, acc),
                            _ => self.micro::<AVX2, $r, 1>(i, j, acc),
                        }
                    };
                }
                match r {
                    3 => cols!(3),
                    2 => cols!(2),
                    _ => cols!(1),
                }
                j += c;
            }
            i += r;
        }
    }

    /// [`Tile::run`] with the AVX-512 tile: `WIDE_MR × WIDE_NR` where it fits; the last rows of
    /// the block take a shorter tile, and the tile's last (fewer than `WIDE_NR`) weight rows
    /// go one at a time.
    #[inline(always)]
    fn run_wide(&self, mb: usize, acc: &mut [f32]) {
        let mut i = 0;
        while i < mb {
            let r = WIDE_MR.min(mb - i);
            let mut j = 0;
            while j < self.nb {
                let c = if self.nb - j >= WIDE_NR { WIDE_NR } else { 1 };
                macro_rules! rows {
                    ($c:literal) => {
                        match r {
                            6 => self.micro::<AVX512, 6, $c>(i, j, acc),
                            5 => self.micro::<AVX512, 5, $c>(i, j, acc),
                            4 => self.micro::<AVX512, 4, $c>(i, j, acc),
                            3 => self.micro::<AVX512, 3, $c>(i, j, acc),
                            2 => self.micro::<AVX512, 2, $c>(i, j, acc),
                            _ => self.micro::<AVX512, 1, $c>(i, j, acc),
                        }
                    };
                }
                if c == WIDE_NR {
                    rows!(4);
                } else {
                    rows!(1);
                }
                j += c;
            }
            i += r;
        }
    }

    /// `R` x rows (block-local `i..`) against `C` tile rows (`j..`), lanes kept in registers.
    #[inline(always)]
    fn micro<const P: u8, const R: usize, const C: usize>(
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
        if P == AVX512 {
            // SAFETY: `P == AVX512` only in the instantiation called from `columns_on`'s
            // AVX-512 wrapper, which runs only after AVX-512F was detected.
            unsafe { micro_avx512::<R, C>(&xs, &ws, full, acc, (i, j, self.nb)) };
            self.tail::<R, C>(&xs, &ws, full, acc, i, j);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if P == AVX2 {
            // SAFETY: `P == AVX2` only in the instantiation called from `columns_on`'s
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

/// Where each of an `R × C` micro-kernel's accumulators starts in `acc` (`acc_len` long), after
/// checking every bound its loop relies on, once: the loop itself is pure loads and FMAs
/// (per-load slice checks cost more issue slots than the FMAs they guard).
#[inline(always)]
fn checked_slots<const R: usize, const C: usize>(
    xs: &[&[f32]; R],
    ws: &[&[f32]; C],
    full: usize,
    acc_len: usize,
    at: (usize, usize, usize),
) -> [[usize; C]; R] {
    let (i, j, nb) = at;
    for s in xs.iter().chain(ws.iter()) {
        assert!(
            s.len() >= full,
            "micro-kernel operand shorter than its inner block"
        );
    }
    let slots: [[usize; C]; R] =
        std::array::from_fn(|r| std::array::from_fn(|c| ((i + r) * nb + j + c) * LANES));
    for row in &slots {
        for &o in row {
            assert!(
                o + LANES <= acc_len,
                "micro-kernel accumulator out of range"
            );
        }
    }
    slots
}

/// The AVX2 register micro-kernel: the same per-lane fused multiply-adds as the portable loop.
/// Lanes 0..8 and 8..16 of an accumulator never meet until the final reduction, so each pass
/// over a stretch of the inner block updates one half of every accumulator, held in one
/// `__m256` register. `at` = (block-local x row, tile row, tile width) locating the
/// accumulators in `acc`.
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
    let slots = checked_slots(xs, ws, full, acc.len(), at);
    let xp: [*const f32; R] = std::array::from_fn(|r| xs[r].as_ptr());
    let wp: [*const f32; C] = std::array::from_fn(|c| ws[c].as_ptr());
    let ap = acc.as_mut_ptr();
    let mut k0 = 0;
    while k0 < full {
        let end = (k0 + HALF_KB).min(full);
        for h in [0, 8] {
            // SAFETY: `checked_slots` asserted that every `xp[r]`/`wp[c]` is valid for `full`
            // reads (the loop reads `kk + h..kk + h + 8` with `kk + 16 <= full`, `full` a
            // multiple of 16), and every accumulator slot `o..o + 16` lies inside `acc`
            // (`h + 8 <= 16`). All loads and stores are unaligned.
            unsafe {
                let mut a: [[__m256; C]; R] = std::array::from_fn(|r| {
                    std::array::from_fn(|c| _mm256_loadu_ps(ap.add(slots[r][c] + h)))
                });
                let mut kk = k0;
                while kk < end {
                    let xv: [__m256; R] =
                        std::array::from_fn(|r| _mm256_loadu_ps(xp[r].add(kk + h)));
                    for c in 0..C {
                        let wv = _mm256_loadu_ps(wp[c].add(kk + h));
                        for r in 0..R {
                            a[r][c] = _mm256_fmadd_ps(xv[r], wv, a[r][c]);
                        }
                    }
                    kk += LANES;
                }
                for r in 0..R {
                    for c in 0..C {
                        _mm256_storeu_ps(ap.add(slots[r][c] + h), a[r][c]);
                    }
                }
            }
        }
        k0 = end;
    }
}

/// The AVX-512 register micro-kernel: the same per-lane fused multiply-adds again, each
/// 16-lane accumulator in one `__m512` register (lane `l` of the register is lane `l` of the
/// accumulator), so the tile can be twice as large as AVX2's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn micro_avx512<const R: usize, const C: usize>(
    xs: &[&[f32]; R],
    ws: &[&[f32]; C],
    full: usize,
    acc: &mut [f32],
    at: (usize, usize, usize),
) {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_storeu_ps};
    let slots = checked_slots(xs, ws, full, acc.len(), at);
    let xp: [*const f32; R] = std::array::from_fn(|r| xs[r].as_ptr());
    let wp: [*const f32; C] = std::array::from_fn(|c| ws[c].as_ptr());
    let ap = acc.as_mut_ptr();
    // SAFETY: `checked_slots` asserted that every `xp[r]`/`wp[c]` is valid for `full` reads
    // (the loop reads `kk..kk + 16` with `kk + 16 <= full`, `full` a multiple of 16) and that
    // every accumulator slot `o..o + 16` lies inside `acc`. All loads and stores are unaligned.
    unsafe {
        let mut a: [[__m512; C]; R] =
            std::array::from_fn(|r| std::array::from_fn(|c| _mm512_loadu_ps(ap.add(slots[r][c]))));
        let mut kk = 0;
        while kk < full {
            let wv: [__m512; C] = std::array::from_fn(|c| _mm512_loadu_ps(wp[c].add(kk)));
            for r in 0..R {
                let xv = _mm512_loadu_ps(xp[r].add(kk));
                for c in 0..C {
                    a[r][c] = _mm512_fmadd_ps(xv, wv[c], a[r][c]);
                }
            }
            kk += LANES;
        }
        for r in 0..R {
            for c in 0..C {
                _mm512_storeu_ps(ap.add(slots[r][c]), a[r][c]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each x row's best among its own list, whatever the lists share and however the rows
    /// they list are cut into spans: short lists, so that a row skipped or read from the wrong
    /// place would often have been the best.
    #[test]
    fn the_best_of_each_list_is_found_through_shared_copies_in_any_span() {
        let (n, k, m) = (300, 40, 30);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Twenty different rows, repeated: lists often hold equal scores, and the first wins.
        let distinct: Vec<f32> = (0..20 * k).map(|_| (next() % 9) as f32 - 4.0).collect();
        let values: Vec<f32> = (0..n)
            .flat_map(|j| &distinct[j % 20 * k..][..k])
            .copied()
            .collect();
        let w = Weight::from_values(DType::BF16, vec![n, k], &values).expect("shape");
        let x: Vec<f32> = (0..m * k)
            .map(|_| (next() % 7) as f32 * 0.5 - 1.5)
            .collect();
        let lists: Vec<Option<Vec<usize>>> = (0..m)
            .map(|i| {
                (i % 7 != 3).then(|| {
                    let mut rows: Vec<usize> =
                        (0..next() % 6).map(|_| (next() % 300) as usize).collect();
                    rows.sort_unstable();
                    rows.dedup();
                    rows
                })
            })
            .collect();
        let scores = super::super::linear(&Tensor::new(vec![m, k], x.clone()).expect("shape"), &w)
            .expect("shapes");
        let want: Vec<Option<usize>> = lists
            .iter()
            .enumerate()
            .map(|(i, list)| {
                let row = &scores.data()[i * n..(i + 1) * n];
                list.as_deref()?
                    .iter()
                    .copied()
                    .fold(None, |b: Option<usize>, j| match b {
                        Some(b) if row[b] >= row[j] => Some(b),
                        _ => Some(j),
                    })
            })
            .collect();
        for isa in simd::available() {
            for span in [1, 2, 3, 7, 64, 1000] {
                for threads in [1, 2, 3] {
                    let best = parallel::with_threads(threads, || {
                        best_of_lists(simd::limit(isa), &x, k, &lists, &w, span)
                    });
                    let got: Vec<Option<usize>> =
                        best.iter().map(|b| (!b.empty).then_some(b.index)).collect();
                    assert_eq!(got, want, "{isa:?}, spans of {span}, {threads} threads");
                }
            }
        }
    }

    /// The few-row kernels read x from an aligned copy when it does not start on a cache line,
    /// the panel kernel from its permuted copy: neither may change a bit.
    #[test]
    fn x_rows_give_the_same_bits_wherever_they_lie_in_memory() {
        let (k, n) = (64, 7);
        // Q8_0 blocks: an f16 scale of 1/64, then 32 signed bytes of a fixed pattern.
        let mut bytes = Vec::new();
        for b in 0..n * k / 32 {
            bytes.extend_from_slice(&half::f16::from_f32(1.0 / 64.0).to_le_bytes());
            bytes.extend((0..32).map(|i| ((b * 37 + i * 11) % 255) as u8));
        }
        let w = WeightRows {
            bytes: &bytes,
            dtype: DType::Q8_0,
        };
        for m in [1, 2, 5, 8, 30] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7) % 19) as f32 * 0.25 - 2.0)
                .collect();
            for isa in simd::available() {
                let cpu = simd::limit(isa);
                let want = run(cpu, &x, m, k, n, &w);
                let mut buf = vec![0.0f32; m * k + LANES];
                for off in 0..LANES {
                    buf[off..off + m * k].copy_from_slice(&x);
                    let got = run(cpu, &buf[off..off + m * k], m, k, n, &w);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{m} rows on {isa:?}, x {off} floats past the buffer's start"
                    );
                }
            }
        }
    }
}
