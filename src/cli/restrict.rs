//! `runner restrict ENGINE --policy POLICY [--view OUT] [--json]`: verify an engine against a
//! policy, print the report, and write the owner's redacted view. On any refusal it prints every
//! violation and writes nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::CliResult;
use crate::error::{Diagnose, Exit};
use crate::restrict;
use crate::trust::policy::Policy;

/// Flags of `runner restrict`.
#[derive(Debug, clap::Args)]
pub struct RestrictArgs {
    /// The engine source (e.g. engines/gemma3.eng).
    engine: PathBuf,
    /// The policy to check the private regions against.
    #[arg(long)]
    policy: PathBuf,
    /// Write the owner's redacted view here (atomically; only when the engine passes).
    #[arg(long, value_name = "OUT")]
    view: Option<PathBuf>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What can go wrong around the verifier: reading the engine, writing the view.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestrictCliError {
    /// The engine file could not be read.
    #[error("cannot read engine {path}: {source}")]
    ReadEngine {
        /// The engine path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `--view` names the engine itself.
    #[error("--view {path} is the engine source; writing the view there would replace it")]
    ViewIsEngine {
        /// The path.
        path: PathBuf,
    },
    /// The view could not be written.
    #[error("cannot write view {path}: {source}")]
    WriteView {
        /// The view path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Diagnose for RestrictCliError {
    fn exit(&self) -> Exit {
        match self {
            RestrictCliError::ReadEngine { .. } | RestrictCliError::ViewIsEngine { .. } => {
                Exit::BadInput
            }
            RestrictCliError::WriteView { .. } => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            RestrictCliError::ReadEngine { .. } => "check the engine path".into(),
            RestrictCliError::ViewIsEngine { .. } => "choose another file for --view".into(),
            RestrictCliError::WriteView { .. } => {
                "check that the directory exists and is writable".into()
            }
        })
    }
}

/// Run `runner restrict`.
pub fn restrict(args: RestrictArgs) -> CliResult {
    let policy = Policy::load(&args.policy)?;
    let origin = args.engine.display().to_string();
    let bytes = std::fs::read(&args.engine).map_err(|source| RestrictCliError::ReadEngine {
        path: args.engine.clone(),
        source,
    })?;
    if let Some(view) = &args.view {
        if same_file(view, &args.engine) {
            return Err(RestrictCliError::ViewIsEngine { path: view.clone() }.into());
        }
    }
    let checked = restrict::check_bytes(&bytes, &origin, &policy)?;
    if let Some(view) = &args.view {
        write_atomic(view, checked.view().as_bytes()).map_err(|source| {
            RestrictCliError::WriteView {
                path: view.clone(),
                source,
            }
        })?;
    }
    let report = checked.report();
    if args.json {
        super::print(&format!("{}\n", report.to_json()))
    } else {
        let mut text = report.to_human();
        if let Some(view) = &args.view {
            text.push_str(&format!("view written to   {}\n", view.display()));
        }
        super::print(&text)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader sees the old file or the whole new one, never a part.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "view".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
