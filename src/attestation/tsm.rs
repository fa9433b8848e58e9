//! Asking the kernel for a hardware report through configfs-tsm
//! (`Documentation/ABI/testing/configfs-tsm-report`, Linux 6.7+): make an entry under
//! `report/`, write the 64 bytes of user data to `inblob`, read `outblob`, `auxblob` and
//! `provider`, and remove the entry. `generation` counts the writes to the entry; when it
//! differs before and after the reads, someone else wrote in between and the blobs may belong
//! to their request, so the request is made again.
//!
//! The file operations go through [`Configfs`], so a test can play the kernel's part
//! ([`Kernel`] is the real one).

use std::io;
use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};

use super::hardware::Hardware;

/// Where configfs-tsm lives on every Linux confidential VM.
pub const DEFAULT_TSM_ROOT: &str = "/sys/kernel/config/tsm";
/// The environment variable that moves it (for tests, and for unusual mounts).
pub const TSM_ROOT_ENV: &str = "RUNNER_TSM_ROOT";
/// The kernel's own limit on `outblob` (TSM_OUTBLOB_MAX), with room for `auxblob`'s
/// certificate tables.
const MAX_BLOB: usize = 1 << 20;
/// How many times a request is made when `generation` keeps changing.
const ATTEMPTS: usize = 3;

/// The file operations configfs-tsm needs.
pub trait Configfs {
    /// `mkdir`.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Write all of `bytes` to an existing attribute.
    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Read an attribute, at most `cap` bytes (more is an error).
    fn read(&self, path: &Path, cap: usize) -> io::Result<Vec<u8>>;
    /// `rmdir`.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
}

/// The real configfs.
pub struct Kernel;

impl Configfs for Kernel {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        // Attributes exist once the entry does; never create a file here.
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.write_all(bytes)
    }
    fn read(&self, path: &Path, cap: usize) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut out = Vec::new();
        std::fs::File::open(path)?
            .take(cap as u64 + 1)
            .read_to_end(&mut out)?;
        if out.len() > cap {
            return Err(io::Error::other(format!("it is larger than {cap} bytes")));
        }
        Ok(out)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

/// What the kernel returned for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TsmReport {
    /// Which hardware made it.
    pub hardware: Hardware,
    /// The `provider` attribute as read (`tdx_guest`, `sev_guest`).
    pub provider: String,
    /// `outblob`: the report (a TDX quote, an SEV-SNP attestation report).
    pub report: Vec<u8>,
    /// `auxblob`: supplemental data (SEV-SNP's certificate table), empty when there is none.
    pub auxblob: Vec<u8>,
}

/// Why no report was obtained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TsmError {
    /// No configfs-tsm report interface at the root.
    #[error("there is no configfs-tsm report interface at {0} (not a confidential VM, a kernel before 6.7, or configfs not mounted)")]
    Absent(PathBuf),
    /// The provider is not one this runner can verify.
    #[error("configfs-tsm provider {0:?} is not one this runner knows (tdx_guest, sev_guest)")]
    UnknownProvider(String),
    /// A file operation failed.
    #[error("configfs-tsm: cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// `generation` is not a number.
    #[error("configfs-tsm: {0} does not hold a decimal number")]
    Generation(PathBuf),
    /// Another writer kept changing the entry.
    #[error("configfs-tsm: the report entry {0} changed during every one of {ATTEMPTS} attempts (another process writes to it)")]
    Contended(PathBuf),
    /// The system random generator failed (the entry name).
    #[error("the system random number generator failed")]
    NoRandomness,
}

impl crate::error::Diagnose for TsmError {
    fn exit(&self) -> crate::error::Exit {
        match self {
            TsmError::Absent(_) | TsmError::UnknownProvider(_) => crate::error::Exit::BadInput,
            _ => crate::error::Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            TsmError::Absent(_) => Some(format!(
                "run inside a TDX or SEV-SNP guest with Linux 6.7+, or set --tsm-root / \
                 ${TSM_ROOT_ENV}; on a machine without such hardware, `runner attest \
                 --allow-no-hardware` writes evidence marked \"hardware\": \"none\""
            )),
            TsmError::UnknownProvider(_) => Some(
                "this runner verifies TDX quotes and SEV-SNP reports; see docs/attestation.md"
                    .into(),
            ),
            _ => None,
        }
    }
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> TsmError + 'a {
    move |source| TsmError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// The entry is removed however the request ends.
struct Entry<'a> {
    fs: &'a dyn Configfs,
    path: PathBuf,
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        // A leftover entry holds only public data; failing to remove it is not worth an error.
        let _ = self.fs.remove_dir(&self.path);
    }
}

fn read_generation(fs: &dyn Configfs, path: &Path) -> Result<u64, TsmError> {
    let bytes = fs.read(path, 64).map_err(io_err("read", path))?;
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| TsmError::Generation(path.to_owned()))
}

fn read_provider(fs: &dyn Configfs, path: &Path) -> Result<(Hardware, String), TsmError> {
    let bytes = fs.read(path, 256).map_err(io_err("read", path))?;
    let name: String = String::from_utf8_lossy(&bytes)
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    let hardware =
        Hardware::from_provider(&name).ok_or_else(|| TsmError::UnknownProvider(name.clone()))?;
    Ok((hardware, name))
}

/// Ask for a report carrying `user_data`, under `root` (the directory holding `report/`).
pub fn request_report(
    fs: &dyn Configfs,
    root: &Path,
    user_data: &[u8; 64],
) -> Result<TsmReport, TsmError> {
    let reports = root.join("report");
    if !fs.is_dir(&reports) {
        return Err(TsmError::Absent(reports));
    }
    let mut suffix = [0u8; 8];
    SystemRandom::new()
        .fill(&mut suffix)
        .map_err(|_| TsmError::NoRandomness)?;
    let path = reports.join(format!(
        "runner-{}-{}",
        std::process::id(),
        hex::encode(suffix)
    ));
    fs.create_dir(&path).map_err(io_err("create", &path))?;
    let entry = Entry { fs, path };
    let at = |name: &str| entry.path.join(name);
    // Known before anything is requested: an unknown provider gets no user data.
    read_provider(fs, &at("provider"))?;
    for _ in 0..ATTEMPTS {
        let inblob = at("inblob");
        fs.write(&inblob, user_data)
            .map_err(io_err("write", &inblob))?;
        let before = read_generation(fs, &at("generation"))?;
        let outblob = at("outblob");
        let report = fs
            .read(&outblob, MAX_BLOB)
            .map_err(io_err("read", &outblob))?;
        let auxpath = at("auxblob");
        let auxblob = match fs.read(&auxpath, MAX_BLOB) {
            Ok(bytes) => bytes,
            // Hidden by providers that have none (TDX).
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err("read", &auxpath)(e)),
        };
        let (hardware, provider) = read_provider(fs, &at("provider"))?;
        if read_generation(fs, &at("generation"))? == before {
            return Ok(TsmReport {
                hardware,
                provider,
                report,
                auxblob,
            });
        }
    }
    Err(TsmError::Contended(entry.path.clone()))
}

/// The configfs-tsm root: the flag, else [`TSM_ROOT_ENV`], else [`DEFAULT_TSM_ROOT`].
pub fn tsm_root(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_owned)
        .or_else(|| std::env::var_os(TSM_ROOT_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TSM_ROOT))
}

/// Which configfs-tsm to ask: the file operations and the root.
#[derive(Clone, Copy)]
pub struct TsmAccess<'a> {
    /// The file operations ([`Kernel`] outside tests).
    pub fs: &'a dyn Configfs,
    /// The directory holding `report/`.
    pub root: &'a Path,
}

impl std::fmt::Debug for TsmAccess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TsmAccess")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}
