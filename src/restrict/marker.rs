//! Region markers: the comment lines `// @private KIND` and `// @end KIND` that open and close
//! a private region, and the two kinds of region they name. A leaf of the language: the lexer
//! finds markers, [`regions`](super::regions) pairs them, errors name their kinds.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::diagnostic::Pos;

/// The two kinds of private region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionKind {
    /// Owners see the structure, identifiers renamed and numbers blanked.
    Obfuscate,
    /// Owners see one placeholder line.
    Hide,
}

impl RegionKind {
    /// The kind named by a marker's second word.
    pub fn from_word(word: &str) -> Option<RegionKind> {
        match word {
            "obfuscate" => Some(RegionKind::Obfuscate),
            "hide" => Some(RegionKind::Hide),
            _ => None,
        }
    }
    /// The marker word.
    pub fn word(self) -> &'static str {
        match self {
            RegionKind::Obfuscate => "obfuscate",
            RegionKind::Hide => "hide",
        }
    }
}

impl fmt::Display for RegionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// A region marker: `// @private KIND` opens a region, `// @end KIND` closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// True for `@private`, false for `@end`.
    pub open: bool,
    /// The region kind named.
    pub kind: RegionKind,
    /// Position of `//`.
    pub pos: Pos,
}
