//! `runner`: a sealed inference job runner.
//!
//! It runs only an engine whose exact source and policy the data owners approved in a signed
//! certificate, and signs what it produced. The parts, each in its own module:
//!
//! - [`trust`]: keys, canonical JSON, DSSE envelopes, policies and `policy_id`, certificates and
//!   their verification against the operator's trust configuration.
//! - [`restrict`]: the engine language, its verifier (private regions checked against a policy),
//!   the owner's redacted view, the compiler and the interpreter.
//! - [`model`]: checkpoints (config, memory-mapped weights, digest), tokenizer, synthetic models.
//! - [`job`]: the job file, the private inputs, and running them.
//! - [`kernels`]: the tensor operations the engine language calls.
//! - [`bench`](mod@bench): `runner bench`'s measurements (throughput, peak memory, machine probes).
//! - [`atomic`]: atomic file writes (temporary file, fsync, rename).
//! - [`heap`]: the binary's allocator (large blocks kept for reuse).
//! - [`cli`]: the command-line front end; thin glue over the modules above.
//! - [`error`]: how every module's errors map to exit codes and hints.

pub mod atomic;
pub mod bench;
pub mod cli;
pub mod error;
pub mod heap;
pub mod job;
#[allow(unsafe_code)] // SIMD kernels; every block carries a SAFETY comment.
pub mod kernels;
pub mod model;
pub mod restrict;
pub mod trust;
