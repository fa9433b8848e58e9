//! `runner init` (the runner's state directory and signing key, once per machine) and
//! `runner identity` (the public halves, for owners and recipients).

use std::path::PathBuf;

use super::{print, CliResult};
use crate::job::state::{state_dir, StateDir, STATE_DIR_ENV};
use crate::trust::identity::sign_identity;

/// Flags of `runner init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Where to create the state directory (mode 0700); default $RUNNER_STATE_DIR, else
    /// /var/lib/runner. Every later command must find the same one.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Succeed without change when the directory is already initialised (a pod's init step
    /// that runs again after a restart keeps the runner's identity).
    #[arg(long)]
    keep_existing: bool,
}

/// Flags of `runner identity`.
#[derive(Debug, clap::Args)]
pub struct IdentityArgs {
    /// The runner's state directory (default: $RUNNER_STATE_DIR, else /var/lib/runner).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Print the identity document: the signing key and the age recipient, signed by that key
    /// (what owners check before they encrypt to the recipient).
    #[arg(long, conflicts_with = "recipient")]
    json: bool,
    /// Print only the age recipient, for `age -r "$(runner identity --recipient)"`.
    #[arg(long)]
    recipient: bool,
}

/// Create the state directory and the runner's signing key.
pub fn init(args: InitArgs) -> CliResult {
    let dir = state_dir(args.state_dir.as_deref());
    if args.keep_existing {
        if let Ok(state) = StateDir::open(&dir) {
            let public = state.public_key()?;
            return print(&format!(
                "the runner's state directory {} is already initialised: signing key {}, age \
                 recipient {} (kept)\n",
                state.path().display(),
                public.key_id().to_hex(),
                state.recipient()?,
            ));
        }
    }
    let (state, public) = StateDir::init(&dir)?;
    print(&format!(
        "initialised the runner's state directory {} (mode 0700)\n\
         signing key {} (private half mode 0600, never leaves the directory)\n\
         public key  {} (give it to recipients: `runner verify --runner-key`)\n\
         age recipient {} (owners encrypt inputs to it; `runner identity` prints it again)\n\
         every command finds this directory through --state-dir or ${STATE_DIR_ENV}\n",
        state.path().display(),
        public.key_id().to_hex(),
        state.public_key_path().display(),
        state.recipient()?,
    ))
}

/// Print the runner's public keys.
pub fn identity(args: IdentityArgs) -> CliResult {
    let state = StateDir::open(&state_dir(args.state_dir.as_deref()))?;
    let public = state.public_key()?;
    let recipient = state.recipient()?;
    if args.recipient {
        return print(&format!("{recipient}\n"));
    }
    if args.json {
        let doc = sign_identity(&state.signing_key()?, &recipient)?;
        return print(&format!("{}\n", String::from_utf8_lossy(&doc)));
    }
    print(&format!(
        "state directory {}\nsigning key     {} (short {})\npublic key file {}\n\
         age recipient   {} (owners encrypt inputs to it: age -r RECIPIENT)\n",
        state.path().display(),
        public.key_id().to_hex(),
        public.key_id().short(),
        state.public_key_path().display(),
        recipient,
    ))
}
