//! `runner bench`: prefill and decode throughput of an engine on a checkpoint, per batch size,
//! with the process's peak memory against the issue-4 budget and the results stated as
//! fractions of this machine's own probed limits (see [`probe`]).
//!
//! A run feeds `batch` synthetic prompts of equal length (no padding) through
//! [`Generator::step`](crate::job::generate::Generator::step): one prefill step over the prompts,
//! then `new_tokens - 1` decode steps feeding back each step's ids, with stopping disabled, so
//! every run does the same work (as HF's `generate` with `max_new_tokens = new_tokens` and no
//! eos). Prefill time covers the first step (it yields the first new token); decode time
//! covers the rest.
//!
//! Flop counts are those of the linear layers (two per multiply-add): every layer projection
//! per token, and the output head once per sequence per step (the engine applies it to the
//! last position only). Attention's own flops are left out (small at benchmark lengths).
#![forbid(unsafe_code)]

pub mod memory;
pub mod probe;
pub mod scaling;

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};

use crate::job::generate::{GenerateError, Generator};
use crate::model::tensors::{LayerTensor, LayerWeights};
use crate::model::weights::Checkpoint;
use crate::restrict::profile::{self, OpTime};
use crate::restrict::Value;

/// Seed of the synthetic prompt ids (scripts/bench/compare_pytorch.py draws the same ones).
pub const PROMPT_SEED: u64 = 0x5EED_0B0B_BE4C_0001;

/// The lowest id synthetic prompts draw after `bos` (0 = pad, 1 = eos and 2 = bos are skipped).
const FIRST_PLAIN_ID: u32 = 3;

/// SplitMix64: a tiny, well-known generator that a Python script can reproduce exactly.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `batch` deterministic prompts of `prompt_len` ids: `bos`, then ids drawn from
/// [`PROMPT_SEED`] in `3..vocab` (in `0..vocab` for a vocabulary of 3 or fewer), row by row.
pub fn prompts(batch: usize, prompt_len: usize, vocab: usize, bos: u32) -> Vec<Vec<u32>> {
    let vocab = u32::try_from(vocab).unwrap_or(u32::MAX).max(1);
    let lo = if vocab > FIRST_PLAIN_ID {
        FIRST_PLAIN_ID
    } else {
        0
    };
    let span = u64::from(vocab - lo);
    let mut rng = SplitMix64(PROMPT_SEED);
    (0..batch)
        .map(|_| {
            let mut p = Vec::with_capacity(prompt_len);
            if prompt_len > 0 {
                p.push(bos);
            }
            p.extend((1..prompt_len).map(|_| lo + (rng.next() % span) as u32));
            p
        })
        .collect()
}

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

/// [`time_run`] with every engine operation of the decode steps timed
/// ([`restrict::profile`](crate::restrict::profile)): the run's times and each operation's share.
pub fn time_run_profiled(
    gen: &Generator,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> Result<(Timing, Vec<OpTime>), GenerateError> {
    run_steps(gen, prompts, new_tokens, true).map(|r| (r.timing, r.ops))
}

/// What [`run_steps`] measured.
struct Steps {
    timing: Timing,
    /// Every step's ids.
    tokens: Vec<u32>,
    /// The decode steps' operations (empty unless profiled).
    ops: Vec<OpTime>,
}

fn run_steps(
    gen: &Generator,
    prompts: &[Vec<u32>],
    new_tokens: usize,
    profile_decode: bool,
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
        });
    }
    let model = gen.fresh_model(batch, len + new_tokens)?;
    let tokens = prompts.concat();
    let positions: Vec<u32> = (0..batch).flat_map(|_| 0..len as u32).collect();
    let pad = vec![0u32; batch];
    let t = Instant::now();
    let mut ids = ids_of(
        gen.prefill_step(&model, tokens, positions, pad.clone())?,
        batch,
    )?;
    let prefill_s = t.elapsed().as_secs_f64();
    let decode_steps = new_tokens.saturating_sub(1);
    if profile_decode {
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
    let ops = if profile_decode {
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
    /// decode steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled: Option<ProfiledRun>,
}

/// A run whose decode steps were profiled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfiledRun {
    /// Its times.
    pub timing: Timing,
    /// Each engine operation of its decode steps, most time first.
    pub ops: Vec<OpTime>,
}

/// Warm up once, then time `repeat` runs of `batch` prompts. `on_run(i)` is called before run
/// `i` (for progress output; `i == repeat` is the profiled run). With `profile`, one more run
/// after the timed ones times every engine operation of its decode steps; it is not one of
/// the runs the medians are taken over.
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
        let (timing, ops) = time_run_profiled(gen, &prompts, new_tokens)?;
        Some(ProfiledRun { timing, ops })
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

/// What the report needs to know about the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFacts {
    /// Bytes of the weights the model uses, as stored.
    pub weight_bytes: u64,
    /// Storage dtype of the projection weights.
    pub weight_dtype: String,
    /// Parameters the model uses (the tied head counted once).
    pub params: u64,
    /// Parameters of every layer's projections: the multiply-adds per token per step.
    pub layer_linear_params: u64,
    /// Parameters of the output head: multiply-adds per sequence per step.
    pub head_params: u64,
    /// Bytes of weights a decode step reads at batch 2 and above: everything but the embedding
    /// table (a step reads only its rows), with the output head at full width.
    pub step_bytes: u64,
    /// The same at batch 1, where the output head is read through its 8-bit screen when it has
    /// one (`kernels::argmax_screen_bytes`).
    pub step_bytes_batch1: u64,
    /// Decoder layers.
    pub layers: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

impl ModelFacts {
    /// The facts of a loaded checkpoint.
    pub fn of(ck: &Checkpoint) -> ModelFacts {
        let n = |w: &crate::kernels::Weight| w.numel() as u64;
        let mut layer_linear = 0;
        let mut small = 0;
        for (spec, w) in ck.layers.iter().flat_map(LayerWeights::iter) {
            if spec.is_projection() {
                layer_linear += n(w);
            } else {
                small += n(w);
            }
        }
        let head = n(&ck.lm_head);
        let mut params = layer_linear + small + n(&ck.embed) + n(&ck.norm);
        if !ck.config.tie_word_embeddings {
            params += head;
        }
        let dtype = ck
            .layers
            .first()
            .map_or(ck.embed.dtype(), |l| l[LayerTensor::QProj].dtype());
        let head_bytes = ck.lm_head.bytes().len() as u64;
        // Tied, the head's bytes are the embedding's and `weight_bytes` counts them once.
        let untied_embed = if ck.config.tie_word_embeddings {
            0
        } else {
            ck.embed.bytes().len() as u64
        };
        let step_bytes = ck.weight_bytes - untied_embed;
        let step_bytes_batch1 = crate::kernels::argmax_screen_bytes(&ck.lm_head)
            .map_or(step_bytes, |screen| step_bytes - head_bytes + screen);
        ModelFacts {
            weight_bytes: ck.weight_bytes,
            weight_dtype: format!("{dtype:?}").to_lowercase(),
            params,
            layer_linear_params: layer_linear,
            head_params: head,
            step_bytes,
            step_bytes_batch1,
            layers: ck.layers.len(),
            vocab_size: ck.config.vocab_size,
        }
    }
}

/// The machine's probed limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Probes {
    /// Streaming read bandwidth, bytes/s.
    pub read_bandwidth_bytes_per_s: f64,
    /// MiB the bandwidth probe read per pass.
    pub bandwidth_probe_mib: usize,
    /// Best throughput of `linear` on [`probe::LINEAR_PROBE_SHAPE`], flop/s.
    pub linear_flops_per_s: f64,
    /// The machine's peak f32 FMA throughput with the kernel threads ([`probe::fma_peak`]).
    pub fma_flops_per_s: f64,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchReport {
    /// Sequences per batch.
    pub batch: usize,
    /// Median prefill time, seconds.
    pub prefill_s: f64,
    /// `batch * prompt_len / prefill_s`.
    pub prefill_tokens_per_s: f64,
    /// Decode steps per run.
    pub decode_steps: usize,
    /// Median decode time, seconds.
    pub decode_s: f64,
    /// `batch * decode_steps / decode_s`.
    pub decode_tokens_per_s: f64,
    /// Milliseconds per decode step.
    pub ms_per_decode_step: f64,
    /// Peak resident set, bytes.
    pub peak_rss_bytes: Option<u64>,
    /// What the peak covers.
    pub rss_scope: RssScope,
    /// KV cache bytes this run's caches hold at most (f32; sliding layers hold
    /// `min(window, prompt + new)` columns).
    pub kv_cache_bytes: u64,
    /// Weights + `kv_cache_bytes` + 100 MiB.
    pub budget_bytes: u64,
    /// Peak RSS within `budget_bytes` (`None` without a peak).
    pub memory_ok: Option<bool>,
    /// KV cache bytes counting full windows for sliding layers.
    pub kv_cache_full_window_bytes: u64,
    /// Weights + `kv_cache_full_window_bytes` + 100 MiB.
    pub budget_full_window_bytes: u64,
    /// Peak RSS within `budget_full_window_bytes`.
    pub memory_ok_full_window: Option<bool>,
    /// Bytes of weights one decode step reads ([`ModelFacts::step_bytes`] or, at batch 1,
    /// [`ModelFacts::step_bytes_batch1`]).
    pub decode_bytes_per_step: u64,
    /// (`decode_bytes_per_step` / read bandwidth) / decode step time: 1.0 = at the bandwidth
    /// roofline.
    pub decode_bandwidth_fraction: f64,
    /// (all weight bytes / read bandwidth) / decode step time: above 1.0 when a step reads
    /// less than every weight.
    pub decode_all_weights_fraction: f64,
    /// Linear-layer GFLOP/s achieved while decoding.
    pub decode_gflops: f64,
    /// `decode_gflops` / the probed linear peak.
    pub decode_peak_fraction: f64,
    /// `decode_gflops` / the machine's FMA peak.
    pub decode_fma_fraction: f64,
    /// Linear-layer GFLOP/s achieved in prefill.
    pub prefill_gflops: f64,
    /// `prefill_gflops` / the probed linear peak.
    pub prefill_peak_fraction: f64,
    /// `prefill_gflops` / the machine's FMA peak.
    pub prefill_fma_fraction: f64,
    /// Every run's times.
    pub runs: Vec<Timing>,
    /// With `--profile`: where [`BatchRun::profiled`]'s decode steps spent their time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_profile: Option<DecodeProfile>,
}

/// Where the decode steps of one extra run spent their time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecodeProfile {
    /// That run's decode time, seconds.
    pub decode_s: f64,
    /// Each engine operation, most time first.
    pub ops: Vec<OpTime>,
    /// Decode time outside every operation (the interpreter, step set-up), seconds.
    pub outside_ops_s: f64,
}

/// The median of `v` (the mean of the middle two for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `a / b`, or NaN (printed as `-`, serialised as null) when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

impl BatchReport {
    /// Derive a row from what a batch size measured.
    pub fn new(
        run: &BatchRun,
        cfg: &crate::model::config::ModelConfig,
        facts: &ModelFacts,
        probes: &Probes,
        prompt_len: usize,
        new_tokens: usize,
    ) -> BatchReport {
        let b = run.batch as f64;
        let prefill_s = median(run.runs.iter().map(|r| r.prefill_s).collect());
        let decode_s = median(run.runs.iter().map(|r| r.decode_s).collect());
        let decode_steps = run.runs.first().map_or(0, |r| r.decode_steps);
        let step_s = ratio(decode_s, decode_steps as f64);
        let total_len = prompt_len + new_tokens;
        let kv = memory::kv_bytes_held(cfg, run.batch, total_len);
        let kv_full = memory::kv_bytes_full_window(cfg, run.batch, total_len);
        let budget = memory::budget(facts.weight_bytes, kv);
        let budget_full = memory::budget(facts.weight_bytes, kv_full);
        let per_step_flops =
            2.0 * b * (facts.layer_linear_params as f64 + facts.head_params as f64);
        let prefill_flops = 2.0
            * b
            * (prompt_len as f64 * facts.layer_linear_params as f64 + facts.head_params as f64);
        let decode_gflops = ratio(per_step_flops, step_s) / 1e9;
        let prefill_gflops = ratio(prefill_flops, prefill_s) / 1e9;
        let peak_gflops = probes.linear_flops_per_s / 1e9;
        let fma_gflops = probes.fma_flops_per_s / 1e9;
        let step_bytes = if run.batch == 1 {
            facts.step_bytes_batch1
        } else {
            facts.step_bytes
        };
        let roofline = |bytes: u64| {
            ratio(
                ratio(bytes as f64, probes.read_bandwidth_bytes_per_s),
                step_s,
            )
        };
        BatchReport {
            batch: run.batch,
            prefill_s,
            prefill_tokens_per_s: ratio(b * prompt_len as f64, prefill_s),
            decode_steps,
            decode_s,
            decode_tokens_per_s: ratio(b * decode_steps as f64, decode_s),
            ms_per_decode_step: step_s * 1e3,
            peak_rss_bytes: run.peak_rss_bytes,
            rss_scope: run.rss_scope,
            kv_cache_bytes: kv,
            budget_bytes: budget,
            memory_ok: run.peak_rss_bytes.map(|p| p <= budget),
            kv_cache_full_window_bytes: kv_full,
            budget_full_window_bytes: budget_full,
            memory_ok_full_window: run.peak_rss_bytes.map(|p| p <= budget_full),
            decode_bytes_per_step: step_bytes,
            decode_bandwidth_fraction: roofline(step_bytes),
            decode_all_weights_fraction: roofline(facts.weight_bytes),
            decode_gflops,
            decode_peak_fraction: ratio(decode_gflops, peak_gflops),
            decode_fma_fraction: ratio(decode_gflops, fma_gflops),
            prefill_gflops,
            prefill_peak_fraction: ratio(prefill_gflops, peak_gflops),
            prefill_fma_fraction: ratio(prefill_gflops, fma_gflops),
            runs: run.runs.clone(),
            decode_profile: run.profiled.as_ref().map(|p| {
                let in_ops: f64 = p.ops.iter().map(|o| o.seconds).sum();
                DecodeProfile {
                    decode_s: p.timing.decode_s,
                    ops: p.ops.clone(),
                    outside_ops_s: (p.timing.decode_s - in_ops).max(0.0),
                }
            }),
        }
    }
}

/// The machine a report was measured on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Instruction set the kernels run with.
    pub isa: String,
    /// Kernel threads.
    pub threads: usize,
    /// Load average (1, 5, 15 min) before the runs.
    pub load_average_start: Option<[f64; 3]>,
    /// Load average after the runs and probes.
    pub load_average_end: Option<[f64; 3]>,
}

/// A whole benchmark.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// The probed limits.
    pub probes: Probes,
    /// The checkpoint directory.
    pub model_dir: String,
    /// Facts of the checkpoint.
    pub model: ModelFacts,
    /// Tokens per prompt.
    pub prompt_len: usize,
    /// New tokens per sequence.
    pub new_tokens: usize,
    /// Timed runs per batch size (times are medians).
    pub repeat: usize,
    /// One row per batch size.
    pub batches: Vec<BatchReport>,
}

const MIB: f64 = (1u64 << 20) as f64;

fn fmt_num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// Right-aligned columns, two spaces apart, under `header`.
fn render_table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i).map(String::len))
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(&header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    for r in &rows {
        out.push_str(&line(r));
    }
    out
}

fn fmt_mib(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |b| format!("{:.1}", b as f64 / MIB))
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "pass",
        Some(false) => "FAIL",
        None => "-",
    }
}

impl Report {
    /// The report as JSON (non-finite numbers become null).
    pub fn to_json(&self) -> Json {
        serde_json::to_value(self).unwrap_or_else(|e| json!({ "error": e.to_string() }))
    }

    /// The report as a few header lines and a table, one row per batch size.
    pub fn to_table(&self) -> String {
        let m = &self.machine;
        let p = &self.probes;
        let f = &self.model;
        let load = |l: Option<[f64; 3]>| {
            l.map_or_else(
                || "unknown".into(),
                |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"),
            )
        };
        let (lm, lk, ln) = probe::LINEAR_PROBE_SHAPE;
        let mut out = String::new();
        out.push_str(&format!(
            "model      {} ({:.1}M params, {:.1} MiB {} weights, {} layers)\n",
            self.model_dir,
            f.params as f64 / 1e6,
            f.weight_bytes as f64 / MIB,
            f.weight_dtype,
            f.layers
        ));
        out.push_str(&format!(
            "shape      prompt {} tokens, {} new tokens ({} decode steps), medians of {} run(s)\n",
            self.prompt_len,
            self.new_tokens,
            self.new_tokens.saturating_sub(1),
            self.repeat
        ));
        out.push_str(&format!(
            "machine    {}, isa {}, {} thread(s); load average {} at start, {} at end\n",
            m.cpu,
            m.isa,
            m.threads,
            load(m.load_average_start),
            load(m.load_average_end)
        ));
        out.push_str(&format!(
            "probes     read bandwidth {:.1} GB/s ({} MiB, best of passes); \
             linear x[{lm},{lk}] w[{ln},{lk}] bf16 {:.1} GFLOP/s (best); \
             FMA peak {:.1} GFLOP/s\n",
            p.read_bandwidth_bytes_per_s / 1e9,
            p.bandwidth_probe_mib,
            p.linear_flops_per_s / 1e9,
            p.fma_flops_per_s / 1e9
        ));
        let scope = match self.batches.first().map(|b| b.rss_scope) {
            Some(RssScope::ProcessWide) => {
                "process-wide and monotonic: each row includes the smaller batches before it"
            }
            _ => "per batch size (each ran in its own process)",
        };
        out.push_str(&format!(
            "memory     peak RSS {scope}; budget = weights + f32 KV cache + 100 MiB\n\n"
        ));
        let header = [
            "batch",
            "prefill tok/s",
            "decode tok/s",
            "ms/step",
            "peak RSS MiB",
            "budget MiB",
            "memory",
            "MiB/step",
            "BW roofline",
            "decode GFLOP/s",
            "of linear",
            "of FMA",
            "prefill GFLOP/s",
            "of linear",
            "of FMA",
        ];
        let rows: Vec<Vec<String>> = self
            .batches
            .iter()
            .map(|r| {
                vec![
                    r.batch.to_string(),
                    fmt_num(r.prefill_tokens_per_s, 1),
                    fmt_num(r.decode_tokens_per_s, 1),
                    fmt_num(r.ms_per_decode_step, 1),
                    fmt_mib(r.peak_rss_bytes),
                    fmt_mib(Some(r.budget_bytes)),
                    verdict(r.memory_ok).into(),
                    fmt_mib(Some(r.decode_bytes_per_step)),
                    fmt_num(r.decode_bandwidth_fraction, 2),
                    fmt_num(r.decode_gflops, 1),
                    fmt_num(r.decode_peak_fraction, 2),
                    fmt_num(r.decode_fma_fraction, 2),
                    fmt_num(r.prefill_gflops, 1),
                    fmt_num(r.prefill_peak_fraction, 2),
                    fmt_num(r.prefill_fma_fraction, 2),
                ]
            })
            .collect();
        out.push_str(&render_table(&header, rows));
        for r in &self.batches {
            if let Some(p) = &r.decode_profile {
                out.push_str(&p.to_table(r.batch, r.decode_steps));
            }
        }
        out
    }
}

impl DecodeProfile {
    /// The profile as a heading and one line per operation, then the time outside them.
    fn to_table(&self, batch: usize, steps: usize) -> String {
        let share = |s: f64| fmt_num(100.0 * ratio(s, self.decode_s), 1);
        let ms = |s: f64| fmt_num(s * 1e3, 1);
        let mut rows: Vec<Vec<String>> = self
            .ops
            .iter()
            .map(|o| {
                vec![
                    o.op.clone(),
                    o.calls.to_string(),
                    ms(o.seconds),
                    share(o.seconds),
                ]
            })
            .collect();
        rows.push(vec![
            "(outside operations)".into(),
            "-".into(),
            ms(self.outside_ops_s),
            share(self.outside_ops_s),
        ]);
        format!(
            "\ndecode profile, batch {batch}: one extra run's {steps} decode steps, {} ms\n{}",
            ms(self.decode_s),
            render_table(&["operation", "calls", "ms", "% of decode"], rows)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_start_with_bos_and_stay_in_the_vocabulary() {
        let a = prompts(3, 5, 300, 2);
        assert_eq!(a, prompts(3, 5, 300, 2));
        assert_eq!(a.len(), 3);
        for p in &a {
            assert_eq!(p.len(), 5);
            assert_eq!(p[0], 2);
            assert!(p[1..].iter().all(|&id| (3..300).contains(&id)), "{p:?}");
        }
        assert_ne!(a[0], a[1]);
        // The first row of a larger batch is the same prompt.
        assert_eq!(prompts(1, 5, 300, 2)[0], a[0]);
    }

    #[test]
    fn prompts_match_the_ones_compare_pytorch_draws() {
        // scripts/bench/compare_pytorch.py `prompts(2, 4, 262144, 2)` prints these.
        assert_eq!(
            prompts(2, 4, 262_144, 2),
            [[2, 148_402, 158_422, 94_601], [2, 143_304, 108_159, 19_874]]
        );
    }

    #[test]
    fn splitmix64_matches_the_published_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (from the reference implementation).
        let mut r = SplitMix64(1234567);
        assert_eq!(r.next(), 6457827717110365317);
        assert_eq!(r.next(), 3203168211198807973);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
