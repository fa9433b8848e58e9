//! `runner policy-id`. PLACEHOLDER: replaced by the trust-core work.
use super::CliResult;
#[derive(Debug, clap::Args)]
pub struct PolicyIdArgs {}
pub fn policy_id(_: PolicyIdArgs) -> CliResult { super::print("not yet\n") }
