//! The command-line front end: flag definitions, dispatch, and the mapping of errors to exit
//! codes. Each subcommand's flags and glue live in one file here; the work is in the library
//! modules they call.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::error::{Diagnose, Exit};

mod attest;
mod audit;
mod bench;
mod cert;
mod decrypt;
mod demo;
mod exec;
mod identity;
mod keys;
mod merge;
mod policy;
mod progress;
mod receipt;
mod restrict;
mod review;

/// What each exit code means for every command (src/error.rs); [`exit_codes`] prints this
/// table under each command's `--help`, with the lines [`COMMAND_EXIT_CODES`] gives a command
/// in place of the general ones.
const EXIT_CODES: [(u8, &str); 4] = [
    (0, "success"),
    (
        1,
        "the run failed for a reason that is not the input's fault (I/O, internal)",
    ),
    (
        2,
        "usage error or malformed input (bad flag, unparsable file, unknown field)",
    ),
    (
        3,
        "refused by verification (signature, digest, policy, limit, revocation)",
    ),
];

/// The exit codes whose meaning is more precise for one command, by its path (`audit verify`).
const COMMAND_EXIT_CODES: &[(&str, u8, &str)] = &[
    (
        "review",
        0,
        "the review was printed, whether or not re-approval is needed: the verdict line says \
         which (with --json, \"reapproval_needed\": true or false)",
    ),
    (
        "review",
        3,
        "refused: the new engine fails the verifier under the policy, or --old-engine is not \
         the engine the certificate approves",
    ),
    (
        "exec",
        2,
        "bad flags, or a malformed job, inputs, certificate or state directory: nothing ran",
    ),
    (
        "exec",
        3,
        "refused: certificate, engine, policy, model, limits, sealing or attestation; \
         nothing ran, and the audit log says why",
    ),
    (
        "verify-cert",
        3,
        "the certificate does not verify (signatures, threshold, revocation, validity window, \
         minimum version)",
    ),
    (
        "verify",
        3,
        "the receipt, its certificate or an output file does not verify",
    ),
    (
        "verify-attestation",
        3,
        "the evidence does not verify (hardware signature, key binding, nonce)",
    ),
    (
        "restrict",
        3,
        "the engine calls a function the policy does not allow",
    ),
    (
        "approve",
        3,
        "the engine does not pass the verifier under the policy: nothing is signed",
    ),
    (
        "audit verify",
        3,
        "the chain is broken: an entry was edited, removed, inserted or reordered",
    ),
    (
        "audit list",
        3,
        "the chain is broken (nothing is listed; `runner audit verify` says where)",
    ),
];

/// The exit-code table of the command at `path` (`""` for `runner` itself).
fn exit_codes(path: &str) -> String {
    let mut out = String::from("Exit codes:");
    for (code, general) in EXIT_CODES {
        let meaning = COMMAND_EXIT_CODES
            .iter()
            .find(|(p, c, _)| *p == path && *c == code)
            .map_or(general, |(_, _, m)| *m);
        out.push_str(&format!("\n  {code}  "));
        out.push_str(&hanging(meaning, HELP_WIDTH - 5, "\n     "));
    }
    out
}

/// The width the exit-code table is wrapped to: a common terminal's, within which clap leaves it
/// as it is.
const HELP_WIDTH: usize = 80;

/// `text` wrapped at word boundaries to lines of at most `width`, joined by `joint`.
fn hanging(text: &str, width: usize, joint: &str) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join(joint)
}

/// `cmd` and every subcommand under it with its exit-code table after its help.
fn with_exit_codes(cmd: clap::Command, path: &str) -> clap::Command {
    // After the command's own closing text, if it has one.
    let text = match cmd.get_after_help() {
        Some(own) => format!("{own}\n\n{}", exit_codes(path)),
        None => exit_codes(path),
    };
    let cmd = cmd.after_help(text);
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    names.into_iter().fold(cmd, |cmd, name| {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        cmd.mut_subcommand(&name, |sub| with_exit_codes(sub, &sub_path))
    })
}

/// The command line `runner` parses: [`Cli`]'s, every command's help ending in its exit codes.
pub fn command() -> clap::Command {
    with_exit_codes(Cli::command(), "")
}

/// Sealed inference job runner: runs only owner-approved engines, and signs what they produced.
#[derive(Debug, Parser)]
#[command(name = "runner", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the runner's state directory and its signing key (once per machine, by the
    /// operator, inside the enclave).
    Init(identity::InitArgs),
    /// Print the runner's public key (what recipients check receipts against).
    Identity(identity::IdentityArgs),
    /// Ask the hardware (TDX, SEV-SNP, through configfs-tsm) for a report that binds the
    /// runner's keys, and write it as an evidence document for owners.
    Attest(attest::AttestArgs),
    /// Check evidence from `runner attest`: the hardware's signature, the binding of the keys,
    /// the nonce; print the measurements and the age recipient owners may encrypt to.
    VerifyAttestation(attest::VerifyAttestationArgs),
    /// Create an Ed25519 key pair (private key mode 0600, public key beside it as KEY.pub).
    Keygen(keys::KeygenArgs),
    /// Print a policy's id (16-hex short form) and its full digest.
    PolicyId(policy::PolicyIdArgs),
    /// Check an engine against a policy and write the owner's redacted view.
    Restrict(restrict::RestrictArgs),
    /// Sign a certificate approving an engine, a policy and a model.
    Approve(cert::ApproveArgs),
    /// Add another owner's signature to an existing certificate.
    Cosign(cert::CosignArgs),
    /// Print what a certificate binds and who signed it.
    Inspect(cert::InspectArgs),
    /// Verify a certificate against the trust configuration.
    VerifyCert(cert::VerifyCertArgs),
    /// Verify a receipt: its signature, its certificate, and the output files it names.
    Verify(receipt::VerifyArgs),
    /// Join the shards of a job (exec --shard K/N) into one verifiable result.
    Merge(merge::MergeArgs),
    /// Open sealed outputs with a recipient's age identity (as `age -d -i KEY` does).
    Decrypt(decrypt::DecryptArgs),
    /// Work with the audit log of exec attempts.
    Audit(audit::AuditArgs),
    /// Verify the certificate, engine, policy, model and job, then run the job and sign the
    /// outputs.
    Exec(exec::ExecArgs),
    /// Show owners what changed between an approved certificate and a new engine (and policy,
    /// model): what they need to decide on re-approval.
    Review(review::ReviewArgs),
    /// Run the whole flow on a built-in demo, in a fresh directory.
    Demo(demo::DemoArgs),
    /// Time prefill and decode per batch size, with peak memory and this machine's limits.
    Bench(bench::BenchArgs),
}

/// An error from any module, on its way to being printed and turned into an exit code.
pub struct CliError(Box<dyn Diagnose + Send + Sync>);

impl<E: Diagnose + Send + Sync + 'static> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(Box::new(e))
    }
}

/// Result of one subcommand.
pub type CliResult = Result<(), CliError>;

/// `text` safe to print to a terminal: every control character but newline and tab (escape
/// sequences, carriage returns, backspaces) written as `\u{..}`. A job file, a path or a
/// certificate field must not be able to rewrite what the operator sees.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Write to stdout; a closed pipe (`runner inspect cert.json | head -1`) is not an error.
pub(crate) fn print(text: &str) -> CliResult {
    let text = printable(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(StdoutError(e).into()),
    }
}

/// A flag whose value the parser could not check alone (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

impl Diagnose for UsageError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output: {0}")]
pub(crate) struct StdoutError(pub(crate) std::io::Error);

impl Diagnose for StdoutError {
    fn exit(&self) -> Exit {
        Exit::Failure
    }
}

/// Parse the arguments, run the subcommand, print any error, return the exit code.
pub fn main() -> ExitCode {
    let parsed = command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                Exit::BadInput
            } else {
                Exit::Ok
            }
            .into();
        }
    };
    match run(cli) {
        Ok(()) => Exit::Ok.into(),
        Err(CliError(e)) => {
            eprintln!("error: {}", printable(&e.to_string()));
            if let Some(hint) = e.hint() {
                eprintln!("  hint: {}", printable(&hint));
            }
            e.exit().into()
        }
    }
}

fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Init(args) => identity::init(args),
        Command::Identity(args) => identity::identity(args),
        Command::Attest(args) => attest::attest(args),
        Command::VerifyAttestation(args) => attest::verify_attestation(args),
        Command::Keygen(args) => keys::keygen(args),
        Command::PolicyId(args) => policy::policy_id(args),
        Command::Restrict(args) => restrict::restrict(args),
        Command::Approve(args) => cert::approve(args),
        Command::Cosign(args) => cert::cosign(args),
        Command::Inspect(args) => cert::inspect(args),
        Command::VerifyCert(args) => cert::verify_cert(args),
        Command::Verify(args) => receipt::verify(args),
        Command::Merge(args) => merge::merge(args),
        Command::Decrypt(args) => decrypt::decrypt(args),
        Command::Audit(args) => audit::audit(args),
        Command::Exec(args) => exec::exec(args),
        Command::Demo(args) => demo::demo(args),
        Command::Review(args) => review::review(args),
        Command::Bench(args) => bench::bench(args),
    }
}
