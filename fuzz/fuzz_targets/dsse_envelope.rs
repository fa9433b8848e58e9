//! `Envelope::parse` on arbitrary bytes: never panics, accepts only the canonical spelling, and
//! round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::primitives::dsse::Envelope;

fuzz_target!(|data: &[u8]| {
    let Ok(env) = Envelope::parse(data) else {
        return;
    };
    let encoded = env.to_bytes();
    assert!(encoded == data || encoded.strip_suffix(b"\n") == Some(data));
    assert_eq!(Envelope::parse(&encoded).as_ref(), Ok(&env));
});
