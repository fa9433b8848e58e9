//! The progress bar `exec` draws on stderr while a job runs (only when stderr is a terminal;
//! `--quiet` turns it off). It shows counts and speed, never anything from the data.

use indicatif::{ProgressBar, ProgressStyle};

use crate::job::run::Progress;

/// A bar for a job, drawn as the run reports its progress.
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar, or a hidden one when `quiet`.
    pub fn new(quiet: bool) -> Bar {
        if quiet {
            return Bar(ProgressBar::hidden());
        }
        // indicatif draws only when stderr is a terminal.
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {pos}/{len} inputs  {msg}  eta {eta}")
        {
            bar.set_style(style);
        }
        Bar(bar)
    }

    /// Show `p`.
    pub fn update(&self, p: &Progress) {
        self.0.set_length(p.inputs_total as u64);
        self.0.set_position(p.inputs_done as u64);
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        let resumed = match p.resumed_from {
            Some(n) => format!("resumed at input {n} of {}; ", p.inputs_total),
            None => String::new(),
        };
        self.0.set_message(format!(
            "{resumed}{:.1} tokens/s",
            p.generated_tokens as f64 / secs
        ));
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
