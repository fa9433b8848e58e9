//! Positions in engine source, and the shape every located error prints in:
//! `message (line:col)`, then the source line and a caret under the column.
//!
//! Lines and columns are 1-based; a column counts characters, which are bytes since engine
//! source is ASCII. A line inside a private region can be withheld from an excerpt, so errors
//! raised while running an approved engine do not print the author's private code.

use std::fmt;

use serde::Serialize;

/// A 1-based line and column in engine source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
}

impl Pos {
    /// A position.
    pub fn new(line: u32, col: u32) -> Pos {
        Pos { line, col }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Longest stretch of a source line an excerpt shows; longer lines are cut around the column.
const EXCERPT_WIDTH: usize = 100;

/// What an excerpt shows of its line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shown {
    /// The line (cut around the column when long).
    Line(String),
    /// Nothing: a line of a private region.
    Private,
    /// Nothing: a public line of an engine with private regions (it may name a private
    /// function).
    Omitted,
}

/// The source line an error points into, ready to print with a caret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    pos: Pos,
    /// The shown part of the line, or why it is not shown.
    text: Shown,
    /// Column of the caret within `text` (1-based).
    caret: usize,
}

impl Excerpt {
    /// The excerpt of `source` at `pos`; an out-of-range position shows an empty line.
    pub fn new(source: &str, pos: Pos) -> Excerpt {
        Excerpt::of_line(line_text(source, pos.line), pos)
    }

    /// The excerpt at `pos`, finding the line through `index` (for many errors in one source).
    pub fn indexed(source: &str, index: &LineIndex, pos: Pos) -> Excerpt {
        Excerpt::of_line(index.line(source, pos.line), pos)
    }

    fn of_line(line: &str, pos: Pos) -> Excerpt {
        let col = (pos.col as usize).max(1);
        // Cut long lines to a window around the column so a 1 MiB line prints short.
        let start = col.saturating_sub(EXCERPT_WIDTH / 2).min(line.len());
        let end = (start + EXCERPT_WIDTH).min(line.len());
        let shown = line.get(start..end).unwrap_or("");
        let (prefix, suffix) = (start > 0, end < line.len());
        let mut text = String::new();
        if prefix {
            text.push_str("...");
        }
        text.push_str(&shown.replace('\t', " "));
        if suffix {
            text.push_str("...");
        }
        let caret = col - start + if prefix { 3 } else { 0 };
        Excerpt {
            pos,
            text: Shown::Line(text),
            caret,
        }
    }

    /// An excerpt whose line is not shown (a line of a private region).
    pub fn withheld(pos: Pos) -> Excerpt {
        Excerpt {
            pos,
            text: Shown::Private,
            caret: 1,
        }
    }

    /// An excerpt whose line is not shown because the engine has private regions (the line
    /// itself is public, but may name a private function).
    pub fn omitted(pos: Pos) -> Excerpt {
        Excerpt {
            pos,
            text: Shown::Omitted,
            caret: 1,
        }
    }

    /// The position pointed at.
    pub fn pos(&self) -> Pos {
        self.pos
    }
}

/// Where each line of a source starts, so finding a line is not a scan of the whole source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    /// Index `source`.
    pub fn new(source: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(
            source
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { starts }
    }

    /// Number of lines (a trailing newline starts an empty last line).
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether there are no lines (never: an empty source has one empty line).
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Line `n` (1-based), without its line ending; empty when out of range.
    pub fn line<'a>(&self, source: &'a str, n: u32) -> &'a str {
        let idx = (n as usize).saturating_sub(1);
        let Some(&start) = self.starts.get(idx) else {
            return "";
        };
        let end = self
            .starts
            .get(idx + 1)
            .map_or(source.len(), |&next| next.saturating_sub(1));
        let text = source.get(start..end).unwrap_or("");
        text.strip_suffix('\r').unwrap_or(text)
    }
}

/// Line `n` (1-based) of `source`, without its line ending; empty when out of range.
pub fn line_text(source: &str, n: u32) -> &str {
    let idx = (n as usize).saturating_sub(1);
    source
        .split('\n')
        .nth(idx)
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or("")
}

impl fmt::Display for Excerpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = self.pos.line.to_string();
        let pad = " ".repeat(num.len());
        match &self.text {
            Shown::Line(text) => {
                writeln!(f, "  {num} | {text}")?;
                write!(f, "  {pad} | {}^", " ".repeat(self.caret.saturating_sub(1)))
            }
            Shown::Omitted => write!(f, "  {num} | (not shown: the engine has private regions)"),
            Shown::Private => write!(f, "  {num} | (line of a private region, not shown)"),
        }
    }
}

/// The lines of private regions, found by a scan of the marker lines alone, so it works on a
/// source that does not lex or parse: a line from a `// @private ...` marker to its `// @end ...`
/// marker (both included) is private, and so is everything after a region that is never
/// closed. Errors on these lines are withheld from everyone but the author.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateLines {
    private: Vec<bool>,
}

impl PrivateLines {
    /// Scan `source`'s marker lines.
    pub fn scan(source: &str) -> PrivateLines {
        let mut depth = 0usize;
        let private = source
            .split('\n')
            .map(|line| {
                let t = line.trim();
                if t.starts_with("//") && t[2..].trim_start().starts_with("@private") {
                    depth += 1;
                    true
                } else if t.starts_with("//") && t[2..].trim_start().starts_with("@end") {
                    depth = depth.saturating_sub(1);
                    true
                } else {
                    depth > 0
                }
            })
            .collect();
        PrivateLines { private }
    }

    /// Whether 1-based `line` is private.
    pub fn contains(&self, line: u32) -> bool {
        (line as usize)
            .checked_sub(1)
            .and_then(|i| self.private.get(i))
            .copied()
            .unwrap_or(false)
    }

    /// Whether the source has any private line.
    pub fn any(&self) -> bool {
        self.private.contains(&true)
    }
}

/// An error of kind `K` at a position, printed as `message (line:col)` and an excerpt.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<K> {
    /// What went wrong.
    pub kind: K,
    /// The source line and column.
    pub excerpt: Excerpt,
}

impl<K> Located<K> {
    /// An error at `pos` with the source line shown.
    pub fn new(kind: K, source: &str, pos: Pos) -> Located<K> {
        Located {
            kind,
            excerpt: Excerpt::new(source, pos),
        }
    }
    /// An error at `pos`, finding the line through `index`.
    pub fn indexed(kind: K, source: &str, index: &LineIndex, pos: Pos) -> Located<K> {
        Located {
            kind,
            excerpt: Excerpt::indexed(source, index, pos),
        }
    }
    /// Where it happened.
    pub fn pos(&self) -> Pos {
        self.excerpt.pos
    }
}

impl<K: fmt::Display> fmt::Display for Located<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})\n{}", self.kind, self.excerpt.pos, self.excerpt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_points_at_the_column() {
        let src = "fn main(x) {\n    return foo(x);\n}\n";
        let e = Located::new("unknown function `foo`", src, Pos::new(2, 12));
        assert_eq!(
            e.to_string(),
            "unknown function `foo` (2:12)\n  2 |     return foo(x);\n    |            ^"
        );
    }

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let line = format!("{}X{}", "a".repeat(5000), "b".repeat(5000));
        let e = Excerpt::new(&line, Pos::new(1, 5001)).to_string();
        assert!(e.len() < 300, "{e}");
        let mut lines = e.lines();
        let text = lines.next().unwrap_or("");
        let caret = lines.next().unwrap_or("");
        assert_eq!(text.find('X'), caret.find('^'));
    }

    #[test]
    fn private_lines_run_from_marker_to_marker_and_to_the_end_when_unclosed() {
        let src = "a\n// @private hide\nb\n  //   @end hide\nc\n// @private obfuscate\nd";
        let p = PrivateLines::scan(src);
        let lines: Vec<bool> = (1..=7).map(|l| p.contains(l)).collect();
        assert_eq!(lines, [false, true, true, true, false, true, true]);
        assert!(!p.contains(0) && p.contains(7) && !p.contains(99));
        assert!(!PrivateLines::scan("fn f(x) { return x; }").any());
    }

    #[test]
    fn withheld_lines_are_not_printed() {
        let e = Excerpt::withheld(Pos::new(7, 3)).to_string();
        assert!(e.contains("not shown"));
    }
}
