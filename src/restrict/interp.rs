//! The interpreter: runs a [`Plan`] over the runner's inputs.
//!
//! Each function runs straight-line code over a slot array; built-ins borrow their arguments,
//! user functions and scan bodies receive cheap `Arc` clones, and each slot is freed after its
//! last use. `scan` runs one compiled body per element of the stack, handing it that layer's
//! record (a shared view: no weight is copied). A run for effects alone
//! ([`Plan::run_for_effects`]) does only what its state changes need ([`super::effects`]).
//! Errors carry the line:col of the call; lines of private regions are not printed.

use super::ast::BinOp;
use super::builtins::Builtin;
use super::compile::{Instr, Op, Operand, Plan};
use super::diagnostic::{Located, Pos};
use super::effects::{self, Need};
use super::error::{RunError, RunErrorKind};
use super::profile;
use super::value::{Inputs, Value};

impl Plan {
    /// Run the entry function with `inputs` bound to its parameters by name. The inputs must
    /// have the types the plan was compiled for (tensor sizes and id-list lengths may vary).
    pub fn run(&self, inputs: &Inputs) -> Result<Value, RunError> {
        let args = self.bind(inputs)?;
        self.call(self.entry, args)
    }

    /// Run the entry function for what it leaves in the inputs' state (the KV caches) alone:
    /// the same caches as [`Plan::run`], bit for bit, without computing anything they do not
    /// depend on (see [`super::effects`]). For a prefill chunk whose output is thrown away.
    pub fn run_for_effects(&self, inputs: &Inputs) -> Result<(), RunError> {
        let args = self.bind(inputs)?;
        // Worked out per run: a pass over a few hundred instructions, next to a prefill chunk.
        let needs = effects::needs(&self.functions);
        self.call_for_effects(&needs, self.entry, args)
    }

    /// The entry function's arguments: `inputs` by parameter name, each checked against the
    /// type the plan was compiled for.
    fn bind(&self, inputs: &Inputs) -> Result<Vec<Value>, RunError> {
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
        Ok(args)
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

    /// [`Plan::call`] for its effects alone: each instruction as [`Need`] says.
    fn call_for_effects(
        &self,
        all: &[Vec<Need>],
        index: usize,
        args: Vec<Value>,
    ) -> Result<(), RunError> {
        let (Some(f), Some(needs)) = (self.functions.get(index), all.get(index)) else {
            return Err(self.error(internal("a call to a missing plan"), self.entry_pos));
        };
        let mut slots: Vec<Option<Value>> = Vec::with_capacity(f.n_slots);
        slots.extend(args.into_iter().map(Some));
        slots.resize_with(f.n_slots.max(f.n_params), || None);
        for (instr, need) in f.code.iter().zip(needs) {
            match need {
                Need::Value => {
                    let v = self.step(instr, &slots)?;
                    if let Some(s) = slots.get_mut(instr.dst) {
                        *s = Some(v);
                    }
                }
                Need::Effects => self.effects_of(all, instr, &slots)?,
                Need::Skip => {}
            }
            // A skipped instruction's operands are not read later either: this was their last use.
            for &d in &instr.drop_after {
                if let Some(s) = slots.get_mut(d) {
                    *s = None;
                }
            }
        }
        Ok(())
    }

    /// Run `instr` for its effects alone: a call effects-only, a scan with its last body
    /// effects-only (the bodies before it produce the carry the next one reads), and anything
    /// else as usual, its value dropped.
    fn effects_of(
        &self,
        all: &[Vec<Need>],
        instr: &Instr,
        slots: &[Option<Value>],
    ) -> Result<(), RunError> {
        match &instr.op {
            Op::Call(g, args) => {
                let vals = self.owned(slots, args, instr.pos)?;
                self.call_for_effects(all, *g, vals)
            }
            Op::Scan { .. } => self.scan(instr, slots, Some(all)).map(drop),
            _ => self.step(instr, slots).map(drop),
        }
    }

    /// A scan instruction's bodies over its stack, each taking the carry the one before
    /// returned; with `for_effects` (every function's [`Need`]s), the last body runs for its
    /// effects alone and the carry is not returned.
    fn scan(
        &self,
        instr: &Instr,
        slots: &[Option<Value>],
        for_effects: Option<&[Vec<Need>]>,
    ) -> Result<Option<Value>, RunError> {
        let Op::Scan {
            body,
            carry,
            stacked,
            extra,
        } = &instr.op
        else {
            return Err(self.error(internal("a scan that is not one"), instr.pos));
        };
        let body = *body;
        let get = |o| self.operand(slots, o, instr.pos);
        let mut carry = get(carry)?.clone();
        let Value::Stack(items) = get(stacked)? else {
            return Err(self.error(
                RunErrorKind::Kind {
                    what: "scan's third argument".into(),
                    expected: "a stack".into(),
                    found: get(stacked)?.kind().into(),
                },
                instr.pos,
            ));
        };
        let extra = self.owned(slots, extra, instr.pos)?;
        for (i, item) in items.iter().enumerate() {
            let mut args = Vec::with_capacity(2 + extra.len());
            args.push(carry);
            args.push(item.clone());
            args.extend(extra.iter().cloned());
            if let Some(all) = for_effects.filter(|_| i + 1 == items.len()) {
                self.call_for_effects(all, body, args)?;
                return Ok(None);
            }
            carry = self.call(body, args)?;
        }
        Ok(Some(carry))
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
                let vals = self.owned(slots, args, instr.pos)?;
                self.call(*g, vals)
            }
            Op::Scan { .. } => self
                .scan(instr, slots, None)?
                .ok_or_else(|| at(internal("a scan without its carry"))),
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
    /// The values of `ops`, each cloned (cheap: tensors and weights are shared), for a call.
    fn owned(
        &self,
        slots: &[Option<Value>],
        ops: &[Operand],
        pos: Pos,
    ) -> Result<Vec<Value>, RunError> {
        ops.iter()
            .map(|o| self.operand(slots, o, pos).cloned())
            .collect()
    }

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
