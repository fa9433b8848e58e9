//! Attestation from the owner's and the operator's side: `attest` and `verify-attestation`,
//! certificates that require attestation, `exec` under them (with configfs-tsm played by the
//! test, `common::tsm`), and `verify` of the receipt's evidence.

use std::path::Path;

use runner::attestation::evidence::{attest, Source, Subject};
use runner::attestation::tsm::TsmAccess;
use runner::job::exec::{exec, ExecRequest};
use runner::job::state::StateDir;
use runner::trust::receipt::RunnerIdentity;
use serde_json::Value;

use crate::common::tsm::{fixture, root, snp_report, tdx_kernel, FakeKernel};
use crate::common::{Env, TestCommand};

/// The sample quote's MRTD: what a certificate pins to accept the fake kernel's reports.
const SAMPLE_MRTD: &str = "91eb2b44d141d4ece09f0c75c2c53d247a3c68edd7fafe8a3520c942a604a407de03ae6dc5f87f27428b2538873118b7";

/// An approved job whose certificate `cert-att.json` requires `hardware` with the measurement
/// `pin` (`NAME=HEX`).
fn attested_job(hardware: &str, pin: &str) -> Env {
    let env = Env::bare_job();
    env.write_model_fixture();
    env.approve_both(
        "cert-att.json",
        &["--require-attestation", hardware, "--measurement", pin],
    );
    env.write_inputs(&crate::common::fixture_prompts());
    env.write_job(2, 8, r#"["tokens"]"#);
    env
}

fn tdx_job(mrtd: &str) -> Env {
    attested_job("tdx", &format!("mrtd={mrtd}"))
}

/// A job that requires SEV-SNP with the measurement [`snp_kernel`]'s reports carry.
fn snp_job() -> Env {
    attested_job("sev-snp", &format!("measurement={}", "11".repeat(48)))
}

fn snp_kernel() -> FakeKernel {
    FakeKernel::new("sev_guest", |inblob| snp_report(inblob, 0x11, 0x30000))
}

/// `runner::job::exec` of `job.toml` under `cert-att.json`, asking `kernel` for evidence.
fn exec_on(env: &Env, kernel: &FakeKernel) -> Result<(), runner::job::exec::ExecError> {
    exec_shard_on(env, kernel, None)
}

fn exec_shard_on(
    env: &Env,
    kernel: &FakeKernel,
    shard: Option<runner::job::shard::Shard>,
) -> Result<(), runner::job::exec::ExecError> {
    let state = StateDir::open(&env.path("state")).unwrap();
    let (cert, job, trust) = (
        env.path("cert-att.json"),
        env.path("job.toml"),
        env.path("trust.toml"),
    );
    let request = ExecRequest {
        cert: &cert,
        job: &job,
        trust: &trust,
        state: &state,
        tsm: TsmAccess {
            fs: kernel,
            root: root(),
        },
        shard,
        now: time::OffsetDateTime::now_utc(),
    };
    exec(&request, &mut |_| {}).map(|_| ())
}

const VERIFY: &[&str] = &[
    "verify",
    "out/receipt.json",
    "--cert",
    "cert-att.json",
    "--runner-key",
    "state/runner.key.pub",
];

#[test]
fn exec_under_a_tdx_certificate_publishes_evidence_the_receipt_binds() {
    let env = tdx_job(SAMPLE_MRTD);
    let inspect = env.ok(&["inspect", "cert-att.json"]);
    assert!(
        inspect.contains("attestation   tdx required, 1 measurements pinned"),
        "{inspect}"
    );
    let kernel = tdx_kernel();
    exec_on(&env, &kernel).unwrap();
    assert_eq!(kernel.inblobs.borrow().len(), 1);
    assert!(env.path("out/attestation.json").is_file());
    let receipt: Value = {
        let envelope = env.envelope("out/receipt.json");
        serde_json::from_slice(&envelope.payload).unwrap()
    };
    let recorded = &receipt["predicate"]["attestation"];
    assert_eq!(recorded["hardware"], "tdx");
    assert_eq!(recorded["evidence"], "attestation.json");
    let subjects: Vec<&str> = receipt["subject"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["attestation.json", "outputs.jsonl"]);

    // The hardware did not sign the fake kernel's quote: verify needs the collateral, and then
    // refuses the signature.
    let stderr = env.fails(VERIFY, 2, "which was not given");
    assert!(stderr.contains("hint: pass --collateral FILE"), "{stderr}");
    env.write("collateral.json", fixture("tdx_quote_collateral.json"));
    let mut with = VERIFY.to_vec();
    with.extend(["--collateral", "collateral.json"]);
    env.fails(
        &with,
        3,
        "the TDX quote does not verify against Intel's root CA and the collateral",
    );

    // An edited byte of the evidence is caught as a changed subject.
    let mut bytes = std::fs::read(env.path("out/attestation.json")).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    env.write("out/attestation.json", bytes);
    env.fails(&with, 3, "attestation.json");
}

#[test]
fn exec_refuses_a_machine_whose_measurement_differs_and_writes_nothing() {
    let env = tdx_job(&"00".repeat(48));
    let kernel = tdx_kernel();
    let err = exec_on(&env, &kernel).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "this machine does not meet the certificate's attestation requirement: measurement \
             mrtd is {SAMPLE_MRTD}, and the certificate requires {}",
            "00".repeat(48)
        )
    );
    use runner::error::{Diagnose, Exit};
    assert_eq!(err.exit(), Exit::Refused);
    assert!(!env.path("out").exists());
    assert_eq!(env.audit()["last"]["outcome"], "refused");
}

#[test]
fn exec_without_configfs_tsm_refuses_a_certificate_that_requires_it() {
    let env = tdx_job(SAMPLE_MRTD);
    let mut args = env.exec_with_cert("cert-att.json");
    let none = env.path("no-tsm").display().to_string();
    args.splice(1..1, ["--tsm-root", none.as_str()]);
    let stderr = env.fails(
        &args,
        3,
        &format!(
            "the certificate requires tdx attestation, and there is no configfs-tsm report \
             interface at {none}/report"
        ),
    );
    assert!(stderr.contains("--allow-no-hardware"), "{stderr}");
    assert!(!env.path("out").exists());
}

#[test]
fn approve_refuses_a_measurement_the_hardware_does_not_have() {
    let env = Env::bare_job();
    env.write_model_fixture();
    let stderr = env.approve_fails(
        "owner-a",
        "cert.json",
        &[
            "--require-attestation",
            "tdx",
            "--measurement",
            "measurement=00",
        ],
        2,
        "--measurement: tdx has no measurement \"measurement\" (it has mrtd, rtmr0",
    );
    assert!(!env.path("cert.json").exists(), "{stderr}");
    env.approve_fails(
        "owner-a",
        "cert.json",
        &["--measurement", &format!("mrtd={SAMPLE_MRTD}")],
        2,
        "--require-attestation",
    );
    env.approve_fails(
        "owner-a",
        "cert.json",
        &["--require-attestation", "none"],
        2,
        "\"none\" is not tdx or sev-snp",
    );
    assert!(!env.path("cert.json").exists());
}

#[test]
fn attest_without_hardware_fails_unless_allowed_and_then_says_so_everywhere() {
    let env = Env::new();
    env.init_state("state");
    let none = env.path("no-tsm").display().to_string();
    let base = ["attest", "--state-dir", "state", "--tsm-root", &none];
    let mut args = base.to_vec();
    args.extend(["--out", "evidence.json", "--nonce", "c0ffee"]);
    env.fails(
        &args,
        2,
        &format!("there is no configfs-tsm report interface at {none}/report"),
    );
    assert!(!env.path("evidence.json").exists());

    args.push("--allow-no-hardware");
    let out = env.ok(&args);
    assert!(out.contains("evidence WITHOUT hardware"), "{out}");
    let recipient = env.ok(&["identity", "--state-dir", "state", "--recipient"]);
    let shown = env.ok(&["verify-attestation", "evidence.json", "--nonce", "c0ffee"]);
    assert!(
        shown.contains("hardware none: NO HARDWARE REPORT"),
        "{shown}"
    );
    assert!(shown.contains("nonce c0ffee (matches yours)"), "{shown}");
    assert!(
        shown.contains(&format!("age recipient {}", recipient.trim())),
        "{shown}"
    );
    let json: Value =
        serde_json::from_str(&env.ok(&["verify-attestation", "evidence.json", "--json"])).unwrap();
    assert_eq!(json["hardware"], "none");
    assert_eq!(json["signature"]["checked"], false);
    env.fails(
        &["verify-attestation", "evidence.json", "--nonce", "c0ffef"],
        3,
        "the evidence was made for nonce c0ffee, not c0ffef",
    );
}

#[test]
fn verify_attestation_checks_a_real_quote_and_refuses_someone_elses_user_data() {
    let env = Env::new();
    env.init_state("state");
    let state = StateDir::open(&env.path("state")).unwrap();
    let key = state.signing_key().unwrap();
    let recipient = state.recipient().unwrap();
    let runner = RunnerIdentity::current().unwrap();
    let subject = Subject {
        key: &key,
        age_recipient: &recipient,
        runner_digest: runner.executable_digest,
        runner_version: &runner.version,
    };
    // The real sample quote, whatever user data was asked for.
    let kernel = FakeKernel::new("tdx_guest", |_| fixture("tdx_quote"));
    let bytes = attest(&subject, b"", Source::Tsm(&kernel, root())).unwrap();
    env.write("evidence.json", bytes);
    env.write("collateral.json", fixture("tdx_quote_collateral.json"));
    let check = [
        "verify-attestation",
        "evidence.json",
        "--collateral",
        "collateral.json",
        "--at",
        "2025-07-01T00:00:00Z",
    ];
    env.fails(
        &check,
        3,
        "the report's user data is not the hash of this document's keys, runner digest and \
         nonce: the report was made for someone else's data",
    );
    // After the collateral expired, the chain itself is refused first.
    let mut late = check.to_vec();
    late[5] = "2025-08-01T00:00:00Z";
    env.fails(&late, 3, "TCBInfo expired");
    env.fails(&check[..2], 2, "which was not given");
    assert!(Path::new(&env.path("evidence.json")).exists());

    // A real SEV-SNP report, checked with its VCEK given by the verifier: AMD signed it, and
    // its user data is someone else's.
    let kernel = FakeKernel::new("sev_guest", |_| fixture("snp_milan_report.bin"));
    let bytes = attest(&subject, b"", Source::Tsm(&kernel, root())).unwrap();
    env.write("snp.json", bytes);
    env.write("vcek.pem", fixture("snp_milan_vcek.pem"));
    env.fails(
        &["verify-attestation", "snp.json", "--vcek", "vcek.pem"],
        3,
        "the report was made for someone else's data",
    );
    env.write("other.der", fixture("snp_genoa_vcek.der"));
    env.fails(
        &["verify-attestation", "snp.json", "--vcek", "other.der"],
        3,
        "the SEV-SNP report's signature does not verify with the VCEK",
    );
}

#[test]
fn exec_under_an_snp_certificate_verifies_and_says_the_signature_was_not_checked() {
    let env = snp_job();
    let kernel = snp_kernel();
    exec_on(&env, &kernel).unwrap();
    let out = env.ok(VERIFY);
    assert!(
        out.contains("hardware sev-snp (sev_guest): report signature NOT CHECKED"),
        "{out}"
    );
    assert!(
        out.contains(&format!("measurement    {}", "11".repeat(48))),
        "{out}"
    );
    assert!(
        out.contains("(matches yours)"),
        "the run's nonce was checked: {out}"
    );
}

#[test]
fn the_demo_walks_the_owner_flow_and_marks_the_missing_hardware() {
    let env = Env::new();
    let none = env.path("no-tsm");
    let out = env
        .command(&["demo", "--builtin", "--dir", "demo"])
        .env(runner::attestation::tsm::TSM_ROOT_ENV, &none)
        .ok();
    for needle in [
        "6. attest      the runner attests: NO HARDWARE on this machine",
        "nonce matches; the owner seals to the recipient it names",
        "no hardware evidence in the receipt (cert.json requires none)",
        "10. guard",
        "11. guard",
        "--out evidence.json --allow-no-hardware\n",
        "$ runner exec --cert cert.json --trust trust.toml --state-dir state job.toml\n",
    ] {
        assert!(out.contains(needle), "{needle:?} in {out}");
    }
    let evidence = env.ok(&["verify-attestation", "demo/evidence.json"]);
    assert!(evidence.contains("NO HARDWARE REPORT"), "{evidence}");
}

#[test]
fn the_demo_leaves_what_it_says_and_prints_each_step_as_a_command() {
    let env = Env::new();
    let out = env
        .command(&["demo", "--builtin", "--dir", "demo"])
        .env(runner::attestation::tsm::TSM_ROOT_ENV, env.path("no-tsm"))
        .ok();
    // Every step that has a command prints it, right under its line.
    let lines: Vec<&str> = out.lines().collect();
    for step in ["1.", "4.", "5.", "6.", "7.", "8.", "9.", "10.", "11."] {
        let at = lines
            .iter()
            .position(|l| l.starts_with(&format!("{step} ")))
            .unwrap_or_else(|| panic!("no step {step} in {out}"));
        let next_step = lines[at + 1..]
            .iter()
            .position(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()) || l.is_empty())
            .map_or(lines.len(), |n| at + 1 + n);
        assert!(
            lines[at..next_step]
                .iter()
                .any(|l| l.trim_start().starts_with("$ runner ")
                    || l.trim_start().starts_with("$ age")
                    || l.trim_start().starts_with("$ echo") && l.contains("; runner ")),
            "step {step} prints no command: {out}"
        );
    }
    // The accepted run's outputs are where step 8 says, and the printed verify command, run
    // from the demo's directory, checks them and the inputs that ran.
    assert!(
        out.contains("wrote out/outputs.jsonl.age (sealed) and out/receipt.json"),
        "{out}"
    );
    let verify = lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("$ runner verify "))
        .unwrap_or_else(|| panic!("no verify command in {out}"));
    let mut args = vec!["verify"];
    args.extend(verify.split(' '));
    args.extend(["--inputs", "inputs.jsonl.age"]);
    let mut cmd = TestCommand::new();
    cmd.args(&args).cmd().current_dir(env.path("demo"));
    let verified = cmd.ok();
    assert!(verified.contains("verified"), "{verified}");
    // Nothing it said it wrote is gone, and nothing is left that it did not mention: the
    // refused runs wrote nothing, and the approved engine is back in place.
    assert!(!env.path("demo/results").exists());
    assert!(!env.path("demo/out-edited-engine").exists());
    assert!(!env.path("demo/out-other-runner").exists());
    assert_eq!(
        env.read("demo/engines/gemma3.eng"),
        std::fs::read_to_string(crate::common::repo::root().join("engines/gemma3.eng")).unwrap()
    );
    assert!(
        out.contains("engines/gemma3.eng is the approved engine again"),
        "{out}"
    );
    assert!(out.contains("the accepted run's outputs in out/"), "{out}");
}

#[test]
fn a_merge_of_attested_shards_rechecks_each_shards_evidence() {
    let env = snp_job();
    let kernel = snp_kernel();
    for k in 0..2 {
        let shard = runner::job::shard::Shard::new(k, 2).unwrap();
        exec_shard_on(&env, &kernel, Some(shard)).unwrap();
    }
    env.write("keys.txt", "state/runner.key.pub\n");
    let merge = [
        "merge",
        "--cert",
        "cert-att.json",
        "--runner-keys",
        "keys.txt",
        "--out",
        "merged",
        "out",
    ];
    env.ok(&merge);
    assert!(env.path("merged/shard-1-of-2.attestation.json").is_file());
    let verify = [
        "verify",
        "merged",
        "--cert",
        "cert-att.json",
        "--runner-keys",
        "keys.txt",
    ];
    let out = env.ok(&verify);
    assert!(out.contains("shard 1 attestation:"), "{out}");
    assert!(out.contains("report signature NOT CHECKED"), "{out}");
    // One shard's evidence swapped for the other's: its digest is not what its receipt binds.
    std::fs::copy(
        env.path("merged/shard-0-of-2.attestation.json"),
        env.path("merged/shard-1-of-2.attestation.json"),
    )
    .unwrap();
    env.fails(
        &verify,
        3,
        "is not the attestation.json shard 1's receipt binds",
    );
}
