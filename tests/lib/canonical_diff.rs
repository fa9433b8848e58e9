//! Differential check of the RFC 8785 encoder (`primitives::canonical`) against an independent
//! implementation, the `serde_jcs` crate, on random JSON values: keys of every plane (sorted by
//! UTF-16 code units), escapes, and doubles of any bit pattern.

use proptest::prelude::*;
use runner::primitives::canonical::to_canonical;
use serde_json::{Map, Number, Value};

fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 _-]{0,8}",
        any::<String>(),
        // Controls, quotes, backslashes, and characters on both sides of the surrogate range,
        // where UTF-8 and UTF-16 orders differ.
        proptest::collection::vec(
            prop_oneof![
                Just('\u{0}'),
                Just('\u{1f}'),
                Just('"'),
                Just('\\'),
                Just('\u{7f}'),
                Just('\u{e000}'),
                Just('\u{ffff}'),
                Just('\u{10000}'),
                Just('\u{1f600}'),
                any::<char>(),
            ],
            0..6
        )
        .prop_map(|c| c.into_iter().collect()),
    ]
}

fn any_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(|i| Value::Number(i.into())),
        any::<u64>()
            .prop_map(f64::from_bits)
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
        prop_oneof![
            Just(0.1),
            Just(1e21),
            Just(1e-7),
            Just(-0.0),
            Just(5e-324),
            Just(1e300)
        ]
        .prop_map(|f: f64| Value::Number(Number::from_f64(f).unwrap())),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number(),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((any_string(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_encoder_agrees_with_an_independent_rfc8785_implementation(v in any_json()) {
        let ours = to_canonical(&v).expect("every generated value is encodable");
        let theirs = serde_jcs::to_vec(&v).expect("serde_jcs encodes it");
        prop_assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }
}
