//! `runner audit verify`: check the audit log's digest chain; `runner audit list`: show its
//! entries, without the parts derived from private data.

use std::path::PathBuf;

use super::{print, CliResult};
use crate::job::audit::AuditLog;
use crate::job::state::state_dir;
use crate::primitives::digest::Digest;

/// Flags of `runner audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AuditCommand {
    /// Check the chain: report the first broken line, or the count and the last digest.
    Verify(AuditVerifyArgs),
    /// Show the entries (after checking the chain): time, outcome, reason and digests, never
    /// the inputs commitment or the output digests.
    List(AuditVerifyArgs),
}

/// Flags of `runner audit verify`.
#[derive(Debug, clap::Args)]
struct AuditVerifyArgs {
    /// The runner's state directory (default: $RUNNER_STATE_DIR, else /var/lib/runner).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Run an `audit` subcommand.
pub fn audit(args: AuditArgs) -> CliResult {
    match args.command {
        AuditCommand::Verify(args) => verify(args),
        AuditCommand::List(args) => list(args),
    }
}

fn list(args: AuditVerifyArgs) -> CliResult {
    let log = AuditLog::open(&state_dir(args.state_dir.as_deref()));
    let entries = log.list()?;
    if args.json {
        let doc = serde_json::json!({
            "log": log.path().display().to_string(),
            "entries": entries,
        });
        return print(&format!("{doc:#}\n"));
    }
    let short = |d: Option<Digest>| d.map_or_else(|| "-".to_owned(), |d| d.short());
    let mut out = format!(
        "audit log    {} ({} entries)\n",
        log.path().display(),
        entries.len()
    );
    for e in &entries {
        out.push_str(&format!(
            "{:>5}  {}  {:<8}  attempt {}  certificate {}  engine {}  policy_id {}  model {}  \
             job {}  outputs {}\n",
            e.seq,
            e.time,
            e.outcome.as_str(),
            e.attempt,
            short(e.certificate_digest),
            short(e.engine_digest),
            short(e.policy_id),
            short(e.model_digest),
            short(e.job_digest),
            e.outputs,
        ));
        if let Some(reason) = &e.reason {
            // The first line: a message may go on with details.
            out.push_str(&format!(
                "       reason: {}\n",
                reason.lines().next().unwrap_or("")
            ));
        }
    }
    print(&out)
}

fn verify(args: AuditVerifyArgs) -> CliResult {
    let log = AuditLog::open(&state_dir(args.state_dir.as_deref()));
    let summary = log.verify()?;
    let last_digest = summary.last_digest.map(|d| d.to_hex());
    if args.json {
        let doc = serde_json::json!({
            "log": log.path().display().to_string(),
            "valid": true,
            "entries": summary.entries,
            "last_digest": last_digest,
            "last": summary.last,
            "unfinished": summary.unfinished.iter().map(|(seq, attempt)| serde_json::json!({"seq": seq, "attempt": attempt})).collect::<Vec<_>>(),
        });
        return print(&format!("{doc:#}\n"));
    }
    let mut out = format!(
        "audit log    {}\nentries      {} (chain intact)\n",
        log.path().display(),
        summary.entries
    );
    if let (Some(last), Some(digest)) = (&summary.last, &last_digest) {
        out.push_str(&format!(
            "last entry   seq {}, {}, {}\nlast digest  {digest}\n\
             (keep the last digest elsewhere: a chain cannot show entries removed from its end)\n",
            last.seq,
            last.time,
            last.outcome.as_str(),
        ));
    }
    if summary.unfinished.is_empty() {
        out.push_str("unfinished   none (every admitted attempt was closed)\n");
    } else {
        out.push_str(&format!(
            "unfinished   {} admitted attempt(s) never closed (the process was killed, the \
             machine stopped, or it is still running):\n",
            summary.unfinished.len()
        ));
        for (seq, attempt) in &summary.unfinished {
            out.push_str(&format!("  seq {seq}, attempt {attempt}\n"));
        }
    }
    print(&out)
}
