//! Jobs: the job file, the private inputs, and (with `runner exec`) running them.

pub mod inputs;
pub mod spec;
