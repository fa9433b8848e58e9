//! Jobs: the job file, the private inputs, and greedy batched generation through a compiled
//! engine.

pub mod admit;
pub mod generate;
pub mod inputs;
pub mod run;
pub mod spec;
