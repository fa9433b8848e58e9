//! The two kinds of tensor the kernels take: [`Tensor`], an owned row-major f32 activation, and
//! [`Weight`], a read-only view of stored weight bytes (bf16, f16, f32 or a GGML block format)
//! that is never copied to f32 wholesale; kernels convert tiles of it as they go.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

pub use super::dtype::DType;
use super::screen::{Screen, ScreenSource};

/// An owned, row-major f32 tensor (activations, logits, small converted vectors).
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// A shape/data mismatch when building a tensor or weight view.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shape {shape:?} needs {expected} elements, found {found}")]
pub struct ShapeMismatch {
    /// The requested shape.
    pub shape: Vec<usize>,
    /// Elements the shape needs.
    pub expected: usize,
    /// Elements supplied.
    pub found: usize,
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    /// A tensor from its shape and row-major data.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Result<Tensor, ShapeMismatch> {
        match numel(&shape) {
            Some(n) if n == data.len() => Ok(Tensor { shape, data }),
            n => Err(ShapeMismatch {
                expected: n.unwrap_or(usize::MAX),
                found: data.len(),
                shape,
            }),
        }
    }
    /// A tensor of zeros.
    pub fn zeros(shape: Vec<usize>) -> Tensor {
        let n = numel(&shape).expect("shape fits in memory");
        Tensor {
            shape,
            data: vec![0.0; n],
        }
    }
    /// A rank-0 tensor.
    pub fn scalar(v: f32) -> Tensor {
        Tensor {
            shape: Vec::new(),
            data: vec![v],
        }
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The row-major data.
    pub fn data(&self) -> &[f32] {
        &self.data
    }
    /// The row-major data, mutable.
    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }
    /// Consume into the data.
    pub fn into_data(self) -> Vec<f32> {
        self.data
    }
    /// Same data, new shape with the same number of elements.
    pub fn reshape(self, shape: Vec<usize>) -> Result<Tensor, ShapeMismatch> {
        Tensor::new(shape, self.data)
    }
    /// Size of the last dimension (1 for a scalar).
    pub fn last_dim(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor{:?}", self.shape)
    }
}

/// Stored weight bytes: a memory map in production, a `Vec<u8>` in tests.
pub trait WeightBytes: Send + Sync {
    /// All the bytes.
    fn bytes(&self) -> &[u8];
    /// A hint that `range` will not be read again soon: a file mapping drops those pages from
    /// the process's resident set (they are read back from the file if needed). Contents never
    /// change; the default does nothing.
    fn release(&self, range: Range<usize>) {
        let _ = range;
    }
    /// Bytes `at..at + out.len()` copied into `out`, by a route that does not make them
    /// resident in this process where there is one (a file read, for a mapping). For a few
    /// scattered rows of a large weight that is otherwise read through a smaller copy (the
    /// embedding table and its screen). The default copies from [`WeightBytes::bytes`].
    fn copy_to(&self, at: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.bytes()[at..at + out.len()]);
    }
}

impl WeightBytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// Shared weight bytes.
pub type Backing = Arc<dyn WeightBytes>;

/// A read-only, row-major view of weight bytes in their stored dtype (little-endian).
///
/// Cloning shares the backing bytes; `scan` hands each layer's weights to the body this way.
#[derive(Clone)]
pub struct Weight {
    dtype: DType,
    shape: Vec<usize>,
    backing: Backing,
    range: Range<usize>,
    /// The argmax screen of a `[n, k]` weight, built on first use and shared by clones.
    screen: Arc<OnceLock<Screen>>,
}

impl Weight {
    /// A view of `backing[range]` as a `dtype` tensor of `shape`.
    pub fn new(
        dtype: DType,
        shape: Vec<usize>,
        backing: Backing,
        range: Range<usize>,
    ) -> Result<Weight, ShapeMismatch> {
        let bytes_len = backing.bytes().len();
        // Rows of a block format are whole blocks, so every row starts at a block.
        let rows_whole = shape.last().is_none_or(|&d| d % dtype.block_elems() == 0);
        let n = numel(&shape).and_then(|n| dtype.bytes_for(n));
        let ok = rows_whole
            && range.start <= range.end
            && range.end <= bytes_len
            && n == Some(range.len());
        if !ok {
            return Err(ShapeMismatch {
                expected: n.unwrap_or(usize::MAX),
                found: range.len(),
                shape,
            });
        }
        Ok(Weight {
            dtype,
            shape,
            backing,
            range,
            screen: Arc::default(),
        })
    }
    /// A weight owning its f32 values (tests, small synthetic models).
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Weight, ShapeMismatch> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let len = bytes.len();
        Weight::new(DType::F32, shape, Arc::new(bytes), 0..len)
    }
    /// A weight owning `values` rounded to float `dtype` (round to nearest even), for tests and
    /// small synthetic models. Block formats are not made here (they come from files, or from
    /// [`Weight::new`] over their blocks): asking for one is a [`ShapeMismatch`] with nothing
    /// found.
    pub fn from_values(
        dtype: DType,
        shape: Vec<usize>,
        values: &[f32],
    ) -> Result<Weight, ShapeMismatch> {
        let bytes: Vec<u8> = match dtype {
            DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::BF16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
                .collect(),
            DType::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                .collect(),
            quantized => {
                return Err(ShapeMismatch {
                    expected: numel(&shape)
                        .and_then(|n| quantized.bytes_for(n))
                        .unwrap_or(usize::MAX),
                    found: 0,
                    shape,
                })
            }
        };
        let len = bytes.len();
        Weight::new(dtype, shape, Arc::new(bytes), 0..len)
    }
    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.backing.bytes()[self.range.clone()]
    }
    /// [`WeightBytes::release`] for elements `elems` (row-major) of this weight.
    pub fn release(&self, elems: Range<usize>) {
        let (per, size) = (self.dtype.block_elems(), self.dtype.block_bytes());
        let start = self.range.start + elems.start / per * size;
        let end = self.range.start + elems.end.div_ceil(per) * size;
        self.backing.release(start..end.min(self.range.end));
    }
    /// The argmax screen of this `[n, k]` weight, built on first call.
    pub(crate) fn screen(&self) -> &Screen {
        self.screen.get_or_init(|| Screen::build(self))
    }
    /// Whether [`Weight::screen`] has been built: then the weight's own pages were handed back,
    /// and a full read must hand them back again as it goes.
    pub(crate) fn has_screen(&self) -> bool {
        self.screen.get().is_some()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.range.len() / self.dtype.block_bytes() * self.dtype.block_elems()
    }
    /// The stored bytes of whole rows `rows` of this `[n, k]` weight, one after another in
    /// `out` (cleared first), copied by [`WeightBytes::copy_to`]: scattered rows of a mapped
    /// file are read without mapping the file around them.
    ///
    /// Panics if the weight is not 2-D, its rows are not whole blocks, or a row is out of range.
    pub fn copy_rows(&self, rows: &[usize], out: &mut Vec<u8>) {
        let [n, k] = *self.shape() else {
            panic!("copy_rows of a weight that is not 2-D");
        };
        assert!(
            k.is_multiple_of(self.dtype.block_elems()),
            "copy_rows: rows are not whole blocks"
        );
        let row = k / self.dtype.block_elems() * self.dtype.block_bytes();
        out.clear();
        out.resize(rows.len() * row, 0);
        // Consecutive rows in one copy: each is a system call when the bytes are a file's.
        let mut i = 0;
        while i < rows.len() {
            let first = rows[i];
            let mut end = i + 1;
            while end < rows.len() && rows[end] == rows[end - 1].wrapping_add(1) {
                end += 1;
            }
            let last = first.checked_add(end - i - 1).filter(|&l| l < n);
            assert!(last.is_some(), "copy_rows: rows {first}.. of {n}");
            self.backing
                .copy_to(self.range.start + first * row, &mut out[i * row..end * row]);
            i = end;
        }
    }
    /// Convert elements `start..start + out.len()` (row-major) into `out`. This is how kernels
    /// read weights: a row or tile at a time, never the whole matrix.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        decode_f32(self.dtype, self.bytes(), start, out);
    }
    /// A view of one slice along the first axis (layer `i` of a stacked weight, row `i` of a
    /// matrix), sharing the backing bytes.
    pub fn index0(&self, i: usize) -> Option<Weight> {
        let (&rows, rest) = self.shape.split_first()?;
        if i >= rows {
            return None;
        }
        let per = self.dtype.bytes_for(numel(rest)?)?;
        let start = self.range.start + i * per;
        Some(Weight {
            dtype: self.dtype,
            shape: rest.to_vec(),
            backing: Arc::clone(&self.backing),
            range: start..start + per,
            screen: Arc::default(),
        })
    }
}

/// Elements `start..start + out.len()` of row-major `dtype` data `all`, decoded to f32.
pub(crate) fn decode_f32(dtype: DType, all: &[u8], start: usize, out: &mut [f32]) {
    let n = out.len();
    let floats = |size: usize| &all[start * size..(start + n) * size];
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(floats(4).chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(floats(2).chunks_exact(2)) {
                *o = half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(floats(2).chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        blocks => super::quant::read_on(super::simd::cpu(), blocks, all, start, out),
    }
}

impl fmt::Debug for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Weight<{:?}>{:?}", self.dtype, self.shape)
    }
}
/// Screens are built from weights (only `linear_argmax`, on a 2-D head); a weight that is not
/// 2-D has no rows to screen.
impl ScreenSource for Weight {
    fn rows_and_k(&self) -> (usize, usize) {
        match self.shape() {
            [n, k] => (*n, *k),
            _ => (0, 0),
        }
    }
    fn read_f32(&self, start: usize, out: &mut [f32]) {
        Weight::read_f32(self, start, out);
    }
    fn release(&self, elems: Range<usize>) {
        Weight::release(self, elems);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Bytes that record every copy asked of them, as a file would see its reads.
    struct Recorded(Vec<u8>, Mutex<Vec<Range<usize>>>);

    impl WeightBytes for Recorded {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
        fn copy_to(&self, at: usize, out: &mut [u8]) {
            self.1
                .lock()
                .expect("not poisoned")
                .push(at..at + out.len());
            out.copy_from_slice(&self.0[at..at + out.len()]);
        }
    }

    #[test]
    fn rows_are_copied_as_they_are_stored_and_consecutive_ones_in_one_read() {
        // Eight rows of three bf16 values (six bytes) after a two-byte offset.
        let bytes: Vec<u8> = (0..50u8).collect();
        let backing = Arc::new(Recorded(bytes.clone(), Mutex::new(Vec::new())));
        let w = Weight::new(DType::BF16, vec![8, 3], backing.clone(), 2..50).expect("shape");
        let rows = [0, 1, 2, 5, 7];
        let mut out = Vec::new();
        w.copy_rows(&rows, &mut out);
        let want: Vec<u8> = rows
            .iter()
            .flat_map(|&j| &bytes[2 + j * 6..2 + (j + 1) * 6])
            .copied()
            .collect();
        assert_eq!(out, want);
        let reads = backing.1.lock().expect("not poisoned").clone();
        assert_eq!(reads, vec![2..20, 32..38, 44..50]);
    }
}
