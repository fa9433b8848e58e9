//! The engine language: lexer, parser, the restrict verifier (private regions checked against a
//! policy), the owner's redacted view, the compiler to an execution plan, and the interpreter.

/// Version of the restrict verifier. It is part of every `policy_id`, so a policy approved under
/// one verifier is not silently trusted under another.
pub const VERIFIER_VERSION: &str = "runner-restrict/1";
