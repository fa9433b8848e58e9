//! A generator of well-formed engines, driven by a byte string, and the properties every engine
//! it makes must keep. Byte-level fuzzing of `.eng` sources spends its time on lexer errors;
//! these programs always lex and parse, so the resolver, the verifier, the owner's view, the
//! compiler and the interpreter see them all.
//!
//! A program is `main(model, x)`, helpers `(x, model)` and scan bodies `(x, layer)`, each a few
//! `let`s and a `return` over tensors `[2, 8]`: built-in calls, calls to later functions, scans
//! over `model.layers`, scalar arithmetic. Functions are public or wrapped whole in a hide or
//! obfuscate region (an obfuscated one may hide some of its statements), and a public one may
//! put a run of its statements in a region. Now and then a call is ill-typed, a helper calls
//! back up the chain (recursion), or the helpers double their calls twenty times over (work
//! past the per-step bound). The generator knows what the verifier must decide, and checks it:
//!
//! - the verdict is exactly the oracle's: refused as recursion or too much work when it is
//!   either, else refused for violations exactly when a built-in the policy denies is reachable
//!   from a private region by any route (directly, through public helpers, through scan
//!   bodies), else accepted;
//! - renaming only public code outside every region (locals, parameters and function names no
//!   private code mentions) does not change the verdict;
//! - the view of an accepted program holds no identifier or number from its hide regions;
//! - an accepted, well-typed program compiles and runs to a `[2, 8]` tensor; anything else
//!   compiles or is refused with a message, never a panic.
//!
//! Shared, by `#[path]`, by tests/lib/restrict_structured.rs (proptest drives it) and
//! fuzz/fuzz_targets/engine_structured.rs (libFuzzer drives it).

use std::collections::BTreeSet;
use std::fmt::Write;

use runner::kernels::{DType, Tensor, Weight};
use runner::restrict::builtins::Builtin;
use runner::restrict::policy::Policy;
use runner::restrict::{check, compile, Inputs, Record, RestrictError, Value};

/// Choices read off the bytes, zeros once they run out: every byte string is a program.
struct Choices<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            0
        } else {
            usize::from(self.byte()) % n
        }
    }
    /// True with probability `n / 256`; false once the bytes run out.
    fn chance(&mut self, n: u8) -> bool {
        u16::from(self.byte()) + u16::from(n) > 255
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Main,
    Helper,
    Body,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Privacy {
    Public,
    Hide,
    Obfuscate,
}

#[derive(Debug, Clone)]
enum Expr {
    /// The function's tensor parameter.
    Param,
    /// An earlier `let` of the same function.
    Local(usize),
    /// A field of the function's record parameter (`model.` or `layer.`).
    Field(&'static str),
    /// A number literal, by its program-wide index.
    Number(usize),
    Builtin(Builtin, Vec<Expr>),
    /// A call of function `.0` with a tensor argument (the record parameter passed along).
    Call(usize, Box<Expr>),
    /// `scan(body .0, tensor, model.layers)`.
    Scan(usize, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
}

#[derive(Debug, Clone)]
struct Function {
    kind: Kind,
    privacy: Privacy,
    lets: Vec<Expr>,
    ret: Expr,
    /// A run of `lets` in a region of this kind: whole-statement regions. Inside an obfuscated
    /// function only a hide region may sit.
    stmt_region: Option<(usize, usize, Privacy)>,
}

/// A generated engine, its renamed twin and what the verifier must say of it.
pub struct Generated {
    pub source: String,
    /// The same program with public-only names changed.
    pub renamed: String,
    pub policy: Policy,
    /// Identifiers and numbers that appear only inside hide regions.
    pub hidden: Vec<String>,
    pub expect: Expect,
    /// Every call is well-typed by construction.
    pub well_typed: bool,
}

/// What the verifier must decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Accepted,
    /// Refused as recursion or too much work (a program error).
    ProgramError,
    /// Refused because a private region reaches these denied built-ins.
    Violations(BTreeSet<&'static str>),
}

/// The largest number of built-in calls one function may make in a step (the verifier's bound).
const WORK_LIMIT: u64 = runner::restrict::MAX_CALLS_PER_STEP;

struct Builder<'c, 'a> {
    choices: &'c mut Choices<'a>,
    functions: Vec<Function>,
    numbers: usize,
    well_typed: bool,
    recursive: bool,
}

impl Builder<'_, '_> {
    fn tensor(&mut self, f: usize, lets: usize, depth: u32) -> Expr {
        let kind = self.functions[f].kind;
        let n = self.functions.len();
        let pick = if depth == 0 {
            self.choices.below(2)
        } else {
            self.choices.below(12)
        };
        match pick {
            0 => Expr::Param,
            1 if lets > 0 => Expr::Local(self.choices.below(lets)),
            1 => Expr::Param,
            2 => Expr::Builtin(
                Builtin::Linear,
                vec![self.tensor(f, lets, depth - 1), Expr::Field("w")],
            ),
            3 => {
                // rms_norm refuses a negative eps: a number or the record's own scalar.
                let eps = self.scalar(f, 0);
                Expr::Builtin(
                    Builtin::RmsNorm,
                    vec![
                        self.tensor(f, lets, depth - 1),
                        Expr::Field("norm"),
                        eps,
                        self.number(),
                    ],
                )
            }
            4 | 5 => {
                let b = if pick == 4 {
                    Builtin::Add
                } else {
                    Builtin::Mul
                };
                Expr::Builtin(
                    b,
                    vec![
                        self.tensor(f, lets, depth - 1),
                        self.tensor(f, lets, depth - 1),
                    ],
                )
            }
            6 => Expr::Builtin(
                Builtin::Scale,
                vec![self.tensor(f, lets, depth - 1), self.scalar(f, depth - 1)],
            ),
            7 => {
                let b = if self.choices.chance(128) {
                    Builtin::GeluTanh
                } else {
                    Builtin::Softmax
                };
                Expr::Builtin(b, vec![self.tensor(f, lets, depth - 1)])
            }
            8 | 9 => {
                // A call of a later function of the same kind of parameters, or now and then
                // of an earlier one or itself: recursion.
                let same = |g: &Function| (g.kind == Kind::Body) == (kind == Kind::Body);
                let back = self.choices.chance(6);
                let targets: Vec<usize> = (0..n)
                    .filter(|&g| g != 0 && same(&self.functions[g]))
                    .filter(|&g| if back { g <= f } else { g > f })
                    .collect();
                if targets.is_empty() {
                    return Expr::Param;
                }
                let g = targets[self.choices.below(targets.len())];
                self.recursive |= back;
                Expr::Call(g, Box::new(self.tensor(f, lets, depth - 1)))
            }
            10 if kind != Kind::Body => {
                let bodies: Vec<usize> = (0..n)
                    .filter(|&g| self.functions[g].kind == Kind::Body)
                    .collect();
                if bodies.is_empty() {
                    return Expr::Param;
                }
                let b = bodies[self.choices.below(bodies.len())];
                Expr::Scan(b, Box::new(self.tensor(f, lets, depth - 1)))
            }
            11 if self.choices.chance(48) => self.ill_typed(f, lets, depth - 1),
            _ => Expr::Param,
        }
    }

    /// Any built-in, with the right number of arguments of any kind.
    fn ill_typed(&mut self, f: usize, lets: usize, depth: u32) -> Expr {
        self.well_typed = false;
        let b = Builtin::ALL[self.choices.below(Builtin::ALL.len())];
        let args = (0..b.arity())
            .map(|_| match self.choices.below(4) {
                0 => self.scalar(f, depth),
                1 => Expr::Field("w"),
                2 => Expr::Field("norm"),
                _ => self.tensor(f, lets, depth),
            })
            .collect();
        Expr::Builtin(b, args)
    }

    fn scalar(&mut self, f: usize, depth: u32) -> Expr {
        let pick = if depth == 0 {
            self.choices.below(2)
        } else {
            self.choices.below(4)
        };
        match pick {
            0 => self.number(),
            1 => Expr::Field(if self.functions[f].kind == Kind::Body {
                "gain"
            } else {
                "eps"
            }),
            2 => Expr::Mul(
                Box::new(self.scalar(f, depth - 1)),
                Box::new(self.scalar(f, depth - 1)),
            ),
            _ => Expr::Neg(Box::new(self.scalar(f, depth - 1))),
        }
    }

    fn number(&mut self) -> Expr {
        self.numbers += 1;
        Expr::Number(self.numbers - 1)
    }
}

/// Make the program the bytes describe.
pub fn generate(bytes: &[u8]) -> Generated {
    let mut choices = Choices { bytes, at: 0 };
    let denied_mask = u16::from_le_bytes([choices.byte(), choices.byte()])
        & u16::from_le_bytes([choices.byte(), choices.byte()]);
    let deep = choices.chance(8);
    let (helpers, bodies) = if deep {
        (22, 0)
    } else {
        (choices.below(5), choices.below(3))
    };
    let privacy = |c: &mut Choices<'_>| match c.below(4) {
        2 => Privacy::Hide,
        3 => Privacy::Obfuscate,
        _ => Privacy::Public,
    };
    let mut functions = Vec::new();
    for i in 0..1 + helpers + bodies {
        let kind = match i {
            0 => Kind::Main,
            i if i <= helpers => Kind::Helper,
            _ => Kind::Body,
        };
        functions.push(Function {
            kind,
            privacy: privacy(&mut choices),
            lets: Vec::new(),
            ret: Expr::Param,
            stmt_region: None,
        });
    }
    let mut b = Builder {
        choices: &mut choices,
        functions,
        numbers: 0,
        well_typed: true,
        recursive: false,
    };
    for f in 0..b.functions.len() {
        if deep && f > 0 {
            // Each helper calls the next twice: 2^21 built-in calls from the first.
            let next = || Expr::Call(f + 1, Box::new(Expr::Param));
            b.functions[f].ret = if f < helpers {
                Expr::Builtin(Builtin::Add, vec![next(), next()])
            } else {
                Expr::Builtin(Builtin::Linear, vec![Expr::Param, Expr::Field("w")])
            };
            continue;
        }
        let count = b.choices.below(4);
        for l in 0..count {
            let e = b.tensor(f, l, 3);
            b.functions[f].lets.push(e);
        }
        b.functions[f].ret = b.tensor(f, count, 3);
        if count > 0 && b.choices.chance(96) {
            let start = b.choices.below(count);
            let end = start + 1 + b.choices.below(count - start);
            let kind = match b.functions[f].privacy {
                Privacy::Public if b.choices.chance(128) => Privacy::Obfuscate,
                Privacy::Public | Privacy::Obfuscate => Privacy::Hide,
                Privacy::Hide => continue,
            };
            b.functions[f].stmt_region = Some((start, end, kind));
        }
    }
    if deep {
        b.functions[0].ret = Expr::Call(1, Box::new(Expr::Param));
    }
    let (functions, well_typed, recursive) = (b.functions, b.well_typed, b.recursive);

    let denied: BTreeSet<&'static str> = Builtin::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| denied_mask & (1 << i) != 0)
        .map(|(_, b)| b.name())
        .collect();
    let program = Program { functions };
    // The work bound is only checked on an acyclic program, and either refusal is a program
    // error.
    let cyclic = recursive && program.has_cycle();
    let expect = if cyclic || program.max_work() > WORK_LIMIT {
        Expect::ProgramError
    } else {
        let reached: BTreeSet<&'static str> = program
            .privately_reached()
            .intersection(&denied)
            .copied()
            .collect();
        if reached.is_empty() {
            Expect::Accepted
        } else {
            Expect::Violations(reached)
        }
    };
    let mut hidden = Vec::new();
    let source = program.render(false, &mut hidden);
    let renamed = program.render(true, &mut Vec::new());
    Generated {
        source,
        renamed,
        policy: policy(&denied),
        hidden,
        expect,
        well_typed,
    }
}

fn policy(denied: &BTreeSet<&'static str>) -> Policy {
    let allow: Vec<&str> = Builtin::ALL
        .iter()
        .map(|b| b.name())
        .filter(|n| !denied.contains(n))
        .collect();
    let doc = serde_json::json!({
        "schema": "runner-policy/1", "name": "generated", "allow_functions": allow,
        "limits": {"max_batch": 2, "max_new_tokens": 1, "max_prompt_tokens": 8, "max_inputs": 1},
        "outputs": ["tokens"],
    });
    Policy::from_json(doc.to_string().as_bytes(), "generated.json")
        .unwrap_or_else(|e| panic!("the generated policy is valid: {e}"))
}

struct Program {
    functions: Vec<Function>,
}

impl Program {
    fn callees(e: &Expr, out: &mut Vec<usize>) {
        match e {
            Expr::Call(g, a) | Expr::Scan(g, a) => {
                out.push(*g);
                Self::callees(a, out);
            }
            Expr::Builtin(_, args) => args.iter().for_each(|a| Self::callees(a, out)),
            Expr::Mul(a, b) => {
                Self::callees(a, out);
                Self::callees(b, out);
            }
            Expr::Neg(a) => Self::callees(a, out),
            _ => {}
        }
    }

    fn builtins(e: &Expr, out: &mut BTreeSet<&'static str>) {
        match e {
            Expr::Builtin(b, args) => {
                out.insert(b.name());
                args.iter().for_each(|a| Self::builtins(a, out));
            }
            Expr::Call(_, a) | Expr::Scan(_, a) | Expr::Neg(a) => Self::builtins(a, out),
            Expr::Mul(a, b) => {
                Self::builtins(a, out);
                Self::builtins(b, out);
            }
            _ => {}
        }
    }

    /// Built-in calls of `e`, calls of user functions counted by `work` (a scan body once).
    fn work_of(e: &Expr, work: &[u64]) -> u64 {
        match e {
            Expr::Builtin(_, args) => args
                .iter()
                .fold(1u64, |s, a| s.saturating_add(Self::work_of(a, work))),
            Expr::Call(g, a) | Expr::Scan(g, a) => work[*g].saturating_add(Self::work_of(a, work)),
            Expr::Mul(a, b) => Self::work_of(a, work).saturating_add(Self::work_of(b, work)),
            Expr::Neg(a) => Self::work_of(a, work),
            _ => 0,
        }
    }

    fn exprs(f: &Function) -> impl Iterator<Item = &Expr> {
        f.lets.iter().chain(std::iter::once(&f.ret))
    }

    fn calls_of(&self, f: usize) -> Vec<usize> {
        let mut out = Vec::new();
        Self::exprs(&self.functions[f]).for_each(|e| Self::callees(e, &mut out));
        out
    }

    /// Whether some function reaches itself through its calls.
    fn has_cycle(&self) -> bool {
        // 0 unvisited, 1 on the path, 2 done.
        fn visit(p: &Program, f: usize, state: &mut [u8]) -> bool {
            match state[f] {
                1 => return true,
                2 => return false,
                _ => {}
            }
            state[f] = 1;
            let cyclic = p.calls_of(f).into_iter().any(|g| visit(p, g, state));
            state[f] = 2;
            cyclic
        }
        let mut state = vec![0u8; self.functions.len()];
        (0..self.functions.len()).any(|f| visit(self, f, &mut state))
    }

    /// The most built-in calls any function makes (only asked of an acyclic program).
    fn max_work(&self) -> u64 {
        fn visit(p: &Program, f: usize, work: &mut [Option<u64>]) -> u64 {
            if let Some(w) = work[f] {
                return w;
            }
            for g in p.calls_of(f) {
                visit(p, g, work);
            }
            let known: Vec<u64> = work.iter().map(|w| w.unwrap_or(0)).collect();
            let w = Program::exprs(&p.functions[f])
                .fold(0u64, |s, e| s.saturating_add(Program::work_of(e, &known)));
            work[f] = Some(w);
            w
        }
        let mut work = vec![None; self.functions.len()];
        (0..self.functions.len())
            .map(|f| visit(self, f, &mut work))
            .max()
            .unwrap_or(0)
    }

    /// Every built-in a private region reaches, by any route.
    fn privately_reached(&self) -> BTreeSet<&'static str> {
        let mut reached = BTreeSet::new();
        let mut seen = vec![false; self.functions.len()];
        let mut todo: Vec<usize> = Vec::new();
        for f in &self.functions {
            for (i, e) in Self::exprs(f).enumerate() {
                if f.privacy != Privacy::Public || in_stmt_region(f, i) {
                    Self::builtins(e, &mut reached);
                    Self::callees(e, &mut todo);
                }
            }
        }
        while let Some(g) = todo.pop() {
            if std::mem::replace(&mut seen[g], true) {
                continue;
            }
            for e in Self::exprs(&self.functions[g]) {
                Self::builtins(e, &mut reached);
                Self::callees(e, &mut todo);
            }
        }
        reached
    }

    /// Functions some private code calls by name.
    fn named_privately(&self) -> Vec<bool> {
        let mut named = vec![false; self.functions.len()];
        for f in &self.functions {
            for (i, e) in Self::exprs(f).enumerate() {
                if f.privacy != Privacy::Public || in_stmt_region(f, i) {
                    let mut callees = Vec::new();
                    Self::callees(e, &mut callees);
                    callees.into_iter().for_each(|g| named[g] = true);
                }
            }
        }
        named
    }

    /// The source; `renamed` changes only names that every mention of is public. `hidden`
    /// collects the names and numbers written only inside hide regions.
    fn render(&self, renamed: bool, hidden: &mut Vec<String>) -> String {
        let named_privately = self.named_privately();
        let fn_name = |g: usize| -> String {
            let f = &self.functions[g];
            match (f.kind, f.privacy) {
                (Kind::Main, _) => "main".into(),
                (_, Privacy::Hide) => format!("zqhf{g}x"),
                (_, Privacy::Public) if renamed && !named_privately[g] => {
                    format!("renamed_function_{g}")
                }
                _ => format!("f{g}"),
            }
        };
        let mut out = String::from("// generated\n");
        for (g, f) in self.functions.iter().enumerate() {
            let hide_all = f.privacy == Privacy::Hide;
            // Names of a function with no private statement may change in the twin.
            let public_names = renamed && f.privacy == Privacy::Public && f.stmt_region.is_none();
            let param = if public_names { "renamed_x" } else { "x" };
            let record = match (f.kind, public_names) {
                (Kind::Main, _) => "model",
                (Kind::Body, false) => "layer",
                (Kind::Body, true) => "renamed_layer",
                (Kind::Helper, false) => "model",
                (Kind::Helper, true) => "renamed_model",
            };
            let local = |i: usize| -> String {
                let hidden_local = hide_all
                    || f.stmt_region
                        .is_some_and(|(s, e, k)| k == Privacy::Hide && (s..e).contains(&i));
                if hidden_local {
                    format!("zqh{g}l{i}x")
                } else if public_names {
                    format!("renamed_local_{g}_{i}")
                } else {
                    format!("v{g}_{i}")
                }
            };
            let ctx = Ctx {
                param,
                record,
                local: &local,
                fn_name: &fn_name,
            };
            if let Some(word) = region_word(f.privacy) {
                writeln!(out, "// @private {word}").unwrap();
            }
            let params = if f.kind == Kind::Main {
                format!("{record}, {param}")
            } else {
                format!("{param}, {record}")
            };
            writeln!(out, "fn {}({params}) {{", fn_name(g)).unwrap();
            if hide_all {
                hidden.push(fn_name(g));
            }
            for (i, e) in f.lets.iter().enumerate() {
                let stmt = f.stmt_region.filter(|&(s, _, _)| s == i);
                if let Some((_, _, k)) = stmt {
                    writeln!(out, "    // @private {}", region_word(k).unwrap()).unwrap();
                }
                let hidden_here = hide_all
                    || f.stmt_region
                        .is_some_and(|(s, e, k)| k == Privacy::Hide && (s..e).contains(&i));
                let mut numbers = Vec::new();
                let text = ctx.expr(e, &mut numbers);
                if hidden_here {
                    hidden.push(local(i));
                    hidden.extend(numbers);
                }
                writeln!(out, "    let {} = {text};", local(i)).unwrap();
                if let Some((_, _, k)) = f.stmt_region.filter(|&(_, e, _)| e == i + 1) {
                    writeln!(out, "    // @end {}", region_word(k).unwrap()).unwrap();
                }
            }
            let mut numbers = Vec::new();
            let text = ctx.expr(&f.ret, &mut numbers);
            if hide_all {
                hidden.extend(numbers);
            }
            writeln!(out, "    return {text};\n}}").unwrap();
            if let Some(word) = region_word(f.privacy) {
                writeln!(out, "// @end {word}").unwrap();
            }
        }
        out
    }
}

fn in_stmt_region(f: &Function, i: usize) -> bool {
    f.stmt_region.is_some_and(|(s, e, _)| (s..e).contains(&i))
}

fn region_word(p: Privacy) -> Option<&'static str> {
    match p {
        Privacy::Public => None,
        Privacy::Hide => Some("hide"),
        Privacy::Obfuscate => Some("obfuscate"),
    }
}

struct Ctx<'a> {
    param: &'a str,
    record: &'a str,
    local: &'a dyn Fn(usize) -> String,
    fn_name: &'a dyn Fn(usize) -> String,
}

impl Ctx<'_> {
    /// `e` as source; the numbers written are pushed on `numbers`.
    fn expr(&self, e: &Expr, numbers: &mut Vec<String>) -> String {
        match e {
            Expr::Param => self.param.to_owned(),
            Expr::Local(i) => (self.local)(*i),
            Expr::Field(name) => format!("{}.{name}", self.record),
            Expr::Number(i) => {
                // Distinct texts, none a part of another: 5 + i digits, a fraction of 25.
                let text = format!("{}.25", 10_000 + i);
                numbers.push(text.clone());
                text
            }
            Expr::Builtin(b, args) => {
                let args: Vec<String> = args.iter().map(|a| self.expr(a, numbers)).collect();
                format!("{}({})", b.name(), args.join(", "))
            }
            Expr::Call(g, a) => {
                format!(
                    "{}({}, {})",
                    (self.fn_name)(*g),
                    self.expr(a, numbers),
                    self.record
                )
            }
            Expr::Scan(g, a) => format!(
                "scan({}, {}, {}.layers)",
                (self.fn_name)(*g),
                self.expr(a, numbers),
                self.record
            ),
            Expr::Mul(a, b) => format!("({} * {})", self.expr(a, numbers), self.expr(b, numbers)),
            Expr::Neg(a) => format!("-({})", self.expr(a, numbers)),
        }
    }
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed * 40_503);
            (h % 1000) as f32 / 500.0 - 1.0
        })
        .collect()
}

fn weight(shape: &[usize], seed: u32) -> Value {
    let n = shape.iter().product();
    let w = Weight::from_values(DType::BF16, shape.to_vec(), &values(n, seed))
        .unwrap_or_else(|e| panic!("{e}"));
    Value::Weight(w)
}

/// `model` (weights `w [8, 8]`, `norm [8]`, `eps`, two `layers` of `w`, `norm`, `gain`) and `x`.
fn inputs() -> Inputs {
    let layer = |s: u32| {
        Value::record(
            Record::new()
                .with("w", weight(&[8, 8], s))
                .with("norm", weight(&[8], s + 1))
                .with("gain", Value::Scalar(0.5)),
        )
    };
    let model = Record::new()
        .with("w", weight(&[8, 8], 1))
        .with("norm", weight(&[8], 2))
        .with("eps", Value::Scalar(1e-6))
        .with("layers", Value::stack(vec![layer(3), layer(5)]));
    let x = Tensor::new(vec![2, 8], values(16, 9)).unwrap_or_else(|e| panic!("{e}"));
    Inputs::new()
        .with("model", Value::record(model))
        .with("x", Value::tensor(x))
}

fn verdict(r: &Result<runner::restrict::Checked, RestrictError>) -> String {
    match r {
        Ok(_) => "accepted".into(),
        Err(RestrictError::Syntax { error, .. }) => format!("syntax error: {error}"),
        Err(RestrictError::Program { errors, .. }) => format!("{} program errors", errors.len()),
        Err(RestrictError::Violations { violations, .. }) => {
            format!("{} violations", violations.len())
        }
        Err(e) => format!("other: {e}"),
    }
}

/// Generate the program the bytes describe and check every property of the module doc.
pub fn check_properties(bytes: &[u8]) {
    let g = generate(bytes);
    let src = &g.source;
    let result = check(src, "generated.eng", &g.policy);
    let twin = check(&g.renamed, "generated.eng", &g.policy);
    assert_eq!(
        verdict(&result),
        verdict(&twin),
        "renaming public code changed the verdict\n{src}\n{}",
        g.renamed
    );
    match (&g.expect, &result) {
        (Expect::Accepted, Ok(_)) => {}
        (Expect::ProgramError, Err(RestrictError::Program { .. })) => {}
        (Expect::Violations(denied), Err(RestrictError::Violations { violations, .. })) => {
            let message = result
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            for name in denied {
                assert!(message.contains(name), "{name} not named: {message}\n{src}");
            }
            assert!(!violations.is_empty());
        }
        (expect, _) => panic!(
            "expected {expect:?}, the verifier said {}\n{src}\n{}",
            verdict(&result),
            result
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        ),
    }
    let Ok(checked) = result else { return };
    let view = checked.view();
    for word in &g.hidden {
        assert!(
            !view.contains(word.as_str()),
            "`{word}` of a hide region is in the view\n{src}\n{view}"
        );
    }
    let inputs = inputs();
    let signature = inputs.signature().unwrap_or_else(|e| panic!("{e:?}"));
    match compile(checked, "main", &signature) {
        Ok(plan) => match plan.run(&inputs) {
            Ok(Value::Tensor(t)) if g.well_typed => assert_eq!(t.shape(), &[2, 8][..], "{src}"),
            Ok(other) => assert!(
                !g.well_typed,
                "a well-typed engine returned {other:?}\n{src}"
            ),
            Err(e) => {
                assert!(
                    !g.well_typed,
                    "a well-typed engine failed to run: {e}\n{src}"
                );
                assert!(!e.to_string().is_empty());
            }
        },
        Err(e) => {
            assert!(
                !g.well_typed,
                "a well-typed engine did not compile: {e}\n{src}"
            );
            assert!(!e.to_string().is_empty());
        }
    }
}
