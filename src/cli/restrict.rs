//! `runner restrict ENGINE --policy POLICY [--view OUT] [--json]`: verify an engine against a
//! policy, print the report, and write the owner's redacted view. On any refusal it prints every
//! violation and writes nothing.

use std::path::{Path, PathBuf};

use super::CliResult;
use crate::error::{Diagnose, Exit};
use crate::primitives::atomic_file::{write_atomic, Overwrite, WriteError};
use crate::primitives::bounded_read::read_bounded;
use crate::restrict;
use crate::restrict::policy::Policy;

/// Flags of `runner restrict`.
#[derive(Debug, clap::Args)]
pub struct RestrictArgs {
    /// The engine source (e.g. engines/gemma3.eng).
    #[arg(value_name = "FILE")]
    engine: PathBuf,
    /// The policy to check the private regions against.
    #[arg(long, value_name = "FILE")]
    policy: PathBuf,
    /// Write the owner's redacted view here (atomically; only when the engine passes).
    #[arg(long, value_name = "FILE")]
    view: Option<PathBuf>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Show errors on lines of private regions in full. For the engine's author, on their own
    /// terminal: by default those lines, and names from them, are withheld, as they are from
    /// owners (`review`, `approve`) and operators (`exec`).
    #[arg(long)]
    show_private: bool,
}

/// What can go wrong around the verifier: reading the engine, writing the view.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestrictCliError {
    /// `--view` names the engine itself.
    #[error("--view {path} is the engine source; writing the view there would replace it")]
    ViewIsEngine {
        /// The path.
        path: PathBuf,
    },
    /// The view could not be written.
    #[error("view not written: {0}")]
    WriteView(WriteError),
}

impl Diagnose for RestrictCliError {
    fn exit(&self) -> Exit {
        match self {
            RestrictCliError::ViewIsEngine { .. } => Exit::BadInput,
            RestrictCliError::WriteView(_) => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            RestrictCliError::ViewIsEngine { .. } => "choose another file for --view".into(),
            RestrictCliError::WriteView(_) => {
                "check that the directory exists and is writable".into()
            }
        })
    }
}

/// Run `runner restrict`.
pub fn restrict(args: RestrictArgs) -> CliResult {
    let policy = Policy::load(&args.policy)?;
    let origin = args.engine.display().to_string();
    let bytes = read_bounded(
        &args.engine,
        crate::restrict::MAX_SOURCE_BYTES as u64,
        "engine",
    )?;
    if let Some(view) = &args.view {
        if same_file(view, &args.engine) {
            return Err(RestrictCliError::ViewIsEngine { path: view.clone() }.into());
        }
    }
    let checked = if args.show_private {
        restrict::check_bytes_showing_private(&bytes, &origin, &policy)?
    } else {
        restrict::check_bytes(&bytes, &origin, &policy)?
    };
    if let Some(view) = &args.view {
        // A reader sees the old view or the whole new one, never a part.
        write_atomic(view, checked.view().as_bytes(), 0o644, Overwrite::Replace)
            .map_err(RestrictCliError::WriteView)?;
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
