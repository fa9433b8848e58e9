//! The report: each batch size's medians as throughput and as fractions of the machine's
//! probed limits, rendered as a table or JSON.

use serde::Serialize;
use serde_json::{json, Value as Json};

use super::facts::ModelFacts;
use super::timing::{BatchRun, RssScope, Timing};
use super::{memory, probe};
use crate::restrict::profile::OpTime;

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
    /// With `--profile`: where [`BatchRun::profiled`]'s prefill spent its time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_profile: Option<PrefillProfile>,
    /// With `--profile`: where [`BatchRun::profiled`]'s decode steps spent their time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_profile: Option<DecodeProfile>,
}

/// Where the prefill of one extra run spent its time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillProfile {
    /// That run's prefill time, seconds.
    pub prefill_s: f64,
    /// Each engine operation, most time first.
    pub ops: Vec<OpTime>,
    /// Prefill time outside every operation (the interpreter, chunking, set-up), seconds.
    pub outside_ops_s: f64,
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

/// A stage's time outside every operation in `ops`: never below 0.
fn outside(stage_s: f64, ops: &[OpTime]) -> f64 {
    let in_ops: f64 = ops.iter().map(|o| o.seconds).sum();
    (stage_s - in_ops).max(0.0)
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
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
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
            prefill_profile: run.profiled.as_ref().map(|p| PrefillProfile {
                prefill_s: p.timing.prefill_s,
                ops: p.prefill_ops.clone(),
                outside_ops_s: outside(p.timing.prefill_s, &p.prefill_ops),
            }),
            decode_profile: run.profiled.as_ref().map(|p| DecodeProfile {
                decode_s: p.timing.decode_s,
                ops: p.ops.clone(),
                outside_ops_s: outside(p.timing.decode_s, &p.ops),
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
    /// The binary's allocator ([`crate::memory::heap::ALLOCATOR`]).
    pub allocator: &'static str,
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

pub(crate) fn fmt_num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// Right-aligned columns, two spaces apart, under `header`.
pub(crate) fn render_table(header: &[&str], rows: Vec<Vec<String>>) -> String {
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
            "machine    {}, isa {}, {} thread(s), allocator {}; load average {} at start, {} at \
             end\n",
            m.cpu,
            m.isa,
            m.threads,
            m.allocator,
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
            if let Some(p) = &r.prefill_profile {
                let heading = format!(
                    "prefill profile, batch {}: the same run's prefill of {} positions",
                    r.batch,
                    r.batch * self.prompt_len
                );
                let table = stage_table(&heading, p.prefill_s, &p.ops, p.outside_ops_s, "prefill");
                out.push_str(&table);
            }
            if let Some(p) = &r.decode_profile {
                let heading = format!(
                    "decode profile, batch {}: one extra run's {} decode steps",
                    r.batch, r.decode_steps
                );
                let table = stage_table(&heading, p.decode_s, &p.ops, p.outside_ops_s, "decode");
                out.push_str(&table);
            }
        }
        out
    }
}

/// A profiled stage (`stage`: its name in the share column, taking `stage_s` seconds) as
/// `heading` and one line per operation, then the time outside them.
fn stage_table(heading: &str, stage_s: f64, ops: &[OpTime], outside_s: f64, stage: &str) -> String {
    let share = |s: f64| fmt_num(100.0 * ratio(s, stage_s), 1);
    let ms = |s: f64| fmt_num(s * 1e3, 1);
    let mut rows: Vec<Vec<String>> = ops
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
        ms(outside_s),
        share(outside_s),
    ]);
    let share_header = format!("% of {stage}");
    format!(
        "\n{heading}, {} ms\n{}",
        ms(stage_s),
        render_table(&["operation", "calls", "ms", &share_header], rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
