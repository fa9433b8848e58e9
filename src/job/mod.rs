//! Jobs: the job file, the private inputs, and greedy batched generation through a compiled
//! engine.

pub mod generate;
pub mod inputs;
pub mod spec;
