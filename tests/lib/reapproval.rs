//! The scan refactor that re-approval is about: engines/gemma3_unrolled.eng (layers written
//! out) and engines/gemma3.eng (a `scan` over the layers) are the same model under the same
//! policy, so they give identical greedy tokens and share a policy_id, yet their source digests
//! differ, which is why a certificate for one does not admit the other.

use std::path::Path;
use std::sync::Arc;

use runner::job::generate::{Generator, Settings};
use runner::model::weights::Checkpoint;
use runner::restrict::policy::Policy;
use runner::restrict::{check, Checked};
use serde_json::Value as Json;

use crate::common::repo::{fixture_model, root};

const SIX_LAYER_FIXTURES: [&str; 3] = ["tiny-270m", "tiny-4b", "tiny-27b"];

fn checked(engine: &str) -> Checked {
    let source = std::fs::read_to_string(root().join(engine)).unwrap();
    let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
    check(&source, engine, &policy).unwrap_or_else(|e| panic!("{e}"))
}

fn generator(engine: &str, dir: &Path) -> Generator {
    let ck = Checkpoint::load(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    Generator::new(checked(engine), "main", Arc::new(ck)).unwrap_or_else(|e| panic!("{e}"))
}

fn prompts(dir: &Path) -> Vec<Vec<u32>> {
    let e: Json =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    e["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

#[test]
fn unrolled_and_scan_engines_give_identical_greedy_tokens() {
    let settings = Settings {
        max_new_tokens: 24,
        stop_ids: Vec::new(),
    };
    for name in SIX_LAYER_FIXTURES {
        let dir = fixture_model(name);
        let ps = prompts(&dir);
        assert!(!ps.is_empty());
        let scan = generator("engines/gemma3.eng", &dir);
        let unrolled = generator("engines/gemma3_unrolled.eng", &dir);
        // Alone and as one left-padded batch: the batch exercises padding and shared caches.
        for p in &ps {
            let a = scan
                .generate(std::slice::from_ref(p), &settings, |_| {})
                .unwrap();
            let b = unrolled
                .generate(std::slice::from_ref(p), &settings, |_| {})
                .unwrap();
            assert_eq!(a[0].tokens, b[0].tokens, "{name}");
            assert_eq!(a[0].tokens.len(), 24, "{name}");
        }
        let a = scan.generate(&ps, &settings, |_| {}).unwrap();
        let b = unrolled.generate(&ps, &settings, |_| {}).unwrap();
        let ta: Vec<_> = a.iter().map(|o| o.tokens.clone()).collect();
        let tb: Vec<_> = b.iter().map(|o| o.tokens.clone()).collect();
        assert_eq!(ta, tb, "{name} batch");
    }
}

#[test]
fn unrolled_and_scan_engines_share_policy_id_but_not_source_digest() {
    let scan = checked("engines/gemma3.eng");
    let unrolled = checked("engines/gemma3_unrolled.eng");
    assert_eq!(
        scan.report().policy.id_full,
        unrolled.report().policy.id_full
    );
    assert_ne!(scan.report().source_digest, unrolled.report().source_digest);
    assert_ne!(scan.report().view_digest, unrolled.report().view_digest);
    // The layer body stays private in both, and the built-ins used are the same.
    assert_eq!(scan.report().builtins_used, unrolled.report().builtins_used);
    assert!(!unrolled.report().private_ranges.is_empty());
}
