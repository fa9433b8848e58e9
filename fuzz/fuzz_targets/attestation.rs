//! Evidence documents and hardware reports on arbitrary bytes: reading never panics; a document
//! that verifies without collateral (no hardware, or an SEV-SNP report) carries a report whose
//! user data is its binding's hash, or no report at all; a TDX quote or SEV-SNP report that
//! parses has measurements of exactly the sizes the hardware defines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::attestation::verify::parse_report;
use runner::attestation::{read_evidence, verify_evidence, Check, Hardware};
use runner::primitives::time::Timestamp;

fuzz_target!(|data: &[u8]| {
    if let Ok(evidence) = read_evidence(data) {
        let check = Check {
            collateral: None,
            vcek: None,
            nonce: None,
            at: Timestamp::now(),
        };
        if let Ok(v) = verify_evidence(data, &check) {
            match &v.report {
                Some(r) => assert_eq!(r.report_data, evidence.payload.binding.report_data()),
                None => assert_eq!(evidence.hardware, Hardware::None),
            }
        }
    }
    for hardware in [Hardware::Tdx, Hardware::SevSnp] {
        if let Ok(Some(report)) = parse_report(hardware, data) {
            for (name, value) in &report.measurements {
                assert_eq!(hardware.measurement_len(name), Some(value.len()));
            }
        }
    }
});
