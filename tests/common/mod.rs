//! Shared by the CLI tests: judging a finished `runner` process.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::process::Output;

/// Assert the run succeeded; return its stdout.
pub fn succeeded(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Assert the run exited with `code`, said `needle` on stderr and printed nothing on stdout;
/// return its stderr.
pub fn failed_with(args: &[&str], out: Output, code: i32, needle: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected {needle:?} in: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed to stdout on failure"
    );
    stderr
}
