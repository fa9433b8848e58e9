//! The Kubernetes manifests in deploy/kubernetes run the command line as it is: every container's
//! arguments parse with the runner's own parser, the shard count is the Job's completions, the
//! environment names the variables the runner reads, and the pod failure policy fails an index
//! on exactly the refusal exit codes.

use runner::cli::Cli;
use serde_yaml::Value;

use crate::common::repo::root;

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
