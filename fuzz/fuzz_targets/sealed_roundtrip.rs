//! Age files sealed here (`sealing::seal_with`, then `sealing::open`): files from fuzzer-chosen
//! plaintexts, recipient sets and armor, then cut short or altered at a fuzzer-chosen byte, are
//! decided exactly: an
//! untouched file for us opens to its plaintext (or is refused as too large), one for others
//! only is refused naming how many recipients it has, and an altered one never opens to
//! anything but its own plaintext. Every refusal is one short printable line that names no
//! secret.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use runner::sealing::open::OpenError;
use runner::sealing::seal::seal_with;
use runner::sealing::{open, SealKey};

/// The largest plaintext opened; bigger ones must be refused as too large.
const CAP: u64 = 48;

/// Ours first, then three others.
fn keys() -> &'static [SealKey; 4] {
    static KEYS: OnceLock<[SealKey; 4]> = OnceLock::new();
    KEYS.get_or_init(|| std::array::from_fn(|_| SealKey::generate()))
}

fn check_refusal(e: &OpenError) {
    let message = e.to_string();
    assert!(message.len() < 400, "{message}");
    assert!(
        message.chars().all(|c| c.is_ascii_graphic() || c == ' '),
        "{message:?}"
    );
    assert!(!message.to_ascii_uppercase().contains("AGE-SECRET-KEY"));
}

fuzz_target!(|data: &[u8]| {
    let ours = &keys()[0];
    let &[flags, others, at0, at1, xor, ref plain @ ..] = data else {
        return;
    };
    let others = usize::from(others % 4);
    let for_us = flags & 1 != 0;
    let mut recipients: Vec<String> = keys()[1..=others].iter().map(|k| k.recipient()).collect();
    if for_us {
        let at = usize::from(flags >> 4) % (recipients.len() + 1);
        recipients.insert(at, ours.recipient());
    }
    let Ok(mut file) = seal_with(plain, &recipients, flags & 2 != 0) else {
        assert!(recipients.is_empty(), "sealing to {} recipients failed", recipients.len());
        return;
    };
    let at = usize::from(u16::from_le_bytes([at0, at1])) % file.len();
    let altered = match flags & 12 {
        4 => {
            file.truncate(at);
            true
        }
        8 if xor != 0 => {
            file[at] ^= xor;
            true
        }
        _ => false,
    };
    let result = open(&file, ours, CAP);
    if let Err(e) = &result {
        check_refusal(e);
    }
    match (altered, result) {
        (_, Ok(opened)) => {
            assert!(for_us, "a file for other recipients opened");
            assert_eq!(&opened[..], plain, "an altered file opened to other bytes");
        }
        (false, Err(OpenError::TooLarge(cap))) => {
            assert!(for_us && plain.len() as u64 > CAP && cap == CAP)
        }
        (false, Err(OpenError::NotForUs { stanzas, ours: named })) => {
            assert!(!for_us);
            assert_eq!(named, ours.recipient());
            let s = if others == 1 { "" } else { "s" };
            assert_eq!(stanzas, format!("{others} X25519 recipient{s}"));
        }
        (false, Err(e)) => panic!("an untouched file was refused: {e}"),
        (true, Err(_)) => {}
    }
});
