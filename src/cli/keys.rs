//! `runner keygen`. PLACEHOLDER: replaced by the trust-core work.
use super::CliResult;
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {}
pub fn keygen(_: KeygenArgs) -> CliResult { super::print("not yet\n") }
