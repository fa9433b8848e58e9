//! `runner bench` end to end on a tiny synthetic model: the JSON report has every field for
//! every batch size (timings are not asserted: they depend on the machine), the table prints,
//! and bad input is refused with the documented exit code.

use std::path::{Path, PathBuf};
use std::process::Output;

use runner::model::synthetic::SyntheticSpec;
use serde_json::Value;

use crate::common::repo::root;
use crate::common::{Dir, TestCommand};

fn tiny_model(dir: &Dir) -> PathBuf {
    let model = dir.path("tiny");
    SyntheticSpec::tiny()
        .write(&model, 7)
        .unwrap_or_else(|e| panic!("{e}"));
    model
}

/// `runner bench` of `model` with the shipped engine and policy, a short prompt and probe, and
/// `extra` flags.
fn bench_command(model: &Path, extra: &[&str]) -> TestCommand {
    let mut cmd = TestCommand::new();
    cmd.arg("bench")
        .arg("--model")
        .arg(model)
        .arg("--engine")
        .arg(root().join("engines/gemma3.eng"))
        .arg("--policy")
        .arg(root().join("policies/gemma3.json"))
        .args(["--prompt-len", "4", "--new-tokens", "3", "--probe-mib", "8"])
        .args(extra);
    cmd
}

fn bench(model: &Path, extra: &[&str]) -> Output {
    bench_command(model, extra).output()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

#[test]
fn json_report_has_every_field_for_each_batch_size() {
    let dir = Dir::new();
    let model = tiny_model(&dir);
    let out = bench(&model, &["--batch", "2,1", "--threads", "2", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        out.stderr.is_empty(),
        "quiet without --verbose: {}",
        text(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));

    assert_eq!(report["machine"]["threads"], 2);
    assert!(report["machine"]["isa"].is_string());
    assert!(report["machine"]["cpu"].is_string());
    assert!(number(&report["probes"], "read_bandwidth_bytes_per_s") > 0.0);
    assert!(number(&report["probes"], "linear_flops_per_s") > 0.0);
    // No matrix kernel can beat the machine's multiply-add peak.
    let fma = number(&report["probes"], "fma_flops_per_s");
    assert!(
        fma >= number(&report["probes"], "linear_flops_per_s") * 0.5,
        "{fma}"
    );
    assert_eq!(report["prompt_len"], 4);
    assert_eq!(report["new_tokens"], 3);
    assert_eq!(report["repeat"], 1);
    let facts = &report["model"];
    assert_eq!(facts["layers"], 6);
    assert_eq!(facts["vocab_size"], 256);
    assert_eq!(facts["weight_dtype"], "bf16");
    // Tiny spec: 6 layers of q,k,v,o (4*16*64, 16*64, 16*64, 64*4*16) + gate, up, down
    // (3 * 128*64); the tied head is the 256x64 embedding.
    assert_eq!(
        facts["layer_linear_params"],
        6 * (4096 + 1024 + 1024 + 4096 + 3 * 8192)
    );
    assert_eq!(facts["head_params"], 256 * 64);

    let rows = report["batches"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    let batches: Vec<u64> = rows.iter().filter_map(|r| r["batch"].as_u64()).collect();
    assert_eq!(batches, [1, 2], "rows in increasing batch order");
    for row in rows {
        for key in [
            "prefill_s",
            "prefill_tokens_per_s",
            "decode_s",
            "decode_tokens_per_s",
            "ms_per_decode_step",
            "decode_bandwidth_fraction",
            "decode_gflops",
            "decode_peak_fraction",
            "prefill_gflops",
            "prefill_peak_fraction",
        ] {
            assert!(number(row, key) > 0.0, "{key} in {row}");
        }
        assert_eq!(row["decode_steps"], 2);
        assert_eq!(row["runs"].as_array().map(Vec::len), Some(1));
        assert_eq!(row["rss_scope"], "per_batch");
        assert!(row.get("decode_profile").is_none(), "only with --profile");
        let b = row["batch"].as_u64().unwrap_or(0);
        // f32 KV: 6 layers x 2 (k, v) x batch x 1 kv head x 16 x 4 bytes x 7 columns (the
        // window of 8 is longer than prompt + new).
        assert_eq!(row["kv_cache_bytes"].as_u64(), Some(6 * 2 * b * 16 * 4 * 7));
        let weights = facts["weight_bytes"].as_u64().unwrap_or(0);
        assert_eq!(
            row["budget_bytes"].as_u64(),
            Some(weights + 6 * 2 * b * 16 * 4 * 7 + (100 << 20))
        );
        if cfg!(target_os = "linux") {
            assert!(row["peak_rss_bytes"].as_u64().is_some_and(|p| p > 0));
            assert!(row["memory_ok"].is_boolean());
        }
    }
}

#[test]
fn in_process_table_says_the_peak_is_process_wide() {
    let dir = Dir::new();
    let model = tiny_model(&dir);
    let out = bench(&model, &["--batch", "1,2", "--in-process", "--repeat", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("process-wide and monotonic"), "{stdout}");
    assert!(stdout.contains("medians of 2 run(s)"), "{stdout}");
    let header = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("batch"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        header.contains("decode tok/s") && header.contains("peak RSS MiB"),
        "{header}"
    );
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("batch"))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(rows[0].trim_start().starts_with("1 "), "{stdout}");
    assert!(rows[1].trim_start().starts_with("2 "), "{stdout}");
}

#[test]
fn scaling_times_every_thread_count_in_turn_and_compares_their_tokens() {
    let dir = Dir::new();
    let model = tiny_model(&dir);
    let out = bench(
        &model,
        &[
            "--batch",
            "3,1",
            "--scaling",
            "1,2",
            "--repeat",
            "2",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert_eq!(report["repeat"], 2);
    let rows = report["rows"].as_array().expect("rows");
    let shape: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r["batch"].as_u64().unwrap(), r["threads"].as_u64().unwrap()))
        .collect();
    assert_eq!(shape, [(1, 1), (1, 2), (3, 1), (3, 2)]);
    for r in rows {
        assert_eq!(r["runs"].as_array().map(Vec::len), Some(2), "{r}");
        assert_eq!(r["same_tokens"], true, "thread counts disagree: {r}");
        assert!(number(r, "decode_tokens_per_s") > 0.0, "{r}");
        assert!(number(r, "decode_speedup") > 0.0, "{r}");
    }
    // Speed-ups are relative to the first count.
    assert_eq!(number(&rows[0], "decode_speedup"), 1.0);
    assert_eq!(number(&rows[2], "prefill_speedup"), 1.0);

    let table = bench(&model, &["--batch", "2", "--scaling", "2,1"]);
    assert_eq!(table.status.code(), Some(0), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(
        table.starts_with("thread scaling: prompt 4, 3 new tokens"),
        "{table}"
    );
    assert!(table.contains("decode speed-up"), "{table}");
    assert_eq!(table.matches("same").count(), 2, "{table}");
}

/// The calls a profile (`prefill_profile` or `decode_profile`) counted of operation `op`.
fn calls_of(profile: &Value, op: &str) -> u64 {
    profile["ops"]
        .as_array()
        .and_then(|ops| ops.iter().find(|o| o["op"] == op))
        .and_then(|o| o["calls"].as_u64())
        .unwrap_or_else(|| panic!("no {op} in {profile}"))
}

#[test]
fn profile_counts_every_engine_operation_of_the_prefill_and_the_decode_steps() {
    let dir = Dir::new();
    let model = tiny_model(&dir);
    let out = bench(&model, &["--batch", "2", "--profile", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let row = &report["batches"][0];
    // The profiled run is an extra one: the medians still come from --repeat runs.
    assert_eq!(row["runs"].as_array().map(Vec::len), Some(1), "{row}");
    let profile = &row["decode_profile"];
    let ops = profile["ops"].as_array().unwrap_or_else(|| panic!("{row}"));
    let calls = |op: &str| calls_of(profile, op);
    // 2 decode steps of the tiny spec's 6 layers: q, k, v, o, gate, up, down per layer; one
    // attention and six norms per layer plus the final norm; the head fused with argmax.
    assert_eq!(calls("linear"), 2 * 6 * 7);
    assert_eq!(calls("attention"), 2 * 6);
    assert_eq!(calls("rms_norm"), 2 * (6 * 6 + 1));
    assert_eq!(calls("linear+argmax"), 2);
    assert!(ops.iter().all(|o| o["op"] != "argmax"), "{profile}");
    let seconds: Vec<f64> = ops.iter().map(|o| number(o, "seconds")).collect();
    assert!(
        seconds.windows(2).all(|w| w[0] >= w[1]),
        "most time first: {profile}"
    );
    let in_ops: f64 = seconds.iter().sum();
    let decode_s = number(profile, "decode_s");
    assert!(in_ops > 0.0 && in_ops <= decode_s, "{profile}");
    let outside = number(profile, "outside_ops_s");
    assert!((in_ops + outside - decode_s).abs() < 1e-6, "{profile}");

    // The same run's prefill, apart: one step over the whole prompt, its head read once.
    let prefill = &row["prefill_profile"];
    let ops = prefill["ops"].as_array().unwrap_or_else(|| panic!("{row}"));
    let calls = |op: &str| calls_of(prefill, op);
    assert_eq!(calls("linear"), 6 * 7);
    assert_eq!(calls("attention"), 6);
    assert_eq!(calls("linear+argmax"), 1);
    let in_ops: f64 = ops.iter().map(|o| number(o, "seconds")).sum();
    let prefill_s = number(prefill, "prefill_s");
    assert!(in_ops > 0.0 && in_ops <= prefill_s, "{prefill}");
    let outside = number(prefill, "outside_ops_s");
    assert!((in_ops + outside - prefill_s).abs() < 1e-6, "{prefill}");

    let table = bench(&model, &["--batch", "1", "--profile"]);
    assert_eq!(table.status.code(), Some(0), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(
        table.contains("decode profile, batch 1: one extra run's 2 decode steps"),
        "{table}"
    );
    assert!(
        table.contains("prefill profile, batch 1: the same run's prefill of 4 positions"),
        "{table}"
    );
    assert!(table.contains("% of prefill"), "{table}");
    assert!(table.contains("linear+argmax") && table.contains("(outside operations)"));

    let both = bench(&model, &["--profile", "--scaling", "1,2"]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
    assert!(
        text(&both.stderr).contains("--scaling"),
        "{}",
        text(&both.stderr)
    );
}

#[test]
fn rejects_a_batch_size_of_zero() {
    let dir = Dir::new();
    let model = tiny_model(&dir);
    bench_command(&model, &["--batch", "1,0"]).fails(2, "--batch");
}

#[test]
fn rejects_an_engine_the_policy_refuses() {
    let dir = Dir::new();
    let model = tiny_model(&dir);
    let out = TestCommand::new()
        .arg("bench")
        .arg("--model")
        .arg(&model)
        .arg("--engine")
        .arg(root().join("engines/gemma3.eng"))
        .arg("--policy")
        .arg(root().join("tests/engines/narrow-policy.json"))
        .args(["--batch", "1", "--prompt-len", "4", "--new-tokens", "3"])
        .output();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
}
