//! `runner bench --model DIR [--engine E] [--policy P] --batch 1,8,32,128 --prompt-len 32
//! --new-tokens 32 [--threads N] [--repeat R] [--json]`: verify the engine against the policy,
//! then time prefill and decode for each batch size, each in a child process of this binary
//! (so its peak RSS is its own), probe the machine's limits, and print a table or JSON.
//!
//! The child is this same subcommand with the hidden `--worker` flag: it runs the batch sizes
//! it is given in-process and prints one JSON line per batch size ([`bench::BatchRun`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use clap::builder::RangedU64ValueParser;

use super::CliResult;
use crate::bench::{self, probe, BatchReport, BatchRun, Machine, ModelFacts, Probes, RssScope};
use crate::error::{Diagnose, Exit};
use crate::job::generate::Generator;
use crate::kernels;
use crate::model::weights::Checkpoint;
use crate::restrict;
use crate::restrict::policy::Policy;

/// Flags of `runner bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The model: a checkpoint directory (config.json + safetensors), a .gguf file, or a
    /// directory holding exactly one .gguf file.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    model: PathBuf,
    /// The engine source.
    #[arg(long, value_name = "FILE", default_value = "engines/gemma3.eng")]
    engine: PathBuf,
    /// The policy the engine is verified against before it runs.
    #[arg(long, value_name = "FILE", default_value = "policies/gemma3.json")]
    policy: PathBuf,
    /// Batch sizes, comma-separated (run in increasing order).
    #[arg(long, value_delimiter = ',', value_name = "N,...", default_value = "1,8,32,128",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    batch: Vec<usize>,
    /// Tokens per synthetic prompt (bos, then fixed-seed ids).
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=131_072))]
    prompt_len: usize,
    /// New tokens per sequence: one from the prefill, the rest from decode steps.
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = RangedU64ValueParser::<usize>::new().range(2..=131_072))]
    new_tokens: usize,
    /// Kernel threads (default: RUNNER_THREADS, else every available core).
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096))]
    threads: Option<usize>,
    /// Instead of the report: time each batch size at each of these thread counts
    /// (comma-separated, e.g. 1,2), alternating between them within every repetition, and
    /// print each count's speed-up over the first (medians of --repeat rounds).
    #[arg(long, value_delimiter = ',', value_name = "N,...",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096))]
    scaling: Vec<usize>,
    /// Timed runs per batch size; times reported are medians.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=1000))]
    repeat: usize,
    /// MiB the bandwidth probe reads per pass.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    probe_mib: usize,
    /// After the timed runs, one more run per batch size with every engine operation timed;
    /// prints where its prefill and its decode steps spent their time (not counted in the
    /// medians).
    #[arg(long, conflicts_with = "scaling")]
    profile: bool,
    /// Run every batch size in this process (peak RSS is then process-wide and monotonic).
    #[arg(long)]
    in_process: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Progress on stderr.
    #[arg(long)]
    verbose: bool,
    /// Internal: run the given batch sizes and print one JSON line each.
    #[arg(long, hide = true)]
    worker: bool,
}

/// What can go wrong around the measurements.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The engine file could not be read.
    #[error("cannot read engine {path}: {source}")]
    ReadEngine {
        /// The engine path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The child process for a batch size could not be started.
    #[error("cannot start the benchmark process for batch {batch}: {source}")]
    Spawn {
        /// The batch size.
        batch: usize,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The child process for a batch size failed.
    #[error("the benchmark process for batch {batch} failed ({status}); its error is above")]
    Worker {
        /// The batch size.
        batch: usize,
        /// How it ended.
        status: String,
    },
    /// The child process printed something other than its result.
    #[error("the benchmark process for batch {batch} printed an unreadable result: {detail}")]
    WorkerOutput {
        /// The batch size.
        batch: usize,
        /// What was wrong.
        detail: String,
    },
}

impl Diagnose for BenchError {
    fn exit(&self) -> Exit {
        match self {
            BenchError::ReadEngine { .. } => Exit::BadInput,
            _ => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            BenchError::ReadEngine { .. } => Some(
                "check the --engine path (default engines/gemma3.eng, from the repo root)".into(),
            ),
            BenchError::Worker { .. } | BenchError::Spawn { .. } => {
                Some("run with --in-process to measure without child processes".into())
            }
            BenchError::WorkerOutput { .. } => None,
        }
    }
}

fn progress(verbose: bool, msg: impl FnOnce() -> String) {
    if verbose {
        eprintln!("bench: {}", msg());
    }
}

/// Run `runner bench`.
pub fn bench(args: BenchArgs) -> CliResult {
    if let Some(n) = args.threads {
        kernels::set_threads(n);
    }
    let mut batches = args.batch.clone();
    batches.sort_unstable();
    batches.dedup();

    let policy = Policy::load(&args.policy)?;
    let bytes = std::fs::read(&args.engine).map_err(|source| BenchError::ReadEngine {
        path: args.engine.clone(),
        source,
    })?;
    let checked = restrict::check_bytes(&bytes, &args.engine.display().to_string(), &policy)?;
    let ck = Arc::new(Checkpoint::load(&args.model)?);

    if !args.scaling.is_empty() {
        return scaling(&args, checked, ck, &batches);
    }
    if args.worker {
        let scope = if batches.len() == 1 {
            RssScope::PerBatch
        } else {
            RssScope::ProcessWide
        };
        let gen = Generator::new(checked, "main", ck)?;
        for &b in &batches {
            let run = measure(&gen, &args, b, scope)?;
            let line = serde_json::to_string(&run).map_err(|e| BenchError::WorkerOutput {
                batch: b,
                detail: e.to_string(),
            })?;
            super::print(&format!("{line}\n"))?;
        }
        return Ok(());
    }

    let load_average_start = probe::load_average();
    let runs: Vec<BatchRun> = if args.in_process {
        let gen = Generator::new(checked, "main", Arc::clone(&ck))?;
        batches
            .iter()
            .map(|&b| measure(&gen, &args, b, RssScope::ProcessWide))
            .collect::<Result<_, _>>()?
    } else {
        batches
            .iter()
            .map(|&b| in_child(&args, b))
            .collect::<Result<_, _>>()?
    };

    // Probes run after the batches, so their buffers never count in a batch's peak RSS.
    let threads = kernels::threads();
    progress(args.verbose, || {
        format!("probing read bandwidth ({} MiB)", args.probe_mib)
    });
    let bandwidth = probe::read_bandwidth(args.probe_mib, threads);
    progress(args.verbose, || "probing linear peak".into());
    let linear = probe::linear_peak()?;
    progress(args.verbose, || "probing FMA peak".into());
    let fma = probe::fma_peak(threads);
    let probes = Probes {
        read_bandwidth_bytes_per_s: bandwidth,
        bandwidth_probe_mib: args.probe_mib,
        linear_flops_per_s: linear,
        fma_flops_per_s: fma,
    };
    let facts = ModelFacts::of(&ck);
    let report = bench::Report {
        machine: Machine {
            cpu: probe::cpu_model(),
            isa: format!("{:?}", kernels::isa()),
            threads,
            allocator: crate::memory::heap::ALLOCATOR,
            load_average_start,
            load_average_end: probe::load_average(),
        },
        probes,
        model_dir: args.model.display().to_string(),
        batches: runs
            .iter()
            .map(|r| {
                BatchReport::new(
                    r,
                    &ck.config,
                    &facts,
                    &probes,
                    args.prompt_len,
                    args.new_tokens,
                )
            })
            .collect(),
        model: facts,
        prompt_len: args.prompt_len,
        new_tokens: args.new_tokens,
        repeat: args.repeat,
    };
    if args.json {
        super::print(&format!("{:#}\n", report.to_json()))
    } else {
        super::print(&report.to_table())
    }
}

/// `--scaling`: every batch size at every thread count, in this process.
fn scaling(
    args: &BenchArgs,
    checked: restrict::Checked,
    ck: Arc<Checkpoint>,
    batches: &[usize],
) -> CliResult {
    let gen = Generator::new(checked, "main", ck)?;
    let mut rows = Vec::new();
    for &b in batches {
        progress(args.verbose, || format!("batch {b}: warm-up"));
        rows.extend(bench::scaling::run_scaling(
            &gen,
            b,
            args.prompt_len,
            args.new_tokens,
            args.repeat,
            &args.scaling,
            |round, t| {
                progress(args.verbose, || {
                    format!(
                        "batch {b}: round {}/{}, {t} threads",
                        round + 1,
                        args.repeat
                    )
                })
            },
        )?);
    }
    let (p, n, r) = (args.prompt_len, args.new_tokens, args.repeat);
    if args.json {
        let json = bench::scaling::to_json(&rows, p, n, r);
        super::print(&format!("{json:#}\n"))
    } else {
        super::print(&bench::scaling::to_table(&rows, p, n, r))
    }
}

/// Time one batch size in this process.
fn measure(
    gen: &Generator,
    args: &BenchArgs,
    batch: usize,
    scope: RssScope,
) -> Result<BatchRun, crate::job::generate::GenerateError> {
    progress(args.verbose, || format!("batch {batch}: warm-up"));
    bench::run_batch(
        gen,
        batch,
        (args.prompt_len, args.new_tokens),
        args.repeat,
        args.profile,
        scope,
        |i| {
            progress(args.verbose, || {
                if i < args.repeat.max(1) {
                    format!("batch {batch}: run {}/{}", i + 1, args.repeat)
                } else {
                    format!("batch {batch}: profiled run")
                }
            })
        },
    )
}

/// Time one batch size in a child process of this binary.
fn in_child(args: &BenchArgs, batch: usize) -> Result<BatchRun, BenchError> {
    let spawn = |source| BenchError::Spawn { batch, source };
    let exe = std::env::current_exe().map_err(spawn)?;
    let mut cmd = Command::new(exe);
    cmd.arg("bench")
        .arg("--worker")
        .arg("--model")
        .arg(&args.model)
        .arg("--engine")
        .arg(&args.engine)
        .arg("--policy")
        .arg(&args.policy)
        .arg("--batch")
        .arg(batch.to_string())
        .arg("--prompt-len")
        .arg(args.prompt_len.to_string())
        .arg("--new-tokens")
        .arg(args.new_tokens.to_string())
        .arg("--threads")
        .arg(kernels::threads().to_string())
        .arg("--repeat")
        .arg(args.repeat.to_string());
    if args.verbose {
        cmd.arg("--verbose");
    }
    if args.profile {
        cmd.arg("--profile");
    }
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(spawn)?;
    if !out.status.success() {
        return Err(BenchError::Worker {
            batch,
            status: out.status.to_string(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or_default();
    let run: BatchRun = serde_json::from_str(line).map_err(|e| BenchError::WorkerOutput {
        batch,
        detail: e.to_string(),
    })?;
    if run.batch != batch {
        return Err(BenchError::WorkerOutput {
            batch,
            detail: format!("it reports batch {}", run.batch),
        });
    }
    Ok(run)
}
