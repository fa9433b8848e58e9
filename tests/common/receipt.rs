//! Receipts in an [`Env`]: one the library signs, its Statement, and `runner verify`.

use runner::model::tokenizer::Template;
use runner::primitives::digest::Digest;
use runner::primitives::time::Timestamp;
use runner::restrict::policy::OutputKind;
use runner::trust::certificate::Certificate;
use runner::trust::generation::Generation;
use runner::trust::receipt::{
    sign_receipt, Commitment, FinishReasons, RunCounts, RunFacts, RunnerIdentity, Sealed,
    INPUTS_COMMITMENT_CONTEXT, RECEIPT_PAYLOAD_TYPE,
};
use serde_json::Value;

use super::env::Env;

/// The outputs.jsonl of [`Env::with_receipt`].
pub const RECEIPT_OUTPUTS: &[u8] = b"{\"id\":\"q1\",\"text\":\"Paris\",\"tokens\":[12,1]}\n";

impl Env {
    /// out/outputs.jsonl ([`RECEIPT_OUTPUTS`]) and out/receipt.json, signed by the runner key
    /// over [`Env::receipt_facts`].
    pub(super) fn write_receipt(&self) {
        self.write("out/outputs.jsonl", RECEIPT_OUTPUTS);
        let receipt = sign_receipt(
            &self.receipt_facts(),
            &[("outputs.jsonl", RECEIPT_OUTPUTS)],
            &self.key("runner"),
        )
        .unwrap();
        self.write("out/receipt.json", receipt);
    }

    /// The facts of a made-up run under `cert.json`.
    pub fn receipt_facts(&self) -> RunFacts {
        let cert = Certificate::load(&self.path("cert.json")).unwrap();
        let p = cert.payload();
        RunFacts {
            certificate_digest: cert.digest(),
            engine_digest: p.engine.source_digest,
            policy_id: p.policy_id,
            model_digest: p.model_digest,
            job_digest: Digest::of(b"job.toml bytes"),
            inputs: Commitment::with_salt(
                INPUTS_COMMITMENT_CONTEXT,
                Digest::of(b"salt"),
                b"inputs bytes",
            ),
            inputs_ciphertext: None,
            outputs_commitment: None,
            sealed: Sealed {
                inputs: false,
                outputs: false,
            },
            generation: Generation {
                batch_size: 4,
                max_new_tokens: 16,
                template: Template::Chat,
                outputs: vec![OutputKind::Text, OutputKind::Tokens],
                ..Generation::default()
            },
            runner: RunnerIdentity {
                version: "0.1.0".into(),
                executable_digest: Digest::of(b"runner binary"),
            },
            started_at: Timestamp::parse_canonical("2026-11-02T10:00:00Z").unwrap(),
            finished_at: Timestamp::parse_canonical("2026-11-02T10:00:05Z").unwrap(),
            counts: RunCounts {
                inputs: 1,
                generated_tokens: 2,
                finish_reasons: FinishReasons { stop: 1, length: 0 },
            },
            attestation: None,
            shard: None,
            resumed_at: None,
            sampling: None,
        }
    }

    /// A receipt whose Statement is `payload`, signed by the runner key, written to out/.
    pub fn write_signed_statement(&self, payload: &[u8]) {
        self.write_signed(
            "out/receipt.json",
            RECEIPT_PAYLOAD_TYPE,
            payload,
            &["runner"],
        );
    }

    /// The Statement out/receipt.json signs.
    pub fn statement(&self) -> Value {
        serde_json::from_slice(&self.envelope("out/receipt.json").payload).unwrap()
    }

    /// `runner verify` of out/receipt.json (written by `exec`) against `cert` and the runner's
    /// own key in `state/`, as JSON.
    pub fn verify_receipt(&self, cert: &str) -> Value {
        self.verify_receipt_in("out", cert)
    }

    /// [`Env::verify_receipt`] of the receipt in `dir`.
    pub fn verify_receipt_in(&self, dir: &str, cert: &str) -> Value {
        let receipt = format!("{dir}/receipt.json");
        let out = self.ok(&[
            "verify",
            &receipt,
            "--cert",
            cert,
            "--runner-key",
            "state/runner.key.pub",
            "--json",
        ]);
        serde_json::from_str(&out).unwrap()
    }
}
