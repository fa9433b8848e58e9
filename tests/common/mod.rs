//! The test harness (after ripgrep's `tests/util.rs`).
//!
//! - [`Dir`]: a temporary directory with path helpers and file writers, and [`TestCommand`]:
//!   the `runner` binary run in it, with the assertions on how a run ends (`ok`, `fails`,
//!   `exits`).
//! - [`Env`]: a `Dir` laid out for the runner (`Env::new`, `two_owner_cert`, `with_receipt`,
//!   `bare_job`, `approved_job`, `reapproval`, `audit_log`), with the operations the CLI tests
//!   share: keys, trust files, approvals and envelopes (`env.rs`), jobs and refusals
//!   (`job.rs`), the audit log (`audit.rs`) and receipts (`receipt.rs`).
//! - `repo`: paths into the repository and the cached tokenizer, and `tsm`: configfs-tsm
//!   played by the test; the only parts `tests/lib` includes too.

mod audit;
mod dir;
mod env;
mod job;
mod receipt;
pub mod repo;
pub mod tsm;

pub use dir::{Dir, TestCommand};
pub use env::Env;
pub use job::{expected_json, fixture_prompts, ids, job_toml, EXEC};
pub use receipt::RECEIPT_OUTPUTS;
