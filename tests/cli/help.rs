//! Every command's `--help`: its exit codes, placeholders from one vocabulary; and the JSON
//! vocabulary the `--json` outputs share.

use clap::CommandFactory;
use runner::cli::Cli;

use crate::common::Env;

/// The path of every command and subcommand (`["audit", "verify"]`), from the parser itself, so
/// a command added later is covered.
fn command_paths() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, path: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands() {
            let mut p = path.to_vec();
            p.push(sub.get_name().to_owned());
            if sub.has_subcommands() {
                walk(sub, &p, out);
            }
            out.push(p);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &[], &mut out);
    out
}

#[test]
fn every_command_help_lists_its_exit_codes() {
    let env = Env::new();
    let paths = command_paths();
    assert!(paths.len() >= 20, "{paths:?}");
    for path in paths.iter().chain([&Vec::new()]) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = env.ok(&args);
        let table = help
            .split_once("\nExit codes:\n")
            .unwrap_or_else(|| panic!("{args:?}: no exit codes in\n{help}"))
            .1;
        for code in ["0", "1", "2", "3"] {
            assert!(
                table.contains(&format!("\n  {code}  "))
                    || table.starts_with(&format!("  {code}  ")),
                "{args:?}: no exit code {code} in\n{table}"
            );
        }
        // -h shows it too.
        args.pop();
        args.push("-h");
        assert!(env.ok(&args).contains("\nExit codes:\n"), "{args:?}");
    }
    // Where a code means something more precise for a command, its help says that instead.
    let exec = env.ok(&["exec", "--help"]);
    assert!(
        exec.contains("nothing ran, and the audit log says why"),
        "{exec}"
    );
    let verify_cert = env.ok(&["verify-cert", "--help"]);
    assert!(
        verify_cert.contains("3  the certificate does not verify"),
        "{verify_cert}"
    );
    // A command's own closing text stays, before the table.
    let attest = env.ok(&["attest", "--help"]);
    let own = attest.find("The report's 64 bytes of user data").unwrap();
    assert!(own < attest.find("Exit codes:").unwrap(), "{attest}");
    let keygen = env.ok(&["keygen", "--help"]);
    assert!(keygen.contains("3  refused by verification"), "{keygen}");
}

#[test]
fn placeholders_come_from_one_vocabulary() {
    // Paths are FILE or DIR (the model: DIR|FILE.gguf); numbers N (or SECONDS); the rest say
    // their format.
    const ALLOWED: &[&str] = &[
        "FILE",
        "DIR",
        "DIR|FILE.gguf",
        "FILE|DIR",
        "N",
        "N,...",
        "SECONDS",
        "K/N",
        "HEX",
        "RFC3339",
        "NAME",
        "NAME=HEX",
        "TEXT",
        "AGE1...",
        "HARDWARE",
    ];
    fn check(cmd: &clap::Command, path: &str, bad: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if !arg.get_action().takes_values() || arg.is_hide_set() {
                continue;
            }
            let names: Vec<String> = match arg.get_value_names() {
                Some(names) => names.iter().map(|n| n.to_string()).collect(),
                None => vec![arg.get_id().as_str().to_uppercase()],
            };
            for name in names {
                if !ALLOWED.contains(&name.as_str()) {
                    bad.push(format!("{path} {}: <{name}>", arg.get_id()));
                }
            }
        }
        for sub in cmd.get_subcommands() {
            check(sub, &format!("{path} {}", sub.get_name()), bad);
        }
    }
    let mut bad = Vec::new();
    check(&Cli::command(), "runner", &mut bad);
    assert!(
        bad.is_empty(),
        "placeholders outside the vocabulary: {bad:#?}"
    );
}

#[test]
fn json_outputs_share_one_vocabulary() {
    let env = Env::two_owner_cert();
    // keygen --json: the files and the key id.
    let key: serde_json::Value =
        serde_json::from_str(&env.ok(&["keygen", "--out", "keys/c.key", "--json"])).unwrap();
    assert_eq!(key["private_key"], "keys/c.key");
    assert_eq!(key["public_key"], "keys/c.key.pub");
    let public: serde_json::Value = serde_json::from_str(&env.read("keys/c.key.pub")).unwrap();
    assert_eq!(key["key_id"], public["key_id"]);
    assert_eq!(
        key["key_id_short"].as_str(),
        public["key_id"].as_str().map(|k| &k[..16])
    );

    // verify-cert --json: a boolean verdict, policy_id in full, the window as start/end.
    let cert: serde_json::Value =
        serde_json::from_str(&env.ok(&["verify-cert", "cert.json", "--json"])).unwrap();
    assert_eq!(cert["valid"], true);
    let inspect: serde_json::Value =
        serde_json::from_str(&env.ok(&["inspect", "cert.json", "--json"])).unwrap();
    assert_eq!(cert["certificate_digest"], inspect["certificate_digest"]);
    assert_eq!(cert["policy_id"], inspect["payload"]["policy_id"]);
    assert_eq!(cert["validity"]["start"], inspect["validity"]["start"]);
    assert_eq!(cert["validity"]["end"], inspect["validity"]["end"]);
    assert_eq!(cert["signers"].as_array().unwrap().len(), 2);
    assert_eq!(cert["required_signatures"], 2);

    // policy-id and restrict spell policy_id the same way: the full digest.
    let policy: serde_json::Value =
        serde_json::from_str(&env.ok(&["policy-id", "gemma3.json", "--json"])).unwrap();
    let report: serde_json::Value = serde_json::from_str(&env.ok(&[
        "restrict",
        "gemma3.eng",
        "--policy",
        "gemma3.json",
        "--json",
    ]))
    .unwrap();
    assert_eq!(report["policy"]["policy_id"], policy["policy_id"]);
    assert_eq!(
        report["policy"]["policy_id_short"],
        policy["policy_id_short"]
    );
    assert_eq!(cert["policy_id"], policy["policy_id"]);
    // No verdict is a string: every command's is `valid` (or a named boolean).
    for doc in [&cert, &inspect, &report, &policy] {
        for old in ["verified", "intact", "currently_valid", "id_full"] {
            assert!(doc.get(old).is_none(), "{old} in {doc}");
        }
    }
}
