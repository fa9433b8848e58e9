//! The syntax tree. Every node carries the position the errors about it point at, and every
//! statement and function its first and last line, which the region checks compare against
//! the marker lines.

use super::diagnostic::Pos;

/// A whole engine: its function definitions in source order.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// The functions.
    pub functions: Vec<Function>,
}

/// A name as written, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Its position.
    pub pos: Pos,
    /// Byte offset of its first character (the key the resolver's symbol table uses).
    pub start: usize,
}

/// `fn name(params) { let ...; return expr; }`
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// The function's name.
    pub name: Ident,
    /// Parameter names.
    pub params: Vec<Ident>,
    /// The `let` statements, in order.
    pub lets: Vec<Let>,
    /// The final `return`.
    pub ret: Return,
    /// Line of `fn`.
    pub first_line: u32,
    /// Line of the body's `{`.
    pub open_line: u32,
    /// Line of the body's `}` (the last line of the definition).
    pub last_line: u32,
}

/// `let name = value;`
#[derive(Debug, Clone, PartialEq)]
pub struct Let {
    /// The bound name.
    pub name: Ident,
    /// The value.
    pub value: Expr,
    /// Line of `let`.
    pub first_line: u32,
    /// Line of `;`.
    pub last_line: u32,
}

/// `return value;`
#[derive(Debug, Clone, PartialEq)]
pub struct Return {
    /// The value.
    pub value: Expr,
    /// Position of `return`.
    pub pos: Pos,
    /// Line of `return`.
    pub first_line: u32,
    /// Line of `;`.
    pub last_line: u32,
}

/// An expression and the position its errors point at.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// The callee for a call, the operator for an operation, the field name for `.field`,
    /// the literal or name otherwise.
    pub pos: Pos,
}

/// Expression forms.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// `1.5e-6`: a scalar literal.
    Number(f64),
    /// `x`: a parameter or `let` name.
    Var(Ident),
    /// `value.field`: a field of a record.
    Field(Box<Expr>, Ident),
    /// `name(args)`: a built-in or user function; `scan(body, carry, stacked, extra...)`.
    Call(Ident, Vec<Expr>),
    /// `a + b`, `a - b`, `a * b`, `a / b`: scalar arithmetic.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `-a`: scalar negation.
    Neg(Box<Expr>),
}

/// Scalar arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }
}
