//! Certificate verification: the trusted boundary. [`verify_certificate`] is the only way to
//! obtain a [`VerifiedCertificate`], and `exec` accepts nothing else.
//!
//! Checks, in order (the first failure is reported):
//! 1. the envelope is well-formed ([`crate::primitives::dsse`]): otherwise malformed input, exit 2;
//! 2. its payloadType is [`CERTIFICATE_PAYLOAD_TYPE`];
//! 3. every signature whose keyid names an owner in the trust configuration verifies over the
//!    DSSE PAE of payloadType and payload (one bad signature by a trusted key refuses the whole
//!    certificate); signatures by other keys are ignored and reported;
//! 4. at least `required_signatures` distinct owners signed (a key counts once however many
//!    times it appears);
//! 5. the certificate digest (BLAKE3 of the payload bytes) is not in `revoked`;
//! 6. the payload is well-formed and consistent ([`CertificatePayload::from_bytes`]): malformed
//!    is exit 2, inconsistent exit 3;
//! 7. `valid_from <= now < expires_at`.
//!
//! Every refusal in 2-7 except a malformed payload is exit 3. The payload is parsed only after
//! its signatures are known good, so unauthenticated bytes never reach the JSON parser beyond
//! the envelope itself.

use time::OffsetDateTime;

use super::certificate::{
    certificate_digest, CertError, CertificatePayload, EngineSection, CERTIFICATE_PAYLOAD_TYPE,
};
use super::config::TrustConfig;
use crate::primitives::digest::Digest;
use crate::primitives::dsse::Envelope;
use crate::primitives::keys::KeyId;
use crate::primitives::time::Timestamp;
use crate::restrict::policy::Policy;

/// A certificate that passed every check against a trust configuration at a given time.
/// Fields are private: only [`verify_certificate`] makes one.
#[derive(Debug, Clone)]
pub struct VerifiedCertificate {
    payload: CertificatePayload,
    digest: Digest,
    signers: Vec<KeyId>,
    untrusted_signers: Vec<KeyId>,
    verified_at: Timestamp,
}

impl VerifiedCertificate {
    /// The signed payload.
    pub fn payload(&self) -> &CertificatePayload {
        &self.payload
    }
    /// The certificate digest (BLAKE3 of the payload bytes).
    pub fn digest(&self) -> Digest {
        self.digest
    }
    /// Distinct trusted owners whose signatures verified, in file order.
    pub fn signers(&self) -> &[KeyId] {
        &self.signers
    }
    /// Keys that signed but are not owners in the trust configuration (not counted).
    pub fn untrusted_signers(&self) -> &[KeyId] {
        &self.untrusted_signers
    }
    /// The `now` the certificate was verified at (whole seconds).
    pub fn verified_at(&self) -> Timestamp {
        self.verified_at
    }
    /// The approved engine: name, source digest, restrict report.
    pub fn engine(&self) -> &EngineSection {
        &self.payload.engine
    }
    /// The approved policy.
    pub fn policy(&self) -> &Policy {
        &self.payload.policy
    }
    /// The approved `policy_id` (full digest).
    pub fn policy_id(&self) -> Digest {
        self.payload.policy_id
    }
    /// The approved model digest.
    pub fn model_digest(&self) -> Digest {
        self.payload.model_digest
    }
    /// The verifier version the approval was made under.
    pub fn verifier_version(&self) -> &str {
        &self.payload.verifier_version
    }
    /// The certificate this one supersedes, if any.
    pub fn supersedes(&self) -> Option<Digest> {
        self.payload.supersedes
    }
    /// The lineage it belongs to.
    pub fn lineage(&self) -> &str {
        &self.payload.lineage
    }
    /// Its version in the lineage.
    pub fn version(&self) -> u64 {
        self.payload.version
    }
}

/// Before another owner adds a signature (`runner cosign`): every signature already on the
/// certificate is by an owner in `trust` and verifies. Unlike [`verify_certificate`], a signature
/// by an unknown key is refused too: the co-signer could not tell it from a forgery.
pub fn check_existing_signatures(
    envelope: &Envelope,
    trust: &TrustConfig,
) -> Result<(), CertError> {
    let signed = envelope.signed_bytes();
    for sig in &envelope.signatures {
        let key = trust
            .owner(&sig.keyid)
            .ok_or(CertError::UnknownSigner { key_id: sig.keyid })?;
        if !key.verify(&signed, &sig.sig) {
            return Err(CertError::BadSignature { key_id: sig.keyid });
        }
    }
    Ok(())
}

/// Verify certificate file bytes against `trust` at time `now` (see the module doc).
pub fn verify_certificate(
    envelope_bytes: &[u8],
    trust: &TrustConfig,
    now: OffsetDateTime,
) -> Result<VerifiedCertificate, CertError> {
    let envelope = Envelope::parse(envelope_bytes)?;
    if envelope.payload_type != CERTIFICATE_PAYLOAD_TYPE {
        return Err(CertError::WrongPayloadType {
            found: envelope.payload_type,
        });
    }
    let signed = envelope.signed_bytes();
    let mut signers: Vec<KeyId> = Vec::new();
    let mut untrusted_signers: Vec<KeyId> = Vec::new();
    for sig in &envelope.signatures {
        match trust.owner(&sig.keyid) {
            None => {
                if !untrusted_signers.contains(&sig.keyid) {
                    untrusted_signers.push(sig.keyid);
                }
            }
            Some(key) => {
                if !key.verify(&signed, &sig.sig) {
                    return Err(CertError::BadSignature { key_id: sig.keyid });
                }
                if !signers.contains(&sig.keyid) {
                    signers.push(sig.keyid);
                }
            }
        }
    }
    if signers.len() < trust.required_signatures() {
        return Err(CertError::ThresholdNotMet {
            valid: signers.len(),
            required: trust.required_signatures(),
            untrusted: untrusted_signers,
        });
    }
    let digest = certificate_digest(&envelope.payload);
    if trust.is_revoked(&digest) {
        return Err(CertError::Revoked { digest });
    }
    let payload = CertificatePayload::from_bytes(&envelope.payload)?;
    let now_ts = Timestamp::from_datetime(now);
    if now < payload.valid_from.datetime() {
        return Err(CertError::NotYetValid {
            valid_from: payload.valid_from,
            now: now_ts,
        });
    }
    if now >= payload.expires_at.datetime() {
        return Err(CertError::Expired {
            expires_at: payload.expires_at,
            now: now_ts,
        });
    }
    Ok(VerifiedCertificate {
        payload,
        digest,
        signers,
        untrusted_signers,
        verified_at: now_ts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Diagnose, Exit};
    use crate::primitives::dsse::DsseError;
    use crate::primitives::keys::SecretKey;
    use crate::trust::certificate::{build_payload, Certificate, EngineFacts, Terms};
    use std::path::Path;

    struct Fixture {
        keys: Vec<SecretKey>,
        payload: CertificatePayload,
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_canonical(s).unwrap()
    }

    fn at(s: &str) -> OffsetDateTime {
        ts(s).datetime()
    }

    const NOW: &str = "2026-12-01T00:00:00Z";

    fn fixture(n: usize) -> Fixture {
        let policy = Policy::load(Path::new("policies/gemma3.json")).unwrap();
        let payload = build_payload(
            EngineFacts {
                name: "gemma3".into(),
                source_digest: Digest::of(b"engine source"),
                restrict: None,
            },
            Terms {
                policy,
                model_digest: Digest::of(b"model"),
                issued_at: ts("2026-11-01T00:00:00Z"),
                valid_from: None,
                expires_at: Some(ts("2027-01-01T00:00:00Z")),
                supersedes: None,
                lineage: "gemma3".into(),
                version: 1,
                recipients: vec![crate::sealing::SealKey::generate().recipient()],
                note: Some("first approval".into()),
                attestation: None,
            },
        )
        .unwrap();
        Fixture {
            keys: (0..n).map(|_| SecretKey::generate().unwrap()).collect(),
            payload,
        }
    }

    impl Fixture {
        fn trust(&self, required: u64) -> TrustConfig {
            self.trust_with(required, vec![])
        }
        fn trust_with(&self, required: u64, revoked: Vec<Digest>) -> TrustConfig {
            let owners = self.keys.iter().map(|k| k.public_key()).collect();
            TrustConfig::new(owners, required, revoked, Path::new("trust.toml")).unwrap()
        }
        /// A certificate signed by the given keys (by index).
        fn signed_by(&self, who: &[usize]) -> Vec<u8> {
            let mut cert = Certificate::sign_new(self.payload.clone(), &self.keys[who[0]]).unwrap();
            for &i in &who[1..] {
                cert.cosign(&self.keys[i]).unwrap();
            }
            cert.to_bytes()
        }
        /// Arbitrary payload bytes under an arbitrary type, signed by all keys.
        fn raw(&self, payload_type: &str, payload: &[u8]) -> Vec<u8> {
            let mut env = Envelope::new(payload_type, payload.to_vec());
            for k in &self.keys {
                env.sign(k).unwrap();
            }
            env.to_bytes()
        }
        fn payload_text(&self) -> String {
            String::from_utf8(self.payload.to_bytes().unwrap()).unwrap()
        }
    }

    fn refused(r: Result<VerifiedCertificate, CertError>) -> CertError {
        let e = r.unwrap_err();
        assert_eq!(e.exit(), Exit::Refused, "{e}");
        e
    }

    fn malformed(r: Result<VerifiedCertificate, CertError>) -> CertError {
        let e = r.unwrap_err();
        assert_eq!(e.exit(), Exit::BadInput, "{e}");
        e
    }

    #[test]
    fn accepts_two_of_two_and_exposes_the_payload() {
        let f = fixture(2);
        let bytes = f.signed_by(&[0, 1]);
        let v = verify_certificate(&bytes, &f.trust(2), at(NOW)).unwrap();
        assert_eq!(v.signers(), &[f.keys[0].key_id(), f.keys[1].key_id()]);
        assert!(v.untrusted_signers().is_empty());
        assert_eq!(v.payload(), &f.payload);
        assert_eq!(v.digest(), Digest::of(&f.payload.to_bytes().unwrap()));
        assert_eq!(v.engine().name, "gemma3");
        assert_eq!(v.policy_id().0, v.policy().policy_id().0);
        assert_eq!(v.verifier_version(), crate::restrict::VERIFIER_VERSION);
    }

    #[test]
    fn cosigning_keeps_the_certificate_digest() {
        let f = fixture(2);
        let one = Certificate::parse(&f.signed_by(&[0])).unwrap();
        let two = Certificate::parse(&f.signed_by(&[0, 1])).unwrap();
        assert_eq!(one.digest(), two.digest());
    }

    #[test]
    fn rejects_tampered_payload_byte() {
        let f = fixture(1);
        let mut env = Envelope::parse(&f.signed_by(&[0])).unwrap();
        let pos = env.payload.iter().position(|&b| b == b'g').unwrap();
        env.payload[pos] = b'h';
        let e = refused(verify_certificate(&env.to_bytes(), &f.trust(1), at(NOW)));
        assert!(
            matches!(e, CertError::BadSignature { key_id } if key_id == f.keys[0].key_id()),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "signature by key {} does not verify",
                f.keys[0].key_id().to_hex()
            )
        );
    }

    #[test]
    fn rejects_tampered_signature() {
        let f = fixture(2);
        let mut env = Envelope::parse(&f.signed_by(&[0, 1])).unwrap();
        env.signatures[1].sig[10] ^= 1;
        let e = refused(verify_certificate(&env.to_bytes(), &f.trust(1), at(NOW)));
        assert!(
            matches!(e, CertError::BadSignature { key_id } if key_id == f.keys[1].key_id()),
            "{e}"
        );
    }

    #[test]
    fn rejects_signature_by_untrusted_key() {
        let f = fixture(2);
        let stranger = fixture(1);
        let mut cert = Certificate::sign_new(f.payload.clone(), &f.keys[0]).unwrap();
        cert.cosign(&stranger.keys[0]).unwrap();
        let e = refused(verify_certificate(&cert.to_bytes(), &f.trust(2), at(NOW)));
        match &e {
            CertError::ThresholdNotMet {
                valid: 1,
                required: 2,
                untrusted,
            } => {
                assert_eq!(untrusted, &[stranger.keys[0].key_id()]);
            }
            other => panic!("{other}"),
        }
        assert!(
            e.to_string().contains(&stranger.keys[0].key_id().short()),
            "{e}"
        );
        // With a threshold of one it is accepted, and the stranger is reported, not counted.
        let v = verify_certificate(&cert.to_bytes(), &f.trust(1), at(NOW)).unwrap();
        assert_eq!(v.signers(), &[f.keys[0].key_id()]);
        assert_eq!(v.untrusted_signers(), &[stranger.keys[0].key_id()]);
    }

    #[test]
    fn rejects_same_trusted_key_counted_twice() {
        let f = fixture(2);
        let mut env = Envelope::parse(&f.signed_by(&[0])).unwrap();
        let copy = env.signatures[0].clone();
        env.signatures.push(copy);
        let e = refused(verify_certificate(&env.to_bytes(), &f.trust(2), at(NOW)));
        assert!(
            matches!(
                e,
                CertError::ThresholdNotMet {
                    valid: 1,
                    required: 2,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn rejects_threshold_not_met() {
        let f = fixture(3);
        let e = refused(verify_certificate(
            &f.signed_by(&[2, 0]),
            &f.trust(3),
            at(NOW),
        ));
        assert!(
            matches!(
                e,
                CertError::ThresholdNotMet {
                    valid: 2,
                    required: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert!(verify_certificate(&f.signed_by(&[2, 0, 1]), &f.trust(3), at(NOW)).is_ok());
    }

    #[test]
    fn rejects_expired() {
        let f = fixture(1);
        let bytes = f.signed_by(&[0]);
        assert!(verify_certificate(&bytes, &f.trust(1), at("2026-12-31T23:59:59Z")).is_ok());
        let e = refused(verify_certificate(
            &bytes,
            &f.trust(1),
            at("2027-01-01T00:00:00Z"),
        ));
        assert!(matches!(e, CertError::Expired { .. }), "{e}");
        assert!(e.to_string().contains("2027-01-01T00:00:00Z"), "{e}");
    }

    #[test]
    fn rejects_not_yet_valid() {
        let f = fixture(1);
        let bytes = f.signed_by(&[0]);
        assert!(verify_certificate(&bytes, &f.trust(1), at("2026-11-01T00:00:00Z")).is_ok());
        let e = refused(verify_certificate(
            &bytes,
            &f.trust(1),
            at("2026-10-31T23:59:59Z"),
        ));
        assert!(matches!(e, CertError::NotYetValid { .. }), "{e}");
    }

    #[test]
    fn rejects_wrong_payload_type() {
        let f = fixture(1);
        let bytes = f.raw(
            "application/vnd.runner.receipt+json; version=1",
            f.payload_text().as_bytes(),
        );
        let e = refused(verify_certificate(&bytes, &f.trust(1), at(NOW)));
        assert!(
            matches!(&e, CertError::WrongPayloadType { found } if found.contains("receipt")),
            "{e}"
        );
    }

    #[test]
    fn rejects_duplicate_json_key_in_payload() {
        let f = fixture(1);
        let text = f.payload_text().replacen('{', "{\"note\":\"shadow\",", 1);
        let bytes = f.raw(CERTIFICATE_PAYLOAD_TYPE, text.as_bytes());
        let e = malformed(verify_certificate(&bytes, &f.trust(1), at(NOW)));
        assert!(
            matches!(&e, CertError::Payload(m) if m.contains("duplicate key `note`")),
            "{e}"
        );
    }

    #[test]
    fn rejects_truncated_and_garbage_files() {
        let f = fixture(1);
        let bytes = f.signed_by(&[0]);
        for bad in [
            &bytes[..bytes.len() - 10],
            b"\x89PNG\r\n\x1a\n".as_slice(),
            b"".as_slice(),
        ] {
            let e = malformed(verify_certificate(bad, &f.trust(1), at(NOW)));
            assert!(
                matches!(e, CertError::Envelope(DsseError::NotJson(_))),
                "{e}"
            );
        }
    }

    #[test]
    fn rejects_unknown_fields_in_envelope_and_payload() {
        let f = fixture(1);
        let mut v: serde_json::Value = serde_json::from_slice(&f.signed_by(&[0])).unwrap();
        v["comment"] = "hi".into();
        let bytes = crate::primitives::canonical::to_canonical(&v).unwrap();
        let e = malformed(verify_certificate(&bytes, &f.trust(1), at(NOW)));
        assert!(
            matches!(&e, CertError::Envelope(DsseError::Field(m)) if m.contains("unknown field `comment`")),
            "{e}"
        );

        let mut p: serde_json::Value = serde_json::from_str(&f.payload_text()).unwrap();
        p["engine"]["extra"] = 1.into();
        let text = crate::primitives::canonical::to_canonical(&p).unwrap();
        let e = malformed(verify_certificate(
            &f.raw(CERTIFICATE_PAYLOAD_TYPE, &text),
            &f.trust(1),
            at(NOW),
        ));
        assert!(
            matches!(&e, CertError::Payload(m) if m.contains("unknown field `extra`")),
            "{e}"
        );
    }

    #[test]
    fn rejects_revoked_certificate_digest() {
        let f = fixture(1);
        let bytes = f.signed_by(&[0]);
        let digest = Certificate::parse(&bytes).unwrap().digest();
        let e = refused(verify_certificate(
            &bytes,
            &f.trust_with(1, vec![digest]),
            at(NOW),
        ));
        assert!(
            matches!(e, CertError::Revoked { digest: d } if d == digest),
            "{e}"
        );
        // Revoking some other certificate does not affect this one.
        let other = f.trust_with(1, vec![Digest::of(b"other")]);
        assert!(verify_certificate(&bytes, &other, at(NOW)).is_ok());
    }

    #[test]
    fn rejects_non_canonical_payload_even_when_signed() {
        let f = fixture(1);
        let v: serde_json::Value = serde_json::from_str(&f.payload_text()).unwrap();
        let pretty = serde_json::to_vec_pretty(&v).unwrap();
        let e = malformed(verify_certificate(
            &f.raw(CERTIFICATE_PAYLOAD_TYPE, &pretty),
            &f.trust(1),
            at(NOW),
        ));
        assert!(
            matches!(&e, CertError::Payload(m) if m.contains("canonical")),
            "{e}"
        );
        // `"restrict": null` is a second spelling of "no report".
        let mut v = v;
        v["engine"]["restrict"] = serde_json::Value::Null;
        let text = crate::primitives::canonical::to_canonical(&v).unwrap();
        let e = malformed(verify_certificate(
            &f.raw(CERTIFICATE_PAYLOAD_TYPE, &text),
            &f.trust(1),
            at(NOW),
        ));
        assert!(
            matches!(&e, CertError::Payload(m) if m.contains("canonical")),
            "{e}"
        );
    }

    #[test]
    fn rejects_payload_whose_policy_id_does_not_match_its_policy() {
        let f = fixture(1);
        let mut v: serde_json::Value = serde_json::from_str(&f.payload_text()).unwrap();
        v["policy"]["limits"]["max_batch"] = 4096.into();
        let text = crate::primitives::canonical::to_canonical(&v).unwrap();
        let e = refused(verify_certificate(
            &f.raw(CERTIFICATE_PAYLOAD_TYPE, &text),
            &f.trust(1),
            at(NOW),
        ));
        assert!(
            matches!(
                e,
                CertError::Inconsistent {
                    field: "policy_id",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn rejects_bad_signature_by_trusted_key_even_if_threshold_is_met_otherwise() {
        let f = fixture(3);
        let mut env = Envelope::parse(&f.signed_by(&[0, 1, 2])).unwrap();
        env.signatures[2].sig[0] ^= 0x80;
        let e = refused(verify_certificate(&env.to_bytes(), &f.trust(2), at(NOW)));
        assert!(matches!(e, CertError::BadSignature { .. }), "{e}");
    }

    #[test]
    fn build_payload_defaults_and_refuses_empty_window() {
        let f = fixture(1);
        let mut terms = Terms {
            policy: f.payload.policy.clone(),
            model_digest: f.payload.model_digest,
            issued_at: ts("2026-11-01T00:00:00Z"),
            valid_from: None,
            expires_at: None,
            supersedes: None,
            lineage: "gemma3".into(),
            version: 1,
            recipients: vec![crate::sealing::SealKey::generate().recipient()],
            note: None,
            attestation: None,
        };
        let engine = EngineFacts {
            name: "e".into(),
            source_digest: Digest::of(b"e"),
            restrict: None,
        };
        let p = build_payload(engine.clone(), terms.clone()).unwrap();
        assert_eq!(p.valid_from, ts("2026-11-01T00:00:00Z"));
        assert_eq!(p.expires_at, ts("2027-01-30T00:00:00Z"));
        let text = String::from_utf8(p.to_bytes().unwrap()).unwrap();
        assert!(
            text.contains(r#""engine":{"name":"e","source_digest":"#),
            "{text}"
        );
        assert!(
            text.contains(r#""note":null"#) && text.contains(r#""supersedes":null"#),
            "{text}"
        );
        assert!(!text.contains("\"restrict\""), "{text}");

        terms.valid_from = Some(ts("2027-01-01T00:00:00Z"));
        terms.expires_at = Some(ts("2027-01-01T00:00:00Z"));
        assert!(matches!(
            build_payload(engine.clone(), terms.clone()),
            Err(CertError::EmptyWindow { .. })
        ));
        // The default expiry is counted from valid_from, so a later start alone moves it.
        terms.expires_at = None;
        terms.valid_from = Some(ts("2027-06-01T00:00:00Z"));
        let p = build_payload(engine.clone(), terms.clone()).unwrap();
        assert_eq!(p.expires_at, ts("2027-08-30T00:00:00Z"));
        terms.valid_from = None;
        terms.note = Some("two\nlines".into());
        assert!(matches!(
            build_payload(engine, terms),
            Err(CertError::BadNote(_))
        ));
    }

    #[test]
    fn rejects_control_characters_and_bad_ranges_in_signed_payload() {
        let f = fixture(1);
        let base: serde_json::Value = serde_json::from_str(&f.payload_text()).unwrap();
        type Edit = fn(&mut serde_json::Value);
        let cases: [(&str, Edit); 4] = [
            ("engine.name", |v| v["engine"]["name"] = "x\u{1b}[2J".into()),
            ("note", |v| v["note"] = "a\nb".into()),
            ("engine.restrict.private_ranges", |v| {
                v["engine"]["restrict"] = serde_json::json!({
                    "private_ranges": [{"kind": "hide", "start": 5, "end": 2}],
                    "calls_checked": 1,
                    "builtins_used": ["linear"],
                    "view_digest": "00".repeat(32),
                })
            }),
            ("engine.restrict.builtins_used", |v| {
                v["engine"]["restrict"] = serde_json::json!({
                    "private_ranges": [],
                    "calls_checked": 1,
                    "builtins_used": ["\u{7}"],
                    "view_digest": "00".repeat(32),
                })
            }),
        ];
        for (field, edit) in cases {
            let mut v = base.clone();
            edit(&mut v);
            let text = crate::primitives::canonical::to_canonical(&v).unwrap();
            let e = malformed(verify_certificate(
                &f.raw(CERTIFICATE_PAYLOAD_TYPE, &text),
                &f.trust(1),
                at(NOW),
            ));
            assert!(
                matches!(&e, CertError::Payload(m) if m.contains(field)),
                "{field}: {e}"
            );
        }
    }

    #[test]
    fn restrict_report_is_bound_when_present() {
        use crate::restrict::RegionKind;
        use crate::trust::certificate::{PrivateRange, RestrictReport};
        let f = fixture(1);
        let report = RestrictReport {
            private_ranges: vec![PrivateRange {
                kind: RegionKind::Hide,
                start: 3,
                end: 9,
            }],
            calls_checked: 12,
            builtins_used: ["linear".to_string(), "add".to_string()].into(),
            view_digest: Digest::of(b"view"),
        };
        let p = build_payload(
            EngineFacts {
                name: "e".into(),
                source_digest: Digest::of(b"e"),
                restrict: Some(report.clone()),
            },
            Terms {
                policy: f.payload.policy.clone(),
                model_digest: f.payload.model_digest,
                issued_at: ts("2026-11-01T00:00:00Z"),
                valid_from: None,
                expires_at: None,
                supersedes: Some(Digest::of(b"old")),
                lineage: "gemma3".into(),
                version: 1,
                recipients: vec![crate::sealing::SealKey::generate().recipient()],
                note: None,
                attestation: None,
            },
        )
        .unwrap();
        let back = CertificatePayload::from_bytes(&p.to_bytes().unwrap()).unwrap();
        assert_eq!(back.engine.restrict, Some(report));
        assert_eq!(back.supersedes, Some(Digest::of(b"old")));
    }
}
