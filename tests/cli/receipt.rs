//! `runner verify` end to end, through the real binary: a receipt made by the library for a
//! certificate approved with the binary, verified untouched, and every tampering refused with
//! its own message and exit code.

use std::fs;

use runner::primitives::canonical::to_canonical;
use runner::primitives::digest::Digest;
use runner::primitives::dsse::Envelope;
use runner::trust::certificate::Certificate;

use crate::common::{Env, RECEIPT_OUTPUTS as OUTPUTS};

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
    let env = Env::with_receipt();
    let out = env.ok(VERIFY);
    let cert = Certificate::load(&env.path("cert.json")).unwrap();
    assert!(out.contains("verified"), "{out}");
    assert!(out.contains(&cert.digest().to_hex()), "{out}");
    assert!(out.contains(&env.key("runner").key_id().to_hex()), "{out}");
    assert!(out.contains(&Digest::of(OUTPUTS).to_hex()), "{out}");
    assert!(out.contains("1 files in out, all match"), "{out}");
    assert!(out.contains("template chat, outputs text, tokens"), "{out}");

    let json: serde_json::Value = serde_json::from_str(&env.ok(&with(&["--json"]))).unwrap();
    assert_eq!(json["valid"], true);
    assert_eq!(json["facts"]["certificate_digest"], cert.digest().to_hex());
    assert_eq!(json["subjects"][0]["name"], "outputs.jsonl");
    assert_eq!(
        json["subjects"][0]["digest"]["blake3"],
        Digest::of(OUTPUTS).to_hex()
    );
}

#[test]
fn rejects_a_missing_runner_key_pointing_at_the_runners_state_directory() {
    let env = Env::with_receipt();
    fs::remove_file(env.path("keys/runner.key.pub")).unwrap();
    let stderr = env.fails(VERIFY, 2, "cannot read key file keys/runner.key.pub");
    assert!(
        stderr.contains("runner.key.pub in its state directory, made by `runner init`"),
        "{stderr}"
    );
    assert!(!stderr.contains("--key or"), "{stderr}");
    assert!(!stderr.contains("trust.toml"), "{stderr}");
}

#[test]
fn outputs_flag_names_another_directory() {
    let env = Env::with_receipt();
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
    let env = Env::with_receipt();
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
    let env = Env::with_receipt();
    fs::remove_file(env.path("out/outputs.jsonl")).unwrap();
    env.fails(VERIFY, 3, "outputs.jsonl is missing");
}

#[test]
fn rejects_changed_receipt_payload() {
    let env = Env::with_receipt();
    let mut envelope = Envelope::parse(&fs::read(env.path("out/receipt.json")).unwrap()).unwrap();
    let text = String::from_utf8(envelope.payload.clone()).unwrap();
    envelope.payload = text
        .replace("\"batch_size\":4", "\"batch_size\":5")
        .into_bytes();
    assert_ne!(envelope.payload, text.as_bytes());
    env.write("out/receipt.json", envelope.to_bytes());
    let stderr = env.fails(VERIFY, 3, "signature by runner key");
    assert!(stderr.contains("does not verify"), "{stderr}");
}

#[test]
fn rejects_another_certificate() {
    let env = Env::with_receipt();
    env.approve("owner", "cert2.json", &["--note", "approved again"]);
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
    let env = Env::with_receipt();
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
    let env = Env::with_receipt();
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
    let env = Env::with_receipt();
    env.write("secret.txt", b"not an output");
    let mut v = env.statement();
    v["subject"][0]["name"] = "../secret.txt".into();
    v["subject"][0]["digest"]["blake3"] = Digest::of(b"not an output").to_hex().into();
    env.write_signed_statement(&to_canonical(&v).unwrap());
    env.fails(VERIFY, 3, "\"../secret.txt\" is not a plain file name");
}

#[test]
fn rejects_certificate_given_as_receipt() {
    let env = Env::with_receipt();
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
    let env = Env::with_receipt();
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
