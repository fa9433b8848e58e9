//! `runner verify` end to end, through the real binary: a receipt made by the library for a
//! certificate approved with the binary, verified untouched, and every tampering refused with
//! its own message and exit code.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use runner::model::tokenizer::Template;
use runner::primitives::canonical::to_canonical;
use runner::primitives::digest::Digest;
use runner::primitives::dsse::Envelope;
use runner::primitives::keys::SecretKey;
use runner::primitives::time::Timestamp;
use runner::restrict::policy::OutputKind;
use runner::trust::certificate::Certificate;
use runner::trust::generation::Generation;
use runner::trust::receipt::{
    sign_receipt, FinishReasons, RunCounts, RunFacts, RunnerIdentity, RECEIPT_PAYLOAD_TYPE,
};

const OUTPUTS: &[u8] = b"{\"id\":\"q1\",\"text\":\"Paris\",\"tokens\":[12,1]}\n";

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    /// Owner and runner keys, a certificate, and out/ holding outputs.jsonl and receipt.json.
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let env = Env { dir };
        fs::create_dir(env.path("model")).unwrap();
        fs::create_dir(env.path("keys")).unwrap();
        fs::create_dir(env.path("out")).unwrap();
        env.write("model/config.json", br#"{"hidden_size": 640}"#);
        env.write("model/model.safetensors", &[7u8; 4096]);
        env.write("gemma3.eng", include_bytes!("../engines/gemma3.eng"));
        let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/gemma3.json");
        fs::copy(policy, env.path("gemma3.json")).unwrap();
        for k in ["owner", "runner", "other-runner"] {
            env.ok(&["keygen", "--out", &format!("keys/{k}.key")]);
        }
        env.approve("cert.json", &[]);
        env.write("out/outputs.jsonl", OUTPUTS);
        let receipt = sign_receipt(
            &env.facts(),
            &[("outputs.jsonl", OUTPUTS)],
            &env.key("runner"),
        )
        .unwrap();
        env.write("out/receipt.json", &receipt);
        env
    }

    fn approve(&self, out: &str, extra: &[&str]) {
        let mut args = vec![
            "approve",
            "--engine",
            "gemma3.eng",
            "--policy",
            "gemma3.json",
            "--model",
            "model",
            "--key",
            "keys/owner.key",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        self.ok(&args);
    }

    fn facts(&self) -> RunFacts {
        let cert = Certificate::load(&self.path("cert.json")).unwrap();
        let p = cert.payload();
        RunFacts {
            certificate_digest: cert.digest(),
            engine_digest: p.engine.source_digest,
            policy_id: p.policy_id,
            model_digest: p.model_digest,
            job_digest: Digest::of(b"job.toml bytes"),
            inputs_digest: Digest::of(b"inputs bytes"),
            generation: Generation {
                batch_size: 4,
                max_new_tokens: 16,
                template: Template::Chat,
                outputs: vec![OutputKind::Text, OutputKind::Tokens],
            },
            runner: RunnerIdentity {
                version: "0.1.0".into(),
                executable_digest: Digest::of(b"runner binary"),
            },
            started_at: Timestamp::parse_canonical("2026-11-02T10:00:00Z").unwrap(),
            finished_at: Timestamp::parse_canonical("2026-11-02T10:00:05Z").unwrap(),
            counts: RunCounts {
                inputs: 1,
                generated_tokens: 2,
                finish_reasons: FinishReasons { stop: 1, length: 0 },
            },
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        fs::write(self.path(name), bytes).unwrap();
    }

    fn key(&self, name: &str) -> SecretKey {
        SecretKey::load(&self.path(&format!("keys/{name}.key"))).unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        common::succeeded(args, self.run(args))
    }

    /// Run, expect exit `code`, check stderr mentions `needle` and stdout is empty.
    fn fails(&self, args: &[&str], code: i32, needle: &str) -> String {
        common::failed_with(args, self.run(args), code, needle)
    }

    /// A receipt whose Statement is `payload`, signed by the runner key, written to out/.
    fn write_signed_statement(&self, payload: &[u8]) {
        let mut env = Envelope::new(RECEIPT_PAYLOAD_TYPE, payload.to_vec());
        env.sign(&self.key("runner")).unwrap();
        self.write("out/receipt.json", &env.to_bytes());
    }

    fn statement(&self) -> serde_json::Value {
        let env = Envelope::parse(&fs::read(self.path("out/receipt.json")).unwrap()).unwrap();
        serde_json::from_slice(&env.payload).unwrap()
    }
}

const VERIFY: &[&str] = &[
    "verify",
    "out/receipt.json",
    "--cert",
    "cert.json",
    "--runner-key",
    "keys/runner.key.pub",
];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = VERIFY.to_vec();
    args.extend_from_slice(extra);
    args
}

#[test]
fn verifies_an_untouched_receipt_and_prints_what_it_binds() {
    let env = Env::new();
    let out = env.ok(VERIFY);
    let cert = Certificate::load(&env.path("cert.json")).unwrap();
    assert!(out.contains("verified"), "{out}");
    assert!(out.contains(&cert.digest().to_hex()), "{out}");
    assert!(out.contains(&env.key("runner").key_id().to_hex()), "{out}");
    assert!(out.contains(&Digest::of(OUTPUTS).to_hex()), "{out}");
    assert!(out.contains("1 files in out, all match"), "{out}");
    assert!(out.contains("template chat, outputs text, tokens"), "{out}");

    let json: serde_json::Value = serde_json::from_str(&env.ok(&with(&["--json"]))).unwrap();
    assert_eq!(json["verified"], true);
    assert_eq!(json["facts"]["certificate_digest"], cert.digest().to_hex());
    assert_eq!(json["subjects"][0]["name"], "outputs.jsonl");
    assert_eq!(
        json["subjects"][0]["digest"]["blake3"],
        Digest::of(OUTPUTS).to_hex()
    );
}

#[test]
fn outputs_flag_names_another_directory() {
    let env = Env::new();
    fs::create_dir(env.path("copy")).unwrap();
    fs::copy(
        env.path("out/outputs.jsonl"),
        env.path("copy/outputs.jsonl"),
    )
    .unwrap();
    fs::remove_file(env.path("out/outputs.jsonl")).unwrap();
    env.fails(VERIFY, 3, "outputs.jsonl is missing");
    let out = env.ok(&with(&["--outputs", "copy"]));
    assert!(out.contains("1 files in copy, all match"), "{out}");
}

#[test]
fn rejects_changed_output_byte() {
    let env = Env::new();
    let mut bytes = OUTPUTS.to_vec();
    bytes[22] = b'L';
    assert_ne!(bytes, OUTPUTS);
    env.write("out/outputs.jsonl", &bytes);
    let stderr = env.fails(
        VERIFY,
        3,
        "do not match the receipt: outputs.jsonl differs from the receipt",
    );
    assert!(stderr.contains(&Digest::of(&bytes).short()), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");
}

#[test]
fn rejects_missing_output_file() {
    let env = Env::new();
    fs::remove_file(env.path("out/outputs.jsonl")).unwrap();
    env.fails(VERIFY, 3, "outputs.jsonl is missing");
}

#[test]
fn rejects_changed_receipt_payload() {
    let env = Env::new();
    let mut envelope = Envelope::parse(&fs::read(env.path("out/receipt.json")).unwrap()).unwrap();
    let text = String::from_utf8(envelope.payload.clone()).unwrap();
    envelope.payload = text
        .replace("\"batch_size\":4", "\"batch_size\":5")
        .into_bytes();
    assert_ne!(envelope.payload, text.as_bytes());
    env.write("out/receipt.json", &envelope.to_bytes());
    let stderr = env.fails(VERIFY, 3, "signature by runner key");
    assert!(stderr.contains("does not verify"), "{stderr}");
}

#[test]
fn rejects_another_certificate() {
    let env = Env::new();
    env.approve("cert2.json", &["--note", "approved again"]);
    let args = [
        "verify",
        "out/receipt.json",
        "--cert",
        "cert2.json",
        "--runner-key",
        "keys/runner.key.pub",
    ];
    env.fails(&args, 3, "the receipt is bound to certificate");
}

#[test]
fn rejects_another_runner_key() {
    let env = Env::new();
    let args = [
        "verify",
        "out/receipt.json",
        "--cert",
        "cert.json",
        "--runner-key",
        "keys/other-runner.key.pub",
    ];
    let stderr = env.fails(&args, 3, "not by runner key");
    assert!(
        stderr.contains(&env.key("other-runner").key_id().to_hex()),
        "{stderr}"
    );
}

#[test]
fn rejects_duplicate_key_in_receipt_json() {
    let env = Env::new();
    // In the envelope.
    let good = fs::read_to_string(env.path("out/receipt.json")).unwrap();
    let dup = good.replacen("{\"payload\"", "{\"payloadType\":\"x\",\"payload\"", 1);
    env.write("out/receipt.json", dup.as_bytes());
    env.fails(VERIFY, 2, "duplicate key `payloadType`");
    // In the signed Statement.
    env.write("out/receipt.json", good.as_bytes());
    let text = to_canonical(&env.statement()).unwrap();
    let text = String::from_utf8(text).unwrap().replacen(
        "\"predicate\":{",
        "\"predicate\":{\"job_digest\":\"00\",",
        1,
    );
    env.write_signed_statement(text.as_bytes());
    env.fails(VERIFY, 2, "duplicate key `job_digest`");
}

#[test]
fn rejects_subject_name_outside_the_directory() {
    let env = Env::new();
    env.write("secret.txt", b"not an output");
    let mut v = env.statement();
    v["subject"][0]["name"] = "../secret.txt".into();
    v["subject"][0]["digest"]["blake3"] = Digest::of(b"not an output").to_hex().into();
    env.write_signed_statement(&to_canonical(&v).unwrap());
    env.fails(VERIFY, 3, "\"../secret.txt\" is not a plain file name");
}

#[test]
fn rejects_certificate_given_as_receipt() {
    let env = Env::new();
    let args = [
        "verify",
        "cert.json",
        "--cert",
        "cert.json",
        "--runner-key",
        "keys/runner.key.pub",
    ];
    env.fails(&args, 3, "not a receipt (\"application/vnd.in-toto+json\")");
}

#[test]
fn rejects_unreadable_or_malformed_files() {
    let env = Env::new();
    env.fails(
        &[
            "verify",
            "out/none.json",
            "--cert",
            "cert.json",
            "--runner-key",
            "keys/runner.key.pub",
        ],
        2,
        "cannot read receipt out/none.json",
    );
    env.fails(
        &[
            "verify",
            "out/receipt.json",
            "--cert",
            "cert.json",
            "--runner-key",
            "keys/runner.key",
        ],
        2,
        "is not a runner public key",
    );
    env.write("out/receipt.json", b"{\"payload\":");
    env.fails(VERIFY, 2, "the envelope is not valid JSON");
}
