//! OpenAI batch lines (`parse_inputs_as(.., Openai)`) on arbitrary bytes: never panics; what it
//! accepts is non-empty with unique `custom_id`s, every line has its endpoint, and every setting
//! is in the range the format allows (so nothing out of range reaches generation).
#![no_main]

use std::collections::HashSet;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runner::job::inputs::{parse_inputs_as, InputsFormat};

fuzz_target!(|data: &[u8]| {
    let Ok(inputs) = parse_inputs_as(data, Path::new("batch.jsonl"), InputsFormat::Openai) else {
        return;
    };
    assert!(!inputs.is_empty());
    let ids: HashSet<&str> = inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.len(), inputs.len());
    for i in &inputs {
        assert!(i.endpoint.is_some());
        let o = &i.options;
        assert!(o.max_tokens.is_none_or(|m| m >= 1));
        assert!(o.temperature.is_none_or(|t| (0.0..=2.0).contains(&t)));
        assert!(o.top_p.is_none_or(|p| p > 0.0 && p <= 1.0));
        assert!(o.stop.len() <= 4 && o.stop.iter().all(|s| !s.is_empty()));
    }
});
