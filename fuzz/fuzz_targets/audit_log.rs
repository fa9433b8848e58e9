//! The audit log reader on arbitrary bytes: `verify_chain` never panics, and a line
//! `parse_line` accepts is exactly its entry's canonical encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::job::audit::{parse_line, verify_chain};
use runner::primitives::canonical::to_canonical_from;

fuzz_target!(|data: &[u8]| {
    let _ = verify_chain(data);
    if let Ok(entry) = parse_line(data) {
        assert_eq!(to_canonical_from(&entry).expect("entry encodes"), data);
    }
});
