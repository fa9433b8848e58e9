//! Jobs: the job file, the private inputs, the trusted boundary that admits a job, greedy
//! batched generation through the compiled engine, publishing outputs with a receipt, and the
//! audit log of exec attempts.
#![forbid(unsafe_code)]

pub mod admit;
pub mod answer;
pub mod attest;
pub mod audit;
pub mod exec;
pub mod generate;
pub mod input_table;
pub mod inputs;
pub mod inputs_file;
pub mod journal;
pub mod model_value;
pub mod openai;
pub mod outputs;
pub mod publish;
pub mod registry;
pub mod request;
pub mod run;
pub mod sampling;
pub mod shard;
pub mod spec;
pub mod state;
pub mod stop;
pub mod superseded;
