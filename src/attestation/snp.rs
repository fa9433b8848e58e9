//! AMD SEV-SNP attestation reports (the firmware's ATTESTATION_REPORT, SEV-SNP ABI
//! specification, table "ATTESTATION_REPORT Structure"): a fixed 1184-byte layout, read here by
//! offset. The signature is ECDSA P-384 by the chip's VCEK; [`verify`] checks it and the VCEK's
//! chain to AMD's root keys (ARK, ASK) for Milan, Genoa and Turin, which the `sev` crate ships,
//! so nothing is fetched. The VCEK comes from the verifier (AMD's key distribution service) or
//! from the report's `auxblob`, where the host may put its certificate table.

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

/// REPORTED_TCB's place.
const REPORTED_TCB: usize = 0x180;
/// The VCEK's GUID in an extended report's certificate table (GHCB specification).
const VCEK_GUID: [u8; 16] = [
    0x63, 0xda, 0x75, 0x8d, 0xe6, 0x64, 0x45, 0x64, 0xad, 0xc5, 0xf4, 0xb9, 0x3b, 0xe8, 0xac, 0xcd,
];

/// What a verified SNP signature establishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpVerdict {
    /// The product whose AMD root the VCEK chains to (`Milan`, `Genoa`, `Turin`).
    pub product: &'static str,
    /// The report's REPORTED_TCB, as AMD's tools print it.
    pub reported_tcb: String,
}

/// Why an SNP signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnpSignatureError {
    /// The VCEK is not an X.509 certificate.
    #[error("the VCEK is not a PEM or DER X.509 certificate: {0}")]
    Vcek(String),
    /// The VCEK does not chain to a built-in AMD root.
    #[error("the VCEK is not signed by AMD's Milan, Genoa or Turin key (ASK under the ARK)")]
    Chain,
    /// The report's signature is not the VCEK's.
    #[error("the SEV-SNP report's signature does not verify with the VCEK (the report was changed, or another chip signed it)")]
    Rejected,
}

fn reported_tcb(product: &str, report: &[u8]) -> String {
    let b = &report[REPORTED_TCB..REPORTED_TCB + 8];
    if product == "Turin" {
        format!(
            "fmc {}, bootloader {}, tee {}, snp {}, microcode {}",
            b[0], b[1], b[2], b[3], b[7]
        )
    } else {
        format!(
            "bootloader {}, tee {}, snp {}, microcode {}",
            b[0], b[1], b[6], b[7]
        )
    }
}

/// The VCEK in an extended report's certificate table (`auxblob`): entries of GUID, offset,
/// length, ended by an all-zero GUID; `None` when there is none or the table is malformed.
pub fn vcek_from_auxblob(aux: &[u8]) -> Option<Vec<u8>> {
    let field = |at: usize| aux.get(at..at + 4).map(|b| u32_at(b, 0) as usize);
    for at in (0..aux.len()).step_by(24).take(64) {
        let guid = aux.get(at..at + 16)?;
        if guid.iter().all(|&b| b == 0) {
            return None;
        }
        if guid == VCEK_GUID {
            let (offset, len) = (field(at + 16)?, field(at + 20)?);
            return aux
                .get(offset..offset.checked_add(len)?)
                .map(<[u8]>::to_vec);
        }
    }
    None
}

/// Verify `report`'s signature with `vcek` (PEM or DER) and the VCEK's chain to AMD's root.
pub fn verify(report: &[u8], vcek: &[u8]) -> Result<SnpVerdict, SnpSignatureError> {
    use sev::certs::snp::{builtin, ca, Certificate, Chain, Verifiable};
    use sev::firmware::guest::AttestationReport;
    use sev::parser::ByteParser;

    let vcek = if vcek.starts_with(b"-----BEGIN") {
        Certificate::from_pem(vcek)
    } else {
        Certificate::from_der(vcek)
    }
    .map_err(|e| SnpSignatureError::Vcek(e.to_string()))?;
    let parsed = AttestationReport::from_bytes(report).map_err(|_| SnpSignatureError::Rejected)?;
    // The crate checks the bytes it re-encodes: they must be the bytes we were given.
    if parsed.to_bytes().ok().as_ref().map(|b| &b[..]) != Some(report) {
        return Err(SnpSignatureError::Rejected);
    }
    let roots = [
        ("Milan", builtin::milan::ark(), builtin::milan::ask()),
        ("Genoa", builtin::genoa::ark(), builtin::genoa::ask()),
        ("Turin", builtin::turin::ark(), builtin::turin::ask()),
    ];
    for (product, ark, ask) in roots {
        let (Ok(ark), Ok(ask)) = (ark, ask) else {
            continue;
        };
        let chain = Chain {
            ca: ca::Chain { ark, ask },
            vek: vcek.clone(),
        };
        if (&chain).verify().is_err() {
            continue;
        }
        return match (&chain, &parsed).verify() {
            Ok(()) => Ok(SnpVerdict {
                product,
                reported_tcb: reported_tcb(product, report),
            }),
            Err(_) => Err(SnpSignatureError::Rejected),
        };
    }
    Err(SnpSignatureError::Chain)
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
