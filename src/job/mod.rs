//! Jobs: the job file, the private inputs, the audit log of exec attempts, and (with
//! `runner exec`) running them.

pub mod audit;
pub mod inputs;
pub mod spec;
