//! What every kind of hardware report says, once parsed: the user data it carries, its
//! measurements, and whether the guest is debuggable (a debuggable guest's memory is open to
//! the host, so its report proves nothing about secrecy).

use super::hardware::Hardware;

/// A parsed (not yet verified) report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReport {
    /// The 64 bytes of user data.
    pub report_data: [u8; 64],
    /// The measurements, in [`Hardware::measurements`] order.
    pub measurements: Vec<(&'static str, Vec<u8>)>,
    /// Whether the guest runs with debugging enabled.
    pub debug: bool,
}

impl ParsedReport {
    /// The measurement called `name`.
    pub fn measurement(&self, name: &str) -> Option<&[u8]> {
        self.measurements
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Why a report could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {hardware} report is malformed: {why}")]
pub struct MalformedReport {
    /// Which kind of report.
    pub hardware: Hardware,
    /// What is wrong.
    pub why: String,
}
