//! Tensor operations the engine language calls (linear, rms_norm, rope, attention, ...).
//! Every fast kernel has a slow, obviously-correct twin in `reference` (compiled for tests
//! only) and a test comparing the two. Every kernel is deterministic: its result does not depend
//! on the thread count or on which instruction set ran (see [`simd`] and [`parallel`]).
//! docs/kernels.md summarises shapes and numerics.

pub mod attention;
pub mod dtype;
pub mod elementwise;
pub mod embed;
pub mod error;
pub mod linear;
mod math;
pub mod norm;
pub mod parallel;
mod pool;
pub mod quant;
#[cfg(test)]
pub mod reference;
pub mod rope;
mod screen;
pub mod simd;
pub mod softmax;
pub mod tensor;

pub use attention::{attention, attention_on, CacheKind, KvCache};
pub use elementwise::{add, gelu_tanh, mul, scale};
pub use embed::{embed, round_to_dtype};
pub use error::KernelError;
pub use linear::{
    argmax_screen_bytes, linear, linear_argmax, linear_on, linear_portable, linear_t,
};
pub use norm::rms_norm;
pub use parallel::{set_threads, threads, with_threads, THREADS_ENV};
pub use rope::{rope, rope_inv_freq};
pub use simd::{available, isa, with_instruction_set, Isa, ISA_ENV};
pub use softmax::{argmax, softmax};
pub use tensor::{DType, Tensor, Weight};

#[cfg(test)]
mod tests;
