//! The interpreter: runs a [`Plan`] over the runner's inputs.
//!
//! Each function runs straight-line code over a slot array; built-ins borrow their arguments,
//! user functions and scan bodies receive cheap `Arc` clones, and each slot is freed after its
//! last use. `scan` runs one compiled body per element of the stack, handing it that layer's
//! record (a shared view: no weight is copied). Errors carry the line:col of the call; lines of
//! private regions are not printed.

use super::ast::BinOp;
use super::builtins::Builtin;
use super::compile::{Instr, Op, Operand, Plan};
use super::diagnostic::{Located, Pos};
use super::error::{RunError, RunErrorKind};
use super::profile;
use super::value::{Inputs, Value};

impl Plan {
    /// Run the entry function with `inputs` bound to its parameters by name. The inputs must
    /// have the types the plan was compiled for (tensor sizes and id-list lengths may vary).
    pub fn run(&self, inputs: &Inputs) -> Result<Value, RunError> {
        let mut args = Vec::with_capacity(self.params.len());
        for (name, t) in &self.params {
            let Some(v) = inputs.get(name) else {
                return Err(self.error(
                    RunErrorKind::InputMismatch {
                        name: name.clone(),
                        expected: t.to_string(),
                        found: "nothing".into(),
                    },
                    self.entry_pos,
                ));
            };
            t.admits(v).map_err(|found| {
                self.error(
                    RunErrorKind::InputMismatch {
                        name: name.clone(),
                        expected: t.to_string(),
                        found,
                    },
                    self.entry_pos,
                )
            })?;
            args.push(v.clone());
        }
        if let Some(extra) = inputs
            .names()
            .find(|n| !self.params.iter().any(|(p, _)| p == n))
        {
            return Err(self.error(
                RunErrorKind::InputMismatch {
                    name: extra.to_owned(),
                    expected: "no such parameter".into(),
                    found: "an input".into(),
                },
                self.entry_pos,
            ));
        }
        self.call(self.entry, args)
    }

    pub(super) fn error(&self, kind: RunErrorKind, pos: Pos) -> RunError {
        Located {
            kind,
            excerpt: self.excerpt(pos),
        }
    }

    fn call(&self, index: usize, args: Vec<Value>) -> Result<Value, RunError> {
        let Some(f) = self.functions.get(index) else {
            return Err(self.error(internal("a call to a missing plan"), self.entry_pos));
        };
        let mut slots: Vec<Option<Value>> = Vec::with_capacity(f.n_slots);
        slots.extend(args.into_iter().map(Some));
        slots.resize_with(f.n_slots.max(f.n_params), || None);
        for instr in &f.code {
            let v = self.step(instr, &slots)?;
            if let Some(s) = slots.get_mut(instr.dst) {
                *s = Some(v);
            }
            for &d in &instr.drop_after {
                if let Some(s) = slots.get_mut(d) {
                    *s = None;
                }
            }
        }
        match &f.ret {
            Operand::Const(v) => Ok(v.clone()),
            Operand::Slot(s) => slots
                .get_mut(*s)
                .and_then(Option::take)
                .ok_or_else(|| self.error(internal("an empty return slot"), self.entry_pos)),
        }
    }

    fn step(&self, instr: &Instr, slots: &[Option<Value>]) -> Result<Value, RunError> {
        let get = |o| self.operand(slots, o, instr.pos);
        let at = |kind| self.error(kind, instr.pos);
        match &instr.op {
            Op::Builtin(b, args) => {
                let vals = args.iter().map(get).collect::<Result<Vec<&Value>, _>>()?;
                profile::timed(Some(*b), || b.exec(&vals)).map_err(at)
            }
            Op::LinearArgmax(args) => {
                let vals = args.iter().map(get).collect::<Result<Vec<&Value>, _>>()?;
                profile::timed(None, || Builtin::linear_argmax(&vals)).map_err(at)
            }
            Op::Call(g, args) => {
                let vals = args
                    .iter()
                    .map(|a| get(a).cloned())
                    .collect::<Result<Vec<Value>, _>>()?;
                self.call(*g, vals)
            }
            Op::Scan {
                body,
                carry,
                stacked,
                extra,
            } => {
                let mut carry = get(carry)?.clone();
                let Value::Stack(items) = get(stacked)? else {
                    return Err(at(RunErrorKind::Kind {
                        what: "scan's third argument".into(),
                        expected: "a stack".into(),
                        found: get(stacked)?.kind().into(),
                    }));
                };
                let extra = extra
                    .iter()
                    .map(|a| get(a).cloned())
                    .collect::<Result<Vec<Value>, _>>()?;
                for item in items.iter() {
                    let mut args = Vec::with_capacity(2 + extra.len());
                    args.push(carry);
                    args.push(item.clone());
                    args.extend(extra.iter().cloned());
                    carry = self.call(*body, args)?;
                }
                Ok(carry)
            }
            Op::Field(rec, name) => match get(rec)? {
                Value::Record(r) => r.get(name).cloned().ok_or_else(|| {
                    at(RunErrorKind::UnknownField {
                        field: name.clone(),
                    })
                }),
                other => Err(at(RunErrorKind::Kind {
                    what: format!("`.{name}`"),
                    expected: "a record".into(),
                    found: other.kind().into(),
                })),
            },
            Op::Arith(op, a, b) => {
                let (x, y) = (
                    scalar(get(a)?, op.symbol()).map_err(at)?,
                    scalar(get(b)?, op.symbol()).map_err(at)?,
                );
                let v = match op {
                    BinOp::Add => x + y,
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    BinOp::Div => x / y,
                };
                if v.is_finite() {
                    Ok(Value::Scalar(v))
                } else {
                    Err(at(RunErrorKind::NotFinite { value: v }))
                }
            }
            Op::Neg(a) => Ok(Value::Scalar(-scalar(get(a)?, "-").map_err(at)?)),
        }
    }
}

impl Plan {
    fn operand<'a>(
        &self,
        slots: &'a [Option<Value>],
        o: &'a Operand,
        pos: Pos,
    ) -> Result<&'a Value, RunError> {
        match o {
            Operand::Const(v) => Ok(v),
            Operand::Slot(s) => slots
                .get(*s)
                .and_then(Option::as_ref)
                .ok_or_else(|| self.error(internal("a read of an empty slot"), pos)),
        }
    }
}

fn scalar(v: &Value, op: &str) -> Result<f64, RunErrorKind> {
    v.as_scalar().ok_or_else(|| RunErrorKind::Kind {
        what: format!("an operand of `{op}`"),
        expected: "a scalar".into(),
        found: v.kind().into(),
    })
}

fn internal(what: &'static str) -> RunErrorKind {
    RunErrorKind::Internal { what }
}
