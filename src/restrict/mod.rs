//! The engine language: lexer, parser, the restrict verifier (private regions checked against a
//! policy), the owner's redacted view, the compiler to an execution plan, and the interpreter.
//!
//! The stages, one file each: [`lexer`] (bytes to tokens, comments, region markers),
//! [`parser`] (tokens to the [`ast`]), [`regions`] (markers to private regions), [`resolve`]
//! (names, calls, recursion), [`verify`] (the policy; the only maker of [`Checked`]), [`view`]
//! and [`report`] (what owners review). [`effects`] says what a run whose value is thrown away
//! still has to do. The grammar, markers and built-ins are documented in
//! docs/engine-language.md. [`profile`] optionally times the built-ins as a plan runs (for
//! `runner bench --profile`).
//!
//! The trusted boundary is [`check`]: source in, a [`Checked`] program or every reason it was
//! refused out.
#![forbid(unsafe_code)]

pub mod ast;
pub mod builtins;
pub mod compile;
pub mod diagnostic;
mod effects;
pub mod error;
mod interp;
pub mod lexer;
pub mod marker;
pub mod parser;
pub mod policy;
pub mod profile;
pub mod regions;
pub mod report;
pub mod resolve;
pub mod value;
pub mod verify;
pub mod view;

pub use compile::{compile, Plan};
pub use diagnostic::{Excerpt, Located, Pos};
pub use error::{CompileError, CompileErrorKind, RunError, RunErrorKind};
pub use error::{
    ProgramError, ProgramErrorKind, RestrictError, SyntaxError, SyntaxErrorKind, Via, Violation,
};
pub use lexer::source_from_bytes;
pub use regions::{Region, RegionKind};
pub use report::Report;
pub use value::{
    InputError, Inputs, Record, Signature, State, StateHandle, StateKind, Type, Value,
};
pub use verify::{check, check_bytes, check_bytes_showing_private, check_showing_private, Checked};

/// Version of the restrict verifier. It is part of every `policy_id`, so a policy approved under
/// one verifier is not silently trusted under another.
pub const VERIFIER_VERSION: &str = "runner-restrict/1";

/// Largest engine source accepted, in bytes.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// Most tokens in one engine.
pub const MAX_TOKENS: usize = 100_000;
/// Deepest expression nesting (parentheses, calls, operators, field chains).
pub const MAX_DEPTH: usize = 64;
/// Longest identifier.
pub const MAX_IDENT_LEN: usize = 64;
/// Most function definitions.
pub const MAX_FUNCTIONS: usize = 1024;
/// Most parameters of a function, or arguments of a call.
pub const MAX_ARGS: usize = 64;
/// Most built-in calls one call of a function may make, through every user function it calls
/// (a scan body counted once). A Gemma 3 step makes a few dozen per layer; a call graph that
/// doubles at every level reaches this in twenty levels.
pub const MAX_CALLS_PER_STEP: u64 = 1_000_000;
