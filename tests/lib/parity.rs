//! Parity with HF transformers on the reference fixtures (tests/fixtures/models, made by
//! scripts/reference/make_fixtures.py): `engines/gemma3.eng`, verified against
//! `policies/gemma3.json` and run by the runner, reproduces HF's f32 greedy tokens exactly and
//! its logits to 1e-3, for each prompt alone and for all prompts as one left-padded batch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runner::job::generate::{Control, Finish, Generator, Settings};
use runner::job::sampling::Sampler;
use runner::kernels::{self, with_instruction_set, Isa};
use runner::model::weights::Checkpoint;
use runner::restrict::policy::Policy;
use runner::restrict::{check, Value};
use serde_json::Value as Json;

use crate::common::repo::root;

const LOGIT_TOLERANCE: f32 = 1e-3;

fn fixtures() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("tests/fixtures/models"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 5, "{dirs:?}");
    dirs
}

fn generator(dir: &Path, entry: &str) -> Generator {
    let source = std::fs::read_to_string(root().join("engines/gemma3.eng")).unwrap();
    let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
    let checked = check(&source, "engines/gemma3.eng", &policy).unwrap_or_else(|e| panic!("{e}"));
    let ck = Checkpoint::load(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    Generator::new(checked, entry, Arc::new(ck)).unwrap_or_else(|e| panic!("{e}"))
}

fn expected(dir: &Path) -> Json {
    serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap()
}

pub(crate) fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn prompts(e: &Json) -> Vec<Vec<u32>> {
    e["prompts"].as_array().unwrap().iter().map(ids).collect()
}

/// Every kernel path this CPU can run, from the portable one up to the best detected.
/// (`RUNNER_ISA=portable` or `avx2` limits a whole process; this covers every path in one run.)
fn kernel_paths() -> Vec<Isa> {
    kernels::simd::available()
}

fn no_stop(max_new_tokens: usize) -> Settings {
    Settings {
        max_new_tokens,
        stop_ids: Vec::new(),
    }
}

#[test]
fn greedy_tokens_equal_hf_for_each_prompt_alone() {
    for isa in kernel_paths() {
        with_instruction_set(isa, || {
            for dir in fixtures() {
                let e = expected(&dir);
                let g = generator(&dir, "main");
                for (i, prompt) in prompts(&e).iter().enumerate() {
                    let want = ids(&e["single"][i]["tokens"]);
                    assert!(want.len() >= 32);
                    let got = g
                        .generate(std::slice::from_ref(prompt), &no_stop(want.len()), |_| {})
                        .unwrap();
                    assert_eq!(got[0].tokens, want, "{} prompt {i}", dir.display());
                }
            }
        });
    }
}

#[test]
fn greedy_tokens_equal_hf_for_a_left_padded_batch() {
    for isa in kernel_paths() {
        with_instruction_set(isa, || {
            for dir in fixtures() {
                let e = expected(&dir);
                let g = generator(&dir, "main");
                let p = prompts(&e);
                let n = ids(&e["batched"]["results"][0]["tokens"]).len();
                let got = g.generate(&p, &no_stop(n), |_| {}).unwrap();
                for (i, seq) in got.iter().enumerate() {
                    let want = ids(&e["batched"]["results"][i]["tokens"]);
                    assert_eq!(seq.tokens, want, "{} sequence {i}", dir.display());
                    assert_eq!(seq.finish, Finish::Length);
                }
            }
        });
    }
}

#[test]
fn greedy_through_the_logits_head_equals_hf_when_a_batch_samples() {
    // A batch with a sampled sequence runs `logits` and picks every token in the runner: the
    // greedy rows (no sampler, or top-k 1, which can only draw the maximum) must still be HF's.
    for isa in kernel_paths() {
        with_instruction_set(isa, || {
            for dir in fixtures() {
                let e = expected(&dir);
                let source = std::fs::read_to_string(root().join("engines/gemma3.eng")).unwrap();
                let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
                let checked = check(&source, "engines/gemma3.eng", &policy).unwrap();
                let g = generator(&dir, "main").with_sampling(checked).unwrap();
                let p = prompts(&e);
                let n = ids(&e["batched"]["results"][0]["tokens"]).len();
                let controls: Vec<Control<'_>> = (0..p.len())
                    .map(|i| Control {
                        max_new: n,
                        sampler: (i % 2 == 0).then(|| Sampler::new(0.7, 1, 1.0, i as u64).unwrap()),
                        stop: None,
                    })
                    .collect();
                let got = g.generate_with(&p, &no_stop(n), &controls, |_| {}).unwrap();
                for (i, seq) in got.iter().enumerate() {
                    let want = ids(&e["batched"]["results"][i]["tokens"]);
                    assert_eq!(
                        seq.tokens,
                        want,
                        "{} sequence {i} on {isa:?}",
                        dir.display()
                    );
                }
            }
        });
    }
}

#[test]
fn stop_tokens_end_one_sequence_while_the_batch_continues() {
    for dir in fixtures() {
        let e = expected(&dir);
        let g = generator(&dir, "main");
        let p = prompts(&e);
        let n = ids(&e["batched"]["results"][0]["tokens"]).len();
        let got = g
            .generate(
                &p,
                &Settings {
                    max_new_tokens: n,
                    stop_ids: vec![1, 106],
                },
                |_| {},
            )
            .unwrap();
        for (i, seq) in got.iter().enumerate() {
            let r = &e["batched"]["results"][i];
            let want = ids(&r["tokens"]);
            match r["first_stop_index"].as_u64() {
                Some(stop) => {
                    assert_eq!(
                        seq.tokens,
                        want[..=stop as usize],
                        "{} seq {i}",
                        dir.display()
                    );
                    assert_eq!(seq.finish, Finish::Stop);
                }
                None => {
                    assert_eq!(seq.tokens, want);
                    assert_eq!(seq.finish, Finish::Length);
                }
            }
        }
    }
}

/// Teacher-forced logits of the first steps (prefill, then HF's own greedy tokens), each prompt
/// alone; prints the largest difference per fixture.
#[test]
fn logits_match_hf_within_tolerance() {
    for isa in kernel_paths() {
        with_instruction_set(isa, || {
            for dir in fixtures() {
                let e = expected(&dir);
                let g = generator(&dir, "logits");
                let bytes = std::fs::read(dir.join("expected_logits.safetensors")).unwrap();
                let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
                let mut worst = 0f32;
                for (i, prompt) in prompts(&e).iter().enumerate() {
                    let view = st.tensor(&format!("single.{i}")).unwrap();
                    let want: Vec<f32> = view
                        .data()
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    let (steps, vocab) = (view.shape()[0], view.shape()[1]);
                    let forced = ids(&e["single"][i]["tokens"]);
                    let model = g.fresh_model(1, prompt.len() + steps).unwrap();
                    let mut feed = prompt.clone();
                    let mut pos: Vec<u32> = (0..prompt.len() as u32).collect();
                    for s in 0..steps {
                        let out = g.step(&model, feed, pos.clone(), vec![0]).unwrap();
                        let Value::Tensor(t) = out else {
                            panic!("logits entry returned {}", out.kind())
                        };
                        assert_eq!(t.shape(), &[1, vocab]);
                        for (a, b) in t.data().iter().zip(&want[s * vocab..(s + 1) * vocab]) {
                            worst = worst.max((a - b).abs());
                        }
                        feed = vec![forced[s]];
                        pos = vec![prompt.len() as u32 + s as u32];
                    }
                }
                println!(
                    "{} ({isa:?}): max |logit - hf| = {worst:.3e}",
                    dir.display()
                );
                assert!(worst < LOGIT_TOLERANCE, "{}: {worst}", dir.display());
            }
        });
    }
}

/// The same teacher-forced steps with all prompts as one left-padded batch.
#[test]
fn batched_logits_match_hf_within_tolerance() {
    for isa in kernel_paths() {
        with_instruction_set(isa, || {
            for dir in fixtures() {
                let e = expected(&dir);
                let g = generator(&dir, "logits");
                let bytes = std::fs::read(dir.join("expected_logits.safetensors")).unwrap();
                let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
                let p = prompts(&e);
                let width = p.iter().map(Vec::len).max().unwrap();
                let batch = p.len();
                let want: Vec<Vec<f32>> = (0..batch)
                    .map(|i| {
                        let view = st.tensor(&format!("batched.{i}")).unwrap();
                        view.data()
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect()
                    })
                    .collect();
                let steps = st.tensor("batched.0").unwrap().shape()[0];
                let vocab = e["model"]["vocab_size"].as_u64().unwrap() as usize;
                let model = g.fresh_model(batch, width + steps).unwrap();
                let pads: Vec<u32> = p.iter().map(|q| (width - q.len()) as u32).collect();
                let mut feed: Vec<u32> = Vec::new();
                let mut pos: Vec<u32> = Vec::new();
                for q in &p {
                    let pad = width - q.len();
                    feed.extend(std::iter::repeat_n(0, pad).chain(q.iter().copied()));
                    pos.extend(std::iter::repeat_n(0, pad).chain(0..q.len() as u32));
                }
                let mut worst = 0f32;
                for s in 0..steps {
                    let out = g.step(&model, feed, pos, pads.clone()).unwrap();
                    let Value::Tensor(t) = out else {
                        panic!("{}", out.kind())
                    };
                    for (b, row) in t.data().chunks_exact(vocab).enumerate() {
                        for (a, w) in row.iter().zip(&want[b][s * vocab..(s + 1) * vocab]) {
                            worst = worst.max((a - w).abs());
                        }
                    }
                    feed = (0..batch)
                        .map(|b| ids(&e["batched"]["results"][b]["tokens"])[s])
                        .collect();
                    pos = p.iter().map(|q| (q.len() + s) as u32).collect();
                }
                println!(
                    "{} (batched, {isa:?}): max |logit - hf| = {worst:.3e}",
                    dir.display()
                );
                assert!(worst < LOGIT_TOLERANCE, "{}: {worst}", dir.display());
            }
        });
    }
}

/// Greedy tokens and logits do not depend on the number of kernel threads.
#[test]
fn results_are_identical_for_any_thread_count() {
    let dir = &fixtures()[0];
    let e = expected(dir);
    let p = prompts(&e);
    let run = |threads: usize| {
        runner::kernels::with_threads(threads, || {
            let g = generator(dir, "logits");
            let model = g.fresh_model(1, 64).unwrap();
            let Value::Tensor(t) = g
                .step(
                    &model,
                    p[2].clone(),
                    (0..p[2].len() as u32).collect(),
                    vec![0],
                )
                .unwrap()
            else {
                panic!()
            };
            let tokens = generator(dir, "main")
                .generate(&p, &no_stop(40), |_| {})
                .unwrap();
            (t.data().to_vec(), tokens)
        })
    };
    let (l1, t1) = run(1);
    for n in [2, 3] {
        let (ln, tn) = run(n);
        assert_eq!(t1, tn, "{n} threads");
        assert!(
            l1.iter().zip(&ln).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{n} threads"
        );
    }
}

/// A prefill fed a few columns at a time (what `prefill_step` does for big batches) gives the
/// same ids, and leaves the same caches, as one step over the whole left-padded batch.
#[test]
fn chunked_prefill_equals_one_step() {
    for dir in fixtures() {
        let e = expected(&dir);
        let g = generator(&dir, "main");
        let p = prompts(&e);
        let width = p.iter().map(Vec::len).max().unwrap();
        let batch = p.len();
        let (tokens, positions, pads) = g.left_pad(&p).unwrap();
        let run = |cols: usize| -> Vec<Value> {
            let model = g.fresh_model(batch, width + 2).unwrap();
            let first = g
                .prefill_in_chunks(
                    &model,
                    tokens.clone(),
                    positions.clone(),
                    pads.clone(),
                    cols,
                )
                .unwrap();
            let Value::Ids(ids) = &first else {
                panic!("main returned {}", first.kind())
            };
            let pos: Vec<u32> = p.iter().map(|q| q.len() as u32).collect();
            let second = g.step(&model, ids.to_vec(), pos, pads.clone()).unwrap();
            vec![first, second]
        };
        let whole = run(width);
        for cols in [1, 2, 5] {
            let chunked = run(cols);
            for (a, b) in whole.iter().zip(&chunked) {
                match (a, b) {
                    (Value::Ids(x), Value::Ids(y)) => {
                        assert_eq!(x, y, "{} cols {cols}", dir.display())
                    }
                    _ => panic!("not ids"),
                }
            }
        }
    }
}
