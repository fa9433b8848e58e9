//! Tests that run the `runner` binary, one file per command family, linked into one test
//! binary. The harness they share is `tests/common` ([`common::Env`], [`common::Dir`],
//! [`common::TestCommand`]).

#[path = "../common/mod.rs"]
mod common;

mod attestation;
mod audit;
mod bench;
mod deploy;
mod exec;
mod gguf;
mod help;
mod inlining;
mod openai;
mod reapproval;
mod receipt;
mod restrict;
mod scale_out;
mod sealing;
mod security;
mod trust;
