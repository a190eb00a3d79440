//! `POST /v1/responses`, OpenAI's Responses API (what Codex CLI and newer
//! agents speak), served statelessly: the request's `input` (a string, or
//! message, function-call and function-call-output items with text and image
//! parts) and `instructions` become a chat conversation, checked and
//! rendered exactly as `/v1/chat/completions` does; the answer comes back as
//! output items (a message, function calls), whole or as the Responses
//! stream of named events. Nothing is stored, so `previous_response_id` is
//! refused by name.

use std::sync::Arc;

use ats_core::chat::harmony::Part;
use ats_core::chat::reasoning::{Reading, Splitter};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::errors::ApiError;
use super::params::Defaults;
use super::prompt::{PreparedChat, Prompter};
use super::queue::Finished;
use super::request::check_chat;
use super::routes::{
    App, Stage, finish, prepared, read_body, respond, sse_events, submit, unix_now,
};
use super::tools::{ToolStream, read_answer, splitter, wire_calls};
use super::wire::WireToolCall;

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

/// The handler.
pub async fn responses(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    respond(answer(app, headers, body).await)
}

async fn answer(app: Arc<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&app, &headers, body).await?;
    let (prepared_chat, echo) = prepared(&app, body, prepare).await?;
    let PreparedChat {
        prompt,
        params,
        tools,
        reading,
        ..
    } = prepared_chat;
    let (id, prompt_tokens, rx) = submit(&app, "resp", prompt, params)?;
    let head = Head {
        id,
        created_at: unix_now(),
        model: app.model.clone(),
        echo,
        prompt_tokens,
        prompter: app.prompter.clone(),
    };
    if !head.echo.stream {
        let f = finish(rx).await?;
        let a = read_answer(&f.text, tools.as_ref(), reading);
        let calls = wire_calls(&a);
        let mut output = Vec::new();
        if !a.reasoning.is_empty() {
            output.push(reasoning_item(
                &head.reasoning_id(),
                &a.reasoning,
                "completed",
            ));
        }
        if calls.is_empty() || !a.content.is_empty() {
            output.push(message_item(&head.msg_id(), &a.content, "completed"));
        }
        output.extend(calls.iter().map(call_item));
        let reasoning_tokens = head.tokens_of(&a.reasoning);
        return Ok(Json(head.response(Some((&f, reasoning_tokens)), output)).into_response());
    }
    let splitter = splitter(tools.as_ref(), reading);
    let mut stream = EventStream {
        head,
        seq: 0,
        items: Vec::new(),
        calls: tools.map(|(format, specs)| (ToolStream::new(format), specs)),
        splitter,
        reading,
    };
    let frames = move |stage: Stage<'_>| stream.frames(stage);
    Ok(sse_events(rx, frames, None).into_response())
}

/// A Responses body as a chat checked and rendered as
/// `/v1/chat/completions` does, and what the response repeats.
fn prepare(body: &[u8], d: &Defaults, p: &Prompter) -> Result<(PreparedChat, Echo), ApiError> {
    let (chat, echo) = as_chat(body)?;
    let check = check_chat(chat.to_string().as_bytes(), d).map_err(renamed)?;
    Ok((p.prepare_chat(check).map_err(renamed)?, echo))
}

/// [`prepare`] without the echo: what `check.rs` runs.
pub(super) fn check(body: &[u8], d: &Defaults, p: &Prompter) -> Result<PreparedChat, ApiError> {
    prepare(body, d, p).map(|(c, _)| c)
}

/// What the request asked for that the response object repeats.
#[derive(Debug, Clone, Default)]
struct Echo {
    stream: bool,
    instructions: Option<String>,
    max_output_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    text: Value,
    tools: Value,
    tool_choice: Value,
    /// The reasoning effort asked for, if any.
    effort: Option<String>,
}

/// The response's fixed parts.
struct Head {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    prompt_tokens: usize,
    /// The model's tokenizer (reasoning tokens are counted with it).
    prompter: Arc<Prompter>,
}

impl Head {
    fn msg_id(&self) -> String {
        format!("msg_{}", self.id)
    }

    fn reasoning_id(&self) -> String {
        format!("rs_{}", self.id)
    }

    /// Tokens of generated text, counted by tokenizing it again (the
    /// answer's own tokens are not kept apart by channel).
    fn tokens_of(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        let tok = self.prompter.tokenizer();
        tok.encode(text, false, false).map_or(0, |ids| ids.len())
    }

    /// The response object: in progress (no `f`) or finished, with how
    /// many of its tokens were reasoning.
    fn response(&self, f: Option<(&Finished, usize)>, output: Vec<Value>) -> Value {
        let e = &self.echo;
        let (status, incomplete, usage) = match f {
            None => ("in_progress", Value::Null, Value::Null),
            Some((f, reasoning_tokens)) => {
                let cut = super::routes::finish_reason(&f.stop) == "length";
                (
                    if cut { "incomplete" } else { "completed" },
                    if cut {
                        json!({"reason": "max_output_tokens"})
                    } else {
                        Value::Null
                    },
                    json!({
                        "input_tokens": self.prompt_tokens,
                        "input_tokens_details": {"cached_tokens": f.timings.cached_tokens},
                        "output_tokens": f.completion_tokens,
                        "output_tokens_details": {"reasoning_tokens": reasoning_tokens.min(f.completion_tokens)},
                        "total_tokens": self.prompt_tokens + f.completion_tokens,
                    }),
                )
            }
        };
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": e.instructions,
            "max_output_tokens": e.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": false,
            "previous_response_id": null,
            "reasoning": {"effort": e.effort, "summary": null},
            "store": false,
            "temperature": e.temperature,
            "text": e.text,
            "tool_choice": e.tool_choice,
            "tools": e.tools,
            "top_p": e.top_p,
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        })
    }
}

/// A streamed response: the named events of the Responses API, numbered.
struct EventStream {
    head: Head,
    seq: u64,
    /// The items opened so far, in output order (a harmony answer's
    /// reasoning and its message, each opened with its first text).
    items: Vec<OpenItem>,
    /// The tool-call stream, when tools are in play.
    calls: Option<(ToolStream, Vec<ats_core::chat::tools::ToolSpec>)>,
    /// Splits an answer into reasoning and message text.
    splitter: Option<Splitter>,
    /// How the answer sets its reasoning apart.
    reading: Reading,
}

/// An item of text being streamed: the reasoning or the message.
struct OpenItem {
    part: Part,
    text: String,
}

impl EventStream {
    fn frames(&mut self, stage: Stage<'_>) -> Vec<Event> {
        self.events(stage)
            .into_iter()
            .map(|v| {
                let kind = v["type"].as_str().unwrap_or_default().to_string();
                Event::default().event(kind).data(v.to_string())
            })
            .collect()
    }

    /// The events of a stage, as their data (each names its `type`).
    fn events(&mut self, stage: Stage<'_>) -> Vec<Value> {
        match stage {
            Stage::Start => {
                let r = self.head.response(None, Vec::new());
                vec![
                    self.event("response.created", json!({"response": r.clone()})),
                    self.event("response.in_progress", json!({"response": r})),
                ]
            }
            Stage::Text(t, _) => match self.splitter.as_mut() {
                Some(h) => {
                    let parts = h.push(t);
                    self.parts(parts)
                }
                None => {
                    let shown = match &mut self.calls {
                        Some((s, _)) => s.push(t),
                        None => t.to_string(),
                    };
                    self.delta(Part::Content, &shown)
                }
            },
            Stage::End(f) => self.end(f),
        }
    }

    /// Reasoning and message pieces as deltas; after a `<think>` block the
    /// message goes through the tool stream (harmony's splitter never shows
    /// its calls).
    fn parts(&mut self, parts: Vec<(Part, String)>) -> Vec<Value> {
        let think = matches!(self.splitter, Some(Splitter::Think(_)));
        let mut out = Vec::new();
        for (part, t) in parts {
            let t = match (&mut self.calls, part) {
                (Some((s, _)), Part::Content) if think => s.push(&t),
                _ => t,
            };
            out.extend(self.delta(part, &t));
        }
        out
    }

    /// Text for the reasoning or message item (opened with its first text).
    fn delta(&mut self, part: Part, shown: &str) -> Vec<Value> {
        if shown.is_empty() {
            return Vec::new();
        }
        let (index, mut out) = self.open(part);
        self.items[index].text.push_str(shown);
        let kind = match part {
            Part::Reasoning => "response.reasoning_text.delta",
            Part::Content => "response.output_text.delta",
        };
        let mut data = json!({"item_id": self.item_id(part), "output_index": index,
            "content_index": 0, "delta": shown});
        if part == Part::Content {
            data["logprobs"] = json!([]);
        }
        out.push(self.event(kind, data));
        out
    }

    /// The item of `part`'s index, and the events that opened it if it was
    /// not open yet.
    fn open(&mut self, part: Part) -> (usize, Vec<Value>) {
        if let Some(i) = self.items.iter().position(|it| it.part == part) {
            return (i, Vec::new());
        }
        let index = self.items.len();
        self.items.push(OpenItem {
            part,
            text: String::new(),
        });
        let id = self.item_id(part);
        let item = match part {
            Part::Reasoning => reasoning_item(&id, "", "in_progress"),
            Part::Content => message_item(&id, "", "in_progress"),
        };
        let added = self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        let part_added = self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "part": part_value(part, "")}),
        );
        (index, vec![added, part_added])
    }

    /// The events that close open item `index`, and the item.
    fn close(&mut self, index: usize) -> (Vec<Value>, Value) {
        let (part, text) = (self.items[index].part, self.items[index].text.clone());
        let id = self.item_id(part);
        let mut done =
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text});
        let (kind, item) = match part {
            Part::Reasoning => (
                "response.reasoning_text.done",
                reasoning_item(&id, &text, "completed"),
            ),
            Part::Content => {
                done["logprobs"] = json!([]);
                (
                    "response.output_text.done",
                    message_item(&id, &text, "completed"),
                )
            }
        };
        let events = vec![
            self.event(kind, done),
            self.event(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": part_value(part, &text)}),
            ),
            self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": item.clone()}),
            ),
        ];
        (events, item)
    }

    fn end(&mut self, f: &Finished) -> Vec<Value> {
        let mut out = match self.splitter.as_mut() {
            Some(h) => {
                let rest = h.finish();
                self.parts(rest)
            }
            None => Vec::new(),
        };
        let mut calls: Vec<WireToolCall> = Vec::new();
        if let Some((s, specs)) = self.calls.take() {
            // the tool stream saw the content after any <think> block
            let whole = match self.splitter {
                Some(Splitter::Think(_)) => self.reading.split(&f.text).1,
                _ => f.text.clone(),
            };
            let (rest, answer) = s.finish(&whole, &specs);
            out.extend(self.delta(Part::Content, &rest));
            calls = wire_calls(&answer);
        }
        let mut output = Vec::new();
        for index in 0..self.items.len() {
            let (events, item) = self.close(index);
            out.extend(events);
            output.push(item);
        }
        for c in &calls {
            let item = call_item(c);
            let index = output.len();
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            out.push(self.event(
                "response.function_call_arguments.done",
                json!({"item_id": item["id"], "output_index": index, "arguments": c.function.arguments}),
            ));
            out.push(self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ));
            output.push(item);
        }
        let reasoning = self
            .items
            .iter()
            .find(|it| it.part == Part::Reasoning)
            .map_or(0, |it| self.head.tokens_of(&it.text));
        let r = self.head.response(Some((f, reasoning)), output);
        let kind = if r["status"] == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        out.push(self.event(kind, json!({"response": r})));
        out
    }

    fn item_id(&self, part: Part) -> String {
        match part {
            Part::Reasoning => self.head.reasoning_id(),
            Part::Content => self.head.msg_id(),
        }
    }

    /// One named event's data, with its type and sequence number.
    fn event(&mut self, kind: &str, mut data: Value) -> Value {
        data["type"] = kind.into();
        data["sequence_number"] = self.seq.into();
        self.seq += 1;
        data
    }
}

/// A content part of the message (`output_text`) or of the reasoning
/// (`reasoning_text`).
fn part_value(part: Part, text: &str) -> Value {
    match part {
        Part::Reasoning => json!({"type": "reasoning_text", "text": text}),
        Part::Content => text_part(text),
    }
}

/// The answer's reasoning item (harmony's `analysis` channel), its text as
/// a `reasoning_text` part, as OpenAI serves its open-weight models.
fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        vec![part_value(Part::Reasoning, text)]
    } else {
        Vec::new()
    };
    json!({"type": "reasoning", "id": id, "status": status, "summary": [], "content": content})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The answer's message item.
fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        vec![text_part(text)]
    } else {
        Vec::new()
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

/// A function call item.
fn call_item(c: &WireToolCall) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{}", c.id),
        "call_id": c.id,
        "name": c.function.name,
        "arguments": c.function.arguments,
        "status": "completed",
    })
}

/// Errors of the chat check name chat fields; here they are the input's.
fn renamed(mut e: ApiError) -> ApiError {
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
fn as_chat(body: &[u8]) -> Result<(Value, Echo), ApiError> {
    let req: ResponsesRequest = super::request::parse_object(body)?;
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

    /// A head for the gpt-oss fixture's vocabulary (harmony's tokens).
    fn harmony_head() -> Head {
        let path = ats_tests::repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf");
        let gguf = ats_core::gguf::GgufFile::open(&path).expect("the gpt-oss fixture");
        let tok = ats_core::Tokenizer::from_gguf(&gguf.metadata).expect("its tokenizer");
        let template = ats_core::ChatTemplate::from_gguf(&gguf.metadata).map_err(|e| e.to_string());
        Head {
            id: "resp_1".into(),
            created_at: 0,
            model: "gpt-oss".into(),
            echo: Echo::default(),
            prompt_tokens: 3,
            prompter: Arc::new(Prompter::new(tok, template, 256, None)),
        }
    }

    /// Every event of `answer` streamed through `s` in pieces of `size` bytes.
    fn all_events(s: &mut EventStream, answer: &str, size: usize) -> Vec<Value> {
        let mut events = s.events(Stage::Start);
        for piece in answer.as_bytes().chunks(size) {
            events.extend(s.events(Stage::Text(std::str::from_utf8(piece).unwrap(), &[])));
        }
        let f = Finished {
            text: answer.into(),
            stop: ats_sched::session::StopReason::Eog,
            completion_tokens: 20,
            held_back_bytes: 0,
            logprobs: Vec::new(),
            timings: Default::default(),
            vision: None,
        };
        events.extend(s.events(Stage::End(&f)));
        events
    }

    #[test]
    fn a_streamed_harmony_answer_has_a_reasoning_item_then_its_message() {
        const ANSWER: &str = "<|channel|>analysis<|message|>They ask for 2+2.<|end|>\
            <|start|>assistant<|channel|>final<|message|>It is 4.";
        let mut s = EventStream {
            head: harmony_head(),
            seq: 0,
            items: Vec::new(),
            calls: None,
            splitter: Some(Splitter::Harmony(Default::default())),
            reading: Reading {
                format: ats_core::chat::reasoning::ReasoningFormat::Harmony,
                open: false,
            },
        };
        let events = all_events(&mut s, ANSWER, 6);
        let deltas = |kind: &str, index: u64| -> String {
            events
                .iter()
                .filter(|e| e["type"] == kind && e["output_index"] == index)
                .filter_map(|e| e["delta"].as_str())
                .collect()
        };
        assert_eq!(
            deltas("response.reasoning_text.delta", 0),
            "They ask for 2+2."
        );
        assert_eq!(deltas("response.output_text.delta", 1), "It is 4.");
        let seq: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, (0..events.len() as u64).collect::<Vec<_>>());
        let done = events.last().unwrap();
        assert_eq!(done["type"], "response.completed");
        let out = &done["response"]["output"];
        assert_eq!(out[0]["type"], "reasoning");
        assert_eq!(
            out[0]["content"][0],
            json!({"type": "reasoning_text", "text": "They ask for 2+2."})
        );
        assert_eq!(out[1]["content"][0]["text"], "It is 4.");
        let rt = done["response"]["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64();
        assert!((1..20).contains(&rt.unwrap()), "{rt:?}");
    }

    /// A GLM-style answer that thinks in a block the prompt opened, then
    /// calls a tool: a reasoning item, the message before the call, and the
    /// call as a `function_call` item (its markup never streamed as text).
    #[test]
    fn a_streamed_think_block_and_glm_call_are_reasoning_message_and_call_items() {
        use ats_core::chat::reasoning::ReasoningFormat;
        use ats_core::chat::tools::{ToolFormat, ToolSpec};
        const ANSWER: &str = "Weather, then.</think>\nChecking.\n<tool_call>weather\n\
            <arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>";
        let reading = Reading {
            format: ReasoningFormat::Think,
            open: true,
        };
        let spec = ToolSpec {
            name: "weather".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        };
        let mut s = EventStream {
            head: harmony_head(),
            seq: 0,
            items: Vec::new(),
            calls: Some((ToolStream::new(ToolFormat::Glm), vec![spec])),
            splitter: reading.splitter(),
            reading,
        };
        let events = all_events(&mut s, ANSWER, 5);
        let deltas = |kind: &str| -> String {
            events
                .iter()
                .filter(|e| e["type"] == kind)
                .filter_map(|e| e["delta"].as_str())
                .collect()
        };
        assert_eq!(deltas("response.reasoning_text.delta"), "Weather, then.");
        assert_eq!(deltas("response.output_text.delta"), "Checking.\n");
        let out = &events.last().unwrap()["response"]["output"];
        let kinds: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["reasoning", "message", "function_call"]);
        assert_eq!(out[2]["arguments"], "{\"city\":\"Oslo\"}");
    }
}
