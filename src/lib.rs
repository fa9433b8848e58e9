//! `runner`: a sealed inference job runner.
//!
//! It runs only an engine whose exact source and policy the data owners approved in a signed
//! certificate, and signs what it produced. The parts, each in its own module, from the bottom
//! layer up; a module uses only the ones listed before it (a test reads every `use crate::`
//! line and fails on an arrow that points up: `tests/lib/layers.rs`):
//!
//! - [`error`]: how every module's errors map to exit codes and hints.
//! - [`primitives`]: canonical JSON, digests, keys, DSSE envelopes, timestamps, atomic file
//!   writes.
//! - [`memory`]: the binary's allocator and read-only file mappings.
//! - [`kernels`]: the tensor operations the engine language calls.
//! - [`sealing`]: inputs and outputs encrypted in the age format.
//! - [`attestation`]: hardware reports (TDX, SEV-SNP) through configfs-tsm that bind the
//!   runner's keys, the evidence document, and its verification.
//! - [`restrict`]: the engine language and its policy: the verifier (private regions checked
//!   against a policy), the owner's redacted view, the compiler and the interpreter.
//! - [`model`]: checkpoints (config, memory-mapped weights, digest), tokenizer, synthetic models.
//! - [`trust`]: the documents: certificates and their verification against the operator's trust
//!   configuration, reviews, receipts.
//! - [`job`]: the job file, the private inputs, the trusted boundary that admits a job, running
//!   it, publishing its outputs, and the audit log.
//! - [`bench`](mod@bench): `runner bench`'s measurements (throughput, peak memory, machine probes).
//! - [`cli`]: the command-line front end; thin glue over the modules above.
//!
//! `unsafe` code lives only in [`memory`] and in the kernel files that need it (SIMD, the thread
//! pool); each of those files allows it for itself, and every block carries a `SAFETY` comment.

pub mod attestation;
pub mod bench;
pub mod cli;
pub mod error;
pub mod job;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod primitives;
pub mod restrict;
pub mod sealing;
pub mod trust;
