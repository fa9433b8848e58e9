//! The re-approval story end to end through the binary: two owners (threshold 2) approve the
//! unrolled engine; exec runs; the scan refactor is swapped in and exec refuses it (source
//! digest differs, policy_id does not); `runner review` says the policy is unchanged; both
//! owners sign a superseding certificate; exec runs with identical outputs; and the old
//! certificate is refused from then on as superseded.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(env.path("engines")).unwrap();
        std::fs::create_dir_all(env.path("keys")).unwrap();
        for (key, _) in [("alice", ()), ("bob", ()), ("runner", ())] {
            env.ok(&["keygen", "--out", &format!("keys/{key}.key")]);
        }
        env.write(
            "trust.toml",
            "required_signatures = 2\nowners = [\"keys/alice.key.pub\", \"keys/bob.key.pub\"]\nrevoked = []\n",
        );
        env.write(
            "inputs.jsonl",
            "{\"id\": \"q1\", \"tokens\": [2, 17, 99, 4]}\n{\"id\": \"q2\", \"tokens\": [2, 300]}\n",
        );
        env.install_engine("gemma3_unrolled.eng");
        env
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    /// The job always runs `engines/gemma3.eng`: swapping the engine is replacing that file.
    fn install_engine(&self, shipped: &str) {
        std::fs::copy(
            root().join("engines").join(shipped),
            self.path("engines/gemma3.eng"),
        )
        .unwrap();
    }

    fn job(&self, out: &str) -> String {
        let name = format!("job-{out}.toml");
        let model = root().join("tests/fixtures/models/tiny-270m");
        self.write(
            &name,
            &format!(
                "engine = \"engines/gemma3.eng\"\nmodel = \"{}\"\ninputs = \"inputs.jsonl\"\n\
                 output_dir = \"{out}\"\nrunner_key = \"keys/runner.key\"\n\n[generation]\n\
                 batch_size = 2\nmax_new_tokens = 8\noutputs = [\"tokens\"]\n",
                model.display()
            ),
        );
        name
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(args)
            .current_dir(self.dir.path())
            .env("RUNNER_STATE_DIR", self.path("state"))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        common::succeeded(args, self.run(args))
    }

    fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn approve(&self, out: &str, extra: &[&str]) {
        let model = root().join("tests/fixtures/models/tiny-270m");
        let model = model.to_str().unwrap();
        let policy = root().join("policies/gemma3.json");
        let mut args = vec![
            "approve",
            "--engine",
            "engines/gemma3.eng",
            "--policy",
            policy.to_str().unwrap(),
            "--model",
            model,
            "--key",
            "keys/alice.key",
            "--out",
            out,
            "--expires",
            "2036-01-01T00:00:00Z",
        ];
        args.extend_from_slice(extra);
        self.ok(&args);
        self.ok(&["cosign", out, "--key", "keys/bob.key"]);
    }

    fn tokens(&self, out: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.path(out).join("outputs.jsonl")).unwrap();
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["tokens"].clone()
            })
            .collect()
    }
}

fn digest_of(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap())
        .to_hex()
        .to_string()
}

#[test]
fn scan_refactor_is_reviewed_reapproved_and_supersedes_the_old_certificate() {
    let env = Env::new();
    let unrolled_digest = digest_of(&env.path("engines/gemma3.eng"));

    // Approved by both owners; exec runs.
    env.approve("cert-unrolled.json", &[]);
    let job = env.job("out1");
    env.ok(&["exec", "--quiet", "--cert", "cert-unrolled.json", &job]);
    let first = env.tokens("out1");
    assert_eq!(first.len(), 2);

    // The scan refactor: same policy, new bytes. exec refuses, naming both digests and review.
    env.install_engine("gemma3.eng");
    let scan_digest = digest_of(&env.path("engines/gemma3.eng"));
    assert_ne!(scan_digest, unrolled_digest);
    let job = env.job("out2");
    let err = env.fails(
        &["exec", "--quiet", "--cert", "cert-unrolled.json", &job],
        3,
    );
    assert!(
        err.contains(&unrolled_digest) && err.contains(&scan_digest),
        "{err}"
    );
    assert!(err.contains("runner review"), "{err}");
    assert!(!env.path("out2").exists());

    // Review: policy unchanged, source changed, nothing else.
    let old_engine = root().join("engines/gemma3_unrolled.eng");
    let review = env.ok(&[
        "review",
        "--cert",
        "cert-unrolled.json",
        "--engine",
        "engines/gemma3.eng",
        "--old-engine",
        old_engine.to_str().unwrap(),
    ]);
    assert!(
        review.contains("policy unchanged; source changed; re-approval needed"),
        "{review}"
    );
    assert!(review.contains("built-ins added   none"), "{review}");
    assert!(review.contains("+    let h = scan(f"), "{review}");
    // Private source never appears: the layer body's names are renamed in the view.
    assert!(!review.contains("decoder_layer"), "{review}");
    assert!(!review.contains("gate_proj"), "{review}");

    // Both owners sign the superseding certificate; exec runs with the same outputs.
    env.approve("cert-scan.json", &["--supersedes", "cert-unrolled.json"]);
    env.ok(&["exec", "--quiet", "--cert", "cert-scan.json", &job]);
    assert_eq!(env.tokens("out2"), first);
    let registry = std::fs::read_to_string(env.path("state/superseded.jsonl")).unwrap();
    assert_eq!(registry.lines().count(), 1);

    // The old certificate is refused from now on, even with its own engine back in place.
    env.install_engine("gemma3_unrolled.eng");
    let job = env.job("out3");
    let err = env.fails(
        &["exec", "--quiet", "--cert", "cert-unrolled.json", &job],
        3,
    );
    assert!(err.contains("superseded by certificate"), "{err}");
    assert!(!env.path("out3").exists());
}

#[test]
fn rejects_superseding_certificate_without_the_threshold() {
    let env = Env::new();
    env.approve("cert-unrolled.json", &[]);
    env.install_engine("gemma3.eng");
    let policy = root().join("policies/gemma3.json");
    let model = root().join("tests/fixtures/models/tiny-270m");
    // Only alice signs the replacement: exec must refuse it and must not retire the old one.
    env.ok(&[
        "approve",
        "--engine",
        "engines/gemma3.eng",
        "--policy",
        policy.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--key",
        "keys/alice.key",
        "--out",
        "cert-scan.json",
        "--expires",
        "2036-01-01T00:00:00Z",
        "--supersedes",
        "cert-unrolled.json",
    ]);
    let job = env.job("out1");
    env.fails(&["exec", "--quiet", "--cert", "cert-scan.json", &job], 3);
    assert!(!env.path("out1").exists());
    assert!(!env.path("state/superseded.jsonl").exists());
    env.install_engine("gemma3_unrolled.eng");
    env.ok(&["exec", "--quiet", "--cert", "cert-unrolled.json", &job]);
}
