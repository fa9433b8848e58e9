//! The timing loop: one prefill step, then decode steps on fresh caches, with stopping
//! disabled so every run does the same work; peak memory per batch size; an optional run with
//! every engine operation timed.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::memory;
use super::prompts::prompts;
use crate::job::generate::{GenerateError, Generator};
use crate::restrict::profile::{self, OpTime};
use crate::restrict::Value;

/// Wall-clock times of one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The prefill step, seconds.
    pub prefill_s: f64,
    /// All decode steps, seconds.
    pub decode_s: f64,
    /// Decode steps run (`new_tokens - 1`).
    pub decode_steps: usize,
}

fn ids_of(v: Value, batch: usize) -> Result<Vec<u32>, GenerateError> {
    match v {
        Value::Ids(ids) if ids.len() == batch => Ok(ids.to_vec()),
        other => Err(GenerateError::Output {
            found: other.kind().into(),
            batch,
        }),
    }
}

/// Run `prompts` (equal lengths) for `new_tokens` tokens: one prefill step, then
/// `new_tokens - 1` decode steps, on fresh caches. Stopping is disabled.
pub fn time_run(
    gen: &Generator,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> Result<Timing, GenerateError> {
    time_run_tokens(gen, prompts, new_tokens).map(|(timing, _)| timing)
}

/// [`time_run`], also returning every step's ids (step by step, `batch` per step).
pub fn time_run_tokens(
    gen: &Generator,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> Result<(Timing, Vec<u32>), GenerateError> {
    run_steps(gen, prompts, new_tokens, false).map(|r| (r.timing, r.tokens))
}

/// [`time_run`] with every engine operation of the prefill and of the decode steps timed
/// ([`restrict::profile`](crate::restrict::profile)): the run's times and each operation's share
/// of each stage.
pub fn time_run_profiled(
    gen: &Generator,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> Result<ProfiledRun, GenerateError> {
    run_steps(gen, prompts, new_tokens, true).map(|r| ProfiledRun {
        timing: r.timing,
        ops: r.ops,
        prefill_ops: r.prefill_ops,
    })
}

/// What [`run_steps`] measured.
struct Steps {
    timing: Timing,
    /// Every step's ids.
    tokens: Vec<u32>,
    /// The decode steps' operations (empty unless profiled).
    ops: Vec<OpTime>,
    /// The prefill's operations (empty unless profiled).
    prefill_ops: Vec<OpTime>,
}

fn run_steps(
    gen: &Generator,
    prompts: &[Vec<u32>],
    new_tokens: usize,
    profiled: bool,
) -> Result<Steps, GenerateError> {
    let batch = prompts.len();
    let len = prompts.first().map_or(0, Vec::len);
    let vocab = gen.checkpoint().config.vocab_size;
    for (index, p) in prompts.iter().enumerate() {
        let problem = if p.len() != len || len == 0 {
            Some(format!(
                "it has {} tokens; benchmark prompts must all have the same, non-zero length",
                p.len()
            ))
        } else {
            p.iter()
                .find(|&&id| id as usize >= vocab)
                .map(|id| format!("token id {id} is outside the vocabulary of {vocab}"))
        };
        if let Some(problem) = problem {
            return Err(GenerateError::Prompt { index, problem });
        }
    }
    if batch == 0 {
        let none = Timing {
            prefill_s: 0.0,
            decode_s: 0.0,
            decode_steps: 0,
        };
        return Ok(Steps {
            timing: none,
            tokens: Vec::new(),
            ops: Vec::new(),
            prefill_ops: Vec::new(),
        });
    }
    let model = gen.fresh_model(batch, len + new_tokens)?;
    let tokens = prompts.concat();
    let positions: Vec<u32> = (0..batch).flat_map(|_| 0..len as u32).collect();
    let pad = vec![0u32; batch];
    if profiled {
        profile::start();
    }
    let t = Instant::now();
    let prefilled = gen
        .prefill_step(&model, tokens, positions, pad.clone())
        .and_then(|out| ids_of(out, batch));
    let prefill_s = t.elapsed().as_secs_f64();
    // Stopped before `?`, so that a failed prefill does not leave profiling on.
    let prefill_ops = if profiled {
        profile::stop()
    } else {
        Vec::new()
    };
    let mut ids = prefilled?;
    let decode_steps = new_tokens.saturating_sub(1);
    if profiled {
        profile::start();
    }
    let t = Instant::now();
    let mut tokens = Vec::with_capacity(batch * new_tokens);
    // A closure, so that profiling is switched off again even when a step fails.
    let mut decode = || -> Result<(), GenerateError> {
        for s in 0..decode_steps {
            tokens.extend_from_slice(&ids);
            let pos = vec![(len + s) as u32; batch];
            ids = ids_of(
                gen.step(&model, std::mem::take(&mut ids), pos, pad.clone())?,
                batch,
            )?;
        }
        Ok(())
    };
    let decoded = decode();
    let decode_s = t.elapsed().as_secs_f64();
    let ops = if profiled {
        profile::stop()
    } else {
        Vec::new()
    };
    decoded?;
    tokens.extend_from_slice(&ids);
    let timing = Timing {
        prefill_s,
        decode_s,
        decode_steps,
    };
    Ok(Steps {
        timing,
        tokens,
        ops,
        prefill_ops,
    })
}

/// One untimed single-token step at `batch`: pages in every weight the batch size reads (and
/// at batch 1 builds the output head's screen) and starts the kernels' threads once, so the
/// first timed run is not a cold one. At the measured batch size, because batch 1 and larger
/// batches read the output head differently: warming one up for the other would leave both
/// forms resident and overstate the peak.
pub fn warm_up(gen: &Generator, batch: usize) -> Result<(), GenerateError> {
    let bos = gen.checkpoint().config.bos_token_id;
    time_run(gen, &vec![vec![bos]; batch.max(1)], 1).map(|_| ())
}

/// Which process a peak RSS covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RssScope {
    /// The batch size ran alone in its own process.
    PerBatch,
    /// Every batch size ran in one process, in increasing order: a row's peak is the peak of
    /// that batch size and every smaller one.
    ProcessWide,
}

/// What one batch size measured: its runs and the peak RSS of the process that ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRun {
    /// Sequences per batch.
    pub batch: usize,
    /// Every timed run, in order.
    pub runs: Vec<Timing>,
    /// Peak resident set of the process after the runs, bytes (when the platform reports it).
    pub peak_rss_bytes: Option<u64>,
    /// What that peak covers.
    pub rss_scope: RssScope,
    /// With `--profile`: one extra run with each engine operation's calls and time over its
    /// prefill and over its decode steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled: Option<ProfiledRun>,
}

/// A run whose prefill and decode steps were profiled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfiledRun {
    /// Its times.
    pub timing: Timing,
    /// Each engine operation of its decode steps, most time first.
    pub ops: Vec<OpTime>,
    /// Each engine operation of its prefill, most time first.
    #[serde(default)]
    pub prefill_ops: Vec<OpTime>,
}

/// Warm up once, then time `repeat` runs of `batch` prompts. `on_run(i)` is called before run
/// `i` (for progress output; `i == repeat` is the profiled run). With `profile`, one more run
/// after the timed ones times every engine operation of its prefill and of its decode steps;
/// it is not one of the runs the medians are taken over.
pub fn run_batch(
    gen: &Generator,
    batch: usize,
    shape: (usize, usize),
    repeat: usize,
    profile: bool,
    rss_scope: RssScope,
    mut on_run: impl FnMut(usize),
) -> Result<BatchRun, GenerateError> {
    let (prompt_len, new_tokens) = shape;
    let c = &gen.checkpoint().config;
    let prompts = prompts(batch, prompt_len, c.vocab_size, c.bos_token_id);
    warm_up(gen, batch)?;
    let repeat = repeat.max(1);
    let mut runs = Vec::with_capacity(repeat);
    for i in 0..repeat {
        on_run(i);
        runs.push(time_run(gen, &prompts, new_tokens)?);
    }
    let peak_rss_bytes = memory::peak_rss();
    let profiled = if profile {
        on_run(repeat);
        Some(time_run_profiled(gen, &prompts, new_tokens)?)
    } else {
        None
    };
    Ok(BatchRun {
        batch,
        runs,
        peak_rss_bytes,
        rss_scope,
        profiled,
    })
}
