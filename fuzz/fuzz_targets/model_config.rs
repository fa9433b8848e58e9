//! `ModelConfig::from_value` after `parse_strict`, on arbitrary bytes: never panics.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runner::model::config::ModelConfig;
use runner::primitives::canonical::parse_strict;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = parse_strict(data) {
        let _ = ModelConfig::from_value(Path::new("model/config.json"), &value);
    }
});
