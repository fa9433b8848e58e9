//! Compiling and running engines: results match direct kernel calls, scan equals the written-out
//! layers bit for bit, weights are shared rather than copied, state persists in records, and
//! every compile or run error names the call's line:col.

use runner::kernels::{self, DType, KvCache, Tensor, Weight};
use runner::restrict::policy::Policy;
use runner::restrict::{
    check, compile, CompileErrorKind, Inputs, Plan, Pos, ProgramErrorKind, Record, RestrictError,
    RunErrorKind, Type, Value,
};

fn policy() -> Policy {
    let allow: Vec<&str> = runner::restrict::builtins::Builtin::ALL
        .iter()
        .map(|b| b.name())
        .collect();
    let doc = serde_json::json!({
        "schema": "runner-policy/1", "name": "all", "allow_functions": allow,
        "limits": {"max_batch": 8, "max_new_tokens": 8, "max_prompt_tokens": 64, "max_inputs": 8},
        "outputs": ["tokens"],
    });
    Policy::from_json(doc.to_string().as_bytes(), "test").unwrap_or_else(|e| panic!("{e}"))
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn weight(shape: &[usize], seed: u64) -> Weight {
    let n = shape.iter().product();
    Weight::from_values(DType::BF16, shape.to_vec(), &values(n, seed))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn tensor(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape.to_vec(), values(n, seed)).unwrap_or_else(|e| panic!("{e}"))
}

fn build(src: &str, entry: &str, inputs: &Inputs) -> Plan {
    let checked = check(src, "t.eng", &policy()).unwrap_or_else(|e| panic!("{e}"));
    let sig = inputs.signature().unwrap_or_else(|e| panic!("{e:?}"));
    compile(checked, entry, &sig).unwrap_or_else(|e| panic!("{e}"))
}

fn compile_err(src: &str, entry: &str, inputs: &Inputs) -> (CompileErrorKind, Pos, String) {
    let checked = check(src, "t.eng", &policy()).unwrap_or_else(|e| panic!("{e}"));
    let sig = inputs.signature().unwrap_or_else(|e| panic!("{e:?}"));
    match compile(checked, entry, &sig) {
        Err(e) => (e.kind.clone(), e.pos(), e.to_string()),
        Ok(_) => panic!("compiled"),
    }
}

fn out_tensor(v: Value) -> Tensor {
    match v {
        Value::Tensor(t) => (*t).clone(),
        other => panic!("not a tensor: {other:?}"),
    }
}

const MLP: &str = "\
fn main(model, x) {
  let h = gelu_tanh(linear(x, model.up));
  let y = linear(h, model.down);
  return add(x, scale(y, 0.5));
}
";

fn mlp_inputs(x: Tensor) -> Inputs {
    let model = Record::new()
        .with("up", Value::Weight(weight(&[16, 8], 1)))
        .with("down", Value::Weight(weight(&[8, 16], 2)));
    Inputs::new()
        .with("model", Value::record(model))
        .with("x", Value::tensor(x))
}

#[test]
fn mlp_matches_direct_kernel_calls_and_a_naive_reference() {
    let x = tensor(&[3, 8], 7);
    let plan = build(MLP, "main", &mlp_inputs(x.clone()));
    let got = out_tensor(
        plan.run(&mlp_inputs(x.clone()))
            .unwrap_or_else(|e| panic!("{e}")),
    );
    // The same kernels called directly from Rust: bit-identical.
    let (up, down) = (weight(&[16, 8], 1), weight(&[8, 16], 2));
    let h = kernels::gelu_tanh(&kernels::linear(&x, &up).unwrap_or_else(|e| panic!("{e}")));
    let y = kernels::linear(&h, &down).unwrap_or_else(|e| panic!("{e}"));
    let want = kernels::add(&x, &kernels::scale(&y, 0.5)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.shape(), &[3, 8]);
    assert_eq!(got.data(), want.data());
    // A naive f64 computation: close.
    let values = |w: &Weight| {
        let mut v = vec![0.0f32; w.numel()];
        w.read_f32(0, &mut v);
        v.into_iter().map(f64::from).collect::<Vec<f64>>()
    };
    let (upv, downv) = (values(&up), values(&down));
    for r in 0..3 {
        let xr: Vec<f64> = x.data()[r * 8..r * 8 + 8]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let h: Vec<f64> = (0..16)
            .map(|o| {
                let z: f64 = (0..8).map(|i| xr[i] * upv[o * 8 + i]).sum();
                0.5 * z
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (z + 0.044715 * z * z * z)).tanh())
            })
            .collect();
        for o in 0..8 {
            let y: f64 = (0..16).map(|i| h[i] * downv[o * 16 + i]).sum();
            let expect = xr[o] + 0.5 * y;
            let diff = (f64::from(got.data()[r * 8 + o]) - expect).abs();
            assert!(diff < 1e-4, "row {r} col {o}: {diff}");
        }
    }
}

const LAYERS: &str = "\
fn scanned(x, model) {
  return scan(block, x, model.layers, model.eps);
}
fn unrolled(x, model) {
  let x = block(x, model.l0, model.eps);
  let x = block(x, model.l1, model.eps);
  return block(x, model.l2, model.eps);
}
fn block(x, layer, eps) {
  let h = rms_norm(x, layer.norm, eps, 1.0);
  return add(x, scale(linear(h, layer.w), layer.gain));
}
";

fn layer(seed: u64) -> Value {
    Value::record(
        Record::new()
            .with("norm", Value::Weight(weight(&[8], seed)))
            .with("w", Value::Weight(weight(&[8, 8], seed + 100)))
            .with("gain", Value::Scalar(0.25 * seed as f64)),
    )
}

#[test]
fn scan_over_three_layers_equals_the_written_out_calls_bit_for_bit() {
    let model = Record::new()
        .with("layers", Value::stack(vec![layer(1), layer(2), layer(3)]))
        .with("l0", layer(1))
        .with("l1", layer(2))
        .with("l2", layer(3))
        .with("eps", Value::Scalar(1e-6));
    let x = tensor(&[2, 8], 9);
    let inputs = Inputs::new()
        .with("x", Value::tensor(x))
        .with("model", Value::record(model));
    let a = out_tensor(
        build(LAYERS, "scanned", &inputs)
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let b = out_tensor(
        build(LAYERS, "unrolled", &inputs)
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(a.shape(), b.shape());
    let bits = |t: &Tensor| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
    // And the layers did something.
    assert_ne!(bits(&a), bits(&tensor(&[2, 8], 9)));
}

#[test]
fn weights_reach_functions_and_scan_bodies_without_copies() {
    let src = "\
fn main(model) {
  return scan(pick, model.w, model.layers);
}
fn pick(w, layer) {
  return layer.w;
}
";
    let w = weight(&[4, 4], 5);
    let layers: Vec<Value> = (0..3)
        .map(|i| Value::record(Record::new().with("w", Value::Weight(weight(&[4, 4], 10 + i)))))
        .collect();
    let last = match &layers[2] {
        Value::Record(r) => match r.get("w") {
            Some(Value::Weight(w)) => w.bytes().as_ptr(),
            _ => panic!(),
        },
        _ => panic!(),
    };
    let model = Record::new()
        .with("w", Value::Weight(w))
        .with("layers", Value::stack(layers));
    let inputs = Inputs::new().with("model", Value::record(model));
    match build(src, "main", &inputs).run(&inputs) {
        Ok(Value::Weight(out)) => assert_eq!(out.bytes().as_ptr(), last),
        other => panic!("{other:?}"),
    }
}

#[test]
fn functions_are_specialised_per_argument_types() {
    let src = "\
fn main(x, w) {
  let a = twice(x);
  let b = twice(2.5);
  return scale(linear(a, w), b);
}
fn twice(v) {
  return add2(v, v);
}
fn add2(a, b) {
  return a;
}
";
    let inputs = Inputs::new()
        .with("x", Value::tensor(tensor(&[1, 4], 1)))
        .with("w", Value::Weight(weight(&[2, 4], 2)));
    let out = out_tensor(
        build(src, "main", &inputs)
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let want = kernels::scale(
        &kernels::linear(&tensor(&[1, 4], 1), &weight(&[2, 4], 2))
            .unwrap_or_else(|e| panic!("{e}")),
        2.5,
    );
    assert_eq!(out.data(), want.data());
}

#[test]
fn plans_and_values_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Plan>();
    send_sync::<Value>();
    send_sync::<runner::restrict::Checked>();
}

#[test]
fn rejects_stacks_whose_layers_differ() {
    let odd = Value::record(Record::new().with("norm", Value::Weight(weight(&[8], 1))));
    let model = Record::new().with("layers", Value::stack(vec![layer(1), odd]));
    let e = Inputs::new()
        .with("model", Value::record(model))
        .signature()
        .unwrap_err();
    assert_eq!(e.name, "model");
    assert!(
        e.why.starts_with("layers: element 1 is a record {norm}"),
        "{}",
        e.why
    );
}

#[test]
fn scalar_arithmetic_follows_precedence() {
    let src = "fn main(x) {\n  return scale(x, -(1 + 2 * 3) / 2 - -1);\n}\n";
    let inputs = Inputs::new().with(
        "x",
        Value::tensor(Tensor::new(vec![1], vec![2.0]).unwrap_or_else(|e| panic!("{e}"))),
    );
    let out = out_tensor(
        build(src, "main", &inputs)
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(out.data(), &[-5.0]);
}

#[test]
fn rejects_unknown_function_and_wrong_arity_with_line_and_column() {
    let src = "fn main(x) {\n  let y = relu(x);\n  return linear(y);\n}\n";
    match check(src, "t.eng", &policy()) {
        Err(RestrictError::Program { errors, .. }) => {
            let got: Vec<(ProgramErrorKind, Pos)> =
                errors.iter().map(|e| (e.kind.clone(), e.pos())).collect();
            assert_eq!(
                got,
                vec![
                    (
                        ProgramErrorKind::UnknownFunction {
                            name: "relu".into()
                        },
                        Pos::new(2, 11)
                    ),
                    (
                        ProgramErrorKind::WrongArity {
                            name: "linear".into(),
                            expected: 2,
                            found: 1
                        },
                        Pos::new(3, 10)
                    ),
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rejects_unknown_attribute_at_compile_time() {
    let src = "fn main(model, x) {\n  return linear(x, model.upp);\n}\n";
    let (kind, pos, text) = compile_err(src, "main", &mlp_inputs(tensor(&[1, 8], 1)));
    assert_eq!(
        kind,
        CompileErrorKind::UnknownField {
            field: "upp".into(),
            fields: "down, up".into()
        }
    );
    assert_eq!(pos, Pos::new(2, 26));
    assert!(
        text.contains("  2 |   return linear(x, model.upp);\n    |                          ^"),
        "{text}"
    );
}

#[test]
fn rejects_scalar_where_a_tensor_is_needed() {
    let src = "fn main(model, x) {\n  return linear(model.eps, model.up);\n}\n";
    let model = Record::new()
        .with("eps", Value::Scalar(1.0))
        .with("up", Value::Weight(weight(&[2, 2], 1)));
    let inputs = Inputs::new()
        .with("model", Value::record(model))
        .with("x", Value::tensor(tensor(&[1, 2], 1)));
    let (kind, pos, _) = compile_err(src, "main", &inputs);
    assert_eq!(
        kind,
        CompileErrorKind::Kind {
            what: "argument 1 of `linear`".into(),
            expected: "a tensor of rank 1 or more".into(),
            found: "a scalar".into()
        }
    );
    assert_eq!(pos, Pos::new(2, 10));
}

#[test]
fn rejects_tensor_operands_of_operators() {
    let src = "fn main(model, x) {\n  let y = x + x;\n  return y;\n}\n";
    let (kind, pos, _) = compile_err(src, "main", &mlp_inputs(tensor(&[1, 8], 1)));
    assert!(
        matches!(kind, CompileErrorKind::Kind { ref expected, .. } if expected == "a scalar"),
        "{kind:?}"
    );
    assert_eq!(pos, Pos::new(2, 13));
}

#[test]
fn rejects_weight_shape_mismatch_at_compile_time() {
    // up is [16, 8]: linear(linear(x, up), up) needs 8 inputs but gets 16.
    let src =
        "fn main(model, x) {\n  let h = linear(x, model.up);\n  return linear(h, model.up);\n}\n";
    let (kind, pos, _) = compile_err(src, "main", &mlp_inputs(tensor(&[1, 8], 1)));
    assert!(
        matches!(kind, CompileErrorKind::Shape { ref op, .. } if op == "linear"),
        "{kind:?}"
    );
    assert_eq!(pos, Pos::new(3, 10));
}

#[test]
fn rejects_shape_mismatch_at_run_time_naming_the_call() {
    let src = "fn main(model, x) {\n  let h = linear(x, model.up);\n  return add(h, x);\n}\n";
    let inputs = mlp_inputs(tensor(&[2, 8], 1));
    let plan = build(src, "main", &inputs);
    let e = plan.run(&inputs).unwrap_err();
    assert!(
        matches!(e.kind, RunErrorKind::Kernel { ref op, .. } if op == "add"),
        "{:?}",
        e.kind
    );
    assert_eq!(e.pos(), Pos::new(3, 10));
    let text = e.to_string();
    assert!(text.contains("(3:10)\n  3 |   return add(h, x);"), "{text}");
}

#[test]
fn run_errors_in_private_lines_do_not_print_the_line() {
    let src = "fn main(model, x) {\n  // @private hide\n  let h = linear(x, model.up);\n  let y = add(h, x);\n  // @end hide\n  return y;\n}\n";
    let inputs = mlp_inputs(tensor(&[2, 8], 1));
    let e = build(src, "main", &inputs).run(&inputs).unwrap_err();
    assert_eq!(e.pos(), Pos::new(4, 11));
    let text = e.to_string();
    assert!(text.contains("not shown"), "{text}");
    assert!(!text.contains("add(h, x)"), "{text}");
}

#[test]
fn rejects_inputs_unlike_the_compiled_signature() {
    let plan = build(MLP, "main", &mlp_inputs(tensor(&[3, 8], 7)));
    // Another batch size runs the same plan.
    assert!(plan.run(&mlp_inputs(tensor(&[5, 8], 7))).is_ok());
    // A weight of another shape does not.
    let model = Record::new()
        .with("up", Value::Weight(weight(&[16, 4], 1)))
        .with("down", Value::Weight(weight(&[8, 16], 2)));
    let bad = Inputs::new()
        .with("model", Value::record(model))
        .with("x", Value::tensor(tensor(&[3, 8], 7)));
    let e = plan.run(&bad).unwrap_err();
    assert!(
        matches!(e.kind, RunErrorKind::InputMismatch { ref name, .. } if name == "model"),
        "{:?}",
        e.kind
    );
    // Nor a missing input.
    let e = plan
        .run(&Inputs::new().with("x", Value::tensor(tensor(&[3, 8], 7))))
        .unwrap_err();
    assert!(matches!(e.kind, RunErrorKind::InputMismatch { ref name, .. } if name == "model"));
}

#[test]
fn rejects_missing_entry_and_inputs_at_compile_time() {
    let inputs = mlp_inputs(tensor(&[1, 8], 1));
    assert!(matches!(
        compile_err(MLP, "nope", &inputs).0,
        CompileErrorKind::NoEntry { .. }
    ));
    let only_x = Inputs::new().with("x", Value::tensor(tensor(&[1, 8], 1)));
    assert!(
        matches!(compile_err(MLP, "main", &only_x).0, CompileErrorKind::MissingInput { ref name, .. } if name == "model")
    );
    let extra = mlp_inputs(tensor(&[1, 8], 1)).with("y", Value::Scalar(1.0));
    assert!(
        matches!(compile_err(MLP, "main", &extra).0, CompileErrorKind::UnusedInput { ref name, .. } if name == "y")
    );
}

#[test]
fn rejects_scan_body_changing_the_carry_kind() {
    let src = "fn main(x, model) {\n  return scan(body, x, model.layers);\n}\nfn body(h, layer) {\n  return argmax(h);\n}\n";
    let model = Record::new().with("layers", Value::stack(vec![layer(1)]));
    let inputs = Inputs::new()
        .with("x", Value::tensor(tensor(&[1, 8], 1)))
        .with("model", Value::record(model));
    let (kind, pos, _) = compile_err(src, "main", &inputs);
    assert!(
        matches!(kind, CompileErrorKind::ScanCarry { .. }),
        "{kind:?}"
    );
    assert_eq!(pos, Pos::new(2, 15));
}

#[test]
fn rejects_non_finite_scalar_arithmetic() {
    let src = "fn main(model, x) {\n  return scale(x, 1 / (model.eps - model.eps));\n}\n";
    let model = Record::new().with("eps", Value::Scalar(1.0));
    let inputs = Inputs::new()
        .with("model", Value::record(model))
        .with("x", Value::tensor(tensor(&[1, 2], 1)));
    let e = build(src, "main", &inputs).run(&inputs).unwrap_err();
    assert!(matches!(e.kind, RunErrorKind::NotFinite { .. }));
    assert_eq!(e.pos(), Pos::new(2, 21));
}

// --- A Gemma 3 shaped engine ------------------------------------------------------------------

const HIDDEN: usize = 8;
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 4;
const INTER: usize = 16;
const VOCAB: usize = 11;

fn gemma_model(batch: usize, seed: u64) -> (Value, Vec<Value>) {
    let mut caches = Vec::new();
    let layers = (0..3u64)
        .map(|i| {
            // Layer 2 is global (base 1e6, linear scaling 8); the others slide over 2 positions.
            let global = i == 2;
            let cache = if global {
                KvCache::global(batch, KV_HEADS, HEAD_DIM, 64)
            } else {
                KvCache::sliding(batch, KV_HEADS, HEAD_DIM, 2)
            }
            .unwrap_or_else(|e| panic!("{e}"));
            let cache = Value::kv_cache(cache);
            caches.push(cache.clone());
            let s = seed * 100 + i * 20;
            Value::record(
                Record::new()
                    .with("input_layernorm", Value::Weight(weight(&[HIDDEN], s + 1)))
                    .with(
                        "post_attention_layernorm",
                        Value::Weight(weight(&[HIDDEN], s + 2)),
                    )
                    .with(
                        "pre_feedforward_layernorm",
                        Value::Weight(weight(&[HIDDEN], s + 3)),
                    )
                    .with(
                        "post_feedforward_layernorm",
                        Value::Weight(weight(&[HIDDEN], s + 4)),
                    )
                    .with(
                        "q_proj",
                        Value::Weight(weight(&[HEADS * HEAD_DIM, HIDDEN], s + 5)),
                    )
                    .with(
                        "k_proj",
                        Value::Weight(weight(&[KV_HEADS * HEAD_DIM, HIDDEN], s + 6)),
                    )
                    .with(
                        "v_proj",
                        Value::Weight(weight(&[KV_HEADS * HEAD_DIM, HIDDEN], s + 7)),
                    )
                    .with(
                        "o_proj",
                        Value::Weight(weight(&[HIDDEN, HEADS * HEAD_DIM], s + 8)),
                    )
                    .with("q_norm", Value::Weight(weight(&[HEAD_DIM], s + 9)))
                    .with("k_norm", Value::Weight(weight(&[HEAD_DIM], s + 10)))
                    .with("gate_proj", Value::Weight(weight(&[INTER, HIDDEN], s + 11)))
                    .with("up_proj", Value::Weight(weight(&[INTER, HIDDEN], s + 12)))
                    .with("down_proj", Value::Weight(weight(&[HIDDEN, INTER], s + 13)))
                    .with("eps", Value::Scalar(1e-6))
                    .with("n_heads", Value::Scalar(HEADS as f64))
                    .with("n_kv_heads", Value::Scalar(KV_HEADS as f64))
                    .with("rope_theta", Value::Scalar(if global { 1e6 } else { 1e4 }))
                    .with("rope_scale", Value::Scalar(if global { 8.0 } else { 1.0 }))
                    .with("attn_scale", Value::Scalar(1.0 / (HEAD_DIM as f64).sqrt()))
                    .with("cache", cache),
            )
        })
        .collect();
    let model = Record::new()
        .with(
            "embed_tokens",
            Value::Weight(weight(&[VOCAB, HIDDEN], seed)),
        )
        .with(
            "embed_scale",
            Value::Scalar(kernels::round_to_dtype((HIDDEN as f32).sqrt(), DType::BF16).into()),
        )
        .with("norm", Value::Weight(weight(&[HIDDEN], seed + 1)))
        .with("eps", Value::Scalar(1e-6))
        .with("batch", Value::Scalar(batch as f64))
        .with("layers", Value::stack(layers));
    (Value::record(model), caches)
}

fn step(model: &Value, tokens: &[u32], positions: &[u32], pad: &[u32]) -> Inputs {
    Inputs::new()
        .with("model", model.clone())
        .with("tokens", Value::ids(tokens.to_vec()))
        .with("positions", Value::ids(positions.to_vec()))
        .with("pad", Value::ids(pad.to_vec()))
}

#[test]
fn gemma_shaped_engine_prefill_then_decode_matches_a_longer_prefill() {
    let src = include_str!("../engines/tiny_gemma.eng");
    let tokens = [3u32, 7, 1, 9, 4];
    // One prefill of all five tokens.
    let (model_a, caches_a) = gemma_model(1, 1);
    let plan = build(
        src,
        "logits",
        &step(&model_a, &tokens, &[0, 1, 2, 3, 4], &[0]),
    );
    let full = out_tensor(
        plan.run(&step(&model_a, &tokens, &[0, 1, 2, 3, 4], &[0]))
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(full.shape(), &[1, VOCAB]);
    // Prefill of four, then one decode step with the cached keys: the same plan serves both.
    let (model_b, caches_b) = gemma_model(1, 1);
    plan.run(&step(&model_b, &tokens[..4], &[0, 1, 2, 3], &[0]))
        .unwrap_or_else(|e| panic!("{e}"));
    let decoded = out_tensor(
        plan.run(&step(&model_b, &tokens[4..], &[4], &[0]))
            .unwrap_or_else(|e| panic!("{e}")),
    );
    for (a, b) in full.data().iter().zip(decoded.data()) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    // The caches live in the records: the runner sees them advance.
    for c in caches_a.iter().chain(&caches_b) {
        let Value::State(h) = c else { panic!() };
        assert_eq!(h.lock().as_kv().map(KvCache::len), Some(5));
    }
    // The greedy entry on a batch of two with left padding.
    let (model_c, _) = gemma_model(2, 1);
    let tokens2 = [0u32, 3, 7, 5, 6, 2];
    let inputs = step(&model_c, &tokens2, &[1, 0, 1, 0, 1, 2], &[1, 0]);
    let greedy = build(src, "main", &inputs);
    assert_eq!(greedy.return_type(), &Type::Ids);
    match greedy.run(&inputs) {
        Ok(Value::Ids(ids)) => {
            assert_eq!(ids.len(), 2);
            assert!(ids.iter().all(|&i| (i as usize) < VOCAB));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn gemma_shaped_engine_hides_its_private_parts_from_the_view() {
    let c = check(
        include_str!("../engines/tiny_gemma.eng"),
        "tiny_gemma.eng",
        &policy(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let view = c.view();
    assert!(!view.contains("decoder_layer"), "{view}");
    assert!(!view.contains("gate_proj"), "{view}");
    assert!(
        view.contains("let h = scan(f1, x, model.layers, positions, pad);"),
        "{view}"
    );
    assert!(view.contains("// [hidden: 4 lines]"), "{view}");
    assert_eq!(
        c.report()
            .builtins_used
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec![
            "add",
            "argmax",
            "attention",
            "embed",
            "gelu_tanh",
            "last_position",
            "linear",
            "merge_heads",
            "mul",
            "rms_norm",
            "rope",
            "split_batch",
            "split_heads"
        ]
    );
}

#[test]
fn argmax_of_linear_gives_the_ids_of_argmax_over_the_whole_logits() {
    // `direct` is fused into one kernel (nothing else reads the logits); `via_call` is not
    // (the logits cross a function boundary). Both must give argmax over the full logits.
    const SRC: &str = "\
fn direct(x, w) {
  return argmax(linear(x, w));
}
fn via_call(x, w) {
  return argmax(logits(x, w));
}
fn logits(x, w) {
  return linear(x, w);
}
";
    let (x, w) = (tensor(&[4, 8], 3), weight(&[1500, 8], 4));
    let want = kernels::argmax(&kernels::linear(&x, &w).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let inputs = || {
        Inputs::new()
            .with("x", Value::tensor(x.clone()))
            .with("w", Value::Weight(w.clone()))
    };
    for entry in ["direct", "via_call"] {
        let got = build(SRC, entry, &inputs())
            .run(&inputs())
            .unwrap_or_else(|e| panic!("{e}"));
        match got {
            Value::Ids(ids) => assert_eq!(*ids, want, "{entry}"),
            other => panic!("{entry}: not ids: {other:?}"),
        }
    }
}

/// Every key and value a cache holds, in order, as bits.
fn cache_bits(cache: &Value) -> Vec<u32> {
    let Value::State(h) = cache else {
        panic!("not a cache")
    };
    let state = h.lock();
    let kv = state.as_kv().expect("a KV cache");
    let mut bits = Vec::new();
    for b in 0..kv.batch() {
        for col in kv.held() {
            for head in 0..kv.n_kv_heads() {
                for part in [kv.key(b, col, head), kv.value(b, col, head)] {
                    bits.extend(part.expect("a held column").iter().map(|v| v.to_bits()));
                }
            }
        }
    }
    bits
}

#[test]
fn a_run_for_effects_alone_leaves_the_caches_of_a_full_run_bit_for_bit() {
    let src = include_str!("../engines/tiny_gemma.eng");
    let (tokens, pad) = ([0u32, 3, 7, 5, 6, 2, 9, 1], [1u32, 0]);
    let positions = [0u32, 0, 1, 2, 0, 1, 2, 3];
    // Two columns of each row, then the other two: the way the runner chunks a prefill.
    let cols = |v: &[u32], c: std::ops::Range<usize>| -> Vec<u32> {
        v.chunks(4)
            .flat_map(|row| row[c.clone()].to_vec())
            .collect()
    };
    let run = |for_effects: bool| {
        let (model, caches) = gemma_model(2, 3);
        let first = step(&model, &cols(&tokens, 0..2), &cols(&positions, 0..2), &pad);
        let plan = build(src, "logits", &first);
        if for_effects {
            plan.run_for_effects(&first)
                .unwrap_or_else(|e| panic!("{e}"));
        } else {
            plan.run(&first).unwrap_or_else(|e| panic!("{e}"));
        }
        let rest = step(&model, &cols(&tokens, 2..4), &cols(&positions, 2..4), &pad);
        let logits = out_tensor(plan.run(&rest).unwrap_or_else(|e| panic!("{e}")));
        let bits: Vec<Vec<u32>> = caches.iter().map(cache_bits).collect();
        (logits, bits)
    };
    let (full, full_caches) = run(false);
    let (effects, effects_caches) = run(true);
    // Three layers, the sliding ones holding their window of two, the global one all four.
    let held: Vec<usize> = full_caches.iter().map(Vec::len).collect();
    assert_eq!(held, [2 * 2 * 2 * 4, 2 * 2 * 2 * 4, 2 * 4 * 2 * 4]);
    assert_eq!(full_caches, effects_caches);
    let bits = |t: &Tensor| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&full), bits(&effects));
}

#[test]
fn a_run_for_effects_alone_skips_what_only_the_result_needs() {
    // The result would fail at run time (six values do not split into four heads); the
    // attention before it appends to the cache either way.
    let src = "\
fn main(q, k, v, cache, pad, heads) {
  let o = attention(q, k, v, cache, pad, 0.5);
  return split_heads(merge_heads(o), heads);
}
";
    let cache = Value::kv_cache(KvCache::global(1, 1, 6, 8).unwrap_or_else(|e| panic!("{e}")));
    let x = |seed| Value::tensor(tensor(&[1, 2, 1, 6], seed));
    let inputs = Inputs::new()
        .with("q", x(1))
        .with("k", x(2))
        .with("v", x(3))
        .with("cache", cache.clone())
        .with("pad", Value::ids(vec![0u32]))
        .with("heads", Value::Scalar(4.0));
    let plan = build(src, "main", &inputs);
    let len = || {
        let Value::State(h) = &cache else { panic!() };
        h.lock().as_kv().map(KvCache::len)
    };
    plan.run_for_effects(&inputs)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(len(), Some(2));
    let err = plan.run(&inputs).expect_err("four heads of six values");
    assert!(
        matches!(&err.kind, RunErrorKind::BadArgument { op, index: 2, .. } if op == "split_heads"),
        "{err}"
    );
    assert_eq!(err.pos(), Pos::new(3, 10), "{err}");
    assert_eq!(len(), Some(4));
}
