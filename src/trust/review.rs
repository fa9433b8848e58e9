//! `runner review`: what owners need to decide on re-approval, comparing an approved
//! certificate with a changed engine (and possibly a changed policy or model).
//!
//! Everything here is computed from the certificate payload, the new engine's verifier report
//! and view, and optionally the old engine (to rebuild the old view, accepted only if its view
//! digest is the one the certificate binds). Private source never appears: only views, which
//! the verifier already redacted, and digests.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use super::certificate::{CertificatePayload, PrivateRange, RestrictReport};
use crate::primitives::digest::Digest;
use crate::restrict::policy::Policy;
use crate::restrict::Checked;

/// Context lines around each change in the view diff.
const DIFF_CONTEXT: usize = 3;

/// Most lines on either side the view diff compares (LCS is quadratic; views are small).
pub const MAX_DIFF_LINES: usize = 20_000;

/// An old value and a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change<T> {
    /// In the certificate.
    pub old: T,
    /// Now.
    pub new: T,
}

impl<T: PartialEq> Change<T> {
    /// Whether old and new are equal.
    pub fn unchanged(&self) -> bool {
        self.old == self.new
    }
}

/// How the policy differs, when its id does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PolicyChanges {
    /// Names added to / removed from `allow_functions`.
    pub allow_added: Vec<String>,
    /// Removed from `allow_functions`.
    pub allow_removed: Vec<String>,
    /// Added to `disallow_functions`.
    pub disallow_added: Vec<String>,
    /// Removed from `disallow_functions`.
    pub disallow_removed: Vec<String>,
    /// `limits.*` fields that changed, as `field old -> new`.
    pub limits: Vec<String>,
    /// Other changes (name, outputs), as `field old -> new`.
    pub other: Vec<String>,
}

/// The owner's redacted view: a diff when the old view could be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ViewDiff {
    /// The old engine was given and its view matches the certificate's view digest.
    Diff {
        /// Unified diff, old view to new view (empty when equal).
        unified: String,
    },
    /// The old engine was not given, and the new view's digest is the certificate's: the
    /// owners would see exactly the view they approved.
    Unchanged {
        /// The view digest, old and new.
        digest: Digest,
    },
    /// Only the digests are known, and they differ.
    Unavailable {
        /// The certificate's view digest.
        old_digest: Digest,
        /// The new view's digest.
        new_digest: Digest,
    },
}

/// Everything `runner review` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Review {
    /// The certificate reviewed against (its digest).
    pub certificate: Digest,
    /// Engine source digest.
    pub source_digest: Change<Digest>,
    /// policy_id.
    pub policy_id: Change<Digest>,
    /// What changed in the policy (all empty when policy_id is unchanged).
    pub policy_changes: PolicyChanges,
    /// Built-ins the new engine uses that the old did not.
    pub builtins_added: Vec<String>,
    /// Built-ins the old engine used that the new does not.
    pub builtins_removed: Vec<String>,
    /// Private ranges, `kind start-end`.
    pub private_ranges: Change<Vec<String>>,
    /// Calls checked against the policy.
    pub calls_checked: Change<u64>,
    /// The view diff, or why there is none.
    pub view: ViewDiff,
    /// Model digest, when a model directory was given.
    pub model_digest: Option<Change<Digest>>,
    /// Who may read the results: the certificate's recipients, and the new list when one was
    /// given (sorted, no repeats).
    pub recipients: Change<Vec<String>>,
    /// The source changed but the owners' view did not: the whole change lies inside private
    /// regions (hidden lines, blanked constants), where owners cannot see it.
    pub hidden_change: bool,
    /// Whether the certificate no longer covers what would run, so owners must sign anew.
    pub reapproval_needed: bool,
    /// One line: what changed and whether re-approval is needed.
    pub verdict: String,
}

/// Why a review could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReviewError {
    /// The certificate carries no verifier report.
    #[error("the certificate binds no restrict report, so there is nothing to compare with")]
    NoReport,
    /// The old engine given is not the approved one.
    #[error("--old-engine has source digest {found}, the certificate approves {expected}")]
    OldEngineMismatch {
        /// Approved (short).
        expected: String,
        /// Given (short).
        found: String,
    },
    /// The old engine's view differs from the one the owners reviewed.
    #[error("--old-engine's view digest {found} is not the certificate's view digest {expected}")]
    OldViewMismatch {
        /// Approved (short).
        expected: String,
        /// Rebuilt (short).
        found: String,
    },
    /// A view is too long to diff.
    #[error("a view has more than {MAX_DIFF_LINES} lines, too many to diff")]
    TooLong,
}

impl crate::error::Diagnose for ReviewError {
    fn exit(&self) -> crate::error::Exit {
        match self {
            ReviewError::NoReport | ReviewError::TooLong => crate::error::Exit::BadInput,
            _ => crate::error::Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ReviewError::NoReport => "the owners must approve the new engine from scratch".into(),
            ReviewError::OldEngineMismatch { .. } | ReviewError::OldViewMismatch { .. } => {
                "give the exact engine file the certificate approved, or omit --old-engine".into()
            }
            ReviewError::TooLong => "compare the views with an external diff tool".into(),
        })
    }
}

fn ranges(list: &[PrivateRange]) -> Vec<String> {
    list.iter()
        .map(|r| format!("{} {}-{}", r.kind.word(), r.start, r.end))
        .collect()
}

fn set_diff(a: &BTreeSet<String>, b: &BTreeSet<String>) -> Vec<String> {
    a.difference(b).cloned().collect()
}

/// Compare two policies field by field.
pub fn policy_changes(old: &Policy, new: &Policy) -> PolicyChanges {
    let mut c = PolicyChanges {
        allow_added: set_diff(&new.allow_functions, &old.allow_functions),
        allow_removed: set_diff(&old.allow_functions, &new.allow_functions),
        disallow_added: set_diff(&new.disallow_functions, &old.disallow_functions),
        disallow_removed: set_diff(&old.disallow_functions, &new.disallow_functions),
        ..PolicyChanges::default()
    };
    let (o, n) = (&old.limits, &new.limits);
    for (field, a, b) in [
        ("max_batch", o.max_batch, n.max_batch),
        ("max_new_tokens", o.max_new_tokens, n.max_new_tokens),
        (
            "max_prompt_tokens",
            o.max_prompt_tokens,
            n.max_prompt_tokens,
        ),
        ("max_inputs", o.max_inputs, n.max_inputs),
    ] {
        if a != b {
            c.limits.push(format!("{field} {a} -> {b}"));
        }
    }
    if old.name != new.name {
        c.other.push(format!("name {} -> {}", old.name, new.name));
    }
    if old.outputs != new.outputs {
        c.other
            .push(format!("outputs {:?} -> {:?}", old.outputs, new.outputs));
    }
    c
}

/// Build the review. `new` is the changed engine checked against `new_policy` (the certificate's
/// own policy when none was given); `old_engine`, when given, is the approved engine checked
/// against the certificate's policy; `model` is the digest of the model directory given.
pub fn review(
    certificate: Digest,
    old: &CertificatePayload,
    new: &Checked,
    new_policy: &Policy,
    old_engine: Option<&Checked>,
    model: Option<Digest>,
    recipients: Option<Vec<String>>,
) -> Result<Review, ReviewError> {
    let approved = old.engine.restrict.as_ref().ok_or(ReviewError::NoReport)?;
    let report = new.report();
    let view = view_diff(old, approved, new, old_engine)?;
    let new_ranges: Vec<String> = report
        .private_ranges
        .iter()
        .map(|r| format!("{} {}-{}", r.kind.word(), r.start_line, r.end_line))
        .collect();
    let policy_id = Change {
        old: old.policy_id,
        new: Digest(new_policy.policy_id().0),
    };
    let policy_changes = if policy_id.unchanged() {
        PolicyChanges::default()
    } else {
        policy_changes(&old.policy, new_policy)
    };
    let source_digest = Change {
        old: old.engine.source_digest,
        new: Digest::of(new.source().as_bytes()),
    };
    let model_digest = model.map(|m| Change {
        old: old.model_digest,
        new: m,
    });
    let recipients = Change {
        old: old.recipients.clone(),
        new: match recipients {
            Some(mut r) => {
                r.sort();
                r.dedup();
                r
            }
            None => old.recipients.clone(),
        },
    };
    let hidden_change =
        !source_digest.unchanged() && approved.view_digest == Digest::of(new.view().as_bytes());
    let reapproval_needed = !(policy_id.unchanged()
        && source_digest.unchanged()
        && model_digest.as_ref().is_none_or(Change::unchanged)
        && recipients.unchanged());
    let verdict = verdict(
        &policy_id,
        &source_digest,
        hidden_change,
        model_digest.as_ref(),
        &recipients,
        reapproval_needed,
    );
    Ok(Review {
        certificate,
        source_digest,
        policy_id,
        policy_changes,
        builtins_added: set_diff(&report.builtins_used, &approved.builtins_used),
        builtins_removed: set_diff(&approved.builtins_used, &report.builtins_used),
        private_ranges: Change {
            old: ranges(&approved.private_ranges),
            new: new_ranges,
        },
        calls_checked: Change {
            old: approved.calls_checked,
            new: report.calls_checked as u64,
        },
        view,
        model_digest,
        recipients,
        hidden_change,
        reapproval_needed,
        verdict,
    })
}

/// The diff of the owners' views, when the approved engine is at hand (checked to be the one
/// the certificate binds, view and all); else the two view digests.
fn view_diff(
    old: &CertificatePayload,
    approved: &RestrictReport,
    new: &Checked,
    old_engine: Option<&Checked>,
) -> Result<ViewDiff, ReviewError> {
    let Some(o) = old_engine else {
        let new_digest = Digest::of(new.view().as_bytes());
        if new_digest == approved.view_digest {
            return Ok(ViewDiff::Unchanged { digest: new_digest });
        }
        return Ok(ViewDiff::Unavailable {
            old_digest: approved.view_digest,
            new_digest,
        });
    };
    let found = Digest::of(o.source().as_bytes());
    if found != old.engine.source_digest {
        return Err(ReviewError::OldEngineMismatch {
            expected: old.engine.source_digest.short(),
            found: found.short(),
        });
    }
    let old_view = Digest::of(o.view().as_bytes());
    if old_view != approved.view_digest {
        return Err(ReviewError::OldViewMismatch {
            expected: approved.view_digest.short(),
            found: old_view.short(),
        });
    }
    Ok(ViewDiff::Diff {
        unified: unified_diff(o.view(), new.view(), "approved view", "new view")
            .ok_or(ReviewError::TooLong)?,
    })
}

/// One line saying what changed and whether the certificate still applies.
fn verdict(
    policy_id: &Change<Digest>,
    source_digest: &Change<Digest>,
    hidden_change: bool,
    model_digest: Option<&Change<Digest>>,
    recipients: &Change<Vec<String>>,
    reapproval_needed: bool,
) -> String {
    let mut parts = vec![
        if policy_id.unchanged() {
            "policy unchanged"
        } else {
            "policy CHANGED"
        },
        if source_digest.unchanged() {
            "source unchanged"
        } else if hidden_change {
            "source changed only inside private regions (not visible in the view)"
        } else {
            "source changed"
        },
    ];
    match model_digest {
        Some(m) if m.unchanged() => parts.push("model unchanged"),
        Some(_) => parts.push("model CHANGED"),
        None => {}
    }
    if !recipients.unchanged() {
        parts.push("recipients CHANGED");
    }
    parts.push(if reapproval_needed {
        "re-approval needed"
    } else {
        "the certificate still applies"
    });
    parts.join("; ")
}

impl Review {
    /// The review as pretty JSON.
    pub fn to_json(&self) -> String {
        // Strings, integers and digests always serialise.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The review for people.
    pub fn to_human(&self) -> String {
        let mut s = String::new();
        let same = |u: bool| if u { "unchanged" } else { "CHANGED" };
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let _ = writeln!(s, "certificate       {}", self.certificate.short());
        let _ = writeln!(
            s,
            "source digest     {}: blake3:{} -> blake3:{}",
            same(self.source_digest.unchanged()),
            self.source_digest.old.to_hex(),
            self.source_digest.new.to_hex()
        );
        let _ = writeln!(
            s,
            "policy_id         {}: {} -> {}",
            same(self.policy_id.unchanged()),
            self.policy_id.old.short(),
            self.policy_id.new.short()
        );
        let p = &self.policy_changes;
        for (label, v) in [
            ("allow added", &p.allow_added),
            ("allow removed", &p.allow_removed),
            ("disallow added", &p.disallow_added),
            ("disallow removed", &p.disallow_removed),
            ("limits changed", &p.limits),
            ("policy other", &p.other),
        ] {
            if !v.is_empty() {
                let _ = writeln!(s, "  {label:<16}{}", v.join(", "));
            }
        }
        let _ = writeln!(s, "built-ins added   {}", list(&self.builtins_added));
        let _ = writeln!(s, "built-ins removed {}", list(&self.builtins_removed));
        let _ = writeln!(
            s,
            "private ranges    {}: {} -> {}",
            same(self.private_ranges.unchanged()),
            list(&self.private_ranges.old),
            list(&self.private_ranges.new)
        );
        let _ = writeln!(
            s,
            "calls checked     {}: {} -> {}",
            same(self.calls_checked.unchanged()),
            self.calls_checked.old,
            self.calls_checked.new
        );
        let r = &self.recipients;
        if r.unchanged() {
            let _ = writeln!(
                s,
                "recipients        unchanged: {}",
                if r.old.is_empty() {
                    "none (outputs in plaintext)".to_owned()
                } else {
                    r.old.join(", ")
                }
            );
        } else {
            let added: Vec<&String> = r.new.iter().filter(|x| !r.old.contains(x)).collect();
            let removed: Vec<&String> = r.old.iter().filter(|x| !r.new.contains(x)).collect();
            let _ = writeln!(s, "recipients        CHANGED");
            for a in added {
                let _ = writeln!(s, "  added         {a}");
            }
            for x in removed {
                let _ = writeln!(s, "  removed       {x}");
            }
        }
        if let Some(m) = &self.model_digest {
            let _ = writeln!(
                s,
                "model digest      {}: {} -> {}",
                same(m.unchanged()),
                m.old.short(),
                m.new.short()
            );
        }
        match &self.view {
            ViewDiff::Diff { unified } if unified.is_empty() => {
                let _ = writeln!(s, "view              unchanged");
            }
            ViewDiff::Unchanged { digest } => {
                let _ = writeln!(
                    s,
                    "view              unchanged (view digest {} in the certificate and now)",
                    digest.short()
                );
            }
            ViewDiff::Diff { unified } => {
                let _ = writeln!(s, "view diff (owner's redacted view, approved -> new):");
                s.push_str(unified);
            }
            ViewDiff::Unavailable {
                old_digest,
                new_digest,
            } => {
                let _ = writeln!(
                    s,
                    "view              old view not available (the certificate binds only its \
                     digest {}; pass --old-engine to diff); new view digest {}",
                    old_digest.short(),
                    new_digest.short()
                );
            }
        }
        if self.hidden_change {
            let _ = writeln!(
                s,
                "hidden change     the source changed but the view did not: the whole change \
                 lies inside private regions (hidden lines or blanked constants), so owners \
                 cannot see it; only the engine author can say what it does, and the verifier's \
                 report above is all the view shows of it"
            );
        }
        let _ = writeln!(s, "verdict           {}", self.verdict);
        s
    }
}

/// A unified diff (3 lines of context) of two texts by lines, or `None` when either has more
/// than [`MAX_DIFF_LINES`] lines. Empty when the texts are equal.
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> Option<String> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    if a.len() > MAX_DIFF_LINES || b.len() > MAX_DIFF_LINES {
        return None;
    }
    let ops = lcs_ops(&a, &b);
    if ops.iter().all(|op| matches!(op, Op::Same(..))) {
        return Some(String::new());
    }
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    // Group changes whose context windows touch into hunks.
    let changed: Vec<usize> = (0..ops.len())
        .filter(|&i| !matches!(ops.get(i), Some(Op::Same(..))))
        .collect();
    let mut i = 0;
    while i < changed.len() {
        let first = changed.get(i).copied().unwrap_or(0);
        let mut last = first;
        let mut j = i + 1;
        while let Some(&next) = changed.get(j) {
            if next > last + 2 * DIFF_CONTEXT {
                break;
            }
            last = next;
            j += 1;
        }
        let start = first.saturating_sub(DIFF_CONTEXT);
        let end = (last + DIFF_CONTEXT + 1).min(ops.len());
        let hunk = ops.get(start..end).unwrap_or(&[]);
        // 1-based line numbers of the hunk's first line on each side.
        let (mut oa, mut ob) = (0usize, 0usize);
        for op in ops.get(..start).unwrap_or(&[]) {
            match op {
                Op::Same(..) => {
                    oa += 1;
                    ob += 1;
                }
                Op::Del(_) => oa += 1,
                Op::Ins(_) => ob += 1,
            }
        }
        let na = hunk.iter().filter(|o| !matches!(o, Op::Ins(_))).count();
        let nb = hunk.iter().filter(|o| !matches!(o, Op::Del(_))).count();
        let from = |o: usize, n: usize| if n == 0 { o } else { o + 1 };
        let _ = writeln!(out, "@@ -{},{na} +{},{nb} @@", from(oa, na), from(ob, nb));
        for op in hunk {
            let _ = match op {
                Op::Same(l) => writeln!(out, " {l}"),
                Op::Del(l) => writeln!(out, "-{l}"),
                Op::Ins(l) => writeln!(out, "+{l}"),
            };
        }
        i = j;
    }
    Some(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op<'a> {
    Same(&'a str),
    Del(&'a str),
    Ins(&'a str),
}

/// Edit script from the longest common subsequence of lines (deletions before insertions).
fn lcs_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let (n, m) = (a.len(), b.len());
    let w = m + 1;
    // len[i*w + j] = LCS length of a[i..] and b[j..].
    let mut len = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            let v = if a.get(i) == b.get(j) {
                len.get((i + 1) * w + j + 1).copied().unwrap_or(0) + 1
            } else {
                let down = len.get((i + 1) * w + j).copied().unwrap_or(0);
                let right = len.get(i * w + j + 1).copied().unwrap_or(0);
                down.max(right)
            };
            if let Some(cell) = len.get_mut(i * w + j) {
                *cell = v;
            }
        }
    }
    let at = |i: usize, j: usize| len.get(i * w + j).copied().unwrap_or(0);
    let mut ops = Vec::with_capacity(n + m);
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                ops.push(Op::Same(x));
                i += 1;
                j += 1;
            }
            (Some(x), Some(_)) if at(i + 1, j) >= at(i, j + 1) => {
                ops.push(Op::Del(x));
                i += 1;
            }
            (_, Some(y)) => {
                ops.push(Op::Ins(y));
                j += 1;
            }
            (Some(x), None) => {
                ops.push(Op::Del(x));
                i += 1;
            }
            (None, None) => break,
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_of_equal_texts_is_empty() {
        assert_eq!(unified_diff("a\nb\n", "a\nb\n", "x", "y").unwrap(), "");
    }

    #[test]
    fn diff_shows_a_replaced_line_with_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        let d = unified_diff(old, new, "old", "new").unwrap();
        assert_eq!(
            d,
            "--- old\n+++ new\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn diff_of_far_apart_changes_has_two_hunks() {
        let old: String = (0..30).map(|i| format!("{i}\n")).collect();
        let new: String = (0..30)
            .map(|i| match i {
                2 => "two\n".to_owned(),
                25 => "x\n".to_owned(),
                _ => format!("{i}\n"),
            })
            .collect();
        let d = unified_diff(&old, &new, "o", "n").unwrap();
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert_eq!(
            unified_diff("", "a\n", "o", "n").unwrap(),
            "--- o\n+++ n\n@@ -0,0 +1,1 @@\n+a\n"
        );
    }
}
