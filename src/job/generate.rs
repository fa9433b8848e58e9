//! Greedy batched generation: the runner's side of running an engine. It owns the tokens, the
//! batching (left padding, positions), the KV-cache memory and stopping; every number about the
//! model is computed by the engine's compiled plan.
//!
//! A batch is left-padded to its longest prompt, as HF does: sequence `b` with `p` pads has its
//! tokens at columns `p..`, positions `0, 1, ...` from its first real token, and the engine is
//! told `p` so padded columns are never attended. Sequences that stop (an eos id) keep receiving
//! the pad token until the whole batch is done; their outputs are not read any more.

use std::sync::Arc;

use crate::error::{Diagnose, Exit};
use crate::job::model_value::{layer_columns, model_record};
use crate::kernels::KernelError;
use crate::model::weights::Checkpoint;
use crate::restrict::{compile, Checked, CompileError, Inputs, Plan, RunError, Value};

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// It produced a stop token (included in its tokens).
    Stop,
    /// It reached `max_new_tokens`.
    Length,
}

/// One sequence's generated tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// New token ids, the stop token included when there is one.
    pub tokens: Vec<u32>,
    /// Why generation ended.
    pub finish: Finish,
}

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// The engine does not compile for this model's inputs.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The engine failed while running.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The inputs could not be typed for the engine.
    #[error("engine inputs: {0}")]
    Inputs(String),
    /// KV caches could not be built for this batch.
    #[error("cannot allocate the KV caches: {0}")]
    Cache(#[from] KernelError),
    /// A prompt is empty or holds an id outside the vocabulary.
    #[error("prompt {index}: {problem}")]
    Prompt {
        /// Index of the prompt in the call.
        index: usize,
        /// What is wrong.
        problem: String,
    },
    /// The engine did not run every layer of the checkpoint exactly once in a step.
    #[error(
        "the engine ran {ran} of the checkpoint's {total} layers once in the prefill (layers {wrong} \
         were skipped or run more than once); an engine must run every layer exactly once per \
         step, so one written out for a fixed number of layers (engines/gemma3_unrolled.eng: 6) \
         cannot serve this checkpoint: use engines/gemma3.eng, whose `scan` runs them all"
    )]
    Layers {
        /// Layers whose KV cache took exactly the step's columns.
        ran: usize,
        /// Layers in the checkpoint.
        total: usize,
        /// The others, as a list for the message.
        wrong: String,
    },
    /// The engine's entry returned something other than one id per sequence.
    #[error("the engine returned {found}, expected one token id per sequence ({batch})")]
    Output {
        /// What came back.
        found: String,
        /// Sequences in the batch.
        batch: usize,
    },
}

impl Diagnose for GenerateError {
    fn exit(&self) -> Exit {
        match self {
            GenerateError::Compile(e) => e.exit(),
            GenerateError::Prompt { .. } | GenerateError::Layers { .. } => Exit::BadInput,
            _ => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            GenerateError::Compile(e) => e.hint(),
            GenerateError::Layers { .. } => Some(
                "approve an engine whose layer stack is a `scan` over `model.layers` for this \
                 checkpoint, or run this engine on a checkpoint with as many layers as it names"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// Settings of one generation call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Largest number of new tokens per sequence.
    pub max_new_tokens: usize,
    /// Ids that end a sequence (HF's `eos_token_id`).
    pub stop_ids: Vec<u32>,
}

/// A compiled engine bound to a checkpoint.
pub struct Generator {
    plan: Plan,
    checkpoint: Arc<Checkpoint>,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator").finish_non_exhaustive()
    }
}

/// The most bytes one prefill activation (a `[rows, intermediate]` f32 tensor) may take; the
/// prefill is cut into column chunks to stay under it (see [`Generator::prefill_step`]).
pub const PREFILL_ACTIVATION_BYTES: usize = 8 << 20;

/// The inputs of one engine step.
fn step_inputs(model: &Value, tokens: Vec<u32>, positions: Vec<u32>, pad: Vec<u32>) -> Inputs {
    Inputs::new()
        .with("model", model.clone())
        .with("tokens", Value::ids(tokens))
        .with("positions", Value::ids(positions))
        .with("pad", Value::ids(pad))
}

/// Every layer's cache must have taken exactly `width` more columns than `before`: an engine
/// that skips a layer (or runs one twice) would otherwise give wrong tokens quietly.
fn check_every_layer_ran(
    model: &Value,
    before: &[usize],
    width: usize,
) -> Result<(), GenerateError> {
    let after = layer_columns(model);
    let wrong: Vec<usize> = (0..after.len())
        .filter(|&i| after[i] != before.get(i).copied().unwrap_or(0) + width)
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    let mut list: Vec<String> = wrong.iter().take(8).map(usize::to_string).collect();
    if wrong.len() > 8 {
        list.push(format!("and {} more", wrong.len() - 8));
    }
    Err(GenerateError::Layers {
        ran: after.len() - wrong.len(),
        total: after.len(),
        wrong: list.join(", "),
    })
}

/// A batch's first step: tokens (left-padded rows), positions, and pads per row.
pub type Prefill = (Vec<u32>, Vec<u32>, Vec<u32>);

impl Generator {
    /// Compile `entry` of a verified engine for this checkpoint. The engine's entry takes
    /// `(model, tokens, positions, pad)` and returns one id per sequence (`main`) or the last
    /// position's logits (`logits`).
    pub fn new(
        checked: Checked,
        entry: &str,
        checkpoint: Arc<Checkpoint>,
    ) -> Result<Generator, GenerateError> {
        let model = model_record(&checkpoint, 1, 1)?;
        let sig = step_inputs(&model, vec![0], vec![0], vec![0])
            .signature()
            .map_err(|e| GenerateError::Inputs(e.to_string()))?;
        let plan = compile(checked, entry, &sig)?;
        Ok(Generator { plan, checkpoint })
    }

    /// The checkpoint the engine runs on.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// A batch's first step: left-padded prompts (rows of equal width), their positions and pad
    /// counts, as [`Generator::prefill_step`] takes them.
    pub fn left_pad(&self, prompts: &[Vec<u32>]) -> Result<Prefill, GenerateError> {
        let vocab = self.checkpoint.config.vocab_size;
        let pad_id = self.checkpoint.config.pad_token_id;
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let (mut tokens, mut positions, mut pads) = (Vec::new(), Vec::new(), Vec::new());
        for (index, p) in prompts.iter().enumerate() {
            if p.is_empty() {
                return Err(GenerateError::Prompt {
                    index,
                    problem: "it has no tokens".into(),
                });
            }
            if p.iter().any(|&id| id as usize >= vocab) {
                return Err(GenerateError::Prompt {
                    index,
                    problem: format!("a token id is outside the vocabulary of {vocab}"),
                });
            }
            let pad = width - p.len();
            tokens.extend(std::iter::repeat_n(pad_id, pad).chain(p.iter().copied()));
            positions.extend(std::iter::repeat_n(0, pad).chain(0..p.len() as u32));
            pads.push(pad as u32);
        }
        Ok((tokens, positions, pads))
    }

    /// Run one step and return the engine's output value.
    pub fn step(
        &self,
        model: &Value,
        tokens: Vec<u32>,
        positions: Vec<u32>,
        pad: Vec<u32>,
    ) -> Result<Value, GenerateError> {
        Ok(self.plan.run(&step_inputs(model, tokens, positions, pad))?)
    }

    /// The prefill: `tokens`, `positions` (`batch` left-padded rows of equal width) and `pad`,
    /// fed to the engine a few columns at a time so that no activation holds more than about
    /// [`PREFILL_ACTIVATION_BYTES`] (a whole `[batch × prompt, intermediate]` f32 MLP tensor is
    /// 108 MiB for Gemma 3 1b at batch 128 × 32 tokens). Returns the last chunk's output.
    ///
    /// The same result as one step over every column: each row of every linear is computed
    /// alone, and attention reads earlier columns' keys and values back from the cache exactly
    /// as stored, in the same order.
    pub fn prefill_step(
        &self,
        model: &Value,
        tokens: Vec<u32>,
        positions: Vec<u32>,
        pad: Vec<u32>,
    ) -> Result<Value, GenerateError> {
        let batch = pad.len().max(1);
        let cfg = &self.checkpoint.config;
        let row_bytes = 4 * cfg.intermediate_size.max(cfg.hidden_size).max(1);
        let cols = (PREFILL_ACTIVATION_BYTES / row_bytes / batch).max(1);
        self.prefill_in_chunks(model, tokens, positions, pad, cols)
    }

    /// [`Generator::prefill_step`] with `cols` columns per chunk (at least 1).
    pub fn prefill_in_chunks(
        &self,
        model: &Value,
        tokens: Vec<u32>,
        positions: Vec<u32>,
        pad: Vec<u32>,
        cols: usize,
    ) -> Result<Value, GenerateError> {
        let batch = pad.len().max(1);
        let width = tokens.len() / batch;
        let cols = cols.max(1);
        let before = layer_columns(model);
        let out = if cols >= width {
            self.step(model, tokens, positions, pad)?
        } else {
            let mut last = None;
            let mut c0 = 0;
            while c0 < width {
                let c1 = (c0 + cols).min(width);
                let pick = |v: &[u32]| -> Vec<u32> {
                    v.chunks_exact(width)
                        .flat_map(|row| row[c0..c1].iter().copied())
                        .collect()
                };
                last = Some(self.step(model, pick(&tokens), pick(&positions), pad.clone())?);
                c0 = c1;
            }
            last.ok_or(GenerateError::Output {
                found: "nothing".into(),
                batch,
            })?
        };
        check_every_layer_ran(model, &before, width)?;
        Ok(out)
    }

    /// A fresh `model` record (new, empty caches) for a batch.
    pub fn fresh_model(&self, batch: usize, max_len: usize) -> Result<Value, GenerateError> {
        Ok(model_record(&self.checkpoint, batch, max_len)?)
    }

    /// Greedily continue every prompt of one batch. `on_step` is called after every step with
    /// the number of sequences still running (for progress reporting).
    pub fn generate(
        &self,
        prompts: &[Vec<u32>],
        settings: &Settings,
        mut on_step: impl FnMut(usize),
    ) -> Result<Vec<Generated>, GenerateError> {
        let batch = prompts.len();
        if batch == 0 {
            return Ok(Vec::new());
        }
        let (tokens, positions, pads) = self.left_pad(prompts)?;
        let width = tokens.len() / batch;
        let model = self.fresh_model(batch, width + settings.max_new_tokens)?;
        let mut out: Vec<Generated> = (0..batch)
            .map(|_| Generated {
                tokens: Vec::new(),
                finish: Finish::Length,
            })
            .collect();
        let mut running = vec![true; batch];
        let mut next_pos: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
        let mut next = self.prefill_step(&model, tokens, positions, pads.clone())?;
        for step in 0..settings.max_new_tokens {
            let ids = match &next {
                Value::Ids(ids) if ids.len() == batch => ids.clone(),
                other => {
                    return Err(GenerateError::Output {
                        found: other.kind().into(),
                        batch,
                    });
                }
            };
            for b in 0..batch {
                if running[b] {
                    out[b].tokens.push(ids[b]);
                    if settings.stop_ids.contains(&ids[b]) {
                        out[b].finish = Finish::Stop;
                        running[b] = false;
                    }
                }
            }
            let alive = running.iter().filter(|r| **r).count();
            on_step(alive);
            if alive == 0 || step + 1 == settings.max_new_tokens {
                break;
            }
            let pad_id = self.checkpoint.config.pad_token_id;
            let feed: Vec<u32> = (0..batch)
                .map(|b| if running[b] { ids[b] } else { pad_id })
                .collect();
            let pos = next_pos.clone();
            for p in &mut next_pos {
                *p += 1;
            }
            next = self.step(&model, feed, pos, pads.clone())?;
        }
        Ok(out)
    }
}
