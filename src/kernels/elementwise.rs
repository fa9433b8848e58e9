//! Element-wise kernels: `add`, `mul` (with suffix broadcasting), `scale` and `gelu_tanh`.
//!
//! Each output element is one f32 operation on its inputs (for `gelu_tanh`, a fixed sequence of
//! them, in PyTorch's order), so results never depend on how the work is split.

use super::error::KernelError;
use super::math;
use super::parallel;
use super::tensor::Tensor;

/// Elements below which a thread start does not pay off.
const MIN_TASK_ELEMS: usize = 1 << 16;

/// `a + b`, element-wise. Shapes must be equal, or one must be a suffix of the other (it is
/// repeated over the other's leading dimensions; a rank-0 scalar is the empty suffix). The
/// result has the larger shape.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    broadcast("add", a, b, |x, y| x + y)
}

/// `a * b`, element-wise, with the same broadcasting as [`add`].
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    broadcast("mul", a, b, |x, y| x * y)
}

/// `x * s` (one f32 multiply per element).
pub fn scale(x: &Tensor, s: f32) -> Tensor {
    map(x, |v| v * s)
}

/// GELU with the tanh approximation, matching PyTorch's `gelu(approximate='tanh')` in f32:
/// `inner = β·(x + κ·x³)` with `x³ = (x·x)·x`, `β = f32(√2 · 2/√π · 0.5)`, `κ = f32(0.044715)`,
/// then `(0.5·x)·(1 + tanh(inner))`, each step rounded to f32; `tanh` is correctly rounded
/// (see `kernels::math`: computed in f64 and rounded once).
pub fn gelu_tanh(x: &Tensor) -> Tensor {
    map(x, gelu_one)
}

/// One GELU value, in PyTorch's operation order.
#[inline]
pub(crate) fn gelu_one(x: f32) -> f32 {
    const BETA: f32 = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    const KAPPA: f32 = 0.044715;
    let cube = x * x * x;
    let inner = BETA * (x + KAPPA * cube);
    0.5 * x * (1.0 + math::tanh(inner))
}

/// Apply `f` to every element, in parallel over chunks.
fn map(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Tensor {
    let src = x.data();
    let mut out = vec![0.0f32; src.len()];
    let chunk = 4096;
    let n = out.len();
    if n <= chunk {
        for (o, v) in out.iter_mut().zip(src) {
            *o = f(*v);
        }
    } else {
        // Whole chunks in parallel, the remainder here.
        let whole = n - n % chunk;
        let (head, tail) = out.split_at_mut(whole);
        parallel::for_rows(head, chunk, MIN_TASK_ELEMS / chunk, |rows, dst| {
            let s = &src[rows.start * chunk..rows.end * chunk];
            for (o, v) in dst.iter_mut().zip(s) {
                *o = f(*v);
            }
        });
        for (o, v) in tail.iter_mut().zip(&src[whole..]) {
            *o = f(*v);
        }
    }
    match Tensor::new(x.shape().to_vec(), out) {
        Ok(t) => t,
        // Same element count as `x`, so the shape always fits.
        Err(_) => x.clone(),
    }
}

/// `op(a, b)` with suffix broadcasting; `op` must be commutative (the operands may swap so the
/// larger shape comes first).
fn broadcast(
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    op: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<Tensor, KernelError> {
    let (big, small) = if is_suffix(b.shape(), a.shape()) {
        (a, b)
    } else if is_suffix(a.shape(), b.shape()) {
        (b, a)
    } else {
        return Err(KernelError::Broadcast {
            op: name,
            a: a.shape().to_vec(),
            b: b.shape().to_vec(),
        });
    };
    let x = big.data();
    let y = small.data();
    let mut out = vec![0.0f32; x.len()];
    if !out.is_empty() {
        // Rows of `row` elements: the small operand repeats every `y.len()` elements, so pick
        // a row length that is a multiple of it (or, for equal shapes, the last dimension).
        let row = if y.len() == x.len() {
            big.last_dim().max(1)
        } else {
            y.len()
        };
        let same = y.len() == x.len();
        parallel::for_rows(&mut out, row, MIN_TASK_ELEMS.div_ceil(row), |rows, dst| {
            let start = rows.start * row;
            let xs = &x[start..start + dst.len()];
            if same {
                let ys = &y[start..start + dst.len()];
                for ((o, a), b) in dst.iter_mut().zip(xs).zip(ys) {
                    *o = op(*a, *b);
                }
            } else {
                for (d, s) in dst.chunks_exact_mut(row).zip(xs.chunks_exact(row)) {
                    for ((o, a), b) in d.iter_mut().zip(s).zip(y) {
                        *o = op(*a, *b);
                    }
                }
            }
        });
    }
    Tensor::new(big.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: name,
        shape: big.shape().to_vec(),
    })
}

/// `small` is a (possibly empty) suffix of `big`.
fn is_suffix(small: &[usize], big: &[usize]) -> bool {
    small.len() <= big.len() && big[big.len() - small.len()..] == *small
}
