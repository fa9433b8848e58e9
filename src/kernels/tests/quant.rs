//! The block formats: the AVX2 and AVX-512 decoders against the scalar ones (which the GGUF fixture tests
//! hold to gguf-py's values), and `linear` on blocks against `linear_t` on the decoded f32
//! matrix, on every instruction set, thread count and batch size.

use std::sync::Arc;

use super::super::{linear_argmax, linear_on, linear_t, simd, with_threads, DType, Tensor, Weight};
use super::{bits, tensor, Rng};

/// The block formats.
fn quantized_dtypes() -> impl Iterator<Item = DType> {
    DType::ALL.into_iter().filter(|d| d.is_quantized())
}

/// Random blocks with every f16 scale set to a finite value of the kind real files hold (and
/// now and then a negative, zero or subnormal one).
fn blocks(dtype: DType, n_blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let size = dtype.block_bytes();
    let mut out: Vec<u8> = (0..n_blocks * size).map(|_| rng.next_u64() as u8).collect();
    for blk in out.chunks_exact_mut(size) {
        let mut scale = || -> [u8; 2] {
            let v = match rng.next_u64() % 8 {
                0 => -0.01,
                1 => 0.0,
                2 => 3.0e-6, // an f16 subnormal
                _ => 0.001 + (rng.next_u64() % 1000) as f32 * 1e-4,
            };
            half::f16::from_f32(v).to_bits().to_le_bytes()
        };
        match dtype {
            DType::Q6_K => blk[208..210].copy_from_slice(&scale()),
            DType::Q4_K | DType::Q5_K | DType::Q4_1 | DType::Q5_1 => {
                blk[0..2].copy_from_slice(&scale());
                blk[2..4].copy_from_slice(&scale());
            }
            _ => blk[0..2].copy_from_slice(&scale()),
        }
    }
    out
}

fn quantized(dtype: DType, n: usize, k: usize, rng: &mut Rng) -> Weight {
    let bytes = blocks(dtype, n * k / dtype.block_elems(), rng);
    let len = bytes.len();
    Weight::new(dtype, vec![n, k], Arc::new(bytes), 0..len).expect("whole blocks")
}

fn decoded(w: &Weight) -> Tensor {
    let mut values = vec![0.0f32; w.numel()];
    w.read_f32(0, &mut values);
    Tensor::new(w.shape().to_vec(), values).expect("same shape")
}

#[test]
fn simd_decoders_give_the_scalar_decoders_bits() {
    let mut rng = Rng::new(18);
    let every = simd::available().into_iter();
    for (isa, dtype) in every.flat_map(|isa| quantized_dtypes().map(move |d| (isa, d))) {
        let cpu = simd::limit(isa);
        let bytes = blocks(dtype, 64, &mut rng);
        let n = 64 * dtype.block_elems();
        let mut scalar = vec![0.0f32; n];
        super::super::quant::read(dtype, &bytes, 0, &mut scalar);
        for (start, len) in [(0, n), (7, n - 20), (dtype.block_elems(), 3)] {
            let mut fast = vec![f32::NAN; len];
            super::super::quant::read_on(cpu, dtype, &bytes, start, &mut fast);
            let want: Vec<u32> = scalar[start..start + len]
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let got: Vec<u32> = fast.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "{dtype} {isa:?} {start}+{len}");
        }
    }
}

#[test]
fn linear_on_blocks_equals_linear_t_on_the_decoded_matrix_on_every_path() {
    let mut rng = Rng::new(19);
    // k = 2048: x rows larger than L1, and on AVX-512 two chunks of a strip; 1280 a chunk and
    // a shorter one. 13 and 40 rows leave remainders of the strips of six and the tiles of
    // three.
    let shapes = |d| [(d, (40, 512)), (d, (13, 2048)), (d, (9, 1280))];
    for (dtype, (n, k)) in quantized_dtypes().flat_map(shapes) {
        let w = quantized(dtype, n, k, &mut rng);
        let dense = decoded(&w);
        // 24 rows and up take the panel kernel (on AVX-512 only past 128 rows and 2^18 x
        // floats: 130 rows at k 2048; on AVX2 past 32): 33 as three tiles of 11; AVX-512
        // strips leave remainders of their four-row tiles at 30, 33 and 130. AVX2 strips take
        // 6 to 32 rows in tiles of three: remainders at 8, 16 and 32.
        for m in [1, 2, 3, 5, 6, 8, 16, 30, 32, 33, 130] {
            let x = tensor(&[m, k], &mut rng, 1.5);
            let want = bits(&linear_t(&x, &dense).expect("shapes"));
            for isa in simd::available() {
                for threads in [1, 2, 3] {
                    let got = with_threads(threads, || linear_on(isa, &x, &w)).expect("shapes");
                    assert_eq!(
                        bits(&got),
                        want,
                        "{dtype} {m}x{k} {isa:?} {threads} threads"
                    );
                }
            }
            let ids = linear_argmax(&x, &w).expect("shapes");
            let best = super::super::argmax(&linear_t(&x, &dense).expect("shapes")).expect("rows");
            assert_eq!(ids, best, "{dtype} argmax m={m}");
        }
    }
}

/// Past 8 MiB of x, with few panels a block, the panel kernel takes the x rows in passes and
/// packs the panels again for each (460 rows of k = 4608: two passes): every format keeps the
/// bits of `linear_t` on its decoded values, on every instruction set and thread count.
#[test]
fn linear_on_blocks_keeps_its_bits_across_passes_of_rows() {
    let mut rng = Rng::new(32);
    let (k, m) = (4608, 460);
    let x = tensor(&[m, k], &mut rng, 1.5);
    for dtype in quantized_dtypes() {
        let w = quantized(dtype, 21, k, &mut rng);
        let want = bits(&linear_t(&x, &decoded(&w)).expect("shapes"));
        for isa in simd::available() {
            for threads in [1, 2] {
                let got = with_threads(threads, || linear_on(isa, &x, &w)).expect("shapes");
                assert_eq!(
                    bits(&got),
                    want,
                    "{dtype} {m}x{k} {isa:?} {threads} threads"
                );
            }
        }
    }
}

/// The panel packer (`quant::panel_*`, which `linear` uses from 24 x rows) puts each row's
/// decoded value where the panel kernel reads it, with zeros past the rows it was given, for
/// every format, panel width and instruction-set path.
#[cfg(target_arch = "x86_64")]
#[test]
fn block_rows_pack_into_panels_with_the_decoders_bits() {
    use super::super::quant::panel_on;
    use super::super::simd::Isa;
    let mut rng = Rng::new(20);
    for dtype in quantized_dtypes() {
        let k = 2 * dtype.block_elems();
        let n = 19;
        let w = quantized(dtype, n, k, &mut rng);
        let mut want = vec![0.0f32; n * k];
        w.read_f32(0, &mut want);
        // Lane l's elements start at vector `starts[l]`: the panel kernel's segment order.
        let starts: [usize; 16] = std::array::from_fn(|l| l * k / 16);
        for isa in simd::available().into_iter().filter(|i| *i >= Isa::Avx2Fma) {
            for rows in [0..16, 3..19, 16..19, 5..6] {
                let mut panel = vec![f32::NAN; k * 16];
                let cpu = simd::limit(isa);
                let packed = panel_on(cpu, dtype, w.bytes(), k, rows.clone(), &starts, &mut panel);
                assert!(packed, "{dtype} is a block format");
                for e in 0..k {
                    for c in 0..16 {
                        let got = panel[(starts[e % 16] + e / 16) * 16 + c];
                        let row = rows.start + c;
                        let value = if row < rows.end {
                            want[row * k + e]
                        } else {
                            0.0
                        };
                        assert_eq!(
                            got.to_bits(),
                            value.to_bits(),
                            "{dtype} {isa:?} rows {rows:?} element {e} column {c}"
                        );
                    }
                }
            }
        }
    }
}

/// Q6_K's AVX-512 decode multiplies `4 (q - 32)` by the block's scales divided by 4: with an
/// infinite, NaN, largest, smallest or zero `d` and the extreme 8-bit scales, every path still
/// gives the scalar decoder's values (NaN where it has NaN), in `read` and in one and several
/// x rows of `linear`.
#[test]
fn q6_k_keeps_its_values_for_extreme_scales_on_every_path() {
    let mut rng = Rng::new(43);
    let specials = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        65504.0,
        -65504.0,
        6.0e-8, // the smallest f16 subnormal
        0.0,
        -0.0,
    ];
    let (n, k) = (specials.len() * 2, 512);
    let mut bytes = blocks(DType::Q6_K, n * k / 256, &mut rng);
    for (i, blk) in bytes.chunks_exact_mut(210).enumerate() {
        let d = specials[i % specials.len()];
        blk[208..210].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        // The 8-bit scales at their ends, and zero.
        for (j, sc) in blk[192..208].iter_mut().enumerate() {
            *sc = [0x80u8, 0x7f, 0x00, 0xff][(i + j) % 4];
        }
    }
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut scalar = vec![0.0f32; n * k];
    super::super::quant::read(DType::Q6_K, &bytes, 0, &mut scalar);
    for isa in simd::available() {
        let mut fast = vec![0.0f32; n * k];
        super::super::quant::read_on(simd::limit(isa), DType::Q6_K, &bytes, 0, &mut fast);
        for (e, (a, b)) in fast.iter().zip(&scalar).enumerate() {
            assert!(same(*a, *b), "{isa:?} element {e}: {a} against {b}");
        }
    }
    let len = bytes.len();
    let w = Weight::new(DType::Q6_K, vec![n, k], Arc::new(bytes), 0..len).expect("whole blocks");
    let dense = Tensor::new(vec![n, k], scalar).expect("shape");
    for m in [1, 3, 8] {
        let x = tensor(&[m, k], &mut rng, 1.5);
        let want = linear_t(&x, &dense).expect("shapes");
        for isa in simd::available() {
            let got = linear_on(isa, &x, &w).expect("shapes");
            for (o, (a, b)) in got.data().iter().zip(want.data()).enumerate() {
                assert!(
                    same(*a, *b),
                    "{isa:?} {m} rows, output {o}: {a} against {b}"
                );
            }
        }
    }
}

#[test]
fn a_block_weight_refuses_rows_that_are_not_whole_blocks() {
    let bytes = vec![0u8; 144 * 2];
    let err = Weight::new(DType::Q4_K, vec![4, 128], Arc::new(bytes), 0..288).unwrap_err();
    assert_eq!(err.found, 288);
    assert!(Weight::from_values(DType::Q8_0, vec![1, 32], &[0.0; 32]).is_err());
}

/// An output head is screened only when stored in at least the bytes its 8-bit screen holds
/// (`k + 20` a row): the screen stands in for the head in memory, and a screen of a head stored
/// below 8 bits would hold more memory than the head (past the file + KV cache + 100 MiB
/// budget on a real 270M file with a Q5_1 `token_embd`). Either way the ids are those of
/// `linear`, at one x row and at several.
#[test]
fn only_a_head_of_at_least_eight_bits_a_weight_is_screened() {
    let mut rng = Rng::new(41);
    let (n, k) = (16384, 512);
    for dtype in DType::ALL {
        let w = if dtype.is_quantized() {
            quantized(dtype, n, k, &mut rng)
        } else {
            Weight::from_values(dtype, vec![n, k], &rng.values(n * k, 1.0)).expect("shape")
        };
        let dense = decoded(&w);
        for m in [1, 3] {
            let x = tensor(&[m, k], &mut rng, 1.0);
            let ids = linear_argmax(&x, &w).expect("shapes");
            let best = super::super::argmax(&linear_t(&x, &dense).expect("shapes")).expect("rows");
            assert_eq!(ids, best, "{dtype} m={m}");
        }
        // Q8_0 holds 34 bytes per 32 weights (544 a row here, the screen 532); every other
        // block format fewer than 8 bits a weight.
        let eight_bits = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0);
        assert_eq!(w.has_screen(), eight_bits, "{dtype}");
    }
}
