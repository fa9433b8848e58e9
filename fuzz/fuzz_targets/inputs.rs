//! `parse_inputs` (inputs JSONL) on arbitrary bytes: never panics; what it accepts is non-empty
//! with unique ids.
#![no_main]

use std::collections::HashSet;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runner::job::inputs::parse_inputs;

fuzz_target!(|data: &[u8]| {
    if let Ok(inputs) = parse_inputs(data, Path::new("inputs.jsonl")) {
        assert!(!inputs.is_empty());
        let ids: HashSet<&str> = inputs.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids.len(), inputs.len());
    }
});
