//! GGUF checkpoints: every block type decodes to gguf-py's values (tests/fixtures/gguf, made by
//! scripts/reference/make_gguf_fixtures.py), `linear` over blocks keeps those values' f32 math
//! on every instruction set, and the real Gemma 3 270M Q4_K_M file reproduces HF transformers'
//! greedy tokens (scripts/reference/gguf_parity.py) when it is cached. The tiny GGUF model runs
//! through every parity test with the safetensors fixtures (tests/fixtures/models/tiny-gguf).

use std::path::PathBuf;
use std::sync::Arc;

use runner::job::generate::{Generator, Settings};
use runner::kernels::{self, linear_on, linear_t, with_instruction_set, DType, Tensor, Weight};
use runner::model::gguf::{Gguf, Strings};
use runner::model::tokenizer::{cached_tokenizer_path, Tokenizer};
use runner::model::weights::Checkpoint;
use runner::restrict::check;
use runner::restrict::policy::Policy;
use serde_json::Value as Json;

use crate::common::repo::root;
use crate::parity::ids;

const REAL_270M: &str = "gemma-3-270m-q4_k_m.gguf";

/// Every tensor of tests/fixtures/gguf/blocks.gguf as a weight over the file's bytes, with the
/// f32 values gguf-py's `dequantize` gives for it.
fn blocks() -> Vec<(String, Weight, Vec<f32>)> {
    let dir = root().join("tests/fixtures/gguf");
    let file = std::fs::read(dir.join("blocks.gguf")).unwrap();
    let expected = std::fs::read(dir.join("blocks_expected.safetensors")).unwrap();
    let gguf = Gguf::parse(&dir.join("blocks.gguf"), &file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&expected).unwrap();
    let bytes: Arc<Vec<u8>> = Arc::new(file.clone());
    gguf.tensors
        .iter()
        .map(|t| {
            let w = Weight::new(t.dtype, t.shape(), bytes.clone(), t.bytes.clone()).unwrap();
            let want: Vec<f32> = st
                .tensor(&t.name)
                .unwrap()
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (t.name.clone(), w, want)
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_block_type_decodes_to_the_values_gguf_py_gives() {
    let mut seen = Vec::new();
    for (name, w, want) in blocks() {
        let mut got = vec![0.0f32; w.numel()];
        w.read_f32(0, &mut got);
        assert_eq!(bits(&got), bits(&want), "{name} ({})", w.dtype());
        seen.push(w.dtype());
    }
    seen.sort_by_key(|d| d.name());
    let mut all = DType::ALL.to_vec();
    all.sort_by_key(|d| d.name());
    assert_eq!(seen, all, "one tensor per supported type");
}

#[test]
fn linear_over_blocks_is_the_f32_math_on_gguf_py_values_on_every_path() {
    for (name, w, dense) in blocks() {
        let dense = Tensor::new(w.shape().to_vec(), dense).unwrap();
        let k = w.shape()[1];
        for m in [1, 5, 24] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3)
                .collect();
            let x = Tensor::new(vec![m, k], x).unwrap();
            let want = linear_t(&x, &dense).unwrap();
            for isa in kernels::simd::available() {
                let got = linear_on(isa, &x, &w).unwrap();
                assert_eq!(bits(got.data()), bits(want.data()), "{name} m={m} {isa:?}");
            }
        }
    }
}

/// The real 270M file from the cache `scripts/fetch_model.sh gemma3-270m` fills, if it is there.
fn real_270m() -> Option<PathBuf> {
    let cache = std::env::var_os("RUNNER_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/runner")))?;
    let path = cache.join("models").join(REAL_270M);
    if path.is_file() {
        return Some(path);
    }
    println!(
        "NOTICE: skipped: the real Gemma 3 270M ({}) is not cached; run scripts/fetch_model.sh gemma3-270m",
        path.display()
    );
    None
}

/// Tokens to compare: those before the reference's first near-tie (top-2 margin < 0.01), where
/// a last-bit difference in summation order may legitimately pick the other token.
fn up_to_near_tie(r: &Json) -> Vec<u32> {
    let tokens = ids(&r["tokens"]);
    match r["first_near_tie"].as_u64() {
        Some(t) => tokens[..t as usize].to_vec(),
        None => tokens,
    }
}

/// The GGUF file and its HF reference the parity test compares: `RUNNER_PARITY_GGUF` and
/// `RUNNER_PARITY_EXPECTED` when both are set (any file, its reference written by
/// `gguf_parity.py --any-model`), else the real 270M and the committed fixture.
fn parity_target() -> Option<(PathBuf, PathBuf)> {
    let chosen = (
        std::env::var_os("RUNNER_PARITY_GGUF"),
        std::env::var_os("RUNNER_PARITY_EXPECTED"),
    );
    if let (Some(file), Some(expected)) = chosen {
        println!(
            "NOTICE: parity of {} against {}",
            PathBuf::from(&file).display(),
            PathBuf::from(&expected).display()
        );
        return Some((file.into(), expected.into()));
    }
    let expected = root().join("tests/fixtures/gguf/gemma3-270m-q4_k_m.expected.json");
    real_270m().map(|path| (path, expected))
}

#[test]
fn the_real_270m_reproduces_hf_greedy_tokens_alone_and_in_a_left_padded_batch() {
    let Some((path, expected)) = parity_target() else {
        return;
    };
    let e: Json = serde_json::from_slice(&std::fs::read(expected).unwrap()).unwrap();
    let source = std::fs::read_to_string(root().join("engines/gemma3.eng")).unwrap();
    let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
    let checked = check(&source, "engines/gemma3.eng", &policy).unwrap();
    let g = Generator::new(checked, "main", Arc::new(Checkpoint::load(&path).unwrap())).unwrap();
    let prompts: Vec<Vec<u32>> = e["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    let n = ids(&e["single"][0]["tokens"]).len();
    assert!(n >= 32);
    let settings = Settings {
        max_new_tokens: n,
        stop_ids: Vec::new(),
    };
    // Every prompt alone and the batch on the best path; on the slower paths (whose results are
    // bit for bit the best path's: tests/lib/parity.rs and the kernel tests) the short prompts
    // alone, so that the portable path's software FMA does not take minutes.
    let mut paths = kernels::simd::available();
    let best = *paths.last().unwrap();
    if std::env::var_os("RUNNER_PARITY_GGUF").is_some() && paths.len() > 1 {
        // A file of another shape may be many times the 270M: the portable path's software
        // FMA would take hours over it, and its bits are the vector paths' anyway.
        paths.retain(|&i| i != kernels::simd::Isa::Portable);
    }
    for isa in paths {
        with_instruction_set(isa, || {
            for (i, p) in prompts.iter().enumerate() {
                if isa != best && p.len() > 32 {
                    continue;
                }
                let got = g
                    .generate(std::slice::from_ref(p), &settings, |_| {})
                    .unwrap();
                let want = up_to_near_tie(&e["single"][i]);
                assert_eq!(
                    got[0].tokens[..want.len()],
                    want,
                    "prompt {i} alone, {isa:?}"
                );
            }
            if isa != best {
                return;
            }
            let got = g.generate(&prompts, &settings, |_| {}).unwrap();
            for (i, seq) in got.iter().enumerate() {
                let want = up_to_near_tie(&e["batched"]["results"][i]);
                assert_eq!(
                    seq.tokens[..want.len()],
                    want,
                    "sequence {i} of the batch, {isa:?}"
                );
            }
        });
    }
    // The prompts' ids are the official tokenizer's, and the file's vocabulary is its.
    if let Some(tok) = cached_tokenizer_path().filter(|p| p.exists()) {
        let tok = Tokenizer::load(&tok).unwrap();
        let ck = g.checkpoint();
        assert_eq!(
            tok.vocabulary_mismatch(ck.vocabulary.as_ref().unwrap()),
            None
        );
        for p in e["prompts"].as_array().unwrap() {
            let mut want = vec![2];
            want.extend(tok.encode_plain(p["text"].as_str().unwrap()).unwrap());
            assert_eq!(ids(&p["ids"]), want);
        }
    }
}

/// A GGUF of Gemma 3 4B and up lists 262208 tokens: the official tokenizer's 262144 and
/// `<image_soft_token>`, then llama.cpp's `[PAD…]` rows. They agree with the tokenizer on every
/// id it has; a token that differs there is named.
#[test]
fn a_vocabulary_padded_past_the_tokenizer_agrees_with_it() {
    let tok = Tokenizer::load(&crate::common::repo::cached_tokenizer()).unwrap();
    let vocabulary = |change: Option<u32>| {
        let mut v = Strings::with_capacity(262_208);
        for id in 0..262_208u32 {
            let text = match tok.id_to_token(id) {
                _ if Some(id) == change => "something else".to_owned(),
                Some(t) => t,
                None => format!("[PAD{id}]"),
            };
            v.push(&text);
        }
        v
    };
    assert_eq!(tok.vocabulary_mismatch(&vocabulary(None)), None);
    // Converted from a checkpoint that does not list `<image_soft_token>`, llama.cpp pads its
    // id as well.
    let mut padded = Strings::with_capacity(262_208);
    for (id, t) in vocabulary(None).iter().enumerate() {
        padded.push(&if id == 262_144 {
            "[PAD262144]".to_owned()
        } else {
            t.to_owned()
        });
    }
    assert_eq!(tok.vocabulary_mismatch(&padded), None);
    // A padding row the model generates (it has weights, so greedy decoding may pick one)
    // decodes to no text rather than failing the job's answer.
    assert_eq!(
        tok.decode(&[9259, 262_150, 236764]).unwrap(),
        tok.decode(&[9259, 236764]).unwrap()
    );
    for id in [5, 262_143, 262_144] {
        let (at, want, got) = tok.vocabulary_mismatch(&vocabulary(Some(id))).unwrap();
        assert_eq!((at, want.as_str()), (id, "something else"));
        assert_eq!(Some(got), tok.id_to_token(id));
    }
}
