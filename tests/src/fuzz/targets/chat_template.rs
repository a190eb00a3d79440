//! The fuzz target `chat_template`: hostile Jinja templates rendered over
//! fixed messages, within the renderer's fuel and output limits.

use ats_core::chat::{CHATML_TEMPLATE, ChatLimits, ChatMessage, ChatTemplate, ContentPart};
use ats_core::gguf::GgufFile;

use super::{Target, err, words};
use crate::{fixtures, repo_fixtures};

/// gpt-oss's own chat template, from the gpt-oss fixture.
fn gpt_oss_template() -> Vec<u8> {
    let path = repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf");
    let f = GgufFile::open(path).unwrap();
    let t = f.metadata.get_str("tokenizer.chat_template").unwrap();
    t.as_bytes().to_vec()
}

/// Hostile templates: loops, huge repeats, deep recursion, garbage. Every
/// render ends within the fuel and the output cap, with a typed error or text.
pub struct ChatTemplateTarget {
    limits: ChatLimits,
    msgs: Vec<ChatMessage>,
}

impl Target for ChatTemplateTarget {
    const NAME: &'static str = "chat_template";
    const MAX_LEN: usize = 4096;

    fn new() -> Self {
        ChatTemplateTarget {
            limits: ChatLimits {
                fuel: 100_000,
                max_output_bytes: 1 << 16,
            },
            msgs: vec![
                ChatMessage::text("system", "be brief"),
                ChatMessage::new(
                    "user",
                    vec![ContentPart::Image, ContentPart::Text("what is it?".into())],
                ),
                ChatMessage::text("assistant", "a cat"),
            ],
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        vec![
            std::fs::read(fixtures().join("tokenizer/chat_template.jinja")).unwrap(),
            CHATML_TEMPLATE.as_bytes().to_vec(),
            // gpt-oss's harmony template (macros, namespaces, tool rendering)
            gpt_oss_template(),
            b"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
                .to_vec(),
            b"{{ 'ab' * 100000000 }}".to_vec(),
            b"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}".to_vec(),
            b"{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
                .to_vec(),
            b"{{ messages | tojson }}{{ raise_exception('no') }}{{ strftime_now('%Y') }}".to_vec(),
            b"{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}".to_vec(),
            b"{{ messages[0].content.strip().split('x') | join(',') }}{{ bos_token * 99999 }}"
                .to_vec(),
        ]
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "{%",
            "%}",
            "{{",
            "}}",
            "{#",
            "#}",
            " for x in ",
            " endfor ",
            "range(99999999)",
            " * 99999999",
            " ~ ",
            "loop.cycle(",
            "recursive",
            "macro",
            "endmacro",
            "|tojson",
            "|join",
            "messages",
            "[0]",
            ".items()",
            "namespace(",
            "set ",
            "if ",
            "endif",
            "raise_exception(",
            "strftime_now(",
            "'",
            "\"",
            "(",
            ")",
            "[",
            "]",
            "-",
            "+",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let src = String::from_utf8_lossy(b);
        let t = ChatTemplate::new(src, "<s>", "</s>")
            .map_err(err)?
            .with_limits(self.limits);
        let out = t.render(&self.msgs, true).map_err(err)?;
        assert!(out.len() <= self.limits.max_output_bytes);
        Ok(String::new())
    }
}
