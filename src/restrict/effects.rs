//! What a run whose value is thrown away still has to do.
//!
//! The runner feeds a long prefill to the engine a few columns at a time and keeps only the last
//! chunk's result: the earlier chunks matter only for what they leave in the KV caches. The one
//! built-in that changes state is `attention` (it appends the chunk's keys and values to its
//! cache); every other operation is a pure function of its operands. So such a run needs the
//! `attention` calls and whatever they read, and nothing else: not the output head, and not the
//! last layer's work after its attention. The caches end the same as after a full run, bit for
//! bit, because every instruction that runs gets the same operands.
//!
//! An effects-only run can only leave out a failure, never add one: an instruction it skips
//! would have failed (if at all) on shapes the runner's last chunk repeats, and that chunk runs
//! in full.

use super::builtins::Builtin;
use super::compile::{FuncPlan, Op};

/// How an effects-only run treats one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Need {
    /// Its value is read by something that must run: run it as usual.
    Value,
    /// Only its effects matter: a call or scan runs effects-only itself, a built-in runs and its
    /// value is dropped.
    Effects,
    /// Neither: skip it.
    Skip,
}

/// Per function, per instruction, what an effects-only run of that function needs.
pub(super) fn needs(functions: &[FuncPlan]) -> Vec<Vec<Need>> {
    let touches = touches_state(functions);
    functions
        .iter()
        .map(|f| {
            let mut live = vec![false; f.n_slots.max(f.n_params)];
            let mut out = vec![Need::Skip; f.code.len()];
            for (i, instr) in f.code.iter().enumerate().rev() {
                let read = live.get(instr.dst).copied().unwrap_or(false);
                let need = if read {
                    Need::Value
                } else if effects(&instr.op, &touches) {
                    Need::Effects
                } else {
                    Need::Skip
                };
                // The instruction writes `dst`: what was live there before it is another value.
                if let Some(l) = live.get_mut(instr.dst) {
                    *l = false;
                }
                if need != Need::Skip {
                    for s in instr.op.operands().into_iter().filter_map(|o| o.slot()) {
                        if let Some(l) = live.get_mut(s) {
                            *l = true;
                        }
                    }
                }
                out[i] = need;
            }
            out
        })
        .collect()
}

/// Which functions change state when they run, directly or through what they call.
fn touches_state(functions: &[FuncPlan]) -> Vec<bool> {
    let mut touches = vec![false; functions.len()];
    // Calls may point either way in the list, so settle it by repeating until nothing changes
    // (each pass can only turn entries on).
    loop {
        let mut changed = false;
        for (i, f) in functions.iter().enumerate() {
            if !touches[i] && f.code.iter().any(|instr| effects(&instr.op, &touches)) {
                touches[i] = true;
                changed = true;
            }
        }
        if !changed {
            return touches;
        }
    }
}

/// Whether running `op` changes state, given which functions do.
fn effects(op: &Op, touches: &[bool]) -> bool {
    match op {
        Op::Builtin(b, _) => changes_state(*b),
        Op::Call(g, _) | Op::Scan { body: g, .. } => touches.get(*g).copied().unwrap_or(true),
        Op::LinearArgmax(_) | Op::Field(..) | Op::Arith(..) | Op::Neg(_) => false,
    }
}

/// The built-ins that change state: the list is short on purpose, and a new built-in that keeps
/// state must be added here (the match has no catch-all for that reason).
fn changes_state(b: Builtin) -> bool {
    match b {
        Builtin::Attention => true,
        Builtin::Linear
        | Builtin::Add
        | Builtin::Mul
        | Builtin::Scale
        | Builtin::RmsNorm
        | Builtin::GeluTanh
        | Builtin::Softmax
        | Builtin::Argmax
        | Builtin::Embed
        | Builtin::Rope
        | Builtin::SplitBatch
        | Builtin::SplitHeads
        | Builtin::MergeHeads
        | Builtin::LastPosition => false,
    }
}
