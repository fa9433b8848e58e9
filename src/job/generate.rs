//! Greedy batched generation: the runner's side of running an engine. It owns the tokens, the
//! batching (left padding, positions), the KV-cache memory and stopping; every number about the
//! model is computed by the engine's compiled plan.
//!
//! A batch is left-padded to its longest prompt, as HF does: sequence `b` with `p` pads has its
//! tokens at columns `p..`, positions `0, 1, ...` from its first real token, and the engine is
//! told `p` so padded columns are never attended. Sequences that stop (an eos id) keep receiving
//! the pad token until the whole batch is done; their outputs are not read any more.

use std::sync::Arc;

use super::sampling::Sampler;
use super::stop::StopStrings;
use crate::error::{Diagnose, Exit};
use crate::job::model_value::{layer_columns, model_record};
use crate::kernels::parallel::map_ranges;
use crate::kernels::softmax::argmax_row;
use crate::kernels::KernelError;
use crate::model::weights::Checkpoint;
use crate::restrict::{compile, Checked, CompileError, Inputs, Plan, RunError, Signature, Value};

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// It produced a stop token (included in its tokens) or a stop string.
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
    /// The engine's entry returned something other than one id (or, for `logits`, one row of
    /// logits) per sequence.
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

/// How one sequence of a batch is continued, beyond the batch's [`Settings`].
#[derive(Debug, Clone, Default)]
pub struct Control<'a> {
    /// Its own cap on new tokens (at most the batch's `max_new_tokens`).
    pub max_new: usize,
    /// Sampled with this, or greedy when `None`.
    pub sampler: Option<Sampler>,
    /// Its stop strings, if any.
    pub stop: Option<StopStrings<'a>>,
}

/// A compiled engine bound to a checkpoint.
pub struct Generator {
    plan: Plan,
    /// The engine's `logits` entry, compiled when the job samples.
    logits: Option<Plan>,
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

/// The types of a step's inputs on this checkpoint, which an entry is compiled for.
fn step_signature(checkpoint: &Checkpoint) -> Result<Signature, GenerateError> {
    let model = model_record(checkpoint, 1, 1)?;
    step_inputs(&model, vec![0], vec![0], vec![0])
        .signature()
        .map_err(|e| GenerateError::Inputs(e.to_string()))
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
        let plan = compile(checked, entry, &step_signature(&checkpoint)?)?;
        Ok(Generator {
            plan,
            logits: None,
            checkpoint,
        })
    }

    /// Also compile the engine's `logits` entry (the step before argmax), which sampled
    /// sequences are drawn from.
    pub fn with_sampling(mut self, checked: Checked) -> Result<Generator, GenerateError> {
        self.logits = Some(compile(
            checked,
            LOGITS_ENTRY,
            &step_signature(&self.checkpoint)?,
        )?);
        Ok(self)
    }

    /// Whether sampled sequences can run (the `logits` entry is compiled).
    pub fn can_sample(&self) -> bool {
        self.logits.is_some()
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
        self.step_with(Head::Ids, model, tokens, positions, pad)
    }

    fn step_with(
        &self,
        head: Head,
        model: &Value,
        tokens: Vec<u32>,
        positions: Vec<u32>,
        pad: Vec<u32>,
    ) -> Result<Value, GenerateError> {
        let plan = match (head, &self.logits) {
            (Head::Logits, Some(p)) => p,
            _ => &self.plan,
        };
        Ok(plan.run(&step_inputs(model, tokens, positions, pad))?)
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
        self.prefill_with(Head::Ids, model, tokens, positions, pad)
    }

    /// [`Generator::prefill_step`] ending in `head`.
    fn prefill_with(
        &self,
        head: Head,
        model: &Value,
        tokens: Vec<u32>,
        positions: Vec<u32>,
        pad: Vec<u32>,
    ) -> Result<Value, GenerateError> {
        let batch = pad.len().max(1);
        let cfg = &self.checkpoint.config;
        let row_bytes = 4 * cfg.intermediate_size.max(cfg.hidden_size).max(1);
        let cols = (PREFILL_ACTIVATION_BYTES / row_bytes / batch).max(1);
        self.chunked(head, model, tokens, positions, pad, cols)
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
        self.chunked(Head::Ids, model, tokens, positions, pad, cols)
    }

    fn chunked(
        &self,
        head: Head,
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
            self.step_with(head, model, tokens, positions, pad)?
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
                let (t, p) = (pick(&tokens), pick(&positions));
                if c1 == width {
                    last = Some(self.step_with(head, model, t, p, pad.clone())?);
                } else {
                    // Only the last chunk's output is read: the others run for what they leave
                    // in the caches alone, without the output head (and the last layer's work
                    // past its attention).
                    self.plan
                        .run_for_effects(&step_inputs(model, t, p, pad.clone()))?;
                }
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
        on_step: impl FnMut(usize),
    ) -> Result<Vec<Generated>, GenerateError> {
        let controls: Vec<Control<'_>> = prompts
            .iter()
            .map(|_| Control {
                max_new: settings.max_new_tokens,
                ..Control::default()
            })
            .collect();
        self.generate_with(prompts, settings, &controls, on_step)
    }

    /// Continue every prompt of one batch, each as its [`Control`] says: its own cap on new
    /// tokens, sampled or greedy, with or without stop strings. A batch with a sampled sequence
    /// runs the `logits` entry and picks every sequence's token from its row (greedy rows by the
    /// same first-maximum rule as `argmax`); an all-greedy batch runs `main`.
    pub fn generate_with(
        &self,
        prompts: &[Vec<u32>],
        settings: &Settings,
        controls: &[Control<'_>],
        mut on_step: impl FnMut(usize),
    ) -> Result<Vec<Generated>, GenerateError> {
        let batch = prompts.len();
        if batch == 0 {
            return Ok(Vec::new());
        }
        let max_new = |b: usize| {
            controls
                .get(b)
                .map_or(settings.max_new_tokens, |c| c.max_new)
                .min(settings.max_new_tokens)
                .max(1)
        };
        let steps = (0..batch).map(max_new).max().unwrap_or(1);
        let head = if controls.iter().any(|c| c.sampler.is_some()) {
            if self.logits.is_none() {
                return Err(GenerateError::Inputs(
                    "a sequence samples but the engine's `logits` entry was not compiled".into(),
                ));
            }
            Head::Logits
        } else {
            Head::Ids
        };
        let (tokens, positions, pads) = self.left_pad(prompts)?;
        let width = tokens.len() / batch;
        let model = self.fresh_model(batch, width + steps)?;
        let mut out: Vec<Generated> = (0..batch)
            .map(|_| Generated {
                tokens: Vec::new(),
                finish: Finish::Length,
            })
            .collect();
        let mut running = vec![true; batch];
        let mut next_pos: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
        let mut next = self.prefill_with(head, &model, tokens, positions, pads.clone())?;
        let vocab = self.checkpoint.config.vocab_size;
        for step in 0..steps {
            let ids = self.pick(&next, head, batch, vocab, &running, controls, step)?;
            for b in 0..batch {
                if running[b] {
                    out[b].tokens.push(ids[b]);
                    let stop_string = controls
                        .get(b)
                        .and_then(|c| c.stop.as_ref())
                        .is_some_and(|s| s.hit(&out[b].tokens));
                    if settings.stop_ids.contains(&ids[b]) || stop_string {
                        out[b].finish = Finish::Stop;
                        running[b] = false;
                    } else if out[b].tokens.len() >= max_new(b) {
                        running[b] = false;
                    }
                }
            }
            let alive = running.iter().filter(|r| **r).count();
            on_step(alive);
            if alive == 0 || step + 1 == steps {
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
            next = self.step_with(head, &model, feed, pos, pads.clone())?;
        }
        Ok(out)
    }

    /// Each sequence's next token from a step's output: the ids `main` returned, or picked
    /// from the `[batch, vocab]` logits.
    #[allow(clippy::too_many_arguments)]
    fn pick(
        &self,
        output: &Value,
        head: Head,
        batch: usize,
        vocab: usize,
        running: &[bool],
        controls: &[Control<'_>],
        step: usize,
    ) -> Result<Vec<u32>, GenerateError> {
        let wrong = |other: &Value| GenerateError::Output {
            found: other.kind().into(),
            batch,
        };
        match (head, output) {
            (Head::Ids, Value::Ids(ids)) if ids.len() == batch => Ok(ids.to_vec()),
            (Head::Logits, Value::Tensor(t)) if t.shape() == [batch, vocab] && vocab > 0 => {
                let rows = t.data();
                let pick_row = |b: usize| {
                    if !running[b] {
                        return 0;
                    }
                    let row = &rows[b * vocab..(b + 1) * vocab];
                    match controls.get(b).and_then(|c| c.sampler.as_ref()) {
                        Some(s) => s.pick(row, step as u64),
                        None => argmax_row(row),
                    }
                };
                // Rows are independent (a sampler reads only its own row and stream), so the
                // split across threads cannot change a token.
                Ok(
                    map_ranges(batch, 1, 1, 1, |r| r.map(pick_row).collect::<Vec<u32>>())
                        .into_iter()
                        .flat_map(|(_, ids)| ids)
                        .collect(),
                )
            }
            (_, other) => Err(wrong(other)),
        }
    }
}

/// The entry sampled sequences are drawn from.
pub const LOGITS_ENTRY: &str = "logits";

/// Which entry a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// `main`: one id per sequence.
    Ids,
    /// `logits`: one row of logits per sequence.
    Logits,
}
