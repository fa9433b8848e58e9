//! Model checkpoints: identifying a checkpoint directory by one digest that certificates bind.

pub mod digest;
