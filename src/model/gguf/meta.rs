//! GGUF metadata values, with arrays held as compactly as the file holds them.
//!
//! Why not a `Vec` of values: a Gemma 3 file carries three arrays of 262144 items (the
//! vocabulary, its scores and token types). As one 32-byte value per item, plus one heap
//! allocation per token string, they took ~40 MiB while the file was read and left 14 MiB of
//! strings and ~30 MiB of fragmented heap resident for the whole run (batch 128 on the 270M
//! file then went past its memory budget). And a hostile file could ask for 32 bytes of memory
//! for every byte of an array of `u8`. Here an array of scalars keeps its little-endian bytes
//! as read, an array of strings one text and where each item ends, and an array of arrays (at
//! most [`super::reader`]'s nesting depth) its arrays: memory stays within a small constant
//! times the file's bytes.

use std::fmt;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// Unsigned integers of 8 to 64 bits, widened.
    Uint(u64),
    /// Signed integers of 8 to 64 bits, widened.
    Int(i64),
    /// `float32`.
    F32(f32),
    /// `float64`.
    F64(f64),
    /// `bool`.
    Bool(bool),
    /// A UTF-8 string.
    Str(String),
    /// An array of values of one type.
    Array(MetaArray),
}

impl MetaValue {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::Uint(n) => Some(n),
            MetaValue::Int(n) => u64::try_from(n).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(x) => Some(f64::from(x)),
            MetaValue::F64(x) => Some(x),
            MetaValue::Uint(n) => Some(n as f64),
            MetaValue::Int(n) => Some(n as f64),
            _ => None,
        }
    }

    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A scalar of GGUF type `kind` from its little-endian bytes (exactly [`scalar_size`] of
    /// them); `None` for a string, an array or an unknown type. A bool byte other than 0 or 1
    /// reads as `None` too (the reader refuses it before a value is made).
    pub(super) fn scalar(kind: u32, le: &[u8]) -> Option<MetaValue> {
        let bytes = |n: usize| (le.len() == n).then_some(le);
        Some(match kind {
            0 => MetaValue::Uint(u64::from(bytes(1)?[0])),
            1 => MetaValue::Int(i64::from(bytes(1)?[0] as i8)),
            2 => MetaValue::Uint(u64::from(u16::from_le_bytes(bytes(2)?.try_into().ok()?))),
            3 => MetaValue::Int(i64::from(i16::from_le_bytes(bytes(2)?.try_into().ok()?))),
            4 => MetaValue::Uint(u64::from(u32::from_le_bytes(bytes(4)?.try_into().ok()?))),
            5 => MetaValue::Int(i64::from(i32::from_le_bytes(bytes(4)?.try_into().ok()?))),
            6 => MetaValue::F32(f32::from_le_bytes(bytes(4)?.try_into().ok()?)),
            7 => match bytes(1)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                _ => return None,
            },
            10 => MetaValue::Uint(u64::from_le_bytes(bytes(8)?.try_into().ok()?)),
            11 => MetaValue::Int(i64::from_le_bytes(bytes(8)?.try_into().ok()?)),
            12 => MetaValue::F64(f64::from_le_bytes(bytes(8)?.try_into().ok()?)),
            _ => return None,
        })
    }
}

/// The bytes one scalar of GGUF type `kind` takes; `None` for a string, an array or an unknown
/// type.
pub(super) fn scalar_size(kind: u32) -> Option<usize> {
    match kind {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::Uint(n) => write!(f, "{n}"),
            MetaValue::Int(n) => write!(f, "{n}"),
            MetaValue::F32(x) => write!(f, "{x}"),
            MetaValue::F64(x) => write!(f, "{x}"),
            MetaValue::Bool(b) => write!(f, "{b}"),
            MetaValue::Str(s) => write!(f, "{s:?}"),
            MetaValue::Array(items) => write!(f, "an array of {} values", items.len()),
        }
    }
}

/// An array of metadata values, all of one GGUF type.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    /// Scalars of one integer, float or bool type.
    Scalars {
        /// The GGUF type id.
        kind: u32,
        /// Their little-endian bytes as in the file, [`scalar_size`] each; bools are 0 or 1.
        le: Vec<u8>,
    },
    /// Strings.
    Strings(Strings),
    /// Arrays.
    Arrays(Vec<MetaArray>),
}

impl MetaArray {
    /// Items in the array.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::Scalars { kind, le } => le.len() / scalar_size(*kind).unwrap_or(1),
            MetaArray::Strings(s) => s.len(),
            MetaArray::Arrays(a) => a.len(),
        }
    }

    /// Whether it holds no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `i` as a value of its own (a string or an array copied out).
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        match self {
            MetaArray::Scalars { kind, le } => {
                let size = scalar_size(*kind)?;
                let at = i.checked_mul(size)?;
                MetaValue::scalar(*kind, le.get(at..at.checked_add(size)?)?)
            }
            MetaArray::Strings(s) => s.get(i).map(|s| MetaValue::Str(s.to_owned())),
            MetaArray::Arrays(a) => a.get(i).cloned().map(MetaValue::Array),
        }
    }

    /// Every item in order, as [`MetaArray::get`] gives it.
    pub fn iter(&self) -> impl Iterator<Item = MetaValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The strings, if it is an array of strings.
    pub fn as_strings(&self) -> Option<&Strings> {
        match self {
            MetaArray::Strings(s) => Some(s),
            _ => None,
        }
    }

    /// The strings, moved out, if it is an array of strings.
    pub fn into_strings(self) -> Option<Strings> {
        match self {
            MetaArray::Strings(s) => Some(s),
            _ => None,
        }
    }
}

/// A list of strings in one text: each item's end in it, in order. A GGUF vocabulary of
/// 262144 tokens is ~2.5 MiB of text and 2 MiB of ends this way, and no allocation per token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Strings {
    text: String,
    ends: Vec<usize>,
}

impl Strings {
    /// An empty list with room for `n` items.
    pub fn with_capacity(n: usize) -> Strings {
        Strings {
            text: String::new(),
            ends: Vec::with_capacity(n),
        }
    }

    /// Append `s`.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }

    /// Items in the list.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no items.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Item `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..end)
    }

    /// Every item in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<'a> FromIterator<&'a str> for Strings {
    fn from_iter<I: IntoIterator<Item = &'a str>>(items: I) -> Strings {
        let mut out = Strings::default();
        for s in items {
            out.push(s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_give_back_each_item_including_empty_ones() {
        let s: Strings = ["<pad>", "", "▁the", "a"].into_iter().collect();
        assert_eq!(s.len(), 4);
        assert_eq!(s.get(0), Some("<pad>"));
        assert_eq!(s.get(1), Some(""));
        assert_eq!(s.get(2), Some("▁the"));
        assert_eq!(s.get(4), None);
        assert_eq!(s.iter().collect::<Vec<_>>(), ["<pad>", "", "▁the", "a"]);
    }

    #[test]
    fn scalar_arrays_read_each_item_at_its_width() {
        let le: Vec<u8> = [-2i16, 7, i16::MAX]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let a = MetaArray::Scalars { kind: 3, le };
        assert_eq!(a.len(), 3);
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            [
                MetaValue::Int(-2),
                MetaValue::Int(7),
                MetaValue::Int(i64::from(i16::MAX))
            ]
        );
        assert_eq!(a.get(3), None);
        let flags = MetaArray::Scalars {
            kind: 7,
            le: vec![1, 0],
        };
        assert_eq!(flags.get(0), Some(MetaValue::Bool(true)));
        assert_eq!(flags.get(1), Some(MetaValue::Bool(false)));
        let f = MetaArray::Scalars {
            kind: 6,
            le: 1.5f32.to_le_bytes().to_vec(),
        };
        assert_eq!(f.get(0), Some(MetaValue::F32(1.5)));
        assert_eq!(MetaValue::Array(f).to_string(), "an array of 1 values");
    }
}
