//! `runner demo`: the whole flow, end to end, in a fresh directory, with the same library calls
//! the other subcommands make: keys, a trust configuration, a deterministic random-weight Gemma 3
//! model, the restrict check, an owner's certificate naming a recipient, a job on private
//! prompts sealed to the runner, `exec`, receipt verification and the recipient opening the
//! sealed outputs, and finally two refusals (the engine edited after approval, inputs sealed to
//! another runner). Each step prints the `runner` command that does the same, to replay it by
//! hand, and the directory is left as the lines say: the accepted run's outputs in `out/`, the
//! approved engine in place, the inputs that ran in `inputs.jsonl.age`.

use std::path::{Path, PathBuf};

use super::{print, CliError, CliResult};
use crate::attestation::tsm::{tsm_root, Kernel, TsmAccess, TsmError};
use crate::attestation::{
    attest, read_evidence, verify_evidence, AttestationError, Check, EvidenceError,
    HardwareSignature, Source,
};
use crate::error::{Diagnose, Exit};
use crate::job::exec::ExecRequest;
use crate::job::run::{RunResult, RECEIPT_FILE};
use crate::job::state::StateDir;
use crate::model::digest::model_digest;
use crate::model::synthetic::SyntheticSpec;
use crate::model::tokenizer::{cache_dir, cached_tokenizer_path};
use crate::primitives::atomic_file::{write_atomic, Overwrite};
use crate::primitives::digest::Digest;
use crate::primitives::keys::{write_key_pair, PublicKey, SecretKey};
use crate::primitives::time::Timestamp;
use crate::restrict::policy::Policy;
use crate::restrict::{check, Checked};
use crate::sealing::{open, seal, SealKey};
use crate::trust::certificate::{build_payload, Certificate, EngineFacts, Terms};
use crate::trust::config::TrustConfig;
use crate::trust::receipt::{verify_receipt, OUTPUTS_COMMITMENT_CONTEXT};

const ENGINE: &str = include_str!("../../engines/gemma3.eng");
/// The file `scripts/fetch_model.sh gemma3-270m` caches under `models/`.
const REAL_MODEL: &str = "gemma-3-270m-q4_k_m.gguf";
const POLICY: &str = include_str!("../../policies/gemma3.json");

/// Flags of `runner demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where to build the demo (must not exist or be empty); default: a new directory under the
    /// system's temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The model to run: a .gguf file or a checkpoint directory. Default: the real Gemma 3 270M
    /// when `scripts/fetch_model.sh gemma3-270m` has cached it (and the tokenizer), else a
    /// built-in random-weight model.
    #[arg(long, value_name = "DIR|FILE.gguf", conflicts_with = "builtin")]
    pub model: Option<PathBuf>,
    /// Use the built-in random-weight model even when the real one is cached.
    #[arg(long)]
    pub builtin: bool,
}

#[derive(Debug, thiserror::Error)]
enum DemoError {
    #[error("demo directory {0} exists and is not empty")]
    DirNotEmpty(PathBuf),
    #[error("demo: cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("demo: a job the runner must refuse was accepted; the guard failed")]
    GuardFailed,
    #[error("demo: the sealed outputs did not open to what the receipt commits to")]
    Unsealed,
    #[error("demo: the system random number generator failed")]
    NoRandomness,
}

impl Diagnose for DemoError {
    fn exit(&self) -> Exit {
        match self {
            DemoError::DirNotEmpty(_) => Exit::BadInput,
            _ => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            DemoError::DirNotEmpty(_) => Some("pass --dir with a new directory".into()),
            _ => None,
        }
    }
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), DemoError> {
    std::fs::write(path, bytes).map_err(|source| DemoError::Io {
        path: path.to_owned(),
        source,
    })
}

fn fresh_dir(arg: Option<PathBuf>) -> Result<PathBuf, DemoError> {
    let dir = arg.unwrap_or_else(|| {
        let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
        std::env::temp_dir().join(format!("runner-demo-{stamp}-{}", std::process::id()))
    });
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(DemoError::DirNotEmpty(dir));
    }
    for sub in ["keys", "engines", "policies", "model"] {
        let p = dir.join(sub);
        std::fs::create_dir_all(&p).map_err(|source| DemoError::Io { path: p, source })?;
    }
    Ok(dir)
}

/// The command line that does what a step just did, printed under it.
fn replay(command: &str) -> CliResult {
    print(&format!("              $ {command}\n"))
}

/// `path` as a replayed command line spells it: quoted when it holds anything a shell would
/// split or expand.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c));
    if plain && !text.is_empty() {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The flags every `runner exec` of the demo runs with (its state directory, its trust file).
const EXEC_FLAGS: &str = "--cert cert.json --trust trust.toml --state-dir state";

/// Build and run the demo: each step prints one numbered line.
pub fn demo(args: DemoArgs) -> CliResult {
    let started = std::time::Instant::now();
    let dir = fresh_dir(args.dir)?;
    print(&format!(
        "runner demo: the whole flow, in {} (each `$` line is the command that does the \
         same step by hand, from that directory)\n\n",
        dir.display()
    ))?;
    let keys = make_keys(&dir)?;
    make_trust(&dir)?;
    let model = match (args.model, args.builtin) {
        (Some(path), _) => real_model(path)?,
        (None, false) => match cached_real_model() {
            Some(path) => real_model(path)?,
            None => {
                print(
                    "   note        the real Gemma 3 270M is not cached (scripts/fetch_model.sh \
                     gemma3-270m fetches it, with the tokenizer); using the built-in random-weight \
                     model\n",
                )?;
                make_model(&dir)?
            }
        },
        (None, true) => make_model(&dir)?,
    };
    let (policy, checked) = check_engine(&dir)?;
    let cert = approve(&dir, &keys, policy, &checked, &model)?;
    let tsm_root = tsm_root(None);
    let recipient = attest_runner(&dir, &keys, &tsm_root)?;
    write_job(&dir, &model, &recipient)?;
    let (cert_path, job_path, trust_path) = (
        dir.join("cert.json"),
        dir.join("job.toml"),
        dir.join("trust.toml"),
    );
    let request = ExecRequest {
        cert: &cert_path,
        job: &job_path,
        trust: &trust_path,
        state: &keys.state,
        tsm: TsmAccess {
            fs: &Kernel,
            root: &tsm_root,
        },
        shard: None,
        now: time::OffsetDateTime::now_utc(),
    };
    let result = exec(&request)?;
    verify(&dir, &result, &cert, &keys)?;
    guard(&dir, &model, &request)?;
    print(&format!(
        "\ndone in {:.1} s; everything is in {} (the accepted run's outputs in out/, the \
         audit log in state/audit.jsonl: `runner audit list --state-dir state`)\n",
        started.elapsed().as_secs_f64(),
        dir.display()
    ))
}

struct Keys {
    owner: SecretKey,
    /// The runner's public key, from its state directory.
    runner: PublicKey,
    state: StateDir,
    /// The recipient who may read the results (an age identity, as `age-keygen` makes).
    recipient: SealKey,
}

/// Step 1: an owner's signing key, the recipient's age key, and the runner's state directory
/// with its own signing key and age identity (`runner init`).
fn make_keys(dir: &Path) -> Result<Keys, CliError> {
    let owner = SecretKey::generate()?;
    write_key_pair(&owner, &dir.join("keys/owner.key"), Overwrite::Refuse)?;
    let recipient = SealKey::generate();
    write_atomic(
        &dir.join("keys/recipient.age"),
        recipient
            .to_file_text(&Timestamp::now().to_rfc3339().unwrap_or_default())
            .as_bytes(),
        0o600,
        Overwrite::Refuse,
    )?;
    let (state, runner) = StateDir::init(&dir.join("state"))?;
    print(&format!(
        "1. keys        owner {} (keys/owner.key); recipient {} (keys/recipient.age); runner {} \
         and {} (`runner init`: state/, mode 0700)\n",
        owner.key_id().short(),
        short_recipient(&recipient.recipient()),
        runner.key_id().short(),
        short_recipient(&state.recipient()?),
    ))?;
    replay("runner keygen --out keys/owner.key")?;
    replay("age-keygen -o keys/recipient.age")?;
    replay("runner init --state-dir state")?;
    Ok(Keys {
        owner,
        runner,
        state,
        recipient,
    })
}

/// An age recipient's first characters, for one-line messages.
fn short_recipient(r: &str) -> String {
    format!("{}...", r.chars().take(16).collect::<String>())
}

/// 2. The operator's trust configuration.
fn make_trust(dir: &Path) -> Result<TrustConfig, CliError> {
    write(
        &dir.join("trust.toml"),
        "# The operator's trust configuration: whose approvals count.\n\
         required_signatures = 1\nowners = [\"keys/owner.key.pub\"]\nrevoked = []\n",
    )?;
    let trust = TrustConfig::load(&dir.join("trust.toml"))?;
    print(
        "2. trust       trust.toml: 1 owner signature required (a file the operator writes, as \
         examples/trust.toml)\n",
    )?;
    Ok(trust)
}

struct DemoModel {
    digest: Digest,
    /// Whether the real tokenizer was cached, so prompts can be text.
    tokenizer: bool,
    /// What job.toml's `model` says.
    path: PathBuf,
    /// New tokens per prompt: enough for a real model to say something.
    new_tokens: u32,
    /// Real pretrained weights: prompts are text to continue (a base model has no chat turns).
    real: bool,
}

/// The real Gemma 3 270M where `scripts/fetch_model.sh gemma3-270m` caches it, if it and the
/// tokenizer are both there.
fn cached_real_model() -> Option<PathBuf> {
    cached_tokenizer_path().filter(|p| p.exists())?;
    Some(cache_dir()?.join("models").join(REAL_MODEL)).filter(|p| p.is_file())
}

/// 3. A real checkpoint, approved where it lies (a .gguf file is its own checkpoint).
fn real_model(path: PathBuf) -> Result<DemoModel, CliError> {
    let path = std::fs::canonicalize(&path).map_err(|source| DemoError::Io {
        path: path.clone(),
        source,
    })?;
    let digest = model_digest(&path)?.digest;
    let tokenizer = cached_tokenizer_path().is_some_and(|p| p.exists());
    print(&format!(
        "3. model       {} (real weights, digest {}), read in place\n",
        path.display(),
        digest.short()
    ))?;
    if cached_real_model().as_deref() == Some(path.as_path()) {
        replay("scripts/fetch_model.sh gemma3-270m")?;
    }
    if !tokenizer {
        note_no_tokenizer()?;
    }
    Ok(DemoModel {
        digest,
        tokenizer,
        path,
        new_tokens: 32,
        real: true,
    })
}

/// Step 3's line when prompts must be token ids.
fn note_no_tokenizer() -> CliResult {
    print(
        "              note: the Gemma 3 tokenizer is not cached (scripts/fetch_tokenizer.sh \
         fetches it), so prompts are token ids and outputs are tokens only\n",
    )
}

/// 3. A random-weight model, with the real tokenizer when it is cached.
fn make_model(dir: &Path) -> Result<DemoModel, CliError> {
    let tokenizer = cached_tokenizer_path().filter(|p| p.exists());
    let spec = SyntheticSpec {
        vocab_size: if tokenizer.is_some() { 262_144 } else { 512 },
        ..SyntheticSpec::tiny()
    };
    let model_dir = dir.join("model");
    spec.write(&model_dir, 2026)
        .map_err(|source| DemoError::Io {
            path: model_dir.clone(),
            source,
        })?;
    if let Some(t) = &tokenizer {
        std::fs::copy(t, model_dir.join("tokenizer.json")).map_err(|source| DemoError::Io {
            path: model_dir.join("tokenizer.json"),
            source,
        })?;
    }
    let digest = model_digest(&model_dir)?.digest;
    print(&format!(
        "3. model       random-weight Gemma 3 ({} layers, hidden {}, vocab {}), digest {}\n",
        spec.num_layers,
        spec.hidden_size,
        spec.vocab_size,
        digest.short()
    ))?;
    if tokenizer.is_none() {
        note_no_tokenizer()?;
    }
    Ok(DemoModel {
        digest,
        tokenizer: tokenizer.is_some(),
        path: PathBuf::from("model"),
        new_tokens: 12,
        real: false,
    })
}

/// 4. The author's engine, checked against the policy (what owners review).
fn check_engine(dir: &Path) -> Result<(Policy, Checked), CliError> {
    write(&dir.join("engines/gemma3.eng"), ENGINE)?;
    write(&dir.join("policies/gemma3.json"), POLICY)?;
    let policy = Policy::load(&dir.join("policies/gemma3.json"))?;
    let checked = check(ENGINE, "engines/gemma3.eng", &policy)?;
    write(&dir.join("view.eng"), checked.view())?;
    let report = checked.report();
    print(&format!(
        "4. restrict    engines/gemma3.eng: {} calls checked in private regions, {} built-ins, \
         policy_id {}; owners' view in view.eng\n",
        report.calls_checked,
        report.builtins_used.len(),
        policy.policy_id().short()
    ))?;
    replay("runner restrict engines/gemma3.eng --policy policies/gemma3.json --view view.eng")?;
    Ok((policy, checked))
}

/// 5. The owner approves.
fn approve(
    dir: &Path,
    keys: &Keys,
    policy: Policy,
    checked: &Checked,
    model: &DemoModel,
) -> Result<Certificate, CliError> {
    let payload = build_payload(
        EngineFacts::from_checked(&dir.join("engines/gemma3.eng"), checked)?,
        Terms {
            policy,
            model_digest: model.digest,
            issued_at: Timestamp::now(),
            valid_from: None,
            expires_at: None,
            supersedes: None,
            lineage: "gemma3".into(),
            version: 1,
            recipients: vec![keys.recipient.recipient()],
            note: Some("demo approval".into()),
            attestation: None,
        },
    )?;
    let cert = Certificate::sign_new(payload, &keys.owner)?;
    write(&dir.join("cert.json"), cert.to_bytes())?;
    print(&format!(
        "5. approve     cert.json: certificate {} signed by the owner; results sealed to the \
         recipient\n",
        cert.digest().short()
    ))?;
    replay(&format!(
        "runner approve --engine engines/gemma3.eng --policy policies/gemma3.json --model {} \
         --key keys/owner.key --out cert.json --lineage gemma3 --recipient {} --note \
         'demo approval'",
        shell_word(&model.path),
        keys.recipient.recipient()
    ))?;
    Ok(cert)
}

/// Step 6: the runner attests (the hardware's report, or evidence marked "none" where there
/// is none), and the owner checks the evidence and takes the recipient to seal to from it.
fn attest_runner(dir: &Path, keys: &Keys, tsm_root: &Path) -> Result<String, CliError> {
    let runner = super::attest::RunnerKeys::of(&keys.state)?;
    let subject = runner.subject();
    let mut nonce = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
        .map_err(|_| DemoError::NoRandomness)?;
    let mut no_hardware = "";
    let evidence = match attest(&subject, &nonce, Source::Tsm(&Kernel, tsm_root)) {
        Err(EvidenceError::Tsm(TsmError::Absent(_))) => {
            no_hardware = " --allow-no-hardware";
            attest(&subject, &nonce, Source::NoHardware)?
        }
        other => other?,
    };
    write(&dir.join("evidence.json"), &evidence)?;
    // The owner's check. The demo has no collateral for a TDX quote: there it says so.
    let check = Check {
        collateral: None,
        vcek: None,
        nonce: Some(&nonce),
        at: Timestamp::now(),
    };
    let (marking, evidence) = match verify_evidence(&evidence, &check) {
        Ok(verdict) => (
            match &verdict.signature {
                HardwareSignature::NoHardware => "NO HARDWARE on this machine: evidence.json \
                     is marked \"hardware\": \"none\" and proves nothing about it"
                    .to_owned(),
                HardwareSignature::NotChecked(_) => format!(
                    "{} report, its signature NOT CHECKED (no VCEK in its auxblob)",
                    verdict.hardware()
                ),
                HardwareSignature::Verified { root, tcb } => format!(
                    "{} report verified to {root}, TCB {}",
                    verdict.hardware(),
                    tcb.status
                ),
            },
            verdict.evidence,
        ),
        Err(AttestationError::NoCollateral) => (
            "TDX quote; its signature NOT CHECKED here (verify-attestation --collateral checks \
             it against Intel's root)"
                .to_owned(),
            read_evidence(&evidence)?,
        ),
        Err(e) => return Err(e.into()),
    };
    let nonce = hex::encode(nonce);
    print(&format!(
        "6. attest      the runner attests: {marking}\n              \
         the owner checks evidence.json: signed by runner {}, nonce matches; the owner seals to \
         the recipient it names, {}\n",
        evidence.signer.key_id().short(),
        short_recipient(&evidence.payload.binding.age_recipient),
    ))?;
    replay(&format!(
        "runner attest --state-dir state --nonce {nonce} --out evidence.json{no_hardware}"
    ))?;
    replay(&format!(
        "runner verify-attestation evidence.json --nonce {nonce}"
    ))?;
    Ok(evidence.payload.binding.age_recipient)
}

/// Step 7: a job on private prompts, sealed to the runner (the plaintext is never written):
/// text when the tokenizer is there, token ids otherwise.
fn write_job(dir: &Path, model: &DemoModel, runner: &str) -> Result<(), CliError> {
    let text = model.tokenizer;
    let inputs = if text && model.real {
        concat!(
            "{\"id\": \"q1\", \"prompt\": \"The capital of France is\"}\n",
            "{\"id\": \"q2\", \"prompt\": \"def fibonacci(n):\"}\n",
            "{\"id\": \"q3\", \"prompt\": \"Once upon a time, there was a little robot who\"}\n",
        )
    } else if text {
        concat!(
            "{\"id\": \"q1\", \"prompt\": \"What is the capital of France?\"}\n",
            "{\"id\": \"q2\", \"prompt\": \"Write a haiku about the sea.\"}\n",
            "{\"id\": \"q3\", \"messages\": [{\"role\": \"user\", \"content\": \"Summarise: the meeting moved to Tuesday.\"}]}\n",
        )
    } else {
        "{\"id\": \"q1\", \"tokens\": [2, 17, 99, 4]}\n{\"id\": \"q2\", \"tokens\": [2, 300]}\n{\"id\": \"q3\", \"tokens\": [2, 42, 42, 7, 11]}\n"
    };
    write(
        &dir.join("inputs.jsonl.age"),
        seal(inputs.as_bytes(), &[runner.to_owned()])?,
    )?;
    write(
        &dir.join("job.toml"),
        job_toml(model, "inputs.jsonl.age", "out"),
    )?;
    print(&format!(
        "7. job         job.toml: 3 private prompts sealed to the runner (inputs.jsonl.age, \
         sealed in memory: the plaintext is never written), batch 3, {} new tokens each\n",
        model.new_tokens
    ))?;
    replay(&format!("age -r {runner} -o inputs.jsonl.age inputs.jsonl"))
}

/// A job of the demo's engine and model on `inputs`, publishing into `output_dir`.
fn job_toml(model: &DemoModel, inputs: &str, output_dir: &str) -> String {
    let outputs = if model.tokenizer {
        "[\"text\", \"tokens\"]"
    } else {
        "[\"tokens\"]"
    };
    // A TOML basic string: the path's backslashes and quotes escaped.
    let model_path = model.path.display().to_string();
    let model_path = model_path.replace('\\', "\\\\").replace('"', "\\\"");
    let new_tokens = model.new_tokens;
    let template = if model.real { "raw" } else { "chat" };
    format!(
        "engine = \"engines/gemma3.eng\"\nmodel = \"{model_path}\"\ninputs = \"{inputs}\"\n\
         output_dir = \"{output_dir}\"\n\n[generation]\n\
         batch_size = 3\nmax_new_tokens = {new_tokens}\ntemplate = \"{template}\"\noutputs = {outputs}\n"
    )
}

/// 8. exec: the audit log, the trusted boundary, then the run.
fn exec(request: &ExecRequest<'_>) -> Result<RunResult, CliError> {
    let result = crate::job::exec::exec(request, &mut |_| {})?;
    print(
        "8. exec        verified: signatures and threshold, validity, rollback, engine digest, \
         policy_id, verifier report, model digest, limits; audit entry before the first batch\n",
    )?;
    print(&format!(
        "              ran {} inputs, {} tokens; wrote out/{} (sealed) and out/{RECEIPT_FILE}; {}\n",
        result.facts.counts.inputs,
        result.facts.counts.generated_tokens,
        result.outputs_name,
        match &result.facts.attestation {
            Some(a) => format!("{} evidence in out/{}", a.hardware, a.evidence),
            None => "no hardware evidence in the receipt (cert.json requires none)".to_owned(),
        }
    ))?;
    replay(&format!("runner exec {EXEC_FLAGS} job.toml"))?;
    Ok(result)
}

/// 9. The recipient verifies the receipt and the sealed outputs, then opens them.
fn verify(dir: &Path, result: &RunResult, cert: &Certificate, keys: &Keys) -> CliResult {
    let verified = verify_receipt(&result.receipt, cert, &keys.runner, Some(&dir.join("out")))?;
    let sealed = std::fs::read(result.output_dir.join(result.outputs_name))
        .map_err(|_| DemoError::Unsealed)?;
    let plain = open(&sealed, &keys.recipient, u64::MAX).map_err(|_| DemoError::Unsealed)?;
    let opens = verified
        .facts()
        .outputs_commitment
        .is_some_and(|c| c.opens(OUTPUTS_COMMITMENT_CONTEXT, &plain));
    if !opens {
        return Err(DemoError::Unsealed.into());
    }
    print(&format!(
        "9. verify      receipt {} signed by the runner, bound to certificate {}; the recipient \
         opens out/{} and its plaintext is what the receipt commits to:\n",
        verified.digest().short(),
        cert.digest().short(),
        result.outputs_name,
    ))?;
    for line in String::from_utf8_lossy(&plain).lines() {
        print(&format!("              {line}\n"))?;
    }
    replay(&format!(
        "runner verify out/{RECEIPT_FILE} --cert cert.json --runner-key \
         state/runner.key.pub --identity keys/recipient.age"
    ))?;
    replay(&format!(
        "runner decrypt --identity keys/recipient.age out/{}",
        result.outputs_name
    ))
}

/// 10 and 11. The guard: the engine edited after approval is refused, and so are inputs sealed
/// to another runner (both refusals audited). Each runs its own job file, whose output
/// directory stays unwritten, so `out/` keeps the accepted run's outputs; the approved engine is
/// put back whatever the refusal, and the inputs that ran stay in `inputs.jsonl.age`.
fn guard(dir: &Path, model: &DemoModel, request: &ExecRequest<'_>) -> CliResult {
    let edited_job = dir.join("job-edited-engine.toml");
    write(
        &edited_job,
        job_toml(model, "inputs.jsonl.age", "out-edited-engine"),
    )?;
    let engine = dir.join("engines/gemma3.eng");
    write(&engine, format!("{ENGINE}// an unapproved edit\n"))?;
    let outcome = crate::job::exec::exec(
        &ExecRequest {
            job: &edited_job,
            ..*request
        },
        &mut |_| {},
    );
    // The approved engine back before anything else, refused or not.
    write(&engine, ENGINE)?;
    let Err(refusal) = outcome else {
        return Err(DemoError::GuardFailed.into());
    };
    print(&format!(
        "10. guard      after editing engines/gemma3.eng, exec refuses (exit {}):\n              {refusal}\n              hint: {}\n              (engines/gemma3.eng is the approved engine again)\n",
        refusal.exit().code(),
        refusal.hint().unwrap_or_default()
    ))?;
    replay(&format!(
        "echo '// an unapproved edit' >> engines/gemma3.eng; runner exec {EXEC_FLAGS} \
         job-edited-engine.toml"
    ))?;
    // Inputs sealed to another runner: this one cannot open them.
    let other = SealKey::generate().recipient();
    let inputs = b"{\"id\": \"q1\", \"tokens\": [2, 17]}\n";
    write(
        &dir.join("inputs-other-runner.jsonl.age"),
        seal(inputs, std::slice::from_ref(&other))?,
    )?;
    let other_job = dir.join("job-other-runner.toml");
    write(
        &other_job,
        job_toml(model, "inputs-other-runner.jsonl.age", "out-other-runner"),
    )?;
    let Err(refusal) = crate::job::exec::exec(
        &ExecRequest {
            job: &other_job,
            ..*request
        },
        &mut |_| {},
    ) else {
        return Err(DemoError::GuardFailed.into());
    };
    print(&format!(
        "11. guard      inputs sealed to another runner, exec refuses (exit {}):\n              {refusal}\n              hint: {}\n",
        refusal.exit().code(),
        refusal.hint().unwrap_or_default()
    ))?;
    replay(&format!(
        "age -r {other} -o inputs-other-runner.jsonl.age inputs.jsonl; runner exec \
         {EXEC_FLAGS} job-other-runner.toml"
    ))
}
