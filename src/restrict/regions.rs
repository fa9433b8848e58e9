//! Private regions: the marker lines paired into regions, and the rule that a region covers
//! whole constructs.
//!
//! `// @private obfuscate` ... `// @end obfuscate` marks code the owner sees with identifiers
//! renamed and numbers blanked; `// @private hide` ... `// @end hide` marks code the owner sees
//! as one placeholder line. A hide region may sit inside an obfuscate region; nothing else
//! nests. A region covers whole lines (markers are alone on theirs), and what it covers is
//! either whole function definitions at the top level or whole statements of one function
//! body; a marker line falling inside a function header, a statement, or between a function's
//! statements and its braces is an error.

use serde::Serialize;

use super::ast::Program;
use super::diagnostic::{Located, Pos};
use super::error::{SyntaxError, SyntaxErrorKind};
use super::marker::Marker;
pub use super::marker::RegionKind;

/// One private region, marker lines included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Region {
    /// Its kind.
    pub kind: RegionKind,
    /// Line of the `// @private` marker.
    pub start_line: u32,
    /// Line of the `// @end` marker.
    pub end_line: u32,
}

impl Region {
    /// Whether `line` is inside the region (marker lines included).
    pub fn contains(&self, line: u32) -> bool {
        (self.start_line..=self.end_line).contains(&line)
    }
    /// Lines strictly between the markers.
    pub fn inner_lines(&self) -> u32 {
        self.end_line
            .saturating_sub(self.start_line)
            .saturating_sub(1)
    }
}

/// The private regions of an engine, in order of their opening markers, and for each line the
/// innermost region holding it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Regions {
    list: Vec<Region>,
    /// Index 0 is unused; `by_line[n]` is the innermost region of line `n`.
    by_line: Vec<Option<u32>>,
}

/// Where a marker line sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Between function definitions.
    TopLevel,
    /// Between the statements of function `i`'s body.
    Body(usize),
}

impl Regions {
    /// Pair the markers into regions, checking nesting and balance.
    pub fn build(source: &str, markers: &[Marker]) -> Result<Regions, SyntaxError> {
        let mut list: Vec<Region> = Vec::new();
        // Open regions: (index into `list`, opening marker position).
        let mut open: Vec<(usize, Pos)> = Vec::new();
        for m in markers {
            let err = |kind| Located::new(kind, source, m.pos);
            if m.open {
                if let Some(&(outer_idx, _)) = open.last() {
                    let outer = list.get(outer_idx).copied();
                    if let Some(outer) = outer {
                        if !(outer.kind == RegionKind::Obfuscate && m.kind == RegionKind::Hide) {
                            return Err(err(SyntaxErrorKind::BadNesting {
                                inner: m.kind,
                                outer: outer.kind,
                                outer_line: outer.start_line,
                            }));
                        }
                    }
                }
                open.push((list.len(), m.pos));
                list.push(Region {
                    kind: m.kind,
                    start_line: m.pos.line,
                    end_line: m.pos.line,
                });
            } else {
                let Some((idx, _)) = open.pop() else {
                    return Err(err(SyntaxErrorKind::UnopenedRegion { kind: m.kind }));
                };
                let Some(region) = list.get_mut(idx) else {
                    return Err(err(SyntaxErrorKind::UnopenedRegion { kind: m.kind }));
                };
                if region.kind != m.kind {
                    return Err(err(SyntaxErrorKind::MismatchedEnd {
                        found: m.kind,
                        open: region.kind,
                        open_line: region.start_line,
                    }));
                }
                region.end_line = m.pos.line;
            }
        }
        if let Some(&(idx, pos)) = open.last() {
            let kind = list.get(idx).map_or(RegionKind::Obfuscate, |r| r.kind);
            return Err(Located::new(
                SyntaxErrorKind::UnclosedRegion { kind },
                source,
                pos,
            ));
        }
        // Regions nest at most two deep, so filling outer then inner regions touches each line
        // at most twice.
        let lines = source.bytes().filter(|&b| b == b'\n').count() + 2;
        let mut by_line = vec![None; lines];
        for (i, r) in list.iter().enumerate() {
            for line in r.start_line..=r.end_line {
                if let Some(slot) = by_line.get_mut(line as usize) {
                    *slot = u32::try_from(i).ok();
                }
            }
        }
        Ok(Regions { list, by_line })
    }

    /// Check that no region boundary splits a construct of `program`: both markers of a region
    /// must sit between function definitions, or both between the statements of one body.
    pub fn check_constructs(&self, source: &str, program: &Program) -> Result<(), SyntaxError> {
        for r in &self.list {
            let open = place(program, r.start_line)
                .map_err(|what| marker_error(source, r.start_line, what))?;
            let close = place(program, r.end_line)
                .map_err(|what| marker_error(source, r.end_line, what))?;
            if open == close {
                continue;
            }
            // Point at the marker inside a body (the closing one when both are).
            let (line, f) = match (open, close) {
                (_, Place::Body(f)) => (r.end_line, f),
                (Place::Body(f), _) => (r.start_line, f),
                (Place::TopLevel, Place::TopLevel) => continue,
            };
            let what = program
                .functions
                .get(f)
                .map_or_else(String::new, describe_function);
            return Err(marker_error(source, line, what));
        }
        Ok(())
    }

    /// All regions, in order of their opening markers.
    pub fn list(&self) -> &[Region] {
        &self.list
    }

    /// The innermost region containing `line`.
    pub fn innermost(&self, line: u32) -> Option<&Region> {
        let i = self.by_line.get(line as usize).copied().flatten()?;
        self.list.get(i as usize)
    }

    /// Whether `line` is private (inside any region).
    pub fn is_private(&self, line: u32) -> bool {
        self.innermost(line).is_some()
    }

    /// The hide region containing `line`, if any (nothing nests inside a hide region, so it is
    /// the innermost).
    pub fn hidden_by(&self, line: u32) -> Option<&Region> {
        self.innermost(line).filter(|r| r.kind == RegionKind::Hide)
    }
}

fn describe_function(f: &super::ast::Function) -> String {
    format!(
        "function `{}` (lines {}-{})",
        f.name.name, f.first_line, f.last_line
    )
}

/// Where a marker on `line` sits, or the construct it falls inside.
fn place(program: &Program, line: u32) -> Result<Place, String> {
    // Functions follow each other in source order without overlapping.
    let idx = program.functions.partition_point(|f| f.first_line <= line);
    let Some(f) = idx.checked_sub(1).and_then(|i| program.functions.get(i)) else {
        return Ok(Place::TopLevel);
    };
    if line > f.last_line {
        return Ok(Place::TopLevel);
    }
    if !(f.open_line < line && line < f.last_line) {
        return Err(describe_function(f));
    }
    let statement =
        |first: u32, last: u32| format!("a statement of `{}` (lines {first}-{last})", f.name.name);
    let k = f.lets.partition_point(|l| l.first_line <= line);
    if let Some(l) = k.checked_sub(1).and_then(|i| f.lets.get(i)) {
        if line <= l.last_line {
            return Err(statement(l.first_line, l.last_line));
        }
    }
    if f.ret.first_line <= line && line <= f.ret.last_line {
        return Err(statement(f.ret.first_line, f.ret.last_line));
    }
    Ok(Place::Body(idx - 1))
}

fn marker_error(source: &str, line: u32, what: String) -> SyntaxError {
    let kind = SyntaxErrorKind::SplitsConstruct { what };
    // The marker is the first non-blank text of its line.
    let text = super::diagnostic::line_text(source, line);
    let col = text.len() - text.trim_start().len() + 1;
    Located::new(
        kind,
        source,
        Pos::new(line, u32::try_from(col).unwrap_or(1)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restrict::lexer::lex;
    use crate::restrict::parser::parse;

    fn regions(src: &str) -> Result<Regions, SyntaxError> {
        let lexed = lex(src)?;
        let program = parse(src, &lexed)?;
        let r = Regions::build(src, &lexed.markers)?;
        r.check_constructs(src, &program)?;
        Ok(r)
    }

    fn kind(src: &str) -> SyntaxErrorKind {
        match regions(src) {
            Err(e) => e.kind,
            Ok(r) => panic!("accepted: {r:?}"),
        }
    }

    #[test]
    fn pairs_nested_regions() {
        let src = "\
fn main(x) {
  // @private obfuscate
  let a = f(x);
  // @private hide
  let b = f(a);
  // @end hide
  // @end obfuscate
  return b;
}
// @private hide
fn f(x) { return x; }
// @end hide
";
        let r = regions(src).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(RegionKind, u32, u32)> = r
            .list()
            .iter()
            .map(|r| (r.kind, r.start_line, r.end_line))
            .collect();
        use RegionKind::*;
        assert_eq!(got, vec![(Obfuscate, 2, 7), (Hide, 4, 6), (Hide, 10, 12)]);
        assert_eq!(r.innermost(5).map(|r| r.kind), Some(Hide));
        assert_eq!(r.innermost(3).map(|r| r.kind), Some(Obfuscate));
        assert!(!r.is_private(8));
        assert_eq!(r.hidden_by(5).map(|r| r.start_line), Some(4));
    }

    #[test]
    fn rejects_obfuscate_inside_hide_and_same_kind_nesting() {
        let nest = |outer: &str, inner: &str| {
            format!(
                "// @private {outer}\n// @private {inner}\nfn f(x) {{ return x; }}\n// @end {inner}\n// @end {outer}\n"
            )
        };
        for (o, i) in [
            ("hide", "obfuscate"),
            ("hide", "hide"),
            ("obfuscate", "obfuscate"),
        ] {
            assert!(
                matches!(kind(&nest(o, i)), SyntaxErrorKind::BadNesting { .. }),
                "{o} {i}"
            );
        }
        assert!(regions(&nest("obfuscate", "hide")).is_ok());
    }

    #[test]
    fn rejects_unbalanced_markers() {
        assert_eq!(
            kind("// @end hide\nfn f(x) { return x; }"),
            SyntaxErrorKind::UnopenedRegion {
                kind: RegionKind::Hide
            }
        );
        assert_eq!(
            kind("// @private hide\nfn f(x) { return x; }"),
            SyntaxErrorKind::UnclosedRegion {
                kind: RegionKind::Hide
            }
        );
        assert!(matches!(
            kind("// @private obfuscate\nfn f(x) { return x; }\n// @end hide"),
            SyntaxErrorKind::MismatchedEnd { .. }
        ));
    }

    #[test]
    fn rejects_boundaries_that_split_constructs() {
        let cases = [
            // Splits a function: opens outside, closes in the body.
            "// @private hide\nfn f(x) {\n  let a = x;\n// @end hide\n  return a;\n}",
            // Opens in a body, closes after the function.
            "fn f(x) {\n// @private hide\n  return x;\n}\n// @end hide",
            // Splits a multi-line statement.
            "fn f(x) {\n  let a = g(\n// @private hide\n    x);\n// @end hide\n  return a;\n}\nfn g(x) { return x; }",
            // Between the header and the brace.
            "fn f(x)\n// @private hide\n{\n  return x;\n// @end hide\n}",
            // Spans two functions' bodies.
            "fn f(x) {\n// @private hide\n  return x;\n}\nfn g(x) {\n// @end hide\n  return x;\n}",
        ];
        for src in cases {
            assert!(
                matches!(kind(src), SyntaxErrorKind::SplitsConstruct { .. }),
                "{src}"
            );
        }
    }

    #[test]
    fn split_error_points_at_the_marker() {
        let src = "fn f(x) {\n  let a = g(\n  // @private hide\n    x);\n  // @end hide\n  return a;\n}\nfn g(x) { return x; }";
        let e = regions(src).unwrap_err();
        assert_eq!(e.pos(), Pos::new(3, 3));
    }
}
