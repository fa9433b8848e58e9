//! `job.toml` and inputs JSONL: accepted forms and refusals naming the key or line.

use std::path::Path;

use runner::job::inputs::{parse_inputs, InputsError, Prompt};
use runner::job::spec::{JobError, JobSpec};
use runner::model::tokenizer::Template;

const JOB: &str = r#"
engine = "engines/gemma3.eng"
model = "models/tiny"
inputs = "inputs.jsonl"
output_dir = "out"

[generation]
batch_size = 4
max_new_tokens = 16
template = "raw"
"#;

fn load(text: &str) -> Result<JobSpec, JobError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, text).unwrap();
    JobSpec::load(&path)
}

#[test]
fn resolves_paths_relative_to_the_job_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, JOB).unwrap();
    let job = JobSpec::load(&path).unwrap();
    assert_eq!(job.engine, dir.path().join("engines/gemma3.eng"));
    assert_eq!(job.output_dir, dir.path().join("out"));
    assert_eq!(job.generation.batch_size, 4);
    assert_eq!(job.generation.template, Template::Raw);
}

#[test]
fn rejects_unknown_keys_naming_them() {
    let err = load(&format!("trust = \"mine.toml\"\n{JOB}")).unwrap_err();
    assert!(matches!(err, JobError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains("trust"), "{err}");
    let err = load(&JOB.replace("template = \"raw\"", "beam_width = 4")).unwrap_err();
    assert!(err.to_string().contains("beam_width"), "{err}");
}

#[test]
fn rejects_runner_key_saying_where_the_key_lives_now() {
    let err = load(&JOB.replace("output_dir", "runner_key = \"keys/runner.key\"\noutput_dir"))
        .unwrap_err();
    assert!(matches!(err, JobError::RunnerKey { .. }), "{err}");
    use runner::error::{Diagnose, Exit};
    assert_eq!(err.exit(), Exit::BadInput);
    assert!(err.hint().unwrap().contains("runner init"), "{err:?}");
}

#[test]
fn rejects_zero_batch_and_unknown_template() {
    let err = load(&JOB.replace("batch_size = 4", "batch_size = 0")).unwrap_err();
    assert!(
        matches!(
            err,
            JobError::Invalid {
                field: "generation.batch_size",
                ..
            }
        ),
        "{err}"
    );
    let err = load(&JOB.replace("\"raw\"", "\"fancy\"")).unwrap_err();
    assert!(
        err.to_string().contains("fancy") || err.to_string().contains("template"),
        "{err}"
    );
}

fn inputs(text: &str) -> Result<Vec<runner::job::inputs::Input>, InputsError> {
    parse_inputs(text.as_bytes(), Path::new("inputs.jsonl"))
}

#[test]
fn reads_all_three_prompt_forms() {
    let got = inputs(concat!(
        "{\"id\": \"a\", \"prompt\": \"hi\"}\n",
        "\n",
        "{\"id\": \"b\", \"messages\": [{\"role\": \"user\", \"content\": \"yo\"}]}\n",
        "{\"id\": \"c\", \"tokens\": [2, 5, 7]}"
    ))
    .unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].prompt, Prompt::Text("hi".into()));
    assert!(matches!(&got[1].prompt, Prompt::Messages(m) if m[0].content == "yo"));
    assert_eq!(got[2].prompt, Prompt::Tokens(vec![2, 5, 7]));
}

#[test]
fn rejects_bad_lines_by_number_without_echoing_private_content() {
    for (text, line) in [
        (
            "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"b\", \"prompt\": \"secret\"",
            2,
        ),
        ("{\"id\": \"a\", \"prompt\": \"x\", \"tokens\": [1]}", 1),
        ("{\"id\": \"a\"}", 1),
        (
            "{\"id\": \"a\", \"prompt\": \"x\"}\n\n{\"id\": \"b\", \"tokens\": \"secret\"}",
            3,
        ),
        (
            "{\"id\": \"a\", \"prompt\": \"x\", \"prompt\": \"secret\"}",
            1,
        ),
        ("{\"id\": \"a\", \"tokens\": [-1]}", 1),
        ("[\"secret\"]", 1),
        // serde's messages quote a wrong-typed value, and this one holds the word "field".
        (
            "{\"id\":\"a\",\"messages\":\"Diagnosis field: secret\"}",
            1,
        ),
        // Key names are the data's too.
        ("{\"id\": \"a\", \"prompt\": \"x\", \"secret\": 1}", 1),
        ("{\"id\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"x\", \"secret\": 1}]}", 1),
        ("{\"id\": \"secret\", \"prompt\": [\"secret\"]}", 1),
    ] {
        let err = inputs(text).unwrap_err();
        assert!(
            matches!(&err, InputsError::Line { line: l, .. } if *l == line),
            "{text:?}: {err}"
        );
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}

#[test]
fn rejects_duplicate_ids_and_empty_files() {
    let err = inputs("{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}")
        .unwrap_err();
    assert!(
        matches!(
            err,
            InputsError::DuplicateId {
                line: 2,
                first: 1,
                ..
            }
        ),
        "{err}"
    );
    // Ids are the owners' labels: the repeat is named by its lines, not its value.
    assert!(!err.to_string().contains("\"a\""), "{err}");
    assert!(matches!(
        inputs("\n\n").unwrap_err(),
        InputsError::Empty { .. }
    ));
}
