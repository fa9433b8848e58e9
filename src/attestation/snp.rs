//! AMD SEV-SNP attestation reports (the firmware's ATTESTATION_REPORT, SEV-SNP ABI
//! specification, table "ATTESTATION_REPORT Structure"): a fixed 1184-byte layout, read here by
//! offset. The signature (ECDSA P-384 by the chip's VCEK, whose chain leads to AMD's root key)
//! is not checked by this runner yet: every verdict on an SNP report says so.

use super::hardware::Hardware;
use super::report::{MalformedReport, ParsedReport};

/// The report's size.
pub const REPORT_LEN: usize = 0x4A0;
/// POLICY bit 19: debugging allowed.
const POLICY_DEBUG: u64 = 1 << 19;
/// SIGNATURE_ALGO 1: ECDSA P-384 with SHA-384, the only one defined.
const ECDSA_P384_SHA384: u32 = 1;

fn field(bytes: &[u8], at: usize, len: usize) -> Vec<u8> {
    bytes[at..at + len].to_vec()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Parse an SEV-SNP report (no signature checked).
pub fn parse(bytes: &[u8]) -> Result<ParsedReport, MalformedReport> {
    let bad = |why: String| MalformedReport {
        hardware: Hardware::SevSnp,
        why,
    };
    if bytes.len() != REPORT_LEN {
        return Err(bad(format!(
            "it is {} bytes; an ATTESTATION_REPORT is {REPORT_LEN}",
            bytes.len()
        )));
    }
    let version = u32_at(bytes, 0);
    if !(2..=5).contains(&version) {
        return Err(bad(format!(
            "VERSION is {version}; versions 2 to 5 are known"
        )));
    }
    let algo = u32_at(bytes, 0x34);
    if algo != ECDSA_P384_SHA384 {
        return Err(bad(format!(
            "SIGNATURE_ALGO is {algo}, not 1 (ECDSA P-384 with SHA-384)"
        )));
    }
    let mut report_data = [0u8; 64];
    report_data.copy_from_slice(&bytes[0x50..0x90]);
    let policy = field(bytes, 0x08, 8);
    let mut p = [0u8; 8];
    p.copy_from_slice(&policy);
    Ok(ParsedReport {
        report_data,
        measurements: vec![
            ("measurement", field(bytes, 0x90, 48)),
            ("host_data", field(bytes, 0xC0, 32)),
            // Written as the big-endian number, as AMD's tools print it.
            ("policy", u64::from_le_bytes(p).to_be_bytes().to_vec()),
        ],
        debug: u64::from_le_bytes(p) & POLICY_DEBUG != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fields_by_offset_and_refuses_other_shapes() {
        let mut r = vec![0u8; REPORT_LEN];
        r[0..4].copy_from_slice(&3u32.to_le_bytes());
        r[0x08..0x10].copy_from_slice(&(0x30000 | POLICY_DEBUG).to_le_bytes());
        r[0x34..0x38].copy_from_slice(&ECDSA_P384_SHA384.to_le_bytes());
        r[0x50..0x90].fill(9);
        r[0x90..0xC0].fill(0x5a);
        let parsed = parse(&r).unwrap();
        assert_eq!(parsed.report_data, [9; 64]);
        assert_eq!(parsed.measurement("measurement").unwrap(), &[0x5a; 48]);
        assert_eq!(
            hex::encode(parsed.measurement("policy").unwrap()),
            "00000000000b0000"
        );
        assert!(parsed.debug);
        assert!(parse(&r[..REPORT_LEN - 1]).is_err());
        let mut v = r.clone();
        v[0] = 9;
        assert!(parse(&v).unwrap_err().why.contains("VERSION is 9"));
        let mut a = r;
        a[0x34] = 2;
        assert!(parse(&a).unwrap_err().why.contains("SIGNATURE_ALGO"));
    }
}
