//! Stop strings, as the OpenAI API has them: a sequence ends as soon as its decoded text holds
//! one of them, and the text returned ends just before the first one.
//!
//! Generation checks after every token by decoding only the newest tokens (enough to hold the
//! longest stop string: every token decodes to at least one byte, or to nothing for special
//! tokens, so a window a few tokens longer than the string in bytes always covers it), which
//! keeps the cost per step independent of how long the sequence is.

use crate::model::tokenizer::Tokenizer;

/// The stop strings of one sequence and the tokenizer that decodes its tokens.
#[derive(Clone, Copy)]
pub struct StopStrings<'a> {
    strings: &'a [String],
    tokenizer: &'a Tokenizer,
    window: usize,
}

impl std::fmt::Debug for StopStrings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The strings are part of the private request.
        f.debug_struct("StopStrings")
            .field("count", &self.strings.len())
            .finish_non_exhaustive()
    }
}

/// Tokens decoded for the check beyond the longest string's byte length: room for special
/// tokens (which decode to nothing) inside a match.
const WINDOW_SLACK: usize = 8;

impl<'a> StopStrings<'a> {
    /// The check for `strings` (none empty); `None` when there are none.
    pub fn new(strings: &'a [String], tokenizer: &'a Tokenizer) -> Option<StopStrings<'a>> {
        let longest = strings.iter().map(String::len).max()?;
        Some(StopStrings {
            strings,
            tokenizer,
            window: longest + WINDOW_SLACK,
        })
    }

    /// Whether the text of `generated` holds a stop string that ends in its last token.
    pub fn hit(&self, generated: &[u32]) -> bool {
        let tail = &generated[generated.len().saturating_sub(self.window)..];
        // Undecodable ids cannot be in the vocabulary (admission checked the pairing); such a
        // window cannot match.
        let Ok(text) = self.tokenizer.decode(tail) else {
            return false;
        };
        self.strings.iter().any(|s| text.contains(s.as_str()))
    }
}

/// `text` cut just before the first stop string it holds, and whether one was found.
pub fn cut_at_stop<'t>(text: &'t str, strings: &[String]) -> (&'t str, bool) {
    match strings.iter().filter_map(|s| text.find(s.as_str())).min() {
        Some(at) => (&text[..at], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_before_the_earliest_stop_string() {
        let s = vec!["END".to_owned(), "\n\n".to_owned()];
        assert_eq!(cut_at_stop("one\n\ntwo END", &s), ("one", true));
        assert_eq!(cut_at_stop("one END\n\n", &s), ("one ", true));
        assert_eq!(cut_at_stop("no stop", &s), ("no stop", false));
        assert_eq!(cut_at_stop("", &s), ("", false));
    }
}
