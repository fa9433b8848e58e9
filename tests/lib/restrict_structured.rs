//! The engine generator of `engine_gen` driven by proptest: generated well-formed programs get
//! exactly the verifier's verdict the generator predicts, the same verdict when only public
//! names change, views without hidden text, and plans that compile and run when well-typed.
//! The fuzz target `engine_structured` drives the same generator with libFuzzer.

use proptest::prelude::*;

use crate::engine_gen::check_properties;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn generated_engines_keep_every_verifier_property(
        bytes in prop::collection::vec(any::<u8>(), 0..400)
    ) {
        check_properties(&bytes);
    }
}

#[test]
fn the_empty_choice_string_is_the_simplest_accepted_program() {
    let g = crate::engine_gen::generate(&[]);
    assert_eq!(g.expect, crate::engine_gen::Expect::Accepted);
    assert!(
        g.source.contains("fn main(model, x) {\n    return x;\n}"),
        "{}",
        g.source
    );
    check_properties(&[]);
}
