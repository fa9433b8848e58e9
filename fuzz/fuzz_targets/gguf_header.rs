//! The GGUF reader on arbitrary bytes: it must return a header or an error, never panic, and
//! every tensor range it accepts must lie inside the input, whole blocks, disjoint.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runner::model::gguf::Gguf;

fuzz_target!(|data: &[u8]| {
    if let Ok(gguf) = Gguf::parse(Path::new("fuzz.gguf"), data) {
        let mut ranges: Vec<_> = gguf.tensors.iter().map(|t| t.bytes.clone()).collect();
        ranges.sort_by_key(|r| r.start);
        for r in &ranges {
            assert!(r.start <= r.end && r.end <= data.len());
        }
        for pair in ranges.windows(2) {
            assert!(pair[0].end <= pair[1].start);
        }
        for t in &gguf.tensors {
            let elems: usize = t.dims.iter().product();
            assert_eq!(t.dtype.bytes_for(elems), Some(t.bytes.len()));
        }
    }
});
