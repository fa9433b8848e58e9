//! Fuzz the engine-language front end: arbitrary bytes through `source_from_bytes` and `check`
//! (lexer, parser, regions, resolver, policy check, view, report) must never panic, and every
//! refusal must print.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::restrict::policy::Policy;
use runner::restrict::{check, source_from_bytes};

fuzz_target!(|data: &[u8]| {
    let policy = Policy::from_json(
        br#"{"schema":"runner-policy/1","name":"fuzz","allow_functions":["add","linear","rms_norm"],
            "limits":{"max_batch":1,"max_new_tokens":1,"max_prompt_tokens":1,"max_inputs":1},
            "outputs":["tokens"]}"#,
        "fuzz",
    )
    .expect("the fuzz policy is valid");
    let Ok(src) = source_from_bytes(data) else {
        return;
    };
    match check(src, "fuzz.eng", &policy) {
        Ok(checked) => {
            assert!(checked.view().is_ascii());
            let _ = checked.report().to_json();
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
