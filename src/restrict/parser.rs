//! The parser: tokens to a [`Program`], by recursive descent over the grammar in
//! docs/engine-language.md. Nesting is bounded by [`MAX_DEPTH`], so hostile
//! input cannot exhaust the stack, and every failure is an error at a line:col, never a panic.

use super::ast::{BinOp, Expr, ExprKind, Function, Ident, Let, Program, Return};
use super::diagnostic::Located;
use super::error::{SyntaxError, SyntaxErrorKind};
use super::lexer::{Lexed, Tok, Token};
use super::{MAX_ARGS, MAX_DEPTH, MAX_FUNCTIONS};

/// Parse lexed source.
pub fn parse(source: &str, lexed: &Lexed) -> Result<Program, SyntaxError> {
    let eof = lexed.tokens.last().copied().unwrap_or(Token {
        tok: Tok::Eof,
        start: source.len(),
        end: source.len(),
        pos: super::diagnostic::Pos::new(1, 1),
    });
    let mut p = Parser {
        src: source,
        toks: &lexed.tokens,
        eof,
        i: 0,
        depth: 0,
    };
    let mut functions = Vec::new();
    while p.peek().tok != Tok::Eof {
        if functions.len() >= MAX_FUNCTIONS {
            return Err(p.error(SyntaxErrorKind::TooMany {
                what: "functions",
                limit: MAX_FUNCTIONS,
            }));
        }
        functions.push(p.function()?);
    }
    Ok(Program { functions })
}

struct Parser<'a> {
    src: &'a str,
    toks: &'a [Token],
    eof: Token,
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Token {
        self.toks.get(self.i).copied().unwrap_or(self.eof)
    }

    fn bump(&mut self) -> Token {
        let t = self.peek();
        if t.tok != Tok::Eof {
            self.i += 1;
        }
        t
    }

    fn error(&self, kind: SyntaxErrorKind) -> SyntaxError {
        Located::new(kind, self.src, self.peek().pos)
    }

    fn found(&self) -> String {
        let t = self.peek();
        match t.tok {
            Tok::Ident | Tok::Number => format!("`{}`", t.text(self.src)),
            other => other.describe().to_owned(),
        }
    }

    fn expect(&mut self, tok: Tok, expected: &'static str) -> Result<Token, SyntaxError> {
        if self.peek().tok == tok {
            Ok(self.bump())
        } else {
            Err(self.error(SyntaxErrorKind::Expected {
                expected,
                found: self.found(),
            }))
        }
    }

    fn ident(&mut self, expected: &'static str) -> Result<Ident, SyntaxError> {
        let t = self.expect(Tok::Ident, expected)?;
        Ok(Ident {
            name: t.text(self.src).to_owned(),
            pos: t.pos,
            start: t.start,
        })
    }

    /// `fn name(a, b) { let ...; return ...; }`
    fn function(&mut self) -> Result<Function, SyntaxError> {
        let fn_tok = self.expect(Tok::Fn, "`fn` (a function definition)")?;
        let name = self.ident("the function's name")?;
        self.expect(Tok::LParen, "`(` after the function's name")?;
        let mut params = Vec::new();
        while self.peek().tok != Tok::RParen {
            if params.len() >= MAX_ARGS {
                return Err(self.error(SyntaxErrorKind::TooMany {
                    what: "parameters",
                    limit: MAX_ARGS,
                }));
            }
            params.push(self.ident("a parameter name or `)`")?);
            if self.peek().tok != Tok::Comma {
                break;
            }
            self.bump();
        }
        self.expect(Tok::RParen, "`,` or `)` in the parameter list")?;
        let open = self.expect(Tok::LBrace, "`{` to open the function body")?;
        let mut lets = Vec::new();
        let ret = loop {
            match self.peek().tok {
                Tok::Let => lets.push(self.let_stmt()?),
                Tok::Return => break self.return_stmt()?,
                _ => {
                    return Err(self.error(SyntaxErrorKind::Expected {
                        expected: "`let` or `return` (a body is `let` statements, then `return`)",
                        found: self.found(),
                    }))
                }
            }
        };
        let close = self.expect(Tok::RBrace, "`}` (`return` must be the last statement)")?;
        Ok(Function {
            name,
            params,
            lets,
            ret,
            first_line: fn_tok.pos.line,
            open_line: open.pos.line,
            last_line: close.pos.line,
        })
    }

    fn let_stmt(&mut self) -> Result<Let, SyntaxError> {
        let let_tok = self.bump();
        let name = self.ident("a name after `let`")?;
        self.expect(Tok::Assign, "`=` after the name")?;
        let value = self.expr()?;
        let semi = self.expect(Tok::Semi, "`;` at the end of the statement")?;
        Ok(Let {
            name,
            value,
            first_line: let_tok.pos.line,
            last_line: semi.pos.line,
        })
    }

    fn return_stmt(&mut self) -> Result<Return, SyntaxError> {
        let ret = self.bump();
        let value = self.expr()?;
        let semi = self.expect(Tok::Semi, "`;` at the end of the statement")?;
        Ok(Return {
            value,
            pos: ret.pos,
            first_line: ret.pos.line,
            last_line: semi.pos.line,
        })
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error(SyntaxErrorKind::TooDeep { limit: MAX_DEPTH }));
        }
        self.depth += 1;
        Ok(())
    }

    /// `term (("+" | "-") term)*`
    fn expr(&mut self) -> Result<Expr, SyntaxError> {
        self.enter()?;
        let mut nested = 1;
        let mut lhs = self.term()?;
        loop {
            let op = match self.peek().tok {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => break,
            };
            // A chain `a + b + c` nests to the left: it counts towards the depth limit too,
            // so later passes over the tree recurse a bounded number of times.
            self.enter()?;
            nested += 1;
            let pos = self.bump().pos;
            let rhs = self.term()?;
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                pos,
            };
        }
        self.depth -= nested;
        Ok(lhs)
    }

    /// `unary (("*" | "/") unary)*`
    fn term(&mut self) -> Result<Expr, SyntaxError> {
        let mut nested = 0;
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek().tok {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                _ => break,
            };
            self.enter()?;
            nested += 1;
            let pos = self.bump().pos;
            let rhs = self.unary()?;
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                pos,
            };
        }
        self.depth -= nested;
        Ok(lhs)
    }

    /// `"-" unary | postfix`
    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        if self.peek().tok == Tok::Minus {
            let pos = self.bump().pos;
            self.enter()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr {
                kind: ExprKind::Neg(Box::new(inner)),
                pos,
            });
        }
        self.postfix()
    }

    /// `primary ("." name)*`
    fn postfix(&mut self) -> Result<Expr, SyntaxError> {
        let mut nested = 0;
        let mut e = self.primary()?;
        while self.peek().tok == Tok::Dot {
            self.enter()?;
            nested += 1;
            self.bump();
            let field = self.ident("a field name after `.`")?;
            e = Expr {
                pos: field.pos,
                kind: ExprKind::Field(Box::new(e), field),
            };
        }
        self.depth -= nested;
        Ok(e)
    }

    /// `number | name | name "(" args ")" | "(" expr ")"`
    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        let t = self.peek();
        match t.tok {
            Tok::Number => {
                self.bump();
                // The lexer only emits finite, parsable literals.
                let v = t.text(self.src).parse::<f64>().unwrap_or(f64::NAN);
                Ok(Expr {
                    kind: ExprKind::Number(v),
                    pos: t.pos,
                })
            }
            Tok::Ident => {
                let name = self.ident("a name")?;
                if self.peek().tok != Tok::LParen {
                    return Ok(Expr {
                        pos: name.pos,
                        kind: ExprKind::Var(name),
                    });
                }
                self.bump();
                let mut args = Vec::new();
                while self.peek().tok != Tok::RParen {
                    if args.len() >= MAX_ARGS {
                        return Err(self.error(SyntaxErrorKind::TooMany {
                            what: "arguments",
                            limit: MAX_ARGS,
                        }));
                    }
                    args.push(self.expr()?);
                    if self.peek().tok != Tok::Comma {
                        break;
                    }
                    self.bump();
                }
                self.expect(Tok::RParen, "`,` or `)` in the argument list")?;
                Ok(Expr {
                    pos: name.pos,
                    kind: ExprKind::Call(name, args),
                })
            }
            Tok::LParen => {
                self.bump();
                let e = self.expr()?;
                self.expect(Tok::RParen, "`)`")?;
                Ok(e)
            }
            _ => Err(self.error(SyntaxErrorKind::Expected {
                expected: "an expression (a number, a name, a call or `(`)",
                found: self.found(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restrict::diagnostic::Pos;
    use crate::restrict::lexer::lex;

    fn parse_src(src: &str) -> Result<Program, SyntaxError> {
        parse(src, &lex(src)?)
    }

    #[test]
    fn parses_functions_and_precedence() {
        let p = parse_src(
            "fn main(model, x) {\n  let y = linear(x, model.layers.w);\n  return -1 + 2 * 3;\n}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let f = &p.functions[0];
        assert_eq!(f.name.name, "main");
        assert_eq!(f.params.len(), 2);
        assert_eq!((f.first_line, f.open_line, f.last_line), (1, 1, 4));
        assert_eq!((f.lets[0].first_line, f.lets[0].last_line), (2, 2));
        let ExprKind::Binary(BinOp::Add, lhs, rhs) = &f.ret.value.kind else {
            panic!("{:?}", f.ret.value)
        };
        assert!(matches!(lhs.kind, ExprKind::Neg(_)));
        assert!(matches!(rhs.kind, ExprKind::Binary(BinOp::Mul, _, _)));
        let ExprKind::Call(_, args) = &f.lets[0].value.kind else {
            panic!()
        };
        assert!(matches!(&args[1].kind, ExprKind::Field(inner, f)
            if f.name == "w" && matches!(&inner.kind, ExprKind::Field(_, g) if g.name == "layers")));
    }

    #[test]
    fn rejects_statements_after_return() {
        let e = parse_src("fn f(x) {\n  return x;\n  let y = x;\n}").unwrap_err();
        assert!(matches!(e.kind, SyntaxErrorKind::Expected { .. }));
        assert_eq!(e.pos(), Pos::new(3, 3));
        assert!(e
            .to_string()
            .starts_with("expected `}` (`return` must be the last statement), found `let` (3:3)"));
    }

    #[test]
    fn rejects_missing_return_and_stray_tokens() {
        for src in [
            "fn f(x) { let y = x; }",
            "fn f(x) { return x }",
            "let x = 1;",
            "fn f(x,) { return (x; }",
            "fn (x) { return x; }",
            "fn f(x) { return x.1; }",
            "fn f(x) { return f(x,,); }",
        ] {
            assert!(
                matches!(
                    parse_src(src).map_err(|e| e.kind),
                    Err(SyntaxErrorKind::Expected { .. })
                ),
                "{src}"
            );
        }
    }

    #[test]
    fn rejects_deep_nesting_without_overflowing() {
        let src = format!(
            "fn f(x) {{ return {}x{}; }}",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        let e = parse_src(&src).unwrap_err();
        assert_eq!(e.kind, SyntaxErrorKind::TooDeep { limit: MAX_DEPTH });
        let src = format!("fn f(x) {{ return {}x; }}", "-".repeat(10_000));
        assert!(matches!(
            parse_src(&src).unwrap_err().kind,
            SyntaxErrorKind::TooDeep { .. }
        ));
        let src = format!(
            "fn f(x) {{ return {}x{}; }}",
            "g(".repeat(10_000),
            ")".repeat(10_000)
        );
        assert!(matches!(
            parse_src(&src).unwrap_err().kind,
            SyntaxErrorKind::TooDeep { .. }
        ));
        let src = format!("fn f(x) {{ return x{}; }}", " + x * x".repeat(10_000));
        assert!(matches!(
            parse_src(&src).unwrap_err().kind,
            SyntaxErrorKind::TooDeep { .. }
        ));
        let src = format!("fn f(x) {{ return x{}; }}", ".a".repeat(10_000));
        assert!(matches!(
            parse_src(&src).unwrap_err().kind,
            SyntaxErrorKind::TooDeep { .. }
        ));
    }

    #[test]
    fn trailing_commas_are_allowed() {
        assert!(parse_src("fn f(a, b,) { return g(a, b,); }").is_ok());
    }
}
