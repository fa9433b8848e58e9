//! The verifier never panics: random bytes, random token soup, and valid engines mutated by
//! byte flips, deletions and splices all end in `Ok` or a located error.

use proptest::prelude::*;
use runner::restrict::policy::Policy;
use runner::restrict::{check, source_from_bytes, RestrictError};

const SEEDS: &[&str] = &[
    include_str!("../engines/mlp.eng"),
    include_str!("../engines/leaky.eng"),
    "fn main(model, tokens, pos) {
    let x = embed(tokens, model.embed, model.embed_scale);
    // @private obfuscate
    let h = scan(block, x, model.layers, pos);
    // @private hide
    let n = rms_norm(h, model.norm, 0.000001, 1.0);
    // @end hide
    // @end obfuscate
    return argmax(linear(n, model.embed));
}
fn block(x, layer, pos) {
    let h = rms_norm(x, layer.input_norm, layer.eps, 1.0);
    let y = add(x, scale(linear(h, layer.o_proj), -(1.5 * 2) / 3 + 4e-2));
    return y;
}
",
];

fn policy() -> Policy {
    Policy::from_json(
        br#"{"schema":"runner-policy/1","name":"p","allow_functions":["add","linear","rms_norm","scale","embed"],
            "limits":{"max_batch":1,"max_new_tokens":1,"max_prompt_tokens":1,"max_inputs":1},"outputs":["tokens"]}"#,
        "p",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Run the whole front end; every error must carry a position inside the source.
fn run(bytes: &[u8], policy: &Policy) {
    let lines = bytes.split(|&b| b == b'\n').count() as u32;
    let src = match source_from_bytes(bytes) {
        Ok(s) => s,
        Err(e) => {
            assert!(e.pos().line >= 1 && e.pos().line <= lines);
            return;
        }
    };
    match check(src, "fuzz.eng", policy) {
        Ok(c) => {
            let _ = c.report().to_json();
            assert!(c.view().is_ascii());
        }
        Err(RestrictError::Syntax { error, .. }) => {
            assert!(
                error.pos().line >= 1 && error.pos().line <= lines.max(1),
                "{error}"
            );
            let _ = error.to_string();
        }
        Err(RestrictError::Program { errors, .. }) => assert!(!errors.is_empty()),
        Err(RestrictError::Violations { violations, .. }) => assert!(!violations.is_empty()),
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Splice(usize, usize, usize),
    Insert(usize, &'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), 0usize..40).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 0usize..60, any::<usize>())
            .prop_map(|(a, n, b)| Mutation::Splice(a, n, b)),
        (
            any::<usize>(),
            prop::sample::select(vec![
                "// @private hide\n",
                "// @end hide\n",
                "// @private obfuscate\n",
                "// @end obfuscate\n",
                "(",
                ")",
                "{",
                "}",
                "scan(",
                "softmax(",
                ";",
                ",",
                "\n",
                "let",
                "fn",
                "return",
                "-",
                ".",
            ])
        )
            .prop_map(|(i, s)| Mutation::Insert(i, s)),
    ]
}

fn apply(src: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut v = src.to_vec();
    for m in muts {
        let len = v.len().max(1);
        match *m {
            Mutation::Flip(i, b) => {
                if let Some(x) = v.get_mut(i % len) {
                    *x = b;
                }
            }
            Mutation::Delete(i, n) => {
                let a = (i % len).min(v.len());
                let b = (a + n).min(v.len());
                v.drain(a..b);
            }
            Mutation::Splice(a, n, b) => {
                let a = (a % len).min(v.len());
                let e = (a + n).min(v.len());
                let piece: Vec<u8> = v.get(a..e).map(<[u8]>::to_vec).unwrap_or_default();
                let at = (b % len).min(v.len());
                v.splice(at..at, piece);
            }
            Mutation::Insert(i, s) => {
                let at = (i % len).min(v.len());
                v.splice(at..at, s.bytes());
            }
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        run(&bytes, &policy());
    }

    #[test]
    fn token_soup_never_panics(parts in prop::collection::vec(prop::sample::select(vec![
        "fn", "let", "return", "scan", "linear", "softmax", "x", "y", "main", "(", ")", "{", "}",
        ",", ";", "=", ".", "+", "-", "*", "/", "1", "2.5", "1e3", " ", "\n", "// c\n",
        "// @private hide\n", "// @end hide\n", "// @private obfuscate\n", "// @end obfuscate\n",
    ]), 0..120)) {
        let src: String = parts.concat();
        run(src.as_bytes(), &policy());
    }

    #[test]
    fn mutated_engines_never_panic(
        seed in 0..SEEDS.len(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        let src = SEEDS.get(seed).copied().unwrap_or_default();
        run(&apply(src.as_bytes(), &muts), &policy());
    }
}

#[test]
fn seeds_are_valid_engines() {
    // The mutation tests start from programs the verifier accepts (or refuses by policy).
    for s in SEEDS {
        match check(s, "seed", &policy()) {
            Ok(_) | Err(RestrictError::Violations { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
}
