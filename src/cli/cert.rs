//! Certificate subcommands: `approve` (sign a new certificate), `cosign` (add a signature),
//! `inspect` (show what a certificate binds) and `verify-cert` (check it against trust.toml).

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::{print, CliResult};
use crate::attestation::{Hardware, Requirement};
use crate::error::{Diagnose, Exit};
use crate::model::digest::model_digest;
use crate::primitives::atomic_file::{write_atomic, Overwrite, WriteError};
use crate::primitives::bounded_read::{read_bounded_text, MAX_TEXT_BYTES};
use crate::primitives::digest::Digest;
use crate::primitives::keys::SecretKey;
use crate::primitives::time::Timestamp;
use crate::restrict::check_bytes;
use crate::restrict::policy::Policy;
use crate::sealing::{parse_recipient, parse_recipients_file, RecipientError};
use crate::trust::certificate::{
    build_payload, check_note, read_certificate_file, resolve_window, CertError, Certificate,
    CertificatePayload, EngineFacts, Terms,
};
use crate::trust::config::{TrustConfig, DEFAULT_TRUST_FILE};
use crate::trust::verify::{check_existing_signatures, verify_certificate, VerifiedCertificate};

fn parse_time(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse_user(text).map_err(|e| e.to_string())
}

/// Flags of `runner approve`.
#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The engine source file approved (its exact bytes are hashed).
    #[arg(long, value_name = "FILE")]
    engine: PathBuf,
    /// The policy JSON approved.
    #[arg(long, value_name = "FILE")]
    policy: PathBuf,
    /// The model approved: a Hugging Face checkpoint directory (config.json, *.safetensors,
    /// tokenizer files), a .gguf file, or a directory holding exactly one .gguf file.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    model: PathBuf,
    /// Your private key (from `runner keygen`).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Where to write the certificate.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// End of validity, RFC 3339 (default: 90 days after the start of validity).
    #[arg(long, value_name = "RFC3339", value_parser = parse_time)]
    expires: Option<Timestamp>,
    /// Start of validity, RFC 3339 (default: now).
    #[arg(long, value_name = "RFC3339", value_parser = parse_time)]
    valid_from: Option<Timestamp>,
    /// The certificate this one replaces: its digest is bound, the lineage is carried over and
    /// the version is the old one's plus one (revoke the old one in trust.toml too).
    #[arg(long, value_name = "FILE")]
    supersedes: Option<PathBuf>,
    /// The lineage this certificate starts (default: the engine's name). A runner refuses any
    /// certificate whose version is below the highest it has admitted for the lineage.
    #[arg(long, value_name = "NAME")]
    lineage: Option<String>,
    /// Who may read the results: an age recipient (`age1...`) the outputs are encrypted to.
    /// Repeat for several; the owners' signatures bind them.
    #[arg(long = "recipient", value_name = "AGE1...")]
    recipients: Vec<String>,
    /// Recipients from a file, in the form `age -R` reads (one per line, `#` comments).
    #[arg(long, value_name = "FILE")]
    recipients_file: Option<PathBuf>,
    /// One line of text for the other owners.
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
    /// Run only on this hardware (`tdx` or `sev-snp`): exec then asks the hardware for a report
    /// through configfs-tsm, refuses to run unless it matches every --measurement, and puts the
    /// evidence in the receipt (docs/attestation.md).
    #[arg(long, value_name = "HARDWARE", value_parser = parse_hardware)]
    require_attestation: Option<Hardware>,
    /// A measurement the report must carry, NAME=HEX (TDX: mrtd, rtmr0-rtmr3, mrconfigid,
    /// mrowner, mrownerconfig; SEV-SNP: measurement, host_data, policy). Repeat for several.
    #[arg(long = "measurement", value_name = "NAME=HEX", value_parser = parse_measurement, requires = "require_attestation")]
    measurements: Vec<(String, String)>,
    /// Replace an existing --out file.
    #[arg(long)]
    force: bool,
}

fn parse_hardware(text: &str) -> Result<Hardware, String> {
    Hardware::from_name(text)
        .filter(|h| *h != Hardware::None)
        .ok_or_else(|| format!("{text:?} is not tdx or sev-snp"))
}

fn parse_measurement(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=HEX"))?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

/// Flags of `runner cosign`.
#[derive(Debug, clap::Args)]
pub struct CosignArgs {
    /// The certificate to add a signature to.
    #[arg(value_name = "FILE")]
    cert: PathBuf,
    /// Your private key (from `runner keygen`).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Write the co-signed certificate here instead of rewriting CERT in place.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Trust configuration listing the owners whose signatures are already on CERT: each must
    /// verify before yours is added.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_TRUST_FILE)]
    trust: PathBuf,
    /// Replace an existing --out file.
    #[arg(long)]
    force: bool,
}

/// Flags of `runner inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The certificate to show.
    #[arg(value_name = "FILE")]
    cert: PathBuf,
    /// Print the payload and envelope facts as JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of `runner verify-cert`.
#[derive(Debug, clap::Args)]
pub struct VerifyCertArgs {
    /// The certificate to verify.
    #[arg(value_name = "FILE")]
    cert: PathBuf,
    /// Trust configuration: owners' public keys, required signatures, revoked certificates.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_TRUST_FILE)]
    trust: PathBuf,
    /// Print what was verified as JSON.
    #[arg(long)]
    json: bool,
}

/// A certificate error, prefixed with the file it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
struct InFile {
    path: PathBuf,
    source: CertError,
}

impl Diagnose for InFile {
    fn exit(&self) -> Exit {
        self.source.exit()
    }
    fn hint(&self) -> Option<String> {
        match &self.source {
            // The file given, not a generic name for it.
            CertError::ThresholdNotMet { .. } => Some(format!(
                "more owners listed in the trust configuration must sign: `runner cosign {} \
                 --key OWNER.key`",
                self.path.display()
            )),
            other => other.hint(),
        }
    }
}

fn in_file(path: &Path) -> impl Fn(CertError) -> InFile + '_ {
    move |source| InFile {
        path: path.to_owned(),
        source,
    }
}

pub(super) fn load_certificate(path: &Path) -> Result<Certificate, super::CliError> {
    let bytes = read_certificate_file(path)?;
    Ok(Certificate::parse(&bytes).map_err(in_file(path))?)
}

fn overwrite(force: bool) -> Overwrite {
    if force {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    }
}

fn refuse_existing(path: &Path, force: bool) -> Result<(), WriteError> {
    if !force && std::fs::symlink_metadata(path).is_ok() {
        return Err(WriteError::Exists {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Hash the engine and model, build the payload, sign it, write the certificate.
pub fn approve(args: ApproveArgs) -> CliResult {
    // Cheap refusals first, so a mistake does not cost a pass over gigabytes of weights.
    refuse_existing(&args.out, args.force)?;
    let key = SecretKey::load(&args.key)?;
    let policy = Policy::load(&args.policy)?;
    // Approval runs the verifier: a non-compliant engine is refused before anything is signed.
    let source = EngineFacts::read_source(&args.engine)?;
    let checked = check_bytes(&source, &args.engine.display().to_string(), &policy)?;
    let engine = EngineFacts::from_checked(&args.engine, &checked)?;
    let (supersedes, lineage, version) = lineage_of(&args, &engine)?;
    let recipients = recipients_of(&args)?;
    // Check the window and note now: hashing the model may take a while.
    let issued_at = Timestamp::now();
    resolve_window(issued_at, args.valid_from, args.expires)?;
    if let Some(note) = &args.note {
        check_note(note)?;
    }
    let attestation = match args.require_attestation {
        Some(hardware) => Some(
            Requirement::new(hardware, &args.measurements)
                .map_err(|why| super::UsageError(format!("--measurement: {why}")))?,
        ),
        None => None,
    };
    let model = model_digest(&args.model)?;
    let payload = build_payload(
        engine,
        Terms {
            policy,
            model_digest: model.digest,
            issued_at,
            valid_from: args.valid_from,
            expires_at: args.expires,
            supersedes,
            lineage,
            version,
            recipients,
            note: args.note,
            attestation,
        },
    )?;
    let cert = Certificate::sign_new(payload, &key)?;
    write_atomic(&args.out, &cert.to_bytes(), 0o644, overwrite(args.force))?;
    let p = cert.payload();
    if OffsetDateTime::now_utc() >= p.expires_at.datetime() {
        eprintln!("warning: this certificate expired at {}", p.expires_at);
    }
    print(&format!(
        "wrote {}: certificate {} signed by key {}\n\
         engine {} (source {}), policy {} (policy_id {}), model {} ({} files)\n\
         lineage {} version {}; valid from {} until {}\n",
        args.out.display(),
        cert.digest().short(),
        key.key_id().short(),
        p.engine.name,
        p.engine.source_digest.short(),
        p.policy.name,
        p.policy_id.short(),
        p.model_digest.short(),
        model.files.len(),
        p.lineage,
        p.version,
        p.valid_from,
        p.expires_at,
    ))
}

/// The recipients given by `--recipient` and `--recipients-file`, each checked.
fn recipients_of(args: &ApproveArgs) -> Result<Vec<String>, super::CliError> {
    recipients_from(&args.recipients, args.recipients_file.as_deref())
}

/// Recipients given on the command line and in a recipients file, each checked.
pub(super) fn recipients_from(
    given: &[String],
    file: Option<&Path>,
) -> Result<Vec<String>, super::CliError> {
    let mut all = Vec::new();
    for r in given {
        all.push(parse_recipient(r)?.to_string());
    }
    if let Some(path) = file {
        let text = read_bounded_text(path, MAX_TEXT_BYTES, "recipients file")?;
        all.extend(
            parse_recipients_file(&text).map_err(|source| RecipientsFile {
                path: path.to_owned(),
                source,
            })?,
        );
    }
    Ok(all)
}

/// A recipients file that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("recipients file {}: {source}", path.display())]
struct RecipientsFile {
    path: PathBuf,
    source: RecipientError,
}

impl Diagnose for RecipientsFile {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(
            "one age1... recipient per line, as `age -R` reads (`age-keygen -y` prints one)".into(),
        )
    }
}

/// The replaced certificate's digest, and the lineage and version of the new one.
fn lineage_of(
    args: &ApproveArgs,
    engine: &EngineFacts,
) -> Result<(Option<Digest>, String, u64), super::CliError> {
    let Some(path) = &args.supersedes else {
        let lineage = args.lineage.clone().unwrap_or_else(|| engine.name.clone());
        return Ok((None, lineage, 1));
    };
    let old = load_certificate(path)?;
    let p = old.payload();
    if let Some(asked) = &args.lineage {
        if *asked != p.lineage {
            return Err(ApproveError::LineageMismatch {
                asked: asked.clone(),
                old: p.lineage.clone(),
                path: path.clone(),
            }
            .into());
        }
    }
    let version = p
        .version
        .checked_add(1)
        .ok_or_else(|| ApproveError::VersionOverflow { path: path.clone() })?;
    Ok((Some(old.digest()), p.lineage.clone(), version))
}

/// Why `approve` refused its flags.
#[derive(Debug, thiserror::Error)]
enum ApproveError {
    #[error("--lineage {asked} differs from the lineage {old} of the certificate --supersedes {} replaces", path.display())]
    LineageMismatch {
        asked: String,
        old: String,
        path: PathBuf,
    },
    #[error("the certificate {} has the largest version there is", path.display())]
    VersionOverflow { path: PathBuf },
}

impl Diagnose for ApproveError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ApproveError::LineageMismatch { .. } => {
                "a replacement stays in its lineage: leave out --lineage with --supersedes".into()
            }
            ApproveError::VersionOverflow { .. } => "start a new lineage with --lineage".into(),
        })
    }
}

/// Add a signature over the same payload bytes.
pub fn cosign(args: CosignArgs) -> CliResult {
    let (out, mode) = match &args.out {
        Some(out) => {
            refuse_existing(out, args.force)?;
            (out.clone(), overwrite(args.force))
        }
        None => (args.cert.clone(), Overwrite::Replace),
    };
    let mut cert = load_certificate(&args.cert)?;
    let trust = TrustConfig::load(&args.trust)?;
    check_existing_signatures(cert.envelope(), &trust).map_err(in_file(&args.cert))?;
    let key = SecretKey::load(&args.key)?;
    cert.cosign(&key).map_err(in_file(&args.cert))?;
    write_atomic(&out, &cert.to_bytes(), 0o644, mode)?;
    let ids: Vec<String> = cert.signer_ids().iter().map(|k| k.short()).collect();
    print(&format!(
        "wrote {}: certificate {} now has {} signatures ({})\n",
        out.display(),
        cert.digest().short(),
        ids.len(),
        ids.join(", "),
    ))
}

fn window_state(p: &CertificatePayload, now: OffsetDateTime) -> &'static str {
    if now < p.valid_from.datetime() {
        "not yet valid"
    } else if now >= p.expires_at.datetime() {
        "expired"
    } else {
        "currently within its validity window"
    }
}

/// Show what a certificate binds and who signed it (signatures are not checked).
pub fn inspect(args: InspectArgs) -> CliResult {
    let cert = load_certificate(&args.cert)?;
    let p = cert.payload();
    let now = OffsetDateTime::now_utc();
    let state = window_state(p, now);
    if args.json {
        let doc = serde_json::json!({
            "certificate_digest": cert.digest().to_hex(),
            "payloadType": cert.envelope().payload_type,
            "signatures": cert.signer_ids().iter().map(|k| serde_json::json!({"key_id": k.to_hex()})).collect::<Vec<_>>(),
            "signatures_checked": false,
            "validity": validity_json(p, Some(state == "currently within its validity window")),
            "payload": p,
        });
        return print(&format!("{doc:#}\n"));
    }
    let mut out = String::new();
    out.push_str(&format!("certificate   {}\n", cert.digest().to_hex()));
    out.push_str(&format!(
        "signatures    {} (not checked here; run `runner verify-cert`)\n",
        cert.signer_ids().len()
    ));
    for id in cert.signer_ids() {
        out.push_str(&format!("  key         {}\n", id.to_hex()));
    }
    out.push_str(&format!("engine        {}\n", p.engine.name));
    out.push_str(&format!(
        "  source      {}\n",
        p.engine.source_digest.to_hex()
    ));
    match &p.engine.restrict {
        None => out.push_str("  restrict    no report bound\n"),
        Some(r) => out.push_str(&format!(
            "  restrict    {} private ranges, {} calls checked, built-ins: {}\n",
            r.private_ranges.len(),
            r.calls_checked,
            r.builtins_used
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    out.push_str(&format!("policy        {}\n", p.policy.name));
    out.push_str(&format!(
        "  policy_id   {} ({})\n",
        p.policy_id.short(),
        p.policy_id.to_hex()
    ));
    out.push_str(&format!("  digest      {}\n", p.policy_digest.to_hex()));
    out.push_str(&format!("model         {}\n", p.model_digest.to_hex()));
    out.push_str(&format!("verifier      {}\n", p.verifier_version));
    out.push_str(&format!("issued        {}\n", p.issued_at));
    out.push_str(&format!(
        "valid         from {} until {} ({state})\n",
        p.valid_from, p.expires_at
    ));
    out.push_str(&format!(
        "lineage       {} version {}\n",
        p.lineage, p.version
    ));
    if p.recipients.is_empty() {
        out.push_str("recipients    none (outputs in plaintext)\n");
    }
    for r in &p.recipients {
        out.push_str(&format!("recipient     {r}\n"));
    }
    match &p.supersedes {
        None => out.push_str("supersedes    none\n"),
        Some(d) => out.push_str(&format!("supersedes    {}\n", d.to_hex())),
    }
    match &p.note {
        None => out.push_str("note          none\n"),
        Some(n) => out.push_str(&format!("note          {n}\n")),
    }
    match &p.attestation {
        None => out.push_str("attestation   not required\n"),
        Some(req) => {
            out.push_str(&format!(
                "attestation   {} required, {} measurements pinned\n",
                req.hardware,
                req.measurements.len()
            ));
            for (name, value) in &req.measurements {
                out.push_str(&format!("  {name:<11} {value}\n"));
            }
        }
    }
    print(&out)
}

fn summary(v: &VerifiedCertificate, required: usize) -> String {
    let p = v.payload();
    let signers: Vec<String> = v.signers().iter().map(|k| k.short()).collect();
    let mut out = format!(
        "certificate {} verified\n\
         signed by   {} owners ({} required): {}\n",
        v.digest().short(),
        signers.len(),
        required,
        signers.join(", "),
    );
    for k in v.untrusted_signers() {
        out.push_str(&format!(
            "ignored     signature by key {}, which is not an owner in the trust configuration\n",
            k.to_hex()
        ));
    }
    out.push_str(&format!(
        "engine      {} (source {})\n\
         policy      {} (policy_id {})\n\
         model       {}\n\
         verifier    {}\n\
         lineage     {} version {}\n\
         valid       from {} until {}\n",
        p.engine.name,
        p.engine.source_digest.short(),
        p.policy.name,
        p.policy_id.short(),
        p.model_digest.short(),
        p.verifier_version,
        p.lineage,
        p.version,
        p.valid_from,
        p.expires_at,
    ));
    out
}

/// Verify a certificate against the trust configuration, now.
pub fn verify_cert(args: VerifyCertArgs) -> CliResult {
    let trust = TrustConfig::load(&args.trust)?;
    let bytes = read_certificate_file(&args.cert)?;
    let verified = verify_certificate(&bytes, &trust, OffsetDateTime::now_utc())
        .map_err(in_file(&args.cert))?;
    let floor = trust.min_version(verified.lineage());
    if verified.version() < floor {
        return Err(BelowMinimum {
            lineage: verified.lineage().to_owned(),
            version: verified.version(),
            floor,
        }
        .into());
    }
    if args.json {
        let p = verified.payload();
        let hex = |ids: &[Digest]| ids.iter().map(Digest::to_hex).collect::<Vec<_>>();
        let doc = serde_json::json!({
            "valid": true,
            "certificate": args.cert.display().to_string(),
            "certificate_digest": verified.digest().to_hex(),
            "signers": hex(verified.signers()),
            "untrusted_signers": hex(verified.untrusted_signers()),
            "required_signatures": trust.required_signatures(),
            "engine": p.engine.name,
            "source_digest": p.engine.source_digest.to_hex(),
            "policy": p.policy.name,
            "policy_id": p.policy_id.to_hex(),
            "model_digest": p.model_digest.to_hex(),
            "verifier_version": p.verifier_version,
            "lineage": p.lineage,
            "version": p.version,
            "validity": validity_json(p, None),
        });
        return print(&format!("{doc:#}\n"));
    }
    print(&summary(&verified, trust.required_signatures()))
}

/// A certificate's validity window as every `--json` output spells one: `start` (inclusive)
/// and `end` (exclusive), and `current` when the command judged it against the clock.
fn validity_json(p: &CertificatePayload, current: Option<bool>) -> serde_json::Value {
    let mut doc = serde_json::json!({"start": p.valid_from, "end": p.expires_at});
    if let Some(current) = current {
        doc["current"] = current.into();
    }
    doc
}

/// A certificate older than the trust configuration's `[min_version]` for its lineage.
#[derive(Debug, thiserror::Error)]
#[error("certificate is version {version} of lineage {lineage:?}, but the trust configuration requires at least version {floor}")]
struct BelowMinimum {
    lineage: String,
    version: u64,
    floor: u64,
}

impl Diagnose for BelowMinimum {
    fn exit(&self) -> Exit {
        Exit::Refused
    }
    fn hint(&self) -> Option<String> {
        Some("use the newest certificate of the lineage (see `runner inspect`)".into())
    }
}
