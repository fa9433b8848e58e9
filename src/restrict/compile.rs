//! The compiler: a [`Checked`] program and the types of the runner's inputs, to a [`Plan`].
//!
//! Each user function is compiled once per distinct list of argument types (the language has
//! no type annotations, so a function is specialised to what it is called with). Names become
//! slots, every call is resolved, and the arity, value kind and the shapes known in advance
//! (weights' shapes, and what the built-ins derive from them) are checked here, once, at the
//! line:col of the offending call. What is left for run time is what depends on the data: the
//! number of tokens, and the kernels' own checks.
//!
//! `scan` compiles its body once for all layers: the carry's type is widened until the body's
//! result fits it (at most once per dimension), so every layer runs the same compiled body.

use std::collections::HashMap;

use super::ast::{BinOp, Expr, ExprKind, Function};
use super::builtins::{Builtin, TypeError};
use super::diagnostic::{Excerpt, Located, Pos};
use super::error::{CompileError, CompileErrorKind};
use super::regions::Regions;
use super::report::Report;
use super::resolve::{Resolved, Sym};
use super::value::{Signature, Type, Value};
use super::verify::{Checked, CheckedParts};
use super::view::Naming;

/// Deepest chain of user-function calls (scan bodies included) a plan may have.
pub const MAX_CALL_DEPTH: usize = 128;

/// A compiled engine, ready to run over inputs of the signature it was compiled for.
pub struct Plan {
    pub(super) functions: Vec<FuncPlan>,
    pub(super) entry: usize,
    pub(super) params: Vec<(String, Type)>,
    pub(super) entry_pos: Pos,
    pub(super) source: String,
    pub(super) regions: Regions,
    pub(super) report: Report,
    pub(super) return_type: Type,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("functions", &self.functions.len())
            .field("entry", &self.entry)
            .field("params", &self.params)
            .finish()
    }
}

impl Plan {
    /// The verifier's report for the program this plan runs.
    pub fn report(&self) -> &Report {
        &self.report
    }
    /// The type of what the entry function returns.
    pub fn return_type(&self) -> &Type {
        &self.return_type
    }
    /// An excerpt at `pos`, withholding private lines (run-time errors reach the operator, who
    /// must not learn the private code from them).
    pub(super) fn excerpt(&self, pos: Pos) -> Excerpt {
        excerpt(&self.source, &self.regions, pos)
    }
}

/// A compile error at `pos`. Compile errors reach the operator, so in an engine with private
/// regions only its kind and position are said: its message or a public line could name a
/// private function or field.
fn located(kind: CompileErrorKind, source: &str, regions: &Regions, pos: Pos) -> CompileError {
    if regions.list().is_empty() {
        return Located {
            kind,
            excerpt: Excerpt::new(source, pos),
        };
    }
    Located {
        kind: CompileErrorKind::Withheld(kind.label()),
        excerpt: if regions.is_private(pos.line) {
            Excerpt::withheld(pos)
        } else {
            Excerpt::omitted(pos)
        },
    }
}

fn excerpt(source: &str, regions: &Regions, pos: Pos) -> Excerpt {
    if regions.is_private(pos.line) {
        Excerpt::withheld(pos)
    } else {
        Excerpt::new(source, pos)
    }
}

/// One specialisation of a user function.
pub(super) struct FuncPlan {
    pub n_slots: usize,
    pub n_params: usize,
    pub code: Vec<Instr>,
    pub ret: Operand,
}

/// An instruction: compute `op`, store it in slot `dst`, then free the slots in `drop_after`
/// (their last use), so activations do not outlive their use.
pub(super) struct Instr {
    pub op: Op,
    pub dst: usize,
    pub pos: Pos,
    pub drop_after: Vec<usize>,
}

/// Where an operand comes from.
pub(super) enum Operand {
    Slot(usize),
    Const(Value),
}

pub(super) enum Op {
    Builtin(Builtin, Vec<Operand>),
    /// `argmax(linear(x, w))` as one kernel (see [`fuse_argmax_of_linear`]).
    LinearArgmax(Vec<Operand>),
    Call(usize, Vec<Operand>),
    Scan {
        body: usize,
        carry: Operand,
        stacked: Operand,
        extra: Vec<Operand>,
    },
    Field(Operand, String),
    Arith(BinOp, Operand, Operand),
    Neg(Operand),
}

impl Operand {
    pub(super) fn slot(&self) -> Option<usize> {
        match self {
            Operand::Slot(s) => Some(*s),
            Operand::Const(_) => None,
        }
    }
}

impl Op {
    pub(super) fn operands(&self) -> Vec<&Operand> {
        match self {
            Op::Builtin(_, args) | Op::Call(_, args) | Op::LinearArgmax(args) => {
                args.iter().collect()
            }
            Op::Scan {
                carry,
                stacked,
                extra,
                ..
            } => [carry, stacked].into_iter().chain(extra.iter()).collect(),
            Op::Field(a, _) | Op::Neg(a) => vec![a],
            Op::Arith(_, a, b) => vec![a, b],
        }
    }
}

/// Compile a verified program to run `entry` over inputs of `signature`.
pub fn compile(checked: Checked, entry: &str, signature: &Signature) -> Result<Plan, CompileError> {
    let parts = checked.into_parts();
    let mut c = Compiler {
        parts: &parts,
        keys: Vec::new(),
        plans: Vec::new(),
        returns: Vec::new(),
        depth: 0,
    };
    let err = |kind, pos| located(kind, &parts.source, &parts.regions, pos);
    let Some((entry_idx, f)) = parts
        .program
        .functions
        .iter()
        .enumerate()
        .find(|(_, f)| f.name.name == entry)
    else {
        return Err(err(
            CompileErrorKind::NoEntry {
                name: entry.to_owned(),
            },
            Pos::new(1, 1),
        ));
    };
    let mut params = Vec::new();
    for p in &f.params {
        let Some(t) = signature.get(&p.name) else {
            return Err(err(
                CompileErrorKind::MissingInput {
                    entry: entry.to_owned(),
                    name: p.name.clone(),
                    supplied: signature.names().collect::<Vec<_>>().join(", "),
                },
                p.pos,
            ));
        };
        params.push((p.name.clone(), t.clone()));
    }
    if let Some(extra) = signature
        .names()
        .find(|n| !f.params.iter().any(|p| p.name == *n))
    {
        return Err(err(
            CompileErrorKind::UnusedInput {
                entry: entry.to_owned(),
                name: extra.to_owned(),
            },
            f.name.pos,
        ));
    }
    let arg_types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
    let (entry_plan, return_type) = c.instance(entry_idx, arg_types, f.name.pos)?;
    let functions = c
        .plans
        .into_iter()
        .map(|p| p.ok_or_else(|| err(internal("an unfinished function"), f.name.pos)))
        .collect::<Result<Vec<_>, _>>()?;
    let entry_pos = f.name.pos;
    Ok(Plan {
        functions,
        entry: entry_plan,
        params,
        entry_pos,
        source: parts.source,
        regions: parts.regions,
        report: parts.report,
        return_type,
    })
}

struct Compiler<'p> {
    parts: &'p CheckedParts,
    keys: Vec<(usize, Vec<Type>)>,
    plans: Vec<Option<FuncPlan>>,
    returns: Vec<Option<Type>>,
    depth: usize,
}

struct FnState {
    slot_types: Vec<Type>,
    locals: HashMap<usize, (Operand, Type)>,
    code: Vec<Instr>,
}

impl FnState {
    fn fresh(&mut self, t: Type) -> usize {
        self.slot_types.push(t);
        self.slot_types.len() - 1
    }
}

fn clone_operand(o: &Operand) -> Operand {
    match o {
        Operand::Slot(s) => Operand::Slot(*s),
        Operand::Const(v) => Operand::Const(v.clone()),
    }
}

impl<'p> Compiler<'p> {
    fn err(&self, kind: CompileErrorKind, pos: Pos) -> CompileError {
        located(kind, &self.parts.source, &self.parts.regions, pos)
    }

    fn naming(&self) -> &Naming {
        &self.parts.naming
    }

    fn resolved(&self) -> &Resolved {
        &self.parts.resolved
    }

    /// The plan index and return type of function `f` specialised to `args`.
    fn instance(
        &mut self,
        f: usize,
        args: Vec<Type>,
        at: Pos,
    ) -> Result<(usize, Type), CompileError> {
        if let Some(i) = self.keys.iter().position(|(g, a)| *g == f && *a == args) {
            return match self.returns.get(i).cloned().flatten() {
                Some(t) => Ok((i, t)),
                // Still being compiled: a cycle, which the verifier already refuses.
                None => Err(self.err(internal("a function reaches itself"), at)),
            };
        }
        if self.depth >= MAX_CALL_DEPTH {
            return Err(self.err(
                CompileErrorKind::TooDeep {
                    limit: MAX_CALL_DEPTH,
                },
                at,
            ));
        }
        let Some(func) = self.parts.program.functions.get(f) else {
            return Err(self.err(internal("a call to a missing function"), at));
        };
        let index = self.keys.len();
        self.keys.push((f, args.clone()));
        self.plans.push(None);
        self.returns.push(None);
        self.depth += 1;
        let result = self.function(func, args);
        self.depth -= 1;
        let (plan, ret) = result?;
        if let Some(p) = self.plans.get_mut(index) {
            *p = Some(plan);
        }
        if let Some(r) = self.returns.get_mut(index) {
            *r = Some(ret.clone());
        }
        Ok((index, ret))
    }

    fn function(
        &mut self,
        f: &Function,
        args: Vec<Type>,
    ) -> Result<(FuncPlan, Type), CompileError> {
        let mut st = FnState {
            slot_types: Vec::new(),
            locals: HashMap::new(),
            code: Vec::new(),
        };
        for (p, t) in f.params.iter().zip(args) {
            let slot = st.fresh(t.clone());
            if let Some(Sym::Local(id)) = self.resolved().syms.get(&p.start) {
                st.locals.insert(*id, (Operand::Slot(slot), t));
            }
        }
        let n_params = st.slot_types.len();
        for l in &f.lets {
            let (op, t) = self.expr(&mut st, &l.value)?;
            if let Some(Sym::Local(id)) = self.resolved().syms.get(&l.name.start) {
                st.locals.insert(*id, (op, t));
            }
        }
        let (ret, ret_type) = self.expr(&mut st, &f.ret.value)?;
        let mut code = st.code;
        fuse_argmax_of_linear(&mut code, &ret);
        mark_last_uses(&mut code, &ret, st.slot_types.len());
        Ok((
            FuncPlan {
                n_slots: st.slot_types.len(),
                n_params,
                code,
                ret,
            },
            ret_type,
        ))
    }

    fn emit(&mut self, st: &mut FnState, op: Op, t: Type, pos: Pos) -> (Operand, Type) {
        let dst = st.fresh(t.clone());
        st.code.push(Instr {
            op,
            dst,
            pos,
            drop_after: Vec::new(),
        });
        (Operand::Slot(dst), t)
    }

    fn expr(&mut self, st: &mut FnState, e: &Expr) -> Result<(Operand, Type), CompileError> {
        match &e.kind {
            ExprKind::Number(v) => Ok((Operand::Const(Value::Scalar(*v)), Type::Scalar)),
            ExprKind::Var(ident) => {
                let local = match self.resolved().syms.get(&ident.start) {
                    Some(Sym::Local(id)) => st.locals.get(id),
                    _ => None,
                };
                match local {
                    Some((op, t)) => Ok((clone_operand(op), t.clone())),
                    // The verifier resolved every variable; reaching here means it did not.
                    None => Err(self.err(internal("an unresolved variable"), ident.pos)),
                }
            }
            ExprKind::Field(inner, field) => {
                let (op, t) = self.expr(st, inner)?;
                let Type::Record(fields) = &t else {
                    return Err(self.err(
                        CompileErrorKind::Kind {
                            what: format!("`.{}`", field.name),
                            expected: "a record".into(),
                            found: t.to_string(),
                        },
                        field.pos,
                    ));
                };
                let Some(ft) = fields.get(&field.name).cloned() else {
                    return Err(self.err(
                        CompileErrorKind::UnknownField {
                            field: field.name.clone(),
                            fields: fields.keys().cloned().collect::<Vec<_>>().join(", "),
                        },
                        field.pos,
                    ));
                };
                Ok(self.emit(st, Op::Field(op, field.name.clone()), ft, field.pos))
            }
            ExprKind::Binary(bop, a, b) => {
                let (oa, ta) = self.expr(st, a)?;
                let (ob, tb) = self.expr(st, b)?;
                for (side, t) in [("left", &ta), ("right", &tb)] {
                    if *t != Type::Scalar {
                        return Err(self.err(
                            CompileErrorKind::Kind {
                                what: format!(
                                    "the {side} operand of `{}` (operators work on scalars; \
                                     tensors use add, mul, scale)",
                                    bop.symbol()
                                ),
                                expected: "a scalar".into(),
                                found: t.to_string(),
                            },
                            e.pos,
                        ));
                    }
                }
                Ok(self.emit(st, Op::Arith(*bop, oa, ob), Type::Scalar, e.pos))
            }
            ExprKind::Neg(a) => {
                let (oa, ta) = self.expr(st, a)?;
                if ta != Type::Scalar {
                    return Err(self.err(
                        CompileErrorKind::Kind {
                            what: "the operand of unary `-`".into(),
                            expected: "a scalar".into(),
                            found: ta.to_string(),
                        },
                        e.pos,
                    ));
                }
                if let Operand::Const(Value::Scalar(v)) = oa {
                    return Ok((Operand::Const(Value::Scalar(-v)), Type::Scalar));
                }
                Ok(self.emit(st, Op::Neg(oa), Type::Scalar, e.pos))
            }
            ExprKind::Call(callee, args) => {
                match self.resolved().syms.get(&callee.start).copied() {
                    Some(Sym::Scan) => self.scan(st, e.pos, args),
                    Some(Sym::Builtin(b)) => {
                        let mut ops = Vec::new();
                        let mut types = Vec::new();
                        for a in args {
                            let (o, t) = self.expr(st, a)?;
                            ops.push(o);
                            types.push(t);
                        }
                        let t = b
                            .result_type(&types)
                            .map_err(|te| self.err(type_error(b.name(), te), callee.pos))?;
                        Ok(self.emit(st, Op::Builtin(b, ops), t, callee.pos))
                    }
                    Some(Sym::Function(g)) => {
                        let mut ops = Vec::new();
                        let mut types = Vec::new();
                        for a in args {
                            let (o, t) = self.expr(st, a)?;
                            ops.push(o);
                            types.push(t);
                        }
                        let (inst, t) = self.instance(g, types, callee.pos)?;
                        Ok(self.emit(st, Op::Call(inst, ops), t, callee.pos))
                    }
                    _ => Err(self.err(internal("an unresolved call"), callee.pos)),
                }
            }
        }
    }

    fn scan(
        &mut self,
        st: &mut FnState,
        pos: Pos,
        args: &[Expr],
    ) -> Result<(Operand, Type), CompileError> {
        let body = match args.first().map(|a| &a.kind) {
            Some(ExprKind::Var(ident)) => match self.resolved().syms.get(&ident.start) {
                Some(Sym::Function(g)) => Some(*g),
                _ => None,
            },
            _ => None,
        };
        let (Some(body), [body_expr, carry, stacked, extra @ ..]) = (body, args) else {
            return Err(self.err(internal("scan without a resolved body"), pos));
        };
        let (carry_op, carry_t) = self.expr(st, carry)?;
        let (stacked_op, stacked_t) = self.expr(st, stacked)?;
        let Type::Stack(_, elem) = &stacked_t else {
            return Err(self.err(
                CompileErrorKind::Kind {
                    what: "scan's third argument".into(),
                    expected: "a stack (e.g. model.layers)".into(),
                    found: stacked_t.to_string(),
                },
                stacked.pos,
            ));
        };
        let elem = (**elem).clone();
        let mut extra_ops = Vec::new();
        let mut extra_types = Vec::new();
        for a in extra {
            let (o, t) = self.expr(st, a)?;
            extra_ops.push(o);
            extra_types.push(t);
        }
        // Widen the carry until the body's result fits it; each round forgets at least one
        // dimension, so this ends.
        let mut carry_type = carry_t;
        let body_name = self.naming().function(body).to_owned();
        loop {
            let mut types = vec![carry_type.clone(), elem.clone()];
            types.extend(extra_types.iter().cloned());
            let (inst, ret) = self.instance(body, types, body_expr.pos)?;
            let Some(joined) = carry_type.join(&ret) else {
                return Err(self.err(
                    CompileErrorKind::ScanCarry {
                        body: body_name,
                        expected: carry_type.to_string(),
                        found: ret.to_string(),
                    },
                    body_expr.pos,
                ));
            };
            if joined == carry_type {
                let op = Op::Scan {
                    body: inst,
                    carry: carry_op,
                    stacked: stacked_op,
                    extra: extra_ops,
                };
                return Ok(self.emit(st, op, carry_type, pos));
            }
            carry_type = joined;
        }
    }
}

/// Something the verifier guarantees did not hold: refuse rather than run.
fn internal(what: &'static str) -> CompileErrorKind {
    CompileErrorKind::Internal { what }
}

fn type_error(op: &str, te: TypeError) -> CompileErrorKind {
    match te {
        TypeError::Kind {
            index,
            expected,
            found,
        } => CompileErrorKind::Kind {
            what: format!("argument {index} of `{op}`"),
            expected: expected.to_owned(),
            found: found.to_string(),
        },
        TypeError::Shape(detail) => CompileErrorKind::Shape {
            op: op.to_owned(),
            detail,
        },
    }
}

/// Replace `argmax(linear(x, w))`, where nothing else reads the linear's result, by one
/// [`Op::LinearArgmax`]: the same ids (`kernels::linear_argmax` is exact), without ever holding
/// the `[batch, vocab]` logits. The linear moves down to the argmax's place; its operands are
/// still live there (last uses are marked after this pass), and both are pure.
fn fuse_argmax_of_linear(code: &mut Vec<Instr>, ret: &Operand) {
    let mut reads: HashMap<usize, usize> = HashMap::new();
    for s in code
        .iter()
        .flat_map(|i| i.op.operands())
        .chain([ret])
        .filter_map(Operand::slot)
    {
        *reads.entry(s).or_default() += 1;
    }
    let mut i = 0;
    while i < code.len() {
        let linear_at = match &code[i].op {
            Op::Builtin(Builtin::Argmax, args) => match args.as_slice() {
                [Operand::Slot(s)] if reads.get(s) == Some(&1) => code[..i].iter().position(|c| {
                    c.dst == *s && matches!(&c.op, Op::Builtin(Builtin::Linear, a) if a.len() == 2)
                }),
                _ => None,
            },
            _ => None,
        };
        if let Some(j) = linear_at {
            let linear = code.remove(j);
            if let Op::Builtin(_, args) = linear.op {
                let fused = &mut code[i - 1];
                fused.op = Op::LinearArgmax(args);
                fused.pos = linear.pos;
            }
            continue;
        }
        i += 1;
    }
}

/// For each instruction, the slots whose last read it is (and its own result when nothing
/// reads it), so the interpreter frees them right after.
fn mark_last_uses(code: &mut [Instr], ret: &Operand, n_slots: usize) {
    let mut seen = vec![false; n_slots];
    if let Some(s) = ret.slot().and_then(|s| seen.get_mut(s)) {
        *s = true;
    }
    for instr in code.iter_mut().rev() {
        let mut drops = Vec::new();
        if seen.get(instr.dst) == Some(&false) {
            drops.push(instr.dst);
        }
        for s in instr.op.operands().into_iter().filter_map(Operand::slot) {
            if let Some(flag) = seen.get_mut(s) {
                if !*flag {
                    *flag = true;
                    drops.push(s);
                }
            }
        }
        instr.drop_after = drops;
    }
}
