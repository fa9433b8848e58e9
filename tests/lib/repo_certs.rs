//! The certificates in certs/ still approve the engines and policy this repository ships: a
//! change to engines/ or policies/gemma3.json without re-approval fails here, printing the
//! command that re-approves them.

use runner::model::digest::model_digest;
use runner::primitives::digest::Digest;
use runner::restrict::check;
use runner::restrict::policy::Policy;
use runner::trust::certificate::{Certificate, RestrictReport};

use crate::common::repo::{fixture_model, root};

const REAPPROVE: &str = "scripts/reapprove_repo.sh (then commit certs/)";

#[test]
fn shipped_certificates_match_the_shipped_engines_and_policy() {
    let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
    let model = model_digest(&fixture_model("tiny-270m")).unwrap().digest;
    for engine in ["gemma3", "gemma3_unrolled"] {
        let cert_path = root().join(format!("certs/{engine}.cert.json"));
        let cert = Certificate::parse(&std::fs::read(&cert_path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", cert_path.display()));
        let p = cert.payload();
        let engine_path = format!("engines/{engine}.eng");
        let source = std::fs::read_to_string(root().join(&engine_path)).unwrap();
        assert_eq!(
            p.engine.source_digest,
            Digest::of(source.as_bytes()),
            "{engine_path} changed since {} was signed: re-approve with {REAPPROVE}",
            cert_path.display()
        );
        assert_eq!(
            p.policy_id.0,
            policy.policy_id().0,
            "policies/gemma3.json changed since {} was signed: re-approve with {REAPPROVE}",
            cert_path.display()
        );
        let checked = check(&source, &engine_path, &policy).unwrap();
        assert_eq!(
            p.engine.restrict.as_ref(),
            Some(&RestrictReport::from_report(checked.report()).unwrap()),
            "the verifier's report on {engine_path} changed: re-approve with {REAPPROVE}"
        );
        assert_eq!(
            p.model_digest, model,
            "tiny-270m fixture changed: {REAPPROVE}"
        );
        assert!(p.expires_at.to_rfc3339().unwrap().starts_with("2036-"));
        assert_eq!(cert.signer_ids().len(), 1);
    }
}
