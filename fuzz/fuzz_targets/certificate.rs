//! `Certificate::parse` on arbitrary bytes: never panics, and whatever it accepts is the one
//! canonical spelling (re-encoding gives the input back, with at most a newline added) and
//! parses again to the same certificate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::trust::certificate::Certificate;

fuzz_target!(|data: &[u8]| {
    let Ok(cert) = Certificate::parse(data) else {
        return;
    };
    let encoded = cert.to_bytes();
    assert!(encoded == data || encoded.strip_suffix(b"\n") == Some(data));
    let again = Certificate::parse(&encoded).expect("re-encoded certificate parses");
    assert_eq!(again.payload(), cert.payload());
    assert_eq!(again.envelope(), cert.envelope());
    assert_eq!(again.digest(), cert.digest());
});
