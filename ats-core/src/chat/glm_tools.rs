//! GLM-4.5's tool calls: `<tool_call>NAME` then, per argument,
//! `<arg_key>KEY</arg_key>` and `<arg_value>VALUE</arg_value>` on their own
//! lines, then `</tool_call>`. A value is the string itself where the
//! tool's schema says the argument is a string, else JSON (the template
//! writes non-strings with `tojson`); the model reads and writes them so.

use serde_json::{Map, Value};

use super::tools::{ParsedCall, ToolAnswer, ToolSpec, call_blocks, compact, literal};
use crate::grammar::GrammarSpec;
use crate::tokenizer::{TokenType, Tokenizer};

/// The call block's markers (the opening one is Hermes's too).
pub(super) const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const KEY_OPEN: &str = "<arg_key>";
const KEY_CLOSE: &str = "</arg_key>";
const VALUE_OPEN: &str = "<arg_value>";
const VALUE_CLOSE: &str = "</arg_value>";

/// Whether a template writes calls in this format.
pub(super) fn speaks(template_source: &str) -> bool {
    template_source.contains(KEY_OPEN) && template_source.contains(OPEN)
}

/// The calls in `text` (the last block may be cut off) and the text around
/// them; a block that names no declared tool or is malformed stays text.
pub(super) fn parse(text: &str, tools: &[ToolSpec]) -> ToolAnswer {
    call_blocks(text, CLOSE, |inner| call(inner, tools))
}

/// One block's call: the name up to the first line end or argument, then
/// key/value pairs separated by whitespace only.
fn call(inner: &str, tools: &[ToolSpec]) -> Option<ParsedCall> {
    let name_end = [inner.find('\n'), inner.find(KEY_OPEN)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(inner.len());
    let name = inner[..name_end].trim();
    let tool = tools.iter().find(|t| t.name == name)?;
    let mut rest = &inner[name_end..];
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (key, after) = between(rest, KEY_OPEN, KEY_CLOSE)?;
        let (value, after) = between(after.trim_start(), VALUE_OPEN, VALUE_CLOSE)?;
        // by name, not a JSON pointer: a key may hold '/' or '~'
        let schema = tool.parameters.get("properties").and_then(|p| p.get(key));
        let v = typed(value, schema);
        args.insert(key.to_string(), v);
        rest = after;
    }
    Some(ParsedCall {
        name: tool.name.clone(),
        arguments: Value::Object(args),
    })
}

/// The text between `open` (which `s` must start with) and `close`, and
/// what follows `close`.
fn between<'a>(s: &'a str, open: &str, close: &str) -> Option<(&'a str, &'a str)> {
    let body = s.strip_prefix(open)?;
    let end = body.find(close)?;
    Some((&body[..end], &body[end + close.len()..]))
}

/// A value as its argument's schema wants it: a string as written, anything
/// else as JSON (text that is no JSON stays a string).
fn typed(value: &str, schema: Option<&Value>) -> Value {
    if schema.is_some_and(is_string) {
        return Value::String(value.to_string());
    }
    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()))
}

/// Whether a schema's only type is `string`.
fn is_string(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.len() == 1 && ts[0] == "string",
        _ => false,
    }
}

/// A call to one of `chosen` in this format: the name, each required
/// argument in the schema's order, then each optional one or not, with
/// string values as text (not crossing a marker) and others as JSON of
/// their schema. The model may write its `<think>` block first.
pub(super) fn grammar(chosen: &[&ToolSpec], tok: &Tokenizer) -> GrammarSpec {
    let lit = |s: &str| literal(s, tok);
    let (think_open, think_close) = (lit("<think>"), lit("</think>"));
    let names: Vec<String> = (0..chosen.len()).map(|i| format!("call_{i}")).collect();
    let mut g = format!(
        "start: \"\\n\"? think? {} call {}\n\
         think: {think_open} TEXT? {think_close} \"\\n\"?\n\
         call: {}\n\
         TEXT: {}\n",
        lit(OPEN),
        lit(CLOSE),
        names.join(" | "),
        text_lexeme(tok),
    );
    let (ko, kc, vo, vc) = (
        lit(KEY_OPEN),
        lit(KEY_CLOSE),
        lit(VALUE_OPEN),
        lit(VALUE_CLOSE),
    );
    for (i, t) in chosen.iter().enumerate() {
        let props = t.parameters.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = t
            .parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut seq = vec![Value::String(format!("{}\n", t.name)).to_string()];
        for (j, (key, schema)) in props.into_iter().flatten().enumerate() {
            let rule = format!("arg_{i}_{j}");
            let value = if is_string(schema) {
                "TEXT?".to_string()
            } else {
                format!("value_{i}_{j}")
            };
            g.push_str(&format!(
                "{rule}: {ko} {} {kc} \"\\n\" {vo} {value} {vc} \"\\n\"\n",
                Value::String(key.clone())
            ));
            if !is_string(schema) {
                g.push_str(&format!(
                    "value_{i}_{j}: %json {}\n",
                    compact(schema.clone())
                ));
            }
            let optional = if required.contains(&key.as_str()) {
                ""
            } else {
                "?"
            };
            seq.push(format!("{rule}{optional}"));
        }
        g.push_str(&format!("call_{i}: {}\n", seq.join(" ")));
    }
    GrammarSpec::Lark(g)
}

/// Free text inside a call: anything where the markers are control tokens
/// (text cannot spell them), else text without `<` (which could begin one).
fn text_lexeme(tok: &Tokenizer) -> &'static str {
    let control = [
        OPEN,
        CLOSE,
        KEY_OPEN,
        KEY_CLOSE,
        VALUE_OPEN,
        VALUE_CLOSE,
        "</think>",
    ]
    .iter()
    .all(|m| {
        tok.token_id(m)
            .is_some_and(|id| tok.token_type(id) == Some(TokenType::Control))
    });
    if control { "/(?s:.+)/" } else { "/[^<]+/" }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tools::tests::follows;
    use super::super::tools::{ToolChoice, ToolFormat};
    use super::*;
    use crate::chat::{ChatMessage, ChatTemplate, TemplateVars, ToolCall};

    /// GLM-4.5's way with tools, cut short: tools listed in a system turn,
    /// calls as `<tool_call>` blocks of key/value pairs, non-strings as JSON.
    const GLM: &str = "[gMASK]<sop>{% if tools %}<|system|>\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}\
{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\
{% for tc in m.tool_calls %}\n<tool_call>{{ tc.function.name }}\n{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v if v is string else v | tojson }}</arg_value>\n{% endfor %}</tool_call>{% endfor %}{% endfor %}\
{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

    fn weather() -> ToolSpec {
        ToolSpec {
            name: "weather".into(),
            description: "The forecast".into(),
            parameters: json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "units": {"enum": ["C", "F"]}
            }, "required": ["city", "days"]}),
        }
    }

    fn template() -> ChatTemplate {
        ChatTemplate::new(GLM, "", "").unwrap()
    }

    #[test]
    fn calls_are_read_with_strings_as_written_and_the_rest_as_json() {
        assert_eq!(ToolFormat::detect(&template()), ToolFormat::Glm);
        let text = "Let me look.\n<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>3 Rivers</arg_value>\n\
                    <arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>units</arg_key>\n<arg_value>\"C\"</arg_value>\n</tool_call>";
        let a = ToolFormat::Glm.parse(text, &[weather()]);
        assert_eq!(a.content, "Let me look.");
        assert_eq!(a.calls.len(), 1);
        assert_eq!(
            a.calls[0].arguments,
            json!({"city": "3 Rivers", "days": 3, "units": "C"})
        );
        // an undeclared tool, a key without its end, stray text between pairs: text
        for bad in [
            "<tool_call>time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>",
            "<tool_call>weather\n<arg_key>city\n<arg_value>Oslo</arg_value>\n</tool_call>",
            "<tool_call>weather\nso <arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
        ] {
            let a = ToolFormat::Glm.parse(bad, &[weather()]);
            assert_eq!((a.calls.len(), a.content.as_str()), (0, bad));
        }
        // a key with a '/' is read by its own schema (a string stays one)
        let slashed = ToolSpec {
            parameters: json!({"type": "object", "properties": {"a/b": {"type": "string"}}}),
            ..weather()
        };
        let text =
            "<tool_call>weather\n<arg_key>a/b</arg_key>\n<arg_value>7</arg_value>\n</tool_call>";
        let a = ToolFormat::Glm.parse(text, &[slashed]);
        assert_eq!(a.calls[0].arguments, json!({"a/b": "7"}));
        // a call cut off at the end still counts; no arguments is an empty object
        let a = ToolFormat::Glm.parse("<tool_call>weather\n", &[weather()]);
        assert_eq!(a.calls[0].arguments, json!({}));
    }

    #[test]
    fn a_call_the_template_renders_reads_back_as_the_same_call() {
        let args = json!({"city": "Oslo", "days": 2, "units": "F"});
        let mut answer = ChatMessage::text("assistant", "");
        answer.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: args.clone(),
        }];
        let vars = TemplateVars {
            tools: vec![json!({"type": "function", "function": {"name": "weather"}})],
            ..Default::default()
        };
        let text = template()
            .render_with(&[ChatMessage::text("user", "Rain?"), answer], &vars, false)
            .unwrap();
        let turn = &text[text.find("<|assistant|>").unwrap() + "<|assistant|>".len()..];
        let a = ToolFormat::Glm.parse(turn, &[weather()]);
        assert_eq!(a.calls.len(), 1, "{text}");
        assert_eq!(a.calls[0].arguments, args);
    }

    #[test]
    fn a_required_call_names_a_declared_tool_with_its_required_arguments() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/glm4/glm4-f32.gguf");
        let f = crate::gguf::GgufFile::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(&f.metadata).unwrap();
        let g = crate::grammar::Grammars::new(&tok).unwrap();
        let town = ToolSpec {
            name: "town".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"name": {"type": "string"}}}),
        };
        let tools = [weather(), town];
        let required = ToolFormat::Glm
            .grammar(&tools, &ToolChoice::Required, &tok)
            .unwrap();
        let named = ToolFormat::Glm
            .grammar(&tools, &ToolChoice::Named("town".into()), &tok)
            .unwrap();
        let pair =
            |k: &str, v: &str| format!("<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n");
        let call = |name: &str, pairs: &[String]| {
            format!("<tool_call>{name}\n{}</tool_call>", pairs.concat())
        };
        let rain = call("weather", &[pair("city", "Oslo"), pair("days", "2")]);
        assert!(follows(&g, &tok, &required, &rain));
        let think = format!("\n<think>Oslo, then.</think>\n{rain}");
        assert!(follows(&g, &tok, &required, &think));
        let with_units = call(
            "weather",
            &[
                pair("city", "Oslo"),
                pair("days", "2"),
                pair("units", "\"F\""),
            ],
        );
        assert!(follows(&g, &tok, &required, &with_units));
        assert!(!follows(&g, &tok, &named, &rain), "the named tool only");
        assert!(follows(
            &g,
            &tok,
            &named,
            &call("town", &[pair("name", "Bergen")])
        ));
        assert!(
            follows(&g, &tok, &named, &call("town", &[])),
            "name is optional"
        );
        for bad in [
            call("weather", &[pair("city", "Oslo")]),
            call("weather", &[pair("city", "Oslo"), pair("days", "two")]),
            call(
                "weather",
                &[
                    pair("city", "Oslo"),
                    pair("days", "2"),
                    pair("units", "\"K\""),
                ],
            ),
            "It rains.".to_string(),
        ] {
            assert!(!follows(&g, &tok, &required, &bad), "{bad}");
        }
        // what the grammar makes, the parser reads
        assert_eq!(ToolFormat::Glm.parse(&think, &tools).calls.len(), 1);
    }
}
