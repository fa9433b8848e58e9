//! The trusted boundary under attack: each class of docs/security.md's table, as a user of the
//! `runner` binary would meet it. Refusals assert the message, the exit code, that nothing was
//! written, and what the audit log says.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use runner::primitives::digest::Digest;
use serde_json::Value;

use crate::common::repo::root;
use crate::common::{job_toml, Env, EXEC};

/// A string planted in every place private data can be; it must come out only where outputs go.
const CANARY: &str = "zq_canary_7f3a";

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

// ---- 1. the audit log fails closed ----

#[test]
fn rejects_a_job_when_the_audit_log_cannot_be_appended_to() {
    let env = Env::approved_job();
    // A directory where the log should be: nothing may run unrecorded.
    fs::create_dir(env.path("state/audit.jsonl")).unwrap();
    let stderr = env.fails(EXEC, 1, "cannot open audit log");
    assert!(stderr.contains("not a directory"), "{stderr}");
    assert!(!env.path("out").exists());
    fs::remove_dir(env.path("state/audit.jsonl")).unwrap();

    // A last line cut short: refused (exit 3) with how to repair or rotate it.
    env.ok(EXEC);
    fs::remove_dir_all(env.path("out")).unwrap();
    let mut log = fs::read(env.path("state/audit.jsonl")).unwrap();
    log.truncate(log.len() - 5);
    fs::write(env.path("state/audit.jsonl"), &log).unwrap();
    let stderr = env.fails(EXEC, 3, "is damaged at its last line");
    assert!(stderr.contains("rotate"), "{stderr}");
    assert!(!env.path("out").exists());
    assert_eq!(fs::read(env.path("state/audit.jsonl")).unwrap(), log);
}

#[test]
fn a_failure_after_admission_is_recorded_as_failed_and_leaves_no_staging() {
    // The approved engine embeds the tokens with layer 0's key projection as the table (a few
    // dozen rows), so a larger token id fails inside `embed` at run time: after admission, with
    // a value from the data at hand.
    let env = Env::bare_job();
    env.write_model_fixture();
    let engine = fs::read_to_string(root().join("engines/gemma3.eng"))
        .unwrap()
        .replace(
            "embed(tokens, model.embed_tokens, model.embed_scale)",
            "embed(tokens, model.layer_0.k_proj, model.embed_scale)",
        );
    env.write("engines/gemma3.eng", &engine);
    env.approve_both("cert.json", &[]);
    env.write_inputs(&[vec![2, 437]]);
    env.write_job(1, 2, r#"["tokens"]"#);
    let stderr = env.failed_after_admission(
        EXEC,
        1,
        &["the engine failed while running, in `embed`", "not shown"],
    );
    // The id (a private value) is in no message and no entry.
    let words = |text: &str| -> bool {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == "437")
    };
    assert!(!words(&stderr), "{stderr}");
    assert!(!words(
        &fs::read_to_string(env.path("state/audit.jsonl")).unwrap()
    ));
}

// ---- 2. no private data in any message, anywhere ----

/// Every output stream of a run, for the canary sweep.
fn streams(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under the directory that may not hold private data: all but the inputs, the
/// engines written with the canary and the outputs themselves.
fn leaks(env: &Env) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![env.root().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let allowed =
                name.starts_with("inputs") || name.starts_with("secret") || name == "outputs.jsonl";
            if !allowed
                && fs::read(&path)
                    .unwrap()
                    .windows(CANARY.len())
                    .any(|w| w == CANARY.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn no_canary_reaches_any_message_log_receipt_or_file() {
    // A model with the tokenizer's vocabulary, so text prompts run.
    let env = Env::text_job();
    let mut seen = String::new();
    let job = |env: &Env, outputs: &str| {
        env.write("job.toml", job_toml(2, 4, outputs));
    };

    // Inputs: the canary in every position, valid and not. Valid ones run (the canary may then
    // reach outputs.jsonl, as an id); invalid ones are refused.
    let lines = [
        format!(r#"{{"id": "a", "prompt": "{CANARY} is the diagnosis"}}"#),
        format!(r#"{{"id": "a", "messages": [{{"role": "user", "content": "{CANARY}"}}]}}"#),
        format!(r#"{{"id": "{CANARY}", "tokens": [2, 5]}}"#),
        format!(r#"{{"id": "a", "messages": [{{"role": "{CANARY}", "content": "x"}}]}}"#),
        format!(r#"{{"id": "a", "tokens": ["{CANARY}"]}}"#),
        format!(r#"{{"id": "a", "tokens": [2], "{CANARY}": 1}}"#),
        format!(r#"{{"id": "a", "prompt": ["{CANARY}"]}}"#),
        format!(r#"{{"id": "a", "messages": "Diagnosis field: {CANARY}"}}"#),
        format!(r#"{{"id": "a", "prompt": "{CANARY}"#),
        format!(
            r#"{{"id": "{CANARY}", "tokens": [2]}}{}{{"id": "{CANARY}", "tokens": [3]}}"#,
            "\n"
        ),
        format!(r#"{{"id": "a", "tokens": [2, 5], "prompt": "{CANARY}"}}"#),
    ];
    for (i, line) in lines.iter().enumerate() {
        env.write("inputs.jsonl", format!("{line}\n"));
        job(&env, r#"["text", "tokens"]"#);
        let out = env.run(EXEC);
        seen.push_str(&streams(&out));
        assert_eq!(out.status.success(), i < 3, "line {i}: {}", streams(&out));
        if out.status.success() {
            fs::rename(env.path("out"), env.path(&format!("out-{i}"))).unwrap();
        }
    }
    // The id comes back in the outputs, the one file private data may go to (and the sweep
    // below would see it anywhere else).
    assert!(env.read("out-2/outputs.jsonl").contains(CANARY));
    // The runs that passed have receipts naming no input.
    for i in 0..3 {
        let receipt = fs::read_to_string(env.path(&format!("out-{i}/receipt.json"))).unwrap();
        assert!(!receipt.contains(CANARY));
    }

    // Hidden engine code: a disallowed call, a malformed number, an unknown function, each on
    // a hidden line holding the canary, through every command that reads an engine.
    let hidden = [
        format!("  let {CANARY} = softmax(h);\n  return {CANARY};"),
        format!("  let {CANARY} = scale(h, 1.5e);\n  return {CANARY};"),
        format!("  return {CANARY}(h);"),
    ];
    let shipped = fs::read_to_string(root().join("engines/gemma3.eng")).unwrap();
    for (i, body) in hidden.iter().enumerate() {
        let engine = shipped.replace(
            "    let gate = gelu_tanh(linear(h, layer.gate_proj));\n    return linear(mul(gate, linear(h, layer.up_proj)), layer.down_proj);",
            body,
        );
        assert_ne!(engine, shipped);
        let name = format!("secret-{i}.eng");
        env.write(&name, &engine);
        for args in [
            vec![
                "restrict",
                name.as_str(),
                "--policy",
                "policies/gemma3.json",
                "--view",
                "view.eng",
            ],
            vec!["review", "--cert", "cert.json", "--engine", name.as_str()],
            vec![
                "approve",
                "--engine",
                name.as_str(),
                "--policy",
                "policies/gemma3.json",
                "--model",
                "model",
                "--key",
                "keys/owner-a.key",
                "--out",
                "secret-cert.json",
            ],
        ] {
            let out = env.run(&args);
            assert!(!out.status.success(), "{args:?}");
            seen.push_str(&streams(&out));
        }
        // The operator runs it in place of the approved engine.
        fs::copy(env.path(&name), env.path("engines/gemma3.eng")).unwrap();
        env.write("inputs.jsonl", "{\"id\": \"a\", \"tokens\": [2, 5]}\n");
        let out = env.run(EXEC);
        assert_eq!(out.status.code(), Some(3));
        seen.push_str(&streams(&out));
        env.install_engine("gemma3.eng");
    }
    seen.push_str(&env.ok(&["inspect", "cert.json"]));
    seen.push_str(&env.ok(&["audit", "verify", "--state-dir", "state", "--json"]));
    assert!(!seen.contains(CANARY), "{seen}");
    assert_eq!(leaks(&env), Vec::<String>::new());
}

#[test]
fn control_characters_from_a_job_file_never_reach_the_terminal() {
    let env = Env::approved_job();
    env.write(
        "job.toml",
        job_toml(2, 4, r#"["tokens"]"#).replace("engines/gemma3.eng", "engines/\u{1b}[2Jx.eng"),
    );
    let out = env.run(EXEC);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !out.stderr.contains(&0x1b),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("\\u{1b}"));
}

// ---- 3. the runner's identity and state belong to the operator ----

#[test]
fn init_makes_the_state_once_and_identity_prints_its_key() {
    let env = Env::new();
    let out = env.ok(&["init", "--state-dir", "st"]);
    assert!(out.contains("mode 0700"), "{out}");
    assert_eq!(mode(&env.path("st")), 0o700);
    assert_eq!(mode(&env.path("st/runner.key")), 0o600);
    let id = env.ok(&["identity", "--state-dir", "st"]);
    let public = runner::primitives::keys::PublicKey::load(&env.path("st/runner.key.pub")).unwrap();
    assert!(id.contains(&public.key_id().to_hex()), "{id}");
    // The identity document binds the age recipient to the signing key, signed by it.
    assert_eq!(mode(&env.path("st/runner.age")), 0o600);
    let recipient = env.ok(&["identity", "--state-dir", "st", "--recipient"]);
    let recipient = recipient.trim();
    assert!(
        recipient.starts_with("age1") && id.contains(recipient),
        "{id}"
    );
    let json = env.ok(&["identity", "--state-dir", "st", "--json"]);
    let (doc, signer) = runner::trust::identity::verify_identity(json.trim().as_bytes()).unwrap();
    assert_eq!(signer, public);
    assert_eq!(doc.age_recipient, recipient);
    let stderr = env.fails(&["init", "--state-dir", "st"], 2, "already initialised");
    assert!(stderr.contains("runner identity"), "{stderr}");
    // The key is the one the first init made.
    assert_eq!(
        runner::primitives::keys::PublicKey::load(&env.path("st/runner.key.pub")).unwrap(),
        public
    );
}

#[test]
fn rejects_a_missing_state_directory_instead_of_starting_an_empty_one() {
    let env = Env::approved_job();
    let stderr = env.fails(
        &[
            "exec",
            "--cert",
            "cert.json",
            "--trust",
            "trust.toml",
            "--state-dir",
            "elsewhere",
            "--quiet",
            "job.toml",
        ],
        2,
        "is not initialised",
    );
    assert!(stderr.contains("runner init"), "{stderr}");
    assert!(!env.path("elsewhere").exists());
    assert!(!env.path("out").exists());
}

#[test]
fn rejects_a_state_directory_or_key_others_can_read() {
    let env = Env::approved_job();
    fs::set_permissions(env.path("state"), fs::Permissions::from_mode(0o755)).unwrap();
    let stderr = env.fails(EXEC, 3, "is accessible by group or others (mode 755)");
    assert!(stderr.contains("chmod go-rwx"), "{stderr}");
    fs::set_permissions(env.path("state"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(
        env.path("state/runner.key"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    env.fails(EXEC, 3, "(mode 644)");
    assert!(!env.path("out").exists());
    // An owner's key too, as ssh refuses one.
    fs::set_permissions(
        env.path("state/runner.key"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    fs::set_permissions(
        env.path("keys/owner-a.key"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let stderr = env.fails(
        &[
            "cosign",
            "cert.json",
            "--key",
            "keys/owner-a.key",
            "--out",
            "x.json",
        ],
        3,
        "is accessible by group or others",
    );
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(!env.path("x.json").exists());
}

#[test]
fn rejects_output_dirs_that_aim_outside_a_fresh_directory_of_their_own() {
    let env = Env::approved_job();
    fs::create_dir(env.path("empty")).unwrap();
    std::os::unix::fs::symlink(env.path("empty"), env.path("link")).unwrap();
    std::os::unix::fs::symlink(env.path("nowhere"), env.path("dangling")).unwrap();
    for (output_dir, problem) in [
        ("state/out", "is inside the runner's state directory"),
        ("model/out", "is inside the model directory"),
        ("link", "is a symlink"),
        ("dangling", "is a symlink"),
        ("missing/out", "has no existing parent directory"),
        ("..", "names no directory"),
    ] {
        env.write(
            "job.toml",
            job_toml(2, 4, r#"["tokens"]"#).replace("\"out\"", &format!("\"{output_dir}\"")),
        );
        env.refusal(
            EXEC,
            2,
            &[&format!("job job.toml: output_dir {output_dir} {problem}")],
        );
        assert!(!env.path("state/out").exists() && !env.path("model/out").exists());
        assert_eq!(fs::read_dir(env.path("empty")).unwrap().count(), 0);
    }
    // An empty output_dir is an operational error, not a path: refused as such.
    env.write(
        "job.toml",
        job_toml(2, 4, r#"["tokens"]"#).replace("\"out\"", "\"\""),
    );
    env.refusal(EXEC, 2, &["`output_dir` is empty"]);
}

// ---- 4. rollback refused by version ----

#[test]
fn rejects_an_old_version_after_a_newer_one_ran_even_if_the_one_between_never_did() {
    let env = Env::approved_job();
    // v1 (cert.json) <- v2 <- v3.
    env.approve_both("v2.json", &["--supersedes", "cert.json"]);
    env.approve_both("v3.json", &["--supersedes", "v2.json"]);
    let inspect = env.ok(&["inspect", "v3.json"]);
    assert!(
        inspect.contains("lineage       gemma3 version 3"),
        "{inspect}"
    );
    env.ok(&env.exec_with_cert("v3.json"));
    fs::remove_dir_all(env.path("out")).unwrap();
    // v2 never ran here, so only the version can tell v1 is older.
    env.refused(
        EXEC,
        3,
        &["certificate is version 1 of lineage \"gemma3\", but this runner has admitted version 3"],
    );
    env.refused(
        &env.exec_with_cert("v2.json"),
        3,
        &["was superseded by certificate"],
    );
    env.ok(&env.exec_with_cert("v3.json"));
}

#[test]
fn a_pinned_minimum_protects_a_fresh_runner() {
    let env = Env::approved_job();
    env.approve_both("v2.json", &["--supersedes", "cert.json"]);
    let trust = fs::read_to_string(env.path("trust.toml")).unwrap();
    env.write(
        "trust.toml",
        format!("{trust}\n[min_version]\ngemma3 = 2\n"),
    );
    env.refused(
        EXEC,
        3,
        &["version 1 of lineage \"gemma3\", but the trust configuration requires at least version 2"],
    );
    env.fails(
        &["verify-cert", "cert.json"],
        3,
        "requires at least version 2",
    );
    env.ok(&["verify-cert", "v2.json"]);
    env.ok(&env.exec_with_cert("v2.json"));
    // A replacement stays in its lineage.
    env.approve_fails(
        "owner-a",
        "v3.json",
        &["--supersedes", "v2.json", "--lineage", "other"],
        2,
        "differs from the lineage gemma3",
    );
}

// ---- 5. every file read once, bounded, and only if regular ----

#[test]
fn rejects_devices_fifos_and_directories_without_reading_or_waiting() {
    let env = Env::approved_job();
    let t = Instant::now();
    env.refusal(
        &env.exec_with_cert("/dev/zero"),
        2,
        &["certificate /dev/zero is a device, not a regular file"],
    );
    assert!(std::process::Command::new("mkfifo")
        .arg(env.path("fifo"))
        .status()
        .unwrap()
        .success());
    for (key, what) in [("engine", "engine"), ("inputs", "inputs")] {
        let original = job_toml(2, 4, r#"["tokens"]"#);
        let line = original
            .lines()
            .find(|l| l.starts_with(&format!("{key} =")))
            .unwrap()
            .to_owned();
        env.write(
            "job.toml",
            original.replace(&line, &format!("{key} = \"fifo\"")),
        );
        env.refusal(
            EXEC,
            2,
            &[&format!("{what} fifo is a fifo, not a regular file")],
        );
    }
    env.write("job.toml", job_toml(2, 4, r#"["tokens"]"#));
    env.refusal(
        &env.exec_with_cert("state"),
        2,
        &["is a directory, not a regular file"],
    );
    let stderr = env.fails(
        &[
            "verify",
            "fifo",
            "--cert",
            "cert.json",
            "--runner-key",
            "state/runner.key.pub",
        ],
        2,
        "is a fifo",
    );
    assert!(!stderr.is_empty());
    assert!(t.elapsed() < Duration::from_secs(60), "something waited");
    assert!(!env.path("out").exists());
}

#[test]
fn rejects_an_engine_whose_call_graph_explodes_at_approve() {
    let env = Env::bare_job();
    env.write_model_fixture();
    // f0 calls f1 twice, f1 calls f2 twice, ... 40 deep: 2^40 built-in calls per step.
    let mut src = String::from("fn main(x) {\n    return f0(x);\n}\n");
    for i in 0..40 {
        src.push_str(&format!(
            "fn f{i}(x) {{\n    return add(f{n}(x), f{n}(x));\n}}\n",
            n = i + 1
        ));
    }
    src.push_str("fn f40(x) {\n    return add(x, x);\n}\n");
    env.write("engines/gemma3.eng", &src);
    let stderr = env.approve_fails(
        "owner-a",
        "cert.json",
        &[],
        2,
        "would make 2199023255551 built-in calls per step",
    );
    assert!(
        stderr.contains("more than the limit of 1000000"),
        "{stderr}"
    );
    assert!(!env.path("cert.json").exists());
}

// ---- 6. publishing leaves nothing behind, privately ----

#[test]
fn outputs_are_private_to_the_operator() {
    let env = Env::approved_job();
    env.ok(EXEC);
    assert_eq!(mode(&env.path("out")), 0o700);
    for f in ["outputs.jsonl", "receipt.json"] {
        assert_eq!(mode(&env.path(&format!("out/{f}"))), 0o600, "{f}");
    }
}

// ---- 7. smaller ones ----

#[test]
fn cosign_refuses_a_certificate_whose_signatures_do_not_check_out() {
    let env = Env::bare_job();
    env.write_model_fixture();
    env.approve("owner-a", "cert.json", &[]);
    // A signature flipped after signing: owner-b must not add theirs to it.
    let mut cert: Value = serde_json::from_str(&env.read("cert.json")).unwrap();
    let sig = cert["signatures"][0]["sig"].as_str().unwrap().to_owned();
    let first = if sig.starts_with('A') { "B" } else { "A" };
    let flipped = format!("{first}{}", &sig[1..]);
    cert["signatures"][0]["sig"] = flipped.into();
    env.write("bad.json", serde_json::to_vec(&cert).unwrap());
    let before = env.read("bad.json");
    env.fails(
        &["cosign", "bad.json", "--key", "keys/owner-b.key"],
        3,
        "does not verify",
    );
    assert_eq!(env.read("bad.json"), before);
    // A signature by a key trust.toml does not list cannot be checked, so it is refused too.
    env.keygen("stranger");
    env.cosign("cert.json", "owner-b");
    env.ok(&[
        "cosign",
        "cert.json",
        "--key",
        "keys/stranger.key",
        "--out",
        "three.json",
        "--trust",
        "trust.toml",
    ]);
    env.fails(
        &[
            "cosign",
            "three.json",
            "--key",
            "keys/owner-a.key",
            "--out",
            "four.json",
        ],
        3,
        "which is not an owner in the trust configuration",
    );
    assert!(!env.path("four.json").exists());
}

#[test]
fn the_receipt_binds_inputs_by_a_salted_commitment_the_owner_can_open() {
    let env = Env::approved_job();
    env.ok(EXEC);
    let receipt = env.verify_receipt("cert.json");
    let inputs = fs::read(env.path("inputs.jsonl")).unwrap();
    // Not the plain digest, which a guess of a small input would match.
    assert!(!receipt.to_string().contains(&Digest::of(&inputs).to_hex()));
    let verify = |inputs: &str| {
        vec![
            "verify".to_owned(),
            "out/receipt.json".into(),
            "--cert".into(),
            "cert.json".into(),
            "--runner-key".into(),
            "state/runner.key.pub".into(),
            "--inputs".into(),
            inputs.into(),
        ]
    };
    let args = verify("inputs.jsonl");
    let out = env.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("matches --inputs"), "{out}");
    env.write("other.jsonl", [&inputs[..], b"\n"].concat());
    let args = verify("other.jsonl");
    env.fails(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        3,
        "these are not the inputs that ran",
    );
}
