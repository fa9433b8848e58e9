//! The GGUF reader on arbitrary bytes: it must return a header or an error, never panic, and
//! every tensor range it accepts must lie inside the input, whole blocks, disjoint; every item
//! of every metadata array it accepts must read back.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runner::model::gguf::{Gguf, MetaArray, MetaValue};

fn read_back(a: &MetaArray) {
    assert_eq!(a.iter().count(), a.len());
    for v in a.iter() {
        if let MetaValue::Array(inner) = v {
            read_back(&inner);
        }
    }
}

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
        for v in gguf.metadata.values() {
            if let MetaValue::Array(a) = v {
                read_back(a);
            }
        }
        for t in &gguf.tensors {
            let elems: usize = t.dims.iter().product();
            assert_eq!(t.dtype.bytes_for(elems), Some(t.bytes.len()));
        }
    }
});
