//! Resume journals built here (`job::journal::read_journal`): a journal built from
//! fuzzer-chosen records (each sealed to the runner, as a run writes them), then cut
//! at a fuzzer-chosen offset as a kill would, resumes exactly the batches that were whole and
//! parse, in order, up to the first that is not, and keeps the bytes up to where they end.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use runner::job::generate::Finish;
use runner::job::journal::{read_journal, Binding, Entry};
use runner::primitives::digest::Digest;
use runner::sealing::{seal, SealKey};

fn key() -> &'static SealKey {
    static KEY: OnceLock<SealKey> = OnceLock::new();
    KEY.get_or_init(SealKey::generate)
}

fn record(plain: &[u8]) -> Vec<u8> {
    let sealed = seal(plain, &[key().recipient()]).unwrap();
    let mut out = (sealed.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&sealed);
    out
}

fuzz_target!(|data: &[u8]| {
    let binding = Binding::new(
        Digest([1; 32]),
        Digest([2; 32]),
        Digest([3; 32]),
        None,
        Digest([4; 32]),
    );
    let [mode, c0, c1, rest @ ..] = data else {
        return;
    };
    let header = if mode & 1 == 0 {
        serde_json::to_vec(&serde_json::json!({
            "binding": binding,
            "drawn_seed": "0700000000000000",
        }))
        .unwrap()
    } else {
        // Another run's header.
        let mut other = binding.clone();
        other.job = Digest([9; 32]);
        serde_json::to_vec(&serde_json::json!({"binding": other, "drawn_seed": "0700000000000000"}))
            .unwrap()
    };
    let mut file = record(&header);
    let header_end = file.len();
    let mut batches: Vec<(usize, Option<Vec<Entry>>)> = Vec::new();
    for piece in rest.split(|b| *b == 0xff).take(4) {
        let plain = if piece.first().is_some_and(|b| b & 1 == 0) {
            let batch: Vec<Entry> = piece
                .iter()
                .map(|&b| {
                    let finish = if b & 2 == 0 {
                        Finish::Stop
                    } else {
                        Finish::Length
                    };
                    Entry::new(serde_json::json!({"id": b}), u64::from(b), finish)
                })
                .collect();
            serde_json::to_vec(&batch).unwrap()
        } else {
            piece.to_vec()
        };
        file.extend_from_slice(&record(&plain));
        batches.push((
            file.len(),
            serde_json::from_slice::<Vec<Entry>>(&plain).ok(),
        ));
    }
    let cut = usize::from(u16::from_le_bytes([*c0, *c1]));
    if cut < file.len() {
        file.truncate(cut);
    }
    let got = read_journal(&file, &binding, key());
    if mode & 1 == 1 || file.len() < header_end {
        assert!(got.is_none(), "another run's or a cut header resumed");
        return;
    }
    let got = got.expect("this run's whole header is resumed");
    assert_eq!(got.drawn_seed, 7);
    let mut want = Vec::new();
    let mut keep = header_end;
    for (end, batch) in batches {
        match batch {
            Some(b) if end <= file.len() => {
                want.extend(b);
                keep = end;
            }
            _ => break,
        }
    }
    assert_eq!(got.entries, want);
    assert_eq!(got.keep, keep);
});
