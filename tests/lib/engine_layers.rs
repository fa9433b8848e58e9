//! An engine must run every layer of the checkpoint: one written out for a fixed number of
//! layers is refused on a deeper checkpoint instead of quietly skipping the extra layers.

use std::path::Path;
use std::sync::Arc;

use runner::error::{Diagnose, Exit};
use runner::job::generate::{GenerateError, Generator, Settings};
use runner::model::synthetic::SyntheticSpec;
use runner::model::weights::Checkpoint;
use runner::restrict::check;
use runner::restrict::policy::Policy;

use crate::common::repo::root;

fn generator(engine: &str, dir: &Path) -> Generator {
    let path = root().join("engines").join(engine);
    let source = std::fs::read_to_string(&path).unwrap();
    let policy = Policy::load(&root().join("policies/gemma3.json")).unwrap();
    let checked = check(&source, engine, &policy).unwrap_or_else(|e| panic!("{e}"));
    let ck = Checkpoint::load(dir).unwrap_or_else(|e| panic!("{e}"));
    Generator::new(checked, "main", Arc::new(ck)).unwrap_or_else(|e| panic!("{e}"))
}

fn checkpoint(layers: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = SyntheticSpec {
        num_layers: layers,
        ..SyntheticSpec::tiny()
    };
    spec.write(dir.path(), 3).unwrap();
    dir
}

fn run(engine: &str, dir: &Path) -> Result<usize, Box<GenerateError>> {
    let settings = Settings {
        max_new_tokens: 3,
        stop_ids: Vec::new(),
    };
    let out = generator(engine, dir)
        .generate(&[vec![2, 17, 40], vec![2, 9]], &settings, |_| {})
        .map_err(Box::new)?;
    Ok(out.len())
}

#[test]
fn the_six_layer_engine_is_refused_on_an_eight_layer_checkpoint() {
    let dir = checkpoint(8);
    let err = run("gemma3_unrolled.eng", dir.path()).expect_err("skips layers 6 and 7");
    match err.as_ref() {
        GenerateError::Layers { ran, total, wrong } => {
            assert_eq!((*ran, *total, wrong.as_str()), (6, 8, "6, 7"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.exit(), Exit::BadInput);
    let message = err.to_string();
    assert!(message.contains("engines/gemma3.eng"), "{message}");
    // The scan engine runs all eight.
    assert_eq!(run("gemma3.eng", dir.path()).expect("every layer runs"), 2);
}

#[test]
fn the_six_layer_engine_runs_a_six_layer_checkpoint() {
    let dir = checkpoint(6);
    assert_eq!(
        run("gemma3_unrolled.eng", dir.path()).expect("all six run"),
        2
    );
}
