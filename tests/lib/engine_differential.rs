//! Differential check of the two shipped engines: `engines/gemma3.eng` (the layer stack as a
//! `scan`) and `engines/gemma3_unrolled.eng` (the same six layers as written-out calls) give the
//! same greedy tokens on random six-layer configurations (widths, head counts, grouped-query
//! ratios, sliding windows, layer patterns, rope scaling) and random prompt batches. Besides
//! the two engines, each batch is checked against its sequences run one at a time, and its
//! prefill fed one column at a time (every column but the last run for the caches alone,
//! `Plan::run_for_effects`) against one step: the results must not depend on how the inputs were
//! batched or chunked.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use runner::job::generate::{Generator, Settings};
use runner::model::synthetic::SyntheticSpec;
use runner::model::weights::Checkpoint;
use runner::restrict::policy::Policy;
use runner::restrict::{check, Value};

use crate::common::repo::root;

fn generator(engine: &str, checkpoint: &Arc<Checkpoint>) -> Generator {
    let path = root().join("engines").join(engine);
    let source = std::fs::read_to_string(&path).unwrap();
    let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
    let checked = check(&source, engine, &policy).unwrap_or_else(|e| panic!("{e}"));
    Generator::new(checked, "main", checkpoint.clone()).unwrap_or_else(|e| panic!("{e}"))
}

fn tokens(generator: &Generator, prompts: &[Vec<u32>], max_new: usize) -> Vec<Vec<u32>> {
    let settings = Settings {
        max_new_tokens: max_new,
        stop_ids: Vec::new(),
    };
    generator
        .generate(prompts, &settings, |_| {})
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|g| g.tokens)
        .collect()
}

/// The first two steps' ids of a batch whose prefill goes `cols` columns at a time.
fn first_two(generator: &Generator, prompts: &[Vec<u32>], cols: usize) -> Vec<Vec<u32>> {
    let (tokens, positions, pads) = generator.left_pad(prompts).unwrap();
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let model = generator.fresh_model(prompts.len(), width + 2).unwrap();
    let ids = |v: Value| match v {
        Value::Ids(ids) => ids.to_vec(),
        other => panic!("main returned {}", other.kind()),
    };
    let first = generator
        .prefill_in_chunks(&model, tokens, positions, pads.clone(), cols)
        .map(ids)
        .unwrap_or_else(|e| panic!("{e}"));
    let next: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
    let second = generator
        .step(&model, first.clone(), next, pads)
        .map(ids)
        .unwrap_or_else(|e| panic!("{e}"));
    vec![first, second]
}

/// A six-layer configuration: every field the engines read from the config varies.
fn spec() -> impl Strategy<Value = SyntheticSpec> {
    (
        (1usize..=4, 1usize..=4),
        prop::sample::select(vec![4usize, 8, 16, 32]),
        prop::sample::select(vec![8usize, 16, 24, 48]),
        1usize..=3,
        (1usize..=12, 1usize..=7),
        prop::sample::select(vec![1.0f32, 2.0, 8.0]),
        prop::sample::select(vec![16.0f32, 64.0, 256.0]),
        prop::sample::select(vec![64usize, 200, 300]),
    )
        .prop_map(
            |((kv, group), head_dim, hidden, mlp, (window, pattern), rope, qscale, vocab)| {
                SyntheticSpec {
                    vocab_size: vocab,
                    hidden_size: hidden,
                    intermediate_size: hidden * mlp,
                    num_layers: 6,
                    num_heads: kv * group,
                    num_kv_heads: kv,
                    head_dim,
                    sliding_window: window,
                    sliding_window_pattern: pattern,
                    query_pre_attn_scalar: qscale,
                    rope_linear_factor: rope,
                }
            },
        )
}

/// One to four prompts of 1 to 20 ids (beyond most windows), ids 3.. so none is a pad.
fn prompts(vocab: usize) -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec(prop::collection::vec(3u32..vocab as u32, 1..=20), 1..=4)
}

fn case() -> impl Strategy<Value = (SyntheticSpec, u64, Vec<Vec<u32>>, usize)> {
    spec().prop_flat_map(|spec| {
        let vocab = spec.vocab_size;
        (Just(spec), any::<u64>(), prompts(vocab), 1usize..=6)
    })
}

fn written(spec: &SyntheticSpec, seed: u64, dir: &Path) -> Arc<Checkpoint> {
    spec.write(dir, seed).unwrap();
    Arc::new(Checkpoint::load(dir).unwrap_or_else(|e| panic!("{e}")))
}

proptest! {
    // Each case writes and loads a checkpoint and runs both engines on the batch and on each
    // sequence alone: about 30 ms a case in release.
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn scan_and_written_out_engines_agree_on_random_configurations(
        (spec, seed, prompts, max_new) in case()
    ) {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = written(&spec, seed, dir.path());
        let scan = generator("gemma3.eng", &checkpoint);
        let unrolled = generator("gemma3_unrolled.eng", &checkpoint);
        let batched = tokens(&scan, &prompts, max_new);
        prop_assert!(batched.iter().all(|t| t.len() == max_new));
        prop_assert_eq!(&tokens(&unrolled, &prompts, max_new), &batched, "{:?}", spec);
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
        for engine in [&scan, &unrolled] {
            let whole = first_two(engine, &prompts, width);
            prop_assert_eq!(&first_two(engine, &prompts, 1), &whole, "chunked: {:?}", spec);
        }
        for (prompt, expected) in prompts.iter().zip(&batched) {
            let alone = tokens(&scan, std::slice::from_ref(prompt), max_new);
            prop_assert_eq!(&alone[0], expected, "batch split changed the tokens: {:?}", spec);
        }
    }
}
