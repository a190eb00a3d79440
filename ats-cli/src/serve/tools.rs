//! OpenAI's tools in a chat request and answer: the request's `tools` and
//! `tool_choice` checked, conversations rendered for models whose template
//! knows no tools (the generic format), calls read back out of the answer
//! (whole, or as the stream goes) into `tool_calls`.

use ats_core::chat::harmony;
use ats_core::chat::reasoning::{Reading, ReasoningFormat, Splitter};
use ats_core::chat::tools::{ParsedCall, ToolAnswer, ToolChoice, ToolFormat, ToolSpec};
use ats_core::chat::tools::{generic_call_text, generic_system_prompt};
use ats_core::chat::{ChatMessage, ContentPart};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::wire::{FunctionCall, Tool, ToolCallDelta, WireToolCall};

/// The tools a request offers and what it asks of them.
#[derive(Debug, Clone)]
pub struct ToolRequest {
    /// The functions.
    pub specs: Vec<ToolSpec>,
    /// Whether a call is optional, required, or of one function.
    pub choice: ToolChoice,
}

/// The request's tools, or None when no tool is in play (none offered, or
/// `tool_choice: "none"`).
pub fn check_tools(
    tools: Option<&[Tool]>,
    choice: Option<&Value>,
) -> Result<Option<ToolRequest>, ApiError> {
    let tools = tools.unwrap_or_default();
    let choice = match choice {
        None => ToolChoice::Auto,
        Some(Value::String(s)) if s == "none" => return Ok(None),
        Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
        Some(Value::String(s)) if s == "required" => ToolChoice::Required,
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) if v.get("type").and_then(Value::as_str) == Some("function") => {
                ToolChoice::Named(name.to_string())
            }
            _ => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ));
            }
        },
    };
    if tools.is_empty() {
        if choice == ToolChoice::Auto {
            return Ok(None);
        }
        return Err(ApiError::bad_param(
            "tool_choice",
            "tool_choice asks for a call but the request has no tools",
        ));
    }
    let specs = tools
        .iter()
        .enumerate()
        .map(|(i, t)| spec(i, t))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|o| o.name == s.name) {
            return Err(ApiError::bad_param(
                format!("tools[{i}].function.name"),
                format!("two tools are named {:?}", s.name),
            ));
        }
    }
    if let ToolChoice::Named(n) = &choice
        && !specs.iter().any(|s| &s.name == n)
    {
        return Err(ApiError::bad_param(
            "tool_choice",
            format!("tool_choice names {n:?}, which is not among the tools"),
        ));
    }
    Ok(Some(ToolRequest { specs, choice }))
}

/// One tool as a function spec.
fn spec(i: usize, t: &Tool) -> Result<ToolSpec, ApiError> {
    if t.kind != "function" {
        return Err(ApiError::unsupported(
            format!("tools[{i}].type"),
            format!("tools of type {:?} are not served (function)", t.kind),
        ));
    }
    let f = t.function.as_ref().ok_or_else(|| {
        ApiError::bad_param(
            format!("tools[{i}].function"),
            "a function tool needs \"function\"",
        )
    })?;
    let ok_name = !f.name.is_empty()
        && f.name.len() <= 64
        && f.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok_name {
        return Err(ApiError::bad_param(
            format!("tools[{i}].function.name"),
            format!(
                "{:?}: a function name is 1 to 64 letters, digits, _ or -",
                f.name
            ),
        ));
    }
    let parameters = match &f.parameters {
        None => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(ApiError::bad_param(
                format!("tools[{i}].function.parameters"),
                "parameters must be a JSON schema object",
            ));
        }
    };
    Ok(ToolSpec {
        name: f.name.clone(),
        description: f.description.clone().unwrap_or_default(),
        parameters,
    })
}

impl ToolRequest {
    /// The tools as templates take them (OpenAI's objects).
    pub fn template_tools(&self) -> Vec<Value> {
        self.specs
            .iter()
            .map(|s| {
                json!({"type": "function", "function": {
                    "name": s.name, "description": s.description, "parameters": s.parameters
                }})
            })
            .collect()
    }
}

/// A conversation for a template that knows no tools: past calls become
/// the generic format's JSON, tool answers user messages holding a
/// `tool_response`, and with tools in play a system message describes them
/// (joined to the conversation's own system message, if it has one).
pub fn generic_messages(msgs: Vec<ChatMessage>, tools: Option<&ToolRequest>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = msgs.into_iter().map(generic_message).collect();
    if let Some(t) = tools {
        let prompt = generic_system_prompt(&t.specs);
        match out.first_mut() {
            Some(m) if m.role == "system" => {
                m.content.push(ContentPart::Text(format!("\n\n{prompt}")));
            }
            _ => out.insert(0, ChatMessage::text("system", prompt)),
        }
    }
    out
}

fn generic_message(mut m: ChatMessage) -> ChatMessage {
    if !m.tool_calls.is_empty() {
        let calls: Vec<ParsedCall> = m
            .tool_calls
            .iter()
            .map(|c| ParsedCall {
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        m.content.push(ContentPart::Text(generic_call_text(&calls)));
        m.tool_calls.clear();
    }
    if m.role == "tool" {
        let text: String = m
            .content
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text(t) => Some(t.as_str()),
                ContentPart::Image => None,
            })
            .collect();
        let body = json!({"tool_response": {"tool_call_id": m.tool_call_id, "content": text}});
        return ChatMessage::text("user", body.to_string());
    }
    m
}

/// An answer's content, reasoning and calls: its reasoning set apart as
/// the model writes it (harmony's channels, a `<think>` block), then the
/// rest read for calls in the tools' format when tools are in play.
pub fn read_answer(
    text: &str,
    tools: Option<&(ToolFormat, Vec<ToolSpec>)>,
    reading: Reading,
) -> ToolAnswer {
    match tools {
        // harmony's calls are messages of their own, read with its channels
        Some((format, specs)) if reading.format != ReasoningFormat::Think => {
            format.parse(text, specs)
        }
        Some((format, specs)) => {
            let (reasoning, content) = reading.split(text);
            ToolAnswer {
                reasoning,
                ..format.parse(&content, specs)
            }
        }
        None => {
            let (reasoning, content) = reading.split(text);
            ToolAnswer {
                content,
                reasoning,
                calls: Vec::new(),
            }
        }
    }
}

/// The splitter a stream of this answer goes through, if any: the model's
/// reasoning format, unless tools are in play in another format than
/// harmony's for a harmony model (then the tool stream reads it all).
pub fn splitter(tools: Option<&(ToolFormat, Vec<ToolSpec>)>, reading: Reading) -> Option<Splitter> {
    let harmony_calls = tools.is_none_or(|(f, _)| *f == ToolFormat::Harmony);
    match reading.format {
        ReasoningFormat::Harmony if !harmony_calls => None,
        _ => reading.splitter(),
    }
}

/// An answer's calls on the wire, with fresh ids.
pub fn wire_calls(answer: &ToolAnswer) -> Vec<WireToolCall> {
    answer
        .calls
        .iter()
        .map(|c| WireToolCall {
            id: format!("call_{:016x}", rand::random::<u64>()),
            kind: "function".into(),
            function: FunctionCall {
                name: c.name.clone(),
                arguments: c.arguments.to_string(),
            },
        })
        .collect()
}

/// The calls as stream deltas, each whole.
pub fn call_deltas(calls: Vec<WireToolCall>) -> Vec<ToolCallDelta> {
    calls
        .into_iter()
        .enumerate()
        .map(|(index, c)| ToolCallDelta {
            index,
            id: c.id,
            kind: "function",
            function: c.function,
        })
        .collect()
}

/// Streamed text of an answer that may call tools: text that cannot be
/// part of a call goes out at once, the rest is held until the end, when
/// the whole answer is read for calls.
#[derive(Debug)]
pub struct ToolStream {
    format: ToolFormat,
    /// Text not sent yet.
    held: String,
    /// From here on everything is held (a call began, or may have).
    holding: bool,
}

impl ToolStream {
    /// A stream for answers in `format`.
    pub fn new(format: ToolFormat) -> ToolStream {
        ToolStream {
            format,
            held: String::new(),
            holding: false,
        }
    }

    /// Takes new text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.holding {
            return String::new();
        }
        match self.format.call_marker() {
            Some(marker) => {
                if let Some(at) = self.held.find(marker) {
                    self.holding = true;
                    return self.held.drain(..at).collect();
                }
                // keep what could still begin the marker
                let keep = (1..marker.len())
                    .rev()
                    .find(|&n| self.held.ends_with(&marker[..n]))
                    .unwrap_or(0);
                let cut = self.held.len() - keep;
                self.held.drain(..cut).collect()
            }
            // a call is the whole answer: a JSON object (llama3 may show
            // plain text, known by its first character)
            None => match self.held.trim_start().chars().next() {
                None => String::new(),
                Some('{' | '<') => {
                    self.holding = true;
                    String::new()
                }
                Some(_) if self.format == ToolFormat::Llama3 => std::mem::take(&mut self.held),
                Some(_) => {
                    self.holding = true;
                    String::new()
                }
            },
        }
    }

    /// At the end, given the whole answer: the text still to show and the calls.
    pub fn finish(self, whole: &str, specs: &[ToolSpec]) -> (String, ToolAnswer) {
        let answer = self.format.parse(whole, specs);
        let rest = if self.format == ToolFormat::Harmony {
            // a harmony splitter showed the content; the messages that made
            // no call follow it in the answer's content
            let shown = harmony::split(whole).content.len();
            answer.content.get(shown..).unwrap_or_default().to_string()
        } else if !answer.calls.is_empty() {
            String::new()
        } else if self.format == ToolFormat::Generic {
            // nothing was shown: the response's text is the answer
            answer.content.clone()
        } else {
            self.held
        };
        (rest, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        serde_json::from_value(json!({"type": "function", "function": {"name": name,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}))
        .unwrap()
    }

    #[test]
    fn tools_and_choices_are_checked() {
        let tools = [tool("weather"), tool("time")];
        let ok = |c: Value| check_tools(Some(&tools), Some(&c));
        assert!(ok(json!("none")).unwrap().is_none());
        assert_eq!(ok(json!("auto")).unwrap().unwrap().choice, ToolChoice::Auto);
        assert_eq!(
            ok(json!("required")).unwrap().unwrap().choice,
            ToolChoice::Required
        );
        let named = json!({"type": "function", "function": {"name": "time"}});
        assert_eq!(
            ok(named).unwrap().unwrap().choice,
            ToolChoice::Named("time".into())
        );
        let param = |r: Result<Option<ToolRequest>, ApiError>| r.unwrap_err().param.unwrap();
        assert_eq!(
            param(ok(
                json!({"type": "function", "function": {"name": "nope"}})
            )),
            "tool_choice"
        );
        assert_eq!(param(ok(json!("always"))), "tool_choice");
        assert_eq!(
            param(check_tools(None, Some(&json!("required")))),
            "tool_choice"
        );
        assert!(check_tools(None, None).unwrap().is_none());
        let twice = [tool("a"), tool("a")];
        assert_eq!(
            param(check_tools(Some(&twice), None)),
            "tools[1].function.name"
        );
        assert_eq!(
            param(check_tools(Some(&[tool("a b")]), None)),
            "tools[0].function.name"
        );
        let web: Tool = serde_json::from_value(json!({"type": "web_search"})).unwrap();
        assert_eq!(param(check_tools(Some(&[web]), None)), "tools[0].type");
    }

    #[test]
    fn streamed_text_waits_only_where_a_call_may_begin() {
        let mut s = ToolStream::new(ToolFormat::Hermes);
        let mut shown = s.push("Let me <to");
        assert_eq!(shown, "Let me ");
        shown += &s.push("day> check<tool_");
        assert_eq!(shown, "Let me <today> check");
        shown += &s.push("call>\n{\"name\": \"weather\", \"arguments\": {}}\n</tool_call>");
        assert_eq!(shown, "Let me <today> check");
        let whole = "Let me <today> check<tool_call>\n{\"name\": \"weather\", \"arguments\": {}}\n</tool_call>";
        let specs = [ToolSpec {
            name: "weather".into(),
            description: String::new(),
            parameters: json!({}),
        }];
        let (rest, answer) = s.finish(whole, &specs);
        assert_eq!((rest.as_str(), answer.calls.len()), ("", 1));
        let mut g = ToolStream::new(ToolFormat::Generic);
        assert_eq!(g.push("{\"response\": \"hi\"}"), "");
        assert_eq!(g.finish("{\"response\": \"hi\"}", &specs).0, "hi");
        let mut l = ToolStream::new(ToolFormat::Llama3);
        assert_eq!(l.push(" Hello"), " Hello");
    }
}
