//! Thread scaling: one batch size timed at several thread counts in one process, alternating
//! count by count within every repetition. On a shared machine the load from elsewhere comes
//! and goes; interleaving makes it slow every count alike, where timing the counts one after
//! the other would charge it to whichever ran during the busy spell. Speed-ups are ratios of
//! medians to the first count's, and every count must produce the same tokens.

use serde::Serialize;
use serde_json::{json, Value as Json};

use super::report::{fmt_num, median, ratio, render_table};
use super::{prompts, time_run_tokens, warm_up, Timing};
use crate::job::generate::{GenerateError, Generator};
use crate::kernels::parallel::with_threads;

/// One batch size at one thread count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingRow {
    /// Sequences per batch.
    pub batch: usize,
    /// Kernel threads.
    pub threads: usize,
    /// Median prefill throughput, prompt tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Median decode throughput, generated tokens per second.
    pub decode_tokens_per_s: f64,
    /// Median prefill time of the first thread count / this count's.
    pub prefill_speedup: f64,
    /// Median decode time of the first thread count / this count's.
    pub decode_speedup: f64,
    /// Whether every run at this count generated exactly the first run's tokens (the first
    /// count's first run).
    pub same_tokens: bool,
    /// Every timed run at this count, in order.
    pub runs: Vec<Timing>,
}

/// Time `batch` prompts at each of `threads` (warmed up at each first), `repeat` rounds of one
/// run per count. `on_run(round, threads)` is called before each run.
pub fn run_scaling(
    gen: &Generator,
    batch: usize,
    prompt_len: usize,
    new_tokens: usize,
    repeat: usize,
    threads: &[usize],
    mut on_run: impl FnMut(usize, usize),
) -> Result<Vec<ScalingRow>, GenerateError> {
    let c = &gen.checkpoint().config;
    let prompts = prompts(batch, prompt_len, c.vocab_size, c.bos_token_id);
    // Largest count first: the kernels' pool is sized by the first call that uses it.
    let mut largest_first = threads.to_vec();
    largest_first.sort_unstable_by(|a, b| b.cmp(a));
    for t in largest_first {
        with_threads(t, || warm_up(gen, batch))?;
    }
    let mut runs: Vec<Vec<Timing>> = vec![Vec::new(); threads.len()];
    let mut same = vec![true; threads.len()];
    let mut first: Option<Vec<u32>> = None;
    for round in 0..repeat.max(1) {
        for (i, &t) in threads.iter().enumerate() {
            on_run(round, t);
            let (timing, tokens) = with_threads(t, || time_run_tokens(gen, &prompts, new_tokens))?;
            runs[i].push(timing);
            let first = first.get_or_insert_with(|| tokens.clone());
            same[i] &= *first == tokens;
        }
    }
    let medians: Vec<(f64, f64)> = runs
        .iter()
        .map(|r| {
            (
                median(r.iter().map(|t| t.prefill_s).collect()),
                median(r.iter().map(|t| t.decode_s).collect()),
            )
        })
        .collect();
    let (base_prefill, base_decode) = medians.first().copied().unwrap_or((f64::NAN, f64::NAN));
    let decode_steps = new_tokens.saturating_sub(1);
    Ok(threads
        .iter()
        .zip(medians)
        .zip(runs)
        .zip(same)
        .map(
            |(((&t, (prefill_s, decode_s)), runs), same_tokens)| ScalingRow {
                batch,
                threads: t,
                prefill_tokens_per_s: ratio((batch * prompt_len) as f64, prefill_s),
                decode_tokens_per_s: ratio((batch * decode_steps) as f64, decode_s),
                prefill_speedup: ratio(base_prefill, prefill_s),
                decode_speedup: ratio(base_decode, decode_s),
                same_tokens,
                runs,
            },
        )
        .collect())
}

/// The rows as a table under a line saying what was measured.
pub fn to_table(
    rows: &[ScalingRow],
    prompt_len: usize,
    new_tokens: usize,
    repeat: usize,
) -> String {
    let mut out = format!(
        "thread scaling: prompt {prompt_len}, {new_tokens} new tokens; medians of {repeat} \
         round(s), each running every thread count once in turn\n\n"
    );
    let header = [
        "batch",
        "threads",
        "prefill tok/s",
        "decode tok/s",
        "prefill speed-up",
        "decode speed-up",
        "tokens",
    ];
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.batch.to_string(),
                r.threads.to_string(),
                fmt_num(r.prefill_tokens_per_s, 1),
                fmt_num(r.decode_tokens_per_s, 1),
                fmt_num(r.prefill_speedup, 2),
                fmt_num(r.decode_speedup, 2),
                if r.same_tokens { "same" } else { "DIFFER" }.into(),
            ]
        })
        .collect();
    out.push_str(&render_table(&header, cells));
    out
}

/// The rows as JSON, with the shape of the runs.
pub fn to_json(rows: &[ScalingRow], prompt_len: usize, new_tokens: usize, repeat: usize) -> Json {
    json!({
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "repeat": repeat,
        "rows": rows,
    })
}
