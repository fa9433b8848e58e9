//! The shared inner loops (16-lane fused multiply-add dot products, `y += a * x`, weight
//! decoding) and the run-time choice of instruction set they are compiled for.
//!
//! Every path computes the same IEEE operations in the same order: a dot product keeps 16 lane
//! accumulators, lane `l` taking elements `l, l + 16, l + 32, ...` in ascending order with a
//! fused multiply-add (one rounding), and the lanes are then summed as a fixed tree (lane `i`
//! plus lane `i + 8`, then `i + 4`, `i + 2`, `i + 1`). A tail shorter than 16 feeds lanes
//! `0..tail` only. The portable path gets the same fused results from `f32::mul_add` (a libm
//! call where the target has no FMA instruction), so results never depend on which path ran.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// Lanes in every accumulator; 16 f32 = one AVX-512 register, two AVX2 registers.
pub(crate) const LANES: usize = 16;

/// Bytes in a cache line: the unit of a software prefetch, and what `LineAligned` aligns to.
pub(crate) const LINE: usize = 64;

/// `len` f32s starting on a cache-line boundary, so that no 64-byte vector load or store at a
/// multiple of 16 floats from the start straddles two lines. The heap aligns to 16 bytes, and
/// from there three such accesses in four did: each then costs two of the cache's accesses
/// (measured where `linear` packs its panels and copies a few x rows).
pub(crate) struct LineAligned {
    buf: Vec<f32>,
    start: usize,
    len: usize,
}

/// f32s per cache line.
const LINE_FLOATS: usize = LINE / std::mem::size_of::<f32>();

impl LineAligned {
    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> LineAligned {
        let buf = vec![0.0f32; len + LINE_FLOATS];
        let off = buf.as_ptr().align_offset(LINE);
        // `align_offset` may decline (`usize::MAX`); then the floats only run slower.
        let start = if off < LINE_FLOATS { off } else { 0 };
        LineAligned { buf, start, len }
    }

    /// Whether `values` already starts on a cache line.
    pub(crate) fn starts_on_line(values: &[f32]) -> bool {
        values.as_ptr().align_offset(LINE) == 0
    }

    /// A copy of `values`.
    pub(crate) fn copy_of(values: &[f32]) -> LineAligned {
        let mut out = LineAligned::zeroed(values.len());
        out.as_mut_slice().copy_from_slice(values);
        out
    }

    pub(crate) fn as_slice(&self) -> &[f32] {
        &self.buf[self.start..self.start + self.len]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// Hints the cache lines of the `len` bytes from `p` into L1; never reads them, so `p` may
/// point anywhere (past the end of the weights included).
///
/// One x row against a few weight rows read side by side streams badly out of DRAM: the
/// hardware prefetcher gives up at each 4 KiB page, and on an AMD EPYC (Zen 5) four Q4_K rows
/// read that way gave 5-7 GB/s of a 36 GB/s probe. The row loops prefetch the next rows' bytes
/// in address order, a fixed share per step, which memory sees as one sequential stream.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch(p: *const u8, len: usize) {
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(p, len);
}

/// [`prefetch`] into L2 only.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_l2(p: *const u8, len: usize) {
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T1 }>(p, len);
}

/// One `prefetch` instruction of hint `HINT` per cache line of the `len` bytes from `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_lines<const HINT: i32>(p: *const u8, len: usize) {
    let mut line = 0;
    while line < len {
        // SAFETY: a prefetch is only a hint; no address makes it fault. SSE is baseline x86-64.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(p.wrapping_add(line).cast()) };
        line += LINE;
    }
}

/// Instruction set a hot loop runs with, from the least to the most capable: every set
/// includes the ones before it (a CPU detected as [`Isa::Avx512`] also runs the AVX2 loops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Isa {
    /// Plain Rust, no target features assumed (same results, slower without FMA hardware).
    Portable,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2Fma,
    /// [`Isa::Avx2Fma`] plus AVX-512F: the batched `linear` micro-kernel and the loops compiled
    /// through `with_isa!` (attention among them) keep each 16-lane accumulator in one 512-bit
    /// register; other loops run their AVX2 version.
    Avx512,
}

impl Isa {
    /// Every set, least capable first.
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2Fma, Isa::Avx512];

    /// The name `RUNNER_ISA` takes for this set.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2Fma => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

/// An instruction set this CPU runs, as a proof: only detection makes one ([`cpu`], [`limit`]),
/// and detection never yields a set `is_x86_feature_detected!` did not confirm. Every
/// `target_feature` copy of a loop is entered through one, so the `SAFETY` argument of those
/// calls is a fact of this type: no other code can build one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cpu(Isa);

impl Cpu {
    /// The set this token stands for.
    #[inline(always)]
    pub(crate) fn isa(self) -> Isa {
        self.0
    }

    /// Whether the AVX2/FMA/F16C loops may run.
    #[inline(always)]
    pub(crate) fn has_avx2(self) -> bool {
        self.0 >= Isa::Avx2Fma
    }

    /// Whether the AVX-512F loops may run.
    #[inline(always)]
    pub(crate) fn has_avx512(self) -> bool {
        self.0 >= Isa::Avx512
    }

    /// Whether the 8-bit dot-product loops of AVX-512 VNNI (with AVX-512BW) may run: an
    /// [`Isa::Avx512`] token on a CPU that has them. Only integer loops use them, whose sums
    /// are exact, so they need no [`Isa`] level of their own to keep results path-independent.
    #[inline(always)]
    pub(crate) fn has_avx512_vnni(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.has_avx512()
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }
}

/// The detected set plus one (0 = not detected yet).
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// The environment variable that limits the instruction set process-wide: `RUNNER_ISA=portable`,
/// `avx2` or `avx512` (a set above what the CPU has means the best it has; any other value, or
/// none, means the best). For checking results on every path.
pub const ISA_ENV: &str = "RUNNER_ISA";

thread_local! {
    /// A per-thread limit set by [`with_instruction_set`].
    static LIMIT: Cell<Option<Isa>> = const { Cell::new(None) };
}

/// The instruction set kernels called from this thread run with: the best this CPU supports
/// (detected once), limited by `RUNNER_ISA` and by [`with_instruction_set`]. Never a set the
/// CPU lacks.
pub fn isa() -> Isa {
    cpu().0
}

/// [`isa`], as the token the `target_feature` loops take.
pub(crate) fn cpu() -> Cpu {
    let found = match DETECTED.load(Ordering::Relaxed) {
        0 => {
            let env = std::env::var(ISA_ENV).ok();
            let asked = Isa::ALL
                .into_iter()
                .find(|i| env.as_deref().map(str::trim) == Some(i.name()));
            let found = detect().min(asked.unwrap_or(Isa::Avx512));
            DETECTED.store(found as u8 + 1, Ordering::Relaxed);
            found
        }
        n => Isa::ALL[usize::from(n - 1)],
    };
    Cpu(LIMIT
        .with(Cell::get)
        .map_or(found, |limit| found.min(limit)))
}

/// `asked`, or less when this thread or CPU cannot run it: what a kernel's `*_on` entry point
/// runs with. Never a set the CPU lacks.
pub(crate) fn limit(asked: Isa) -> Cpu {
    Cpu(isa().min(asked))
}

/// Every set kernels called from this thread can run with, least capable first.
pub fn available() -> Vec<Isa> {
    let best = isa();
    Isa::ALL.into_iter().filter(|&i| i <= best).collect()
}

/// Run `f` with kernels called from this thread limited to `isa` (or less, when the CPU lacks
/// it). The previous limit is restored after.
pub fn with_instruction_set<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Isa>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LIMIT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(LIMIT.with(|c| c.replace(Some(isa))));
    f()
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    let avx2 = std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c");
    if !avx2 {
        Isa::Portable
    } else if std::is_x86_feature_detected!("avx512f") {
        Isa::Avx512
    } else {
        Isa::Avx2Fma
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Isa {
    Isa::Portable
}

/// Whether the CPU is Intel's (its CPUID vendor string), detected once: the panel kernel's
/// blocking was measured apart on Intel's and AMD's cores (`linear/panel.rs`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn intel() -> bool {
    /// 0 = not detected yet, 1 = not Intel, 2 = Intel.
    static INTEL: AtomicU8 = AtomicU8::new(0);
    match INTEL.load(Ordering::Relaxed) {
        0 => {
            let intel = vendor_is_intel();
            INTEL.store(1 + u8::from(intel), Ordering::Relaxed);
            intel
        }
        n => n == 2,
    }
}

#[cfg(target_arch = "x86_64")]
fn vendor_is_intel() -> bool {
    // Leaf 0 is on every x86-64 CPU; the vendor string is EBX, EDX, ECX.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID leaf 0 exists on every x86-64 processor and touches no memory.
    let id = unsafe { std::arch::x86_64::__cpuid(0) };
    (id.ebx, id.edx, id.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
}

/// Declare `$name`, a copy of the `#[inline(always)]` function `$body` compiled for each
/// [`Isa`], taking the [`Cpu`] token to run with as its first argument. The target-feature copy
/// is only entered for a token that includes those features, and only detection makes tokens.
/// The one `unsafe` block is written here, so the files that use the macro need no `unsafe` of
/// their own.
macro_rules! with_isa {
    ($(#[$m:meta])* fn $name:ident $(<$($g:ident : $b:path),*>)? ($($a:ident : $t:ty),*) -> $r:ty = $body:path;) => {
        $(#[$m])*
        fn $name $(<$($g: $b),*>)? (cpu: $crate::kernels::simd::Cpu, $($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            fn avx2 $(<$($g: $b),*>)? ($($a: $t),*) -> $r {
                $body($($a),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
            fn avx512 $(<$($g: $b),*>)? ($($a: $t),*) -> $r {
                $body($($a),*)
            }
            #[cfg(target_arch = "x86_64")]
            if cpu.has_avx512() {
                // SAFETY: only detection makes a `Cpu`, and an `Isa::Avx512` one means
                // `is_x86_feature_detected!` confirmed AVX-512F besides AVX2, FMA and F16C.
                #[allow(unsafe_code)]
                return unsafe { avx512($($a),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if cpu.has_avx2() {
                // SAFETY: only detection makes a `Cpu`, and one from `Isa::Avx2Fma` up means
                // `is_x86_feature_detected!` confirmed AVX2, FMA and F16C.
                #[allow(unsafe_code)]
                return unsafe { avx2($($a),*) };
            }
            let _ = cpu;
            $body($($a),*)
        }
    };
}
pub(crate) use with_isa;

/// Accumulate `a · b` into 16 lane accumulators (see the module doc for the order).
/// `a` and `b` must have the same length.
#[inline(always)]
pub(crate) fn dot_lanes(a: &[f32], b: &[f32], acc: &mut [f32; LANES]) {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    for ((x, y), s) in ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .zip(acc.iter_mut())
    {
        *s = x.mul_add(*y, *s);
    }
}

/// Sum 16 lanes in the fixed tree order.
#[inline(always)]
pub(crate) fn reduce_lanes(acc: &[f32; LANES]) -> f32 {
    let mut a = *acc;
    let mut half = LANES / 2;
    while half > 0 {
        for i in 0..half {
            a[i] += a[i + half];
        }
        half /= 2;
    }
    a[0]
}

/// `a · b[i]` for each of `N` vectors `b[i]` as long as `a`, each exactly [`dot`]: the `N`
/// dot products advance side by side, so their multiply-add chains overlap where one dot is
/// bound by the latency of its own chain.
#[inline(always)]
pub(crate) fn dots<const N: usize>(a: &[f32], b: [&[f32]; N]) -> [f32; N] {
    let n = a.len();
    let b: [&[f32]; N] = b.map(|b| &b[..n]);
    let mut acc = [[0.0f32; LANES]; N];
    let whole = n - n % LANES;
    for (c, x) in a[..whole].chunks_exact(LANES).enumerate() {
        for (acc, b) in acc.iter_mut().zip(&b) {
            let y = &b[c * LANES..(c + 1) * LANES];
            for l in 0..LANES {
                acc[l] = x[l].mul_add(y[l], acc[l]);
            }
        }
    }
    for (acc, b) in acc.iter_mut().zip(&b) {
        for ((x, y), s) in a[whole..].iter().zip(&b[whole..]).zip(acc.iter_mut()) {
            *s = x.mul_add(*y, *s);
        }
    }
    acc.map(|acc| reduce_lanes(&acc))
}

/// `a · b` in the fixed order.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    dot_lanes(a, b, &mut acc);
    reduce_lanes(&acc)
}

/// `y[i] = fma(a, x[i], y[i])`.
#[inline(always)]
pub(crate) fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = a.mul_add(*x, *y);
    }
}

/// [`axpy`] with `a[0]` and `x[0]`, then `a[1]` and `x[1]`, and so on: each `y[i]` takes the
/// same multiply-adds in the same order, and is loaded and stored once instead of `N` times.
#[inline(always)]
pub(crate) fn axpys<const N: usize>(y: &mut [f32], a: [f32; N], x: [&[f32]; N]) {
    let n = y.len();
    let x: [&[f32]; N] = x.map(|x| &x[..n]);
    // Sixteen elements at a time through a local copy: written element by element over `y`,
    // the loop was vectorised behind a runtime check that `y` and the `x`s do not overlap, and
    // in attention a tenth of the time went to the scalar copy of the loop.
    let mut chunks = y.chunks_exact_mut(LANES);
    for (c, y) in (&mut chunks).enumerate() {
        let mut v = [0.0f32; LANES];
        v.copy_from_slice(y);
        for (a, x) in a.iter().zip(&x) {
            let x = &x[c * LANES..(c + 1) * LANES];
            for l in 0..LANES {
                v[l] = a.mul_add(x[l], v[l]);
            }
        }
        y.copy_from_slice(&v);
    }
    let whole = n - n % LANES;
    for (i, y) in chunks.into_remainder().iter_mut().enumerate() {
        let mut v = *y;
        for (a, x) in a.iter().zip(&x) {
            v = a.mul_add(x[whole + i], v);
        }
        *y = v;
    }
}

/// `vpshufb` controls that move a byte into the top of a 32-bit lane, making the lane the
/// byte's signed value times 2^24, exact: control `i` puts bytes `4i .. 4i + 4` of each 16-byte
/// half into the top bytes of that half's four lanes (the other bytes zero, by a set top bit).
/// The AVX2 block decoders' paired order and batch 1's AVX2 screen widen bytes with them.
#[cfg(target_arch = "x86_64")]
const TOP_BYTES: [[i8; 32]; 4] = {
    let mut c = [[-128i8; 32]; 4];
    let mut i = 0;
    while i < 4 {
        let mut lane = 0;
        while lane < 8 {
            // Byte 3 of each 32-bit lane; both halves pick from their own 16 bytes.
            c[i][4 * lane + 3] = (4 * i + lane % 4) as i8;
            lane += 1;
        }
        i += 1;
    }
    c
};

/// The four [`TOP_BYTES`] controls as vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn top_byte_controls() -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256};
    // SAFETY: each control is 32 bytes (one unaligned load).
    let c = |i: usize| unsafe { _mm256_loadu_si256(TOP_BYTES[i].as_ptr().cast::<__m256i>()) };
    [c(0), c(1), c(2), c(3)]
}

/// Where [`reduce16`] leaves accumulator `a`'s sum.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) const fn reduce16_lane(a: usize) -> usize {
    4 * (a % 4) + a / 4
}

/// [`reduce_lanes`] of sixteen accumulators at once: accumulator `a`'s sum, bit for bit, in
/// lane [`reduce16_lane`]`(a)` of the result. The tree adds lane `i + h` into lane `i` for `h`
/// = 8, 4, 2, 1; here each round pairs the vectors up so that one vector add does a round for
/// two (then four, eight, sixteen) accumulators side by side.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn reduce16(v: &[std::arch::x86_64::__m512; LANES]) -> [f32; LANES] {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_mask_blend_ps, _mm512_setzero_ps, _mm512_shuffle_f32x4,
        _mm512_shuffle_ps, _mm512_storeu_ps,
    };
    // h = 8: vector p holds accumulators 2p (lanes 0-7) and 2p + 1 (lanes 8-15): a's low half
    // and b's high half stay where they are (a blend, not a shuffle), and one shuffle brings
    // their partners (an f32 sum is the same whichever operand comes first).
    let mut s1 = [_mm512_setzero_ps(); 8];
    for (p, s) in s1.iter_mut().enumerate() {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        *s = _mm512_add_ps(
            _mm512_mask_blend_ps(0xFF00, a, b),
            _mm512_shuffle_f32x4::<0x4E>(a, b),
        );
    }
    // h = 4: vector q's 128-bit chunk c holds accumulator 4q + c.
    let mut s2 = [_mm512_setzero_ps(); 4];
    for (q, s) in s2.iter_mut().enumerate() {
        let (a, b) = (s1[2 * q], s1[2 * q + 1]);
        *s = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xDD>(a, b),
        );
    }
    // h = 2: vector r's chunk c holds accumulator 8r + c (lanes 0-1) and 8r + 4 + c (2-3); a
    // blend and one shuffle again, as for h = 8. (Both: one shuffle fewer per vector; the
    // strips, whose tiles end in two of these per 24 outputs, 1 % faster on Zen 5.)
    let mut s3 = [_mm512_setzero_ps(); 2];
    for (r, s) in s3.iter_mut().enumerate() {
        let (a, b) = (s2[2 * r], s2[2 * r + 1]);
        *s = _mm512_add_ps(
            _mm512_mask_blend_ps(0xCCCC, a, b),
            _mm512_shuffle_ps::<0x4E>(a, b),
        );
    }
    // h = 1: chunk c, lane t holds accumulator 4t + c.
    let (a, b) = (s3[0], s3[1]);
    let s4 = _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(a, b),
        _mm512_shuffle_ps::<0xDD>(a, b),
    );
    let mut sums = [0.0f32; LANES];
    // SAFETY: `sums` holds 16 f32s.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), s4) };
    sums
}

/// Decode little-endian bf16 (`half = false`) or f16 (`half = true`) elements from `bytes`
/// (2 per element) into `out`, with AVX2/F16C; exactly the values of [`bf16_to_f32`] and
/// [`f16_to_f32`] (NaN payloads aside).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn decode16_avx2(bytes: &[u8], half: bool, out: &mut [f32]) {
    use std::arch::x86_64::{
        __m128i, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps, _mm256_slli_epi32,
        _mm256_storeu_ps, _mm_loadu_si128,
    };
    let n = out.len().min(bytes.len() / 2);
    let (out, bytes) = (&mut out[..n], &bytes[..2 * n]);
    let mut oc = out.chunks_exact_mut(8);
    let mut bc = bytes.chunks_exact(16);
    for (o, b) in (&mut oc).zip(&mut bc) {
        // SAFETY: `b` holds exactly 16 bytes (one unaligned 128-bit load); `o` holds exactly
        // 8 f32s (one unaligned 256-bit store).
        unsafe {
            let raw = _mm_loadu_si128(b.as_ptr().cast::<__m128i>());
            let v = if half {
                _mm256_cvtph_ps(raw)
            } else {
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(raw)))
            };
            _mm256_storeu_ps(o.as_mut_ptr(), v);
        }
    }
    for (o, c) in oc
        .into_remainder()
        .iter_mut()
        .zip(bc.remainder().chunks_exact(2))
    {
        let bits = u16::from_le_bytes([c[0], c[1]]);
        *o = if half {
            f16_to_f32(bits)
        } else {
            bf16_to_f32(bits)
        };
    }
}

/// Independent multiply-add chains in [`fma_throughput`]: enough to cover the FMA units'
/// latency (4-5 cycles × 2 units on current x86 cores) without spilling registers.
const FMA_CHAINS: usize = 12;

/// One thread's best f32 multiply-add throughput in flop/s (two per multiply-add), measured over
/// about `seconds` with register-only chains as wide as [`isa()`] runs: 16 lanes with AVX-512, 8 with
/// AVX2+FMA, scalar otherwise. A probe of the machine's ceiling (`runner bench`), not a kernel.
pub fn fma_throughput(seconds: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let cpu = cpu();
        if cpu.has_avx512() {
            // SAFETY: the `Cpu` token says detection confirmed AVX-512F.
            return unsafe { fma_throughput_avx512(seconds) };
        }
        if cpu.has_avx2() {
            // SAFETY: the `Cpu` token says detection confirmed AVX2 and FMA.
            return unsafe { fma_throughput_avx2(seconds) };
        }
    }
    time_chains(seconds, 1, 1 << 17, 0.5f32, |r| {
        r.mul_add(0.999_999_9, 1e-7)
    })
}

/// Flop/s of `FMA_CHAINS` independent chains of `step` (one multiply-add on `lanes` lanes),
/// stepped `batch` times between looks at the clock, for about `seconds`: the fastest round
/// counts, as the linear probe keeps its fastest call, so a round the scheduler interrupted
/// (another process on the core) does not pull the ceiling below what the kernels reach.
/// Inlined into each target-feature caller, so `step` compiles to that set's instruction.
#[inline(always)]
fn time_chains<V: Copy>(
    seconds: f64,
    lanes: usize,
    batch: usize,
    init: V,
    step: impl Fn(V) -> V,
) -> f64 {
    let mut acc = [init; FMA_CHAINS];
    let start = std::time::Instant::now();
    let mut fastest = f64::INFINITY;
    while fastest.is_infinite() || start.elapsed().as_secs_f64() < seconds {
        let round = std::time::Instant::now();
        for _ in 0..batch {
            for r in acc.iter_mut() {
                *r = step(*r);
            }
        }
        fastest = fastest.min(round.elapsed().as_secs_f64());
    }
    std::hint::black_box(acc);
    batch as f64 * (FMA_CHAINS * lanes * 2) as f64 / fastest.max(f64::MIN_POSITIVE)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_throughput_avx2(seconds: f64) -> f64 {
    use std::arch::x86_64::{_mm256_fmadd_ps, _mm256_set1_ps};
    let (a, b) = (_mm256_set1_ps(0.999_999_9), _mm256_set1_ps(1e-7));
    time_chains(seconds, 8, 1 << 20, _mm256_set1_ps(0.5), |r| {
        _mm256_fmadd_ps(r, a, b)
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_throughput_avx512(seconds: f64) -> f64 {
    use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_set1_ps};
    let (a, b) = (_mm512_set1_ps(0.999_999_9), _mm512_set1_ps(1e-7));
    time_chains(seconds, 16, 1 << 20, _mm512_set1_ps(0.5), |r| {
        _mm512_fmadd_ps(r, a, b)
    })
}

/// bfloat16 bits to f32 (exact).
#[inline(always)]
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// IEEE half bits to f32 (exact, including subnormals, infinities and NaN payloads).
#[inline(always)]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exp = u32::from((bits >> 10) & 0x1f);
    let man = u32::from(bits & 0x3ff);
    if exp == 0 {
        // Zero or subnormal: man * 2^-24, exact in f32.
        let mag = man as f32 * (1.0 / 16_777_216.0);
        f32::from_bits(mag.to_bits() | sign)
    } else if exp == 31 {
        f32::from_bits(sign | 0x7f80_0000 | (man << 13))
    } else {
        f32::from_bits(sign | ((exp + 112) << 23) | (man << 13))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lane values whose sums round differently in each order: magnitudes spread over many
    /// binades, so any change to the tree's pairing shows in the last bits.
    fn spread_lanes(seed: u32) -> [f32; LANES] {
        let mut s = seed.wrapping_mul(2_654_435_761) | 1;
        std::array::from_fn(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            v * (1u32 << (s % 24)) as f32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sixteen_trees_at_once_give_each_trees_bits() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512 here: the vector reduction is not run");
            return;
        }
        for round in 0..200 {
            let acc: Vec<[f32; LANES]> = (0..LANES as u32)
                .map(|a| spread_lanes(round * 16 + a))
                .collect();
            // SAFETY: AVX-512F was detected above; each `acc[a]` holds 16 f32s.
            let got = unsafe {
                use std::arch::x86_64::_mm512_loadu_ps;
                let v = std::array::from_fn(|a| _mm512_loadu_ps(acc[a].as_ptr()));
                reduce16(&v)
            };
            for (a, lanes) in acc.iter().enumerate() {
                assert_eq!(
                    got[reduce16_lane(a)].to_bits(),
                    reduce_lanes(lanes).to_bits(),
                    "accumulator {a} of round {round}"
                );
            }
        }
    }

    #[test]
    fn dots_and_axpys_give_the_bits_of_one_at_a_time() {
        let vals = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 97.0 - 10.0)
                .collect()
        };
        for n in [0, 1, 15, 16, 17, 33, 256, 300] {
            let a = vals(n, 1);
            let b: Vec<Vec<f32>> = (2..6).map(|s| vals(n, s)).collect();
            let refs: [&[f32]; 4] = std::array::from_fn(|i| &b[i][..]);
            let got = dots(&a, refs);
            for (i, got) in got.iter().enumerate() {
                assert_eq!(
                    got.to_bits(),
                    dot(&a, &b[i]).to_bits(),
                    "dot {i} of length {n}"
                );
            }
            let weights = [0.3f32, -1.7, 2.25, 1e-3];
            let mut together = vals(n, 9);
            let mut apart = together.clone();
            axpys(&mut together, weights, refs);
            for (w, x) in weights.iter().zip(&b) {
                axpy(&mut apart, *w, x);
            }
            let same = together
                .iter()
                .zip(&apart)
                .all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "axpys of length {n}");
        }
    }

    #[test]
    fn line_aligned_floats_start_on_a_cache_line_and_hold_what_was_copied() {
        for len in [0, 1, 15, 16, 17, 640, 4099] {
            let values: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            let copy = LineAligned::copy_of(&values);
            assert_eq!(copy.as_slice(), &values[..], "{len} values");
            assert_eq!(copy.as_slice().as_ptr() as usize % 64, 0, "{len} values");
            let mut zeros = LineAligned::zeroed(len);
            assert!(zeros.as_slice().iter().all(|&v| v == 0.0), "{len} zeros");
            assert_eq!(zeros.as_mut_slice().len(), len);
            assert_eq!(
                zeros.as_mut_slice().as_ptr() as usize % 64,
                0,
                "{len} zeros"
            );
        }
    }

    #[test]
    fn f16_decoding_matches_half_for_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            if want.is_nan() {
                assert!(got.is_nan(), "bits {bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "bits {bits:#06x}");
            }
        }
    }

    #[test]
    fn bf16_decoding_matches_half_for_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let want = half::bf16::from_bits(bits).to_f32();
            let got = bf16_to_f32(bits);
            if want.is_nan() {
                // half quiets signalling NaNs; the payload is irrelevant to the kernels.
                assert!(got.is_nan(), "bits {bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "bits {bits:#06x}");
            }
        }
    }

    with_isa! {
        fn dot_on(a: &[f32], b: &[f32]) -> f32 = dot;
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_decoding_matches_scalar_decoding_for_every_bit_pattern() {
        if !cpu().has_avx2() {
            return;
        }
        // 65536 patterns plus 3, so the scalar tail runs too.
        let patterns: Vec<u16> = (0..=u16::MAX).chain([0x0001, 0x8000, 0x3c00]).collect();
        let bytes: Vec<u8> = patterns.iter().flat_map(|b| b.to_le_bytes()).collect();
        for half in [false, true] {
            let mut out = vec![0.0f32; patterns.len()];
            // SAFETY: the `Cpu` token reported AVX2, FMA and F16C above.
            unsafe { decode16_avx2(&bytes, half, &mut out) };
            for (&bits, got) in patterns.iter().zip(&out) {
                let want = if half {
                    f16_to_f32(bits)
                } else {
                    bf16_to_f32(bits)
                };
                if want.is_nan() {
                    assert!(got.is_nan(), "{bits:#06x}");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "half={half} {bits:#06x}");
                }
            }
        }
    }

    #[test]
    fn a_limit_never_raises_the_instruction_set() {
        let best = isa();
        for asked in Isa::ALL {
            assert_eq!(with_instruction_set(asked, isa), best.min(asked));
            assert_eq!(limit(asked).isa(), best.min(asked));
            let nested = with_instruction_set(asked, || with_instruction_set(Isa::Avx512, isa));
            assert_eq!(nested, best, "an inner limit replaces the outer one");
            assert_eq!(
                with_instruction_set(asked, || limit(Isa::Avx512).isa()),
                best.min(asked)
            );
        }
        assert_eq!(available().first(), Some(&Isa::Portable));
        assert_eq!(available().last(), Some(&best));
        let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names, ["portable", "avx2", "avx512"]);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn detection_picks_the_widest_set_this_cpu_has() {
        let avx2 = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        let want = match (avx2, std::is_x86_feature_detected!("avx512f")) {
            (false, _) => Isa::Portable,
            (true, false) => Isa::Avx2Fma,
            (true, true) => Isa::Avx512,
        };
        assert_eq!(detect(), want);
        if std::env::var_os(ISA_ENV).is_none() {
            assert_eq!(isa(), want);
        }
    }

    #[test]
    fn dot_follows_the_documented_lane_order() {
        // Spell the order out with scalar code and compare bits, on lengths with tails.
        let a: Vec<f32> = (0..53)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.37)
            .collect();
        let b: Vec<f32> = (0..53)
            .map(|i| ((i * 17 % 7) as f32 - 3.0) * 1.13)
            .collect();
        for n in [0, 1, 15, 16, 17, 32, 53] {
            let mut lanes = [0.0f32; 16];
            for i in 0..n {
                lanes[i % 16] = a[i].mul_add(b[i], lanes[i % 16]);
            }
            for half in [8, 4, 2, 1] {
                for i in 0..half {
                    lanes[i] += lanes[i + half];
                }
            }
            assert_eq!(dot(&a[..n], &b[..n]).to_bits(), lanes[0].to_bits(), "n={n}");
            let fast = dot_on(cpu(), &a[..n], &b[..n]);
            assert_eq!(fast.to_bits(), lanes[0].to_bits(), "n={n} isa={:?}", isa());
        }
    }
}
