//! Answers that reason inside `<think>…</think>` first (Qwen3, GLM-4.5,
//! DeepSeek-R1 and its distillations) split into reasoning and content.
//! The block must open the answer (after whitespace); a template may open it
//! itself at the end of the prompt (Qwen3's and DeepSeek-R1's do), so the
//! answer begins inside it ([`ThinkSplitter::new`]'s `open`). A block never
//! closed is all reasoning; text after `</think>` is content, its leading
//! whitespace dropped. Anything else is content as it is.
//!
//! [`ThinkSplitter`] works on streamed text, holding back only what may be
//! the start of a tag; [`split`] on a whole answer.

use super::harmony::Part;
use crate::Tokenizer;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Whether a model reasons in `<think>` blocks: its vocabulary has both
/// tags as tokens and its template writes them.
pub fn uses_think(tok: &Tokenizer, template_source: &str) -> bool {
    tok.token_id(OPEN).is_some() && tok.token_id(CLOSE).is_some() && template_source.contains(OPEN)
}

/// Whether a rendered prompt leaves a `<think>` block open for the answer.
pub fn prompt_opens(prompt_tail: &str) -> bool {
    let t = prompt_tail.trim_end();
    t.ends_with(OPEN)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: a block may still open.
    Start,
    /// Inside the block.
    Thinking,
    /// Just after `</think>`: whitespace is dropped.
    Closed,
    /// Content from here on.
    Content,
}

/// Splits streamed text into reasoning and content.
#[derive(Clone, Debug)]
pub struct ThinkSplitter {
    state: State,
    /// Text not yet placed: what may be the start of a tag, or leading
    /// whitespace.
    pending: String,
}

impl ThinkSplitter {
    /// A splitter for an answer that begins inside a block (`open`) or not.
    pub fn new(open: bool) -> ThinkSplitter {
        ThinkSplitter {
            state: if open { State::Thinking } else { State::Start },
            pending: String::new(),
        }
    }

    /// Takes the next text; returns the pieces now known, in order.
    pub fn push(&mut self, text: &str) -> Vec<(Part, String)> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The answer ended: what is still held.
    pub fn finish(&mut self) -> Vec<(Part, String)> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        match self.state {
            State::Thinking => emit(Part::Reasoning, rest, &mut out),
            State::Start | State::Content => emit(Part::Content, rest, &mut out),
            State::Closed => {}
        }
        out
    }

    /// One move forward; false when more text is needed.
    fn step(&mut self, out: &mut Vec<(Part, String)>) -> bool {
        match self.state {
            State::Start => {
                let t = self.pending.trim_start();
                if t.starts_with(OPEN) {
                    let cut = self.pending.len() - t.len() + OPEN.len();
                    self.pending.drain(..cut);
                    self.state = State::Thinking;
                    true
                } else if OPEN.starts_with(t) {
                    false // whitespace, or a tag not whole yet
                } else {
                    self.state = State::Content;
                    true
                }
            }
            State::Thinking => {
                if let Some(at) = self.pending.find(CLOSE) {
                    let text: String = self.pending.drain(..at).collect();
                    emit(Part::Reasoning, text, out);
                    self.pending.drain(..CLOSE.len());
                    self.state = State::Closed;
                    return true;
                }
                let keep = partial_suffix(&self.pending, CLOSE);
                let text: String = self.pending.drain(..self.pending.len() - keep).collect();
                emit(Part::Reasoning, text, out);
                false
            }
            State::Closed => {
                let t = self.pending.trim_start();
                if t.is_empty() {
                    self.pending.clear();
                    return false;
                }
                self.pending = t.to_string();
                self.state = State::Content;
                true
            }
            State::Content => {
                emit(Part::Content, std::mem::take(&mut self.pending), out);
                false
            }
        }
    }
}

/// How many trailing bytes of `s` could begin `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| s.ends_with(&tag[..n]))
        .unwrap_or(0)
}

fn emit(part: Part, t: String, out: &mut Vec<(Part, String)>) {
    if t.is_empty() {
        return;
    }
    match out.last_mut() {
        Some((p, s)) if *p == part => s.push_str(&t),
        _ => out.push((part, t)),
    }
}

/// A whole answer's reasoning and content.
pub fn split(text: &str, open: bool) -> (String, String) {
    let mut s = ThinkSplitter::new(open);
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    let (mut reasoning, mut content) = (String::new(), String::new());
    for (part, t) in pieces {
        match part {
            Part::Reasoning => reasoning.push_str(&t),
            Part::Content => content.push_str(&t),
        }
    }
    (reasoning, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` pushed in pieces of `n` bytes (at char boundaries), then finished.
    fn streamed(text: &str, open: bool, n: usize) -> (String, String) {
        let mut s = ThinkSplitter::new(open);
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let mut cut = n.min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            pieces.extend(s.push(&rest[..cut]));
            rest = &rest[cut..];
        }
        pieces.extend(s.finish());
        let mut out = (String::new(), String::new());
        for (p, t) in pieces {
            match p {
                Part::Reasoning => out.0.push_str(&t),
                Part::Content => out.1.push_str(&t),
            }
        }
        out
    }

    #[test]
    fn a_block_at_the_start_is_reasoning_and_the_rest_content() {
        let cases: [(&str, bool, &str, &str); 8] = [
            (
                "<think>\n2+2 is 4.\n</think>\n\nIt is 4.",
                false,
                "\n2+2 is 4.\n",
                "It is 4.",
            ),
            ("  <think>a</think>b", false, "a", "b"),
            // the template opened the block
            ("2+2 is 4.</think>It is 4.", true, "2+2 is 4.", "It is 4."),
            // never closed: all reasoning
            ("<think>still going", false, "still going", ""),
            ("still going </thi", true, "still going </thi", ""),
            // no block, or one later in the answer: all content
            ("It is 4.", false, "", "It is 4."),
            (
                "It is <think>4</think>.",
                false,
                "",
                "It is <think>4</think>.",
            ),
            ("<thinking>x", false, "", "<thinking>x"),
        ];
        for (text, open, reasoning, content) in cases {
            let want = (reasoning.to_string(), content.to_string());
            assert_eq!(split(text, open), want, "{text:?}");
            for n in [1, 2, 3, 5, 64] {
                assert_eq!(streamed(text, open, n), want, "{text:?} in pieces of {n}");
            }
        }
        // whitespace alone, or a tag's beginning alone, is content at the end
        assert_eq!(split(" <thi", false), (String::new(), " <thi".into()));
        assert_eq!(split("é<think>", false), (String::new(), "é<think>".into()));
    }

    #[test]
    fn a_prompt_that_ends_in_an_open_block_is_seen() {
        assert!(prompt_opens("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
        assert!(!prompt_opens("<|im_start|>assistant\n"));
    }
}
