//! The merge's check of a set of shard receipts (`trust::merge::check_receipt_set`): receipts
//! signed from fuzzer-chosen shard facts (index, count, range, total, job, signer), in a
//! fuzzer-chosen order. Whatever it accepts is one job cut into shards 0..N-1, each once, whose
//! ranges tile every input exactly once; and a complete, untampered set is always accepted.
#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use runner::primitives::digest::Digest;
use runner::primitives::keys::{PublicKey, SecretKey};
use runner::primitives::time::Timestamp;
use runner::restrict::policy::Policy;
use runner::trust::certificate::{build_payload, Certificate, EngineFacts, Terms};
use runner::trust::generation::Generation;
use runner::trust::merge::check_receipt_set;
use runner::trust::receipt::{
    sign_receipt, Commitment, FinishReasons, RunCounts, RunFacts, RunnerIdentity, Sealed,
    INPUTS_COMMITMENT_CONTEXT,
};
use runner::trust::shard::{shard_range, ShardFacts};

struct Fixture {
    cert: Certificate,
    trusted: SecretKey,
    foreign: SecretKey,
    keys: Vec<PublicKey>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let owner = SecretKey::generate().unwrap();
        let ts = |s| Timestamp::parse_canonical(s).unwrap();
        let policy =
            Policy::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/gemma3.json"))
                .unwrap();
        let payload = build_payload(
            EngineFacts {
                name: "gemma3".into(),
                source_digest: Digest::of(b"engine"),
                restrict: None,
            },
            Terms {
                policy,
                model_digest: Digest::of(b"model"),
                issued_at: ts("2026-11-01T00:00:00Z"),
                valid_from: None,
                expires_at: None,
                supersedes: None,
                lineage: "fuzz".into(),
                version: 1,
                recipients: vec![runner::sealing::SealKey::generate().recipient()],
                note: None,
                attestation: None,
            },
        )
        .unwrap();
        let trusted = SecretKey::generate().unwrap();
        let foreign = SecretKey::generate().unwrap();
        Fixture {
            cert: Certificate::sign_new(payload, &owner).unwrap(),
            keys: vec![trusted.public_key()],
            trusted,
            foreign,
        }
    })
}

fn facts(cert: &Certificate, shard: ShardFacts, job: u8) -> RunFacts {
    let p = cert.payload();
    let ts = |s| Timestamp::parse_canonical(s).unwrap();
    let inputs = shard.end.saturating_sub(shard.start);
    RunFacts {
        certificate_digest: cert.digest(),
        engine_digest: p.engine.source_digest,
        policy_id: p.policy_id,
        model_digest: p.model_digest,
        job_digest: Digest([job; 32]),
        inputs: Commitment::with_salt(INPUTS_COMMITMENT_CONTEXT, Digest([5; 32]), b"inputs"),
        inputs_ciphertext: None,
        outputs_commitment: None,
        sealed: Sealed {
            inputs: false,
            outputs: false,
        },
        generation: Generation::default(),
        runner: RunnerIdentity {
            version: "0.1.0".into(),
            executable_digest: Digest::of(b"runner"),
        },
        started_at: ts("2026-11-02T10:00:00Z"),
        finished_at: ts("2026-11-02T10:00:01Z"),
        counts: RunCounts {
            inputs,
            generated_tokens: 0,
            finish_reasons: FinishReasons {
                stop: 0,
                length: inputs,
            },
        },
        attestation: None,
        shard: Some(shard),
        resumed_at: None,
        sampling: None,
    }
}

/// What a receipt is signed from: its shard's facts, its job byte, and whether the trusted key signs.
type Signed = (u32, u32, u64, u64, u64, u8, bool);

/// Ed25519 signing is deterministic, so a receipt signed once is the same bytes every time; the
/// memo spends the harness's time on the product's check instead of on signing again (about a
/// sixth of an execution). Bounded: it starts over once full.
fn signed(f: &Fixture, shard: ShardFacts, job: u8, trusted: bool) -> Option<Vec<u8>> {
    thread_local! {
        static MEMO: RefCell<HashMap<Signed, Option<Vec<u8>>>> = RefCell::new(HashMap::new());
    }
    let key = (
        shard.index,
        shard.count,
        shard.start,
        shard.end,
        shard.inputs_total,
        job,
        trusted,
    );
    MEMO.with_borrow_mut(|memo| {
        if let Some(bytes) = memo.get(&key) {
            return bytes.clone();
        }
        if memo.len() >= 50_000 {
            memo.clear();
        }
        let signer = if trusted { &f.trusted } else { &f.foreign };
        let bytes = sign_receipt(&facts(&f.cert, shard, job), &[("outputs.jsonl", b"")], signer).ok();
        memo.insert(key, bytes.clone());
        bytes
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let [n, total, rest @ ..] = data else {
        return;
    };
    let count = u32::from(n % 6) + 1;
    let total = u64::from(*total);
    // Start from the complete set, then let each following 4 bytes edit one receipt: its index,
    // count, range end, job, signer, or drop / duplicate it.
    let mut set: Vec<(ShardFacts, u8, bool)> = (0..count)
        .map(|i| (ShardFacts::new(i, count, total), 1, true))
        .collect();
    let mut edited = false;
    for e in rest.chunks_exact(4).take(6) {
        if set.is_empty() {
            break;
        }
        let at = usize::from(e[0]) % set.len();
        edited = true;
        match e[1] % 7 {
            0 => set[at].0.index = u32::from(e[2] % 8),
            1 => set[at].0.count = u32::from(e[2] % 8) + 1,
            2 => set[at].0.end = u64::from(e[2]),
            3 => set[at].1 = e[2],
            4 => set[at].2 = false,
            5 => {
                set.remove(at);
            }
            _ => {
                let copy = set[at];
                set.push(copy);
            }
        }
        if e[3] & 1 == 1 && at < set.len() {
            set.swap(0, at);
        }
    }
    // Facts that are not a shard's own (an edited range) cannot even be signed: the runner
    // would not write them, so they are not a case here.
    let Some(receipts) = set
        .iter()
        .enumerate()
        .map(|(i, (shard, job, trusted))| {
            let bytes = signed(f, *shard, *job, *trusted)?;
            Some((format!("shard receipt {i}"), bytes))
        })
        .collect::<Option<Vec<(String, Vec<u8>)>>>()
    else {
        assert!(edited, "the complete set could not be signed");
        return;
    };
    match check_receipt_set(&f.cert, &f.keys, receipts) {
        Ok(shards) => {
            let n = shards[0].count;
            assert_eq!(shards.len(), n as usize);
            let mut next = 0;
            for (i, s) in shards.iter().enumerate() {
                assert_eq!(s.index as usize, i);
                assert_eq!(s.count, n);
                assert_eq!(s.inputs_total, shards[0].inputs_total);
                assert_eq!(s.start..s.end, shard_range(s.inputs_total, s.index, n));
                assert_eq!(s.start, next);
                next = s.end;
            }
            assert_eq!(next, shards[0].inputs_total);
        }
        Err(e) => assert!(edited, "the complete set was refused: {e}"),
    }
});
