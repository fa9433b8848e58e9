//! Memory the operating system hands out: the binary's allocator ([`heap`]), glibc's heap
//! tuning, and read-only file mappings ([`mapped`]). These are the only files outside the
//! kernels that need `unsafe`; each block carries its `SAFETY` argument, and everything built on
//! them (checkpoints, digests) stays safe code.

pub mod heap;
pub mod mapped;

pub use mapped::MappedFile;
