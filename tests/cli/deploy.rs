//! The Kubernetes manifests in deploy/kubernetes run the command line as it is: every container's
//! arguments parse with the runner's own parser, the shard count is the Job's completions, the
//! environment names the variables the runner reads, and the pod failure policy fails an index
//! on exactly the refusal exit codes. The container build copies every file the binary is
//! built from.

use runner::cli::Cli;
use serde_yaml::Value;

use crate::common::repo::{root, rust_files};

fn manifest(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("deploy/kubernetes").join(name)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn args(container: &Value) -> Vec<String> {
    let mut out = vec!["runner".to_owned()];
    for a in container["args"].as_sequence().unwrap() {
        out.push(a.as_str().unwrap().to_owned());
    }
    out
}

fn parses(args: &[String]) {
    use clap::Parser;
    if let Err(e) = Cli::try_parse_from(args) {
        panic!("{args:?} does not parse: {e}");
    }
}

fn env_names(container: &Value) -> Vec<String> {
    container["env"]
        .as_sequence()
        .map(|s| {
            s.iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_indexed_job_runs_the_cli_as_it_is() {
    let job = manifest("runner-job.yaml");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never", "podFailurePolicy needs it");

    let runner = &pod["containers"][0];
    let exec = args(runner);
    parses(&exec);
    assert_eq!(exec[1], "exec");
    let at = exec.iter().position(|a| a == "--shard-from-env").unwrap();
    assert_eq!(
        exec[at + 1].parse::<u64>().unwrap(),
        spec["completions"].as_u64().unwrap(),
        "the shard count is the number of indices"
    );
    let names = env_names(runner);
    assert!(names.contains(&runner::job::shard::COMPLETION_INDEX_ENV.to_owned()));
    assert!(names.contains(&runner::job::state::STATE_DIR_ENV.to_owned()));

    let init = &pod["initContainers"][0];
    let init_args = args(init);
    parses(&init_args);
    assert_eq!(init_args[1], "init");
    // Both containers see the same per-index state directory.
    let state_mount = |c: &Value| {
        c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "state")
            .cloned()
            .unwrap()
    };
    assert_eq!(state_mount(runner), state_mount(init));
    assert!(state_mount(runner)["subPathExpr"]
        .as_str()
        .unwrap()
        .contains("$(JOB_COMPLETION_INDEX)"));

    use runner::error::Exit;
    let rule = &spec["podFailurePolicy"]["rules"][0];
    assert_eq!(rule["action"], "FailIndex");
    let codes: Vec<u64> = rule["onExitCodes"]["values"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        codes,
        [
            u64::from(Exit::BadInput.code()),
            u64::from(Exit::Refused.code())
        ],
        "a refusal fails its index; exit 1 retries"
    );
    assert_eq!(rule["onExitCodes"]["containerName"], runner["name"]);
}

#[test]
fn the_merge_step_runs_the_cli_as_it_is() {
    let job = manifest("runner-merge.yaml");
    let merge = &job["spec"]["template"]["spec"]["containers"][0];
    let merge_args = args(merge);
    parses(&merge_args);
    assert_eq!(merge_args[1], "merge");
    // It merges what the shards' job writes: /outputs/out.
    let shards = manifest("runner-job.yaml");
    let mounts = shards["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .clone();
    let outputs = mounts.iter().find(|m| m["name"] == "outputs").unwrap();
    assert!(merge_args
        .last()
        .unwrap()
        .starts_with(outputs["mountPath"].as_str().unwrap()));
}

/// The paths the Dockerfile's build stage copies from the repository (every `COPY` before the
/// second `FROM`, less its destination), and the version of its Rust image.
fn build_stage() -> (Vec<String>, (u32, u32)) {
    let text = std::fs::read_to_string(root().join("deploy/container/Dockerfile")).unwrap();
    let mut copied = Vec::new();
    let mut rust = None;
    for line in text.lines().map(str::trim) {
        if let Some(image) = line.strip_prefix("FROM ") {
            if rust.is_some() {
                break;
            }
            let tag = image
                .strip_prefix("rust:")
                .expect("the build stage is a Rust image");
            let mut v = tag.split(['.', '-']).map(|p| p.parse::<u32>().unwrap());
            rust = Some((v.next().unwrap(), v.next().unwrap()));
        } else if let Some(args) = line.strip_prefix("COPY ") {
            let parts: Vec<&str> = args.split_whitespace().collect();
            let sources = &parts[..parts.len() - 1];
            copied.extend(sources.iter().map(|s| s.trim_end_matches('/').to_owned()));
        }
    }
    (copied, rust.expect("a FROM line"))
}

#[test]
fn the_container_build_copies_every_file_the_binary_is_built_from() {
    let (copied, rust) = build_stage();
    let covered = |path: &str| {
        copied
            .iter()
            .any(|c| path == c || path.starts_with(&format!("{c}/")))
    };
    for needed in ["Cargo.toml", "Cargo.lock", "src"] {
        assert!(covered(needed), "the build stage does not copy {needed}");
    }
    // Files the sources pull in at compile time, resolved from the including file.
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut included = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for marker in ["include_str!(\"", "include_bytes!(\""] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                let rel = &rest[..rest.find('"').unwrap()];
                let target = file.parent().unwrap().join(rel).canonicalize().unwrap();
                let inside = target.strip_prefix(root.canonicalize().unwrap()).unwrap();
                let inside = inside.to_str().unwrap().replace('\\', "/");
                assert!(
                    covered(&inside),
                    "{} includes {inside}, which the container build does not copy \
                     (add a COPY to deploy/container/Dockerfile)",
                    file.display()
                );
                included += 1;
            }
        }
    }
    assert!(included >= 2, "the demo's engine and policy are included");
    // The image's toolchain is at least the crate's declared minimum.
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.starts_with("rust-version"))
        .expect("Cargo.toml declares rust-version");
    let version = line.split('"').nth(1).unwrap();
    let mut v = version.split('.').map(|p| p.parse::<u32>().unwrap());
    let needed = (v.next().unwrap(), v.next().unwrap());
    assert!(
        rust >= needed,
        "rust:{rust:?} image below rust-version {version}"
    );
}
