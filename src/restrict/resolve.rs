//! Name resolution: every name in the program bound to what it means, every call to its
//! target, and the call graph checked for cycles.
//!
//! Rules enforced here: function names are unique and none is a built-in name or `scan`;
//! parameters and `let` never bind a function's or built-in's name (so a name always means one
//! thing, and `let f = linear` cannot alias a built-in); functions are not values, except a
//! user function's name as `scan`'s first argument; every call has the right number of
//! arguments; and no function reaches itself, directly, through others, or through a scan body.

use std::collections::{BTreeMap, HashMap};

use super::ast::{Expr, ExprKind, Function, Ident, Program};
use super::builtins::Builtin;
use super::diagnostic::{LineIndex, Located, Pos};
use super::error::{ProgramError, ProgramErrorKind};
use super::MAX_CALLS_PER_STEP;

/// The name of the scan form.
pub const SCAN: &str = "scan";

/// What a name means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sym {
    /// A built-in (a callee).
    Builtin(Builtin),
    /// A user function (a definition, a callee, or scan's body), by index in the program.
    Function(usize),
    /// A parameter or `let` binding, by index in [`Resolved::bindings`].
    Local(usize),
    /// The `scan` form's name.
    Scan,
    /// A field name after `.`.
    Field,
}

/// A parameter or `let` binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The name.
    pub name: String,
    /// Where it is bound.
    pub pos: Pos,
    /// The function it belongs to.
    pub func: usize,
}

/// What a call site calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A built-in.
    Builtin(Builtin),
    /// A user function (directly, or as a scan body).
    Function(usize),
}

/// One call in the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSite {
    /// The function whose body holds the call.
    pub caller: usize,
    /// What it calls.
    pub target: Target,
    /// The callee's name (for a scan body, the body name's position).
    pub pos: Pos,
}

/// The resolved program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Every identifier, keyed by its byte offset in the source.
    pub syms: BTreeMap<usize, Sym>,
    /// Parameters and `let`s.
    pub bindings: Vec<Binding>,
    /// Every call, in source order.
    pub calls: Vec<CallSite>,
}

/// Resolve `program`, reporting every error found.
pub fn resolve(source: &str, program: &Program) -> Result<Resolved, Vec<ProgramError>> {
    let mut r = Resolver {
        source,
        lines: LineIndex::new(source),
        functions: HashMap::new(),
        out: Resolved {
            syms: BTreeMap::new(),
            bindings: Vec::new(),
            calls: Vec::new(),
        },
        errors: Vec::new(),
        scope: HashMap::new(),
        current: 0,
        arities: program.functions.iter().map(|f| f.params.len()).collect(),
    };
    for (i, f) in program.functions.iter().enumerate() {
        let name = f.name.name.as_str();
        if name == SCAN || Builtin::from_name(name).is_some() {
            r.error(
                ProgramErrorKind::ShadowsBuiltin {
                    name: name.to_owned(),
                },
                f.name.pos,
            );
        } else if let Some(&first) = r.functions.get(name) {
            let first = program
                .functions
                .get(first)
                .map_or(f.name.pos, |g: &Function| g.name.pos);
            r.error(
                ProgramErrorKind::DuplicateFunction {
                    name: name.to_owned(),
                    first,
                },
                f.name.pos,
            );
        } else {
            r.functions.insert(name, i);
        }
        r.out.syms.insert(f.name.start, Sym::Function(i));
    }
    for (i, f) in program.functions.iter().enumerate() {
        r.function(i, f);
    }
    r.check_cycles(program);
    if r.errors.is_empty() {
        r.check_work(program);
    }
    if r.errors.is_empty() {
        Ok(r.out)
    } else {
        r.errors.sort_by_key(|e| e.pos());
        Err(r.errors)
    }
}

struct Resolver<'a> {
    source: &'a str,
    lines: LineIndex,
    functions: HashMap<&'a str, usize>,
    out: Resolved,
    errors: Vec<ProgramError>,
    /// The bindings visible now: a name's latest parameter or `let`.
    scope: HashMap<String, usize>,
    current: usize,
    arities: Vec<usize>,
}

impl<'a> Resolver<'a> {
    fn error(&mut self, kind: ProgramErrorKind, pos: Pos) {
        self.errors
            .push(Located::indexed(kind, self.source, &self.lines, pos));
    }

    fn is_function_name(&self, name: &str) -> bool {
        name == SCAN || Builtin::from_name(name).is_some() || self.functions.contains_key(name)
    }

    fn bind(&mut self, ident: &Ident) {
        if self.is_function_name(&ident.name) {
            self.error(
                ProgramErrorKind::BindsFunctionName {
                    name: ident.name.clone(),
                },
                ident.pos,
            );
        }
        let id = self.out.bindings.len();
        self.out.bindings.push(Binding {
            name: ident.name.clone(),
            pos: ident.pos,
            func: self.current,
        });
        self.out.syms.insert(ident.start, Sym::Local(id));
        self.scope.insert(ident.name.clone(), id);
    }

    fn function(&mut self, index: usize, f: &Function) {
        self.current = index;
        self.scope.clear();
        for (i, p) in f.params.iter().enumerate() {
            if f.params.iter().take(i).any(|q| q.name == p.name) {
                self.error(
                    ProgramErrorKind::DuplicateParam {
                        name: p.name.clone(),
                    },
                    p.pos,
                );
            }
            self.bind(p);
        }
        for l in &f.lets {
            // The value is resolved before the name is bound: `let x = f(x);` reads the old x.
            self.expr(&l.value);
            self.bind(&l.name);
        }
        self.expr(&f.ret.value);
    }

    fn lookup(&self, name: &str) -> Option<usize> {
        self.scope.get(name).copied()
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Number(_) => {}
            ExprKind::Var(ident) => match self.lookup(&ident.name) {
                Some(id) => {
                    self.out.syms.insert(ident.start, Sym::Local(id));
                }
                None if self.is_function_name(&ident.name) => self.error(
                    ProgramErrorKind::FunctionAsValue {
                        name: ident.name.clone(),
                    },
                    ident.pos,
                ),
                None => self.error(
                    ProgramErrorKind::UnknownVariable {
                        name: ident.name.clone(),
                    },
                    ident.pos,
                ),
            },
            ExprKind::Field(inner, field) => {
                self.expr(inner);
                self.out.syms.insert(field.start, Sym::Field);
            }
            ExprKind::Binary(_, a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Neg(a) => self.expr(a),
            ExprKind::Call(callee, args) => self.call(callee, args),
        }
    }

    fn call(&mut self, callee: &Ident, args: &[Expr]) {
        let name = callee.name.as_str();
        if name == SCAN {
            self.out.syms.insert(callee.start, Sym::Scan);
            self.scan(callee, args);
            return;
        }
        for a in args {
            self.expr(a);
        }
        if let Some(b) = Builtin::from_name(name) {
            self.out.syms.insert(callee.start, Sym::Builtin(b));
            self.push_call(Target::Builtin(b), callee.pos);
            if args.len() != b.arity() {
                self.error(
                    ProgramErrorKind::WrongArity {
                        name: name.to_owned(),
                        expected: b.arity(),
                        found: args.len(),
                    },
                    callee.pos,
                );
            }
        } else if let Some(&(i, arity)) = self.function_arity(name).as_ref() {
            self.out.syms.insert(callee.start, Sym::Function(i));
            self.push_call(Target::Function(i), callee.pos);
            if args.len() != arity {
                self.error(
                    ProgramErrorKind::WrongArity {
                        name: name.to_owned(),
                        expected: arity,
                        found: args.len(),
                    },
                    callee.pos,
                );
            }
        } else {
            self.error(
                ProgramErrorKind::UnknownFunction {
                    name: name.to_owned(),
                },
                callee.pos,
            );
        }
    }

    fn scan(&mut self, callee: &Ident, args: &[Expr]) {
        let Some((body, rest)) = args.split_first() else {
            self.error(ProgramErrorKind::ScanArgs { found: 0 }, callee.pos);
            return;
        };
        for a in rest {
            self.expr(a);
        }
        if args.len() < 3 {
            self.error(ProgramErrorKind::ScanArgs { found: args.len() }, callee.pos);
            return;
        }
        let ExprKind::Var(ident) = &body.kind else {
            self.expr(body);
            self.error(
                ProgramErrorKind::ScanBody {
                    found: "an expression".into(),
                },
                body.pos,
            );
            return;
        };
        let name = ident.name.as_str();
        if let Some((i, arity)) = self.function_arity(name) {
            self.out.syms.insert(ident.start, Sym::Function(i));
            self.push_call(Target::Function(i), ident.pos);
            // body(carry, element, extra...)
            let given = args.len().saturating_sub(1);
            if arity != given {
                self.error(
                    ProgramErrorKind::WrongArity {
                        name: name.to_owned(),
                        expected: arity,
                        found: given,
                    },
                    ident.pos,
                );
            }
        } else {
            let found = if Builtin::from_name(name).is_some() || name == SCAN {
                format!("the built-in `{name}`")
            } else if self.lookup(name).is_some() {
                format!("the variable `{name}`")
            } else {
                self.error(
                    ProgramErrorKind::UnknownFunction {
                        name: name.to_owned(),
                    },
                    ident.pos,
                );
                return;
            };
            self.error(ProgramErrorKind::ScanBody { found }, ident.pos);
        }
    }

    fn function_arity(&self, name: &str) -> Option<(usize, usize)> {
        let &i = self.functions.get(name)?;
        Some((i, self.arities.get(i).copied().unwrap_or(0)))
    }

    fn push_call(&mut self, target: Target, pos: Pos) {
        self.out.calls.push(CallSite {
            caller: self.current,
            target,
            pos,
        });
    }
}

impl Resolver<'_> {
    /// Report every back edge of a depth-first walk of the call graph: each closes a cycle.
    fn check_cycles(&mut self, program: &Program) {
        let n = program.functions.len();
        let mut adj: Vec<Vec<(usize, Pos)>> = vec![Vec::new(); n];
        for c in &self.out.calls {
            if let (Target::Function(t), Some(edges)) = (c.target, adj.get_mut(c.caller)) {
                edges.push((t, c.pos));
            }
        }
        let name = |i: usize| {
            program
                .functions
                .get(i)
                .map_or("?", |f: &Function| f.name.name.as_str())
        };
        // 0: not seen, 1: on the walk's stack, 2: finished.
        let mut state = vec![0u8; n];
        let mut found = Vec::new();
        for root in 0..n {
            if state.get(root) != Some(&0) {
                continue;
            }
            // (function, index of its next edge to follow)
            let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
            if let Some(s) = state.get_mut(root) {
                *s = 1;
            }
            while let Some(top) = stack.last_mut() {
                let (u, next) = (top.0, top.1);
                let Some(&(v, pos)) = adj.get(u).and_then(|e| e.get(next)) else {
                    if let Some(s) = state.get_mut(u) {
                        *s = 2;
                    }
                    stack.pop();
                    continue;
                };
                top.1 += 1;
                match state.get(v) {
                    Some(0) => {
                        if let Some(s) = state.get_mut(v) {
                            *s = 1;
                        }
                        stack.push((v, 0));
                    }
                    Some(1) => {
                        // The cycle: v ... u on the stack, then the edge u -> v.
                        let from = stack.iter().position(|&(w, _)| w == v).unwrap_or(0);
                        let mut steps = Vec::new();
                        let path = stack.get(from..).unwrap_or_default();
                        for pair in path.windows(2) {
                            if let [(a, a_next), (b, _)] = pair {
                                let at = adj
                                    .get(*a)
                                    .and_then(|e| e.get(a_next.saturating_sub(1)))
                                    .map_or(pos, |&(_, p)| p);
                                steps.push(format!("`{}` calls `{}` ({at})", name(*a), name(*b)));
                            }
                        }
                        steps.push(format!("`{}` calls `{}` ({pos})", name(u), name(v)));
                        found.push((steps.join(", "), pos));
                    }
                    _ => {}
                }
            }
        }
        for (cycle, pos) in found {
            self.error(ProgramErrorKind::Recursion { cycle }, pos);
        }
    }
}

impl Resolver<'_> {
    /// Refuse a function whose calls, followed through user functions, make more than
    /// [`MAX_CALLS_PER_STEP`] built-in calls (a scan body counted once: the stack's length is
    /// the checkpoint's layer count, bounded by real weights). Run only on an acyclic graph, so
    /// each function's count is the sum over its calls, memoised.
    fn check_work(&mut self, program: &Program) {
        let n = program.functions.len();
        let mut calls: Vec<Vec<Target>> = vec![Vec::new(); n];
        for c in &self.out.calls {
            if let Some(list) = calls.get_mut(c.caller) {
                list.push(c.target);
            }
        }
        let mut work: Vec<Option<u64>> = vec![None; n];
        for root in 0..n {
            // Post-order walk: a function's count once all its callees' are known.
            let mut stack = vec![(root, false)];
            while let Some((f, expanded)) = stack.pop() {
                if work[f].is_some() {
                    continue;
                }
                if !expanded {
                    stack.push((f, true));
                    for t in &calls[f] {
                        if let Target::Function(g) = *t {
                            if work[g].is_none() {
                                stack.push((g, false));
                            }
                        }
                    }
                    continue;
                }
                let total = calls[f].iter().fold(0u64, |sum, t| {
                    sum.saturating_add(match *t {
                        Target::Builtin(_) => 1,
                        Target::Function(g) => work[g].unwrap_or(0),
                    })
                });
                work[f] = Some(total);
            }
        }
        for (f, w) in program.functions.iter().zip(&work) {
            let calls = w.unwrap_or(0);
            if calls > MAX_CALLS_PER_STEP {
                self.error(
                    ProgramErrorKind::TooMuchWork {
                        name: f.name.name.clone(),
                        calls,
                        limit: MAX_CALLS_PER_STEP,
                    },
                    f.name.pos,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restrict::lexer::lex;
    use crate::restrict::parser::parse;

    fn resolve_src(src: &str) -> Result<Resolved, Vec<ProgramError>> {
        let lexed = lex(src).unwrap_or_else(|e| panic!("{e}"));
        let program = parse(src, &lexed).unwrap_or_else(|e| panic!("{e}"));
        resolve(src, &program)
    }

    fn errors(src: &str) -> Vec<ProgramErrorKind> {
        match resolve_src(src) {
            Err(e) => e.into_iter().map(|e| e.kind).collect(),
            Ok(_) => panic!("resolved: {src}"),
        }
    }

    #[test]
    fn resolves_names_calls_and_shadowing_lets() {
        let src = "fn main(x, layers) {\n  let x = add(x, x);\n  return scan(body, x, layers);\n}\nfn body(h, l) { return linear(h, l.w); }\n";
        let r = resolve_src(src).unwrap_or_else(|e| panic!("{e:?}"));
        let targets: Vec<Target> = r.calls.iter().map(|c| c.target).collect();
        assert_eq!(
            targets,
            vec![
                Target::Builtin(Builtin::Add),
                Target::Function(1),
                Target::Builtin(Builtin::Linear)
            ]
        );
        // `add(x, x)` reads the parameter; `scan(body, x, ..)` reads the let.
        let x_param = r.syms.get(&src.find("x,").unwrap_or(0)).copied();
        let x_arg = r.syms.get(&src.find("x, x)").unwrap_or(0)).copied();
        assert_eq!(x_param, x_arg);
        let x_scan = r.syms.get(&src.rfind("x, layers)").unwrap_or(0)).copied();
        assert_ne!(x_scan, x_param);
    }

    #[test]
    fn rejects_unknown_names_and_arity_all_at_once() {
        let e = resolve_src("fn f(x) {\n  let a = nope(x);\n  let b = linear(x);\n  return y;\n}")
            .unwrap_err();
        let got: Vec<(String, Pos)> = e.iter().map(|e| (e.kind.to_string(), e.pos())).collect();
        assert_eq!(
            got,
            vec![
                ("unknown function `nope`".to_owned(), Pos::new(2, 11)),
                (
                    "`linear` takes 2 argument(s), given 1".to_owned(),
                    Pos::new(3, 11)
                ),
                ("unknown variable `y`".to_owned(), Pos::new(4, 10)),
            ]
        );
    }

    #[test]
    fn rejects_shadowing_a_builtin() {
        assert_eq!(
            errors("fn softmax(x) { return x; }"),
            vec![ProgramErrorKind::ShadowsBuiltin {
                name: "softmax".into()
            }]
        );
        assert_eq!(
            errors("fn scan(x) { return x; }"),
            vec![ProgramErrorKind::ShadowsBuiltin {
                name: "scan".into()
            }]
        );
    }

    #[test]
    fn rejects_let_alias_of_a_function() {
        let e = errors("fn f(x) {\n  let g = linear;\n  return g(x, x);\n}");
        assert!(e.contains(&ProgramErrorKind::FunctionAsValue {
            name: "linear".into()
        }));
        assert!(e.contains(&ProgramErrorKind::UnknownFunction { name: "g".into() }));
        assert_eq!(
            errors("fn f(x) { let linear = x; return linear; }"),
            vec![ProgramErrorKind::BindsFunctionName {
                name: "linear".into()
            },]
        );
        assert_eq!(
            errors("fn f(add) { return add; }"),
            vec![ProgramErrorKind::BindsFunctionName { name: "add".into() }]
        );
    }

    #[test]
    fn rejects_duplicates() {
        assert!(matches!(
            errors("fn f(x) { return x; }\nfn f(y) { return y; }").as_slice(),
            [ProgramErrorKind::DuplicateFunction { first, .. }] if *first == Pos::new(1, 4)
        ));
        assert_eq!(
            errors("fn f(x, x) { return x; }"),
            vec![ProgramErrorKind::DuplicateParam { name: "x".into() }]
        );
    }

    #[test]
    fn rejects_direct_recursion() {
        let e = resolve_src("fn f(x) {\n  return f(x);\n}").unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].kind,
            ProgramErrorKind::Recursion {
                cycle: "`f` calls `f` (2:10)".into()
            }
        );
    }

    #[test]
    fn rejects_recursion_through_two_functions() {
        let e = errors("fn a(x) { return b(x); }\nfn b(x) { return a(x); }");
        assert_eq!(
            e,
            vec![ProgramErrorKind::Recursion {
                cycle: "`a` calls `b` (1:18), `b` calls `a` (2:18)".into()
            }]
        );
    }

    #[test]
    fn rejects_recursion_through_a_scan_body() {
        let e = errors(
            "fn main(x, ls) { return scan(body, x, ls); }\nfn body(h, l) { return main(h, l); }",
        );
        assert!(
            matches!(e.as_slice(), [ProgramErrorKind::Recursion { .. }]),
            "{e:?}"
        );
    }

    #[test]
    fn rejects_bad_scan_bodies() {
        assert_eq!(
            errors("fn f(x, ls) { return scan(linear, x, ls); }"),
            vec![ProgramErrorKind::ScanBody {
                found: "the built-in `linear`".into()
            }]
        );
        assert_eq!(
            errors("fn f(x, ls) { return scan(x, x, ls); }"),
            vec![ProgramErrorKind::ScanBody {
                found: "the variable `x`".into()
            }]
        );
        assert_eq!(
            errors("fn f(x, ls) { return scan(x); }"),
            vec![ProgramErrorKind::ScanArgs { found: 1 }]
        );
        assert_eq!(
            errors("fn f(x, ls) { return scan(g, x, ls, x); }\nfn g(a, b) { return a; }"),
            vec![ProgramErrorKind::WrongArity {
                name: "g".into(),
                expected: 2,
                found: 3
            }]
        );
    }
}
