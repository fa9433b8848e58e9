//! `runner restrict` end to end: the report, the view written atomically, and refusals that
//! print every violation, exit with the documented code and write nothing.

use std::path::PathBuf;
use std::process::Output;

use crate::common::repo::root;
use crate::common::{Dir, TestCommand};

fn fixture(name: &str) -> PathBuf {
    root().join("tests/engines").join(name)
}

fn runner(args: &[&std::ffi::OsStr]) -> Output {
    TestCommand::new().arg("restrict").args(args).output()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn prints_report_and_writes_view() {
    let dir = Dir::new();
    let view = dir.path("mlp.view");
    let engine = fixture("mlp.eng");
    let policy = fixture("narrow-policy.json");
    let out = runner(&[
        engine.as_os_str(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--view".as_ref(),
        view.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let digest = blake3::hash(&std::fs::read(&engine).unwrap_or_default())
        .to_hex()
        .to_string();
    assert!(
        stdout.contains(&format!("source digest     blake3:{digest}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("private ranges    obfuscate 8-17, hide 12-14"),
        "{stdout}"
    );
    assert!(stdout.contains("calls checked     3"), "{stdout}");
    assert!(
        stdout.contains("built-ins used    add, linear, rms_norm, scale"),
        "{stdout}"
    );
    assert!(
        stdout.contains("functions         main, f1 (obfuscate)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("verifier          runner-restrict/1"),
        "{stdout}"
    );
    let v = std::fs::read_to_string(&view).unwrap_or_default();
    assert!(
        v.contains("    let h = f1(x, model.up, model.down);"),
        "{v}"
    );
    assert!(v.contains("fn f1(v1, v2, v3) {"), "{v}");
    assert!(v.contains("    // [hidden: 1 line]"), "{v}");
    for secret in [
        "w_secret",
        "pre_act",
        "tuned",
        "0.7071",
        "block",
        "names and constants",
    ] {
        assert!(!v.contains(secret), "view shows {secret}:\n{v}");
    }
    // No temporary file left behind.
    let names: Vec<_> = std::fs::read_dir(dir.root())
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn prints_json_report() {
    let out = runner(&[
        fixture("mlp.eng").as_os_str(),
        "--policy".as_ref(),
        fixture("narrow-policy.json").as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert_eq!(v["calls_checked"], 3);
    assert_eq!(v["policy"]["name"], "narrow");
    assert_eq!(
        v["policy"]["policy_id_short"].as_str().map(str::len),
        Some(16)
    );
    assert_eq!(v["policy"]["policy_id"].as_str().map(str::len), Some(64));
    assert_eq!(v["private_ranges"][1]["kind"], "hide");
    assert_eq!(v["private_ranges"][1]["start_line"], 12);
    assert_eq!(
        v["builtins_used"],
        serde_json::json!(["add", "linear", "rms_norm", "scale"])
    );
}

#[test]
fn rejects_violations_with_exit_3_listing_all_and_writes_nothing() {
    let dir = Dir::new();
    let view = dir.path("leaky.view");
    let out = runner(&[
        fixture("leaky.eng").as_os_str(),
        "--policy".as_ref(),
        fixture("narrow-policy.json").as_os_str(),
        "--view".as_ref(),
        view.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("2 call(s) in private regions are not allowed by policy narrow"),
        "{stderr}"
    );
    assert!(
        stderr.contains("private region calls `softmax`, which the policy does not allow (4:13)"),
        "{stderr}"
    );
    // By default neither the private lines nor the names of the functions on the way are
    // shown: the report may be forwarded to owners.
    // (`helper` is public: the owners' view shows it by name.)
    assert!(
        stderr.contains(
            "private region calls `helper`, which reaches `gelu_tanh` (called in `helper`), \
             which the policy does not allow (5:13)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("(line of a private region, not shown)"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(!view.exists());

    // The author, on their own terminal, asks for everything.
    let out = runner(&[
        fixture("leaky.eng").as_os_str(),
        "--policy".as_ref(),
        fixture("narrow-policy.json").as_os_str(),
        "--show-private".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("private region calls `helper`, which reaches `gelu_tanh` (called in `helper` at 11:12)"), "{stderr}");
}

#[test]
fn rejects_syntax_errors_with_exit_2_and_caret() {
    let dir = Dir::new();
    let engine = dir.path("bad.eng");
    std::fs::write(&engine, "fn main(x) {\n  return x +;\n}\n").unwrap_or_else(|e| panic!("{e}"));
    let view = dir.path("bad.view");
    let out = runner(&[
        engine.as_os_str(),
        "--policy".as_ref(),
        fixture("narrow-policy.json").as_os_str(),
        "--view".as_ref(),
        view.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("expected an expression (a number, a name, a call or `(`), found `;` (2:13)\n  2 |   return x +;\n    |             ^"), "{stderr}");
    assert!(!view.exists());
}

#[test]
fn rejects_non_ascii_bytes_with_position() {
    let dir = Dir::new();
    let engine = dir.path("bad.eng");
    std::fs::write(&engine, b"fn main(x) {\n  return \xd0\xb0;\n}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = runner(&[
        engine.as_os_str(),
        "--policy".as_ref(),
        fixture("narrow-policy.json").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("non-ASCII character `\u{430}` (U+0430)"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("(2:10)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn rejects_view_path_equal_to_engine() {
    let dir = Dir::new();
    let engine = dir.path("e.eng");
    let body = std::fs::read(fixture("mlp.eng")).unwrap_or_default();
    std::fs::write(&engine, &body).unwrap_or_else(|e| panic!("{e}"));
    let out = runner(&[
        engine.as_os_str(),
        "--policy".as_ref(),
        fixture("narrow-policy.json").as_os_str(),
        "--view".as_ref(),
        engine.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is the engine source"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&engine).unwrap_or_default(), body);
}
