//! A Responses request as a chat completions body: `input` items as
//! messages, the flat tools and `text.format` in chat's form, and what the
//! response object repeats.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::serve::errors::ApiError;

/// The fields of a Responses request read here; the sampling fields
/// (`temperature`, `top_p`, `stream`, ...) are read by the chat check.
#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    /// A string, or a list of input items.
    input: Value,
    /// A system message put first.
    instructions: Option<String>,
    /// Most tokens of the answer.
    max_output_tokens: Option<u64>,
    /// A stored response to continue (none is stored here).
    previous_response_id: Option<String>,
    /// A stored conversation (none is stored here).
    conversation: Option<Value>,
    /// Run in the background (not served: answers come on the request).
    background: Option<bool>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    text: Option<Value>,
    /// Function tools, in the Responses' flat form.
    tools: Option<Vec<Value>>,
    /// `auto`, `none`, `required` or `{"type": "function", "name": ...}`.
    tool_choice: Option<Value>,
    /// Stream named events.
    stream: Option<bool>,
    /// `{"effort": "low" | "medium" | "high"}`: chat's `reasoning_effort`.
    reasoning: Option<Value>,
}

/// What the request asked for that the response object repeats.
#[derive(Debug, Clone, Default)]
pub(super) struct Echo {
    pub(super) stream: bool,
    pub(super) instructions: Option<String>,
    pub(super) max_output_tokens: Option<u64>,
    pub(super) temperature: Option<f64>,
    pub(super) top_p: Option<f64>,
    pub(super) text: Value,
    pub(super) tools: Value,
    pub(super) tool_choice: Value,
    /// The reasoning effort asked for, if any.
    pub(super) effort: Option<String>,
}

/// Errors of the chat check name chat fields; here they are the input's.
pub(super) fn renamed(mut e: ApiError) -> ApiError {
    if let Some(p) = &e.param {
        let p = p
            .replacen("messages", "input", 1)
            .replacen("max_completion_tokens", "max_output_tokens", 1)
            .replacen("response_format", "text.format", 1)
            .replacen("reasoning_effort", "reasoning.effort", 1);
        e.param = Some(p);
    }
    e
}

/// The request as a chat completions body (the fields both share kept as
/// they are), and what the response repeats.
pub(super) fn as_chat(body: &[u8]) -> Result<(Value, Echo), ApiError> {
    let req: ResponsesRequest = crate::serve::request::parse_object(body)?;
    refuse_stored(&req)?;
    let mut chat: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
    for k in [
        "input",
        "instructions",
        "max_output_tokens",
        "text",
        "tools",
        "tool_choice",
        "store",
        "metadata",
        "reasoning",
        "truncation",
        "include",
        "parallel_tool_calls",
        "prompt_cache_key",
        "service_tier",
    ] {
        chat.remove(k);
    }
    let mut messages = Vec::new();
    if let Some(i) = &req.instructions {
        messages.push(json!({"role": "system", "content": i}));
    }
    messages.extend(input_messages(&req.input)?);
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(n) = req.max_output_tokens {
        chat.insert("max_completion_tokens".into(), n.into());
    }
    if let Some(f) = req.text.as_ref().and_then(|t| t.get("format")) {
        chat.insert("response_format".into(), response_format(f)?);
    }
    if let Some(tools) = &req.tools {
        let t = tools
            .iter()
            .enumerate()
            .map(|(i, t)| chat_tool(i, t))
            .collect::<Result<Vec<_>, _>>()?;
        chat.insert("tools".into(), Value::Array(t));
    }
    if let Some(c) = &req.tool_choice {
        chat.insert("tool_choice".into(), chat_tool_choice(c));
    }
    let effort = match req.reasoning.as_ref().map(|r| r.get("effort")) {
        None | Some(None | Some(Value::Null)) => None,
        Some(Some(Value::String(e))) => Some(e.clone()),
        Some(Some(_)) => {
            return Err(ApiError::bad_param(
                "reasoning.effort",
                "reasoning.effort must be a string (low, medium, high)",
            ));
        }
    };
    if let Some(e) = &effort {
        chat.insert("reasoning_effort".into(), e.clone().into());
    }
    let echo = Echo {
        stream: req.stream.unwrap_or(false),
        instructions: req.instructions.clone(),
        max_output_tokens: req.max_output_tokens,
        temperature: chat.get("temperature").and_then(Value::as_f64),
        top_p: chat.get("top_p").and_then(Value::as_f64),
        text: req
            .text
            .clone()
            .unwrap_or(json!({"format": {"type": "text"}})),
        tools: Value::Array(req.tools.clone().unwrap_or_default()),
        tool_choice: req.tool_choice.clone().unwrap_or(json!("auto")),
        effort,
    };
    Ok((Value::Object(chat), echo))
}

/// Refuses what would need stored state.
fn refuse_stored(req: &ResponsesRequest) -> Result<(), ApiError> {
    if req.previous_response_id.is_some() {
        return Err(ApiError::unsupported(
            "previous_response_id",
            "this server stores no responses (it is stateless): send the whole conversation in input",
        ));
    }
    if req.conversation.is_some() {
        return Err(ApiError::unsupported(
            "conversation",
            "this server stores no conversations: send the whole conversation in input",
        ));
    }
    if req.background == Some(true) {
        return Err(ApiError::unsupported(
            "background",
            "background responses are not served: the answer comes on the request",
        ));
    }
    Ok(())
}

/// `input` as chat messages.
fn input_messages(input: &Value) -> Result<Vec<Value>, ApiError> {
    match input {
        Value::String(s) => Ok(vec![json!({"role": "user", "content": s})]),
        Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::with_capacity(items.len());
            // a reasoning item belongs to the assistant turn after it
            let mut reasoning: Option<String> = None;
            for (i, item) in items.iter().enumerate() {
                if item.get("type").and_then(Value::as_str) == Some("reasoning") {
                    reasoning = Some(reasoning_text(item)).filter(|r| !r.is_empty());
                    continue;
                }
                let mut m = input_item(i, item)?;
                match reasoning.take() {
                    Some(r) if m["role"] == "assistant" => m["reasoning_content"] = r.into(),
                    _ => {}
                }
                out.push(m);
            }
            Ok(out)
        }
        _ => Err(ApiError::bad_param(
            "input",
            "input must be a string or a non-empty list of input items",
        )),
    }
}

/// The text of a reasoning item: its `reasoning_text` parts, else its
/// summary's text (an item holding only another server's
/// `encrypted_content` has none, and adds nothing to the prompt).
fn reasoning_text(item: &Value) -> String {
    let texts = |key: &str| -> String {
        item.get(key)
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    let content = texts("content");
    if content.is_empty() {
        texts("summary")
    } else {
        content
    }
}

/// One input item as a chat message.
fn input_item(i: usize, item: &Value) -> Result<Value, ApiError> {
    let param = format!("input[{i}]");
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "message" => {
            let role = item.get("role").cloned().unwrap_or(Value::Null);
            let content = match item.get("content") {
                Some(Value::Array(parts)) => Value::Array(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(j, p)| content_part(&format!("{param}.content[{j}]"), p))
                        .collect::<Result<_, _>>()?,
                ),
                Some(c) => c.clone(),
                None => Value::Null,
            };
            Ok(json!({"role": role, "content": content}))
        }
        "function_call" => {
            let field = |k: &str| {
                item.get(k).and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_param(
                        format!("{param}.{k}"),
                        format!("a function_call needs a string {k}"),
                    )
                })
            };
            Ok(
                json!({"role": "assistant", "content": null, "tool_calls": [{
                    "id": field("call_id")?, "type": "function",
                    "function": {"name": field("name")?, "arguments": field("arguments")?},
                }]}),
            )
        }
        "function_call_output" => {
            let call_id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_param(
                    format!("{param}.call_id"),
                    "a function_call_output needs a string call_id",
                )
            })?;
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            Ok(json!({"role": "tool", "tool_call_id": call_id, "content": output}))
        }
        other => Err(ApiError::unsupported(
            format!("{param}.type"),
            format!(
                "input items of type {other:?} are not served (message, reasoning, function_call, function_call_output)"
            ),
        )),
    }
}

/// A Responses content part as a chat content part.
fn content_part(param: &str, p: &Value) -> Result<Value, ApiError> {
    let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "input_text" | "output_text" | "text" => Ok(json!({"type": "text", "text": p.get("text")})),
        "input_image" => {
            let url = p.get("image_url").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_param(
                    format!("{param}.image_url"),
                    "an input_image needs image_url, a base64 data URL (file_id is not served)",
                )
            })?;
            let mut image = json!({"url": url});
            if let Some(d) = p.get("detail") {
                image["detail"] = d.clone();
            }
            Ok(json!({"type": "image_url", "image_url": image}))
        }
        other => Err(ApiError::unsupported(
            format!("{param}.type"),
            format!(
                "content parts of type {other:?} are not served (input_text, input_image, output_text)"
            ),
        )),
    }
}

/// `text.format` as a chat `response_format`.
fn response_format(f: &Value) -> Result<Value, ApiError> {
    Ok(match f.get("type").and_then(Value::as_str) {
        Some("json_schema") => json!({"type": "json_schema", "json_schema": {
            "name": f.get("name"), "schema": f.get("schema"), "strict": f.get("strict"),
        }}),
        Some(kind) => json!({"type": kind}),
        None => {
            return Err(ApiError::bad_param(
                "text.format.type",
                "text.format needs a type (text, json_object, json_schema)",
            ));
        }
    })
}

/// A flat Responses function tool as a chat tool.
fn chat_tool(i: usize, t: &Value) -> Result<Value, ApiError> {
    match t.get("type").and_then(Value::as_str) {
        Some("function") => Ok(json!({"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description"),
            "parameters": t.get("parameters"), "strict": t.get("strict"),
        }})),
        other => Err(ApiError::unsupported(
            format!("tools[{i}].type"),
            format!("tools of type {other:?} are not served (function)"),
        )),
    }
}

/// `{"type": "function", "name": ...}` as chat's nested form.
fn chat_tool_choice(c: &Value) -> Value {
    match c.get("name") {
        Some(name) => json!({"type": "function", "function": {"name": name}}),
        None => c.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<Value, ApiError> {
        as_chat(body.to_string().as_bytes()).map(|(c, _)| c)
    }

    #[test]
    fn input_items_become_messages() {
        let c = chat(json!({
            "model": "m", "instructions": "be brief", "max_output_tokens": 5, "temperature": 0,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ],
        }))
        .unwrap();
        let m = &c["messages"];
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1]["content"][1]["image_url"]["detail"], "low");
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"})
        );
        assert_eq!(c["max_completion_tokens"], 5);
        assert_eq!(c["temperature"], 0);
        assert!(c.get("input").is_none() && c.get("instructions").is_none());
    }

    #[test]
    fn reasoning_items_go_with_the_assistant_turn_after_them() {
        let c = chat(json!({"input": [
            {"role": "user", "content": "weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": [],
                "content": [{"type": "reasoning_text", "text": "Need the tool."}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Say it."}]},
            {"role": "assistant", "content": "Sunny."},
            {"type": "reasoning", "encrypted_content": "gAAA"},
            {"role": "user", "content": "thanks"},
        ]}))
        .unwrap();
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(m[1]["reasoning_content"], "Need the tool.");
        assert_eq!(m[3]["reasoning_content"], "Say it.");
        // reasoning with no readable text, or before a user turn, adds nothing
        assert!(m[4].get("reasoning_content").is_none());
    }

    #[test]
    fn reasoning_effort_is_chats_and_echoed() {
        let (c, echo) = as_chat(
            json!({"input": "hi", "reasoning": {"effort": "high", "summary": "auto"}})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(c["reasoning_effort"], "high");
        assert!(c.get("reasoning").is_none());
        assert_eq!(echo.effort.as_deref(), Some("high"));
        let e = chat(json!({"input": "hi", "reasoning": {"effort": 3}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("reasoning.effort"));
    }

    #[test]
    fn stored_state_is_refused_by_name() {
        let e = chat(json!({"input": "hi", "previous_response_id": "resp_1"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("previous_response_id"));
        let e = chat(json!({"input": [{"type": "web_search_call"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].type"));
        let e = chat(json!({"input": []})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
    }

    #[test]
    fn tools_and_formats_take_the_chat_form() {
        let c = chat(json!({"input": "x",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}}}))
        .unwrap();
        assert_eq!(c["tools"][0]["function"]["name"], "f");
        assert_eq!(c["tool_choice"]["function"]["name"], "f");
        assert_eq!(
            c["response_format"]["json_schema"]["schema"]["type"],
            "object"
        );
    }
}
