//! Paths into this repository, and the cached tokenizer some tests need. Both test binaries
//! include this file (`tests/lib` includes nothing else of the harness).

use std::path::{Path, PathBuf};

use runner::model::tokenizer::cached_tokenizer_path;

/// The repository root: engines, policies and fixtures are found from here, whatever the
/// working directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/models/<name>`: one of the HF reference fixtures.
pub fn fixture_model(name: &str) -> PathBuf {
    root().join("tests/fixtures/models").join(name)
}

/// The cached official Gemma 3 tokenizer; its absence fails the test (the suite expects it).
pub fn cached_tokenizer() -> PathBuf {
    let cached = cached_tokenizer_path().expect("HOME or RUNNER_CACHE must be set");
    assert!(
        cached.exists(),
        "the Gemma 3 tokenizer is not cached at {}: run scripts/fetch_tokenizer.sh \
         (scripts/test.sh does this before the suite)",
        cached.display()
    );
    cached
}

/// Every `.rs` file under `dir`, recursively, appended to `out`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
