//! The fuzz target `schema_and_tools`: JSON schemas, Lark grammars and tool
//! definitions compiled and followed for a few tokens; model answers parsed
//! for tool calls and reasoning in every tool format.

use ats_core::chat::tools::{ToolChoice, ToolFormat, ToolSpec};
use ats_core::grammar::{GrammarSpec, Grammars};
use ats_core::tokenizer::Tokenizer;

use super::{Target, err, llama_tokenizer, words};

/// The server's schema and tool fields as far as a library reaches them
/// (the request checks themselves, `check_chat` and the data-URL decoder,
/// are private to the `ats-cli` binary and fuzzed by its own unit test,
/// `serve::fuzz`). The first byte picks what the rest is:
///
/// - 0: a `response_format` JSON schema, compiled against the llama
///   vocabulary and followed for a few tokens (mask, then the first allowed
///   token);
/// - 1: a Lark grammar, the same way;
/// - 2: a tool's `parameters` schema, turned into the call grammar of each
///   tool format (harmony, Hermes, Llama 3, generic) and compiled;
/// - 3: a model's answer, read back for calls in each tool format.
pub struct SchemaAndTools {
    tok: Tokenizer,
    grammars: Grammars,
}

impl SchemaAndTools {
    fn follow(&self, spec: &GrammarSpec) -> Result<String, String> {
        let mut c = self.grammars.compile(spec).map_err(err)?;
        let mut logits = vec![0f32; self.tok.vocab_size()];
        for step in 0..4 {
            if c.is_finished() {
                return Ok(format!("finished at {step}"));
            }
            logits.fill(0.0);
            c.mask(&mut logits).map_err(err)?;
            let Some(next) = logits.iter().position(|l| l.is_finite()) else {
                return Ok(format!("no token at {step}"));
            };
            c.accept(next as u32).map_err(err)?;
        }
        Ok("followed".into())
    }

    fn tool(parameters: serde_json::Value) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: "the weather".into(),
            parameters,
        }]
    }
}

const FORMATS: [ToolFormat; 5] = [
    ToolFormat::Harmony,
    ToolFormat::Hermes,
    ToolFormat::Glm,
    ToolFormat::Llama3,
    ToolFormat::Generic,
];

/// A `<think>` split of `text`, whole and streamed in pieces of 3 bytes
/// (at char boundaries), which must agree.
fn think_split_agrees(text: &str, open: bool) -> (String, String) {
    use ats_core::chat::harmony::Part;
    use ats_core::chat::think::{ThinkSplitter, split};
    let whole = split(text, open);
    let mut s = ThinkSplitter::new(open);
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(3);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        pieces.extend(s.push(&rest[..cut]));
        rest = &rest[cut..];
    }
    pieces.extend(s.finish());
    let mut streamed = (String::new(), String::new());
    for (p, t) in pieces {
        match p {
            Part::Reasoning => streamed.0.push_str(&t),
            Part::Content => streamed.1.push_str(&t),
        }
    }
    assert_eq!(streamed, whole, "{text:?} (open: {open})");
    whole
}

impl Target for SchemaAndTools {
    const NAME: &'static str = "schema_and_tools";
    const MAX_LEN: usize = 4096;

    fn new() -> Self {
        let tok = llama_tokenizer();
        let grammars = Grammars::new(&tok).unwrap();
        SchemaAndTools { tok, grammars }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let schema = br#"{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}}, "required": ["name"], "additionalProperties": false}"#;
        let params = br#"{"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}"#;
        let with = |mode: u8, b: &[u8]| [&[mode][..], b].concat();
        vec![
            with(0, schema),
            with(0, br##"{"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^[a-z]+$"}], "$defs": {"x": {"$ref": "#/$defs/x"}}}"##),
            with(1, b"start: \"yes\" | \"no\" | num\nnum: /[0-9]+/\n"),
            with(1, b"start: \"<tool_call>\" \"\\n\" call \"\\n\" \"</tool_call>\"\ncall: %json {\"type\": \"object\"}\n"),
            with(2, params),
            with(3, b"<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"),
            with(3, br#"{"name": "weather", "parameters": {"city": "Oslo"}}"#),
            with(3, br#"{"tool_call": {"name": "weather", "arguments": {}}}"#),
            with(3, b"<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"),
            with(3, b"<think>Oslo.</think>\n<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"),
        ]
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "\"type\"",
            "\"object\"",
            "\"string\"",
            "\"integer\"",
            "\"array\"",
            "\"properties\"",
            "\"required\"",
            "\"items\"",
            "\"enum\"",
            "\"const\"",
            "\"anyOf\"",
            "\"oneOf\"",
            "\"allOf\"",
            "\"$ref\"",
            "\"#/$defs/x\"",
            "\"pattern\"",
            "\"minLength\"",
            "\"maxItems\"",
            "\"additionalProperties\"",
            "%json",
            "start:",
            "/[a-z]*/",
            "<tool_call>",
            "</tool_call>",
            "\"name\"",
            "\"arguments\"",
            "\"parameters\"",
            "\"tool_call\"",
            "<|channel|>",
            "<|message|>",
            "<|end|>",
            "<|start|>",
            " to=functions.weather",
            "<think>",
            "</think>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "99999999999",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let (mode, rest) = b.split_first().ok_or("empty")?;
        match mode % 4 {
            0 => {
                let schema: serde_json::Value = serde_json::from_slice(rest).map_err(err)?;
                self.follow(&GrammarSpec::JsonSchema(schema))
            }
            1 => self.follow(&GrammarSpec::Lark(
                String::from_utf8_lossy(rest).into_owned(),
            )),
            2 => {
                let params: serde_json::Value = serde_json::from_slice(rest).map_err(err)?;
                let tools = Self::tool(params);
                let mut out = String::new();
                for f in FORMATS {
                    if let Some(g) = f.grammar(&tools, &ToolChoice::Required, &self.tok) {
                        out.push_str(&match self.grammars.compile(&g) {
                            Ok(_) => "ok ".to_string(),
                            Err(e) => err(e),
                        });
                    }
                }
                Ok(out)
            }
            _ => {
                let text = String::from_utf8_lossy(rest);
                let tools = Self::tool(serde_json::json!({"type": "object"}));
                let mut calls = 0;
                for f in FORMATS {
                    let a = f.parse(&text, &tools);
                    // only declared tools count, and arguments are objects
                    assert!(a.calls.iter().all(|c| c.name == "weather"), "{a:?}");
                    assert!(a.calls.iter().all(|c| c.arguments.is_object()), "{a:?}");
                    calls += a.calls.len();
                }
                let (reasoning, _) = think_split_agrees(&text, false);
                think_split_agrees(&text, true);
                let think = if reasoning.is_empty() {
                    ""
                } else {
                    ", reasoning"
                };
                Ok(format!("{} calls{think}", calls.min(4)))
            }
        }
    }
}
