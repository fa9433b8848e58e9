//! Where an engine run's time goes, per built-in (`runner bench --profile`).
//!
//! Off unless [`start`] turns it on. Then every built-in call, and the fused `linear` +
//! `argmax` the compiler makes of the output head, adds its wall time and one call to
//! process-wide counters, until [`stop`] hands them back. Off, a call costs one relaxed load.
//! The counters are shared by the whole process: the bench measures one run at a time, and
//! that is the only intended user.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::builtins::Builtin;

/// The fused `argmax(linear(x, w))` has its own counter, after the built-ins'.
const FUSED: usize = Builtin::ALL.len();
const SLOTS: usize = FUSED + 1;
/// Its name in a profile.
pub const FUSED_NAME: &str = "linear+argmax";

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static CALLS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// One operation's share of a profiled stretch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpTime {
    /// The built-in's name, or [`FUSED_NAME`].
    pub op: String,
    /// Calls made.
    pub calls: u64,
    /// Wall time inside them, seconds.
    pub seconds: f64,
}

/// Zero the counters and start counting.
pub fn start() {
    for (n, c) in NANOS.iter().zip(&CALLS) {
        n.store(0, Ordering::Relaxed);
        c.store(0, Ordering::Relaxed);
    }
    ON.store(true, Ordering::Release);
}

/// Stop counting; every operation called since [`start`], most time first.
pub fn stop() -> Vec<OpTime> {
    ON.store(false, Ordering::Release);
    let name = |slot: usize| Builtin::ALL.get(slot).map_or(FUSED_NAME, |b| b.name());
    let mut ops: Vec<OpTime> = (0..SLOTS)
        .filter_map(|slot| {
            let calls = CALLS[slot].load(Ordering::Relaxed);
            (calls > 0).then(|| OpTime {
                op: name(slot).to_owned(),
                calls,
                seconds: NANOS[slot].load(Ordering::Relaxed) as f64 * 1e-9,
            })
        })
        .collect();
    ops.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.op.cmp(&b.op)));
    ops
}

/// Run `f`, a call of `b` (`None`: the fused head), counting it when profiling is on.
#[inline]
pub(super) fn timed<R>(b: Option<Builtin>, f: impl FnOnce() -> R) -> R {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let nanos = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let slot = b.map_or(FUSED, |b| {
        Builtin::ALL.iter().position(|&x| x == b).unwrap_or(FUSED)
    });
    NANOS[slot].fetch_add(nanos, Ordering::Relaxed);
    CALLS[slot].fetch_add(1, Ordering::Relaxed);
    r
}
