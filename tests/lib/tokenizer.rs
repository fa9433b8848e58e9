//! The official Gemma 3 tokenizer, fetched by `scripts/fetch_tokenizer.sh` (run by the test
//! script before `cargo test`). Missing tokenizer = failing test, with the fix in the message.

use runner::model::tokenizer::{Template, Tokenizer, Turn};

use crate::common::repo::{cached_tokenizer, root};

fn tokenizer() -> Tokenizer {
    Tokenizer::load(&cached_tokenizer()).unwrap_or_else(|e| {
        panic!("{e}\nrun scripts/fetch_tokenizer.sh first (scripts/test.sh does it)")
    })
}

#[test]
fn encodes_the_reference_sentence_like_hf() {
    let t = tokenizer();
    // 262144 text tokens plus <image_soft_token> (262144), which text models never emit.
    assert_eq!(t.vocab_size(), 262145);
    let ids = t
        .encode_prompt("Hello, my dog is cute", Template::Raw)
        .unwrap();
    assert_eq!(ids, [2, 9259, 236764, 1041, 4799, 563, 12864]);
    assert_eq!(t.decode(&ids).unwrap(), "Hello, my dog is cute");
}

#[test]
fn chat_template_wraps_the_prompt_in_turn_markers() {
    let t = tokenizer();
    let ids = t
        .encode_prompt("Hello, my dog is cute", Template::Chat)
        .unwrap();
    assert_eq!(ids[..2], [2, 105]);
    assert_eq!(ids.iter().filter(|&&i| i == 105).count(), 2);
    assert_eq!(ids.iter().filter(|&&i| i == 106).count(), 1);
    let user = t.encode_plain("user\nHello, my dog is cute").unwrap();
    assert_eq!(ids[2..2 + user.len()], user[..]);
    let tail = t.encode_plain("model\n").unwrap();
    assert_eq!(ids[ids.len() - tail.len()..], tail[..]);
    let with_turns = t
        .encode_chat(&[Turn {
            role: "user".into(),
            content: "  Hello, my dog is cute\n".into(),
        }])
        .unwrap();
    assert_eq!(
        with_turns, ids,
        "contents are trimmed, as HF's template does"
    );
}

#[test]
fn decoding_round_trips_unicode_and_whitespace() {
    let t = tokenizer();
    for text in [
        "Grüße aus Köln 🐕",
        "  two  spaces\tand\ttabs\nnewline",
        "数学は楽しい",
        "x = 1e-6;",
    ] {
        let ids = t.encode_plain(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text);
    }
}

/// Every case HF's tokenizer recorded (scripts/reference/make_tokenizer_cases.py): plain ids,
/// ids with bos, chat-template ids, and decoding.
#[test]
fn matches_every_recorded_hf_case() {
    let t = tokenizer();
    let path = root().join("tests/fixtures/tokenizer_cases.json");
    let cases: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let list = cases["cases"].as_array().unwrap();
    assert!(list.len() >= 10);
    for case in list {
        let text = case["text"].as_str().unwrap();
        assert_eq!(t.encode_plain(text).unwrap(), ids(&case["ids"]), "{text:?}");
        assert_eq!(
            t.encode_prompt(text, Template::Raw).unwrap(),
            ids(&case["ids_with_bos"]),
            "{text:?}"
        );
        assert_eq!(
            t.encode_prompt(text, Template::Chat).unwrap(),
            ids(&case["chat_ids"]),
            "{text:?}"
        );
        let decoded = case["decoded_with_bos_skip_special"].as_str().unwrap();
        assert_eq!(
            t.decode(&ids(&case["ids_with_bos"])).unwrap(),
            decoded,
            "{text:?}"
        );
    }
}
