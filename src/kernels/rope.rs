//! `rope`: rotary position embedding with NeoX-style half rotation, computed in HF's order.
//!
//! HF (`Gemma3RotaryEmbedding`, `_compute_default_rope_parameters`, linear scaling):
//! `inv_freq[i] = 1 / theta^(f32(2i) / f32(d))` in f32, then `inv_freq / factor` for linear
//! scaling; `angle = inv_freq[i] * f32(position)` in f32; `cos`, `sin` of the angle in f32;
//! `out = x * cos + rotate_half(x) * sin` where `rotate_half(x) = [-x2, x1]` for halves `x1`,
//! `x2`. Here every f32 step is the same IEEE operation; `pow`, `cos` and `sin` are correctly
//! rounded (see `kernels::math`: computed in f64 and rounded once).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::error::KernelError;
use super::math;
use super::parallel;
use super::tensor::Tensor;

/// Elements below which a thread start does not pay off.
const MIN_TASK_ELEMS: usize = 1 << 15;

/// The `head_dim / 2` inverse frequencies for base `theta` and linear scaling factor `scaling`
/// (1.0 for none), in HF's f32 order.
pub fn rope_inv_freq(head_dim: usize, theta: f32, scaling: f32) -> Vec<f32> {
    let d = head_dim as f32;
    (0..head_dim / 2)
        .map(|i| {
            let e = (2 * i) as f32 / d;
            (1.0f32 / math::powf(theta, e)) / scaling
        })
        .collect()
}

/// Rotate `x [batch, seq, heads, head_dim]`; `positions` holds one position per (batch, seq)
/// row, batch-major (`positions[b * seq + s]`), as HF's `position_ids`. `theta` is the RoPE base
/// and `scaling` the linear scaling factor (1.0 for none).
pub fn rope(
    x: &Tensor,
    positions: &[i64],
    theta: f32,
    scaling: f32,
) -> Result<Tensor, KernelError> {
    let &[b, s, h, d] = x.shape() else {
        return Err(KernelError::Rank {
            op: "rope",
            name: "x",
            shape: x.shape().to_vec(),
            need: "[batch, seq, heads, head_dim]",
        });
    };
    if d % 2 != 0 {
        return Err(KernelError::OddHeadDim {
            shape: x.shape().to_vec(),
            head_dim: d,
        });
    }
    if positions.len() != b * s {
        return Err(KernelError::Positions {
            op: "rope",
            shape: x.shape().to_vec(),
            expected: b * s,
            found: positions.len(),
        });
    }
    for (name, v) in [("theta", theta), ("scaling", scaling)] {
        if !v.is_finite() || v <= 0.0 {
            return Err(KernelError::BadParam {
                op: "rope",
                name,
                value: v.to_string(),
                need: "finite and positive",
            });
        }
    }
    let half = d / 2;
    let angles = Angles::of(d, theta, scaling, positions);
    let (table, row_slot) = (&angles.table, &angles.row_slot);
    let src = x.data();
    let mut out = vec![0.0f32; src.len()];
    if d > 0 && h > 0 {
        parallel::for_rows(&mut out, d, MIN_TASK_ELEMS.div_ceil(d), |rows, dst| {
            for (r, o) in rows.zip(dst.chunks_exact_mut(d)) {
                let k = row_slot[r / h];
                let cs = &table[k * half..(k + 1) * half];
                rotate(&src[r * d..(r + 1) * d], cs, o);
            }
        });
    }
    Tensor::new(x.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: "rope",
        shape: x.shape().to_vec(),
    })
}

/// The cos/sin table of one call: `table[slot * half + i]` for each distinct position's slot,
/// and each (batch, seq) row's slot.
struct Angles {
    key: (usize, u32, u32),
    positions: Vec<i64>,
    table: Vec<(f32, f32)>,
    row_slot: Vec<usize>,
}

/// Tables kept from recent calls. A decode step rotates q and k in every layer at the same
/// positions with one of two bases (sliding and global layers), so all but the first call of
/// each kind find theirs here; building one took most of a call (a correctly rounded `pow`,
/// `cos` and `sin` per frequency and position). `runner bench --profile` on Zen 5, the real
/// 270M file, 31 steps: rope 3.3-3.4 → 0.8 ms at batch 1, 6.7-7.5 → 4.1-4.6 ms at batch 32.
static RECENT: Mutex<Vec<Arc<Angles>>> = Mutex::new(Vec::new());
/// Tables kept at once, and the most entries a table may have to be kept: a prefill chunk
/// of 1024 positions with heads of 256 (1 MiB). At `1 << 16` batch 1's prefill of a
/// 1024-token prompt built its table again in every call, 36 times (rope 63 ms of a 971 ms
/// prefill, real 270M file, Zen 5).
const RECENT_TABLES: usize = 4;
const RECENT_MAX_ENTRIES: usize = 1 << 17;

impl Angles {
    fn of(d: usize, theta: f32, scaling: f32, positions: &[i64]) -> Arc<Angles> {
        let key = (d, theta.to_bits(), scaling.to_bits());
        let recent = RECENT.lock().map(|r| {
            r.iter()
                .find(|a| a.key == key && a.positions == positions)
                .cloned()
        });
        if let Ok(Some(found)) = recent {
            return found;
        }
        let angles = Arc::new(Angles::build(key, theta, scaling, positions));
        if angles.table.len() <= RECENT_MAX_ENTRIES {
            if let Ok(mut r) = RECENT.lock() {
                if r.len() == RECENT_TABLES {
                    r.remove(0);
                }
                r.push(angles.clone());
            }
        }
        angles
    }

    fn build(key: (usize, u32, u32), theta: f32, scaling: f32, positions: &[i64]) -> Angles {
        let d = key.0;
        let half = d / 2;
        let inv_freq = rope_inv_freq(d, theta, scaling);
        // cos/sin once per distinct position (batches share most of them).
        let mut slot: BTreeMap<i64, usize> = BTreeMap::new();
        for &p in positions {
            let next = slot.len();
            slot.entry(p).or_insert(next);
        }
        let mut table = vec![(0.0f32, 0.0f32); slot.len() * half];
        for (&p, &k) in &slot {
            let pf = p as f32;
            for (t, &f) in table[k * half..(k + 1) * half].iter_mut().zip(&inv_freq) {
                *t = math::cos_sin(f * pf);
            }
        }
        let row_slot = positions
            .iter()
            .map(|p| slot.get(p).copied().unwrap_or(0))
            .collect();
        Angles {
            key,
            positions: positions.to_vec(),
            table,
            row_slot,
        }
    }
}

/// `out = x * cos + rotate_half(x) * sin` for one head vector.
#[inline]
fn rotate(x: &[f32], cs: &[(f32, f32)], out: &mut [f32]) {
    let half = cs.len();
    let (x1, x2) = x.split_at(half);
    let (o1, o2) = out.split_at_mut(half);
    for i in 0..half {
        let (c, s) = cs[i];
        // (-x2) * s == -(x2 * s) exactly, so this is HF's x*cos + rotate_half(x)*sin.
        o1[i] = x1[i] * c - x2[i] * s;
        o2[i] = x2[i] * c + x1[i] * s;
    }
}
