//! Loading Hugging Face Gemma 3 checkpoints: every accepted form, and every refusal naming the
//! file and tensor.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use runner::error::{Diagnose, Exit};
use runner::kernels::DType;
use runner::model::config::{LayerKind, ModelConfig, ModelConfigError};
use runner::model::digest::model_digest;
use runner::model::files::FileError;
use runner::model::synthetic::SyntheticSpec;
use runner::model::tensors::LayerTensor;
use runner::model::weights::{Checkpoint, WeightsError};
use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};

use crate::common::repo::root;

type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn write_tiny(dir: &Path) -> SyntheticSpec {
    let spec = SyntheticSpec::tiny();
    spec.write(dir, 7).unwrap();
    spec
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

fn read_tensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec())))
        .collect()
}

/// Rewrite model.safetensors through `f`.
fn edit_tensors(dir: &Path, f: impl FnOnce(&mut Tensors)) {
    let path = dir.join("model.safetensors");
    let mut map = read_tensors(&path);
    f(&mut map);
    write_tensors(&path, &map);
}

fn write_tensors(path: &Path, map: &Tensors) {
    let views: BTreeMap<String, TensorView<'_>> = map
        .iter()
        .map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(&views, &None, path).unwrap();
}

#[test]
fn loads_a_text_checkpoint_without_converting_weights() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_tiny(dir.path());
    let ck = Checkpoint::load(dir.path()).unwrap();
    assert_eq!(ck.layers.len(), spec.num_layers);
    assert_eq!(ck.embed.dtype(), DType::BF16);
    assert_eq!(ck.layers[0][LayerTensor::QProj].shape(), &[64, 64]);
    assert_eq!(ck.layers[0][LayerTensor::KProj].shape(), &[16, 64]);
    let kinds = &ck.config.layer_kinds;
    assert_eq!(kinds[5], LayerKind::Full);
    assert!(kinds[..5].iter().all(|k| *k == LayerKind::Sliding));
    // Tied head shares the embedding's bytes rather than copying them.
    assert_eq!(ck.lm_head.bytes().as_ptr(), ck.embed.bytes().as_ptr());
    let expected: u64 = spec
        .tensor_shapes()
        .iter()
        .map(|(_, s)| s.iter().product::<usize>() as u64 * 2)
        .sum();
    assert_eq!(ck.weight_bytes, expected);
}

#[test]
fn reads_multimodal_checkpoints_and_skips_vision_tensors() {
    for prefix in ["language_model.model.", "model.language_model."] {
        let dir = tempfile::tempdir().unwrap();
        write_tiny(dir.path());
        edit_tensors(dir.path(), |map| {
            let old = std::mem::take(map);
            for (n, t) in old {
                map.insert(n.replacen("model.", prefix, 1), t);
            }
            map.insert(
                "vision_tower.vision_model.embeddings.patch_embedding.weight".into(),
                (Dtype::I64, vec![2], vec![0; 16]),
            );
            map.insert(
                "multi_modal_projector.mm_input_projection_weight".into(),
                (Dtype::BF16, vec![2], vec![0; 4]),
            );
        });
        edit_config(dir.path(), |c| {
            let text = Value::Object(std::mem::take(c));
            c.insert("model_type".into(), json!("gemma3"));
            c.insert("text_config".into(), text);
            c.insert("vision_config".into(), json!({"hidden_size": 8}));
        });
        let ck = Checkpoint::load(dir.path()).unwrap_or_else(|e| panic!("{prefix}: {e}"));
        assert_eq!(ck.config.hidden_size, 64);
    }
}

#[test]
fn reads_sharded_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let path = dir.path().join("model.safetensors");
    let all = read_tensors(&path);
    let mut shards: [Tensors; 2] = Default::default();
    let mut weight_map = serde_json::Map::new();
    for (i, (n, t)) in all.into_iter().enumerate() {
        let shard = i % 2;
        weight_map.insert(
            n.clone(),
            json!(format!("model-0000{}-of-00002.safetensors", shard + 1)),
        );
        shards[shard].insert(n, t);
    }
    for (i, shard) in shards.iter().enumerate() {
        write_tensors(
            &dir.path()
                .join(format!("model-0000{}-of-00002.safetensors", i + 1)),
            shard,
        );
    }
    std::fs::remove_file(&path).unwrap();
    let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let ck = Checkpoint::load(dir.path()).unwrap();
    assert_eq!(ck.layers.len(), 6);
}

#[test]
fn rejects_index_naming_a_file_outside_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let index = json!({"weight_map": {"model.norm.weight": "../evil.safetensors"}});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(matches!(err, WeightsError::Index { .. }), "{err}");
    assert!(err.to_string().contains("../evil.safetensors"), "{err}");
}

#[test]
fn rejects_missing_tensor_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    edit_tensors(dir.path(), |m| {
        m.remove("model.layers.3.mlp.up_proj.weight");
    });
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Missing { name, .. } if name == "model.layers.3.mlp.up_proj.weight"),
        "{err}"
    );
}

#[test]
fn rejects_wrong_shape_naming_tensor_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    edit_tensors(dir.path(), |m| {
        let t = m.get_mut("model.layers.0.self_attn.k_proj.weight").unwrap();
        t.1 = vec![32, 32];
    });
    let err = Checkpoint::load(dir.path()).unwrap_err();
    match &err {
        WeightsError::Shape {
            name,
            expected,
            found,
            ..
        } => {
            assert_eq!(name, "model.layers.0.self_attn.k_proj.weight");
            assert_eq!(expected, &vec![16, 64]);
            assert_eq!(found, &vec![32, 32]);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn rejects_unsupported_dtype() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    edit_tensors(dir.path(), |m| {
        let t = m.get_mut("model.norm.weight").unwrap();
        t.0 = Dtype::I16;
    });
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Dtype { name, .. } if name == "model.norm.weight"),
        "{err}"
    );
}

#[test]
fn a_directory_without_config_json_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Config(ModelConfigError::Read { path, .. }) if path.ends_with("config.json")),
        "{err:?}"
    );
    assert_eq!(err.exit(), Exit::BadInput);
    assert!(err.hint().unwrap().contains("containing config.json"));
}

#[test]
fn rejects_truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let path = dir.path().join("model.safetensors");
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 100).unwrap();
    drop(f);
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(matches!(err, WeightsError::Corrupt { .. }), "{err}");
    for garbage in [
        &b""[..],
        b"\x10\0\0\0\0\0\0\0{not json",
        b"\xff\xff\xff\xff\xff\xff\xff\xff",
    ] {
        std::fs::write(&path, garbage).unwrap();
        let err = Checkpoint::load(dir.path()).unwrap_err();
        assert!(matches!(err, WeightsError::Corrupt { .. }), "{err}");
    }
}

#[test]
fn rejects_weights_for_more_layers_than_configured() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    edit_config(dir.path(), |c| {
        c.insert("num_hidden_layers".into(), json!(5));
        c.insert("layer_types".into(), json!(vec!["sliding_attention"; 5]));
    });
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Unexpected { name, .. } if name.starts_with("model.layers.5.")),
        "{err}"
    );
}

fn config(v: Value) -> Result<ModelConfig, ModelConfigError> {
    ModelConfig::from_value(Path::new("config.json"), &v)
}

#[test]
fn old_sliding_window_pattern_and_new_layer_types_agree() {
    let mut old = SyntheticSpec::tiny().config_json();
    let new = old.clone();
    let o = old.as_object_mut().unwrap();
    o.remove("layer_types");
    o.insert("sliding_window_pattern".into(), json!(6));
    assert_eq!(
        config(old).unwrap().layer_kinds,
        config(new).unwrap().layer_kinds
    );
    // Pattern absent too: HF's default of 6.
    let mut bare = SyntheticSpec::tiny().config_json();
    bare.as_object_mut().unwrap().remove("layer_types");
    let kinds = config(bare).unwrap().layer_kinds;
    assert_eq!(kinds.iter().filter(|k| **k == LayerKind::Full).count(), 1);
}

#[test]
fn rope_scaling_in_every_form() {
    let base = SyntheticSpec::tiny().config_json();
    let with = |k: &str, v: Value| {
        let mut c = base.clone();
        c.as_object_mut().unwrap().insert(k.into(), v);
        config(c).unwrap()
    };
    let old = with(
        "rope_scaling",
        json!({"rope_type": "linear", "factor": 8.0}),
    );
    assert_eq!(old.rope_full.linear_factor, 8.0);
    assert_eq!(old.rope_full.theta, 1_000_000.0);
    assert_eq!(old.rope_sliding.linear_factor, 1.0);
    assert_eq!(old.rope_sliding.theta, 10_000.0);
    let per_type = with(
        "rope_parameters",
        json!({
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}
        }),
    );
    assert_eq!(per_type.rope_full, old.rope_full);
    assert_eq!(per_type.rope_sliding, old.rope_sliding);
    let mut c = base.clone();
    c["rope_scaling"] = json!({"rope_type": "yarn", "factor": 8.0});
    let err = config(c).unwrap_err();
    assert!(err.to_string().contains("rope_scaling.rope_type"), "{err}");
}

#[test]
fn rejects_numerics_this_runner_does_not_implement() {
    for (field, value) in [
        ("final_logit_softcapping", json!(30.0)),
        ("attn_logit_softcapping", json!(50.0)),
        ("attention_bias", json!(true)),
        ("hidden_activation", json!("relu")),
        ("model_type", json!("llama")),
    ] {
        let mut c = SyntheticSpec::tiny().config_json();
        c[field] = value;
        let err = config(c).unwrap_err();
        assert!(
            matches!(&err, ModelConfigError::Unsupported { field: f, .. } if f == field),
            "{field}: {err}"
        );
    }
}

#[test]
fn rejects_inconsistent_head_counts_and_layer_types() {
    let mut c = SyntheticSpec::tiny().config_json();
    c["num_key_value_heads"] = json!(3);
    let err = config(c).unwrap_err();
    assert!(err.to_string().contains("num_key_value_heads"), "{err}");
    let mut c = SyntheticSpec::tiny().config_json();
    c["layer_types"] = json!(["sliding_attention"]);
    let err = config(c).unwrap_err();
    assert!(err.to_string().contains("layer_types"), "{err}");
    let mut c = SyntheticSpec::tiny().config_json();
    c["hidden_size"] = json!(-4);
    assert!(config(c).unwrap_err().to_string().contains("hidden_size"));
}

#[test]
fn rejects_duplicate_keys_in_config() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    std::fs::write(
        dir.path().join("config.json"),
        br#"{"hidden_size": 64, "hidden_size": 128}"#,
    )
    .unwrap();
    let err = Checkpoint::load(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("duplicate key `hidden_size`"),
        "{err}"
    );
}

#[test]
fn generation_config_sets_the_stop_tokens() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    assert_eq!(
        ModelConfig::load(dir.path()).unwrap().eos_token_ids,
        vec![1, 106]
    );
    std::fs::write(
        dir.path().join("generation_config.json"),
        r#"{"eos_token_id": [1, 50]}"#,
    )
    .unwrap();
    assert_eq!(
        ModelConfig::load(dir.path()).unwrap().eos_token_ids,
        vec![1, 50]
    );
}

/// The HF-made fixtures load, and our reading of their config.json agrees with what
/// transformers computed (recorded in expected.json).
#[test]
fn reads_every_reference_fixture_as_transformers_does() {
    let models = root().join("tests/fixtures/models");
    let mut seen = 0;
    for entry in std::fs::read_dir(&models).unwrap() {
        let dir = entry.unwrap().path();
        let expected: Value =
            serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        let m = &expected["model"];
        let ck = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let c = &ck.config;
        let name = dir.display();
        assert_eq!(
            c.hidden_size as u64,
            m["hidden_size"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            c.num_kv_heads as u64,
            m["num_key_value_heads"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(c.head_dim as u64, m["head_dim"].as_u64().unwrap(), "{name}");
        assert_eq!(
            c.sliding_window as u64,
            m["sliding_window"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            c.query_pre_attn_scalar as f64,
            m["query_pre_attn_scalar"].as_f64().unwrap(),
            "{name}"
        );
        let kinds: Vec<&str> = c
            .layer_kinds
            .iter()
            .map(|k| match k {
                LayerKind::Sliding => "sliding_attention",
                LayerKind::Full => "full_attention",
            })
            .collect();
        let want: Vec<&str> = m["layer_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(kinds, want, "{name}");
        let factor = m["rope"]["full_attention"]["factor"]
            .as_f64()
            .unwrap_or(1.0);
        assert_eq!(c.rope_full.linear_factor as f64, factor, "{name}");
        assert_eq!(
            c.rope_full.theta as f64,
            m["rope"]["full_attention"]["rope_theta"].as_f64().unwrap(),
            "{name}"
        );
        assert_eq!(
            c.rope_sliding.theta as f64,
            m["rope"]["sliding_attention"]["rope_theta"]
                .as_f64()
                .unwrap(),
            "{name}"
        );
        seen += 1;
    }
    assert_eq!(seen, 5);
}

#[test]
fn released_weight_pages_read_back_unchanged() {
    // The output head's screen hands the head's pages back to the OS after reading them; the
    // embedding lookup reads the same (tied) bytes afterwards.
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let ck = Checkpoint::load(dir.path()).unwrap();
    let before = ck.embed.bytes().to_vec();
    ck.embed.release(0..ck.embed.numel());
    assert_eq!(ck.embed.bytes(), &before[..]);
    let layer = &ck.layers[0][LayerTensor::QProj];
    let before = layer.bytes().to_vec();
    layer.release(3..layer.numel() - 5);
    assert_eq!(layer.bytes(), &before[..]);
}

#[test]
fn layer_weights_hold_the_files_bytes_after_packing() {
    // The loader copies layer projections into huge pages; the copy must be byte-identical.
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let ck = Checkpoint::load(dir.path()).unwrap();
    let stored = read_tensors(&dir.path().join("model.safetensors"));
    for (i, l) in ck.layers.iter().enumerate() {
        // Every tensor, packed projections and mapped norms alike.
        for (spec, w) in l.iter() {
            let key = format!("model.layers.{i}.{}", spec.hf_suffix);
            let (_, shape, bytes) = stored.get(&key).unwrap_or_else(|| panic!("{key}"));
            assert_eq!(w.shape(), &shape[..], "{key}");
            assert_eq!(w.bytes(), &bytes[..], "{key}");
        }
    }
}

// ---- loading the very files the model digest hashed ----

/// Overwrite the first byte of `path` with its own value: the bytes stay the same, but the file
/// was written (and without truncating it, which a mapping of it would not survive).
fn touch_in_place(path: &Path) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let first = std::fs::read(path).unwrap()[0];
    f.write_all_at(&[first], 0).unwrap();
}

#[test]
fn sealed_load_reads_the_hashed_files_even_after_they_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let original = read_tensors(&dir.path().join("model.safetensors"));
    let digest = model_digest(dir.path()).unwrap();
    // Swap other weights in under the same name (a new file renamed over the old one), and a
    // config with another stop token.
    let swapped = dir.path().join("swapped.safetensors");
    let mut other = original.clone();
    for (_, _, bytes) in other.values_mut() {
        bytes.iter_mut().for_each(|b| *b = b.wrapping_add(1));
    }
    write_tensors(&swapped, &other);
    std::fs::rename(&swapped, dir.path().join("model.safetensors")).unwrap();
    let ck = Checkpoint::load_from(digest.checkpoint_files()).unwrap();
    let embed = &original["model.embed_tokens.weight"].2;
    assert_eq!(ck.embed.bytes(), &embed[..]);
    assert_eq!(
        ck.layers[1][LayerTensor::GateProj].bytes(),
        &original["model.layers.1.mlp.gate_proj.weight"].2[..]
    );
    // Unlinking the hashed file moved its ctime, which a write would also have done: the seal
    // cannot tell them apart, so a run would sign nothing.
    assert!(matches!(
        ck.seal.check_unchanged(),
        Err(FileError::Changed { .. })
    ));
    // By path, the new bytes load.
    let by_path = Checkpoint::load(dir.path()).unwrap();
    assert_ne!(by_path.embed.bytes(), &embed[..]);
}

#[test]
fn sealed_load_refuses_a_config_rewritten_after_hashing() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let digest = model_digest(dir.path()).unwrap();
    // In place (same inode): the file the digest holds open now has other bytes.
    let path = dir.path().join("config.json");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push(' ');
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let err = Checkpoint::load_from(digest.checkpoint_files()).unwrap_err();
    assert!(
        matches!(&err, WeightsError::File(FileError::Changed { path: p }) if *p == path),
        "{err:?}"
    );
    assert_eq!(err.exit(), Exit::Refused);
    assert!(err
        .to_string()
        .contains("changed after its digest was taken"));
}

#[test]
fn a_weights_file_written_after_hashing_breaks_the_seal() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny(dir.path());
    let weights = dir.path().join("model.safetensors");
    // Written just before hashing, then again right after: where ctime is coarse (kernels
    // before 6.13), the second write lands within a clock tick of the first unless the stamp
    // waited for the tick to pass.
    for _ in 0..5 {
        touch_in_place(&weights);
        let digest = model_digest(dir.path()).unwrap();
        let ck = Checkpoint::load_from(digest.checkpoint_files()).unwrap();
        ck.seal.check_unchanged().unwrap();
        touch_in_place(&weights);
        let err = ck.seal.check_unchanged().unwrap_err();
        assert!(
            matches!(&err, FileError::Changed { path } if *path == weights),
            "{err:?}"
        );
        assert_eq!(err.exit(), Exit::Refused);
    }
}
