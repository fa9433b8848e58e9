//! Policies: which functions an engine's private regions may call, and the limits `exec`
//! enforces on a job; and `policy_id`, the digest owners approve.
//!
//! `policy_id` is the BLAKE3 digest, in derive-key mode under [`POLICY_ID_CONTEXT`], of the RFC
//! 8785 canonical JSON of `{"policy": <normalised policy>, "verifier_version": <version>}`. The
//! normalised policy has every list sorted and de-duplicated, so reordering or repeating entries
//! keeps the id, while the JSON encoding keeps `["a|b"]` and `["a","b"]` apart. Unlike
//! syft-restrict's 64-bit hash of `|`-joined lists, it is a full 256-bit digest and it changes
//! with the verifier version. Its display form is the first 16 hex digits.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded, ReadError, MAX_TEXT_BYTES};
use crate::primitives::canonical::{self, parse_strict};

/// The policy file format this runner reads.
pub const POLICY_SCHEMA: &str = "runner-policy/1";

/// BLAKE3 derive-key context for `policy_id`.
pub const POLICY_ID_CONTEXT: &str = "runner 2026-11 policy_id v1";

/// BLAKE3 derive-key context for the policy digest (the canonical policy alone).
pub const POLICY_DIGEST_CONTEXT: &str = "runner 2026-11 policy digest v1";

/// Longest accepted policy `name`, in bytes.
const MAX_NAME_LEN: usize = 100;

/// A policy, as written in its JSON file, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Always [`POLICY_SCHEMA`].
    pub schema: String,
    /// A short human name ("gemma3").
    pub name: String,
    /// Function names or `prefix.*` globs that private regions may call.
    pub allow_functions: BTreeSet<String>,
    /// Function names or globs that may never be called; beats `allow_functions`.
    #[serde(default)]
    pub disallow_functions: BTreeSet<String>,
    /// Limits `runner exec` enforces on every job.
    pub limits: Limits,
    /// The output kinds a job may ask for.
    pub outputs: BTreeSet<OutputKind>,
    /// Whether inputs and outputs must be sealed (absent: both optional).
    #[serde(default)]
    pub sealing: Sealing,
}

/// Whether private data must travel encrypted (the age format): inputs to the runner's
/// recipient, outputs to the recipients the certificate names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealing {
    /// Inputs.
    #[serde(default)]
    pub inputs: SealRule,
    /// Outputs.
    #[serde(default)]
    pub outputs: SealRule,
}

/// One direction's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SealRule {
    /// Plaintext is refused.
    Required,
    /// Sealed or plaintext.
    #[default]
    Optional,
}

/// Limits the runner enforces on a job before running it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest batch of sequences run together.
    pub max_batch: u32,
    /// Largest number of generated tokens per input.
    pub max_new_tokens: u32,
    /// Longest prompt, in tokens, after the template is applied.
    pub max_prompt_tokens: u32,
    /// Largest number of inputs in one job.
    pub max_inputs: u32,
}

/// What a job may write back out of the enclave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Generated token ids.
    Tokens,
    /// Generated text, decoded by the tokenizer.
    Text,
}

/// A 256-bit digest with the short 16-hex display form used for `policy_id`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyId(pub [u8; 32]);

impl PolicyId {
    /// The full digest as 64 hex digits.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from(self.0).to_hex().to_string()
    }
    /// The 16-hex display form.
    pub fn short(&self) -> String {
        self.to_hex()[..16].to_owned()
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

impl fmt::Debug for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicyId({})", self.to_hex())
    }
}

/// Why a policy was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error(transparent)]
    File(ReadError),
    /// Not JSON, a duplicate key, an unknown field, a wrong type or a missing field.
    #[error("policy {origin} is malformed: {detail}")]
    Malformed {
        /// Where the policy came from (a path, or "certificate payload").
        origin: String,
        /// serde's message, with line and column.
        detail: String,
    },
    /// The `schema` field names a format this runner does not read.
    #[error("policy {origin}: field `schema` is {found:?}, expected {POLICY_SCHEMA:?}")]
    Schema {
        /// Where the policy came from.
        origin: String,
        /// The schema found.
        found: String,
    },
    /// A function pattern that is neither a name nor a `prefix.*` glob.
    #[error("policy {origin}: field `{field}` has an invalid entry {entry:?}: {why}")]
    BadPattern {
        /// Where the policy came from.
        origin: String,
        /// `allow_functions` or `disallow_functions`.
        field: &'static str,
        /// The offending entry.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A limit of zero would refuse every job.
    #[error("policy {origin}: field `limits.{field}` is 0; every job would be refused")]
    ZeroLimit {
        /// Where the policy came from.
        origin: String,
        /// The limit's name.
        field: &'static str,
    },
    /// `name` is empty, too long, or has control characters (it is printed to terminals).
    #[error("policy {origin}: field `name` {why}")]
    BadName {
        /// Where the policy came from.
        origin: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `outputs` is empty, so no job could write anything.
    #[error("policy {origin}: field `outputs` is empty")]
    NoOutputs {
        /// Where the policy came from.
        origin: String,
    },
}

impl Diagnose for PolicyError {
    fn exit(&self) -> Exit {
        match self {
            PolicyError::File(e) => e.exit(),
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            PolicyError::File(e) if e.is_missing() => format!(
                "nothing is at {}: give the path of a policy JSON file (such as \
                 policies/gemma3.json)",
                e.path().display()
            ),
            PolicyError::File(e) => return e.hint(),
            PolicyError::Malformed { .. } => "a policy has exactly the fields schema, name, \
                allow_functions, disallow_functions, limits {max_batch, max_new_tokens, \
                max_prompt_tokens, max_inputs} and outputs; see policies/gemma3.json"
                .into(),
            PolicyError::Schema { .. } => format!("set \"schema\": \"{POLICY_SCHEMA}\""),
            PolicyError::BadPattern { .. } => "write an exact function name (`linear`, \
                `nn.linear`) or a prefix glob (`nn.*`); other wildcards are not supported"
                .into(),
            PolicyError::ZeroLimit { .. } => "set the limit to the largest value you accept".into(),
            PolicyError::NoOutputs { .. } => "list at least one of \"tokens\", \"text\"".into(),
            PolicyError::BadName { .. } => "use a short printable name such as \"gemma3\"".into(),
        })
    }
}

/// A validated function pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern<'a> {
    Exact(&'a str),
    Prefix(&'a str),
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_dotted_name(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_ident)
}

fn parse_pattern(entry: &str) -> Result<Pattern<'_>, &'static str> {
    if let Some(prefix) = entry.strip_suffix(".*") {
        if is_dotted_name(prefix) {
            return Ok(Pattern::Prefix(prefix));
        }
        return Err("the part before `.*` must be a dotted name of ASCII identifiers");
    }
    if entry.contains('*') {
        return Err("`*` is only allowed as a whole final segment (`prefix.*`)");
    }
    if is_dotted_name(entry) {
        Ok(Pattern::Exact(entry))
    } else {
        Err("not a function name: use ASCII letters, digits and `_`, segments joined by `.`")
    }
}

fn pattern_matches(pattern: &str, name: &str) -> bool {
    match parse_pattern(pattern) {
        Ok(Pattern::Exact(p)) => p == name,
        Ok(Pattern::Prefix(p)) => name
            .strip_prefix(p)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1),
        Err(_) => false,
    }
}

impl Policy {
    /// Read and validate a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let bytes = read_bounded(path, MAX_TEXT_BYTES, "policy").map_err(PolicyError::File)?;
        Policy::from_json(&bytes, &path.display().to_string())
    }

    /// Parse and validate policy JSON; `origin` names it in errors.
    pub fn from_json(bytes: &[u8], origin: &str) -> Result<Policy, PolicyError> {
        let malformed = |e: serde_json::Error| PolicyError::Malformed {
            origin: origin.to_owned(),
            detail: e.to_string(),
        };
        // Duplicate keys first: serde's derive would catch them only for struct fields.
        parse_strict(bytes).map_err(malformed)?;
        let policy: Policy = serde_json::from_slice(bytes).map_err(malformed)?;
        policy.validate(origin)?;
        Ok(policy)
    }

    /// Check the invariants serde cannot express.
    pub fn validate(&self, origin: &str) -> Result<(), PolicyError> {
        if self.schema != POLICY_SCHEMA {
            return Err(PolicyError::Schema {
                origin: origin.to_owned(),
                found: self.schema.clone(),
            });
        }
        let why = if self.name.trim().is_empty() {
            Some("is empty")
        } else if self.name.len() > MAX_NAME_LEN {
            Some("is longer than 100 bytes")
        } else if self.name.chars().any(char::is_control) {
            Some("contains control characters")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(PolicyError::BadName {
                origin: origin.to_owned(),
                why,
            });
        }
        for (field, list) in [
            ("allow_functions", &self.allow_functions),
            ("disallow_functions", &self.disallow_functions),
        ] {
            for entry in list {
                parse_pattern(entry).map_err(|why| PolicyError::BadPattern {
                    origin: origin.to_owned(),
                    field,
                    entry: entry.clone(),
                    why,
                })?;
            }
        }
        let l = &self.limits;
        for (field, v) in [
            ("max_batch", l.max_batch),
            ("max_new_tokens", l.max_new_tokens),
            ("max_prompt_tokens", l.max_prompt_tokens),
            ("max_inputs", l.max_inputs),
        ] {
            if v == 0 {
                return Err(PolicyError::ZeroLimit {
                    origin: origin.to_owned(),
                    field,
                });
            }
        }
        if self.outputs.is_empty() {
            return Err(PolicyError::NoOutputs {
                origin: origin.to_owned(),
            });
        }
        Ok(())
    }

    /// Whether a private region may call `name`: some allow entry matches it and no disallow
    /// entry does. Anything not allowed is denied.
    pub fn allows(&self, name: &str) -> bool {
        let hit = |list: &BTreeSet<String>| list.iter().any(|p| pattern_matches(p, name));
        !hit(&self.disallow_functions) && hit(&self.allow_functions)
    }

    /// The policy's normalised RFC 8785 bytes: lists sorted and de-duplicated (the sets do it).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        canonical::to_canonical_from(self).expect("a policy holds only strings and small integers")
    }

    /// Digest of the canonical policy alone.
    pub fn digest(&self) -> PolicyId {
        let mut h = blake3::Hasher::new_derive_key(POLICY_DIGEST_CONTEXT);
        h.update(&self.canonical_bytes());
        PolicyId(*h.finalize().as_bytes())
    }

    /// `policy_id` under the running verifier.
    pub fn policy_id(&self) -> PolicyId {
        self.policy_id_for(crate::restrict::VERIFIER_VERSION)
    }

    /// `policy_id` under a given verifier version.
    pub fn policy_id_for(&self, verifier_version: &str) -> PolicyId {
        let doc = serde_json::json!({
            "policy": serde_json::to_value(self).expect("policy serialises"),
            "verifier_version": verifier_version,
        });
        let bytes =
            canonical::to_canonical(&doc).expect("a policy holds only strings and small integers");
        let mut h = blake3::Hasher::new_derive_key(POLICY_ID_CONTEXT);
        h.update(&bytes);
        PolicyId(*h.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn base() -> Value {
        json!({
            "schema": POLICY_SCHEMA,
            "name": "test",
            "allow_functions": ["linear", "nn.*", "add"],
            "disallow_functions": ["nn.exec"],
            "limits": {"max_batch": 8, "max_new_tokens": 64, "max_prompt_tokens": 512, "max_inputs": 100},
            "outputs": ["tokens", "text"],
        })
    }

    fn parse(v: &Value) -> Result<Policy, PolicyError> {
        Policy::from_json(v.to_string().as_bytes(), "test.json")
    }

    fn id(v: &Value) -> PolicyId {
        parse(v).unwrap().policy_id()
    }

    #[test]
    fn shipped_policy_loads() {
        let p = Policy::load(Path::new("policies/gemma3.json")).unwrap();
        assert_eq!(p.name, "gemma3");
        assert!(p.allows("linear"));
        assert!(!p.allows("open_file"));
    }

    #[test]
    fn reordering_or_duplicating_entries_keeps_the_id() {
        let mut v = base();
        v["allow_functions"] = json!(["add", "linear", "nn.*", "add", "linear"]);
        v["outputs"] = json!(["text", "tokens", "text"]);
        v["disallow_functions"] = json!(["nn.exec", "nn.exec"]);
        assert_eq!(id(&v), id(&base()));
        // The limits object's key order does not matter either.
        let text = base().to_string().replace(
            r#""max_batch":8,"max_inputs":100"#,
            r#""max_inputs":100,"max_batch":8"#,
        );
        let p = Policy::from_json(text.as_bytes(), "t").unwrap();
        assert_eq!(p.policy_id(), id(&base()));
    }

    #[test]
    fn absent_disallow_list_equals_empty_list() {
        let mut a = base();
        a["disallow_functions"] = json!([]);
        let mut b = base();
        b.as_object_mut().unwrap().remove("disallow_functions");
        assert_eq!(id(&a), id(&b));
    }

    #[test]
    fn joined_names_do_not_collide_with_separate_names() {
        // syft-restrict's `|`-joined encoding maps both to "a|b". Ours keeps them apart; "a|b"
        // is not even a valid function name.
        let mut joined = base();
        joined["allow_functions"] = json!(["a|b"]);
        assert!(matches!(
            parse(&joined),
            Err(PolicyError::BadPattern {
                field: "allow_functions",
                ..
            })
        ));
        let mut split = base();
        split["allow_functions"] = json!(["a", "b"]);
        let mut one = base();
        one["allow_functions"] = json!(["a.b"]);
        assert_ne!(id(&split), id(&one));
        // Moving a name from one list to the other changes the id.
        let mut moved = base();
        moved["allow_functions"] = json!(["linear", "nn.*", "add", "nn.exec"]);
        moved["disallow_functions"] = json!([]);
        assert_ne!(id(&moved), id(&base()));
        // The two raw encodings differ as canonical JSON, which is what is hashed.
        let a = canonical::to_canonical(&json!(["a|b"])).unwrap();
        let b = canonical::to_canonical(&json!(["a", "b"])).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn every_limit_output_and_name_change_changes_the_id() {
        let reference = id(&base());
        for limit in [
            "max_batch",
            "max_new_tokens",
            "max_prompt_tokens",
            "max_inputs",
        ] {
            let mut v = base();
            let n = v["limits"][limit].as_u64().unwrap();
            v["limits"][limit] = json!(n + 1);
            assert_ne!(id(&v), reference, "{limit}");
        }
        let mut v = base();
        v["outputs"] = json!(["tokens"]);
        assert_ne!(id(&v), reference);
        let mut v = base();
        v["name"] = json!("other");
        assert_ne!(id(&v), reference);
    }

    #[test]
    fn verifier_version_is_part_of_the_id() {
        let p = parse(&base()).unwrap();
        assert_eq!(
            p.policy_id(),
            p.policy_id_for(crate::restrict::VERIFIER_VERSION)
        );
        assert_ne!(
            p.policy_id_for("runner-restrict/1"),
            p.policy_id_for("runner-restrict/2")
        );
        // The digest of the policy alone does not depend on it, and is a different value.
        assert_ne!(p.digest(), p.policy_id());
    }

    #[test]
    fn short_form_is_16_hex_prefix() {
        let pid = id(&base());
        assert_eq!(pid.short().len(), 16);
        assert_eq!(pid.to_hex().len(), 64);
        assert!(pid.to_hex().starts_with(&pid.short()));
        assert_eq!(pid.to_string(), pid.short());
    }

    #[test]
    fn rejects_unknown_fields_naming_them() {
        let mut v = base();
        v["allow"] = json!([]);
        let err = parse(&v).unwrap_err();
        assert!(matches!(err, PolicyError::Malformed { .. }));
        assert!(err.to_string().contains("unknown field `allow`"), "{err}");
        let mut v = base();
        v["limits"]["max_tokens"] = json!(1);
        let err = parse(&v).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `max_tokens`"),
            "{err}"
        );
        let mut v = base();
        v["outputs"] = json!(["logits"]);
        let err = parse(&v).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `logits`"),
            "{err}"
        );
    }

    #[test]
    fn rejects_bad_globs_naming_the_field() {
        for (field, entry) in [
            ("allow_functions", "nn*"),
            ("allow_functions", "*"),
            ("allow_functions", "a.*.b"),
            ("disallow_functions", "1abc"),
            ("disallow_functions", "a..b"),
            ("allow_functions", ""),
        ] {
            let mut v = base();
            v[field] = json!([entry]);
            match parse(&v) {
                Err(PolicyError::BadPattern {
                    field: f, entry: e, ..
                }) => {
                    assert_eq!((f, e.as_str()), (field, entry));
                }
                other => panic!("{entry:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn rejects_duplicate_keys() {
        let text = base().to_string().replacen("{", r#"{"name":"shadow","#, 1);
        let err = Policy::from_json(text.as_bytes(), "dup.json").unwrap_err();
        assert!(matches!(err, PolicyError::Malformed { .. }));
        assert!(err.to_string().contains("duplicate key `name`"), "{err}");
        let text =
            base()
                .to_string()
                .replacen(r#""max_batch":8"#, r#""max_batch":8,"max_batch":9"#, 1);
        let err = Policy::from_json(text.as_bytes(), "dup.json").unwrap_err();
        assert!(
            err.to_string().contains("duplicate key `max_batch`"),
            "{err}"
        );
    }

    #[test]
    fn rejects_zero_limits_empty_outputs_bad_schema_and_bad_names() {
        let mut v = base();
        v["limits"]["max_inputs"] = json!(0);
        assert!(matches!(
            parse(&v),
            Err(PolicyError::ZeroLimit {
                field: "max_inputs",
                ..
            })
        ));
        let mut v = base();
        v["outputs"] = json!([]);
        assert!(matches!(parse(&v), Err(PolicyError::NoOutputs { .. })));
        let mut v = base();
        v["schema"] = json!("runner-policy/2");
        assert!(matches!(parse(&v), Err(PolicyError::Schema { .. })));
        for name in ["", "  ", "bad\u{1b}[2Jname"] {
            let mut v = base();
            v["name"] = json!(name);
            assert!(
                matches!(parse(&v), Err(PolicyError::BadName { .. })),
                "{name:?}"
            );
        }
    }

    #[test]
    fn allow_and_deny_matching() {
        let p = parse(&base()).unwrap();
        assert!(p.allows("linear"));
        assert!(p.allows("nn.gelu"));
        assert!(p.allows("nn.sub.gelu"));
        assert!(
            !p.allows("nn"),
            "a prefix glob needs a segment after the prefix"
        );
        assert!(!p.allows("nn.exec"), "disallow beats allow");
        assert!(!p.allows("nnx.gelu"));
        assert!(!p.allows("linear2"));
        assert!(!p.allows("mul"), "default deny");
    }
}
