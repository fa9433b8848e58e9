//! The attestation flow against a kernel played by the test (`common::tsm::FakeKernel`) and
//! against a real TDX quote with its collateral (dcap-qvl's sample, tests/fixtures/attestation).

use std::collections::BTreeSet;
use std::path::PathBuf;

use runner::attestation::binding::Binding;
use runner::attestation::evidence::{
    attest, read_evidence, EvidenceError, Source, Subject, EVIDENCE_PAYLOAD_TYPE,
};
use runner::attestation::snp::{self, SnpSignatureError};
use runner::attestation::tdx::{self, QuoteError};
use runner::attestation::tsm::{request_report, Kernel, TsmError};
use runner::attestation::verify::{verify_evidence, AttestationError, Check, HardwareSignature};
use runner::attestation::Hardware;
use runner::primitives::digest::Digest;
use runner::primitives::dsse::Envelope;
use runner::primitives::keys::SecretKey;
use runner::primitives::time::Timestamp;
use runner::sealing::SealKey;

use crate::common::tsm::{fixture, root, snp_report, tdx_kernel, FakeKernel, QUOTE_REPORT_DATA};

/// The sample quote's MRTD (dcap-qvl's own snapshot of it).
const SAMPLE_MRTD: &str = "91eb2b44d141d4ece09f0c75c2c53d247a3c68edd7fafe8a3520c942a604a407de03ae6dc5f87f27428b2538873118b7";
/// Inside the sample collateral's validity (its TCB info runs 2025-06-19 to 2025-07-19).
const SAMPLE_TIME: &str = "2025-07-01T00:00:00Z";

fn sample_time() -> Timestamp {
    Timestamp::parse_user(SAMPLE_TIME).unwrap()
}

fn unix(t: Timestamp) -> u64 {
    t.datetime().unix_timestamp() as u64
}

struct Runner {
    key: SecretKey,
    recipient: String,
}

impl Runner {
    fn new() -> Runner {
        Runner {
            key: SecretKey::generate().unwrap(),
            recipient: SealKey::generate().recipient(),
        }
    }
    fn subject(&self) -> Subject<'_> {
        Subject {
            key: &self.key,
            age_recipient: &self.recipient,
            runner_digest: Digest([5; 32]),
            runner_version: "0.1.0",
        }
    }
    fn binding(&self, nonce: &[u8]) -> Binding {
        Binding::new(
            &self.key.public_key(),
            &self.recipient,
            Digest([5; 32]),
            nonce,
        )
    }
}

#[test]
fn configfs_gets_the_binding_hash_as_user_data_and_removes_its_entry() {
    let runner = Runner::new();
    let kernel = tdx_kernel();
    let bytes = attest(&runner.subject(), b"nonce", Source::Tsm(&kernel, root())).unwrap();
    assert_eq!(
        *kernel.inblobs.borrow(),
        vec![runner.binding(b"nonce").report_data().to_vec()]
    );
    assert_eq!(
        *kernel.dirs.borrow(),
        BTreeSet::from([PathBuf::from("/tsm/report")])
    );
    let evidence = read_evidence(&bytes).unwrap();
    assert_eq!(evidence.hardware, Hardware::Tdx);
    assert_eq!(evidence.payload.provider, "tdx_guest");
    assert_eq!(evidence.nonce, b"nonce");
    assert_eq!(
        evidence.report[QUOTE_REPORT_DATA..QUOTE_REPORT_DATA + 64],
        runner.binding(b"nonce").report_data()
    );
    assert!(evidence.auxblob.is_empty(), "TDX hides auxblob");
}

#[test]
fn configfs_request_is_made_again_when_generation_changes_mid_read() {
    let kernel = tdx_kernel();
    kernel.races.set(1);
    let report = request_report(&kernel, root(), &[7; 64]).unwrap();
    assert_eq!(
        kernel.inblobs.borrow().len(),
        2,
        "the request was made twice"
    );
    assert_eq!(
        report.report[QUOTE_REPORT_DATA..QUOTE_REPORT_DATA + 64],
        [7; 64]
    );

    let kernel = tdx_kernel();
    kernel.races.set(usize::MAX);
    let e = request_report(&kernel, root(), &[7; 64]).unwrap_err();
    assert!(matches!(e, TsmError::Contended(_)), "{e}");
    assert_eq!(
        kernel.dirs.borrow().len(),
        1,
        "the entry is removed on failure too"
    );
}

#[test]
fn configfs_refuses_an_unknown_provider_before_writing_user_data() {
    let kernel = FakeKernel::new("arm_cca_guest", |_| vec![1, 2, 3]);
    let e = request_report(&kernel, root(), &[7; 64]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "configfs-tsm provider \"arm_cca_guest\" is not one this runner knows (tdx_guest, sev_guest)"
    );
    assert!(kernel.inblobs.borrow().is_empty());
}

#[test]
fn configfs_absent_names_the_path_it_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let e = request_report(&Kernel, dir.path(), &[0; 64]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "there is no configfs-tsm report interface at {} (not a confidential VM, a kernel \
             before 6.7, or configfs not mounted)",
            dir.path().join("report").display()
        )
    );
    // A plain directory is not configfs: no attribute appears after mkdir, and none is created.
    std::fs::create_dir(dir.path().join("report")).unwrap();
    let e = request_report(&Kernel, dir.path(), &[0; 64]).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");
    assert_eq!(
        std::fs::read_dir(dir.path().join("report"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn sample_quote_verifies_at_its_collateral_time_with_its_measurements() {
    let quote = fixture("tdx_quote");
    let collateral = fixture("tdx_quote_collateral.json");
    let verdict = tdx::verify(&quote, &collateral, unix(sample_time())).unwrap();
    assert_eq!(verdict.status, "UpToDate");
    assert!(verdict.advisories.is_empty());
    let parsed = tdx::parse(&quote).unwrap();
    assert_eq!(
        hex::encode(parsed.measurement("mrtd").unwrap()),
        SAMPLE_MRTD
    );
    assert!(!parsed.debug);
}

#[test]
fn sample_quote_is_refused_when_a_byte_or_the_time_changes() {
    let quote = fixture("tdx_quote");
    let collateral = fixture("tdx_quote_collateral.json");
    let now = unix(sample_time());
    let rejected = |r: Result<_, QuoteError>| matches!(r, Err(QuoteError::Rejected(_)));
    // A byte of the measurements (MRTD), of the user data, of the signature.
    for at in [184, QUOTE_REPORT_DATA, quote.len() - 100] {
        let mut q = quote.clone();
        q[at] ^= 1;
        assert!(rejected(tdx::verify(&q, &collateral, now)), "byte {at}");
    }
    // A byte of the signed TCB info inside the collateral.
    let text = String::from_utf8(collateral.clone()).unwrap();
    let edited = text.replacen(
        "\\\"tcbEvaluationDataNumber\\\":17",
        "\\\"tcbEvaluationDataNumber\\\":18",
        1,
    );
    let edited = if edited == text {
        text.replacen(
            "\"tcbEvaluationDataNumber\":17",
            "\"tcbEvaluationDataNumber\":18",
            1,
        )
    } else {
        edited
    };
    assert_ne!(edited, text, "the collateral holds the number edited");
    assert!(rejected(tdx::verify(&quote, edited.as_bytes(), now)));
    // Before the TCB info was issued, and after it expired.
    for t in ["2025-06-01T00:00:00Z", "2025-08-01T00:00:00Z"] {
        let at = unix(Timestamp::parse_user(t).unwrap());
        assert!(rejected(tdx::verify(&quote, &collateral, at)), "{t}");
    }
    assert!(matches!(
        tdx::verify(&quote, b"{}", now),
        Err(QuoteError::Collateral(_))
    ));
}

/// Evidence wrapping the unmodified sample quote, signed by our runner key.
fn evidence_of_sample(runner: &Runner) -> Vec<u8> {
    let kernel = FakeKernel::new("tdx_guest", |_| fixture("tdx_quote"));
    attest(&runner.subject(), b"n", Source::Tsm(&kernel, root())).unwrap()
}

#[test]
fn someone_elses_quote_is_refused_by_the_binding_check() {
    let runner = Runner::new();
    let bytes = evidence_of_sample(&runner);
    let collateral = fixture("tdx_quote_collateral.json");
    let check = Check {
        collateral: Some(&collateral),
        vcek: None,
        nonce: None,
        at: sample_time(),
    };
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert!(matches!(e, AttestationError::Binding), "{e}");
    assert!(e
        .to_string()
        .contains("the report was made for someone else's data"));
}

#[test]
fn a_quote_the_hardware_did_not_sign_is_refused_and_tdx_needs_collateral() {
    let runner = Runner::new();
    let kernel = tdx_kernel();
    let bytes = attest(&runner.subject(), b"n", Source::Tsm(&kernel, root())).unwrap();
    let collateral = fixture("tdx_quote_collateral.json");
    let mut check = Check {
        collateral: None,
        vcek: None,
        nonce: None,
        at: sample_time(),
    };
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert!(matches!(e, AttestationError::NoCollateral), "{e}");
    check.collateral = Some(&collateral);
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert!(
        matches!(e, AttestationError::Quote(QuoteError::Rejected(_))),
        "{e}"
    );
}

#[test]
fn no_hardware_evidence_verifies_as_no_hardware_and_checks_the_nonce() {
    let runner = Runner::new();
    let bytes = attest(&runner.subject(), &[1, 2], Source::NoHardware).unwrap();
    let mut check = Check {
        collateral: None,
        vcek: None,
        nonce: None,
        at: Timestamp::now(),
    };
    let v = verify_evidence(&bytes, &check).unwrap();
    assert_eq!(v.signature, HardwareSignature::NoHardware);
    assert!(!v.nonce_checked);
    assert_eq!(v.evidence.payload.binding.age_recipient, runner.recipient);
    check.nonce = Some(&[1, 2]);
    assert!(verify_evidence(&bytes, &check).unwrap().nonce_checked);
    check.nonce = Some(&[1, 3]);
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the evidence was made for nonce 0102, not 0103: it is not fresh for this request"
    );
}

#[test]
fn snp_reports_are_bound_but_their_signature_is_said_to_be_unchecked() {
    let runner = Runner::new();
    let make = |policy: u64| move |inblob: &[u8]| snp_report(inblob, 0x11, policy);
    let mut kernel = FakeKernel::new("sev_guest", make(0x30000));
    kernel.auxblob = Some(vec![0; 16]);
    let bytes = attest(&runner.subject(), b"n", Source::Tsm(&kernel, root())).unwrap();
    let check = Check {
        collateral: None,
        vcek: None,
        nonce: Some(b"n"),
        at: Timestamp::now(),
    };
    let v = verify_evidence(&bytes, &check).unwrap();
    assert!(matches!(v.signature, HardwareSignature::NotChecked(_)));
    assert_eq!(v.evidence.auxblob, vec![0; 16]);
    assert_eq!(
        v.report.unwrap().measurement("measurement").unwrap(),
        &[0x11; 48]
    );
    let debug = FakeKernel::new("sev_guest", make(0x30000 | 1 << 19));
    let bytes = attest(&runner.subject(), b"n", Source::Tsm(&debug, root())).unwrap();
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert!(matches!(e, AttestationError::Debug), "{e}");
}

#[test]
fn an_edited_document_is_refused() {
    let runner = Runner::new();
    let bytes = attest(&runner.subject(), b"n", Source::NoHardware).unwrap();
    let mut envelope = Envelope::parse(&bytes).unwrap();
    let other = SealKey::generate().recipient();
    envelope.payload = String::from_utf8(envelope.payload)
        .unwrap()
        .replace(&runner.recipient, &other)
        .into_bytes();
    let e = read_evidence(&envelope.to_bytes()).unwrap_err();
    assert!(matches!(e, EvidenceError::Signature), "{e}");
    // Claiming hardware with no report in it.
    let text = String::from_utf8(Envelope::parse(&bytes).unwrap().payload).unwrap();
    assert!(text.contains("\"hardware\":\"none\""));
    let mut claim = Envelope::new(
        EVIDENCE_PAYLOAD_TYPE,
        text.replace("\"hardware\":\"none\"", "\"hardware\":\"tdx\"")
            .into_bytes(),
    );
    claim.sign(&runner.key).unwrap();
    let e = read_evidence(&claim.to_bytes()).unwrap_err();
    assert!(
        e.to_string()
            .contains("field `provider` does not name tdx hardware"),
        "{e}"
    );
    let long = [0u8; 65];
    assert!(matches!(
        attest(&runner.subject(), &long, Source::NoHardware),
        Err(EvidenceError::Nonce(65))
    ));
}

/// The real SEV-SNP reports' MEASUREMENTs (Project Oak's test evidence; README there).
const MILAN_MEASUREMENT: &str = "195b01b74976a1faba13bd85eaf787958f0a46e6dddd45c5bdbf8673522777842b8057ae5d866b75416efb62012deaa3";

#[test]
fn real_snp_reports_verify_to_amds_roots_and_a_changed_byte_does_not() {
    let milan = fixture("snp_milan_report.bin");
    let milan_vcek = fixture("snp_milan_vcek.pem");
    let v = snp::verify(&milan, &milan_vcek).unwrap();
    assert_eq!(v.product, "Milan");
    assert_eq!(v.reported_tcb, "bootloader 4, tee 0, snp 24, microcode 219");
    let parsed = snp::parse(&milan).unwrap();
    assert_eq!(
        hex::encode(parsed.measurement("measurement").unwrap()),
        MILAN_MEASUREMENT
    );
    assert_eq!(
        hex::encode(parsed.measurement("policy").unwrap()),
        "0000000000030000"
    );
    assert!(!parsed.debug);

    let genoa = fixture("snp_genoa_report.bin");
    let genoa_vcek = fixture("snp_genoa_vcek.der");
    assert_eq!(snp::verify(&genoa, &genoa_vcek).unwrap().product, "Genoa");

    // REPORT_DATA, MEASUREMENT, the signature's r.
    for at in [0x50, 0x90, 0x2A0] {
        let mut r = milan.clone();
        r[at] ^= 1;
        assert_eq!(
            snp::verify(&r, &milan_vcek),
            Err(SnpSignatureError::Rejected),
            "byte {at:#x}"
        );
    }
    // Another chip's VCEK, and a certificate that is not a VCEK.
    assert_eq!(
        snp::verify(&milan, &genoa_vcek),
        Err(SnpSignatureError::Rejected)
    );
    assert!(matches!(
        snp::verify(&milan, b"not a certificate"),
        Err(SnpSignatureError::Vcek(_))
    ));
}

/// An extended report's certificate table holding `vcek` (GUID, offset, length; zero entry).
fn cert_table(vcek: &[u8]) -> Vec<u8> {
    let guid = [
        0x63, 0xda, 0x75, 0x8d, 0xe6, 0x64, 0x45, 0x64, 0xad, 0xc5, 0xf4, 0xb9, 0x3b, 0xe8, 0xac,
        0xcd,
    ];
    let ark = [
        0xc0, 0xb4, 0x06, 0xa4, 0xa8, 0x03, 0x49, 0x52, 0x97, 0x43, 0x3f, 0xb6, 0x01, 0x4c, 0xd0,
        0xae,
    ];
    let mut t = Vec::new();
    // An ARK entry first (empty), so the VCEK is found by its GUID, not its place.
    t.extend_from_slice(&ark);
    t.extend_from_slice(&72u32.to_le_bytes());
    t.extend_from_slice(&0u32.to_le_bytes());
    t.extend_from_slice(&guid);
    t.extend_from_slice(&72u32.to_le_bytes());
    t.extend_from_slice(&(vcek.len() as u32).to_le_bytes());
    t.extend_from_slice(&[0; 24]);
    t.extend_from_slice(vcek);
    t
}

#[test]
fn a_real_snp_report_is_checked_with_the_vcek_from_the_auxblob_and_its_binding_refused() {
    let runner = Runner::new();
    let mut kernel = FakeKernel::new("sev_guest", |_| fixture("snp_milan_report.bin"));
    let vcek = fixture("snp_milan_vcek.pem");
    assert_eq!(
        snp::vcek_from_auxblob(&cert_table(&vcek)),
        Some(vcek.clone())
    );
    assert_eq!(snp::vcek_from_auxblob(&cert_table(&vcek)[..60]), None);
    kernel.auxblob = Some(cert_table(&vcek));
    let bytes = attest(&runner.subject(), b"n", Source::Tsm(&kernel, root())).unwrap();
    let check = Check {
        collateral: None,
        vcek: None,
        nonce: None,
        at: Timestamp::now(),
    };
    // The signature verifies (it is AMD's), so what refuses it is the binding.
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert!(matches!(e, AttestationError::Binding), "{e}");

    // A report the hardware did not sign, with a real VCEK given by the verifier.
    let unsigned = FakeKernel::new("sev_guest", |inblob| snp_report(inblob, 0x11, 0x30000));
    let bytes = attest(&runner.subject(), b"n", Source::Tsm(&unsigned, root())).unwrap();
    let check = Check {
        vcek: Some(&vcek),
        ..check
    };
    let e = verify_evidence(&bytes, &check).unwrap_err();
    assert!(
        matches!(e, AttestationError::Snp(SnpSignatureError::Rejected)),
        "{e}"
    );
}
