//! `Policy::from_json` on arbitrary bytes: never panics; an accepted policy's canonical bytes
//! parse to the same policy, with the same policy_id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::restrict::policy::Policy;

fuzz_target!(|data: &[u8]| {
    let Ok(policy) = Policy::from_json(data, "fuzz input") else {
        return;
    };
    let again = Policy::from_json(&policy.canonical_bytes(), "re-encoded policy")
        .expect("canonical policy parses");
    assert_eq!(again, policy);
    assert_eq!(again.policy_id(), policy.policy_id());
});
