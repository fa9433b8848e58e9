//! Intel TDX quotes: parsed and verified by the `dcap-qvl` crate (Intel's DCAP quote
//! verification: the PCK chain to Intel's SGX root CA, the QE report, the TCB info and QE
//! identity signatures, CRLs, the TCB level), offline from collateral a verifier supplies.

use dcap_qvl::quote::Quote;
use dcap_qvl::QuoteCollateralV3;

use super::hardware::Hardware;
use super::report::{MalformedReport, ParsedReport};

/// TDATTRIBUTES bit 0: the TD is debuggable.
const TD_ATTRIBUTES_DEBUG: u8 = 1;

fn malformed(why: impl std::fmt::Display) -> MalformedReport {
    MalformedReport {
        hardware: Hardware::Tdx,
        why: why.to_string(),
    }
}

/// Parse a TDX quote (no signature checked).
pub fn parse(bytes: &[u8]) -> Result<ParsedReport, MalformedReport> {
    let quote = Quote::parse(bytes).map_err(malformed)?;
    let td = quote
        .report
        .as_td10()
        .ok_or_else(|| malformed("it is an SGX enclave quote, not a TD quote"))?;
    Ok(ParsedReport {
        report_data: td.report_data,
        measurements: vec![
            ("mrtd", td.mr_td.to_vec()),
            ("rtmr0", td.rt_mr0.to_vec()),
            ("rtmr1", td.rt_mr1.to_vec()),
            ("rtmr2", td.rt_mr2.to_vec()),
            ("rtmr3", td.rt_mr3.to_vec()),
            ("mrconfigid", td.mr_config_id.to_vec()),
            ("mrowner", td.mr_owner.to_vec()),
            ("mrownerconfig", td.mr_owner_config.to_vec()),
        ],
        debug: td.td_attributes[0] & TD_ATTRIBUTES_DEBUG != 0,
    })
}

/// What verification established about a quote's platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcbVerdict {
    /// Intel's TCB status (`UpToDate`, `SWHardeningNeeded`, `OutOfDate`, ...).
    pub status: String,
    /// Intel security advisories that apply.
    pub advisories: Vec<String>,
}

/// Why a quote did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuoteError {
    /// The collateral file is not collateral.
    #[error("the collateral is not DCAP collateral JSON (dcap-qvl's QuoteCollateralV3): {0}")]
    Collateral(String),
    /// The quote failed verification.
    #[error("the TDX quote does not verify against Intel's root CA and the collateral: {0}")]
    Rejected(String),
}

/// Verify `quote` against `collateral` (JSON) at `now_unix`.
pub fn verify(quote: &[u8], collateral: &[u8], now_unix: u64) -> Result<TcbVerdict, QuoteError> {
    let collateral: QuoteCollateralV3 =
        serde_json::from_slice(collateral).map_err(|e| QuoteError::Collateral(e.to_string()))?;
    let verified = dcap_qvl::verify::verify(quote, &collateral, now_unix)
        .map_err(|e| QuoteError::Rejected(format!("{e:#}")))?;
    if verified.report.as_td10().is_none() {
        return Err(QuoteError::Rejected("it is not a TD quote".into()));
    }
    Ok(TcbVerdict {
        status: verified.status,
        advisories: verified.advisory_ids,
    })
}
