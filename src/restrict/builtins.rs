//! The built-ins: the only operations an engine can perform. This table is the whole
//! vocabulary: a call resolves to a user function or to a name here, or it is an error. `scan`
//! is not a built-in but a language form (see `resolve`), so it is not listed.
//!
//! Each built-in has a name and an arity (used by the verifier), a type rule (used by the
//! compiler: kinds, and the shapes known in advance), and an implementation. The arithmetic
//! ones call `crate::kernels`; four are pure shape operations on a tensor's metadata or rows
//! (`split_batch`, `split_heads`, `merge_heads`, `last_position`) that no kernel provides.

use std::fmt;

use super::error::RunErrorKind;
use super::value::{Dim, State, StateKind, Type, Value};
use crate::kernels::{self, KernelError, Tensor};

/// A built-in operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Builtin {
    /// `linear(x [..., in], w [out, in]) -> [..., out]`.
    Linear,
    /// `add(a, b)`: element-wise sum, suffix broadcasting.
    Add,
    /// `mul(a, b)`: element-wise product, suffix broadcasting.
    Mul,
    /// `scale(x, s)`: `x * s`.
    Scale,
    /// `rms_norm(x [..., d], w [d], eps, offset)`.
    RmsNorm,
    /// `gelu_tanh(x)`.
    GeluTanh,
    /// `softmax(x)` over the last axis.
    Softmax,
    /// `argmax(x [..., n]) -> ids`, one per row.
    Argmax,
    /// `embed(ids, table [vocab, d], scale) -> [len(ids), d]`.
    Embed,
    /// `rope(x [b, s, h, d], positions, theta, scaling)`.
    Rope,
    /// `attention(q, k, v, cache, pad, scale)`.
    Attention,
    /// `split_batch(x [b*s, ...], b) -> [b, s, ...]`.
    SplitBatch,
    /// `split_heads(x [..., h*d], h) -> [..., h, d]`.
    SplitHeads,
    /// `merge_heads(x [..., h, d]) -> [..., h*d]`.
    MergeHeads,
    /// `last_position(x [..., s, d]) -> [..., d]`: the last position of each sequence.
    LastPosition,
}

/// Why a built-in's arguments do not type-check.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeError {
    /// Argument `index` (1-based) has the wrong kind.
    Kind {
        /// 1-based argument index.
        index: usize,
        /// The kind it needs.
        expected: &'static str,
        /// What it is.
        found: Type,
    },
    /// Known shapes that cannot work together.
    Shape(String),
}

impl Builtin {
    /// Every built-in.
    pub const ALL: &'static [Builtin] = &[
        Builtin::Linear,
        Builtin::Add,
        Builtin::Mul,
        Builtin::Scale,
        Builtin::RmsNorm,
        Builtin::GeluTanh,
        Builtin::Softmax,
        Builtin::Argmax,
        Builtin::Embed,
        Builtin::Rope,
        Builtin::Attention,
        Builtin::SplitBatch,
        Builtin::SplitHeads,
        Builtin::MergeHeads,
        Builtin::LastPosition,
    ];

    /// The name engines call it by (and policies list).
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Linear => "linear",
            Builtin::Add => "add",
            Builtin::Mul => "mul",
            Builtin::Scale => "scale",
            Builtin::RmsNorm => "rms_norm",
            Builtin::GeluTanh => "gelu_tanh",
            Builtin::Softmax => "softmax",
            Builtin::Argmax => "argmax",
            Builtin::Embed => "embed",
            Builtin::Rope => "rope",
            Builtin::Attention => "attention",
            Builtin::SplitBatch => "split_batch",
            Builtin::SplitHeads => "split_heads",
            Builtin::MergeHeads => "merge_heads",
            Builtin::LastPosition => "last_position",
        }
    }

    /// The built-in called `name`.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| b.name() == name)
    }

    /// How many arguments it takes.
    pub fn arity(self) -> usize {
        match self {
            Builtin::GeluTanh
            | Builtin::Softmax
            | Builtin::Argmax
            | Builtin::MergeHeads
            | Builtin::LastPosition => 1,
            Builtin::Linear
            | Builtin::Add
            | Builtin::Mul
            | Builtin::Scale
            | Builtin::SplitBatch
            | Builtin::SplitHeads => 2,
            Builtin::Embed => 3,
            Builtin::RmsNorm | Builtin::Rope => 4,
            Builtin::Attention => 6,
        }
    }

    /// The type of the result for arguments of these types, or why they do not fit.
    pub fn result_type(self, args: &[Type]) -> Result<Type, TypeError> {
        let a = Args(args);
        match self {
            Builtin::Linear => {
                let x = a.tensor(1, 1)?;
                let w = a.weight(2, 2, 2)?;
                let (out, inn) = (w.first().copied().flatten(), w.get(1).copied().flatten());
                same(x.last().copied().flatten(), inn, || {
                    format!(
                        "x is {} and the weight is {}; x's last dimension must be the weight's \
                         second (weights are [out, in])",
                        show(x),
                        show(w)
                    )
                })?;
                let mut r = x.to_vec();
                if let Some(last) = r.last_mut() {
                    *last = out;
                }
                Ok(Type::Tensor(r))
            }
            Builtin::Add | Builtin::Mul => {
                let x = a.tensor(1, 0)?;
                let y = a.tensor(2, 0)?;
                broadcast(x, y).map(Type::Tensor)
            }
            Builtin::Scale => {
                let x = a.tensor(1, 0)?;
                a.scalar(2)?;
                Ok(Type::Tensor(x.to_vec()))
            }
            Builtin::RmsNorm => {
                let x = a.tensor(1, 1)?;
                let w = a.weight(2, 1, 1)?;
                a.scalar(3)?;
                a.scalar(4)?;
                same(
                    x.last().copied().flatten(),
                    w.first().copied().flatten(),
                    || {
                        format!(
                            "x is {} and the weight is {}; the weight must be [d] for x [..., d]",
                            show(x),
                            show(w)
                        )
                    },
                )?;
                Ok(Type::Tensor(x.to_vec()))
            }
            Builtin::GeluTanh | Builtin::Softmax => Ok(Type::Tensor(a.tensor(1, 0)?.to_vec())),
            Builtin::Argmax => {
                a.tensor(1, 1)?;
                Ok(Type::Ids)
            }
            Builtin::Embed => {
                a.ids(1)?;
                let w = a.weight(2, 2, 2)?;
                a.scalar(3)?;
                Ok(Type::Tensor(vec![None, w.get(1).copied().flatten()]))
            }
            Builtin::Rope => {
                let x = a.rank4(1)?;
                a.ids(2)?;
                a.scalar(3)?;
                a.scalar(4)?;
                if let Some(Some(d)) = x.get(3) {
                    if d % 2 != 0 {
                        return Err(TypeError::Shape(format!(
                            "x is {}; its head_dim must be even",
                            show(x)
                        )));
                    }
                }
                Ok(Type::Tensor(x.to_vec()))
            }
            Builtin::Attention => {
                let q = a.rank4(1)?;
                let k = a.rank4(2)?;
                let v = a.rank4(3)?;
                a.state(4, StateKind::Kv)?;
                a.ids(5)?;
                a.scalar(6)?;
                let why = || format!("q {}, k {}, v {}", show(q), show(k), show(v));
                for i in 0..4 {
                    same(
                        k.get(i).copied().flatten(),
                        v.get(i).copied().flatten(),
                        || format!("{}: k and v must have the same shape", why()),
                    )?;
                }
                for i in [0, 1, 3] {
                    same(
                        q.get(i).copied().flatten(),
                        k.get(i).copied().flatten(),
                        || {
                            format!(
                                "{}: q and k must agree on batch, sequence and head_dim",
                                why()
                            )
                        },
                    )?;
                }
                if let (Some(Some(h)), Some(Some(kv))) = (q.get(2), k.get(2)) {
                    if *kv == 0 || h % kv != 0 {
                        return Err(TypeError::Shape(format!(
                            "{}: the query heads must be a multiple of the kv heads",
                            why()
                        )));
                    }
                }
                Ok(Type::Tensor(q.to_vec()))
            }
            Builtin::SplitBatch => {
                let x = a.tensor(1, 1)?;
                a.scalar(2)?;
                let mut r = vec![None, None];
                r.extend_from_slice(x.get(1..).unwrap_or_default());
                Ok(Type::Tensor(r))
            }
            Builtin::SplitHeads => {
                let x = a.tensor(1, 1)?;
                a.scalar(2)?;
                let mut r = x.get(..x.len() - 1).unwrap_or_default().to_vec();
                r.extend([None, None]);
                Ok(Type::Tensor(r))
            }
            Builtin::MergeHeads => {
                let x = a.tensor(1, 2)?;
                let n = x.len();
                let merged = match (x.get(n - 2), x.get(n - 1)) {
                    (Some(Some(h)), Some(Some(d))) => h.checked_mul(*d),
                    _ => None,
                };
                let mut r = x.get(..n - 2).unwrap_or_default().to_vec();
                r.push(merged);
                Ok(Type::Tensor(r))
            }
            Builtin::LastPosition => {
                let x = a.tensor(1, 2)?;
                let n = x.len();
                let mut r = x.get(..n - 2).unwrap_or_default().to_vec();
                r.push(x.get(n - 1).copied().flatten());
                Ok(Type::Tensor(r))
            }
        }
    }

    /// `argmax(linear(x, w))` in one pass (the compiler fuses the pair when nothing else reads
    /// the logits); the same ids, and `linear`'s errors.
    pub(super) fn linear_argmax(args: &[&Value]) -> Result<Value, RunErrorKind> {
        let a = Vals { op: "linear", args };
        kernels::linear_argmax(a.tensor(0)?, a.weight(1)?)
            .map(Value::ids)
            .map_err(|source| RunErrorKind::Kernel {
                op: "linear".to_owned(),
                source: Box::new(source),
            })
    }

    /// Run the built-in. The compiler has checked the kinds; a kind mismatch here is still an
    /// error, never a panic.
    pub fn exec(self, args: &[&Value]) -> Result<Value, RunErrorKind> {
        let a = Vals {
            op: self.name(),
            args,
        };
        let k = |r: Result<Tensor, KernelError>| -> Result<Value, RunErrorKind> {
            r.map(Value::tensor).map_err(|source| RunErrorKind::Kernel {
                op: self.name().to_owned(),
                source: Box::new(source),
            })
        };
        match self {
            Builtin::Linear => k(kernels::linear(a.tensor(0)?, a.weight(1)?)),
            Builtin::Add => k(kernels::add(a.tensor(0)?, a.tensor(1)?)),
            Builtin::Mul => k(kernels::mul(a.tensor(0)?, a.tensor(1)?)),
            Builtin::Scale => Ok(Value::tensor(kernels::scale(a.tensor(0)?, a.f32(1)?))),
            Builtin::RmsNorm => k(kernels::rms_norm(
                a.tensor(0)?,
                a.weight(1)?,
                a.f32(2)?,
                a.f32(3)?,
            )),
            Builtin::GeluTanh => Ok(Value::tensor(kernels::gelu_tanh(a.tensor(0)?))),
            Builtin::Softmax => k(kernels::softmax(a.tensor(0)?)),
            Builtin::Argmax => kernels::argmax(a.tensor(0)?)
                .map(Value::ids)
                .map_err(|source| RunErrorKind::Kernel {
                    op: self.name().to_owned(),
                    source: Box::new(source),
                }),
            Builtin::Embed => k(kernels::embed(a.ids(0)?, a.weight(1)?, a.f32(2)?)),
            Builtin::Rope => {
                let positions: Vec<i64> = a.ids(1)?.iter().map(|&p| i64::from(p)).collect();
                k(kernels::rope(
                    a.tensor(0)?,
                    &positions,
                    a.f32(2)?,
                    a.f32(3)?,
                ))
            }
            Builtin::Attention => {
                let pad: Vec<usize> = a.ids(4)?.iter().map(|&p| p as usize).collect();
                let scale = a.f32(5)?;
                let handle = match a.get(3)? {
                    Value::State(h) => h,
                    other => return Err(a.kind(3, "a KV cache", other)),
                };
                let mut state = handle.lock();
                let State::Kv(cache) = &mut *state;
                k(kernels::attention(
                    a.tensor(0)?,
                    a.tensor(1)?,
                    a.tensor(2)?,
                    cache,
                    &pad,
                    scale,
                ))
            }
            Builtin::SplitBatch => {
                let x = a.tensor(0)?;
                let b = a.count(1)?;
                let (&rows, rest) = x.shape().split_first().unwrap_or((&0, &[]));
                if rows % b != 0 {
                    return Err(a.bad(1, b, "it must divide the first dimension of x"));
                }
                let mut shape = vec![b, rows / b];
                shape.extend_from_slice(rest);
                reshape(x, shape)
            }
            Builtin::SplitHeads => {
                let x = a.tensor(0)?;
                let h = a.count(1)?;
                let (&last, lead) = x.shape().split_last().unwrap_or((&0, &[]));
                if last % h != 0 {
                    return Err(a.bad(1, h, "it must divide the last dimension of x"));
                }
                let mut shape = lead.to_vec();
                shape.extend([h, last / h]);
                reshape(x, shape)
            }
            Builtin::MergeHeads => {
                let x = a.tensor(0)?;
                let s = x.shape();
                let n = s.len();
                let (Some(&h), Some(&d)) = (s.get(n.wrapping_sub(2)), s.get(n.wrapping_sub(1)))
                else {
                    return Err(a.rank(x, "[..., heads, head_dim]"));
                };
                let mut shape = s.get(..n - 2).unwrap_or_default().to_vec();
                shape.push(h * d);
                reshape(x, shape)
            }
            Builtin::LastPosition => {
                let x = a.tensor(0)?;
                let s = x.shape();
                let n = s.len();
                let (Some(&seq), Some(&d)) = (s.get(n.wrapping_sub(2)), s.get(n.wrapping_sub(1)))
                else {
                    return Err(a.rank(x, "[..., seq, d]"));
                };
                if seq == 0 {
                    return Err(a.rank(x, "[..., seq, d] with seq at least 1"));
                }
                let data: Vec<f32> = x
                    .data()
                    .chunks_exact((seq * d).max(1))
                    .flat_map(|block| {
                        block
                            .get((seq - 1) * d..)
                            .unwrap_or_default()
                            .iter()
                            .copied()
                    })
                    .collect();
                let mut shape = s.get(..n - 2).unwrap_or_default().to_vec();
                shape.push(d);
                Tensor::new(shape, data)
                    .map(Value::tensor)
                    .map_err(|e| RunErrorKind::Shape {
                        op: self.name().to_owned(),
                        detail: e.to_string(),
                    })
            }
        }
    }
}

fn reshape(x: &Tensor, shape: Vec<usize>) -> Result<Value, RunErrorKind> {
    // A reshape keeps the data; only the shared tensor's metadata changes, so copy once here.
    x.clone()
        .reshape(shape)
        .map(Value::tensor)
        .map_err(|e| RunErrorKind::Shape {
            op: "reshape".to_owned(),
            detail: e.to_string(),
        })
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn show(d: &[Dim]) -> String {
    Type::Tensor(d.to_vec())
        .to_string()
        .trim_start_matches("a tensor ")
        .to_owned()
}

/// Two dimensions that must be equal where both are known.
fn same(a: Dim, b: Dim, msg: impl FnOnce() -> String) -> Result<(), TypeError> {
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(TypeError::Shape(msg())),
        _ => Ok(()),
    }
}

/// Suffix broadcasting, as the kernels do it: the shorter shape must be a suffix of the longer.
fn broadcast(x: &[Dim], y: &[Dim]) -> Result<Vec<Dim>, TypeError> {
    let (long, short) = if x.len() >= y.len() { (x, y) } else { (y, x) };
    let offset = long.len() - short.len();
    let mut out = long.to_vec();
    for (i, s) in short.iter().enumerate() {
        let l = long.get(offset + i).copied().flatten();
        same(l, *s, || {
            format!(
                "{} and {} do not broadcast; they must be equal, or the smaller one a suffix \
                 of the larger one",
                show(x),
                show(y)
            )
        })?;
        if let Some(o) = out.get_mut(offset + i) {
            *o = l.or(*s);
        }
    }
    Ok(out)
}

struct Args<'a>(&'a [Type]);

impl<'a> Args<'a> {
    fn get(&self, index: usize) -> &'a Type {
        // Arity was checked by the verifier; a missing argument reads as a scalar and fails
        // the kind check of whatever needed it.
        self.0.get(index - 1).unwrap_or(&Type::Scalar)
    }
    fn kind(&self, index: usize, expected: &'static str) -> TypeError {
        TypeError::Kind {
            index,
            expected,
            found: self.get(index).clone(),
        }
    }
    fn tensor(&self, index: usize, min_rank: usize) -> Result<&'a [Dim], TypeError> {
        match self.get(index) {
            Type::Tensor(d) if d.len() >= min_rank => Ok(d),
            _ if min_rank == 0 => Err(self.kind(index, "a tensor")),
            _ if min_rank == 1 => Err(self.kind(index, "a tensor of rank 1 or more")),
            _ => Err(self.kind(index, "a tensor of rank 2 or more")),
        }
    }
    fn rank4(&self, index: usize) -> Result<&'a [Dim], TypeError> {
        match self.get(index) {
            Type::Tensor(d) if d.len() == 4 => Ok(d),
            _ => Err(self.kind(index, "a tensor [batch, seq, heads, head_dim]")),
        }
    }
    fn weight(
        &self,
        index: usize,
        min_rank: usize,
        max_rank: usize,
    ) -> Result<&'a [Dim], TypeError> {
        match self.get(index) {
            Type::Weight(_, d) if (min_rank..=max_rank).contains(&d.len()) => Ok(d),
            _ if max_rank == 1 => Err(self.kind(index, "a weight [d]")),
            _ => Err(self.kind(index, "a weight [out, in]")),
        }
    }
    fn scalar(&self, index: usize) -> Result<(), TypeError> {
        match self.get(index) {
            Type::Scalar => Ok(()),
            _ => Err(self.kind(index, "a scalar")),
        }
    }
    fn ids(&self, index: usize) -> Result<(), TypeError> {
        match self.get(index) {
            Type::Ids => Ok(()),
            _ => Err(self.kind(index, "an id list")),
        }
    }
    fn state(&self, index: usize, kind: StateKind) -> Result<(), TypeError> {
        match self.get(index) {
            Type::State(k) if *k == kind => Ok(()),
            _ => Err(self.kind(index, "a KV cache")),
        }
    }
}

struct Vals<'a, 'v> {
    op: &'static str,
    args: &'a [&'v Value],
}

impl<'a, 'v> Vals<'a, 'v> {
    fn get(&self, i: usize) -> Result<&'v Value, RunErrorKind> {
        self.args.get(i).copied().ok_or_else(|| RunErrorKind::Kind {
            what: format!("argument {} of `{}`", i + 1, self.op),
            expected: "a value".into(),
            found: "nothing".into(),
        })
    }
    fn kind(&self, i: usize, expected: &str, found: &Value) -> RunErrorKind {
        RunErrorKind::Kind {
            what: format!("argument {} of `{}`", i + 1, self.op),
            expected: expected.into(),
            found: found.kind().into(),
        }
    }
    fn rank(&self, x: &Tensor, need: &str) -> RunErrorKind {
        RunErrorKind::Shape {
            op: self.op.to_owned(),
            detail: format!("x has shape {:?} but must be {need}", x.shape()),
        }
    }
    fn bad(&self, i: usize, value: impl fmt::Display, why: &'static str) -> RunErrorKind {
        RunErrorKind::BadArgument {
            op: self.op.to_owned(),
            index: i + 1,
            value: value.to_string(),
            why,
        }
    }
    fn tensor(&self, i: usize) -> Result<&'v Tensor, RunErrorKind> {
        match self.get(i)? {
            Value::Tensor(t) => Ok(t),
            other => Err(self.kind(i, "a tensor", other)),
        }
    }
    fn weight(&self, i: usize) -> Result<&'v kernels::Weight, RunErrorKind> {
        match self.get(i)? {
            Value::Weight(w) => Ok(w),
            other => Err(self.kind(i, "a weight", other)),
        }
    }
    fn ids(&self, i: usize) -> Result<&'v [u32], RunErrorKind> {
        match self.get(i)? {
            Value::Ids(v) => Ok(v),
            other => Err(self.kind(i, "an id list", other)),
        }
    }
    fn f32(&self, i: usize) -> Result<f32, RunErrorKind> {
        match self.get(i)? {
            Value::Scalar(s) => {
                let v = *s as f32;
                if v.is_finite() {
                    Ok(v)
                } else {
                    Err(self.bad(i, s, "it must be a finite f32"))
                }
            }
            other => Err(self.kind(i, "a scalar", other)),
        }
    }
    /// A positive whole number (a count of heads or sequences).
    fn count(&self, i: usize) -> Result<usize, RunErrorKind> {
        match self.get(i)? {
            Value::Scalar(s) if *s >= 1.0 && s.fract() == 0.0 && *s <= u32::MAX as f64 => {
                Ok(*s as usize)
            }
            Value::Scalar(s) => Err(self.bad(i, s, "it must be a whole number, at least 1")),
            other => Err(self.kind(i, "a scalar", other)),
        }
    }
}
