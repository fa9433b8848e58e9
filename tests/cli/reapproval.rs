//! The re-approval story end to end through the binary: two owners (threshold 2) approve the
//! unrolled engine; exec runs; the scan refactor is swapped in and exec refuses it (source
//! digest differs, policy_id does not); `runner review` says the policy is unchanged; both
//! owners sign a superseding certificate; exec runs with identical outputs; and the old
//! certificate is refused from then on as superseded.

use std::path::Path;

use crate::common::repo::root;
use crate::common::Env;

/// The expiry every certificate here is approved with.
const EXPIRES: &str = "2036-01-01T00:00:00Z";

fn digest_of(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap())
        .to_hex()
        .to_string()
}

#[test]
fn scan_refactor_is_reviewed_reapproved_and_supersedes_the_old_certificate() {
    let env = Env::reapproval();
    let unrolled_digest = digest_of(&env.path("engines/gemma3.eng"));

    // Approved by both owners; exec runs.
    env.approve_both("cert-unrolled.json", &["--expires", EXPIRES]);
    let job = env.job("out1");
    env.ok(&["exec", "--quiet", "--cert", "cert-unrolled.json", &job]);
    let first = env.tokens("out1");
    assert_eq!(first.len(), 2);

    // The scan refactor: same policy, new bytes. exec refuses, naming both digests and review.
    env.install_engine("gemma3.eng");
    let scan_digest = digest_of(&env.path("engines/gemma3.eng"));
    assert_ne!(scan_digest, unrolled_digest);
    let job = env.job("out2");
    let err = env.exits(
        &["exec", "--quiet", "--cert", "cert-unrolled.json", &job],
        3,
    );
    assert!(
        err.contains(&unrolled_digest) && err.contains(&scan_digest),
        "{err}"
    );
    assert!(err.contains("runner review"), "{err}");
    assert!(!env.path("out2").exists());

    // Review: policy unchanged, source changed, nothing else.
    let old_engine = root().join("engines/gemma3_unrolled.eng");
    let review = env.ok(&[
        "review",
        "--cert",
        "cert-unrolled.json",
        "--engine",
        "engines/gemma3.eng",
        "--old-engine",
        old_engine.to_str().unwrap(),
    ]);
    assert!(
        review.contains("policy unchanged; source changed; re-approval needed"),
        "{review}"
    );
    assert!(review.contains("built-ins added   none"), "{review}");
    assert!(review.contains("+    let h = scan(f"), "{review}");
    // Private source never appears: the layer body's names are renamed in the view.
    assert!(!review.contains("decoder_layer"), "{review}");
    assert!(!review.contains("gate_proj"), "{review}");

    // Both owners sign the superseding certificate; exec runs with the same outputs.
    env.approve_both(
        "cert-scan.json",
        &["--expires", EXPIRES, "--supersedes", "cert-unrolled.json"],
    );
    env.ok(&["exec", "--quiet", "--cert", "cert-scan.json", &job]);
    assert_eq!(env.tokens("out2"), first);
    let registry = std::fs::read_to_string(env.path("state/superseded.jsonl")).unwrap();
    assert_eq!(registry.lines().count(), 1);

    // The old certificate is refused from now on, even with its own engine back in place.
    env.install_engine("gemma3_unrolled.eng");
    let job = env.job("out3");
    let err = env.exits(
        &["exec", "--quiet", "--cert", "cert-unrolled.json", &job],
        3,
    );
    assert!(err.contains("superseded by certificate"), "{err}");
    assert!(!env.path("out3").exists());
}

#[test]
fn rejects_superseding_certificate_without_the_threshold() {
    let env = Env::reapproval();
    env.approve_both("cert-unrolled.json", &["--expires", EXPIRES]);
    env.install_engine("gemma3.eng");
    // Only alice signs the replacement: exec must refuse it and must not retire the old one.
    env.approve(
        "alice",
        "cert-scan.json",
        &["--expires", EXPIRES, "--supersedes", "cert-unrolled.json"],
    );
    let job = env.job("out1");
    env.exits(&["exec", "--quiet", "--cert", "cert-scan.json", &job], 3);
    assert!(!env.path("out1").exists());
    assert!(!env.path("state/superseded.jsonl").exists());
    env.install_engine("gemma3_unrolled.eng");
    env.ok(&["exec", "--quiet", "--cert", "cert-unrolled.json", &job]);
}

#[test]
fn review_without_the_old_engine_says_view_unchanged_and_names_a_hidden_change() {
    let env = Env::two_owner_cert();
    let review = |json: bool| {
        let mut args = vec!["review", "--cert", "cert.json", "--engine", "gemma3.eng"];
        if json {
            args.push("--json");
        }
        env.ok(&args)
    };
    // The approved engine itself: the view digests match, so the view is unchanged (not
    // "not available").
    let same = review(false);
    assert!(
        same.contains("view              unchanged (view digest"),
        "{same}"
    );
    assert!(!same.contains("not available"), "{same}");
    assert!(!same.contains("hidden change"), "{same}");
    assert!(same.contains("the certificate still applies"), "{same}");
    let json: serde_json::Value = serde_json::from_str(&review(true)).unwrap();
    assert_eq!(json["view"]["status"], "unchanged");
    assert_eq!(json["hidden_change"], false);
    assert_eq!(json["reapproval_needed"], false);

    // A change entirely inside the `hide` region (the feed-forward's operands swapped): the
    // source digest changes, the owners' view does not, and the review says so.
    let engine = env.read("gemma3.eng");
    let hidden = "mul(gate, linear(h, layer.up_proj))";
    assert!(engine.contains(hidden));
    env.write(
        "gemma3.eng",
        engine.replace(hidden, "mul(linear(h, layer.up_proj), gate)"),
    );
    let changed = review(false);
    assert!(changed.contains("source digest     CHANGED"), "{changed}");
    assert!(changed.contains("view              unchanged"), "{changed}");
    assert!(
        changed.contains("the whole change lies inside private regions")
            && changed.contains("owners cannot see it"),
        "{changed}"
    );
    assert!(
        changed.contains(
            "verdict           policy unchanged; source changed only inside private regions \
             (not visible in the view); re-approval needed"
        ),
        "{changed}"
    );
    // Private source never appears.
    assert!(!changed.contains("up_proj"), "{changed}");
    let json: serde_json::Value = serde_json::from_str(&review(true)).unwrap();
    assert_eq!(json["hidden_change"], true);
    assert_eq!(json["reapproval_needed"], true);
    assert!(!json.to_string().contains("up_proj"));
}

#[test]
fn review_help_documents_its_exit_code_when_reapproval_is_needed() {
    let env = Env::new();
    let help = env.ok(&["review", "--help"]);
    assert!(
        help.contains("0  the review was printed, whether or not re-approval is needed"),
        "{help}"
    );
    assert!(help.contains("\"reapproval_needed\""), "{help}");
}
