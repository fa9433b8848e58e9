//! The lexer: engine source to tokens, comments and region markers.
//!
//! It first checks the whole input: within the size limit, ASCII only (comments included, so a
//! look-alike letter cannot hide in a name or a marker), no control characters but tab, line
//! feed and CRLF (a lone CR would let a viewer and the runner disagree on line numbers). Then it
//! splits the source into tokens. Comments run from `//` to the end of the line; a comment that
//! contains `@` must be exactly one of the four region markers and alone on its line.

use super::diagnostic::{Located, Pos};
use super::error::{SyntaxError, SyntaxErrorKind};
use super::marker::{Marker, RegionKind};
use super::{MAX_IDENT_LEN, MAX_SOURCE_BYTES, MAX_TOKENS};

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tok {
    /// `fn`
    Fn,
    /// `let`
    Let,
    /// `return`
    Return,
    /// A name: `[A-Za-z_][A-Za-z0-9_]*`, not a keyword.
    Ident,
    /// A number literal.
    Number,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `,`
    Comma,
    /// `;`
    Semi,
    /// `=`
    Assign,
    /// `.`
    Dot,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// `*`
    Star,
    /// `/`
    Slash,
    /// End of input.
    Eof,
}

impl Tok {
    /// How the parser names the token in "expected ..., found ..." messages.
    pub fn describe(self) -> &'static str {
        match self {
            Tok::Fn => "`fn`",
            Tok::Let => "`let`",
            Tok::Return => "`return`",
            Tok::Ident => "a name",
            Tok::Number => "a number",
            Tok::LParen => "`(`",
            Tok::RParen => "`)`",
            Tok::LBrace => "`{`",
            Tok::RBrace => "`}`",
            Tok::Comma => "`,`",
            Tok::Semi => "`;`",
            Tok::Assign => "`=`",
            Tok::Dot => "`.`",
            Tok::Plus => "`+`",
            Tok::Minus => "`-`",
            Tok::Star => "`*`",
            Tok::Slash => "`/`",
            Tok::Eof => "the end of the source",
        }
    }
}

/// A token: its kind, byte range and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// The kind.
    pub tok: Tok,
    /// Byte offset of its first character.
    pub start: usize,
    /// Byte offset just past it.
    pub end: usize,
    /// Line and column of its first character.
    pub pos: Pos,
}

impl Token {
    /// The token's text.
    pub fn text<'a>(&self, source: &'a str) -> &'a str {
        source.get(self.start..self.end).unwrap_or("")
    }
}

/// A `//` comment (markers included), from `//` to the end of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comment {
    /// Byte offset of `//`.
    pub start: usize,
    /// Byte offset of the end of the line.
    pub end: usize,
    /// Position of `//`.
    pub pos: Pos,
}

/// The lexed source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lexed {
    /// Tokens, ending with [`Tok::Eof`].
    pub tokens: Vec<Token>,
    /// Every comment, markers included, in source order.
    pub comments: Vec<Comment>,
    /// The region markers, in source order.
    pub markers: Vec<Marker>,
}

/// Check the raw bytes of an engine and return them as text: ASCII only, with the line and
/// column of the first offending byte otherwise. Callers holding a file's bytes use this before
/// [`super::check`].
pub fn source_from_bytes(bytes: &[u8]) -> Result<&str, SyntaxError> {
    let mut line = 1u32;
    let mut col = 1u32;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x80 {
            let found = match std::str::from_utf8(bytes.get(i..).unwrap_or_default()) {
                Ok(rest) => rest.chars().next().map(describe_char),
                Err(e) if e.valid_up_to() > 0 => {
                    std::str::from_utf8(bytes.get(i..i + e.valid_up_to()).unwrap_or_default())
                        .ok()
                        .and_then(|s| s.chars().next())
                        .map(describe_char)
                }
                Err(_) => None,
            }
            .unwrap_or_else(|| format!("byte 0x{b:02x} (not UTF-8)"));
            let src = String::from_utf8_lossy(bytes);
            return Err(Located::new(
                SyntaxErrorKind::NonAscii { found },
                &src,
                Pos::new(line, col),
            ));
        }
        if b == b'\n' {
            line = line.saturating_add(1);
            col = 1;
        } else {
            col = col.saturating_add(1);
        }
    }
    // All ASCII, hence UTF-8.
    std::str::from_utf8(bytes).map_err(|_| {
        Located::new(
            SyntaxErrorKind::NonAscii {
                found: "invalid UTF-8".into(),
            },
            "",
            Pos::new(1, 1),
        )
    })
}

fn describe_char(c: char) -> String {
    format!("`{c}` (U+{:04X})", c as u32)
}

/// Lex engine source.
pub fn lex(source: &str) -> Result<Lexed, SyntaxError> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(Located::new(
            SyntaxErrorKind::TooLarge {
                size: source.len(),
                limit: MAX_SOURCE_BYTES,
            },
            "",
            Pos::new(1, 1),
        ));
    }
    check_characters(source)?;
    Lexer {
        src: source,
        bytes: source.as_bytes(),
        i: 0,
        line: 1,
        line_start: 0,
        out: Lexed {
            tokens: Vec::new(),
            comments: Vec::new(),
            markers: Vec::new(),
        },
    }
    .run()
}

/// ASCII only, and no control characters except tab, LF, and CR directly before LF.
fn check_characters(source: &str) -> Result<(), SyntaxError> {
    let bytes = source.as_bytes();
    let mut line = 1u32;
    let mut line_start = 0usize;
    for (i, c) in source.char_indices() {
        let pos = || {
            let col = source.get(line_start..i).map_or(0, |s| s.chars().count());
            Pos::new(line, u32::try_from(col + 1).unwrap_or(u32::MAX))
        };
        if !c.is_ascii() {
            return Err(Located::new(
                SyntaxErrorKind::NonAscii {
                    found: describe_char(c),
                },
                source,
                pos(),
            ));
        }
        let b = c as u8;
        let ok = match b {
            b'\n' | b'\t' => true,
            b'\r' => bytes.get(i + 1) == Some(&b'\n'),
            0x20..=0x7e => true,
            _ => false,
        };
        if !ok {
            return Err(Located::new(
                SyntaxErrorKind::ControlChar { byte: b },
                source,
                pos(),
            ));
        }
        if b == b'\n' {
            line = line.saturating_add(1);
            line_start = i + 1;
        }
    }
    Ok(())
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    i: usize,
    line: u32,
    line_start: usize,
    out: Lexed,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Lexer<'a> {
    fn pos_at(&self, i: usize) -> Pos {
        let col = i.saturating_sub(self.line_start) + 1;
        Pos::new(self.line, u32::try_from(col).unwrap_or(u32::MAX))
    }

    fn peek(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.i + ahead).copied()
    }

    fn err(&self, kind: SyntaxErrorKind, at: usize) -> SyntaxError {
        Located::new(kind, self.src, self.pos_at(at))
    }

    fn push(&mut self, tok: Tok, start: usize) -> Result<(), SyntaxError> {
        if self.out.tokens.len() >= MAX_TOKENS {
            return Err(self.err(SyntaxErrorKind::TooManyTokens { limit: MAX_TOKENS }, start));
        }
        let pos = self.pos_at(start);
        self.out.tokens.push(Token {
            tok,
            start,
            end: self.i,
            pos,
        });
        Ok(())
    }

    fn run(mut self) -> Result<Lexed, SyntaxError> {
        while let Some(b) = self.peek(0) {
            let start = self.i;
            match b {
                b'\n' => {
                    self.i += 1;
                    self.line = self.line.saturating_add(1);
                    self.line_start = self.i;
                }
                b' ' | b'\t' | b'\r' => self.i += 1,
                b'/' if self.peek(1) == Some(b'/') => self.comment()?,
                b'0'..=b'9' => self.number()?,
                b if is_ident_start(b) => self.ident()?,
                _ => {
                    let tok = match b {
                        b'(' => Tok::LParen,
                        b')' => Tok::RParen,
                        b'{' => Tok::LBrace,
                        b'}' => Tok::RBrace,
                        b',' => Tok::Comma,
                        b';' => Tok::Semi,
                        b'=' => Tok::Assign,
                        b'.' => Tok::Dot,
                        b'+' => Tok::Plus,
                        b'-' => Tok::Minus,
                        b'*' => Tok::Star,
                        b'/' => Tok::Slash,
                        other => {
                            return Err(self.err(
                                SyntaxErrorKind::UnexpectedChar {
                                    ch: char::from(other),
                                },
                                start,
                            ))
                        }
                    };
                    self.i += 1;
                    self.push(tok, start)?;
                }
            }
        }
        let start = self.i;
        let pos = self.pos_at(start);
        self.out.tokens.push(Token {
            tok: Tok::Eof,
            start,
            end: start,
            pos,
        });
        Ok(self.out)
    }

    fn ident(&mut self) -> Result<(), SyntaxError> {
        let start = self.i;
        while self.peek(0).is_some_and(is_ident_char) {
            self.i += 1;
        }
        let len = self.i - start;
        if len > MAX_IDENT_LEN {
            return Err(self.err(
                SyntaxErrorKind::IdentTooLong {
                    len,
                    limit: MAX_IDENT_LEN,
                },
                start,
            ));
        }
        let tok = match self.src.get(start..self.i) {
            Some("fn") => Tok::Fn,
            Some("let") => Tok::Let,
            Some("return") => Tok::Return,
            _ => Tok::Ident,
        };
        self.push(tok, start)
    }

    fn number(&mut self) -> Result<(), SyntaxError> {
        const MAX_NUMBER_LEN: usize = 64;
        let start = self.i;
        let digits = |lx: &mut Self| {
            let from = lx.i;
            while lx.peek(0).is_some_and(|b| b.is_ascii_digit()) {
                lx.i += 1;
            }
            lx.i > from
        };
        digits(self);
        let bad = |lx: &Self, why| {
            let end = (lx.i + 1).min(lx.bytes.len()).min(start + MAX_NUMBER_LEN);
            let text = lx.src.get(start..end).unwrap_or("").to_owned();
            lx.err(SyntaxErrorKind::BadNumber { text, why }, start)
        };
        if self.peek(0) == Some(b'.') {
            self.i += 1;
            if !digits(self) {
                return Err(bad(self, "a `.` must be followed by digits"));
            }
        }
        if matches!(self.peek(0), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(0), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !digits(self) {
                return Err(bad(self, "an exponent needs digits"));
            }
        }
        if self.peek(0).is_some_and(|b| is_ident_char(b) || b == b'.') {
            return Err(bad(
                self,
                "a number must not run into a name or another `.`",
            ));
        }
        if self.i - start > MAX_NUMBER_LEN {
            return Err(bad(self, "longer than 64 characters"));
        }
        let text = self.src.get(start..self.i).unwrap_or("");
        if !text.parse::<f64>().is_ok_and(f64::is_finite) {
            return Err(bad(self, "out of range"));
        }
        self.push(Tok::Number, start)
    }

    fn comment(&mut self) -> Result<(), SyntaxError> {
        let start = self.i;
        while self.peek(0).is_some_and(|b| b != b'\n') {
            self.i += 1;
        }
        let pos = self.pos_at(start);
        let text = self.src.get(start..self.i).unwrap_or("");
        let text = text.strip_suffix('\r').unwrap_or(text);
        self.out.comments.push(Comment {
            start,
            end: self.i,
            pos,
        });
        let body = text.get(2..).unwrap_or("");
        if !body.contains('@') {
            return Ok(());
        }
        let words: Vec<&str> = body.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
        let marker = match words.as_slice() {
            ["@private", kind] => RegionKind::from_word(kind).map(|k| (true, k)),
            ["@end", kind] => RegionKind::from_word(kind).map(|k| (false, k)),
            _ => None,
        };
        let Some((open, kind)) = marker else {
            let text: String = text.chars().take(64).collect();
            return Err(self.err(SyntaxErrorKind::MalformedMarker { text }, start));
        };
        let before = self.src.get(self.line_start..start).unwrap_or("");
        if !before.bytes().all(|b| b == b' ' || b == b'\t') {
            return Err(self.err(SyntaxErrorKind::MarkerNotAlone, start));
        }
        self.out.markers.push(Marker { open, kind, pos });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        lex(src)
            .map(|l| l.tokens.iter().map(|t| t.tok).collect())
            .unwrap_or_default()
    }

    fn err(src: &str) -> SyntaxErrorKind {
        match lex(src) {
            Err(e) => e.kind,
            Ok(l) => panic!("lexed: {:?}", l.tokens),
        }
    }

    #[test]
    fn lexes_a_statement() {
        use Tok::*;
        assert_eq!(
            kinds("let x = linear(h, layer.q_proj) * 0.5e-3; // note"),
            vec![
                Let, Ident, Assign, Ident, LParen, Ident, Comma, Ident, Dot, Ident, RParen, Star,
                Number, Semi, Eof
            ]
        );
    }

    #[test]
    fn positions_are_line_and_column() {
        let l = lex("fn f()\r\n  {\treturn 1; }").unwrap_or_else(|e| panic!("{e}"));
        let ret = l
            .tokens
            .iter()
            .find(|t| t.tok == Tok::Return)
            .map(|t| t.pos);
        assert_eq!(ret, Some(Pos::new(2, 5)));
    }

    #[test]
    fn rejects_non_ascii_identifier() {
        // Cyrillic i in "linear".
        let e = lex("fn f(x) { return l\u{456}near(x); }").unwrap_err();
        assert!(matches!(e.kind, SyntaxErrorKind::NonAscii { .. }));
        assert_eq!(e.pos(), Pos::new(1, 19));
    }

    #[test]
    fn rejects_non_ascii_in_comments() {
        assert!(matches!(
            err("// caf\u{e9}\nfn f() { return 1; }"),
            SyntaxErrorKind::NonAscii { .. }
        ));
    }

    #[test]
    fn rejects_non_utf8_bytes_with_position() {
        let e = source_from_bytes(b"fn f() {\n  return \xff; }").unwrap_err();
        assert!(matches!(e.kind, SyntaxErrorKind::NonAscii { .. }));
        assert_eq!(e.pos(), Pos::new(2, 10));
    }

    #[test]
    fn rejects_lone_carriage_return_and_control_characters() {
        assert_eq!(
            err("fn f() {\rreturn 1; }"),
            SyntaxErrorKind::ControlChar { byte: b'\r' }
        );
        assert_eq!(err("fn\x0cf"), SyntaxErrorKind::ControlChar { byte: 0x0c });
        assert_eq!(err("fn\0"), SyntaxErrorKind::ControlChar { byte: 0 });
    }

    #[test]
    fn rejects_bad_numbers() {
        for src in ["1.", "1e", "1e+", "12abc", "1.5.2", "1e999", "1.x"] {
            assert!(
                matches!(err(src), SyntaxErrorKind::BadNumber { .. }),
                "{src}"
            );
        }
    }

    #[test]
    fn reads_markers() {
        let l = lex(
            "  // @private obfuscate\n//@private\thide\n// @end hide\n\t//   @end   obfuscate  ",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let m: Vec<(bool, RegionKind, u32)> = l
            .markers
            .iter()
            .map(|m| (m.open, m.kind, m.pos.line))
            .collect();
        assert_eq!(
            m,
            vec![
                (true, RegionKind::Obfuscate, 1),
                (true, RegionKind::Hide, 2),
                (false, RegionKind::Hide, 3),
                (false, RegionKind::Obfuscate, 4)
            ]
        );
    }

    #[test]
    fn rejects_malformed_markers() {
        for src in [
            "// @private",
            "// @private secret",
            "// @Private hide",
            "// @private hide now",
            "/// @private hide",
            "// @ private hide",
            "// see @end hide",
            "// email me@example.org",
            "// @begin hide",
        ] {
            assert!(
                matches!(err(src), SyntaxErrorKind::MalformedMarker { .. }),
                "{src}"
            );
        }
    }

    #[test]
    fn rejects_marker_after_code() {
        assert_eq!(
            err("fn f() { return 1; } // @private hide"),
            SyntaxErrorKind::MarkerNotAlone
        );
    }

    #[test]
    fn rejects_oversized_input() {
        let big = " ".repeat(MAX_SOURCE_BYTES + 1);
        assert!(matches!(err(&big), SyntaxErrorKind::TooLarge { .. }));
        let long = "a".repeat(MAX_IDENT_LEN + 1);
        assert!(matches!(err(&long), SyntaxErrorKind::IdentTooLong { .. }));
        let many = "+".repeat(MAX_TOKENS + 1);
        assert!(matches!(err(&many), SyntaxErrorKind::TooManyTokens { .. }));
    }
}
