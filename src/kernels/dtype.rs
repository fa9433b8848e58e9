//! [`DType`]: how a weight's elements are stored, floats or GGML blocks, and their sizes.

use std::fmt;

/// Storage dtype of a weight: a float format, or one of GGML's block formats (a block of 32 or
/// 256 elements shares its scales; [`super::quant`] decodes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum DType {
    /// IEEE 754 single precision.
    F32,
    /// bfloat16.
    BF16,
    /// IEEE 754 half precision.
    F16,
    /// 32 signed 8-bit values and one f16 scale.
    Q8_0,
    /// 32 4-bit values (offset 8) and one f16 scale.
    Q4_0,
    /// 32 5-bit values (offset 16) and one f16 scale.
    Q5_0,
    /// 32 4-bit values, one f16 scale and one f16 minimum.
    Q4_1,
    /// 32 5-bit values, one f16 scale and one f16 minimum.
    Q5_1,
    /// 256 4-bit values in 8 groups with 6-bit scales and minimums under two f16 factors.
    Q4_K,
    /// 256 5-bit values, grouped as [`DType::Q4_K`].
    Q5_K,
    /// 256 6-bit values (offset 32) in 16 groups with 8-bit scales under one f16 factor.
    Q6_K,
}

impl DType {
    /// Every dtype, floats first.
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q5_0,
        DType::Q4_1,
        DType::Q5_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];

    /// Elements per block (1 for the float formats).
    pub fn block_elems(self) -> usize {
        match self {
            DType::F32 | DType::BF16 | DType::F16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q5_0 | DType::Q4_1 | DType::Q5_1 => 32,
            DType::Q4_K | DType::Q5_K | DType::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q5_0 => 22,
            DType::Q4_1 => 20,
            DType::Q5_1 => 24,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
        }
    }

    /// Whether this is a block format.
    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// Bytes that hold `elems` elements, if they are a whole number of blocks (and fit).
    pub fn bytes_for(self, elems: usize) -> Option<usize> {
        let per = self.block_elems();
        elems
            .is_multiple_of(per)
            .then(|| (elems / per).checked_mul(self.block_bytes()))?
    }

    /// The name GGUF files and messages use (`F32`, `BF16`, `Q4_K`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::BF16 => "BF16",
            DType::F16 => "F16",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q5_0 => "Q5_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_1 => "Q5_1",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
