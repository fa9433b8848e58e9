//! How `exec` shows a job's progress on stderr: a bar when stderr is a terminal, else a plain
//! line at a steady interval (for logs), and nothing with `--quiet`. Counts and speed only,
//! never anything from the data.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::job::run::Progress;

/// The display of a job's progress.
pub enum Bar {
    /// A terminal's bar.
    Drawn(ProgressBar),
    /// Lines for a log, at most one per `every`.
    Lines {
        /// The interval.
        every: Duration,
        /// When the last line was printed.
        last: std::cell::Cell<Option<Instant>>,
    },
    /// Nothing.
    Quiet,
}

impl Bar {
    /// The display for this stderr: nothing when `quiet`, a bar on a terminal, else a line at
    /// most every `every`.
    pub fn new(quiet: bool, every: Duration) -> Bar {
        if quiet {
            return Bar::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return Bar::Lines {
                every,
                last: std::cell::Cell::new(None),
            };
        }
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {pos}/{len} inputs  {msg}  eta {eta}")
        {
            bar.set_style(style);
        }
        Bar::Drawn(bar)
    }

    /// Show `p`.
    pub fn update(&self, p: &Progress) {
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        let rate = p.generated_tokens as f64 / secs;
        let resumed = match p.resumed_from {
            Some(n) => format!("resumed at input {n} of {}; ", p.inputs_total),
            None => String::new(),
        };
        match self {
            Bar::Drawn(bar) => {
                bar.set_length(p.inputs_total as u64);
                bar.set_position(p.inputs_done as u64);
                bar.set_message(format!("{resumed}{rate:.1} tokens/s"));
            }
            Bar::Lines { every, last } => {
                let now = Instant::now();
                let due = last.get().is_none_or(|t| now.duration_since(t) >= *every);
                if due || p.inputs_done == p.inputs_total {
                    last.set(Some(now));
                    eprintln!(
                        "progress: {}/{} inputs, {} tokens, {rate:.1} tokens/s, {:.1} s{}",
                        p.inputs_done,
                        p.inputs_total,
                        p.generated_tokens,
                        secs,
                        if resumed.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", resumed.trim_end_matches("; "))
                        }
                    );
                }
            }
            Bar::Quiet => {}
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Bar::Drawn(bar) = self {
            bar.finish_and_clear();
        }
    }
}
