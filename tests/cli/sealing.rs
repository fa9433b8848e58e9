//! Sealed inputs and outputs, against the real `age` command-line tool (Debian's package;
//! scripts/test.sh installs it): files `age` writes are accepted, what the runner writes opens
//! with `age -d`, every way a sealed input can be wrong is refused before anything runs, and no
//! plaintext of an input or output is left on disk.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use runner::trust::receipt::{Commitment, INPUTS_COMMITMENT_CONTEXT, OUTPUTS_COMMITMENT_CONTEXT};
use serde_json::Value;

use crate::common::repo::root;
use crate::common::{job_toml, Env, EXEC};

/// Inputs with strings that must not appear anywhere once sealed.
const INPUTS: &str = "{\"id\": \"zq_in_one\", \"tokens\": [2, 17, 99, 4]}\n\
                      {\"id\": \"zq_in_two\", \"tokens\": [2, 300, 301]}\n";

fn tool(name: &str) -> PathBuf {
    let found = ["/usr/bin", "/usr/local/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!("the `{name}` tool is needed (apt-get install age; scripts/test.sh installs it)")
    })
}

/// Run a tool, expect success, return stdout.
fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `age-keygen -o path`; returns the recipient.
fn keygen(path: &Path) -> String {
    run(Command::new(tool("age-keygen")).arg("-o").arg(path));
    String::from_utf8(run(Command::new(tool("age-keygen")).arg("-y").arg(path)))
        .unwrap()
        .trim()
        .to_owned()
}

/// The data owner's side: the plaintext lives in its own directory, never the runner's.
struct Owner {
    dir: tempfile::TempDir,
}

impl Owner {
    fn new() -> Owner {
        let owner = Owner {
            dir: tempfile::tempdir().unwrap(),
        };
        fs::write(owner.dir.path().join("inputs.jsonl"), INPUTS).unwrap();
        owner
    }
    fn inputs(&self) -> PathBuf {
        self.dir.path().join("inputs.jsonl")
    }
    /// `age ARGS -o out inputs.jsonl`.
    fn seal(&self, args: &[&str], out: &Path) {
        run(Command::new(tool("age"))
            .args(args)
            .arg("-o")
            .arg(out)
            .arg(self.inputs()));
    }
}

/// A job under the shipped policy as it is (sealing required both ways), results sealed to the
/// recipients `keys/r1.age` and `keys/r2.age` (the second through a recipients file), and the
/// runner's recipient for the inputs.
fn sealed_env() -> (Env, String) {
    let env = Env::bare_job();
    env.copy_in(&root().join("policies/gemma3.json"), "policies/gemma3.json");
    env.write_model_fixture();
    let r1 = keygen(&env.path("keys/r1.age"));
    let r2 = keygen(&env.path("keys/r2.age"));
    env.write(
        "keys/recipients.txt",
        format!("# who reads the results\n{r2}\n"),
    );
    env.approve_both(
        "cert.json",
        &[
            "--recipient",
            &r1,
            "--recipients-file",
            "keys/recipients.txt",
        ],
    );
    let runner = recipient_of(&env, "state");
    env.write(
        "job.toml",
        job_toml(2, 4, r#"["tokens"]"#).replace("inputs.jsonl", "inputs.jsonl.age"),
    );
    (env, runner)
}

/// The age recipient of the runner whose state directory is `state`.
fn recipient_of(env: &Env, state: &str) -> String {
    env.ok(&["identity", "--state-dir", state, "--recipient"])
        .trim()
        .to_owned()
}

/// `age -d -i KEY FILE`.
fn age_decrypt(identity: &Path, file: &Path) -> Vec<u8> {
    run(Command::new(tool("age"))
        .arg("-d")
        .arg("-i")
        .arg(identity)
        .arg(file))
}

#[test]
fn inputs_sealed_by_age_run_and_outputs_open_with_age_for_every_recipient() {
    let (env, runner) = sealed_env();
    let owner = Owner::new();
    let other = keygen(&owner.dir.path().join("other.age"));
    fs::write(
        owner.dir.path().join("recipients.txt"),
        format!("{other}\n{runner}\n"),
    )
    .unwrap();
    let recipients = owner.dir.path().join("recipients.txt");
    let recipients = recipients.to_str().unwrap();
    let mut first: Option<Vec<u8>> = None;
    for (i, args) in [
        vec!["-r", runner.as_str()],
        vec!["-a", "-r", runner.as_str()],
        vec!["-R", recipients],
        vec!["-a", "-R", recipients],
    ]
    .into_iter()
    .enumerate()
    {
        owner.seal(&args, &env.path("inputs.jsonl.age"));
        let out = env.ok(EXEC);
        assert!(out.contains("ran 2 inputs"), "{args:?}: {out}");
        assert!(
            out.contains("wrote outputs.jsonl.age and receipt.json"),
            "{out}"
        );
        assert!(!env.path("out/outputs.jsonl").exists());
        let sealed = env.path("out/outputs.jsonl.age");
        let one = age_decrypt(&env.path("keys/r1.age"), &sealed);
        let two = age_decrypt(&env.path("keys/r2.age"), &sealed);
        assert_eq!(one, two);
        let lines: Vec<Value> = String::from_utf8(one.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["id"], "zq_in_one");
        // Greedy outputs do not depend on how the inputs were sealed.
        match &first {
            None => first = Some(one.clone()),
            Some(f) => assert_eq!(f, &one, "{args:?}"),
        }
        // The receipt binds the ciphertexts and commits to both plaintexts.
        let receipt = env.verify_receipt("cert.json");
        let f = &receipt["facts"];
        assert_eq!(
            f["sealed"],
            serde_json::json!({"inputs": true, "outputs": true})
        );
        let sealed_inputs = fs::read(env.path("inputs.jsonl.age")).unwrap();
        assert_eq!(
            f["inputs_ciphertext"],
            runner::primitives::digest::Digest::of(&sealed_inputs).to_hex()
        );
        let opens = |field: &Value, context: &str, bytes: &[u8]| {
            let c: Commitment = serde_json::from_value(field.clone()).unwrap();
            c.opens(context, bytes)
        };
        assert!(opens(
            &f["inputs"],
            INPUTS_COMMITMENT_CONTEXT,
            INPUTS.as_bytes()
        ));
        assert!(opens(
            &f["outputs_commitment"],
            OUTPUTS_COMMITMENT_CONTEXT,
            &one
        ));
        assert_eq!(receipt["subjects"][0]["name"], "outputs.jsonl.age");
        fs::rename(env.path("out"), env.path(&format!("out-{i}"))).unwrap();
    }
}

#[test]
fn verify_and_decrypt_open_the_sealed_outputs_for_a_recipient() {
    let (env, runner) = sealed_env();
    let owner = Owner::new();
    owner.seal(&["-r", &runner], &env.path("inputs.jsonl.age"));
    env.ok(EXEC);
    let base = [
        "verify",
        "out/receipt.json",
        "--cert",
        "cert.json",
        "--runner-key",
        "state/runner.key.pub",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let args = with(&["--identity", "keys/r1.age", "--inputs", "inputs.jsonl.age"]);
    let out = env.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.contains("plaintext matches") && out.contains("matches --inputs"),
        "{out}"
    );
    // The owner checks the plaintext they hold.
    let plain = owner.inputs();
    let args = with(&["--inputs", plain.to_str().unwrap()]);
    env.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // Someone not named cannot open them.
    let stranger = keygen(&env.path("keys/stranger.age"));
    assert!(stranger.starts_with("age1"));
    let args = with(&["--identity", "keys/stranger.age"]);
    env.fails(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        3,
        "none of them age1",
    );
    // `runner decrypt` gives what `age -d` gives.
    let decrypted = env.ok(&[
        "decrypt",
        "--identity",
        "keys/r2.age",
        "out/outputs.jsonl.age",
    ]);
    assert_eq!(
        decrypted.as_bytes(),
        age_decrypt(&env.path("keys/r2.age"), &env.path("out/outputs.jsonl.age"))
    );
}

#[test]
fn rejects_every_sealed_input_this_runner_cannot_open() {
    let (env, runner) = sealed_env();
    let owner = Owner::new();
    // To another runner.
    let other = keygen(&owner.dir.path().join("other.age"));
    owner.seal(&["-r", &other], &env.path("inputs.jsonl.age"));
    env.refused(
        EXEC,
        3,
        &[
            &format!("inputs.jsonl.age cannot be opened: it is encrypted to 1 X25519 recipient, none of them {runner}"),
            &format!("age -r {runner}"),
        ],
    );
    // With a passphrase (age's scrypt recipient, written by the crate: `age -p` needs a terminal).
    let passphrase = {
        let enc = age::Encryptor::with_user_passphrase(age::secrecy::SecretString::from(
            "correct horse".to_owned(),
        ));
        let mut out = Vec::new();
        let mut w = enc.wrap_output(&mut out).unwrap();
        std::io::Write::write_all(&mut w, INPUTS.as_bytes()).unwrap();
        w.finish().unwrap();
        out
    };
    env.write("inputs.jsonl.age", &passphrase);
    env.refused(
        EXEC,
        3,
        &["encrypted with a passphrase", "not with a passphrase"],
    );
    // Truncated, and altered.
    owner.seal(&["-r", &runner], &env.path("inputs.jsonl.age"));
    let good = fs::read(env.path("inputs.jsonl.age")).unwrap();
    env.write("inputs.jsonl.age", &good[..good.len() - 10]);
    env.refused(EXEC, 3, &["is damaged", "send it again"]);
    let mut altered = good.clone();
    let at = altered.len() - 20;
    altered[at] ^= 0x40;
    env.write("inputs.jsonl.age", &altered);
    env.refused(EXEC, 3, &["is damaged"]);
    // Plaintext, which the shipped policy refuses.
    fs::copy(owner.inputs(), env.path("inputs.jsonl.age")).unwrap();
    env.refused(
        EXEC,
        3,
        &[
            "are not sealed, and the policy requires sealed inputs",
            "age -r",
        ],
    );
    // None of these left plaintext in the audit log.
    let log = env.read("state/audit.jsonl");
    assert!(!log.contains("zq_in_"), "{log}");
}

#[test]
fn rejects_a_sealed_file_whose_header_holds_hundreds_of_recipients_too_many() {
    let (env, runner) = sealed_env();
    let owner = Owner::new();
    // The real `age` writes a stanza for each of 700 recipients, the runner's last: about 70 KB
    // of header, which the age crate parses in time quadratic in its length.
    let mut list: Vec<String> = (0..700)
        .map(|_| age::x25519::Identity::generate().to_public().to_string())
        .collect();
    list.push(runner.clone());
    let file = owner.dir.path().join("many.txt");
    fs::write(&file, list.join("\n") + "\n").unwrap();
    owner.seal(
        &["-R", file.to_str().unwrap()],
        &env.path("inputs.jsonl.age"),
    );
    env.refused(
        EXEC,
        3,
        &[
            "inputs.jsonl.age cannot be opened: its header is longer than 65536 bytes",
            "at most a few hundred others",
        ],
    );
    // `runner decrypt` refuses it too, and writes nothing.
    env.fails(
        &[
            "decrypt",
            "--identity",
            "keys/r1.age",
            "--out",
            "plain.jsonl",
            "inputs.jsonl.age",
        ],
        3,
        "its header is longer than 65536 bytes",
    );
    assert!(!env.path("plain.jsonl").exists());
}

#[test]
fn approve_refuses_a_certificate_without_recipients_when_outputs_must_be_sealed() {
    let (env, _) = sealed_env();
    let stderr = env.approve_fails(
        "owner-a",
        "plain.json",
        &[],
        2,
        "the policy requires sealed outputs, but the certificate names no recipients",
    );
    assert!(stderr.contains("--recipient age1"), "{stderr}");
    assert!(!env.path("plain.json").exists());
    // The owners see who may read the results, and a change of them on review.
    let inspect = env.ok(&["inspect", "cert.json"]);
    assert_eq!(
        inspect.matches("recipient     age1").count(),
        2,
        "{inspect}"
    );
    let newcomer = keygen(&env.path("keys/r3.age"));
    let review = env.ok(&[
        "review",
        "--cert",
        "cert.json",
        "--engine",
        "engines/gemma3.eng",
        "--recipient",
        &newcomer,
    ]);
    assert!(review.contains("recipients        CHANGED"), "{review}");
    assert!(
        review.contains(&format!("added         {newcomer}")),
        "{review}"
    );
    assert!(review.contains("re-approval needed"), "{review}");
}

/// Every file under `dir` holding `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if fs::read(&p)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                found.push(p);
            }
        }
    }
    found
}

#[test]
fn a_sealed_run_leaves_no_plaintext_in_state_outputs_or_temp() {
    let (env, runner) = sealed_env();
    let owner = Owner::new();
    owner.seal(&["-r", &runner], &env.path("inputs.jsonl.age"));
    let tmp = env.path("tmp");
    env.mkdir("tmp");
    let out = env.command(EXEC).env("TMPDIR", &tmp).output();
    assert!(out.status.success());
    let plain = age_decrypt(&env.path("keys/r1.age"), &env.path("out/outputs.jsonl.age"));
    let outputs = String::from_utf8(plain).unwrap();
    let mut needles: Vec<String> = INPUTS.lines().map(str::to_owned).collect();
    needles.extend(["zq_in_one".into(), "zq_in_two".into(), "[2,300,301]".into()]);
    needles.extend(outputs.lines().map(str::to_owned));
    for line in outputs.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        needles.push(v["tokens"].to_string());
    }
    for needle in &needles {
        for dir in [env.path("state"), env.path("out"), tmp.clone()] {
            let found = files_holding(&dir, needle.as_bytes());
            assert!(found.is_empty(), "{needle:?} in {found:?}");
        }
    }
    assert_eq!(
        fs::read_dir(&tmp).unwrap().count(),
        0,
        "the run wrote to TMPDIR"
    );
}

#[test]
fn the_owner_flow_attest_verify_seal_exec_verify_says_no_hardware_throughout() {
    let (env, _) = sealed_env();
    let none = env.path("no-tsm").display().to_string();
    let attested = env.ok(&[
        "attest",
        "--state-dir",
        "state",
        "--tsm-root",
        &none,
        "--allow-no-hardware",
        "--nonce",
        "0badc0de",
        "--out",
        "evidence.json",
    ]);
    assert!(attested.contains("evidence WITHOUT hardware"), "{attested}");
    // The owner learns the recipient from the evidence, not from the operator's word.
    let verdict: Value = serde_json::from_str(&env.ok(&[
        "verify-attestation",
        "evidence.json",
        "--nonce",
        "0badc0de",
        "--json",
    ]))
    .unwrap();
    assert_eq!(verdict["hardware"], "none");
    assert_eq!(verdict["nonce_checked"], true);
    let recipient = verdict["age_recipient"].as_str().unwrap().to_owned();
    let owner = Owner::new();
    owner.seal(&["-r", &recipient], &env.path("inputs.jsonl.age"));
    let out = env.ok(EXEC);
    assert!(out.contains("ran 2 inputs"), "{out}");
    let verified = env.ok(&[
        "verify",
        "out/receipt.json",
        "--cert",
        "cert.json",
        "--runner-key",
        "state/runner.key.pub",
    ]);
    assert!(
        verified.contains("attestation  none (the certificate does not require it)"),
        "{verified}"
    );
}

#[test]
fn two_runners_run_the_shards_of_sealed_inputs_and_the_sealed_outputs_merge_unopened() {
    let (env, first) = sealed_env();
    env.init_state("state2");
    let second = recipient_of(&env, "state2");
    // One file for both pods: age encrypts to several recipients.
    let owner = Owner::new();
    owner.seal(
        &["-r", &first, "-r", &second],
        &env.path("inputs.jsonl.age"),
    );
    for (k, state) in [(0, "state"), (1, "state2")] {
        let shard = format!("{k}/2");
        let mut args = EXEC.to_vec();
        args[6] = state;
        args.splice(1..1, ["--shard", shard.as_str()]);
        let out = env.ok(&args);
        assert!(out.contains(&format!("shard {k} of 2")), "{out}");
    }
    env.write("keys.txt", "state/runner.key.pub\nstate2/runner.key.pub\n");
    let merge = [
        "merge",
        "--cert",
        "cert.json",
        "--runner-keys",
        "keys.txt",
        "--out",
        "merged",
        "out/shard-1-of-2",
        "out/shard-0-of-2",
    ];
    env.ok(&merge);
    assert!(
        !env.path("merged/outputs.jsonl").exists(),
        "nothing was opened"
    );
    let mut lines = Vec::new();
    for k in 0..2 {
        let sealed = env.path(&format!("merged/shard-{k}-of-2.outputs.jsonl.age"));
        assert_eq!(
            fs::read(&sealed).unwrap(),
            fs::read(env.path(&format!("out/shard-{k}-of-2/outputs.jsonl.age"))).unwrap()
        );
        let plain = String::from_utf8(age_decrypt(&env.path("keys/r1.age"), &sealed)).unwrap();
        lines.extend(
            plain
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].clone()),
        );
    }
    assert_eq!(lines, ["zq_in_one", "zq_in_two"]);
    let verified = env.ok(&[
        "verify",
        "merged",
        "--cert",
        "cert.json",
        "--runner-keys",
        "keys.txt",
    ]);
    assert!(verified.contains("2 shards"), "{verified}");
    // Only one runner's key trusted: the other shard is foreign.
    env.write("one.txt", "state/runner.key.pub\n");
    env.fails(
        &[
            "verify",
            "merged",
            "--cert",
            "cert.json",
            "--runner-keys",
            "one.txt",
        ],
        3,
        "which is not one of the --runner-keys",
    );
}
