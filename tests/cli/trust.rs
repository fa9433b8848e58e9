//! The trust subcommands end to end, through the real binary in a temporary directory:
//! keygen, policy-id, approve, cosign, inspect and verify-cert, and every refusal's exit code,
//! message, and (for commands that write) the absence of any output file.

use std::fs;

use runner::trust::certificate::{Certificate, CERTIFICATE_PAYLOAD_TYPE};

use crate::common::Env;

const ENGINE: &str = include_str!("../../engines/gemma3.eng");

// ---- keygen ----

#[cfg(unix)]
#[test]
fn keygen_writes_private_key_mode_0600_and_public_key_json() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let out = env.ok(&["keygen", "--out", "owner.key"]);
    let mode = fs::metadata(env.path("owner.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let public: serde_json::Value =
        serde_json::from_slice(&fs::read(env.path("owner.key.pub")).unwrap()).unwrap();
    assert_eq!(public["algorithm"], "ed25519");
    assert_eq!(public["schema"], "runner-public-key/1");
    let key_id = public["key_id"].as_str().unwrap();
    assert_eq!(key_id.len(), 64);
    assert!(out.contains(key_id) && out.contains(&key_id[..16]), "{out}");
    // The key id is BLAKE3 of the raw public key.
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(public["public_key"].as_str().unwrap())
        .unwrap();
    assert_eq!(blake3::hash(&raw).to_hex().as_str(), key_id);
    // Nothing secret on stdout.
    let private = fs::read_to_string(env.path("owner.key")).unwrap();
    assert!(!out.contains(private.lines().nth(1).unwrap()));
}

#[test]
fn rejects_keygen_overwrite_without_force() {
    let env = Env::new();
    env.ok(&["keygen", "--out", "owner.key"]);
    let before = fs::read(env.path("owner.key")).unwrap();
    let before_pub = fs::read(env.path("owner.key.pub")).unwrap();
    env.fails(
        &["keygen", "--out", "owner.key"],
        2,
        "owner.key already exists",
    );
    let stderr = env.fails(&["keygen", "--out", "owner.key"], 2, "--force");
    assert!(stderr.contains("hint:"), "{stderr}");
    assert_eq!(fs::read(env.path("owner.key")).unwrap(), before);
    assert_eq!(fs::read(env.path("owner.key.pub")).unwrap(), before_pub);

    // Only the public half exists: refused, naming it, and no private key is written.
    env.write("other.key.pub", b"{}");
    env.fails(
        &["keygen", "--out", "other.key"],
        2,
        "other.key.pub already exists",
    );
    assert!(!env.path("other.key").exists());

    env.ok(&["keygen", "--out", "owner.key", "--force"]);
    assert_ne!(fs::read(env.path("owner.key")).unwrap(), before);
}

// ---- policy-id ----

#[test]
fn policy_id_prints_short_full_and_digest() {
    let env = Env::new();
    let policy = runner::restrict::policy::Policy::load(&env.path("gemma3.json")).unwrap();
    let out = env.ok(&["policy-id", "gemma3.json"]);
    assert!(
        out.starts_with(&format!("policy_id      {}\n", policy.policy_id().short())),
        "{out}"
    );
    assert!(out.contains(&policy.policy_id().to_hex()), "{out}");
    assert!(out.contains(&policy.digest().to_hex()), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["policy-id", "gemma3.json", "--json"])).unwrap();
    assert_eq!(json["policy_id"], policy.policy_id().to_hex());
    assert_eq!(json["policy_id_short"], policy.policy_id().short());
    assert_eq!(json["policy_digest"], policy.digest().to_hex());
}

#[test]
fn rejects_policy_with_unknown_field_or_bad_glob() {
    let env = Env::new();
    env.write("p.json", br#"{"schema":"runner-policy/1","name":"x","allow_functions":[],"limits":{"max_batch":1,"max_new_tokens":1,"max_prompt_tokens":1,"max_inputs":1},"outputs":["text"],"colour":"red"}"#);
    env.fails(&["policy-id", "p.json"], 2, "unknown field `colour`");
    env.write("p.json", br#"{"schema":"runner-policy/1","name":"x","allow_functions":["nn*"],"limits":{"max_batch":1,"max_new_tokens":1,"max_prompt_tokens":1,"max_inputs":1},"outputs":["text"]}"#);
    env.fails(
        &["policy-id", "p.json"],
        2,
        "field `allow_functions` has an invalid entry \"nn*\"",
    );
    env.fails(
        &["policy-id", "missing.json"],
        2,
        "cannot read policy missing.json",
    );
}

// ---- hints name what the user gave ----

#[test]
fn hints_name_the_path_given_not_a_flag_the_command_lacks() {
    let env = Env::two_owner_cert();
    // policy-id takes the policy as a positional file: no `--policy` in its hint.
    let stderr = env.fails(
        &["policy-id", "missing.json"],
        2,
        "cannot read policy missing.json",
    );
    assert!(
        stderr.contains("hint: nothing is at missing.json"),
        "{stderr}"
    );
    assert!(!stderr.contains("--policy"), "{stderr}");
    // cosign and verify-cert name the certificate file given, not `cert.json`.
    for args in [
        &["cosign", "approved.json", "--key", "keys/a.key"][..],
        &["verify-cert", "approved.json"],
    ] {
        let stderr = env.fails(args, 2, "cannot read certificate approved.json");
        assert!(
            stderr.contains("hint: nothing is at approved.json"),
            "{stderr}"
        );
        assert!(!stderr.contains("cert.json"), "{stderr}");
    }
    fs::rename(env.path("cert.json"), env.path("approved.json")).unwrap();
    env.trust(2, &["a", "b"], &[]);
    env.approve("a", "one.json", &[]);
    let stderr = env.fails(&["verify-cert", "one.json"], 3, "1 valid, 2 required");
    assert!(
        stderr.contains("`runner cosign one.json --key OWNER.key`"),
        "{stderr}"
    );
    // approve's missing model: the path given, right for --model as for a job's `model`.
    let mut args = approve_args(&[]);
    args[6] = "nomodel";
    let stderr = env.fails(&args, 2, "cannot read model directory nomodel");
    assert!(stderr.contains("hint: check the path nomodel"), "{stderr}");
    // A missing owner key file: the path, and how such a file is made.
    let stderr = env.fails(
        &["cosign", "approved.json", "--key", "keys/none.key"],
        2,
        "cannot read key file keys/none.key",
    );
    assert!(
        stderr.contains("hint: nothing is at keys/none.key: `runner keygen --out KEY`"),
        "{stderr}"
    );
}

#[test]
fn missing_runner_key_hint_points_at_the_state_directory_and_init() {
    let env = Env::new();
    env.ok(&["init", "--state-dir", "st"]);
    fs::remove_file(env.path("st/runner.key.pub")).unwrap();
    let stderr = env.fails(
        &["identity", "--state-dir", "st"],
        2,
        "cannot read key file st/runner.key.pub",
    );
    assert!(
        stderr.contains("lives in its state directory st, made by `runner init`"),
        "{stderr}"
    );
    assert!(!stderr.contains("--key"), "{stderr}");
    assert!(!stderr.contains("trust.toml"), "{stderr}");
}

// ---- approve / cosign / inspect / verify-cert: the happy path ----

#[test]
fn approve_cosign_verify_two_of_two() {
    let env = Env::new();
    env.keygen("a");
    env.keygen("b");
    let out = env.approve("a", "cert.json", &["--note", "reviewed view v3"]);
    assert!(out.contains("wrote cert.json"), "{out}");
    env.trust(2, &["a", "b"], &[]);
    env.fails(&["verify-cert", "cert.json"], 3, "1 valid, 2 required");

    env.ok(&["cosign", "cert.json", "--key", "keys/b.key"]);
    let out = env.ok(&["verify-cert", "cert.json"]);
    let cert = Certificate::load(&env.path("cert.json")).unwrap();
    assert!(
        out.contains(&format!("certificate {} verified", cert.digest().short())),
        "{out}"
    );
    assert!(out.contains(&env.key("a").key_id().short()), "{out}");
    assert!(out.contains(&env.key("b").key_id().short()), "{out}");

    let p = cert.payload();
    assert_eq!(p.engine.name, "gemma3");
    assert_eq!(
        p.engine.source_digest.to_hex(),
        blake3::hash(&fs::read(env.path("gemma3.eng")).unwrap())
            .to_hex()
            .as_str()
    );
    assert_eq!(
        p.model_digest,
        runner::model::digest::model_digest(&env.path("model"))
            .unwrap()
            .digest
    );
    assert_eq!(p.note.as_deref(), Some("reviewed view v3"));
    assert_eq!(p.expires_at, p.issued_at.plus_days(90).unwrap());

    let text = env.ok(&["inspect", "cert.json"]);
    for needle in [
        cert.digest().to_hex(),
        env.key("a").key_id().to_hex(),
        env.key("b").key_id().to_hex(),
        p.engine.source_digest.to_hex(),
        p.policy_id.to_hex(),
        p.model_digest.to_hex(),
        "currently within its validity window".into(),
        "reviewed view v3".into(),
        "supersedes    none".into(),
        "runner-restrict/1".into(),
    ] {
        assert!(text.contains(&needle), "missing {needle} in\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["inspect", "cert.json", "--json"])).unwrap();
    assert_eq!(json["certificate_digest"], cert.digest().to_hex());
    assert_eq!(json["payloadType"], CERTIFICATE_PAYLOAD_TYPE);
    assert_eq!(json["signatures"].as_array().unwrap().len(), 2);
    assert_eq!(json["payload"]["policy"]["name"], "gemma3");
    assert_eq!(json["validity"]["current"], true);
    assert_eq!(
        json["validity"]["start"], json["payload"]["valid_from"],
        "{json}"
    );
    assert_eq!(json["validity"]["end"], json["payload"]["expires_at"]);
    assert_eq!(
        json["signatures"][0]["key_id"].as_str().map(str::len),
        Some(64)
    );
}

#[test]
fn untrusted_signature_is_reported_not_counted() {
    let env = Env::two_owner_cert();
    env.keygen("stranger");
    env.ok(&["cosign", "cert.json", "--key", "keys/stranger.key"]);
    let out = env.ok(&["verify-cert", "cert.json"]);
    assert!(
        out.contains(&format!(
            "ignored     signature by key {}",
            env.key("stranger").key_id().to_hex()
        )),
        "{out}"
    );
    assert!(out.contains("signed by   2 owners"), "{out}");
}

#[test]
fn approve_with_supersedes_binds_the_old_certificate_digest() {
    let env = Env::two_owner_cert();
    let old = Certificate::load(&env.path("cert.json")).unwrap().digest();
    env.approve("a", "cert2.json", &["--supersedes", "cert.json"]);
    let new = Certificate::load(&env.path("cert2.json")).unwrap();
    assert_eq!(new.payload().supersedes, Some(old));
    let text = env.ok(&["inspect", "cert2.json"]);
    assert!(
        text.contains(&format!("supersedes    {}", old.to_hex())),
        "{text}"
    );
    // Revoking the old certificate refuses it but not its successor.
    env.ok(&["cosign", "cert2.json", "--key", "keys/b.key"]);
    env.trust(2, &["a", "b"], &[old.to_hex()]);
    env.fails(&["verify-cert", "cert.json"], 3, "is revoked");
    env.ok(&["verify-cert", "cert2.json"]);
}

#[test]
fn cosign_out_writes_a_new_file_and_leaves_the_input() {
    let env = Env::new();
    env.keygen("a");
    env.keygen("b");
    env.approve("a", "cert.json", &[]);
    env.trust(2, &["a", "b"], &[]);
    let before = fs::read(env.path("cert.json")).unwrap();
    env.ok(&[
        "cosign",
        "cert.json",
        "--key",
        "keys/b.key",
        "--out",
        "both.json",
    ]);
    assert_eq!(fs::read(env.path("cert.json")).unwrap(), before);
    assert_eq!(env.envelope("both.json").signatures.len(), 2);
    assert_eq!(
        env.envelope("both.json").payload,
        env.envelope("cert.json").payload
    );
}

// ---- approve / cosign refusals: nothing written ----

#[test]
fn rejects_approve_over_existing_file_without_force() {
    let env = Env::new();
    env.keygen("a");
    env.write("cert.json", b"precious");
    let args = [
        "approve",
        "--engine",
        "gemma3.eng",
        "--policy",
        "gemma3.json",
        "--model",
        "model",
        "--key",
        "keys/a.key",
        "--out",
        "cert.json",
    ];
    env.fails(&args, 2, "cert.json already exists");
    assert_eq!(fs::read(env.path("cert.json")).unwrap(), b"precious");
    let mut forced = args.to_vec();
    forced.push("--force");
    env.ok(&forced);
    assert!(Certificate::load(&env.path("cert.json")).is_ok());
}

fn approve_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "approve",
        "--engine",
        "gemma3.eng",
        "--policy",
        "gemma3.json",
        "--model",
        "model",
        "--key",
        "keys/a.key",
        "--out",
        "new.json",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn approve_valid_from_alone_moves_the_default_expiry_with_it() {
    let env = Env::new();
    env.keygen("a");
    let out = env.ok(&approve_args(&["--valid-from", "2999-01-01T00:00:00Z"]));
    // 90 days after the start of validity, not after now (which would end before it starts).
    assert!(
        out.contains("valid from 2999-01-01T00:00:00Z until 2999-04-01T00:00:00Z"),
        "{out}"
    );
    let cert = Certificate::parse(&fs::read(env.path("new.json")).unwrap()).unwrap();
    let p = cert.payload();
    assert_eq!(p.expires_at, p.valid_from.plus_days(90).unwrap());
}

#[test]
fn rejects_approve_with_expiry_not_after_valid_from() {
    let env = Env::new();
    env.keygen("a");
    env.fails(
        &approve_args(&[
            "--valid-from",
            "2027-01-01T00:00:00Z",
            "--expires",
            "2027-01-01T00:00:00Z",
        ]),
        2,
        "expires_at 2027-01-01T00:00:00Z is not after valid_from 2027-01-01T00:00:00Z",
    );
    env.fails(
        &approve_args(&["--expires", "tomorrow"]),
        2,
        "not an RFC 3339 date-time",
    );
    env.fails(
        &approve_args(&["--note", "line one\nline two"]),
        2,
        "control characters",
    );
    assert!(!env.path("new.json").exists());
}

#[test]
fn rejects_approve_with_malformed_supersedes() {
    let env = Env::new();
    env.keygen("a");
    env.write("old.json", b"{\"payload\":");
    env.fails(
        &approve_args(&["--supersedes", "old.json"]),
        2,
        "old.json: the envelope is not valid JSON",
    );
    env.fails(
        &approve_args(&["--supersedes", "absent.json"]),
        2,
        "cannot read certificate absent.json",
    );
    assert!(!env.path("new.json").exists());
}

#[test]
fn rejects_approve_with_bad_model_engine_or_key() {
    let env = Env::new();
    env.keygen("a");
    fs::remove_file(env.path("model/model.safetensors")).unwrap();
    env.fails(&approve_args(&[]), 2, "has no *.safetensors file");
    fs::write(env.path("model/model.safetensors"), b"w").unwrap();
    #[cfg(unix)]
    {
        let outside = env.path("elsewhere.bin");
        fs::write(&outside, b"w").unwrap();
        std::os::unix::fs::symlink(&outside, env.path("model/extra.safetensors")).unwrap();
        env.fails(&approve_args(&[]), 2, "outside the model directory");
        fs::remove_file(env.path("model/extra.safetensors")).unwrap();
    }
    let mut args = approve_args(&[]);
    args[2] = "missing.eng";
    env.fails(&args, 2, "cannot read engine missing.eng");
    // Approval runs the verifier: an engine whose private code calls a built-in outside the
    // policy is refused, and nothing is signed.
    let leaky = ENGINE.replace("let gate = gelu_tanh(", "let gate = softmax(");
    fs::write(env.path("gemma3.eng"), leaky).unwrap();
    env.fails(&approve_args(&[]), 3, "softmax");
    assert!(!env.path("new.json").exists());
    fs::write(env.path("gemma3.eng"), ENGINE).unwrap();
    let mut args = approve_args(&[]);
    args[8] = "keys/a.key.pub";
    env.fails(&args, 2, "is not a runner private key");
    assert!(!env.path("new.json").exists());
    env.ok(&approve_args(&[]));
}

#[test]
fn rejects_cosign_by_a_key_that_already_signed() {
    let env = Env::two_owner_cert();
    let before = fs::read(env.path("cert.json")).unwrap();
    let key_id = env.key("b").key_id().to_hex();
    env.fails(
        &["cosign", "cert.json", "--key", "keys/b.key"],
        2,
        &format!("key {key_id} has already signed"),
    );
    env.fails(
        &[
            "cosign",
            "cert.json",
            "--key",
            "keys/a.key",
            "--out",
            "x.json",
        ],
        2,
        "already signed",
    );
    assert_eq!(fs::read(env.path("cert.json")).unwrap(), before);
    assert!(!env.path("x.json").exists());
}

#[test]
fn rejects_cosign_of_malformed_envelope() {
    let env = Env::two_owner_cert();
    env.keygen("c");
    let mut bytes = fs::read(env.path("cert.json")).unwrap();
    bytes.insert(1, b' ');
    env.write("spaced.json", &bytes);
    env.fails(
        &["cosign", "spaced.json", "--key", "keys/c.key"],
        2,
        "not in canonical form",
    );
    assert_eq!(fs::read(env.path("spaced.json")).unwrap(), bytes);
    env.write("junk.json", b"not json");
    env.fails(
        &[
            "cosign",
            "junk.json",
            "--key",
            "keys/c.key",
            "--out",
            "y.json",
        ],
        2,
        "not valid JSON",
    );
    assert!(!env.path("y.json").exists());
    env.fails(
        &[
            "cosign",
            "cert.json",
            "--key",
            "keys/c.key",
            "--out",
            "cert.json",
        ],
        2,
        "already exists",
    );
}

// ---- verify-cert refusals ----

#[test]
fn rejects_tampered_payload_byte() {
    let env = Env::two_owner_cert();
    let mut e = env.envelope("cert.json");
    let pos = e.payload.iter().position(|&b| b == b'7').unwrap();
    e.payload[pos] = b'8';
    env.write("cert.json", e.to_bytes());
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        &format!(
            "cert.json: signature by key {} does not verify",
            env.key("a").key_id().to_hex()
        ),
    );
}

#[test]
fn rejects_tampered_signature() {
    let env = Env::two_owner_cert();
    let mut e = env.envelope("cert.json");
    e.signatures[1].sig[63] ^= 0x01;
    env.write("cert.json", e.to_bytes());
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        &format!(
            "signature by key {} does not verify",
            env.key("b").key_id().to_hex()
        ),
    );
}

#[test]
fn rejects_signature_by_untrusted_key() {
    let env = Env::new();
    env.keygen("a");
    env.keygen("b");
    env.keygen("mallory");
    env.approve("mallory", "cert.json", &[]);
    env.trust(1, &["a", "b"], &[]);
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        &format!(
            "ignored signatures by keys not in the trust configuration: {}",
            env.key("mallory").key_id().short()
        ),
    );
}

#[test]
fn rejects_same_trusted_key_counted_twice() {
    let env = Env::new();
    env.keygen("a");
    env.keygen("b");
    env.approve("a", "cert.json", &[]);
    let mut e = env.envelope("cert.json");
    let copy = e.signatures[0].clone();
    e.signatures.push(copy);
    env.write("cert.json", e.to_bytes());
    env.trust(2, &["a", "b"], &[]);
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        "not enough owner signatures: 1 valid, 2 required",
    );
}

#[test]
fn rejects_threshold_not_met() {
    let env = Env::new();
    for k in ["a", "b", "c"] {
        env.keygen(k);
    }
    env.approve("a", "cert.json", &[]);
    env.trust(3, &["a", "b", "c"], &[]);
    env.ok(&["cosign", "cert.json", "--key", "keys/b.key"]);
    let stderr = env.fails(&["verify-cert", "cert.json"], 3, "2 valid, 3 required");
    assert!(stderr.contains("runner cosign"), "{stderr}");
}

#[test]
fn rejects_expired() {
    let env = Env::new();
    env.keygen("a");
    let out = env.run(&approve_args(&[
        "--valid-from",
        "2020-01-01T00:00:00Z",
        "--expires",
        "2020-02-01T00:00:00Z",
    ]));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: this certificate expired"));
    env.trust(1, &["a"], &[]);
    env.fails(
        &["verify-cert", "new.json"],
        3,
        "expired at 2020-02-01T00:00:00Z",
    );
    let text = env.ok(&["inspect", "new.json"]);
    assert!(text.contains("(expired)"), "{text}");
}

#[test]
fn rejects_not_yet_valid() {
    let env = Env::new();
    env.keygen("a");
    env.ok(&approve_args(&[
        "--valid-from",
        "2999-01-01T00:00:00Z",
        "--expires",
        "2999-02-01T00:00:00Z",
    ]));
    env.trust(1, &["a"], &[]);
    env.fails(
        &["verify-cert", "new.json"],
        3,
        "not valid yet: valid_from is 2999-01-01T00:00:00Z",
    );
}

#[test]
fn rejects_wrong_payload_type() {
    let env = Env::two_owner_cert();
    let payload = env.payload_text();
    env.write_signed(
        "cert.json",
        "application/vnd.in-toto+json",
        payload.as_bytes(),
        &["a", "b"],
    );
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        "payloadType is \"application/vnd.in-toto+json\", not a runner certificate",
    );
}

#[test]
fn rejects_duplicate_json_key_in_payload() {
    let env = Env::two_owner_cert();
    let payload = env.payload_text().replacen(
        "{\"engine\"",
        "{\"expires_at\":\"2999-01-01T00:00:00Z\",\"engine\"",
        1,
    );
    env.write_signed(
        "cert.json",
        CERTIFICATE_PAYLOAD_TYPE,
        payload.as_bytes(),
        &["a", "b"],
    );
    env.fails(
        &["verify-cert", "cert.json"],
        2,
        "duplicate key `expires_at`",
    );
    // A duplicate key in the envelope itself is refused before any signature is looked at.
    let text = String::from_utf8(fs::read(env.path("cert.json")).unwrap()).unwrap();
    env.write(
        "cert.json",
        text.replacen("{\"payload\"", "{\"payloadType\":\"x\",\"payload\"", 1)
            .as_bytes(),
    );
    env.fails(
        &["verify-cert", "cert.json"],
        2,
        "duplicate key `payloadType`",
    );
}

#[test]
fn rejects_truncated_and_garbage_files() {
    let env = Env::two_owner_cert();
    let bytes = fs::read(env.path("cert.json")).unwrap();
    env.write("cut.json", &bytes[..bytes.len() / 3]);
    env.fails(
        &["verify-cert", "cut.json"],
        2,
        "cut.json: the envelope is not valid JSON",
    );
    env.write("junk.json", [0xff, 0xfe, 0x00, 0x42]);
    env.fails(&["verify-cert", "junk.json"], 2, "not valid JSON");
    env.write("empty.json", b"");
    env.fails(&["verify-cert", "empty.json"], 2, "not valid JSON");
    env.fails(
        &["verify-cert", "absent.json"],
        2,
        "cannot read certificate absent.json",
    );
}

#[test]
fn rejects_unknown_fields() {
    let env = Env::two_owner_cert();
    let mut v: serde_json::Value =
        serde_json::from_slice(&fs::read(env.path("cert.json")).unwrap()).unwrap();
    v["signatures"][0]["cert"] = "x".into();
    env.write(
        "env.json",
        runner::primitives::canonical::to_canonical(&v).unwrap(),
    );
    env.fails(&["verify-cert", "env.json"], 2, "unknown field `cert`");

    let mut p: serde_json::Value = serde_json::from_str(&env.payload_text()).unwrap();
    p["approved_by"] = "everyone".into();
    let text = runner::primitives::canonical::to_canonical(&p).unwrap();
    env.write_signed("payload.json", CERTIFICATE_PAYLOAD_TYPE, &text, &["a", "b"]);
    env.fails(
        &["verify-cert", "payload.json"],
        2,
        "unknown field `approved_by`",
    );
}

#[test]
fn rejects_revoked_certificate_digest() {
    let env = Env::two_owner_cert();
    let digest = Certificate::load(&env.path("cert.json"))
        .unwrap()
        .digest()
        .to_hex();
    env.trust(2, &["a", "b"], std::slice::from_ref(&digest));
    let stderr = env.fails(
        &["verify-cert", "cert.json"],
        3,
        &format!("certificate {digest} is revoked"),
    );
    assert!(stderr.contains("hint:"), "{stderr}");
}

#[test]
fn revoked_accepts_the_short_digest_form_as_a_prefix() {
    let env = Env::two_owner_cert();
    let digest = Certificate::load(&env.path("cert.json")).unwrap().digest();
    // The 16-hex form `approve`, `cosign` and `verify-cert` print.
    let printed = env.ok(&["verify-cert", "cert.json"]);
    assert!(printed.contains(&digest.short()), "{printed}");
    env.trust(2, &["a", "b"], &[digest.short()]);
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        &format!("certificate {} is revoked", digest.to_hex()),
    );
    // Another certificate's short form revokes nothing here.
    env.trust(2, &["a", "b"], &["0123456789abcdef".into()]);
    env.ok(&["verify-cert", "cert.json"]);
}

#[test]
fn rejects_ambiguous_or_unknown_revoked_prefix() {
    let env = Env::two_owner_cert();
    let digest = Certificate::load(&env.path("cert.json")).unwrap().digest();
    let short8 = digest.to_hex()[..8].to_owned();
    for (entry, why) in [
        (
            short8.as_str(),
            "which is too short to name one certificate unambiguously (at least 16 hex digits)",
        ),
        ("not-a-digest-at-all", "which is not a certificate digest"),
    ] {
        env.trust(2, &["a", "b"], &[entry.to_owned()]);
        let stderr = env.fails(
            &["verify-cert", "cert.json"],
            2,
            &format!("trust configuration trust.toml: field `revoked` has {entry:?}, {why}"),
        );
        assert!(stderr.contains("its first 16 or more"), "{stderr}");
    }
}

#[test]
fn rejects_bad_trust_configuration() {
    let env = Env::two_owner_cert();
    env.fails(
        &["verify-cert", "cert.json", "--trust", "nope.toml"],
        2,
        "cannot read trust configuration nope.toml",
    );
    env.write(
        "t.toml",
        b"required_signatures = 3\nowners = [\"keys/a.key.pub\", \"keys/b.key.pub\"]\n",
    );
    env.fails(
        &["verify-cert", "cert.json", "--trust", "t.toml"],
        2,
        "field `required_signatures` is 3",
    );
    env.write(
        "t.toml",
        b"required_signatures = 1\nowners = [\"keys/a.key.pub\"]\nallow_all = true\n",
    );
    env.fails(
        &["verify-cert", "cert.json", "--trust", "t.toml"],
        2,
        "unknown field `allow_all`",
    );
    // Owner paths are relative to the trust file, not the working directory.
    fs::create_dir(env.path("etc")).unwrap();
    env.write(
        "etc/t.toml",
        b"required_signatures = 2\nowners = [\"../keys/a.key.pub\", \"../keys/b.key.pub\"]\n",
    );
    env.ok(&["verify-cert", "cert.json", "--trust", "etc/t.toml"]);
}
