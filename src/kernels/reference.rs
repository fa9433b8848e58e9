//! Slow, obviously-correct twins of the kernels: naive loops over the textbook formulas, in f64
//! where that helps. Tests compare the fast kernels against these; they are also handy when
//! chasing a parity difference. They assume valid shapes (the fast kernels own validation) and
//! return f64 values in the same row-major layout as the fast kernel's output.

use super::tensor::{Tensor, Weight};

/// Every element of `w`, decoded one at a time.
pub fn weight_values(w: &Weight) -> Vec<f64> {
    let mut one = [0.0f32];
    (0..w.numel())
        .map(|i| {
            w.read_f32(i, &mut one);
            f64::from(one[0])
        })
        .collect()
}

fn values(x: &Tensor) -> Vec<f64> {
    x.data().iter().map(|&v| f64::from(v)).collect()
}

/// `y[i, j] = Σ_k x[i, k] · w[j, k]` in f64.
pub fn linear(x: &Tensor, w: &Weight) -> Vec<f64> {
    let wv = weight_values(w);
    linear_values(&values(x), &wv, w.shape()[1], w.shape()[0], false)
}

/// `Σ_k |x[i, k] · w[j, k]|`, the scale of the rounding error a dot product can make.
pub fn linear_abs(x: &Tensor, w: &Weight) -> Vec<f64> {
    let wv = weight_values(w);
    linear_values(&values(x), &wv, w.shape()[1], w.shape()[0], true)
}

fn linear_values(x: &[f64], w: &[f64], k: usize, n: usize, abs: bool) -> Vec<f64> {
    let m = x.len().checked_div(k).unwrap_or(0);
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for t in 0..k {
                let p = x[i * k + t] * w[j * k + t];
                s += if abs { p.abs() } else { p };
            }
            out[i * n + j] = s;
        }
    }
    out
}

/// `a + b` with `b` (or `a`) repeated over the other's leading dimensions.
pub fn add(a: &Tensor, b: &Tensor) -> Vec<f64> {
    zip_broadcast(a, b, |x, y| x + y)
}

/// `a * b` with the same broadcasting as [`add`].
pub fn mul(a: &Tensor, b: &Tensor) -> Vec<f64> {
    zip_broadcast(a, b, |x, y| x * y)
}

fn zip_broadcast(a: &Tensor, b: &Tensor, op: fn(f64, f64) -> f64) -> Vec<f64> {
    let (big, small) = if a.data().len() >= b.data().len() {
        (a, b)
    } else {
        (b, a)
    };
    let s = small.data();
    big.data()
        .iter()
        .enumerate()
        .map(|(i, &x)| op(f64::from(x), f64::from(s[i % s.len()])))
        .collect()
}

/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` in f64.
pub fn gelu_tanh(x: &Tensor) -> Vec<f64> {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    values(x)
        .into_iter()
        .map(|x| 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh()))
        .collect()
}

/// `x / sqrt(mean(x²) + eps) · (offset + w)` per row, in f64.
pub fn rms_norm(x: &Tensor, w: &Weight, eps: f32, offset: f32) -> Vec<f64> {
    let wv = weight_values(w);
    let d = wv.len();
    let xv = values(x);
    let mut out = Vec::with_capacity(xv.len());
    for row in xv.chunks(d.max(1)) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let r = 1.0 / (ms + f64::from(eps)).sqrt();
        for (v, g) in row.iter().zip(&wv) {
            out.push(v * r * (f64::from(offset) + g));
        }
    }
    out
}

/// `exp(x_i - max) / Σ exp(x_j - max)` per row, in f64.
pub fn softmax(x: &Tensor) -> Vec<f64> {
    let d = x.last_dim();
    let mut out = Vec::new();
    for row in values(x).chunks(d.max(1)) {
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

/// Per row: the first NaN if there is one, else the first index holding the maximum.
pub fn argmax(x: &Tensor) -> Vec<u32> {
    let d = x.last_dim();
    x.data()
        .chunks(d.max(1))
        .map(|row| {
            if let Some(i) = row.iter().position(|v| v.is_nan()) {
                return i as u32;
            }
            let mut best = 0;
            for i in 1..row.len() {
                if row[i] > row[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}

/// Rows `w[id] · scale`.
pub fn embed(ids: &[u32], w: &Weight, scale: f32) -> Vec<f64> {
    let wv = weight_values(w);
    let d = w.shape()[1];
    ids.iter()
        .flat_map(|&id| {
            let row = &wv[id as usize * d..(id as usize + 1) * d];
            row.iter().map(move |v| v * f64::from(scale))
        })
        .collect()
}

/// HF's RoPE angle for pair `i` at `position`, written out step by step in f32:
/// `(1 / f32(theta^(f32(2i) / f32(d)))) / scaling`, times `f32(position)`.
pub fn rope_angle(i: usize, d: usize, position: i64, theta: f32, scaling: f32) -> f32 {
    let exponent = (2 * i) as f32 / d as f32;
    let power = f64::from(theta).powf(f64::from(exponent)) as f32;
    let inv_freq = (1.0f32 / power) / scaling;
    inv_freq * position as f32
}

/// `x_1·cos − x_2·sin`, `x_2·cos + x_1·sin` for each half pair, angles from [`rope_angle`],
/// rotation in f64.
pub fn rope(x: &Tensor, positions: &[i64], theta: f32, scaling: f32) -> Vec<f64> {
    let s = x.shape();
    let (heads, d) = (s[2], s[3]);
    let half = d / 2;
    let xv = values(x);
    let mut out = vec![0.0; xv.len()];
    for (row, (o, xr)) in out.chunks_mut(d).zip(xv.chunks(d)).enumerate() {
        let pos = positions[row / heads];
        for i in 0..half {
            let a = f64::from(rope_angle(i, d, pos, theta, scaling));
            let (sin, cos) = a.sin_cos();
            o[i] = xr[i] * cos - xr[i + half] * sin;
            o[i + half] = xr[i + half] * cos + xr[i] * sin;
        }
    }
    out
}

/// Attention of queries `q [batch, t, heads, d]` at columns `total - t .. total`, against the
/// full history `k_all`, `v_all [batch, total, kv, d]` (no cache), in f64: each query at column
/// `c` of sequence `b` sees columns `j` with `pad[b] <= j <= c` and, with a window `w`,
/// `j > c - w`; a query that sees nothing outputs zeros.
pub fn attention(
    q: &Tensor,
    k_all: &Tensor,
    v_all: &Tensor,
    pad: &[usize],
    window: Option<usize>,
    scale: f32,
) -> Vec<f64> {
    let [batch, t, heads, d] = [q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]];
    let (total, kv) = (k_all.shape()[1], k_all.shape()[2]);
    let group = heads / kv;
    let (qv, kvv, vvv) = (values(q), values(k_all), values(v_all));
    let mut out = vec![0.0; qv.len()];
    for (b, &pad_b) in pad.iter().enumerate().take(batch) {
        for ti in 0..t {
            let c = total - t + ti;
            for h in 0..heads {
                let kh = h / group;
                let qo = ((b * t + ti) * heads + h) * d;
                let visible: Vec<usize> = (0..=c)
                    .filter(|&j| j >= pad_b && window.is_none_or(|w| j + w > c))
                    .collect();
                if visible.is_empty() {
                    continue;
                }
                let at = |j: usize| ((b * total + j) * kv + kh) * d;
                let scores: Vec<f64> = visible
                    .iter()
                    .map(|&j| {
                        (0..d).map(|e| qv[qo + e] * kvv[at(j) + e]).sum::<f64>() * f64::from(scale)
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let ex: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = ex.iter().sum();
                for (&j, e) in visible.iter().zip(&ex) {
                    for dd in 0..d {
                        out[qo + dd] += e / sum * vvv[at(j) + dd];
                    }
                }
            }
        }
    }
    out
}
