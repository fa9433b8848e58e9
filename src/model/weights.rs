//! Gemma 3 weights from a Hugging Face safetensors checkpoint, memory-mapped.
//!
//! Files are mapped read-only and every tensor is handed out as a [`Weight`] view in its stored
//! dtype; nothing is converted to f32 here. The layers' projections are then copied, unchanged,
//! into huge pages ([`pack`](super::pack)). Names are resolved under whichever text prefix the
//! checkpoint uses (`model.`, `language_model.model.` or `model.language_model.`); vision tensors
//! of multimodal checkpoints are ignored; any other tensor the configuration does not account
//! for is an error, as is a missing tensor, a wrong shape or an unsupported dtype.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::tensor::{Dtype as StDtype, Metadata};
use safetensors::SafeTensors;

use super::config::{ModelConfig, ModelConfigError};
use super::files::{CheckpointFiles, FileError, OpenFile, Seal};
use super::gguf::{GgufError, Strings};
pub use super::tensors::LayerWeights;
use super::tensors::LAYER_TENSORS;
use crate::error::{Diagnose, Exit};
use crate::kernels::tensor::{Backing, WeightBytes};
use crate::kernels::{DType, Weight};
use crate::memory::MappedFile;
use crate::primitives::canonical::parse_strict;

/// The single-file checkpoint name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Text-model prefixes, in the order they are tried.
const TEXT_PREFIXES: [&str; 3] = ["model.language_model.", "language_model.model.", "model."];
/// Tensors under these prefixes belong to the vision tower and are skipped.
const VISION_PREFIXES: [&str; 4] = [
    "vision_tower.",
    "multi_modal_projector.",
    "model.vision_tower.",
    "model.multi_modal_projector.",
];

/// Why a checkpoint's weights were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WeightsError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ModelConfigError),
    /// A file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A checkpoint file could not be read, or differs from what the model digest hashed.
    #[error(transparent)]
    File(#[from] FileError),
    /// Neither `model.safetensors` nor `model.safetensors.index.json` exists.
    #[error("{dir} holds no {SINGLE_FILE} or {INDEX_FILE}")]
    NoWeights {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// The safetensors header is corrupt or the file is truncated.
    #[error("{path} is not a valid safetensors file: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the safetensors reader said.
        detail: String,
    },
    /// The shard index is malformed.
    #[error("{path}: {detail}")]
    Index {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A tensor the model needs is absent.
    #[error("{dir}: tensor `{name}` is missing")]
    Missing {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Full tensor name.
        name: String,
    },
    /// A tensor's shape disagrees with config.json.
    #[error("{path}: tensor `{name}` has shape {found:?}, config.json implies {expected:?}")]
    Shape {
        /// The file holding it.
        path: PathBuf,
        /// Full tensor name.
        name: String,
        /// Shape from the configuration.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A tensor is stored in a dtype the kernels do not read.
    #[error("{path}: tensor `{name}` has dtype {dtype}; supported are BF16, F16 and F32")]
    Dtype {
        /// The file holding it.
        path: PathBuf,
        /// Full tensor name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// A text tensor the configuration does not account for (e.g. more layers than configured).
    #[error("{path}: tensor `{name}` is not part of the model config.json describes")]
    Unexpected {
        /// The file holding it.
        path: PathBuf,
        /// Full tensor name.
        name: String,
    },
    /// The GGUF container is malformed or holds a type the kernels do not read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The directory holds weights of two kinds, or several GGUF files.
    #[error("{dir} holds {what}, so which model it is would be a guess")]
    Ambiguous {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What it holds.
        what: String,
    },
    /// No tensor name starts with a known text-model prefix.
    #[error("{dir}: no embedding tensor found under any of the prefixes {TEXT_PREFIXES:?}")]
    NoTextModel {
        /// The checkpoint directory.
        dir: PathBuf,
    },
}

impl Diagnose for WeightsError {
    fn exit(&self) -> Exit {
        match self {
            WeightsError::Config(e) => e.exit(),
            WeightsError::File(e) => e.exit(),
            WeightsError::Gguf(e) => e.exit(),
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            WeightsError::Config(e) => e.hint(),
            WeightsError::File(e) => e.hint(),
            WeightsError::Gguf(e) => e.hint(),
            WeightsError::Ambiguous { .. } => {
                Some("give the .gguf file itself, or move the other weights elsewhere".into())
            }
            WeightsError::Corrupt { .. } => {
                Some("the file may be truncated; copy or download it again".into())
            }
            WeightsError::Shape { .. } | WeightsError::Unexpected { .. } => {
                Some("config.json and the weights come from different models".into())
            }
            WeightsError::Dtype { .. } => Some("convert the checkpoint to bf16".into()),
            _ => None,
        }
    }
}

/// A loaded checkpoint: configuration and memory-mapped weights.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The validated configuration.
    pub config: ModelConfig,
    /// `embed_tokens.weight` `[vocab, hidden]`.
    pub embed: Weight,
    /// Decoder layers in order.
    pub layers: Vec<LayerWeights>,
    /// Final `norm.weight` `[hidden]`.
    pub norm: Weight,
    /// Output projection `[vocab, hidden]`: the embedding itself when tied.
    pub lm_head: Weight,
    /// Total bytes of the weights the model uses, as stored (blocks, for a GGUF file).
    pub weight_bytes: u64,
    /// The vocabulary a GGUF file carries (`tokenizer.ggml.tokens`), to be checked against the
    /// tokenizer a text job uses; `None` for safetensors checkpoints.
    pub vocabulary: Option<Arc<Strings>>,
    /// The files it was read from, to show they were not written since.
    pub seal: Seal,
}

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    range: std::ops::Range<usize>,
}

struct Files {
    dir: PathBuf,
    paths: Vec<PathBuf>,
    maps: Vec<Backing>,
    entries: BTreeMap<String, Entry>,
}

pub(crate) fn map_file(open: &OpenFile) -> Result<Backing, WeightsError> {
    let map = MappedFile::map(&open.file).map_err(|source| WeightsError::Read {
        path: open.path.clone(),
        source,
    })?;
    Ok(Arc::new(FileBacked(map)))
}

/// Weights read straight from a checkpoint file's mapping.
struct FileBacked(MappedFile);

impl WeightBytes for FileBacked {
    fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }

    fn release(&self, range: std::ops::Range<usize>) {
        self.0.release(range);
    }

    fn copy_to(&self, at: usize, out: &mut [u8]) {
        self.0.copy_to(at, out);
    }
}

fn dtype_of(d: StDtype) -> Option<DType> {
    match d {
        StDtype::BF16 => Some(DType::BF16),
        StDtype::F16 => Some(DType::F16),
        StDtype::F32 => Some(DType::F32),
        _ => None,
    }
}

impl Files {
    fn open(source: &mut CheckpointFiles) -> Result<Files, WeightsError> {
        let dir = source.dir().to_owned();
        let mut files = Files {
            dir: dir.clone(),
            paths: Vec::new(),
            maps: Vec::new(),
            entries: BTreeMap::new(),
        };
        let index = dir.join(INDEX_FILE);
        if source.exists(INDEX_FILE) {
            let shards = read_index(&index, &source.read(INDEX_FILE)?)?;
            for (shard, names) in shards {
                let fi = files.add_file(&*source.open(&shard)?)?;
                for name in names {
                    match files.entries.get(&name) {
                        Some(e) if e.file == fi => {}
                        _ => {
                            return Err(WeightsError::Index {
                                path: index.clone(),
                                detail: format!(
                                    "tensor `{name}` is mapped to {shard} but not found there"
                                ),
                            })
                        }
                    }
                }
            }
        } else if source.exists(SINGLE_FILE) {
            files.add_file(&*source.open(SINGLE_FILE)?)?;
        } else {
            return Err(WeightsError::NoWeights { dir });
        }
        Ok(files)
    }

    fn add_file(&mut self, open: &OpenFile) -> Result<usize, WeightsError> {
        let path = open.path.as_path();
        let map = map_file(open)?;
        let corrupt = |detail: String| WeightsError::Corrupt {
            path: path.to_owned(),
            detail,
        };
        let bytes: &[u8] = map.bytes();
        let (header_len, metadata): (usize, Metadata) =
            SafeTensors::read_metadata(bytes).map_err(|e| corrupt(format!("{e:?}")))?;
        let base = 8 + header_len;
        let fi = self.paths.len();
        for (name, info) in metadata.tensors() {
            let (start, end) = info.data_offsets;
            let range = base + start..base + end;
            if range.end > bytes.len() {
                return Err(corrupt(format!(
                    "tensor `{name}` extends past the end of the file"
                )));
            }
            let Some(dtype) = dtype_of(info.dtype) else {
                if is_vision(&name) {
                    continue;
                }
                return Err(WeightsError::Dtype {
                    path: path.to_owned(),
                    name,
                    dtype: format!("{:?}", info.dtype),
                });
            };
            if self.entries.contains_key(&name) {
                return Err(corrupt(format!(
                    "tensor `{name}` appears in more than one file"
                )));
            }
            self.entries.insert(
                name,
                Entry {
                    file: fi,
                    dtype,
                    shape: info.shape.clone(),
                    range,
                },
            );
        }
        self.paths.push(path.to_owned());
        self.maps.push(map);
        Ok(fi)
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<Weight, WeightsError> {
        let entry = self
            .entries
            .remove(name)
            .ok_or_else(|| WeightsError::Missing {
                dir: self.dir.clone(),
                name: name.to_owned(),
            })?;
        let path = &self.paths[entry.file];
        if entry.shape != expected {
            return Err(WeightsError::Shape {
                path: path.clone(),
                name: name.to_owned(),
                expected: expected.to_vec(),
                found: entry.shape,
            });
        }
        Weight::new(
            entry.dtype,
            entry.shape,
            Arc::clone(&self.maps[entry.file]),
            entry.range,
        )
        .map_err(|e| WeightsError::Corrupt {
            path: path.clone(),
            detail: format!("tensor `{name}`: {e}"),
        })
    }
}

fn is_vision(name: &str) -> bool {
    VISION_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Shard file name -> tensor names, from `model.safetensors.index.json`.
fn read_index(
    path: &Path,
    bytes: &[u8],
) -> Result<BTreeMap<String, BTreeSet<String>>, WeightsError> {
    let bad = |detail: String| WeightsError::Index {
        path: path.to_owned(),
        detail,
    };
    let value = parse_strict(bytes).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("field `weight_map` must be an object of tensor name -> file".into()))?;
    let mut shards: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("field `weight_map.{name}` must be a file name")))?;
        let plain = Path::new(file).file_name().is_some_and(|f| f == file);
        if !plain || !file.ends_with(".safetensors") {
            return Err(bad(format!(
                "field `weight_map.{name}` = {file:?} must name a .safetensors file in the same directory"
            )));
        }
        shards
            .entry(file.to_owned())
            .or_default()
            .insert(name.clone());
    }
    Ok(shards)
}

impl Checkpoint {
    /// Load `DIR/config.json` and its weights, opening them by path.
    pub fn load(dir: &Path) -> Result<Checkpoint, WeightsError> {
        Checkpoint::load_from(CheckpointFiles::by_path(dir))
    }

    /// Load from `source`: in `exec`, the very files the model digest hashed. A `.gguf` file
    /// (given itself, or alone in its directory) is read as GGUF, anything else as a Hugging
    /// Face safetensors checkpoint.
    pub fn load_from(mut source: CheckpointFiles) -> Result<Checkpoint, WeightsError> {
        let ggufs = source.gguf_names();
        if let Some(first) = ggufs.first() {
            let ambiguous = |what: String| WeightsError::Ambiguous {
                dir: source.dir().to_owned(),
                what,
            };
            if ggufs.len() > 1 {
                return Err(ambiguous(format!("{} .gguf files", ggufs.len())));
            }
            if source.exists(SINGLE_FILE) || source.exists(INDEX_FILE) {
                return Err(ambiguous(
                    "both a .gguf file and safetensors weights".into(),
                ));
            }
            let name = first.clone();
            return super::gguf::load(source, &name);
        }
        let config = read_config(&mut source)?;
        let mut files = Files::open(&mut source)?;
        let prefix = files.text_prefix()?;
        let c = &config;
        let embed = files.take(
            &format!("{prefix}embed_tokens.weight"),
            &[c.vocab_size, c.hidden_size],
        )?;
        let layers = (0..c.num_layers())
            .map(|i| files.take_layer(&format!("{prefix}layers.{i}."), c))
            .collect::<Result<Vec<_>, _>>()?;
        let norm = files.take(&format!("{prefix}norm.weight"), &[c.hidden_size])?;
        let lm_head = files.take_head(c, &embed)?;
        files.nothing_left()?;
        Ok(Checkpoint::assemble(
            config, embed, layers, norm, lm_head, None, source,
        ))
    }

    /// A checkpoint of these weights: the projections packed ([`super::pack`]), the bytes
    /// counted, the files sealed.
    pub(crate) fn assemble(
        config: ModelConfig,
        embed: Weight,
        mut layers: Vec<LayerWeights>,
        norm: Weight,
        lm_head: Weight,
        vocabulary: Option<Strings>,
        source: CheckpointFiles,
    ) -> Checkpoint {
        super::pack::pack(
            layers
                .iter_mut()
                .flat_map(LayerWeights::projections_mut)
                .collect(),
        );
        let mut weight_bytes = [&embed, &norm]
            .into_iter()
            .chain(layers.iter().flat_map(|l| l.iter().map(|(_, w)| w)))
            .map(|w| w.bytes().len() as u64)
            .sum::<u64>();
        if !config.tie_word_embeddings {
            weight_bytes += lm_head.bytes().len() as u64;
        }
        Checkpoint {
            config,
            embed,
            layers,
            norm,
            lm_head,
            weight_bytes,
            vocabulary: vocabulary.map(Arc::new),
            seal: source.into_seal(),
        }
    }
}

/// `config.json` (and `generation_config.json`) read through `source`. A missing or unreadable
/// config.json is a configuration error (exit 2, with its hint); one that changed since it was
/// hashed stays a refusal.
fn read_config(source: &mut CheckpointFiles) -> Result<ModelConfig, WeightsError> {
    let dir = source.dir().to_owned();
    ModelConfig::load_with(&dir, |name| {
        if !source.exists(name) {
            return Ok(None);
        }
        source.read(name).map(Some).map_err(|e| match e {
            FileError::Read { path, source } => ModelConfigError::Read { path, source }.into(),
            changed => WeightsError::File(changed),
        })
    })
}

/// Names of a stored output head, tried in order.
const HEAD_NAMES: [&str; 2] = ["lm_head.weight", "language_model.lm_head.weight"];

impl Files {
    /// The text-model prefix this checkpoint's names use.
    fn text_prefix(&self) -> Result<&'static str, WeightsError> {
        TEXT_PREFIXES
            .iter()
            .copied()
            .find(|p| {
                self.entries
                    .contains_key(&format!("{p}embed_tokens.weight"))
            })
            .ok_or_else(|| WeightsError::NoTextModel {
                dir: self.dir.clone(),
            })
    }

    /// Every tensor of the layer whose names start with `prefix`.
    fn take_layer(&mut self, prefix: &str, c: &ModelConfig) -> Result<LayerWeights, WeightsError> {
        let dims = c.dims();
        let weights = LAYER_TENSORS
            .iter()
            .map(|t| self.take(&format!("{prefix}{}", t.hf_suffix), &t.shape(&dims)))
            .collect::<Result<Vec<_>, _>>()?;
        // One weight per row of the table, so this is always `Some`.
        LayerWeights::new(weights).ok_or_else(|| WeightsError::Missing {
            dir: self.dir.clone(),
            name: format!("{prefix}*"),
        })
    }

    /// The output head: the embedding when tied (HF then ignores a stored copy), else the
    /// stored head.
    fn take_head(&mut self, c: &ModelConfig, embed: &Weight) -> Result<Weight, WeightsError> {
        if c.tie_word_embeddings {
            for n in HEAD_NAMES {
                self.entries.remove(n);
            }
            return Ok(embed.clone());
        }
        let name = HEAD_NAMES
            .iter()
            .find(|n| self.entries.contains_key(**n))
            .copied()
            .unwrap_or(HEAD_NAMES[0]);
        self.take(name, &[c.vocab_size, c.hidden_size])
    }

    /// Refuse a text tensor the configuration does not account for.
    fn nothing_left(&self) -> Result<(), WeightsError> {
        match self.entries.iter().find(|(n, _)| !is_vision(n)) {
            Some((name, entry)) => Err(WeightsError::Unexpected {
                path: self.paths[entry.file].clone(),
                name: name.clone(),
            }),
            None => Ok(()),
        }
    }
}
