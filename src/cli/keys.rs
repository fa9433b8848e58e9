//! `runner keygen`: create an owner's (or a runner's) Ed25519 key pair.

use std::path::PathBuf;

use super::{print, CliResult};
use crate::primitives::atomic_file::Overwrite;
use crate::primitives::keys::{write_key_pair, SecretKey};

/// Flags of `runner keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Private key file to write (mode 0600); the public key goes beside it as FILE.pub.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Replace existing key files (the old private key is lost).
    #[arg(long)]
    force: bool,
    /// Print the files written and the key id as JSON.
    #[arg(long)]
    json: bool,
}

/// Generate a key pair and write both files, refusing to overwrite either without `--force`.
pub fn keygen(args: KeygenArgs) -> CliResult {
    let overwrite = if args.force {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    };
    let key = SecretKey::generate()?;
    let public = write_key_pair(&key, &args.out, overwrite)?;
    if args.json {
        let doc = serde_json::json!({
            "private_key": args.out.display().to_string(),
            "public_key": public.display().to_string(),
            "key_id": key.key_id().to_hex(),
            "key_id_short": key.key_id().short(),
        });
        return print(&format!("{doc:#}\n"));
    }
    print(&format!(
        "wrote private key {} (mode 0600; keep it secret)\n\
         wrote public key  {} (share it; operators list it in trust.toml)\n\
         key id {} (short {})\n",
        args.out.display(),
        public.display(),
        key.key_id().to_hex(),
        key.key_id().short(),
    ))
}
