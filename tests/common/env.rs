//! [`Env`]: a [`Dir`] laid out for the runner (keys, engine, policy, model), its layouts, and
//! the trust operations on it: keys, trust files, approvals, signed envelopes.

use std::ops::Deref;

use runner::job::audit::{AuditLog, AuditRecord, Outcome};
use runner::primitives::digest::Digest;
use runner::primitives::dsse::Envelope;
use runner::primitives::keys::SecretKey;

use super::dir::Dir;
use super::repo::{fixture_model, root};

/// A temporary directory the tests run `runner` in, and what its approvals name.
pub struct Env {
    dir: Dir,
    /// The engine, policy and model [`Env::approve`] names: relative to the directory, or
    /// absolute.
    engine: &'static str,
    policy: String,
    model: String,
    /// The owners [`Env::approve_both`] has sign, first approving, second cosigning.
    pub(super) owners: [&'static str; 2],
}

impl Deref for Env {
    type Target = Dir;

    fn deref(&self) -> &Dir {
        &self.dir
    }
}

impl Env {
    /// `dir`, naming what [`Env::top_level`] writes.
    fn top_level_names(dir: Dir) -> Env {
        Env {
            dir,
            engine: "gemma3.eng",
            policy: "gemma3.json".into(),
            model: "model".into(),
            owners: ["a", "b"],
        }
    }

    /// The engine at `gemma3.eng` and the shipped policy at `gemma3.json`, a stand-in model
    /// `model/` (a config and `weights`), an empty `keys/`; owners `a` and `b`.
    fn top_level(weights: &[u8]) -> Env {
        let env = Env::top_level_names(Dir::new());
        env.mkdir("model");
        env.mkdir("keys");
        env.write("model/config.json", br#"{"hidden_size": 640}"#);
        env.write("model/model.safetensors", weights);
        env.copy_in(&root().join("engines/gemma3.eng"), "gemma3.eng");
        env.write_policy("gemma3.json");
        env
    }

    /// [`Env::top_level`] with 50 000 bytes of weights; no keys yet.
    pub fn new() -> Env {
        Env::top_level(&[3u8; 50_000])
    }

    /// [`Env::new`] with keys `a` and `b`, `cert.json` signed by both, and `trust.toml`
    /// requiring both.
    pub fn two_owner_cert() -> Env {
        let env = Env::new();
        env.keygen("a");
        env.keygen("b");
        env.trust(2, &["a", "b"], &[]);
        env.approve_both("cert.json", &[]);
        env
    }

    /// Keys `owner`, `runner` and `other-runner`, `cert.json` approved by `owner` (4096 bytes
    /// of stand-in weights), and `out/` holding [`RECEIPT_OUTPUTS`] as `outputs.jsonl` and the
    /// receipt the library signs for them with the runner key ([`Env::receipt_facts`]).
    ///
    /// [`RECEIPT_OUTPUTS`]: super::RECEIPT_OUTPUTS
    pub fn with_receipt() -> Env {
        let env = Env::top_level(&[7u8; 4096]);
        env.mkdir("out");
        for k in ["owner", "runner", "other-runner"] {
            env.keygen(k);
        }
        env.approve("owner", "cert.json", &[]);
        env.write_receipt();
        env
    }

    /// What a job needs except the model and its approval: `engines/gemma3.eng`,
    /// `policies/gemma3.json`, keys `owner-a` and `owner-b`, the runner's state directory
    /// `state/` (`runner init`), and `trust.toml` requiring both owners. No model, certificate,
    /// inputs or job.
    pub fn bare_job() -> Env {
        let env = Env {
            dir: Dir::new(),
            engine: "engines/gemma3.eng",
            policy: "policies/gemma3.json".into(),
            model: "model".into(),
            owners: ["owner-a", "owner-b"],
        };
        for d in ["keys", "engines", "policies"] {
            env.mkdir(d);
        }
        env.install_engine("gemma3.eng");
        env.write_policy("policies/gemma3.json");
        for k in ["owner-a", "owner-b"] {
            env.keygen(k);
        }
        env.init_state("state");
        env.trust(2, &["owner-a", "owner-b"], &[]);
        env
    }

    /// [`Env::bare_job`], the tiny-270m fixture as `model/`, `cert.json` both owners signed,
    /// the fixture's prompts as `inputs.jsonl` and `job.toml` over them: [`super::EXEC`] runs.
    pub fn approved_job() -> Env {
        let env = Env::bare_job();
        env.write_model_fixture();
        env.approve_both("cert.json", &[]);
        env.write_inputs(&super::fixture_prompts());
        env.write_job(2, 16, r#"["tokens"]"#);
        env
    }

    /// Owners `alice` and `bob` (both required), the shipped policy and the tiny-270m fixture
    /// named where they are in the repository, the unrolled engine installed as
    /// `engines/gemma3.eng`, two prompts in `inputs.jsonl`, and every command's state directory
    /// `state/` (initialised) through `RUNNER_STATE_DIR`.
    pub fn reapproval() -> Env {
        let mut dir = Dir::new();
        let state = dir.path("state");
        dir.set_var(runner::job::state::STATE_DIR_ENV, state);
        let env = Env {
            dir,
            engine: "engines/gemma3.eng",
            policy: "policy.json".into(),
            model: fixture_model("tiny-270m").display().to_string(),
            owners: ["alice", "bob"],
        };
        env.mkdir("engines");
        env.mkdir("keys");
        env.write_policy("policy.json");
        for key in ["alice", "bob"] {
            env.keygen(key);
        }
        env.init_state("state");
        env.trust(2, &["alice", "bob"], &[]);
        env.write(
            "inputs.jsonl",
            "{\"id\": \"q1\", \"tokens\": [2, 17, 99, 4]}\n{\"id\": \"q2\", \"tokens\": [2, 300]}\n",
        );
        env.install_engine("gemma3_unrolled.eng");
        env
    }

    /// `state/` holding an audit log of `n` entries written through the library: odd ones
    /// refused with reason `refusal <i>`, even ones accepted.
    pub fn audit_log(n: usize) -> Env {
        let env = Env::top_level_names(Dir::new());
        env.init_state("state");
        let log = AuditLog::open(&env.path("state"));
        for i in 0..n {
            let attempt = format!("attempt-{i}");
            let record = if i % 2 == 0 {
                AuditRecord {
                    certificate_digest: Some(Digest::of(b"cert")),
                    ..AuditRecord::new(&attempt, Outcome::Accepted)
                }
            } else {
                AuditRecord::with_reason(&attempt, Outcome::Refused, &format!("refusal {i}"))
            };
            log.append(record).unwrap();
        }
        env
    }

    /// The shipped policy as `name`, with sealing optional: most tests exercise other checks on
    /// plaintext inputs and outputs; `tests/cli/sealing.rs` runs the shipped policy as it is.
    pub fn write_policy(&self, name: &str) {
        let mut policy: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root().join("policies/gemma3.json")).unwrap())
                .unwrap();
        policy["sealing"] = serde_json::json!({"inputs": "optional", "outputs": "optional"});
        self.write(name, serde_json::to_vec_pretty(&policy).unwrap());
    }

    /// Copy the repository's `engines/<shipped>` to `engines/gemma3.eng`, the engine jobs run
    /// (swapping the engine is replacing that file).
    pub fn install_engine(&self, shipped: &str) {
        self.copy_in(&root().join("engines").join(shipped), "engines/gemma3.eng");
    }

    /// The tiny-270m fixture's config and weights as `model/`.
    pub fn write_model_fixture(&self) {
        self.mkdir("model");
        for f in ["config.json", "model.safetensors"] {
            self.copy_in(&fixture_model("tiny-270m").join(f), &format!("model/{f}"));
        }
    }

    /// `runner init --state-dir <dir>`: the runner's state directory and signing key.
    pub fn init_state(&self, dir: &str) {
        self.ok(&["init", "--state-dir", dir]);
    }

    /// `runner keygen` of `keys/<name>.key` (and `.pub`).
    pub fn keygen(&self, name: &str) {
        self.ok(&["keygen", "--out", &format!("keys/{name}.key")]);
    }

    /// The private key `keys/<name>.key`.
    pub fn key(&self, name: &str) -> SecretKey {
        SecretKey::load(&self.path(&format!("keys/{name}.key"))).unwrap()
    }

    /// `trust.toml`: `required` signatures of the keys `owners` (`keys/<owner>.key.pub`), and
    /// the `revoked` certificate digests.
    pub fn trust(&self, required: u32, owners: &[&str], revoked: &[String]) {
        let owners: Vec<String> = owners
            .iter()
            .map(|o| format!("\"keys/{o}.key.pub\""))
            .collect();
        let revoked: Vec<String> = revoked.iter().map(|r| format!("\"{r}\"")).collect();
        self.write(
            "trust.toml",
            format!(
                "required_signatures = {required}\nowners = [{}]\nrevoked = [{}]\n",
                owners.join(", "),
                revoked.join(", ")
            ),
        );
    }

    /// `runner approve` of this directory's engine and model under `policy`, signed by
    /// `keys/<key>.key`, written to `out`, with `extra` flags; returns stdout.
    pub fn approve_under(&self, policy: &str, key: &str, out: &str, extra: &[&str]) -> String {
        let args = self.approve_args(policy, key, out, extra);
        self.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// [`Env::approve`] that must fail with exit `code` and `needle` in its stderr; returns
    /// stderr.
    pub fn approve_fails(
        &self,
        key: &str,
        out: &str,
        extra: &[&str],
        code: i32,
        needle: &str,
    ) -> String {
        let args = self.approve_args(&self.policy, key, out, extra);
        self.fails(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            code,
            needle,
        )
    }

    /// The `runner approve` command line of [`Env::approve_under`].
    fn approve_args(&self, policy: &str, key: &str, out: &str, extra: &[&str]) -> Vec<String> {
        let key = format!("keys/{key}.key");
        let mut args: Vec<String> = [
            "approve",
            "--engine",
            self.engine,
            "--policy",
            policy,
            "--model",
            &self.model,
            "--key",
            &key,
            "--out",
            out,
        ]
        .map(String::from)
        .into();
        args.extend(extra.iter().map(|e| e.to_string()));
        args
    }

    /// [`Env::approve_under`] this directory's policy.
    pub fn approve(&self, key: &str, out: &str, extra: &[&str]) -> String {
        self.approve_under(&self.policy, key, out, extra)
    }

    /// [`Env::approve`] by the first owner, cosigned by the second.
    pub fn approve_both(&self, out: &str, extra: &[&str]) {
        let [first, second] = self.owners;
        self.approve(first, out, extra);
        self.cosign(out, second);
    }

    /// `runner cosign cert` by `keys/<key>.key`, in place, checking the signatures already on
    /// it against `trust.toml`.
    pub fn cosign(&self, cert: &str, key: &str) {
        self.ok(&[
            "cosign",
            cert,
            "--key",
            &format!("keys/{key}.key"),
            "--trust",
            "trust.toml",
        ]);
    }

    /// The DSSE envelope in file `name`.
    pub fn envelope(&self, name: &str) -> Envelope {
        Envelope::parse(&std::fs::read(self.path(name)).unwrap()).unwrap()
    }

    /// Arbitrary payload bytes and type, signed by the named keys, as envelope file `name`.
    pub fn write_signed(&self, name: &str, payload_type: &str, payload: &[u8], keys: &[&str]) {
        let mut env = Envelope::new(payload_type, payload.to_vec());
        for k in keys {
            env.sign(&self.key(k)).unwrap();
        }
        self.write(name, env.to_bytes());
    }

    /// The payload of `cert.json`, as text.
    pub fn payload_text(&self) -> String {
        String::from_utf8(self.envelope("cert.json").payload).unwrap()
    }
}
