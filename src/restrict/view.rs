//! The owner's redacted view of an engine.
//!
//! Public lines are copied as written, except that a name bound inside a private region is
//! renamed wherever it appears. Obfuscate regions keep their layout and keywords, built-in
//! names and public names readable; private names become `f1`, `v1`, `a1` (functions,
//! variables, fields), numbers become `_`, and comments are dropped. A hide region, markers
//! included, becomes one line `// [hidden: N lines]`. Renamed names never collide with a
//! name in the source, so the view cannot be mistaken for public code.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::ast::Program;
use super::lexer::{Lexed, Tok};
use super::regions::{RegionKind, Regions};
use super::resolve::{Resolved, Sym};

/// The names the view shows for functions, variables and fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    functions: Vec<String>,
    locals: Vec<String>,
    fields: HashMap<String, String>,
}

struct Fresh<'a> {
    taken: &'a BTreeSet<&'a str>,
    prefix: &'static str,
    next: usize,
}

impl Fresh<'_> {
    fn next(&mut self) -> String {
        loop {
            self.next += 1;
            let name = format!("{}{}", self.prefix, self.next);
            if !self.taken.contains(name.as_str()) {
                return name;
            }
        }
    }
}

impl Naming {
    /// Choose view names: private bindings and functions renamed in order of definition,
    /// private-only field names in order of first use.
    pub fn new(
        source: &str,
        lexed: &Lexed,
        program: &Program,
        regions: &Regions,
        resolved: &Resolved,
    ) -> Naming {
        let taken: BTreeSet<&str> = lexed
            .tokens
            .iter()
            .filter(|t| t.tok == Tok::Ident)
            .map(|t| t.text(source))
            .collect();
        let mut fresh_f = Fresh {
            taken: &taken,
            prefix: "f",
            next: 0,
        };
        let functions = program
            .functions
            .iter()
            .map(|f| {
                if regions.is_private(f.name.pos.line) {
                    fresh_f.next()
                } else {
                    f.name.name.clone()
                }
            })
            .collect();
        let mut fresh_v = Fresh {
            taken: &taken,
            prefix: "v",
            next: 0,
        };
        let locals = resolved
            .bindings
            .iter()
            .map(|b| {
                if regions.is_private(b.pos.line) {
                    fresh_v.next()
                } else {
                    b.name.clone()
                }
            })
            .collect();
        // A field name is private when it is only ever used on private lines.
        let mut field_lines: BTreeMap<&str, (bool, usize)> = BTreeMap::new();
        for t in lexed.tokens.iter().filter(|t| t.tok == Tok::Ident) {
            if resolved.syms.get(&t.start) == Some(&Sym::Field) {
                let entry = field_lines.entry(t.text(source)).or_insert((true, t.start));
                entry.0 &= regions.is_private(t.pos.line);
            }
        }
        let mut private_fields: Vec<(usize, &str)> = field_lines
            .iter()
            .filter(|(_, &(private, _))| private)
            .map(|(&name, &(_, first))| (first, name))
            .collect();
        private_fields.sort();
        let mut fresh_a = Fresh {
            taken: &taken,
            prefix: "a",
            next: 0,
        };
        let fields = private_fields
            .into_iter()
            .map(|(_, name)| (name.to_owned(), fresh_a.next()))
            .collect();
        Naming {
            functions,
            locals,
            fields,
        }
    }

    /// The view name of function `i`.
    pub fn function(&self, i: usize) -> &str {
        self.functions.get(i).map_or("?", String::as_str)
    }

    /// The view name of binding `id`.
    pub fn local(&self, id: usize) -> &str {
        self.locals.get(id).map_or("?", String::as_str)
    }

    /// The view name of field `name`.
    pub fn field<'a>(&'a self, name: &'a str) -> &'a str {
        self.fields.get(name).map_or(name, String::as_str)
    }
}

/// Render the view.
pub fn render(
    source: &str,
    lexed: &Lexed,
    regions: &Regions,
    resolved: &Resolved,
    naming: &Naming,
) -> String {
    let marker_lines: BTreeSet<u32> = lexed.markers.iter().map(|m| m.pos.line).collect();
    let mut tokens = lexed.tokens.iter().filter(|t| t.tok != Tok::Eof).peekable();
    let mut out: Vec<String> = Vec::new();
    let mut offset = 0usize;
    for (idx, raw) in source.split('\n').enumerate() {
        let line_no = u32::try_from(idx + 1).unwrap_or(u32::MAX);
        let start = offset;
        offset += raw.len() + 1;
        let text = raw.strip_suffix('\r').unwrap_or(raw);
        let end = start + text.len();
        // Tokens on this line (none spans lines).
        let mut line_tokens = Vec::new();
        while let Some(t) = tokens.next_if(|t| t.start < end + 1) {
            line_tokens.push(*t);
        }
        if let Some(hide) = regions.hidden_by(line_no) {
            if hide.start_line == line_no {
                let indent = text
                    .get(..text.len() - text.trim_start().len())
                    .unwrap_or("");
                let n = hide.inner_lines();
                let plural = if n == 1 { "" } else { "s" };
                out.push(format!("{indent}// [hidden: {n} line{plural}]"));
            }
            continue;
        }
        let obfuscated = regions.innermost(line_no).map(|r| r.kind) == Some(RegionKind::Obfuscate);
        if obfuscated && marker_lines.contains(&line_no) {
            out.push(text.to_owned());
            continue;
        }
        let mut line = String::with_capacity(text.len());
        let mut cursor = start;
        for t in &line_tokens {
            line.push_str(source.get(cursor..t.start).unwrap_or(""));
            let word = t.text(source);
            match t.tok {
                Tok::Ident => line.push_str(match resolved.syms.get(&t.start) {
                    Some(Sym::Builtin(_) | Sym::Scan) => word,
                    Some(Sym::Function(i)) => naming.function(*i),
                    Some(Sym::Local(id)) => naming.local(*id),
                    Some(Sym::Field) => naming.field(word),
                    None if obfuscated => "_",
                    None => word,
                }),
                Tok::Number if obfuscated => line.push('_'),
                _ => line.push_str(word),
            }
            cursor = t.end;
        }
        let rest = source.get(cursor..end).unwrap_or("");
        if obfuscated {
            // Only whitespace and a comment can follow the last token: drop the comment.
            let rest = rest
                .find("//")
                .map_or(rest, |i| rest.get(..i).unwrap_or(""));
            line.push_str(rest);
            let trimmed = line.trim_end().len();
            line.truncate(trimmed);
        } else {
            line.push_str(rest);
        }
        out.push(line);
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use crate::restrict::check;
    use crate::restrict::policy::Policy;

    fn policy() -> Policy {
        Policy::from_json(
            br#"{"schema":"runner-policy/1","name":"t","allow_functions":["linear","add","rms_norm","scale"],
                "limits":{"max_batch":1,"max_new_tokens":1,"max_prompt_tokens":1,"max_inputs":1},
                "outputs":["tokens"]}"#,
            "test",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn renders_obfuscated_and_hidden_regions() {
        let src = "\
fn main(x, model) {
  // @private obfuscate
  let secret_h = rms_norm(x, model.secret_norm, 0.000123, 1.0); // tuned
  // @private hide
  let hidden_z = scale(secret_h, 77.5);
  let hidden_y = add(hidden_z, secret_h);
  // @end hide
  // @end obfuscate
  return linear(hidden_y, model.w);
}
";
        let c = check(src, "t.eng", &policy()).unwrap_or_else(|e| panic!("{e}"));
        let expected = "\
fn main(x, model) {
  // @private obfuscate
  let v1 = rms_norm(x, model.a1, _, _);
  // [hidden: 2 lines]
  // @end obfuscate
  return linear(v3, model.w);
}
";
        assert_eq!(c.view(), expected);
    }

    #[test]
    fn renamed_names_avoid_names_in_the_source() {
        let src = "\
fn main(v1, f1) {
  return helper(v1, f1);
}
// @private obfuscate
fn helper(a, b) {
  return add(a, b);
}
// @end obfuscate
";
        let c = check(src, "t.eng", &policy()).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.view().contains("return f2(v1, f1);"), "{}", c.view());
        assert!(c.view().contains("fn f2(v2, v3) {"), "{}", c.view());
    }
}
