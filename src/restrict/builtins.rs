//! The built-ins: the only operations an engine can perform, each a generic tensor operation
//! from `crate::kernels`. This table is the whole vocabulary: a call resolves to a user function
//! or to a name here, or it is an error. `scan` is not a built-in but a language form (see
//! `resolve`), so it is not listed.

use std::fmt;

/// A built-in operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Builtin {
    /// `linear(x, w)`: `x @ w^T`.
    Linear,
    /// `add(a, b)`: elementwise sum.
    Add,
    /// `mul(a, b)`: elementwise product.
    Mul,
    /// `scale(x, s)`: `x * s`.
    Scale,
    /// `rms_norm(x, w, eps, offset)`.
    RmsNorm,
    /// `gelu_tanh(x)`.
    GeluTanh,
    /// `softmax(x)`: over the last axis.
    Softmax,
    /// `argmax(x)`: over the last axis.
    Argmax,
    /// `embed(ids, table, scale)`.
    Embed,
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
        }
    }

    /// The built-in called `name`.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| b.name() == name)
    }

    /// How many arguments it takes.
    pub fn arity(self) -> usize {
        match self {
            Builtin::GeluTanh | Builtin::Softmax | Builtin::Argmax => 1,
            Builtin::Linear | Builtin::Add | Builtin::Mul | Builtin::Scale => 2,
            Builtin::Embed => 3,
            Builtin::RmsNorm => 4,
        }
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
