//! The model digest: one BLAKE3 digest naming the exact checkpoint a certificate approves.
//!
//! Scheme (version 1), over a checkpoint directory `DIR`:
//!
//! 1. The counted files are the entries at the top level of `DIR` (no recursion) named
//!    `config.json`, `generation_config.json`, `tokenizer.json`, `tokenizer_config.json`, or
//!    ending in `.safetensors`, `.safetensors.index.json` or `.gguf`. Everything else is ignored.
//!    Either `config.json` and at least one `*.safetensors` file are required (a Hugging Face
//!    checkpoint), or exactly one `*.gguf` file and no `*.safetensors` (a GGUF checkpoint).
//!    A `.gguf` file given itself, rather than its directory, is a checkpoint of that one
//!    file: the list in step 4 holds it alone, so the digest is the same as for a directory
//!    holding only it.
//! 2. Each counted entry must be a regular file, or a symbolic link that resolves to a regular
//!    file inside `DIR`; links leading outside `DIR`, broken links, directories and special files
//!    are refused (the digest must describe what is in the directory, not elsewhere).
//! 3. Each file is hashed with plain BLAKE3 over its bytes (memory-mapped, so multi-GB weights are
//!    not read into RAM), giving `{"name": file name, "size": bytes, "blake3": 64 hex}`.
//! 4. The list is sorted by name (byte order), serialised as RFC 8785 canonical JSON, e.g.
//!    `[{"blake3":"…","name":"config.json","size":655},{"blake3":"…","name":"model.safetensors",
//!    "size":536223056}]`, and hashed with BLAKE3 in derive-key mode under
//!    [`MODEL_DIGEST_CONTEXT`]. That is the model digest.
//!
//! The result does not depend on directory listing order, timestamps, permissions, or files that
//! are not part of the checkpoint (READMEs, `.git`), but any change to a counted file's bytes or
//! name, or adding or removing one, changes it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::files::{is_gguf_name, split_single, CheckpointFiles, FileStamp, OpenFile};
use crate::error::{Diagnose, Exit};
use crate::memory::MappedFile;
use crate::primitives::bounded_read::{open_regular, ReadError};
use crate::primitives::canonical::to_canonical_from;
use crate::primitives::digest::Digest;

/// BLAKE3 derive-key context for the model digest.
pub const MODEL_DIGEST_CONTEXT: &str = "runner 2026-11 model digest v1";

/// Files counted by exact name.
pub const COUNTED_NAMES: [&str; 4] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// Largest file size canonical JSON can carry exactly (2^53).
const MAX_SIZE: u64 = 1 << 53;

/// One counted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelFile {
    /// File name within the directory.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Plain BLAKE3 of the bytes.
    pub blake3: Digest,
}

/// The model digest and the files it covers.
#[derive(Debug, Clone)]
pub struct ModelDigest {
    /// The digest certificates bind.
    pub digest: Digest,
    /// The counted files, sorted by name.
    pub files: Vec<ModelFile>,
    /// The same files, still open, as they were hashed: what `exec` loads
    /// ([`CheckpointFiles::sealed`]).
    pub opened: BTreeMap<String, Arc<OpenFile>>,
    /// The directory the files are named in (the model path, or a single file's directory).
    pub dir: PathBuf,
}

impl ModelDigest {
    /// The checkpoint's files as this digest saw them: loading from these reads and maps the
    /// hashed files themselves, whatever the directory holds by now.
    pub fn checkpoint_files(&self) -> CheckpointFiles {
        CheckpointFiles::sealed(&self.dir, self.opened.clone())
    }
}

/// Why a checkpoint directory could not be digested.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelDigestError {
    /// The directory could not be listed.
    #[error("cannot read model directory {}: {source}", dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A required file is missing.
    #[error("model directory {} has no {what}", dir.display())]
    Missing {
        /// The directory.
        dir: PathBuf,
        /// `config.json` or `*.safetensors file`.
        what: &'static str,
    },
    /// A directory holds several GGUF files, or GGUF and safetensors weights together.
    #[error("model directory {} holds {what}, so which model it is would be a guess", dir.display())]
    Ambiguous {
        /// The directory.
        dir: PathBuf,
        /// What it holds.
        what: String,
    },
    /// A file given as the model that is not a `.gguf` file.
    #[error("model {} is a file but not a .gguf file", path.display())]
    NotGguf {
        /// The file.
        path: PathBuf,
    },
    /// A counted entry is a symbolic link leading outside the directory.
    #[error("model file {} is a symbolic link to {}, outside the model directory", path.display(), target.display())]
    SymlinkOutside {
        /// The link.
        path: PathBuf,
        /// Where it resolves.
        target: PathBuf,
    },
    /// A counted entry is not a regular file.
    #[error("model file {} is {kind}, not a regular file", path.display())]
    NotRegular {
        /// The entry.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A weights-like entry whose name is not UTF-8 cannot be listed in the digest.
    #[error("model directory entry {} has a name that is not UTF-8", path.display())]
    NonUtf8Name {
        /// The entry.
        path: PathBuf,
    },
    /// Larger than canonical JSON can state exactly.
    #[error("model file {} is larger than 2^53 bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Reading a counted file failed.
    #[error("cannot read model file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file's size changed between listing and hashing.
    #[error("model file {} changed while it was being hashed", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
}

impl Diagnose for ModelDigestError {
    fn exit(&self) -> Exit {
        match self {
            ModelDigestError::Read { .. } | ModelDigestError::Changed { .. } => Exit::Failure,
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ModelDigestError::ReadDir { dir, .. } => format!(
                "check the path {}: the model is a Hugging Face checkpoint directory \
                 (config.json and *.safetensors weights) or a .gguf file",
                dir.display()
            ),
            ModelDigestError::Missing { .. } | ModelDigestError::NotGguf { .. } => {
                "the model must be a Hugging Face checkpoint directory (config.json and \
                 *.safetensors weights), a .gguf file, or a directory holding exactly one"
                    .into()
            }
            ModelDigestError::Ambiguous { .. } => {
                "give the .gguf file itself, or move the other weights elsewhere".into()
            }
            ModelDigestError::SymlinkOutside { .. } => "copy the files into the directory \
                (`cp -L` resolves links, e.g. from a Hugging Face cache snapshot)"
                .into(),
            ModelDigestError::NotRegular { .. } | ModelDigestError::NonUtf8Name { .. } => {
                "move or rename the entry; checkpoint files must be plain files".into()
            }
            ModelDigestError::TooLarge { .. } => "split the weights into shards".into(),
            ModelDigestError::Read { .. } => "check the file's permissions".into(),
            ModelDigestError::Changed { .. } => {
                "wait until the checkpoint is completely written, then retry".into()
            }
        })
    }
}

/// Whether a top-level file name is part of the model digest.
pub fn is_counted(name: &str) -> bool {
    COUNTED_NAMES.contains(&name)
        || name.ends_with(".safetensors")
        || name.ends_with(".safetensors.index.json")
        || is_gguf_name(name)
}

/// The digest of a file list (sorted here, so any order gives the same digest).
pub fn digest_of_files(files: &[ModelFile]) -> Digest {
    let mut sorted: Vec<&ModelFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    // Names, hex digests and sizes <= 2^53 always have a canonical form.
    let bytes = to_canonical_from(&sorted).unwrap_or_default();
    Digest::derive(MODEL_DIGEST_CONTEXT, &bytes)
}

/// Digest a checkpoint directory or a single `.gguf` file (see the module doc for the scheme).
pub fn model_digest(model: &Path) -> Result<ModelDigest, ModelDigestError> {
    if let (dir, Some(name)) = split_single(model) {
        if !is_gguf_name(&name) {
            return Err(ModelDigestError::NotGguf {
                path: model.to_owned(),
            });
        }
        let resolved = fs::canonicalize(model).map_err(|source| ModelDigestError::Read {
            path: model.to_owned(),
            source,
        })?;
        let (file, open) = hash_file(name, model, &resolved)?;
        let files = vec![file];
        return Ok(ModelDigest {
            digest: digest_of_files(&files),
            opened: BTreeMap::from([(files[0].name.clone(), Arc::new(open))]),
            files,
            dir,
        });
    }
    let dir = model;
    let read_dir_err = |source| ModelDigestError::ReadDir {
        dir: dir.to_owned(),
        source,
    };
    let root = fs::canonicalize(dir).map_err(read_dir_err)?;
    let mut files = Vec::new();
    let mut opened = BTreeMap::new();
    for entry in fs::read_dir(&root).map_err(read_dir_err)? {
        let entry = entry.map_err(read_dir_err)?;
        let path = dir.join(entry.file_name());
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            let lossy = entry.file_name().to_string_lossy().into_owned();
            if is_counted(&lossy) {
                return Err(ModelDigestError::NonUtf8Name { path });
            }
            continue;
        };
        if !is_counted(&name) {
            continue;
        }
        let resolved = resolve(&root, &path)?;
        let (file, open) = hash_file(name, &path, &resolved)?;
        opened.insert(file.name.clone(), Arc::new(open));
        files.push(file);
    }
    let ggufs = files.iter().filter(|f| is_gguf_name(&f.name)).count();
    let safetensors = files
        .iter()
        .filter(|f| f.name.ends_with(".safetensors"))
        .count();
    let ambiguous = |what: String| ModelDigestError::Ambiguous {
        dir: dir.to_owned(),
        what,
    };
    match (ggufs, safetensors) {
        (0, _) => {}
        (1, 0) => {
            files.sort_by(|a, b| a.name.cmp(&b.name));
            return Ok(ModelDigest {
                digest: digest_of_files(&files),
                files,
                opened,
                dir: dir.to_owned(),
            });
        }
        (1, _) => {
            return Err(ambiguous(
                "both a .gguf file and .safetensors weights".into(),
            ))
        }
        (n, _) => return Err(ambiguous(format!("{n} .gguf files"))),
    }
    if !files.iter().any(|f| f.name == "config.json") {
        return Err(ModelDigestError::Missing {
            dir: dir.to_owned(),
            what: "config.json",
        });
    }
    if !files.iter().any(|f| f.name.ends_with(".safetensors")) {
        return Err(ModelDigestError::Missing {
            dir: dir.to_owned(),
            what: "*.safetensors file",
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ModelDigest {
        digest: digest_of_files(&files),
        files,
        opened,
        dir: dir.to_owned(),
    })
}

/// The regular file a counted entry stands for, following a link only within `root`.
fn resolve(root: &Path, path: &Path) -> Result<PathBuf, ModelDigestError> {
    let read_err = |source| ModelDigestError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = fs::symlink_metadata(path).map_err(read_err)?;
    let target = if meta.file_type().is_symlink() {
        let target = fs::canonicalize(path).map_err(|_| ModelDigestError::NotRegular {
            path: path.to_owned(),
            kind: "a broken symbolic link",
        })?;
        if !target.starts_with(root) {
            return Err(ModelDigestError::SymlinkOutside {
                path: path.to_owned(),
                target,
            });
        }
        target
    } else {
        path.to_owned()
    };
    let meta = fs::metadata(&target).map_err(read_err)?;
    if !meta.is_file() {
        return Err(ModelDigestError::NotRegular {
            path: path.to_owned(),
            kind: kind_of(&meta.file_type()),
        });
    }
    Ok(target)
}

fn kind_of(t: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a named pipe";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Hash one file through the handle the loader will use, stamped before and checked after.
fn hash_file(
    name: String,
    path: &Path,
    resolved: &Path,
) -> Result<(ModelFile, OpenFile), ModelDigestError> {
    let read_err = |source| ModelDigestError::Read {
        path: path.to_owned(),
        source,
    };
    // Opened without blocking and typed from the handle: a file swapped for a fifo after
    // `resolve` looked at it is refused, not waited on.
    let file = open_regular(resolved, "model file").map_err(|e| match e {
        ReadError::NotRegular { kind, .. } => ModelDigestError::NotRegular {
            path: path.to_owned(),
            kind,
        },
        ReadError::Io { source, .. } => read_err(source),
        other => read_err(std::io::Error::other(other)),
    })?;
    // Writing back any dirty pages write-protects them in every mapping, so a later write
    // through someone's writable mapping faults and moves ctime (see `files`).
    file.sync_all().map_err(read_err)?;
    let stamp = FileStamp::settled(&file).map_err(read_err)?;
    let size = stamp.size();
    if size > MAX_SIZE {
        return Err(ModelDigestError::TooLarge {
            path: path.to_owned(),
        });
    }
    let mut hasher = blake3::Hasher::new();
    if size > 0 {
        // A change to the file while it is read shows in the stamp compared below and fails
        // the digest.
        let map = MappedFile::map(&file).map_err(read_err)?;
        hasher.update(map.bytes());
    }
    let after = FileStamp::of(&file).map_err(read_err)?;
    if hasher.count() != size || after != stamp {
        return Err(ModelDigestError::Changed {
            path: path.to_owned(),
        });
    }
    let blake3 = Digest(*hasher.finalize().as_bytes());
    let open = OpenFile {
        path: path.to_owned(),
        file,
        stamp,
        blake3: Some(blake3),
    };
    Ok((ModelFile { name, size, blake3 }, open))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("config.json"), b"{}").unwrap();
        fs::write(dir.path().join("model.safetensors"), b"weights").unwrap();
        dir
    }

    #[test]
    fn matches_the_documented_scheme() {
        let dir = checkpoint();
        let big = vec![7u8; 100_000]; // above blake3's memory-map threshold
        fs::write(dir.path().join("tokenizer.json"), &big).unwrap();
        let got = model_digest(dir.path()).unwrap();
        let listing = format!(
            r#"[{{"blake3":"{}","name":"config.json","size":2}},{{"blake3":"{}","name":"model.safetensors","size":7}},{{"blake3":"{}","name":"tokenizer.json","size":100000}}]"#,
            blake3::hash(b"{}").to_hex(),
            blake3::hash(b"weights").to_hex(),
            blake3::hash(&big).to_hex(),
        );
        assert_eq!(
            got.digest,
            Digest::derive(MODEL_DIGEST_CONTEXT, listing.as_bytes())
        );
        let names: Vec<&str> = got.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["config.json", "model.safetensors", "tokenizer.json"]
        );
    }

    #[test]
    fn ignores_other_files_and_listing_order() {
        let a = checkpoint();
        let before = model_digest(a.path()).unwrap().digest;
        fs::write(a.path().join("README.md"), b"hello").unwrap();
        fs::create_dir(a.path().join(".git")).unwrap();
        fs::write(a.path().join("model.safetensors.bak"), b"x").unwrap();
        assert_eq!(model_digest(a.path()).unwrap().digest, before);
        // Same files created in the opposite order.
        let b = tempfile::tempdir().unwrap();
        fs::write(b.path().join("model.safetensors"), b"weights").unwrap();
        fs::write(b.path().join("config.json"), b"{}").unwrap();
        assert_eq!(model_digest(b.path()).unwrap().digest, before);
        let shuffled = vec![
            model_digest(a.path()).unwrap().files[1].clone(),
            model_digest(a.path()).unwrap().files[0].clone(),
        ];
        assert_eq!(digest_of_files(&shuffled), before);
    }

    #[test]
    fn changes_with_bytes_names_and_added_files() {
        let dir = checkpoint();
        let before = model_digest(dir.path()).unwrap().digest;
        fs::write(dir.path().join("model.safetensors"), b"weightz").unwrap();
        let changed = model_digest(dir.path()).unwrap().digest;
        assert_ne!(changed, before);
        fs::rename(
            dir.path().join("model.safetensors"),
            dir.path().join("model-00001-of-00001.safetensors"),
        )
        .unwrap();
        let renamed = model_digest(dir.path()).unwrap().digest;
        assert_ne!(renamed, changed);
        fs::write(dir.path().join("model.safetensors.index.json"), b"{}").unwrap();
        assert_ne!(model_digest(dir.path()).unwrap().digest, renamed);
        fs::write(dir.path().join("generation_config.json"), b"{}").unwrap();
        fs::write(dir.path().join("tokenizer_config.json"), b"{}").unwrap();
        assert_eq!(model_digest(dir.path()).unwrap().files.len(), 5);
    }

    #[test]
    fn rejects_missing_config_or_weights() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("model.safetensors"), b"w").unwrap();
        assert!(matches!(
            model_digest(dir.path()),
            Err(ModelDigestError::Missing {
                what: "config.json",
                ..
            })
        ));
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("config.json"), b"{}").unwrap();
        fs::write(dir.path().join("model.safetensors.index.json"), b"{}").unwrap();
        assert!(matches!(
            model_digest(dir.path()),
            Err(ModelDigestError::Missing {
                what: "*.safetensors file",
                ..
            })
        ));
        assert!(matches!(
            model_digest(&dir.path().join("nope")),
            Err(ModelDigestError::ReadDir { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn rejects_symlink_outside_but_follows_one_inside() {
        use std::os::unix::fs::symlink;
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("blob"), b"weights").unwrap();
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("config.json"), b"{}").unwrap();
        symlink(
            outside.path().join("blob"),
            dir.path().join("model.safetensors"),
        )
        .unwrap();
        let err = model_digest(dir.path()).unwrap_err();
        assert!(
            matches!(err, ModelDigestError::SymlinkOutside { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("model.safetensors"), "{err}");
        // A relative link escaping with `..` is caught the same way.
        fs::remove_file(dir.path().join("model.safetensors")).unwrap();
        let rel = Path::new("..")
            .join(outside.path().file_name().unwrap())
            .join("blob");
        symlink(&rel, dir.path().join("model.safetensors")).unwrap();
        assert!(matches!(
            model_digest(dir.path()),
            Err(ModelDigestError::SymlinkOutside { .. })
        ));

        fs::remove_file(dir.path().join("model.safetensors")).unwrap();
        fs::create_dir(dir.path().join("blobs")).unwrap();
        fs::write(dir.path().join("blobs/abc"), b"weights").unwrap();
        symlink("blobs/abc", dir.path().join("model.safetensors")).unwrap();
        let linked = model_digest(dir.path()).unwrap().digest;
        assert_eq!(linked, model_digest(checkpoint().path()).unwrap().digest);
    }

    #[cfg(unix)]
    #[test]
    fn rejects_directories_fifos_and_broken_links() {
        let dir = checkpoint();
        fs::create_dir(dir.path().join("extra.safetensors")).unwrap();
        assert!(matches!(
            model_digest(dir.path()),
            Err(ModelDigestError::NotRegular {
                kind: "a directory",
                ..
            })
        ));
        fs::remove_dir(dir.path().join("extra.safetensors")).unwrap();
        std::os::unix::fs::symlink("missing", dir.path().join("tokenizer.json")).unwrap();
        assert!(matches!(
            model_digest(dir.path()),
            Err(ModelDigestError::NotRegular {
                kind: "a broken symbolic link",
                ..
            })
        ));
        fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
        let fifo = dir.path().join("tokenizer.json");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if status.map(|s| s.success()).unwrap_or(false) {
            assert!(matches!(
                model_digest(dir.path()),
                Err(ModelDigestError::NotRegular {
                    kind: "a named pipe",
                    ..
                })
            ));
        }
    }
}
