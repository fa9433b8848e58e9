//! The engine language by structure: the fuzzer's bytes choose a well-formed program (see
//! tests/lib/engine_gen.rs, shared with the proptest suite), and the verifier, the owner's view,
//! the compiler and the interpreter must give exactly what the generator predicts: the verdict
//! (recursion, work past the bound, a denied built-in reached from a private region by any
//! route), the same verdict when only public names change, no hidden text in the view, and a
//! plan that compiles and runs when the program is well-typed.
#![no_main]

#[path = "../../tests/lib/engine_gen.rs"]
mod engine_gen;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| engine_gen::check_properties(data));
