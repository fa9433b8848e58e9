//! The GGUF container (versions 2 and 3), parsed from the mapped file with every length,
//! count and offset checked against the bytes that are there.
//!
//! Layout: `"GGUF"`, version u32, tensor count u64, metadata count u64; the metadata as (key
//! string, type u32, value); the tensor infos as (name string, rank u32, dims u64 × rank, ggml
//! type u32, offset u64); then, at the next multiple of `general.alignment` (default 32), the
//! tensor data, each tensor at its offset from there. Strings are a u64 length and UTF-8 bytes;
//! everything is little-endian. Nothing is allocated for a count before the bytes it needs are
//! known to exist, so a hostile header cannot make the reader reserve more than the file holds.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{Diagnose, Exit};
use crate::kernels::DType;

use super::meta::scalar_size;
pub use super::meta::{MetaArray, MetaValue, Strings};

/// The default and the largest alignment of tensor data.
const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_ALIGNMENT: u64 = 1 << 16;
/// Tensor ranks GGML has.
const MAX_RANK: u32 = 4;
/// Arrays nest at most this deep (GGUF writers emit arrays of scalars or strings).
const MAX_DEPTH: usize = 3;

/// One tensor's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The name (`blk.0.attn_q.weight`, ...).
    pub name: String,
    /// GGML's dimensions, innermost first (`[in, out]` for a matrix).
    pub dims: Vec<usize>,
    /// The block format.
    pub dtype: DType,
    /// Where its bytes lie in the file.
    pub bytes: Range<usize>,
}

impl TensorInfo {
    /// The shape row-major (outermost first): `[out, in]` for a matrix.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF header: metadata and tensor infos, the data left in the file.
#[derive(Debug, Clone)]
pub struct Gguf {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, MetaValue>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
}

/// Why a file is not a GGUF file the runner reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The magic is wrong.
    #[error("{path} is not a GGUF file (it does not start with \"GGUF\")")]
    NotGguf {
        /// The file.
        path: PathBuf,
    },
    /// A version other than 2 or 3.
    #[error("{path}: GGUF version {version} is not supported (versions 2 and 3 are)")]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        version: u32,
    },
    /// The header is inconsistent or runs past the end of the file.
    #[error("{path}: malformed GGUF header at byte {at}: {detail}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Offset of the problem.
        at: usize,
        /// What is wrong.
        detail: String,
    },
    /// A tensor in a block format the kernels do not read.
    #[error("{path}: tensor `{name}` is stored as {kind}, which the runner does not read (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K)")]
    TensorType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// GGML's name for its type.
        kind: String,
    },
}

impl Diagnose for GgufError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            GgufError::NotGguf { .. } | GgufError::Malformed { .. } => {
                "the file may be truncated or not a GGUF model; download or convert it again".into()
            }
            GgufError::Version { .. } => {
                "convert the checkpoint again with a current llama.cpp (convert_hf_to_gguf.py)"
                    .into()
            }
            GgufError::TensorType { .. } => {
                "requantize it to a supported type, e.g. `llama-quantize IN.gguf OUT.gguf Q4_K_M`"
                    .into()
            }
        })
    }
}

/// GGML's tensor type ids: the ones the kernels read, then the names of the rest for messages.
fn ggml_type(id: u32) -> Result<DType, String> {
    let other = match id {
        0 => return Ok(DType::F32),
        1 => return Ok(DType::F16),
        2 => return Ok(DType::Q4_0),
        3 => return Ok(DType::Q4_1),
        6 => return Ok(DType::Q5_0),
        7 => return Ok(DType::Q5_1),
        8 => return Ok(DType::Q8_0),
        12 => return Ok(DType::Q4_K),
        13 => return Ok(DType::Q5_K),
        14 => return Ok(DType::Q6_K),
        30 => return Ok(DType::BF16),
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return Err(format!("GGML type {id} (unknown to this runner)")),
    };
    Err(other.to_owned())
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn bad(&self, detail: impl Into<String>) -> GgufError {
        GgufError::Malformed {
            path: self.path.to_owned(),
            at: self.at,
            detail: detail.into(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            let left = self.bytes.len() - self.at;
            return Err(self.bad(format!("{what} needs {n} bytes, {left} are left")));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items at least `min_bytes` each, bounded by the bytes left.
    fn count(&mut self, min_bytes: usize, what: &str) -> Result<usize, GgufError> {
        let at = self.at;
        let n = self.u64(what)?;
        let left = (self.bytes.len() - self.at) as u64;
        if n > left / min_bytes.max(1) as u64 {
            self.at = at;
            return Err(self.bad(format!(
                "{what} is {n}, more than the {left} bytes left could hold"
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        self.str(what).map(str::to_owned)
    }

    fn str(&mut self, what: &str) -> Result<&'a str, GgufError> {
        let len = self.count(1, &format!("length of {what}"))?;
        let at = self.at;
        let raw = self.take(len, what)?;
        std::str::from_utf8(raw).map_err(|_| {
            self.at = at;
            self.bad(format!("{what} is not UTF-8"))
        })
    }

    fn value(&mut self, kind: u32, depth: usize, key: &str) -> Result<MetaValue, GgufError> {
        match kind {
            8 => Ok(MetaValue::Str(
                self.string(&format!("the value of `{key}`"))?,
            )),
            9 => Ok(MetaValue::Array(self.array_value(depth, key)?)),
            _ => {
                let Some(size) = scalar_size(kind) else {
                    return Err(self.bad(format!("`{key}` has unknown value type {kind}")));
                };
                let at = self.at;
                let le = self.take(size, key)?;
                MetaValue::scalar(kind, le).ok_or_else(|| {
                    self.at = at;
                    self.bad(format!("`{key}`: a bool must be 0 or 1, found {}", le[0]))
                })
            }
        }
    }

    /// An array (type id, count, items), held as [`MetaArray`] holds it.
    fn array_value(&mut self, depth: usize, key: &str) -> Result<MetaArray, GgufError> {
        if depth >= MAX_DEPTH {
            return Err(self.bad(format!("`{key}`: arrays nest deeper than {MAX_DEPTH}")));
        }
        let item = self.u32(key)?;
        let n = self.count(min_size(item), &format!("length of `{key}`"))?;
        Ok(match item {
            8 => {
                let mut items = Strings::with_capacity(n);
                let what = format!("an item of `{key}`");
                for _ in 0..n {
                    items.push(self.str(&what)?);
                }
                MetaArray::Strings(items)
            }
            9 => {
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.array_value(depth + 1, key)?);
                }
                MetaArray::Arrays(items)
            }
            _ => {
                let Some(size) = scalar_size(item) else {
                    return Err(self.bad(format!("`{key}` has unknown value type {item}")));
                };
                // `count` bounded `n` by the bytes left over `size`: no overflow.
                let le = self.take(n * size, key)?;
                if item == 7 {
                    if let Some(b) = le.iter().find(|&&b| b > 1) {
                        return Err(self.bad(format!("`{key}`: a bool must be 0 or 1, found {b}")));
                    }
                }
                MetaArray::Scalars {
                    kind: item,
                    le: le.to_vec(),
                }
            }
        })
    }
}

/// The fewest bytes one value of GGUF type `kind` takes: a scalar's size, a string's length,
/// an array's header.
fn min_size(kind: u32) -> usize {
    scalar_size(kind).unwrap_or(match kind {
        8 => 8,
        9 => 12,
        _ => 1,
    })
}

impl Gguf {
    /// Parse the header of `bytes`, the whole file at `path`.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Gguf, GgufError> {
        let mut c = Cursor { bytes, at: 0, path };
        if bytes.get(..4) != Some(b"GGUF") {
            return Err(GgufError::NotGguf {
                path: path.to_owned(),
            });
        }
        c.at = 4;
        let version = c.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version {
                path: path.to_owned(),
                version,
            });
        }
        // A tensor info is at least a name length, a rank, a type and an offset.
        let n_tensors = c.count(24, "the tensor count")?;
        let n_meta = c.count(12, "the metadata count")?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_meta {
            let at = c.at;
            let key = c.string("a metadata key")?;
            let kind = c.u32(&key)?;
            let value = c.value(kind, 0, &key)?;
            if metadata.insert(key.clone(), value).is_some() {
                c.at = at;
                return Err(c.bad(format!("metadata key `{key}` appears twice")));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(MetaValue::Uint(a)) if a.is_power_of_two() && *a <= MAX_ALIGNMENT => *a,
            Some(v) => {
                return Err(c.bad(format!(
                    "`general.alignment` = {v} must be a power of two up to {MAX_ALIGNMENT}"
                )))
            }
        };
        let mut infos = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            infos.push(read_info(&mut c)?);
        }
        let data_start = (c.at as u64).next_multiple_of(alignment);
        let tensors = place(&c, infos, data_start, alignment)?;
        Ok(Gguf {
            version,
            metadata,
            tensors,
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }
}

/// A tensor info as read, before its bytes are placed.
struct RawInfo {
    at: usize,
    name: String,
    dims: Vec<usize>,
    dtype: Result<DType, String>,
    offset: u64,
}

fn read_info(c: &mut Cursor<'_>) -> Result<RawInfo, GgufError> {
    let at = c.at;
    let name = c.string("a tensor name")?;
    let rank = c.u32(&name)?;
    if rank == 0 || rank > MAX_RANK {
        return Err(c.bad(format!(
            "tensor `{name}` has rank {rank}; GGML has 1 to {MAX_RANK}"
        )));
    }
    let mut dims = Vec::with_capacity(rank as usize);
    for _ in 0..rank {
        let d = c.u64(&name)?;
        let d = usize::try_from(d)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| c.bad(format!("tensor `{name}` has a dimension of {d}")))?;
        dims.push(d);
    }
    let dtype = ggml_type(c.u32(&name)?);
    let offset = c.u64(&name)?;
    Ok(RawInfo {
        at,
        name,
        dims,
        dtype,
        offset,
    })
}

/// Every tensor's byte range, checked: aligned, inside the file, whole blocks per row, no two
/// tensors sharing a byte, no two sharing a name.
fn place(
    c: &Cursor<'_>,
    infos: Vec<RawInfo>,
    data_start: u64,
    alignment: u64,
) -> Result<Vec<TensorInfo>, GgufError> {
    let file_len = c.bytes.len() as u64;
    let bad = |at: usize, detail: String| GgufError::Malformed {
        path: c.path.to_owned(),
        at,
        detail,
    };
    let mut tensors = Vec::with_capacity(infos.len());
    let mut names = std::collections::BTreeSet::new();
    for info in infos {
        let RawInfo {
            at,
            name,
            dims,
            dtype,
            offset,
        } = info;
        if !names.insert(name.clone()) {
            return Err(bad(at, format!("tensor `{name}` appears twice")));
        }
        let dtype = dtype.map_err(|kind| GgufError::TensorType {
            path: c.path.to_owned(),
            name: name.clone(),
            kind,
        })?;
        if dims[0] % dtype.block_elems() != 0 {
            return Err(bad(
                at,
                format!(
                    "tensor `{name}` is {dtype} with rows of {} elements, not whole blocks of {}",
                    dims[0],
                    dtype.block_elems()
                ),
            ));
        }
        let size = dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| dtype.bytes_for(n))
            .ok_or_else(|| bad(at, format!("tensor `{name}` is too large")))?;
        if offset % alignment != 0 {
            return Err(bad(
                at,
                format!(
                    "tensor `{name}` starts at data offset {offset}, not a multiple of {alignment}"
                ),
            ));
        }
        let start = data_start.checked_add(offset);
        let end = start.and_then(|s| s.checked_add(size as u64));
        let (Some(start), Some(end)) = (start, end.filter(|&e| e <= file_len)) else {
            return Err(bad(
                at,
                format!("tensor `{name}` ({size} bytes at data offset {offset}) runs past the end of the file ({file_len} bytes)"),
            ));
        };
        tensors.push(TensorInfo {
            name,
            dims,
            dtype,
            bytes: start as usize..end as usize,
        });
    }
    let mut by_start: Vec<&TensorInfo> = tensors.iter().collect();
    by_start.sort_by_key(|t| t.bytes.start);
    for pair in by_start.windows(2) {
        if pair[1].bytes.start < pair[0].bytes.end {
            return Err(bad(
                pair[1].bytes.start,
                format!("tensors `{}` and `{}` overlap", pair[0].name, pair[1].name),
            ));
        }
    }
    Ok(tensors)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A GGUF file written field by field, for tests.
    pub(crate) struct Writer {
        pub(crate) meta: Vec<u8>,
        pub(crate) n_meta: u64,
        pub(crate) infos: Vec<u8>,
        pub(crate) n_tensors: u64,
        pub(crate) data: Vec<u8>,
    }

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    impl Writer {
        pub(crate) fn new() -> Writer {
            Writer {
                meta: Vec::new(),
                n_meta: 0,
                infos: Vec::new(),
                n_tensors: 0,
                data: Vec::new(),
            }
        }

        pub(crate) fn u32(&mut self, key: &str, v: u32) -> &mut Writer {
            string(&mut self.meta, key);
            self.meta.extend(4u32.to_le_bytes());
            self.meta.extend(v.to_le_bytes());
            self.n_meta += 1;
            self
        }

        pub(crate) fn f32(&mut self, key: &str, v: f32) -> &mut Writer {
            string(&mut self.meta, key);
            self.meta.extend(6u32.to_le_bytes());
            self.meta.extend(v.to_le_bytes());
            self.n_meta += 1;
            self
        }

        pub(crate) fn str(&mut self, key: &str, v: &str) -> &mut Writer {
            string(&mut self.meta, key);
            self.meta.extend(8u32.to_le_bytes());
            string(&mut self.meta, v);
            self.n_meta += 1;
            self
        }

        pub(crate) fn strings(&mut self, key: &str, items: &[&str]) -> &mut Writer {
            string(&mut self.meta, key);
            self.meta.extend(9u32.to_le_bytes());
            self.meta.extend(8u32.to_le_bytes());
            self.meta.extend((items.len() as u64).to_le_bytes());
            for s in items {
                string(&mut self.meta, s);
            }
            self.n_meta += 1;
            self
        }

        /// An array of `n` items of GGUF type `item`, whose bytes (after the type and count)
        /// are `body` as given.
        pub(crate) fn raw_array(
            &mut self,
            key: &str,
            item: u32,
            n: u64,
            body: &[u8],
        ) -> &mut Writer {
            string(&mut self.meta, key);
            self.meta.extend(9u32.to_le_bytes());
            self.meta.extend(item.to_le_bytes());
            self.meta.extend(n.to_le_bytes());
            self.meta.extend(body);
            self.n_meta += 1;
            self
        }

        /// A tensor of GGML type `kind` with `dims` (innermost first) and these bytes, placed
        /// at the next aligned data offset.
        pub(crate) fn tensor(
            &mut self,
            name: &str,
            kind: u32,
            dims: &[u64],
            bytes: &[u8],
        ) -> &mut Writer {
            let offset = (self.data.len() as u64).next_multiple_of(DEFAULT_ALIGNMENT);
            self.data.resize(offset as usize, 0);
            self.data.extend(bytes);
            string(&mut self.infos, name);
            self.infos.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                self.infos.extend(d.to_le_bytes());
            }
            self.infos.extend(kind.to_le_bytes());
            self.infos.extend(offset.to_le_bytes());
            self.n_tensors += 1;
            self
        }

        pub(crate) fn bytes(&self) -> Vec<u8> {
            let mut out = b"GGUF".to_vec();
            out.extend(3u32.to_le_bytes());
            out.extend(self.n_tensors.to_le_bytes());
            out.extend(self.n_meta.to_le_bytes());
            out.extend(&self.meta);
            out.extend(&self.infos);
            out.resize(
                (out.len() as u64).next_multiple_of(DEFAULT_ALIGNMENT) as usize,
                0,
            );
            out.extend(&self.data);
            out
        }
    }

    fn parse(bytes: &[u8]) -> Result<Gguf, GgufError> {
        Gguf::parse(Path::new("m.gguf"), bytes)
    }

    fn two_tensors() -> Writer {
        let mut w = Writer::new();
        w.str("general.architecture", "gemma3")
            .u32("gemma3.block_count", 1)
            .strings("tokenizer.ggml.tokens", &["<pad>", "a"])
            .tensor("a", 0, &[4, 2], &[0u8; 32])
            .tensor("b", 8, &[32], &[0u8; 34]);
        w
    }

    #[test]
    fn a_well_formed_file_gives_its_metadata_and_tensor_ranges() {
        let bytes = two_tensors().bytes();
        let g = parse(&bytes).unwrap();
        assert_eq!(g.version, 3);
        assert_eq!(g.get("gemma3.block_count"), Some(&MetaValue::Uint(1)));
        assert_eq!(
            g.get("tokenizer.ggml.tokens"),
            Some(&MetaValue::Array(MetaArray::Strings(
                ["<pad>", "a"].into_iter().collect()
            )))
        );
        assert_eq!(g.tensors[0].shape(), vec![2, 4]);
        assert_eq!(g.tensors[0].dtype, DType::F32);
        assert_eq!(g.tensors[1].dtype, DType::Q8_0);
        assert_eq!(g.tensors[1].bytes.len(), 34);
        assert_eq!(g.tensors[1].bytes.end, bytes.len());
        assert_eq!(g.tensors[0].bytes.start % 32, 0);
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let bytes = two_tensors().bytes();
        for len in 0..bytes.len() {
            assert!(
                parse(&bytes[..len]).is_err(),
                "accepted a file cut at {len}"
            );
        }
    }

    fn malformed(bytes: &[u8]) -> String {
        match parse(bytes) {
            Err(GgufError::Malformed { detail, .. }) => detail,
            other => panic!("expected a malformed-header error, got {other:?}"),
        }
    }

    #[test]
    fn counts_larger_than_the_file_are_refused_before_anything_is_reserved() {
        let mut bytes = two_tensors().bytes();
        bytes[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(malformed(&bytes).contains("tensor count"));
        let mut bytes = two_tensors().bytes();
        bytes[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(malformed(&bytes).contains("metadata count"));
    }

    #[test]
    fn magic_version_and_type_errors_say_what_they_are() {
        let mut bytes = two_tensors().bytes();
        bytes[0] = b'X';
        assert!(matches!(parse(&bytes), Err(GgufError::NotGguf { .. })));
        let mut bytes = two_tensors().bytes();
        bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
        assert!(matches!(
            parse(&bytes),
            Err(GgufError::Version { version: 1, .. })
        ));
        // A type the kernels do not read is named exactly, and an unknown one by its id.
        for (id, kind) in [
            (10, "Q2_K"),
            (20, "IQ4_NL"),
            (35, "TQ2_0"),
            (41, "GGML type 41"),
        ] {
            let mut w = Writer::new();
            w.tensor("blk.0.attn_q.weight", id, &[256], &[0u8; 256]);
            match parse(&w.bytes()) {
                Err(e @ GgufError::TensorType { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("blk.0.attn_q.weight") && msg.contains(kind),
                        "{msg}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn inconsistent_tensor_infos_are_refused() {
        // Rows that are not whole blocks.
        let mut w = Writer::new();
        w.tensor("t", 12, &[128, 2], &[0u8; 144]);
        assert!(malformed(&w.bytes()).contains("not whole blocks"));
        // Past the end of the file.
        let mut w = Writer::new();
        w.tensor("t", 0, &[16], &[0u8; 60]);
        let mut bytes = w.bytes();
        bytes.truncate(bytes.len() - 1);
        assert!(malformed(&bytes).contains("past the end"));
        // Two tensors on the same bytes.
        let mut w = Writer::new();
        w.tensor("a", 0, &[8], &[0u8; 32]);
        w.tensor("b", 0, &[8], &[0u8; 32]);
        let mut bytes = w.bytes();
        // Point b's offset (the last 8 bytes of the infos) at a's data.
        let infos_end = 24 + w.meta.len() + w.infos.len();
        bytes[infos_end - 8..infos_end].copy_from_slice(&0u64.to_le_bytes());
        assert!(malformed(&bytes).contains("overlap"));
        // A misaligned offset.
        bytes[infos_end - 8..infos_end].copy_from_slice(&4u64.to_le_bytes());
        assert!(malformed(&bytes).contains("not a multiple"));
        // The same name twice, a zero dimension, a rank of 5.
        let mut w = Writer::new();
        w.tensor("a", 0, &[8], &[0u8; 32])
            .tensor("a", 0, &[8], &[0u8; 32]);
        assert!(malformed(&w.bytes()).contains("appears twice"));
        let mut w = Writer::new();
        w.tensor("z", 0, &[0], &[]);
        assert!(malformed(&w.bytes()).contains("dimension of 0"));
        let mut w = Writer::new();
        w.tensor("r", 0, &[1, 1, 1, 1, 1], &[0u8; 4]);
        assert!(malformed(&w.bytes()).contains("rank 5"));
    }

    #[test]
    fn metadata_errors_name_the_key() {
        let mut w = Writer::new();
        w.u32("k", 1).u32("k", 2);
        assert!(malformed(&w.bytes()).contains("`k` appears twice"));
        let mut w = Writer::new();
        w.u32("general.alignment", 48);
        assert!(malformed(&w.bytes()).contains("general.alignment"));
        let mut w = Writer::new();
        w.u32("k", 1);
        let mut bytes = w.bytes();
        // The value type of `k` (after the counts, the key length and the key).
        bytes[24 + 8 + 1..24 + 8 + 1 + 4].copy_from_slice(&77u32.to_le_bytes());
        assert!(malformed(&bytes).contains("`k` has unknown value type 77"));
    }

    #[test]
    fn arrays_of_every_type_read_back_item_by_item() {
        let le = |vals: &[i64], width: usize| -> Vec<u8> {
            vals.iter()
                .flat_map(|v| v.to_le_bytes()[..width].to_vec())
                .collect()
        };
        let mut inner = Vec::new();
        for items in [&[1u32, 2][..], &[3][..]] {
            inner.extend(4u32.to_le_bytes());
            inner.extend((items.len() as u64).to_le_bytes());
            for v in items {
                inner.extend(v.to_le_bytes());
            }
        }
        let mut w = Writer::new();
        w.raw_array("u8", 0, 3, &[0, 7, 255])
            .raw_array("i8", 1, 2, &le(&[-1, 5], 1))
            .raw_array("i16", 3, 2, &le(&[-300, 2], 2))
            .raw_array("i32", 5, 1, &le(&[-70000], 4))
            .raw_array("u64", 10, 1, &u64::MAX.to_le_bytes())
            .raw_array("f64", 12, 1, &0.25f64.to_le_bytes())
            .raw_array("bools", 7, 3, &[1, 0, 1])
            .raw_array("nested", 9, 2, &inner)
            .raw_array("none", 6, 0, &[])
            .strings("words", &["a", "", "\u{2581}b"]);
        let g = parse(&w.bytes()).unwrap();
        let items = |key: &str| match g.get(key) {
            Some(MetaValue::Array(a)) => a.iter().collect::<Vec<_>>(),
            other => panic!("{key}: {other:?}"),
        };
        use MetaValue::{Bool, Int, Uint};
        assert_eq!(items("u8"), [Uint(0), Uint(7), Uint(255)]);
        assert_eq!(items("i8"), [Int(-1), Int(5)]);
        assert_eq!(items("i16"), [Int(-300), Int(2)]);
        assert_eq!(items("i32"), [Int(-70000)]);
        assert_eq!(items("u64"), [Uint(u64::MAX)]);
        assert_eq!(items("f64"), [MetaValue::F64(0.25)]);
        assert_eq!(items("bools"), [Bool(true), Bool(false), Bool(true)]);
        assert!(items("none").is_empty());
        let nested = items("nested");
        assert_eq!(nested.len(), 2);
        let MetaValue::Array(first) = &nested[0] else {
            panic!("not an array: {:?}", nested[0]);
        };
        assert_eq!(first.iter().collect::<Vec<_>>(), [Uint(1), Uint(2)]);
        let Some(MetaValue::Array(words)) = g.get("words") else {
            panic!("no words");
        };
        let words = words.as_strings().expect("strings");
        assert_eq!(words.iter().collect::<Vec<_>>(), ["a", "", "\u{2581}b"]);
    }

    #[test]
    fn an_array_of_bytes_is_held_as_its_bytes() {
        // A hostile file's array of a million u8 items costs a million bytes, not a value
        // (32 bytes) per item.
        let body = vec![3u8; 1 << 20];
        let mut w = Writer::new();
        w.raw_array("big", 0, body.len() as u64, &body);
        let g = parse(&w.bytes()).unwrap();
        let Some(MetaValue::Array(MetaArray::Scalars { kind: 0, le })) = g.get("big") else {
            panic!(
                "not a scalar array: {:?}",
                g.get("big").map(|v| v.to_string())
            );
        };
        assert_eq!(le.len(), 1 << 20);
        assert_eq!(le.capacity(), 1 << 20);
    }

    #[test]
    fn bad_array_items_are_refused_with_the_key() {
        let mut w = Writer::new();
        w.raw_array("flags", 7, 3, &[1, 2, 0]);
        assert!(malformed(&w.bytes()).contains("`flags`: a bool must be 0 or 1, found 2"));
        let mut w = Writer::new();
        w.raw_array("odd", 77, 1, &[0]);
        assert!(malformed(&w.bytes()).contains("`odd` has unknown value type 77"));
        let mut w = Writer::new();
        w.raw_array("words", 8, 1, &[1, 0, 0, 0, 0, 0, 0, 0, 0xff]);
        assert!(malformed(&w.bytes()).contains("an item of `words` is not UTF-8"));
        // Arrays of arrays of arrays of arrays: deeper than the reader goes.
        let mut body = Vec::new();
        for _ in 0..3 {
            body.extend(9u32.to_le_bytes());
            body.extend(1u64.to_le_bytes());
        }
        body.extend(4u32.to_le_bytes());
        body.extend(0u64.to_le_bytes());
        let mut w = Writer::new();
        w.raw_array("deep", 9, 1, &body);
        assert!(malformed(&w.bytes()).contains("`deep`: arrays nest deeper than 3"));
    }

    #[test]
    fn no_single_byte_change_makes_the_reader_panic() {
        // A file with every kind of metadata value and two tensors; every byte of it changed
        // in turn, four ways. Each parse is a header or an error; a header's arrays read back.
        let mut w = two_tensors();
        w.f32("f", 0.5)
            .raw_array("u16", 2, 2, &[1, 0, 2, 0])
            .raw_array("flags", 7, 2, &[0, 1])
            .raw_array(
                "nested",
                9,
                1,
                &[4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0],
            )
            .strings("more", &["x", ""]);
        let bytes = w.bytes();
        fn read_back(a: &MetaArray) {
            assert_eq!(a.iter().count(), a.len());
            for v in a.iter() {
                if let MetaValue::Array(inner) = v {
                    read_back(&inner);
                }
            }
        }
        for at in 0..bytes.len() {
            for change in [
                |_: u8| 0u8,
                |_| 0xff,
                |b| b ^ 0x80,
                |b: u8| b.wrapping_add(1),
            ] {
                let mut bad = bytes.clone();
                bad[at] = change(bad[at]);
                if let Ok(g) = parse(&bad) {
                    for v in g.metadata.values() {
                        if let MetaValue::Array(a) = v {
                            read_back(a);
                        }
                    }
                }
            }
        }
    }
}
