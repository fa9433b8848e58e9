//! The verifier's report: what owners review beside the view, and what the certificate code
//! binds. Names of private functions appear only as their view names.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use super::ast::Program;
use super::regions::{Region, Regions};
use super::view::Naming;
use super::VERIFIER_VERSION;
use crate::restrict::policy::Policy;

/// The policy a report was checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyRef {
    /// The policy's `name`.
    pub name: String,
    /// `policy_id`, 16-hex display form (`policy_id_short` in JSON, as `policy-id` prints it).
    #[serde(rename = "policy_id_short")]
    pub id: String,
    /// `policy_id`, all 64 hex digits (`policy_id` in JSON, as every command prints it).
    #[serde(rename = "policy_id")]
    pub id_full: String,
}

/// A user function as the report lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionInfo {
    /// Its name in the view (renamed when defined in a private region).
    pub name: String,
    /// `public`, `obfuscate` or `hide`: the innermost region holding its definition.
    pub region: String,
}

/// What `check` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The engine's name (its path).
    pub engine: String,
    /// BLAKE3 of the exact source bytes, 64 hex digits.
    pub source_digest: String,
    /// The policy checked against.
    pub policy: PolicyRef,
    /// The verifier that checked it.
    pub verifier_version: String,
    /// The private regions, marker lines included.
    pub private_ranges: Vec<Region>,
    /// Built-in call sites checked against the policy: those in private regions and those
    /// reachable from private regions through user functions.
    pub calls_checked: usize,
    /// Every built-in the program calls, private or public, sorted.
    pub builtins_used: BTreeSet<String>,
    /// The user functions, in source order.
    pub functions: Vec<FunctionInfo>,
    /// BLAKE3 of the redacted view, 64 hex digits.
    pub view_digest: String,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        origin: &str,
        source: &str,
        policy: &Policy,
        regions: &Regions,
        calls_checked: usize,
        builtins_used: BTreeSet<String>,
        program: &Program,
        naming: &Naming,
        view: &str,
    ) -> Report {
        let id = policy.policy_id();
        Report {
            engine: origin.to_owned(),
            source_digest: blake3::hash(source.as_bytes()).to_hex().to_string(),
            policy: PolicyRef {
                name: policy.name.clone(),
                id: id.short(),
                id_full: id.to_hex(),
            },
            verifier_version: VERIFIER_VERSION.to_owned(),
            private_ranges: regions.list().to_vec(),
            calls_checked,
            builtins_used,
            functions: program
                .functions
                .iter()
                .enumerate()
                .map(|(i, f)| FunctionInfo {
                    name: naming.function(i).to_owned(),
                    region: regions
                        .innermost(f.name.pos.line)
                        .map_or("public", |r| r.kind.word())
                        .to_owned(),
                })
                .collect(),
            view_digest: blake3::hash(view.as_bytes()).to_hex().to_string(),
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        // A struct of strings, integers and sets always serialises.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The report for people, one fact per line.
    pub fn to_human(&self) -> String {
        let mut s = String::new();
        let ranges = if self.private_ranges.is_empty() {
            "none".to_owned()
        } else {
            self.private_ranges
                .iter()
                .map(|r| format!("{} {}-{}", r.kind, r.start_line, r.end_line))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let functions = self
            .functions
            .iter()
            .map(|f| {
                if f.region == "public" {
                    f.name.clone()
                } else {
                    format!("{} ({})", f.name, f.region)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let builtins = self
            .builtins_used
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(s, "engine            {}", self.engine);
        let _ = writeln!(s, "source digest     blake3:{}", self.source_digest);
        let _ = writeln!(
            s,
            "policy            {} (policy_id {}, full {})",
            self.policy.name, self.policy.id, self.policy.id_full
        );
        let _ = writeln!(s, "verifier          {}", self.verifier_version);
        let _ = writeln!(s, "private ranges    {ranges}");
        let _ = writeln!(s, "calls checked     {}", self.calls_checked);
        let _ = writeln!(s, "built-ins used    {builtins}");
        let _ = writeln!(s, "functions         {functions}");
        let _ = writeln!(s, "view digest       blake3:{}", self.view_digest);
        s
    }
}
