//! What a certificate may require of the machine a job runs on: a kind of hardware, and values
//! for any of its measurements (`runner approve --require-attestation tdx --measurement
//! mrtd=HEX`). Measurements not named are not constrained.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::hardware::Hardware;
use super::report::ParsedReport;

/// The certificate's `attestation` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// `tdx` or `sev-snp`.
    pub hardware: String,
    /// Measurement name to its required value, lowercase hex.
    pub measurements: BTreeMap<String, String>,
}

/// A measurement that is not what the certificate requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unmet {
    /// Another kind of hardware (or none).
    #[error(
        "the certificate requires {required} attestation and the evidence is from {found} hardware"
    )]
    Hardware {
        /// Required.
        required: String,
        /// Found.
        found: Hardware,
    },
    /// A measurement differs.
    #[error("measurement {name} is {found}, and the certificate requires {required}")]
    Measurement {
        /// Its name.
        name: String,
        /// The certificate's value.
        required: String,
        /// The report's.
        found: String,
    },
}

impl Requirement {
    /// A requirement from the command line's `NAME=HEX` pairs, checked.
    pub fn new(hardware: Hardware, pairs: &[(String, String)]) -> Result<Requirement, String> {
        let mut measurements = BTreeMap::new();
        for (name, value) in pairs {
            if measurements
                .insert(name.clone(), value.to_ascii_lowercase())
                .is_some()
            {
                return Err(format!("measurement {name} is given twice"));
            }
        }
        let r = Requirement {
            hardware: hardware.name().into(),
            measurements,
        };
        r.validate()?;
        Ok(r)
    }

    /// The hardware required.
    pub fn hardware(&self) -> Option<Hardware> {
        Hardware::from_name(&self.hardware).filter(|h| *h != Hardware::None)
    }

    /// Every name known for the hardware, every value lowercase hex of the right size.
    pub fn validate(&self) -> Result<(), String> {
        let hardware = self
            .hardware()
            .ok_or_else(|| format!("hardware {:?} is not tdx or sev-snp", self.hardware))?;
        for (name, value) in &self.measurements {
            let len = hardware.measurement_len(name).ok_or_else(|| {
                let known: Vec<&str> = hardware.measurements().iter().map(|m| m.0).collect();
                format!(
                    "{hardware} has no measurement {name:?} (it has {})",
                    known.join(", ")
                )
            })?;
            let ok = value.len() == 2 * len
                && value
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !ok {
                return Err(format!(
                    "measurement {name} must be {} lowercase hex digits ({len} bytes)",
                    2 * len
                ));
            }
        }
        Ok(())
    }

    /// Whether a report from `hardware` meets the requirement.
    pub fn check(&self, hardware: Hardware, report: Option<&ParsedReport>) -> Result<(), Unmet> {
        let unmet_hardware = || Unmet::Hardware {
            required: self.hardware.clone(),
            found: hardware,
        };
        if self.hardware() != Some(hardware) {
            return Err(unmet_hardware());
        }
        let report = report.ok_or_else(unmet_hardware)?;
        for (name, required) in &self.measurements {
            let found = report
                .measurement(name)
                .map(hex::encode)
                .unwrap_or_default();
            if &found != required {
                return Err(Unmet::Measurement {
                    name: name.clone(),
                    required: required.clone(),
                    found,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(n: &str, v: &str) -> (String, String) {
        (n.into(), v.into())
    }

    #[test]
    fn refuses_unknown_names_wrong_sizes_and_repeats() {
        let mrtd = "ab".repeat(48);
        assert!(Requirement::new(Hardware::Tdx, &[pair("mrtd", &mrtd)]).is_ok());
        let e = Requirement::new(Hardware::Tdx, &[pair("measurement", &mrtd)]).unwrap_err();
        assert!(e.contains("tdx has no measurement \"measurement\""), "{e}");
        let e = Requirement::new(Hardware::Tdx, &[pair("mrtd", "abcd")]).unwrap_err();
        assert!(e.contains("96 lowercase hex digits"), "{e}");
        let e = Requirement::new(Hardware::Tdx, &[pair("mrtd", &mrtd), pair("mrtd", &mrtd)])
            .unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(Requirement::new(Hardware::None, &[]).is_err());
    }

    #[test]
    fn checks_the_hardware_and_each_named_measurement() {
        let report = ParsedReport {
            report_data: [0; 64],
            measurements: vec![("measurement", vec![1; 48]), ("host_data", vec![2; 32])],
            debug: false,
        };
        let r = Requirement::new(Hardware::SevSnp, &[pair("host_data", &"02".repeat(32))]).unwrap();
        assert!(r.check(Hardware::SevSnp, Some(&report)).is_ok());
        assert!(matches!(
            r.check(Hardware::None, None),
            Err(Unmet::Hardware { .. })
        ));
        assert!(matches!(
            r.check(Hardware::Tdx, Some(&report)),
            Err(Unmet::Hardware { .. })
        ));
        let r = Requirement::new(Hardware::SevSnp, &[pair("host_data", &"03".repeat(32))]).unwrap();
        let e = r.check(Hardware::SevSnp, Some(&report)).unwrap_err();
        assert!(
            e.to_string().starts_with("measurement host_data is 0202"),
            "{e}"
        );
    }
}
