//! `runner policy-id`: print a policy's id, the digest owners approve.

use std::path::PathBuf;

use super::{print, CliResult};
use crate::restrict::policy::Policy;
use crate::restrict::VERIFIER_VERSION;

/// Flags of `runner policy-id`.
#[derive(Debug, clap::Args)]
pub struct PolicyIdArgs {
    /// The policy JSON file.
    #[arg(value_name = "FILE")]
    policy: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Print the short and full policy_id and the policy digest.
pub fn policy_id(args: PolicyIdArgs) -> CliResult {
    let policy = Policy::load(&args.policy)?;
    let id = policy.policy_id();
    let digest = policy.digest();
    if args.json {
        let doc = serde_json::json!({
            "policy": args.policy.display().to_string(),
            "name": policy.name,
            "policy_id_short": id.short(),
            "policy_id": id.to_hex(),
            "policy_digest": digest.to_hex(),
            "verifier_version": VERIFIER_VERSION,
        });
        return print(&format!("{doc:#}\n"));
    }
    print(&format!(
        "policy_id      {}\n\
         full           {}\n\
         policy digest  {}\n\
         name           {}\n\
         verifier       {VERIFIER_VERSION}\n",
        id.short(),
        id.to_hex(),
        digest.to_hex(),
        policy.name,
    ))
}
