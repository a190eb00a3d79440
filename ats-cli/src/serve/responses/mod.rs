//! `POST /v1/responses`, OpenAI's Responses API (what Codex CLI and newer
//! agents speak), served statelessly: the request's `input` (a string, or
//! message, function-call and function-call-output items with text and image
//! parts) and `instructions` become a chat conversation, checked and
//! rendered exactly as `/v1/chat/completions` does; the answer comes back as
//! output items (a message, function calls), whole or as the Responses
//! stream of named events. Nothing is stored, so `previous_response_id` is
//! refused by name.

mod as_chat;
mod events;

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::serve::errors::ApiError;
use crate::serve::params::Defaults;
use crate::serve::prompt::{PreparedChat, Prompter};
use crate::serve::queue::Finished;
use crate::serve::request::check_chat;
use crate::serve::routes::{
    App, Stage, finish, prepared, read_body, respond, sse_events, submit, unix_now,
};
use crate::serve::tools::{read_answer, wire_calls};
use as_chat::{Echo, as_chat, renamed};
use events::{EventStream, call_item, message_item, reasoning_item};

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
    let mut stream = EventStream::new(head, tools, reading);
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
                let cut = crate::serve::routes::finish_reason(&f.stop) == "length";
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
