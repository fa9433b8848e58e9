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
    /// No progress display.
    #[arg(long, short)]
    pub quiet: bool,
    /// Without a terminal on stderr (a log), print a progress line at most this often
    /// (seconds); on a terminal a bar is drawn instead.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub progress_every: f64,
    /// Print the summary as JSON on stdout: counts, tokens, elapsed, tokens/s, the receipt's
    /// digest and where the outputs are.
    #[arg(long)]
    pub json: bool,
}

/// Verify, run, publish, audit (all in [`crate::job::exec`]); print what was done.
pub fn exec(args: ExecArgs) -> CliResult {
    let state = StateDir::open(&state_dir(args.state_dir.as_deref()))?;
    let began = std::time::Instant::now();
    let every = std::time::Duration::try_from_secs_f64(args.progress_every).map_err(|_| {
        super::UsageError("--progress-every: give a number of seconds, 0 or more".into())
    })?;
    let bar = super::progress::Bar::new(args.quiet, every);
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
    let wall = began.elapsed().as_secs_f64();
    let run_secs = result.elapsed.as_secs_f64();
    let rate = c.generated_tokens as f64 / run_secs.max(1e-9);
    let outputs_file = if result.facts.sealed.outputs {
        SEALED_OUTPUTS_FILE
    } else {
        OUTPUTS_FILE
    };
    if args.json {
        let f = &result.facts;
        let summary = serde_json::json!({
            "inputs": c.inputs,
            "generated_tokens": c.generated_tokens,
            "finish_reasons": {"stop": c.finish_reasons.stop, "length": c.finish_reasons.length},
            "elapsed_seconds": round3(wall),
            "generation_seconds": round3(run_secs),
            "tokens_per_second": round3(rate),
            "output_dir": result.output_dir.display().to_string(),
            "outputs_file": outputs_file,
            "receipt_digest": result.receipt_digest.to_hex(),
            "certificate_digest": f.certificate_digest.to_hex(),
            "engine_digest": f.engine_digest.to_hex(),
            "policy_id": f.policy_id.to_hex(),
            "model_digest": f.model_digest.to_hex(),
            "sealed": {"inputs": f.sealed.inputs, "outputs": f.sealed.outputs},
            "shard": f.shard.map(|s| serde_json::json!({
                "index": s.index, "count": s.count, "start": s.start, "end": s.end
            })),
            "resumed_at": f.resumed_at,
            "attested": f.attestation.is_some(),
            "sampled_inputs": f.sampling.as_ref().map_or(0, |s| s.sampled_inputs),
        });
        return print(&format!("{summary:#}\n"));
    }
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
         certificate {}  engine {}  policy_id {}  model {}\n\
         took {wall:.1} s ({run_secs:.1} s generating, {rate:.1} tokens/s)\n",
        c.inputs,
        c.generated_tokens,
        c.finish_reasons.stop,
        c.finish_reasons.length,
        outputs_file,
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

/// Seconds to the millisecond, for the JSON summary.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
