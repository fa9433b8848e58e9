//! Property tests of the certificate format: anything `approve` can produce verifies and reads
//! back unchanged, and no single-byte change to a certificate file is ever accepted.

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use runner::primitives::digest::Digest;
use runner::primitives::keys::SecretKey;
use runner::primitives::time::Timestamp;
use runner::restrict::policy::{Limits, OutputKind, Policy, POLICY_SCHEMA};
use runner::trust::certificate::{build_payload, Certificate, EngineFacts, Terms};
use runner::trust::config::TrustConfig;
use runner::trust::verify::verify_certificate;

const ISSUED: &str = "2026-11-01T00:00:00Z";

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_canonical(s).unwrap()
}

fn policy(limits: [u32; 4], allow: Vec<String>, text_output: bool) -> Policy {
    let mut outputs = std::collections::BTreeSet::from([OutputKind::Tokens]);
    if text_output {
        outputs.insert(OutputKind::Text);
    }
    Policy {
        schema: POLICY_SCHEMA.into(),
        name: "prop".into(),
        allow_functions: allow.into_iter().collect(),
        disallow_functions: Default::default(),
        limits: Limits {
            max_batch: limits[0],
            max_new_tokens: limits[1],
            max_prompt_tokens: limits[2],
            max_inputs: limits[3],
        },
        outputs,
        sealing: Default::default(),
    }
}

fn keys(n: usize) -> Vec<SecretKey> {
    (0..n).map(|_| SecretKey::generate().unwrap()).collect()
}

fn trust(keys: &[SecretKey], required: u64) -> TrustConfig {
    let owners = keys.iter().map(|k| k.public_key()).collect();
    TrustConfig::new(owners, required, vec![], Path::new("trust.toml")).unwrap()
}

fn sign_all(
    payload: runner::trust::certificate::CertificatePayload,
    keys: &[SecretKey],
) -> Vec<u8> {
    let mut cert = Certificate::sign_new(payload, &keys[0]).unwrap();
    for k in &keys[1..] {
        cert.cosign(k).unwrap();
    }
    cert.to_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_approved_certificate_round_trips_and_verifies(
        name in "[a-z][a-z0-9_-]{0,20}",
        note in proptest::option::of("[ -~\u{a0}-\u{2ff}]{0,60}"),
        limits in proptest::array::uniform4(1u32..=u32::MAX),
        allow in proptest::collection::vec("[a-z_]{1,8}(\\.[a-z_]{1,8})?(\\.\\*)?", 0..6),
        text_output in any::<bool>(),
        source in proptest::collection::vec(any::<u8>(), 0..200),
        valid_after_issue in 0i64..30,
        lifetime in 1i64..400,
        signers in 1usize..4,
        supersedes in proptest::option::of(any::<[u8; 32]>()),
    ) {
        let issued = ts(ISSUED);
        let valid_from = issued.plus_days(valid_after_issue).unwrap();
        let expires = valid_from.plus_days(lifetime).unwrap();
        let payload = build_payload(
            EngineFacts { name, source_digest: Digest::of(&source), restrict: None },
            Terms {
                policy: policy(limits, allow, text_output),
                model_digest: Digest::of(b"model"),
                issued_at: issued,
                valid_from: Some(valid_from),
                expires_at: Some(expires),
                supersedes: supersedes.map(Digest),
                lineage: "gemma3".into(),
                version: 1,
                recipients: Vec::new(),
                note,
                attestation: None,
            },
        ).unwrap();
        let keys = keys(signers);
        let bytes = sign_all(payload.clone(), &keys);
        let now = valid_from.datetime();
        let v = verify_certificate(&bytes, &trust(&keys, signers as u64), now).unwrap();
        prop_assert_eq!(v.payload(), &payload);
        prop_assert_eq!(v.signers().len(), signers);
        prop_assert_eq!(v.digest(), Digest::of(&payload.to_bytes().unwrap()));
        let parsed = Certificate::parse(&bytes).unwrap();
        prop_assert_eq!(parsed.payload(), &payload);
        prop_assert_eq!(&parsed.to_bytes(), &bytes);
        // The last second of validity is accepted, the expiry instant is not.
        prop_assert!(verify_certificate(&bytes, &trust(&keys, 1), expires.datetime() - time::Duration::seconds(1)).is_ok());
        prop_assert!(verify_certificate(&bytes, &trust(&keys, 1), expires.datetime()).is_err());
    }
}

struct Signed {
    bytes: Vec<u8>,
    trust: TrustConfig,
}

/// One two-owner certificate (2 of 2 required), shared by the mutation tests.
fn signed() -> &'static Signed {
    static CELL: OnceLock<Signed> = OnceLock::new();
    CELL.get_or_init(|| {
        let payload = build_payload(
            EngineFacts {
                name: "gemma3".into(),
                source_digest: Digest::of(b"engine"),
                restrict: None,
            },
            Terms {
                policy: policy(
                    [8, 64, 512, 100],
                    vec!["linear".into(), "nn.*".into()],
                    true,
                ),
                model_digest: Digest::of(b"model"),
                issued_at: ts(ISSUED),
                valid_from: None,
                expires_at: None,
                supersedes: Some(Digest::of(b"previous")),
                lineage: "gemma3".into(),
                version: 1,
                recipients: Vec::new(),
                note: Some("n".into()),
                attestation: None,
            },
        )
        .unwrap();
        let keys = keys(2);
        Signed {
            bytes: sign_all(payload, &keys),
            trust: trust(&keys, 2),
        }
    })
}

fn now() -> time::OffsetDateTime {
    ts("2026-12-01T00:00:00Z").datetime()
}

#[test]
fn the_unmodified_file_verifies() {
    let s = signed();
    assert!(verify_certificate(&s.bytes, &s.trust, now()).is_ok());
}

#[test]
fn no_single_bit_flip_anywhere_is_accepted() {
    let s = signed();
    for pos in 0..s.bytes.len() {
        for bit in [0x01u8, 0x02, 0x20, 0x80] {
            let mut bytes = s.bytes.clone();
            bytes[pos] ^= bit;
            assert!(
                verify_certificate(&bytes, &s.trust, now()).is_err(),
                "accepted with byte {pos} ^ {bit:#x}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_single_byte_change_fails_verification(pos in any::<prop::sample::Index>(), new in any::<u8>()) {
        let s = signed();
        let pos = pos.index(s.bytes.len());
        prop_assume!(s.bytes[pos] != new);
        let mut bytes = s.bytes.clone();
        bytes[pos] = new;
        prop_assert!(verify_certificate(&bytes, &s.trust, now()).is_err());
    }

    #[test]
    fn any_truncation_or_extension_fails_verification(cut in any::<prop::sample::Index>(), extra in proptest::collection::vec(any::<u8>(), 1..4)) {
        let s = signed();
        let cut = cut.index(s.bytes.len() - 1);
        prop_assert!(verify_certificate(&s.bytes[..cut], &s.trust, now()).is_err());
        let mut longer = s.bytes.clone();
        longer.extend_from_slice(&extra);
        prop_assert!(verify_certificate(&longer, &s.trust, now()).is_err());
    }
}
