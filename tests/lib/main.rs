//! Tests of the library's modules through their public API, one file per part, linked into
//! one test binary. Of the harness in `tests/common` they need only the repository paths and the
//! configfs-tsm fake.

#[path = "../common"]
mod common {
    pub mod repo;
    pub mod tsm;
}

mod attestation;
mod canonical_diff;
mod engine_differential;
mod engine_gen;
mod engine_layers;
mod gguf;
mod job_files;
mod layers;
mod model_load;
mod parity;
mod reapproval;
mod repo_certs;
mod restrict_fuzz;
mod restrict_run;
mod restrict_structured;
mod restrict_verify;
mod tokenizer;
mod trust_props;
