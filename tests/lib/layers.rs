//! The layers of the crate point one way. Every `crate::` and `super::` path in `src/` is read
//! (comment lines skipped) and resolved to the module it names; a module may use only modules
//! of a lower layer, and within one module the files must not form a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::repo::{root, rust_files};

/// The layers, lowest first. A module uses only modules listed in an earlier layer (or itself).
/// `lib.rs` and `main.rs` are the roots and may use anything.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["primitives", "memory"],
    &["kernels", "sealing"],
    &["restrict", "attestation"],
    &["model"],
    &["trust"],
    &["job"],
    &["bench"],
    &["cli"],
];

type Module = Vec<String>;

fn rank(top: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&top))
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`; `src/lib.rs` is `[]`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The identifiers after `word::` at each occurrence of `word` as a whole path segment.
fn paths_after<'a>(line: &'a str, word: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) = line[from..].find(word).map(|i| i + from) {
        from = at + word.len();
        let before_ok = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':');
        if !before_ok {
            continue;
        }
        let mut segs = Vec::new();
        let mut rest = &line[from..];
        while let Some(tail) = rest.strip_prefix("::") {
            let len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if len == 0 {
                break;
            }
            segs.push(&tail[..len]);
            rest = &tail[len..];
        }
        if !segs.is_empty() {
            out.push(segs);
        }
    }
    out
}

fn edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let longest = |parts: &[&str]| -> Option<Module> {
        (1..=parts.len()).rev().find_map(|n| {
            let m: Module = parts[..n].iter().map(|s| s.to_string()).collect();
            modules.contains(&m).then_some(m)
        })
    };
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for file in &files {
        let module = module_of(src, file);
        let is_dir_root = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        // `super` in a file `a/b.rs` is `a`; in `a/mod.rs` it is `a`'s parent.
        let parent: Module = if is_dir_root {
            module[..module.len().saturating_sub(1)].to_vec()
        } else {
            module[..module.len() - 1].to_vec()
        };
        let text = std::fs::read_to_string(file).unwrap();
        for line in text
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with("//"))
        {
            for segs in paths_after(line, "crate") {
                if let Some(target) = longest(&segs) {
                    out.entry(module.clone()).or_default().insert(target);
                }
            }
            for segs in paths_after(line, "super") {
                let mut target = parent.clone();
                target.push(segs[0].to_owned());
                if modules.contains(&target) {
                    out.entry(module.clone()).or_default().insert(target);
                }
            }
        }
    }
    out
}

fn src_dir() -> PathBuf {
    root().join("src")
}

fn show(m: &Module) -> String {
    m.join("::")
}

#[test]
fn every_module_uses_only_lower_layers() {
    let mut upward = Vec::new();
    let mut unplaced = BTreeSet::new();
    for (from, targets) in edges(&src_dir()) {
        let Some(top) = from.first() else { continue };
        let Some(r) = rank(top) else {
            unplaced.insert(top.clone());
            continue;
        };
        for to in targets {
            let other = &to[0];
            if other == top {
                continue;
            }
            match rank(other) {
                Some(t) if t < r => {}
                Some(_) => upward.push(format!("{} -> {}", show(&from), show(&to))),
                None => {
                    unplaced.insert(other.clone());
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules missing from LAYERS in tests/lib/layers.rs (place each in its layer): {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "uses that point up or sideways (move the item down, or the user up):\n{}",
        upward.join("\n")
    );
}

#[test]
fn files_within_a_module_form_no_cycle() {
    let graph = edges(&src_dir());
    // Edges between a module and its own ancestors or descendants are how Rust modules
    // declare and re-export their children; they are not dependencies between files.
    let related = |a: &Module, b: &Module| a.starts_with(b) || b.starts_with(a);
    let mut cycles = Vec::new();
    // Depth-first search for a back edge, recording the path that closes the cycle.
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        related: &dyn Fn(&Module, &Module) -> bool,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
        cycles: &mut Vec<String>,
    ) {
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if related(node, next) || next.first() != node.first() {
                continue;
            }
            match state.get(next) {
                Some(1) => {
                    let at = stack.iter().position(|m| m == next).unwrap();
                    let names: Vec<String> = stack[at..].iter().map(show).collect();
                    cycles.push(format!("{} -> {}", names.join(" -> "), show(next)));
                }
                Some(_) => {}
                None => visit(next, graph, related, state, stack, cycles),
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            visit(
                node,
                &graph,
                &related,
                &mut state,
                &mut Vec::new(),
                &mut cycles,
            );
        }
    }
    assert!(
        cycles.is_empty(),
        "file-level cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_reader_sees_the_paths_it_must() {
    // A check of the checker: known uses are found, comments are not.
    let graph = edges(&src_dir());
    let m = |s: &str| -> Module { s.split("::").map(str::to_owned).collect() };
    assert!(graph[&m("job::admit")].contains(&m("trust::verify")));
    assert!(graph[&m("job::run")].contains(&m("job::publish")));
    assert_eq!(
        paths_after("use crate::a::b::{c, d}; x::crate::no", "crate"),
        vec![vec!["a", "b"]]
    );
}
