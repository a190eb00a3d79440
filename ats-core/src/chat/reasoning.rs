//! How a model's answers set their reasoning apart from what the user
//! reads, and the one splitter a server streams them through.

use super::ChatTemplate;
use super::harmony::{self, HarmonySplitter, Part};
use super::think::{self, ThinkSplitter};
use crate::Tokenizer;

/// Where a model writes its reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// Nowhere apart: the whole answer is content.
    None,
    /// Harmony's `analysis` channel (gpt-oss).
    Harmony,
    /// A `<think>` block opening the answer (Qwen3, GLM-4.5, DeepSeek-R1).
    Think,
}

impl ReasoningFormat {
    /// The format of a model with this vocabulary and template.
    pub fn of(tok: &Tokenizer, template: Option<&ChatTemplate>) -> ReasoningFormat {
        if harmony::uses_harmony(tok) {
            ReasoningFormat::Harmony
        } else if template.is_some_and(|t| think::uses_think(tok, t.source())) {
            ReasoningFormat::Think
        } else {
            ReasoningFormat::None
        }
    }
}

/// How to read one answer: the model's format and, for `<think>`, whether
/// the prompt left a block open (the answer begins inside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The model's format.
    pub format: ReasoningFormat,
    /// The prompt ended inside a `<think>` block.
    pub open: bool,
}

impl Reading {
    /// The reading of an answer to `prompt_tail` (the prompt's last text).
    pub fn of(format: ReasoningFormat, prompt_tail: &str) -> Reading {
        Reading {
            format,
            open: format == ReasoningFormat::Think && think::prompt_opens(prompt_tail),
        }
    }

    /// A whole answer's reasoning and content (harmony's messages to
    /// recipients, its calls, are in neither).
    pub fn split(&self, text: &str) -> (String, String) {
        match self.format {
            ReasoningFormat::None => (String::new(), text.to_string()),
            ReasoningFormat::Harmony => {
                let a = harmony::split(text);
                (a.reasoning, a.content)
            }
            ReasoningFormat::Think => think::split(text, self.open),
        }
    }

    /// A splitter for a streamed answer, if the format has reasoning.
    pub fn splitter(&self) -> Option<Splitter> {
        match self.format {
            ReasoningFormat::None => None,
            ReasoningFormat::Harmony => Some(Splitter::Harmony(HarmonySplitter::default())),
            ReasoningFormat::Think => Some(Splitter::Think(ThinkSplitter::new(self.open))),
        }
    }
}

/// A streamed answer's splitter into reasoning and content.
#[derive(Clone, Debug)]
pub enum Splitter {
    /// Harmony's channels.
    Harmony(HarmonySplitter),
    /// A `<think>` block.
    Think(ThinkSplitter),
}

impl Splitter {
    /// Takes the next text; returns the pieces now known, in order.
    pub fn push(&mut self, text: &str) -> Vec<(Part, String)> {
        match self {
            Splitter::Harmony(s) => s.push(text),
            Splitter::Think(s) => s.push(text),
        }
    }

    /// The answer ended: what is still held.
    pub fn finish(&mut self) -> Vec<(Part, String)> {
        match self {
            Splitter::Harmony(s) => s.finish(),
            Splitter::Think(s) => s.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufFile, Value};
    use crate::tokenizer::keys;

    /// The tokenizer and template of a repository fixture, with tokens
    /// renamed as `rename` says.
    fn fixture(name: &str, rename: &[(&str, &str)]) -> (Tokenizer, ChatTemplate) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../tests/fixtures/{name}/{name}-f32.gguf"));
        let f = GgufFile::open(&path).unwrap();
        let tokens: Vec<String> = f
            .metadata
            .get_array(keys::TOKENS)
            .unwrap()
            .iter()
            .map(|v| {
                let t = v.as_str().unwrap();
                let to = rename.iter().find(|(from, _)| *from == t);
                to.map_or(t, |(_, to)| to).to_string()
            })
            .collect();
        let mut md = crate::gguf::Metadata::default();
        md.insert(keys::TOKENS.to_string(), Value::strings(&tokens));
        for (k, v) in f.metadata.iter() {
            md.insert(k.to_string(), v.clone());
        }
        let tok = Tokenizer::from_gguf(&md).unwrap();
        (tok, ChatTemplate::from_gguf(&md).unwrap())
    }

    #[test]
    fn the_format_follows_the_vocabulary_and_the_template() {
        let (tok, tmpl) = fixture("gpt-oss", &[]);
        assert_eq!(
            ReasoningFormat::of(&tok, Some(&tmpl)),
            ReasoningFormat::Harmony
        );
        let (tok, tmpl) = fixture("glm4", &[]);
        assert_eq!(
            ReasoningFormat::of(&tok, Some(&tmpl)),
            ReasoningFormat::None
        );
        // GLM-4.5's vocabulary has the tags; its template must write them too
        let tags = [("[sMASK]", "<think>"), ("<eop>", "</think>")];
        let (tok, tmpl) = fixture("glm4", &tags);
        assert_eq!(
            ReasoningFormat::of(&tok, Some(&tmpl)),
            ReasoningFormat::None
        );
        let thinking = ChatTemplate::new(
            format!(
                "{}{{% if add_generation_prompt %}}<think>\n{{% endif %}}",
                tmpl.source()
            ),
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            ReasoningFormat::of(&tok, Some(&thinking)),
            ReasoningFormat::Think
        );
        // its prompt opens the block: the answer begins inside it
        let prompt = thinking
            .render(&[crate::chat::ChatMessage::text("user", "2+2?")], true)
            .unwrap();
        let r = Reading::of(ReasoningFormat::Think, &prompt);
        assert!(r.open, "{prompt:?}");
        assert_eq!(r.split("Sum.</think>\n4."), ("Sum.".into(), "4.".into()));
        assert!(r.splitter().is_some());
        let none = Reading::of(ReasoningFormat::None, &prompt);
        assert!(!none.open && none.splitter().is_none());
    }
}
