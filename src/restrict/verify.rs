//! The verifier: the one function, [`check`], that turns engine source into a [`Checked`]
//! program, and the policy rule it enforces.
//!
//! The rule: every call made from a private region must be allowed by the policy. A call to a
//! built-in is checked by name; a call to a user function (or a scan body) is checked through
//! everything that function can reach, wherever those functions are defined, so a private
//! region cannot launder a call through a public helper. All violations are reported.
//! `Checked` has private fields and no other constructor, so holding one proves the source
//! passed this check; the compiler takes it by value.

use std::collections::{BTreeMap, BTreeSet};

use super::ast::Program;
use super::builtins::Builtin;
use super::diagnostic::{Excerpt, LineIndex, Pos};
use super::error::{RestrictError, Via, Violation};
use super::lexer::lex;
use super::parser::parse;
use super::regions::Regions;
use super::report::Report;
use super::resolve::{resolve, Resolved, Target};
use super::view::{self, Naming};
use crate::restrict::policy::Policy;

/// A program that passed the verifier against a policy: its source, its syntax tree, its
/// regions, the report and the owner's view. Only [`check`] makes one.
#[derive(Debug, Clone)]
pub struct Checked {
    source: String,
    program: Program,
    resolved: Resolved,
    regions: Regions,
    naming: Naming,
    report: Report,
    view: String,
}

impl Checked {
    /// What the verifier found: digest, policy_id, private ranges, calls checked, built-ins.
    pub fn report(&self) -> &Report {
        &self.report
    }
    /// The owner's redacted view.
    pub fn view(&self) -> &str {
        &self.view
    }
    /// The exact source verified.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// The parts the compiler needs.
    pub(super) fn into_parts(self) -> CheckedParts {
        CheckedParts {
            source: self.source,
            program: self.program,
            resolved: self.resolved,
            regions: self.regions,
            naming: self.naming,
            report: self.report,
        }
    }
}

/// A [`Checked`] program taken apart by the compiler.
pub(super) struct CheckedParts {
    pub source: String,
    pub program: Program,
    pub resolved: Resolved,
    pub regions: Regions,
    pub naming: Naming,
    pub report: Report,
}

/// Verify engine `source` (named `origin` in messages) against `policy`.
///
/// Parses it, pairs the region markers, resolves every name and call, refuses recursion,
/// checks every call reachable from a private region against the policy, and renders the
/// owner's view. Returns every violation at once, or the first syntax error.
pub fn check(source: &str, origin: &str, policy: &Policy) -> Result<Checked, RestrictError> {
    check_showing_private(source, origin, policy).map_err(|e| e.withhold_private(source))
}

/// [`check`], with errors in private regions shown in full: for the engine's author only
/// (`runner restrict --show-private`), never for owners, operators or logs.
pub fn check_showing_private(
    source: &str,
    origin: &str,
    policy: &Policy,
) -> Result<Checked, RestrictError> {
    let syntax = |error| RestrictError::Syntax {
        origin: origin.to_owned(),
        error,
    };
    let lexed = lex(source).map_err(syntax)?;
    let program = parse(source, &lexed).map_err(syntax)?;
    let regions = Regions::build(source, &lexed.markers).map_err(syntax)?;
    regions.check_constructs(source, &program).map_err(syntax)?;
    let resolved = resolve(source, &program).map_err(|errors| RestrictError::Program {
        origin: origin.to_owned(),
        errors,
    })?;
    let outcome = check_policy(source, &program, &regions, &resolved, policy);
    if !outcome.violations.is_empty() {
        return Err(RestrictError::Violations {
            origin: origin.to_owned(),
            policy: format!("{} ({})", policy.name, policy.policy_id().short()),
            violations: outcome.violations,
        });
    }
    let naming = Naming::new(source, &lexed, &program, &regions, &resolved);
    let view = view::render(source, &lexed, &regions, &resolved, &naming);
    let builtins_used: BTreeSet<String> = resolved
        .calls
        .iter()
        .filter_map(|c| match c.target {
            Target::Builtin(b) => Some(b.name().to_owned()),
            Target::Function(_) => None,
        })
        .collect();
    let report = Report::new(
        origin,
        source,
        policy,
        &regions,
        outcome.calls_checked,
        builtins_used,
        &program,
        &naming,
        &view,
    );
    Ok(Checked {
        source: source.to_owned(),
        program,
        resolved,
        regions,
        naming,
        report,
        view,
    })
}

/// [`check`] for raw file bytes: anything but ASCII is refused with its line:col first.
pub fn check_bytes(source: &[u8], origin: &str, policy: &Policy) -> Result<Checked, RestrictError> {
    check_bytes_with(source, origin, policy, check)
}

/// [`check_bytes`] with errors in private regions shown in full (see [`check_showing_private`]).
pub fn check_bytes_showing_private(
    source: &[u8],
    origin: &str,
    policy: &Policy,
) -> Result<Checked, RestrictError> {
    check_bytes_with(source, origin, policy, check_showing_private)
}

fn check_bytes_with(
    source: &[u8],
    origin: &str,
    policy: &Policy,
    check: fn(&str, &str, &Policy) -> Result<Checked, RestrictError>,
) -> Result<Checked, RestrictError> {
    let text = super::lexer::source_from_bytes(source).map_err(|error| RestrictError::Syntax {
        origin: origin.to_owned(),
        error,
    })?;
    check(text, origin, policy)
}

struct PolicyOutcome {
    violations: Vec<Violation>,
    calls_checked: usize,
}

fn check_policy(
    source: &str,
    program: &Program,
    regions: &Regions,
    resolved: &Resolved,
    policy: &Policy,
) -> PolicyOutcome {
    let reach = reachable_builtins(program.functions.len(), resolved);
    let lines = LineIndex::new(source);
    let mut callees: Vec<Vec<usize>> = vec![Vec::new(); program.functions.len()];
    for c in &resolved.calls {
        if let (Target::Function(g), Some(list)) = (c.target, callees.get_mut(c.caller)) {
            list.push(g);
        }
    }
    let defined_private = |i: usize| {
        program
            .functions
            .get(i)
            .is_none_or(|f| regions.is_private(f.name.pos.line))
    };
    let name = |i: usize| {
        program
            .functions
            .get(i)
            .map_or_else(|| "?".to_owned(), |f| f.name.name.clone())
    };
    let mut violations = Vec::new();
    let mut checked_sites: BTreeSet<Pos> = BTreeSet::new();
    let mut reached_functions: BTreeSet<usize> = BTreeSet::new();
    for call in resolved
        .calls
        .iter()
        .filter(|c| regions.is_private(c.pos.line))
    {
        match call.target {
            Target::Builtin(b) => {
                checked_sites.insert(call.pos);
                if !policy.allows(b.name()) {
                    violations.push(Violation {
                        builtin: b.name().to_owned(),
                        via: None,
                        excerpt: Excerpt::indexed(source, &lines, call.pos),
                        withheld: false,
                    });
                }
            }
            Target::Function(g) => {
                collect_reachable(g, &callees, &mut reached_functions);
                let Some(reached) = reach.get(g) else {
                    continue;
                };
                for (b, &(caller, at)) in reached {
                    if !policy.allows(b.name()) {
                        violations.push(Violation {
                            builtin: b.name().to_owned(),
                            via: Some(Via {
                                function: name(g),
                                caller: name(caller),
                                at,
                                public: (!defined_private(g), !defined_private(caller)),
                            }),
                            excerpt: Excerpt::indexed(source, &lines, call.pos),
                            withheld: false,
                        });
                    }
                }
            }
        }
    }
    for call in &resolved.calls {
        if matches!(call.target, Target::Builtin(_)) && reached_functions.contains(&call.caller) {
            checked_sites.insert(call.pos);
        }
    }
    violations.sort_by(|a, b| (a.pos(), &a.builtin).cmp(&(b.pos(), &b.builtin)));
    PolicyOutcome {
        violations,
        calls_checked: checked_sites.len(),
    }
}

/// For each function, every built-in it can reach, with the first place (function, position)
/// where that built-in is called on the way. The call graph is acyclic (resolve refused
/// cycles), so a pass in reverse topological order settles every function.
fn reachable_builtins(n: usize, resolved: &Resolved) -> Vec<BTreeMap<Builtin, (usize, Pos)>> {
    let mut callees: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut direct: Vec<BTreeMap<Builtin, (usize, Pos)>> = vec![BTreeMap::new(); n];
    for c in &resolved.calls {
        match c.target {
            Target::Builtin(b) => {
                if let Some(d) = direct.get_mut(c.caller) {
                    d.entry(b).or_insert((c.caller, c.pos));
                }
            }
            Target::Function(g) => {
                if let Some(list) = callees.get_mut(c.caller) {
                    list.push(g);
                }
            }
        }
    }
    // Kahn's algorithm on "f waits for its callees".
    let mut pending: Vec<usize> = callees.iter().map(Vec::len).collect();
    let mut callers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (f, list) in callees.iter().enumerate() {
        for &g in list {
            if let Some(c) = callers.get_mut(g) {
                c.push(f);
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&f| pending.get(f) == Some(&0)).collect();
    let mut reach = direct;
    while let Some(g) = ready.pop() {
        let from_g = reach.get(g).cloned().unwrap_or_default();
        for &f in callers.get(g).map(Vec::as_slice).unwrap_or_default() {
            if let Some(r) = reach.get_mut(f) {
                for (&b, &site) in &from_g {
                    r.entry(b).or_insert(site);
                }
            }
            if let Some(p) = pending.get_mut(f) {
                *p = p.saturating_sub(1);
                if *p == 0 {
                    ready.push(f);
                }
            }
        }
    }
    reach
}

fn collect_reachable(start: usize, callees: &[Vec<usize>], seen: &mut BTreeSet<usize>) {
    let mut todo = vec![start];
    while let Some(f) = todo.pop() {
        if seen.insert(f) {
            todo.extend(callees.get(f).map(Vec::as_slice).unwrap_or_default());
        }
    }
}
