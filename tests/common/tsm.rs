//! configfs-tsm played by the test: [`FakeKernel`] does the kernel's part for one provider, in
//! memory; [`tdx_kernel`] answers with dcap-qvl's sample quote carrying the requested user
//! data (it parses, and its signature no longer verifies); [`snp_report`] builds an SEV-SNP
//! report. Shared by the attestation tests in tests/lib and the exec tests in tests/cli.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use runner::attestation::tsm::Configfs;

/// Where a TD report's REPORTDATA sits in a version 4 quote (48-byte header, then 520 bytes of
/// the TD report before it).
pub const QUOTE_REPORT_DATA: usize = 568;

/// The configfs root the fake kernel serves.
pub fn root() -> &'static Path {
    Path::new("/tsm")
}

/// A file of tests/fixtures/attestation.
pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        super::repo::root()
            .join("tests/fixtures/attestation")
            .join(name),
    )
    .unwrap()
}

/// What the hardware puts in `outblob` for an `inblob`.
type MakeReport = dyn Fn(&[u8]) -> Vec<u8>;

/// The kernel's part of configfs-tsm for one provider, in memory: entries made by `mkdir`
/// get their attributes, writes to `inblob` count in `generation`, and reading `outblob`
/// makes the report from the last `inblob`.
pub struct FakeKernel {
    pub provider: &'static str,
    make_report: Box<MakeReport>,
    pub auxblob: Option<Vec<u8>>,
    /// How many reads of `outblob` another writer races (bumping `generation` behind us).
    pub races: Cell<usize>,
    pub dirs: RefCell<BTreeSet<PathBuf>>,
    files: RefCell<BTreeMap<PathBuf, Vec<u8>>>,
    pub inblobs: RefCell<Vec<Vec<u8>>>,
}

impl FakeKernel {
    pub fn new(provider: &'static str, make_report: impl Fn(&[u8]) -> Vec<u8> + 'static) -> Self {
        let dirs = BTreeSet::from([PathBuf::from("/tsm/report")]);
        FakeKernel {
            provider,
            make_report: Box::new(make_report),
            auxblob: None,
            races: Cell::new(0),
            dirs: RefCell::new(dirs),
            files: RefCell::new(BTreeMap::new()),
            inblobs: RefCell::new(Vec::new()),
        }
    }

    fn bump(&self, entry: &Path) {
        let mut files = self.files.borrow_mut();
        let g = files.get_mut(&entry.join("generation")).unwrap();
        let n: u64 = String::from_utf8_lossy(g).trim().parse().unwrap();
        *g = format!("{}\n", n + 1).into_bytes();
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl Configfs for FakeKernel {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        assert_eq!(path.parent(), Some(Path::new("/tsm/report")));
        if !self.dirs.borrow_mut().insert(path.to_owned()) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let mut files = self.files.borrow_mut();
        files.insert(path.join("provider"), format!("{}\n", self.provider).into());
        files.insert(path.join("generation"), b"0\n".to_vec());
        Ok(())
    }
    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        assert_eq!(
            path.file_name().unwrap(),
            "inblob",
            "only inblob is written"
        );
        let entry = path.parent().unwrap();
        if !self.dirs.borrow().contains(entry) {
            return Err(not_found());
        }
        self.inblobs.borrow_mut().push(bytes.to_vec());
        self.files
            .borrow_mut()
            .insert(path.to_owned(), bytes.to_vec());
        self.bump(entry);
        Ok(())
    }
    fn read(&self, path: &Path, cap: usize) -> io::Result<Vec<u8>> {
        let entry = path.parent().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let bytes = match name {
            "outblob" => {
                let inblob = self.files.borrow().get(&entry.join("inblob")).cloned();
                let report = (self.make_report)(&inblob.ok_or_else(not_found)?);
                if self.races.get() > 0 {
                    self.races.set(self.races.get() - 1);
                    self.bump(entry);
                }
                report
            }
            "auxblob" => self.auxblob.clone().ok_or_else(not_found)?,
            _ => self
                .files
                .borrow()
                .get(path)
                .cloned()
                .ok_or_else(not_found)?,
        };
        assert!(bytes.len() <= cap);
        Ok(bytes)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.dirs.borrow_mut().remove(path);
        self.files.borrow_mut().retain(|p, _| !p.starts_with(path));
        Ok(())
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.dirs.borrow().contains(path)
    }
}

/// A TDX guest whose quote is the sample's with the requested user data in it: it parses,
/// and its signature no longer verifies (the hardware did not make it).
pub fn tdx_kernel() -> FakeKernel {
    FakeKernel::new("tdx_guest", |inblob| {
        let mut quote = fixture("tdx_quote");
        quote[QUOTE_REPORT_DATA..QUOTE_REPORT_DATA + 64].copy_from_slice(inblob);
        quote
    })
}

/// An SEV-SNP ATTESTATION_REPORT (version 3, ECDSA P-384) with this user data, measurement
/// byte and POLICY; unsigned.
pub fn snp_report(report_data: &[u8], measurement: u8, policy: u64) -> Vec<u8> {
    let mut r = vec![0u8; runner::attestation::snp::REPORT_LEN];
    r[0..4].copy_from_slice(&3u32.to_le_bytes());
    r[0x08..0x10].copy_from_slice(&policy.to_le_bytes());
    r[0x34..0x38].copy_from_slice(&1u32.to_le_bytes());
    r[0x50..0x90].copy_from_slice(report_data);
    r[0x90..0xC0].fill(measurement);
    r
}
