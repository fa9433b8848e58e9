//! `JobSpec::parse` on arbitrary text: never panics.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runner::job::spec::JobSpec;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = JobSpec::parse(text, Path::new("jobs/job.toml"));
    }
});
