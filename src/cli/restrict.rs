//! `runner restrict`. PLACEHOLDER: replaced by the engine-language work.
use super::CliResult;
#[derive(Debug, clap::Args)]
pub struct RestrictArgs {}
pub fn restrict(_: RestrictArgs) -> CliResult { super::print("not yet\n") }
