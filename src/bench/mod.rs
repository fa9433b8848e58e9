//! `runner bench`: prefill and decode throughput of an engine on a checkpoint, per batch size,
//! with the process's peak memory against the memory budget ([`memory`]) and the results stated
//! as fractions of this machine's own probed limits (see [`probe`]). The parts: [`prompts`], the
//! timing loop ([`timing`]), the checkpoint's facts ([`facts`]), the [`report`], and thread
//! [`scaling`].
//!
//! A run feeds `batch` synthetic prompts of equal length (no padding) through
//! [`Generator::step`](crate::job::generate::Generator::step): one prefill step over the prompts,
//! then `new_tokens - 1` decode steps feeding back each step's ids, with stopping disabled, so
//! every run does the same work (as HF's `generate` with `max_new_tokens = new_tokens` and no
//! eos). Prefill time covers the first step (it yields the first new token); decode time
//! covers the rest.
//!
//! Flop counts are those of the linear layers (two per multiply-add): every layer projection
//! per token, and the output head once per sequence per step (the engine applies it to the
//! last position only). Attention's own flops are left out (small at benchmark lengths).
#![forbid(unsafe_code)]

pub mod facts;
pub mod memory;
pub mod probe;
pub mod prompts;
pub mod report;
pub mod scaling;
pub mod timing;

pub use facts::ModelFacts;
pub use prompts::{prompts, PROMPT_SEED};
pub use report::{median, BatchReport, DecodeProfile, Machine, Probes, Report};
pub use timing::{
    run_batch, time_run, time_run_profiled, time_run_tokens, warm_up, BatchRun, ProfiledRun,
    RssScope, Timing,
};
