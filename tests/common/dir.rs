//! A temporary directory, and the `runner` binary run in it (after ripgrep's `tests/util.rs`).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use runner::job::state::STATE_DIR_ENV;

/// A temporary directory (removed on drop) that commands run in.
pub struct Dir {
    tmp: tempfile::TempDir,
    /// Environment variables every command run here gets.
    vars: Vec<(&'static str, OsString)>,
}

impl Dir {
    pub fn new() -> Dir {
        Dir {
            tmp: tempfile::tempdir().unwrap(),
            vars: Vec::new(),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// Create directory `name` (and its parents).
    pub fn mkdir(&self, name: &str) {
        std::fs::create_dir_all(self.path(name)).unwrap();
    }

    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) {
        std::fs::write(self.path(name), bytes).unwrap();
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }

    /// Copy the file `from` (anywhere) to `name`.
    pub fn copy_in(&self, from: &Path, name: &str) {
        std::fs::copy(from, self.path(name)).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }

    /// Every command run here from now on gets `key=value` in its environment.
    pub fn set_var(&mut self, key: &'static str, value: impl Into<OsString>) {
        self.vars.push((key, value.into()));
    }

    /// `runner args`, run in this directory.
    pub fn command(&self, args: &[&str]) -> TestCommand {
        let mut cmd = TestCommand::new();
        cmd.args(args).cmd().current_dir(self.root());
        for (key, value) in &self.vars {
            cmd.env(key, value);
        }
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output()
    }

    /// See [`TestCommand::ok`].
    pub fn ok(&self, args: &[&str]) -> String {
        self.command(args).ok()
    }

    /// See [`TestCommand::fails`].
    pub fn fails(&self, args: &[&str], code: i32, needle: &str) -> String {
        self.command(args).fails(code, needle)
    }

    /// See [`TestCommand::exits`].
    pub fn exits(&self, args: &[&str], code: i32) -> String {
        self.command(args).exits(code)
    }
}

/// The `runner` binary with arguments, and what a finished run must look like.
///
/// It never sees the caller's `RUNNER_STATE_DIR`: a test names its state directory itself.
pub struct TestCommand {
    cmd: Command,
    /// The arguments, for messages.
    args: Vec<String>,
}

impl TestCommand {
    /// `runner`, in the current working directory.
    pub fn new() -> TestCommand {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
        cmd.env_remove(STATE_DIR_ENV);
        TestCommand {
            cmd,
            args: Vec::new(),
        }
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut TestCommand {
        self.args.push(arg.as_ref().to_string_lossy().into_owned());
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut TestCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for arg in args {
            self.arg(arg);
        }
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut TestCommand {
        self.cmd.env(key, value);
        self
    }

    /// The command itself, for anything else (standard streams, spawning).
    pub fn cmd(&mut self) -> &mut Command {
        &mut self.cmd
    }

    pub fn output(&mut self) -> Output {
        self.cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run runner: {e}"))
    }

    /// Assert the run succeeded; return its stdout.
    pub fn ok(&mut self) -> String {
        let out = self.output();
        assert!(
            out.status.success(),
            "{:?} failed: {}{}",
            self.args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Assert the run exited with `code`, said `needle` on stderr and printed nothing on
    /// stdout; return its stderr.
    pub fn fails(&mut self, code: i32, needle: &str) -> String {
        let out = self.output();
        let args = &self.args;
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

    /// Assert the run exited with `code` (nothing else); return its stderr.
    pub fn exits(&mut self, code: i32) -> String {
        let out = self.output();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{:?}: {}{}",
            self.args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}
