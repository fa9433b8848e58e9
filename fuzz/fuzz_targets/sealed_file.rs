//! Age files as they arrive (`sealing::open`, which every sealed input, `decrypt` and `receipt
//! --check-inputs` go through): the crate parses, the runner decides. Arbitrary bytes never
//! panic, never open to more than the cap, and every refusal is one short printable line that
//! names no secret. The structured cases (files sealed here, then cut or altered) are
//! `sealed_roundtrip`, which pays for a seal in every case.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use runner::sealing::open::OpenError;
use runner::sealing::{is_age, open, SealKey};

/// The largest plaintext opened; bigger ones must be refused as too large.
const CAP: u64 = 48;

fn key() -> &'static SealKey {
    static KEY: OnceLock<SealKey> = OnceLock::new();
    KEY.get_or_init(SealKey::generate)
}

fn check_refusal(e: &OpenError) {
    let message = e.to_string();
    assert!(message.len() < 400, "{message}");
    assert!(
        message.chars().all(|c| c.is_ascii_graphic() || c == ' '),
        "{message:?}"
    );
    assert!(!message.to_ascii_uppercase().contains("AGE-SECRET-KEY"));
}

fuzz_target!(|data: &[u8]| {
    match open(data, key(), CAP) {
        Ok(plain) => {
            assert!(is_age(data));
            assert!(plain.len() as u64 <= CAP);
        }
        Err(e) => check_refusal(&e),
    }
});
