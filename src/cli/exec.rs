//! `runner exec`: admit the job through the trusted boundary, run it, publish the outputs with
//! a signed receipt, and record the attempt in the audit log whatever its outcome.

use std::path::PathBuf;

use super::{print, CliResult};
use crate::attestation::tsm::{tsm_root, Kernel, TsmAccess};
use crate::job::exec::ExecRequest;
use crate::job::run::{OUTPUTS_FILE, RECEIPT_FILE, SEALED_OUTPUTS_FILE};
use crate::job::shard::{Shard, COMPLETION_INDEX_ENV};
use crate::job::state::{state_dir, StateDir};
use crate::trust::config::DEFAULT_TRUST_FILE;

/// Flags of `runner exec`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The job file (docs/job.md).
    #[arg(value_name = "FILE")]
    pub job: PathBuf,
    /// The certificate the owners signed for this engine, policy and model.
    #[arg(long, value_name = "FILE")]
    pub cert: PathBuf,
    /// The operator's trust configuration: trusted owner keys, threshold, revocations.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_TRUST_FILE)]
    pub trust: PathBuf,
    /// The runner's state directory, made by `runner init` (its key, audit log, rollback
    /// registries); default $RUNNER_STATE_DIR, else /var/lib/runner.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The configfs-tsm directory, asked for evidence when the certificate requires
    /// attestation (default: $RUNNER_TSM_ROOT, else /sys/kernel/config/tsm).
    #[arg(long, value_name = "DIR")]
    pub tsm_root: Option<PathBuf>,
    /// Run only shard K of N (from 0): a contiguous range of the inputs that depends only on
    /// their number and N. The whole job is admitted first; the shard publishes into
    /// output_dir/shard-K-of-N/, and `runner merge` joins the shards (docs/scale-out.md).
    #[arg(long, value_name = "K/N", value_parser = Shard::parse, conflicts_with = "shard_from_env")]
    pub shard: Option<Shard>,
    /// Run shard $JOB_COMPLETION_INDEX of N (what a Kubernetes Indexed Job gives each pod).
    #[arg(long, value_name = "N")]
    pub shard_from_env: Option<u32>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Verify, run, publish, audit (all in [`crate::job::exec`]); print what was done.
pub fn exec(args: ExecArgs) -> CliResult {
    let state = StateDir::open(&state_dir(args.state_dir.as_deref()))?;
    let bar = super::progress::Bar::new(args.quiet);
    let tsm_root = tsm_root(args.tsm_root.as_deref());
    let shard = match (args.shard, args.shard_from_env) {
        (Some(s), _) => Some(s),
        (None, Some(n)) => Some(
            Shard::from_env(n, std::env::var_os(COMPLETION_INDEX_ENV))
                .map_err(|why| super::UsageError(format!("--shard-from-env: {why}")))?,
        ),
        (None, None) => None,
    };
    let request = ExecRequest {
        cert: &args.cert,
        job: &args.job,
        trust: &args.trust,
        state: &state,
        tsm: TsmAccess {
            fs: &Kernel,
            root: &tsm_root,
        },
        shard,
        now: time::OffsetDateTime::now_utc(),
    };
    let result = crate::job::exec::exec(&request, &mut |p| bar.update(p));
    drop(bar);
    let result = result?;
    for notice in &result.notices {
        eprintln!("notice: {notice}");
    }
    let c = &result.facts.counts;
    let part = match &result.facts.shard {
        Some(s) => format!(
            "shard {} of {} (inputs {} to {} of {}): ",
            s.index, s.count, s.start, s.end, s.inputs_total
        ),
        None => String::new(),
    };
    let part = match result.facts.resumed_at {
        Some(at) => format!(
            "{part}resumed at input {at} of {} (an earlier attempt was cut short): ",
            result
                .facts
                .shard
                .map_or(result.facts.counts.inputs, |s| s.end)
        ),
        None => part,
    };
    print(&format!(
        "{part}ran {} inputs ({} tokens generated; {} stopped, {} hit max_new_tokens)\n\
         wrote {} and {}{} in {}\n\
         certificate {}  engine {}  policy_id {}  model {}\n",
        c.inputs,
        c.generated_tokens,
        c.finish_reasons.stop,
        c.finish_reasons.length,
        if result.facts.sealed.outputs {
            SEALED_OUTPUTS_FILE
        } else {
            OUTPUTS_FILE
        },
        RECEIPT_FILE,
        match &result.facts.attestation {
            Some(a) => format!(" (with {} evidence in {})", a.hardware, a.evidence),
            None => String::new(),
        },
        result.output_dir.display(),
        result.facts.certificate_digest.short(),
        result.facts.engine_digest.short(),
        result.facts.policy_id.short(),
        result.facts.model_digest.short(),
    ))
}
