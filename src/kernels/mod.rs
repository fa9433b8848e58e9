//! Tensor operations the engine language calls (linear, rms_norm, rope, attention, ...).
//! Every fast kernel has a slow, obviously-correct twin and a test comparing the two.

pub mod tensor;

pub use tensor::{DType, Tensor, Weight};
