//! `runner attest` (evidence from the hardware that binds the runner's keys) and
//! `runner verify-attestation` (what an owner runs before encrypting to the recipient).

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{print, CliError, CliResult};
use crate::attestation::evidence::MAX_EVIDENCE_BYTES;
use crate::attestation::tsm::{tsm_root, Kernel, TsmError};
use crate::attestation::{
    attest as make_evidence, verify_evidence, Check, EvidenceError, Hardware, HardwareSignature,
    Source, Subject, Verdict,
};
use crate::job::state::{state_dir, StateDir};
use crate::primitives::atomic_file::{write_atomic, Overwrite};
use crate::primitives::bounded_read::{read_bounded, MAX_DOCUMENT_BYTES};
use crate::primitives::keys::SecretKey;
use crate::primitives::time::Timestamp;
use crate::trust::receipt::RunnerIdentity;

/// A verifier's nonce (its own type: clap would read a `Vec<u8>` as many values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Nonce(pub(super) Vec<u8>);

/// Parse a nonce given in hex.
pub(super) fn parse_nonce(text: &str) -> Result<Nonce, String> {
    let bytes = hex::decode(text).map_err(|_| format!("{text:?} is not hex digits"))?;
    if bytes.len() > crate::attestation::binding::MAX_NONCE_BYTES {
        return Err("a nonce is at most 64 bytes (128 hex digits)".into());
    }
    Ok(Nonce(bytes))
}

fn parse_time(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse_user(text).map_err(|e| e.to_string())
}

/// Flags of `runner attest`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The report's 64 bytes of user data are SHA-512 of the runner's signing key, its age recipient, \
the runner binary's digest and the nonce (docs/attestation.md). Owners check the file with \
`runner verify-attestation FILE --nonce HEX` before they encrypt to the recipient it names.")]
pub struct AttestArgs {
    /// Where to write the evidence document.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The verifier's nonce, in hex (up to 64 bytes): proves the evidence is fresh. Without
    /// one, the evidence can be replayed by whoever holds it.
    #[arg(long, value_name = "HEX", value_parser = parse_nonce)]
    nonce: Option<Nonce>,
    /// Where there is no configfs-tsm, write evidence marked "hardware": "none" instead of
    /// failing. Such evidence proves nothing about the machine; every verifier says so.
    #[arg(long)]
    allow_no_hardware: bool,
    /// The configfs-tsm directory (default: $RUNNER_TSM_ROOT, else /sys/kernel/config/tsm).
    #[arg(long, value_name = "DIR")]
    tsm_root: Option<PathBuf>,
    /// The runner's state directory (default: $RUNNER_STATE_DIR, else /var/lib/runner).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Replace an existing --out file.
    #[arg(long)]
    force: bool,
}

/// Flags of `runner verify-attestation`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Checks, in order: the document's signature by the runner key it names; the hardware's signature \
(a TDX quote against Intel's root CA and the collateral, at --at; an SEV-SNP report against the \
VCEK and its chain to AMD's root); that the report's user data \
is the hash of the keys, runner digest and nonce in the document; the nonce; that the guest is \
not debuggable. Exit 0 means every check that applies passed; the output says which did not \
apply (no hardware, an SEV-SNP signature not checked, no nonce given).")]
pub struct VerifyAttestationArgs {
    /// The evidence document (from `runner attest`).
    #[arg(value_name = "FILE")]
    evidence: PathBuf,
    /// DCAP collateral JSON for a TDX quote (dcap-qvl's QuoteCollateralV3: PCK CRL and chain,
    /// TCB info, QE identity), fetched from Intel PCS or a PCCS; checked offline.
    #[arg(long, value_name = "FILE")]
    collateral: Option<PathBuf>,
    /// The VCEK certificate (PEM or DER) of the chip that signed an SEV-SNP report, from AMD's
    /// key distribution service, when the evidence's auxblob does not carry it.
    #[arg(long, value_name = "FILE")]
    vcek: Option<PathBuf>,
    /// The nonce you asked the runner to attest with, in hex: the evidence must carry it.
    #[arg(long, value_name = "HEX", value_parser = parse_nonce)]
    nonce: Option<Nonce>,
    /// Check the collateral's validity at this time, RFC 3339 (default: now).
    #[arg(long, value_name = "RFC3339", value_parser = parse_time)]
    at: Option<Timestamp>,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
}

/// The runner's keys and binary, as evidence binds them.
pub(super) struct RunnerKeys {
    pub(super) key: SecretKey,
    pub(super) recipient: String,
    pub(super) runner: RunnerIdentity,
}

impl RunnerKeys {
    pub(super) fn of(state: &StateDir) -> Result<RunnerKeys, CliError> {
        Ok(RunnerKeys {
            key: state.signing_key()?,
            recipient: state.recipient()?,
            runner: RunnerIdentity::current()?,
        })
    }

    pub(super) fn subject(&self) -> Subject<'_> {
        Subject {
            key: &self.key,
            age_recipient: &self.recipient,
            runner_digest: self.runner.executable_digest,
            runner_version: &self.runner.version,
        }
    }
}

/// What a verifier brings for the hardware's signature: TDX collateral, an SEV-SNP VCEK.
pub(super) struct VendorFiles {
    pub(super) collateral: Option<Vec<u8>>,
    pub(super) vcek: Option<Vec<u8>>,
}

impl VendorFiles {
    pub(super) fn read(collateral: Option<&Path>, vcek: Option<&Path>) -> Result<Self, CliError> {
        let read =
            |path: Option<&Path>, what| path.map(|p| read_bounded(p, MAX_DOCUMENT_BYTES, what));
        Ok(VendorFiles {
            collateral: read(collateral, "collateral").transpose()?,
            vcek: read(vcek, "VCEK certificate").transpose()?,
        })
    }
}

/// Ask the hardware for a report and write the evidence document.
pub fn attest(args: AttestArgs) -> CliResult {
    let state = StateDir::open(&state_dir(args.state_dir.as_deref()))?;
    let keys = RunnerKeys::of(&state)?;
    let (key, recipient, runner) = (&keys.key, &keys.recipient, &keys.runner);
    let subject = keys.subject();
    let nonce = args.nonce.map(|n| n.0).unwrap_or_default();
    let root = tsm_root(args.tsm_root.as_deref());
    let bytes = match make_evidence(&subject, &nonce, Source::Tsm(&Kernel, &root)) {
        Err(EvidenceError::Tsm(TsmError::Absent(path))) if args.allow_no_hardware => {
            eprintln!(
                "warning: no configfs-tsm at {}: writing evidence marked \"hardware\": \"none\", \
                 which proves nothing about this machine",
                path.display()
            );
            make_evidence(&subject, &nonce, Source::NoHardware)?
        }
        other => other?,
    };
    let overwrite = if args.force {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    };
    write_atomic(&args.out, &bytes, 0o644, overwrite)?;
    let evidence = crate::attestation::read_evidence(&bytes)?;
    print(&format!(
        "wrote {}: {}\n\
         binds signing key {} and age recipient {}\n\
         runner {} (executable {}), nonce {}\n\
         owners check it with: runner verify-attestation {}{}\n",
        args.out.display(),
        if evidence.hardware == Hardware::None {
            "evidence WITHOUT hardware (\"hardware\": \"none\")".to_owned()
        } else {
            format!(
                "evidence from {} hardware ({})",
                evidence.hardware, evidence.payload.provider
            )
        },
        key.key_id().to_hex(),
        recipient,
        runner.version,
        runner.executable_digest.short(),
        if nonce.is_empty() {
            "none".to_owned()
        } else {
            hex::encode(&nonce)
        },
        args.out.display(),
        match (evidence.hardware, nonce.is_empty()) {
            (Hardware::Tdx, true) => " --collateral COLLATERAL.json".to_owned(),
            (Hardware::Tdx, false) => {
                format!(
                    " --collateral COLLATERAL.json --nonce {}",
                    hex::encode(&nonce)
                )
            }
            (_, true) => String::new(),
            (_, false) => format!(" --nonce {}", hex::encode(&nonce)),
        },
    ))
}

/// Check an evidence document and print what it proves.
pub fn verify_attestation(args: VerifyAttestationArgs) -> CliResult {
    let bytes = read_bounded(&args.evidence, MAX_EVIDENCE_BYTES, "evidence")?;
    let vendor = VendorFiles::read(args.collateral.as_deref(), args.vcek.as_deref())?;
    let check = Check {
        collateral: vendor.collateral.as_deref(),
        vcek: vendor.vcek.as_deref(),
        nonce: args.nonce.as_ref().map(|n| n.0.as_slice()),
        at: args.at.unwrap_or_else(Timestamp::now),
    };
    let verdict = verify_evidence(&bytes, &check)?;
    if args.json {
        return print(&format!("{:#}\n", verdict_json(&verdict)));
    }
    print(&verdict_text(
        &args.evidence.display().to_string(),
        &verdict,
    ))
}

/// The lines `verify-attestation` (and `verify`, for a receipt's evidence) prints.
pub(super) fn verdict_text(name: &str, v: &Verdict) -> String {
    let e = &v.evidence;
    let b = &e.payload.binding;
    let mut out = format!(
        "evidence {name}: signed by runner key {}\n",
        e.signer.key_id().to_hex()
    );
    out += &match &v.signature {
        HardwareSignature::Verified { root, tcb } => format!(
            "hardware {} ({}): report signature verified to {root}; TCB status {}{}\n",
            e.hardware,
            e.payload.provider,
            tcb.status,
            if tcb.advisories.is_empty() {
                String::new()
            } else {
                format!(" (advisories {})", tcb.advisories.join(", "))
            }
        ),
        HardwareSignature::NotChecked(why) => format!(
            "hardware {} ({}): report signature NOT CHECKED: {why}\n",
            e.hardware, e.payload.provider
        ),
        HardwareSignature::NoHardware => "hardware none: NO HARDWARE REPORT. This evidence \
             proves nothing about the machine: the keys below are only as trustworthy as its \
             operator.\n"
            .to_owned(),
    };
    if v.report.is_some() {
        out += "report user data: the hash of the keys, runner digest and nonce below (checked)\n";
    }
    out += &format!(
        "nonce {}\n",
        match (e.nonce.is_empty(), v.nonce_checked) {
            (_, true) => format!("{} (matches yours)", hex::encode(&e.nonce)),
            (true, false) => "none (the evidence may be a replay: ask with --nonce)".to_owned(),
            (false, false) => format!("{} (not checked: pass --nonce)", hex::encode(&e.nonce)),
        }
    );
    out += &format!(
        "runner {} (executable blake3 {}), evidence made {}\n",
        e.payload.runner_version, b.runner_digest, e.payload.created_at
    );
    if let Some(report) = &v.report {
        out += "measurements:\n";
        for (name, value) in &report.measurements {
            out += &format!("  {name:<14} {}\n", hex::encode(value));
        }
    }
    out += &format!(
        "age recipient {}\n  owners may encrypt inputs to it: age -r {} -o inputs.jsonl.age inputs.jsonl\n",
        b.age_recipient, b.age_recipient
    );
    out
}

pub(super) fn verdict_json(v: &Verdict) -> serde_json::Value {
    let e = &v.evidence;
    let b = &e.payload.binding;
    let signature = match &v.signature {
        HardwareSignature::Verified { root, tcb } => json!({
            "checked": true, "root": root, "tcb_status": tcb.status, "advisories": tcb.advisories,
        }),
        HardwareSignature::NotChecked(why) => json!({ "checked": false, "why": why }),
        HardwareSignature::NoHardware => json!({ "checked": false, "why": "no hardware" }),
    };
    let measurements: serde_json::Map<String, serde_json::Value> = v
        .report
        .iter()
        .flat_map(|r| r.measurements.iter())
        .map(|(n, m)| ((*n).to_owned(), json!(hex::encode(m))))
        .collect();
    json!({
        "hardware": e.hardware.name(),
        "provider": e.payload.provider,
        "signature": signature,
        "nonce": hex::encode(&e.nonce),
        "nonce_checked": v.nonce_checked,
        "measurements": measurements,
        "debug": v.report.as_ref().map(|r| r.debug),
        "signing_key_id": e.signer.key_id().to_hex(),
        "age_recipient": b.age_recipient,
        "runner_digest": b.runner_digest,
        "runner_version": e.payload.runner_version,
        "created_at": e.payload.created_at,
        "evidence_digest": e.digest,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn nonces_are_hex_of_at_most_64_bytes() {
        assert_eq!(super::parse_nonce("00ff").unwrap().0, vec![0, 255]);
        assert!(super::parse_nonce("0g").is_err());
        assert!(super::parse_nonce(&"00".repeat(65)).is_err());
    }
}
