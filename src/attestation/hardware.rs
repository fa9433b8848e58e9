//! The kinds of hardware a report can come from, and the measurements each one reports.

use std::fmt;

/// Which hardware signed a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hardware {
    /// Intel TDX: the report is a DCAP quote (version 4 or 5).
    Tdx,
    /// AMD SEV-SNP: the report is the firmware's ATTESTATION_REPORT.
    SevSnp,
    /// No hardware: evidence written with `--allow-no-hardware`, which proves nothing about the
    /// machine.
    None,
}

impl Hardware {
    /// The name in documents and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Hardware::Tdx => "tdx",
            Hardware::SevSnp => "sev-snp",
            Hardware::None => "none",
        }
    }

    /// Parse [`Hardware::name`].
    pub fn from_name(name: &str) -> Option<Hardware> {
        [Hardware::Tdx, Hardware::SevSnp, Hardware::None]
            .into_iter()
            .find(|h| h.name() == name)
    }

    /// The hardware behind a configfs-tsm `provider`.
    pub fn from_provider(provider: &str) -> Option<Hardware> {
        match provider {
            "tdx_guest" => Some(Hardware::Tdx),
            "sev_guest" => Some(Hardware::SevSnp),
            _ => None,
        }
    }

    /// The measurements a certificate may pin for this hardware, with their sizes in bytes.
    pub fn measurements(self) -> &'static [(&'static str, usize)] {
        match self {
            Hardware::Tdx => &[
                ("mrtd", 48),
                ("rtmr0", 48),
                ("rtmr1", 48),
                ("rtmr2", 48),
                ("rtmr3", 48),
                ("mrconfigid", 48),
                ("mrowner", 48),
                ("mrownerconfig", 48),
            ],
            Hardware::SevSnp => &[("measurement", 48), ("host_data", 32), ("policy", 8)],
            Hardware::None => &[],
        }
    }

    /// The size of measurement `name`, if this hardware reports it.
    pub fn measurement_len(self, name: &str) -> Option<usize> {
        self.measurements()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, len)| *len)
    }
}

impl fmt::Display for Hardware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
