//! Certificate subcommands. PLACEHOLDER: replaced by the trust-core work.
use super::CliResult;
#[derive(Debug, clap::Args)]
pub struct ApproveArgs {}
#[derive(Debug, clap::Args)]
pub struct CosignArgs {}
#[derive(Debug, clap::Args)]
pub struct InspectArgs {}
#[derive(Debug, clap::Args)]
pub struct VerifyCertArgs {}
pub fn approve(_: ApproveArgs) -> CliResult { super::print("not yet\n") }
pub fn cosign(_: CosignArgs) -> CliResult { super::print("not yet\n") }
pub fn inspect(_: InspectArgs) -> CliResult { super::print("not yet\n") }
pub fn verify_cert(_: VerifyCertArgs) -> CliResult { super::print("not yet\n") }
