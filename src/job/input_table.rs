//! The admitted inputs, packed: every input's id, prompt ids, line, endpoint and settings in a
//! few flat arrays, so a job of 100,000 inputs costs about 70 bytes an input beyond its prompt
//! ids, where one struct and vector per input cost about 300 (docs/scale-out.md, "Long jobs").

use super::inputs::Input;
use super::openai::Endpoint;
use super::request::Options;

/// The settings of an input that gives none of its own.
static NO_OPTIONS: Options = Options {
    max_tokens: None,
    temperature: None,
    top_p: None,
    top_k: None,
    seed: None,
    stop: Vec::new(),
};

/// Admitted inputs in file order; [`InputTable::get`] reads one back.
#[derive(Default)]
pub struct InputTable {
    /// Every id's bytes, one after another.
    ids: String,
    /// Where each id ends in `ids`.
    id_ends: Vec<usize>,
    /// Every prompt's token ids (template applied), one after another.
    tokens: Vec<u32>,
    /// Where each prompt ends in `tokens`.
    token_ends: Vec<usize>,
    lines: Vec<usize>,
    endpoints: Vec<Option<Endpoint>>,
    /// The settings of the inputs that give any, by index, in order (most give none).
    options: Vec<(usize, Options)>,
}

/// One admitted input, as the run reads it.
#[derive(Debug, Clone, Copy)]
pub struct InputRef<'a> {
    /// The caller's id (`id`, or `custom_id`), echoed in the output.
    pub id: &'a str,
    /// Its prompt as token ids, template applied.
    pub prompt: &'a [u32],
    /// Its 1-based line in the inputs file.
    pub line: usize,
    /// The endpoint of an OpenAI batch line; `None` in the runner's format.
    pub endpoint: Option<Endpoint>,
    /// The request's own settings.
    pub options: &'a Options,
}

impl InputTable {
    /// Append `input`, whose prompt (already taken out) is `prompt`.
    pub fn push(&mut self, input: Input, prompt: &[u32]) {
        let index = self.lines.len();
        self.ids.push_str(&input.id);
        self.id_ends.push(self.ids.len());
        self.tokens.extend_from_slice(prompt);
        self.token_ends.push(self.tokens.len());
        self.lines.push(input.line);
        self.endpoints.push(input.endpoint);
        if input.options != NO_OPTIONS {
            self.options.push((index, input.options));
        }
    }

    /// How many inputs.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Input `index` (0-based, in file order); `None` past the end.
    pub fn get(&self, index: usize) -> Option<InputRef<'_>> {
        let line = *self.lines.get(index)?;
        let start = |ends: &[usize]| match index {
            0 => 0,
            i => ends.get(i - 1).copied().unwrap_or(0),
        };
        let id = self
            .ids
            .get(start(&self.id_ends)..*self.id_ends.get(index)?)?;
        let prompt = self
            .tokens
            .get(start(&self.token_ends)..*self.token_ends.get(index)?)?;
        let options = self
            .options
            .binary_search_by_key(&index, |(i, _)| *i)
            .ok()
            .and_then(|at| self.options.get(at))
            .map_or(&NO_OPTIONS, |(_, o)| o);
        Some(InputRef {
            id,
            prompt,
            line,
            endpoint: self.endpoints.get(index).copied().flatten(),
            options,
        })
    }

    /// The inputs of `range`, in order (clamped to the table).
    pub fn range(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = InputRef<'_>> {
        range.filter_map(|i| self.get(i))
    }

    /// Release the slack the arrays grew with, once the last input is in.
    pub fn shrink_to_fit(&mut self) {
        self.ids.shrink_to_fit();
        self.id_ends.shrink_to_fit();
        self.tokens.shrink_to_fit();
        self.token_ends.shrink_to_fit();
        self.lines.shrink_to_fit();
        self.endpoints.shrink_to_fit();
        self.options.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::request::Prompt;

    fn input(id: &str, line: usize, endpoint: Option<Endpoint>, options: Options) -> Input {
        Input {
            id: id.into(),
            prompt: Prompt::Tokens(Vec::new()),
            line,
            endpoint,
            options,
        }
    }

    #[test]
    fn every_input_reads_back_as_it_was_pushed() {
        let mut table = InputTable::default();
        let seeded = Options {
            seed: Some(7),
            stop: vec!["\n\n".into()],
            ..Options::default()
        };
        table.push(input("a", 1, None, Options::default()), &[2, 5, 6]);
        table.push(input("", 3, Some(Endpoint::Chat), seeded.clone()), &[]);
        table.push(
            input("ünï", 4, Some(Endpoint::Completions), Options::default()),
            &[9],
        );
        table.shrink_to_fit();
        assert_eq!(table.len(), 3);
        let got: Vec<_> = table
            .range(0..3)
            .map(|r| {
                (
                    r.id,
                    r.prompt.to_vec(),
                    r.line,
                    r.endpoint,
                    r.options.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", vec![2, 5, 6], 1, None, Options::default()),
                ("", vec![], 3, Some(Endpoint::Chat), seeded),
                (
                    "ünï",
                    vec![9],
                    4,
                    Some(Endpoint::Completions),
                    Options::default()
                ),
            ]
        );
        assert!(table.get(3).is_none());
        assert_eq!(table.range(2..9).count(), 1);
    }
}
