//! Resume journals as they lie on disk (`job::journal::read_journal`): arbitrary bytes never
//! panic, and what resumes keeps no bytes past the journal's end. The
//! structured cases (journals built from records sealed to the runner, then cut as a kill
//! would) are `journal_roundtrip`, which pays for a seal per record.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use runner::job::journal::{read_journal, Binding};
use runner::primitives::digest::Digest;
use runner::sealing::SealKey;

fn key() -> &'static SealKey {
    static KEY: OnceLock<SealKey> = OnceLock::new();
    KEY.get_or_init(SealKey::generate)
}

fuzz_target!(|data: &[u8]| {
    let binding = Binding::new(
        Digest([1; 32]),
        Digest([2; 32]),
        Digest([3; 32]),
        None,
        Digest([4; 32]),
    );
    if let Some(resumed) = read_journal(data, &binding, key()) {
        assert!(resumed.keep <= data.len(), "keeps bytes past the journal's end");
    }
});
