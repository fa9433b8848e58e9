//! The verifier's refusals: every way private code might reach a built-in the policy does not
//! allow is refused with the specific error, and the owner's view and report never show a
//! private name, number or hidden line.

use runner::restrict::policy::Policy;
use runner::restrict::{
    check, check_showing_private, Pos, ProgramErrorKind, RegionKind, RestrictError,
    SyntaxErrorKind, Violation,
};

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    let doc = serde_json::json!({
        "schema": "runner-policy/1",
        "name": "test",
        "allow_functions": allow,
        "disallow_functions": deny,
        "limits": {"max_batch": 1, "max_new_tokens": 1, "max_prompt_tokens": 1, "max_inputs": 1},
        "outputs": ["tokens"],
    });
    Policy::from_json(doc.to_string().as_bytes(), "test").unwrap_or_else(|e| panic!("{e}"))
}

fn narrow() -> Policy {
    policy(&["add", "linear", "rms_norm", "scale"], &[])
}

// The verifier's findings in full (what the author sees with `runner restrict
// --show-private`); `check` itself withholds private lines, tested at the end.
fn violations(src: &str, p: &Policy) -> Vec<Violation> {
    match check_showing_private(src, "t.eng", p) {
        Err(RestrictError::Violations { violations, .. }) => violations,
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted:\n{src}"),
    }
}

fn program_errors(src: &str) -> Vec<ProgramErrorKind> {
    match check_showing_private(src, "t.eng", &narrow()) {
        Err(RestrictError::Program { errors, .. }) => errors.into_iter().map(|e| e.kind).collect(),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted:\n{src}"),
    }
}

fn syntax_error(src: &str) -> (SyntaxErrorKind, Pos) {
    match check_showing_private(src, "t.eng", &narrow()) {
        Err(RestrictError::Syntax { error, .. }) => {
            let pos = error.pos();
            (error.kind, pos)
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted:\n{src}"),
    }
}

fn summary(v: &[Violation]) -> Vec<(String, Pos, Option<String>)> {
    v.iter()
        .map(|v| {
            (
                v.builtin.clone(),
                v.pos(),
                v.via.as_ref().map(|w| w.function.clone()),
            )
        })
        .collect()
}

#[test]
fn accepts_allowed_private_calls() {
    let src = "\
fn main(x, w) {
  // @private hide
  let h = linear(x, w);
  // @end hide
  return add(h, x);
}
";
    let c = check(src, "t.eng", &narrow()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.report().calls_checked, 1);
    assert_eq!(
        c.report()
            .builtins_used
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec!["add", "linear"]
    );
}

#[test]
fn public_calls_are_not_checked() {
    // Owners read public code in the view; only private calls need the policy.
    let src = "fn main(x) {\n  return softmax(x);\n}\n";
    let c = check(src, "t.eng", &narrow()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.report().calls_checked, 0);
}

#[test]
fn rejects_disallowed_builtin_in_private_region() {
    let src = "fn main(x) {\n  // @private obfuscate\n  let y = softmax(x);\n  // @end obfuscate\n  return y;\n}\n";
    let v = violations(src, &narrow());
    assert_eq!(summary(&v), vec![("softmax".into(), Pos::new(3, 11), None)]);
    let text = v[0].to_string();
    assert!(
        text.starts_with("private region calls `softmax`, which the policy does not allow (3:11)"),
        "{text}"
    );
    assert!(
        text.contains("  3 |   let y = softmax(x);\n    |           ^"),
        "{text}"
    );
}

#[test]
fn rejects_disallow_over_allow() {
    let src = "fn main(x) {\n  // @private hide\n  let y = linear(x, x);\n  // @end hide\n  return y;\n}\n";
    let p = policy(&["linear", "add"], &["linear"]);
    assert_eq!(
        summary(&violations(src, &p)),
        vec![("linear".into(), Pos::new(3, 11), None)]
    );
}

#[test]
fn rejects_every_violation_not_just_the_first() {
    let src = "\
fn main(x) {
  // @private obfuscate
  let a = softmax(x);
  let b = gelu_tanh(a);
  let c = argmax(b);
  // @end obfuscate
  return c;
}
";
    let v = violations(src, &narrow());
    assert_eq!(
        summary(&v),
        vec![
            ("softmax".into(), Pos::new(3, 11), None),
            ("gelu_tanh".into(), Pos::new(4, 11), None),
            ("argmax".into(), Pos::new(5, 11), None),
        ]
    );
}

#[test]
fn rejects_builtin_reached_through_a_public_user_function() {
    let src = "\
fn main(x) {
  // @private hide
  let y = helper(x);
  // @end hide
  return y;
}
fn helper(x) {
  return deeper(x);
}
fn deeper(x) {
  return add(softmax(x), x);
}
";
    let v = violations(src, &narrow());
    assert_eq!(
        summary(&v),
        vec![("softmax".into(), Pos::new(3, 11), Some("helper".into()))]
    );
    let via = v[0].via.as_ref().map(|w| (w.caller.clone(), w.at));
    assert_eq!(via, Some(("deeper".into(), Pos::new(11, 14))));
    assert!(v[0]
        .to_string()
        .contains("reaches `softmax` (called in `deeper` at 11:14)"));
}

#[test]
fn rejects_builtin_reached_through_a_scan_body() {
    let src = "\
fn main(x, layers) {
  // @private obfuscate
  let y = scan(body, x, layers);
  // @end obfuscate
  return y;
}
fn body(h, layer) {
  return softmax(h);
}
";
    let v = violations(src, &narrow());
    assert_eq!(
        summary(&v),
        vec![("softmax".into(), Pos::new(3, 16), Some("body".into()))]
    );
}

#[test]
fn rejects_calls_in_private_functions_called_from_public_code() {
    let src = "\
fn main(x) {
  return secret(x);
}
// @private obfuscate
fn secret(x) {
  return softmax(x);
}
// @end obfuscate
";
    assert_eq!(
        summary(&violations(src, &narrow())),
        vec![("softmax".into(), Pos::new(6, 10), None)]
    );
}

#[test]
fn rejects_let_alias_of_a_builtin() {
    let src = "fn main(x) {\n  // @private hide\n  let f = softmax;\n  let y = f(x);\n  // @end hide\n  return y;\n}\n";
    let e = program_errors(src);
    assert_eq!(
        e,
        vec![
            ProgramErrorKind::FunctionAsValue {
                name: "softmax".into()
            },
            ProgramErrorKind::UnknownFunction { name: "f".into() },
        ]
    );
}

#[test]
fn rejects_shadowing_a_builtin_with_a_user_function() {
    // A user `linear` (allowed name) that really calls softmax.
    let src = "\
fn main(x) {
  // @private hide
  let y = linear(x, x);
  // @end hide
  return y;
}
fn linear(x, w) {
  return softmax(x);
}
";
    assert_eq!(
        program_errors(src),
        vec![ProgramErrorKind::ShadowsBuiltin {
            name: "linear".into()
        }]
    );
}

#[test]
fn rejects_non_ascii_lookalike_identifier() {
    // `l\u{456}near`: Cyrillic i, so not the allowed `linear`.
    let src = "fn main(x) {\n  // @private hide\n  let y = l\u{456}near(x, x);\n  // @end hide\n  return y;\n}\n";
    let (kind, pos) = syntax_error(src);
    assert!(matches!(kind, SyntaxErrorKind::NonAscii { .. }), "{kind:?}");
    assert_eq!(pos, Pos::new(3, 12));
    // And a look-alike `a` (U+0430) in a marker comment.
    let src = "// @priv\u{430}te hide\nfn main(x) { return x; }\n// @end hide\n";
    assert!(matches!(
        syntax_error(src).0,
        SyntaxErrorKind::NonAscii { .. }
    ));
}

#[test]
fn rejects_disallowed_call_inside_a_nested_region() {
    let src = "\
fn main(x) {
  // @private obfuscate
  let a = add(x, x);
  // @private hide
  let b = softmax(a);
  // @end hide
  // @end obfuscate
  return b;
}
";
    assert_eq!(
        summary(&violations(src, &narrow())),
        vec![("softmax".into(), Pos::new(5, 11), None)]
    );
}

#[test]
fn rejects_a_call_across_a_region_boundary() {
    // The call starts in public code and its argument sits in a hidden region.
    let src = "\
fn main(x) {
  let y = add(x,
  // @private hide
    softmax(x));
  // @end hide
  return y;
}
";
    let (kind, pos) = syntax_error(src);
    assert!(
        matches!(kind, SyntaxErrorKind::SplitsConstruct { .. }),
        "{kind:?}"
    );
    assert_eq!(pos, Pos::new(3, 3));
}

#[test]
fn rejects_malformed_markers() {
    for (marker, line) in [
        ("// @privat hide", 1),
        ("// @private HIDE", 1),
        ("// @private hide please", 1),
        ("//@ private hide", 1),
    ] {
        let src = format!("{marker}\nfn main(x) {{ return x; }}\n// @end hide\n");
        let (kind, pos) = syntax_error(&src);
        assert!(
            matches!(kind, SyntaxErrorKind::MalformedMarker { .. }),
            "{marker}: {kind:?}"
        );
        assert_eq!(pos.line, line);
    }
}

#[test]
fn rejects_marker_sharing_a_line_with_code() {
    let src = "fn main(x) { // @private hide\n  return softmax(x);\n  // @end hide\n}\n";
    assert_eq!(syntax_error(src).0, SyntaxErrorKind::MarkerNotAlone);
}

#[test]
fn rejects_obfuscate_nested_in_hide() {
    let src = "// @private hide\n// @private obfuscate\nfn main(x) { return x; }\n// @end obfuscate\n// @end hide\n";
    assert_eq!(
        syntax_error(src).0,
        SyntaxErrorKind::BadNesting {
            inner: RegionKind::Obfuscate,
            outer: RegionKind::Hide,
            outer_line: 1
        }
    );
}

#[test]
fn rejects_recursion_directly_and_through_functions_and_scan() {
    let direct = "fn main(x) {\n  return main(x);\n}\n";
    assert!(matches!(
        program_errors(direct).as_slice(),
        [ProgramErrorKind::Recursion { .. }]
    ));
    let two = "fn a(x) { return b(x); }\nfn b(x) { return a(x); }\n";
    assert!(matches!(
        program_errors(two).as_slice(),
        [ProgramErrorKind::Recursion { .. }]
    ));
    let scan =
        "fn main(x, ls) { return scan(body, x, ls); }\nfn body(h, l) { return main(h, l); }\n";
    assert!(matches!(
        program_errors(scan).as_slice(),
        [ProgramErrorKind::Recursion { .. }]
    ));
}

#[test]
fn view_and_report_never_show_private_names_numbers_or_hidden_lines() {
    let src = "\
fn main(model, tokens) {
  let x = embed(tokens, model.embed, 25.25);
  let y = secret_block(x, model);
  return argmax(y);
}
// @private obfuscate
// comment with secret_insight
fn secret_block(hidden_state, cfg) {
  let zeta_proj = linear(hidden_state, cfg.private_weight);
  let zeta_scaled = scale(zeta_proj, 0.123456);
  // @private hide
  let omega_mix = add(zeta_scaled, linear(zeta_scaled, cfg.hidden_weight));
  let omega_more = scale(omega_mix, 98765);
  // @end hide
  return add(omega_more, hidden_state);
}
// @end obfuscate
";
    let c = check(src, "t.eng", &narrow()).unwrap_or_else(|e| panic!("{e}"));
    let view = c.view();
    let report = c.report().to_json() + &c.report().to_human();
    for secret in [
        "secret_block",
        "secret_insight",
        "hidden_state",
        "cfg",
        "private_weight",
        "hidden_weight",
        "zeta_proj",
        "zeta_scaled",
        "omega_mix",
        "omega_more",
        "0.123456",
        "98765",
    ] {
        assert!(!view.contains(secret), "view shows {secret}:\n{view}");
        assert!(!report.contains(secret), "report shows {secret}:\n{report}");
    }
    // Built-in names, public code and the placeholder stay readable.
    assert!(
        view.contains("let x = embed(tokens, model.embed, 25.25);"),
        "{view}"
    );
    assert!(view.contains("let v3 = linear(v1, v2.a1);"), "{view}");
    assert!(view.contains("  // [hidden: 2 lines]\n"), "{view}");
    assert!(view.contains("let y = f1(x, model);"), "{view}");
    assert!(!view.contains("98765"));
    assert_eq!(c.report().private_ranges.len(), 2);
    assert_eq!(c.report().calls_checked, 6);
}

#[test]
fn report_binds_digest_policy_and_verifier() {
    let src = "fn main(x) { return x; }\n";
    let p = narrow();
    let c = check(src, "t.eng", &p).unwrap_or_else(|e| panic!("{e}"));
    let r = c.report();
    assert_eq!(
        r.source_digest,
        blake3::hash(src.as_bytes()).to_hex().to_string()
    );
    assert_eq!(r.policy.id_full, p.policy_id().to_hex());
    assert_eq!(r.policy.id, p.policy_id().short());
    assert_eq!(r.verifier_version, runner::restrict::VERIFIER_VERSION);
    // One byte more is another digest.
    let c2 = check("fn main(x) { return x; }\n\n", "t.eng", &p).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(c2.report().source_digest, r.source_digest);
}

#[test]
fn rejects_many_violations_quickly() {
    // A hostile engine near the size limits: thousands of regions, each with a disallowed call.
    let mut src = String::from("fn main(x) {\n");
    for _ in 0..10_000 {
        src.push_str("// @private hide\nlet y = softmax(x);\n// @end hide\n");
    }
    src.push_str("return x;\n}\n");
    let start = std::time::Instant::now();
    let v = violations(&src, &narrow());
    assert_eq!(v.len(), 10_000);
    assert_eq!(v[9_999].pos(), Pos::new(30_000, 9));
    let _ = RestrictError::Violations {
        origin: "t".into(),
        policy: "p".into(),
        violations: v,
    }
    .to_string();
    assert!(
        start.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn accepts_many_regions_quickly() {
    let mut src = String::from("fn main(x) {\n");
    for i in 0..8_000 {
        src.push_str(&format!(
            "// @private obfuscate\nlet y{i} = add(x, x);\n// @end obfuscate\n"
        ));
    }
    src.push_str("return x;\n}\n");
    let start = std::time::Instant::now();
    let c = check(&src, "t.eng", &narrow()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.report().private_ranges.len(), 8_000);
    assert_eq!(c.report().calls_checked, 8_000);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

// ---- what everyone but the author sees ----

#[test]
fn errors_in_private_regions_are_withheld_from_everyone_but_the_author() {
    // A malformed number, an unknown function and a disallowed built-in, each on a hidden line
    // that holds a secret name or constant.
    let cases = [
        "fn main(x) {\n  // @private hide\n  let zq_secret = scale(x, 12.5e);\n  // @end hide\n  return x;\n}\n",
        "fn main(x) {\n  // @private hide\n  let a = zq_secret_fn(x);\n  // @end hide\n  return x;\n}\n",
        "fn main(x) {\n  // @private hide\n  let zq_secret = softmax(x);\n  // @end hide\n  return zq_secret;\n}\n",
        "fn main(x) {\n  // @private hide\n  let a = zq_secret(x);\n  // @end hide\n  return a;\n}\nfn zq_secret(y) { return zq_secret(y); }\n",
    ];
    for src in cases {
        let shown = check(src, "t.eng", &narrow()).err().unwrap().to_string();
        assert!(!shown.contains("zq_secret"), "{shown}");
        assert!(!shown.contains("12.5e"), "{shown}");
        assert!(shown.contains(":"), "the position stays: {shown}");
        let full = check_showing_private(src, "t.eng", &narrow())
            .err()
            .unwrap()
            .to_string();
        assert!(
            full.contains("zq_secret") || full.contains("12.5e") || full.contains("softmax"),
            "{full}"
        );
    }
    // A public line keeps its message and excerpt.
    let shown = check("fn main(x) {\n  return nope(x);\n}\n", "t.eng", &narrow())
        .err()
        .unwrap()
        .to_string();
    assert!(
        shown.contains("unknown function `nope`") && shown.contains("return nope(x);"),
        "{shown}"
    );
}
