//! `POST /v1/chat/completions`: a checked, rendered conversation run as
//! `n` choices; each answer's tool calls read back in the template's format;
//! whole, or streamed as chunks (text where no call can be, calls as
//! `tool_calls` deltas, log-probabilities with the text they belong to). A
//! harmony answer (gpt-oss) has its `analysis` channel as
//! `reasoning_content`, its `final` channel as `content` and its messages
//! to `functions.NAME` as `tool_calls`; an answer that opens with a
//! `<think>` block (Qwen3, GLM-4.5, DeepSeek-R1) has the block as
//! `reasoning_content`.

use std::sync::{Arc, Mutex};

use ats_core::chat::harmony::Part;
use ats_core::chat::reasoning::{Reading, Splitter};
use ats_core::chat::tools::{ToolFormat, ToolSpec};
use ats_core::sampling::TokenLogprob;
use ats_sched::session::StopReason;
use axum::Json;
use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::choices::{Ended, check_n, finish_all, sse_choices, submit_choices, usage_of};
use super::errors::ApiError;
use super::logprobs;
use super::prompt::{PreparedChat, Prompter};
use super::queue::Finished;
use super::request::check_chat;
use super::routes::{App, Stage, finish_reason, include_usage, prepared, read_body, unix_now};
use super::tools::{ToolStream, call_deltas, read_answer, splitter, wire_calls};
use super::wire::{
    AssistantMessage, ChatChoice, ChatChunk, ChatCompletion, ChatLogprobs, ChunkChoice, Delta,
    TimingsOut,
};

/// The handler's work: checked, prepared, queued, answered.
pub async fn chat(app: Arc<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&app, &headers, body).await?;
    let PreparedChat {
        prompt,
        params,
        sampling,
        tools,
        reading,
    } = prepared(&app, body, |body, d, p| {
        p.prepare_chat(check_chat(body, d)?)
    })
    .await?;
    let n = check_n(sampling.n)?;
    let want_logprobs = params.logprobs.is_some();
    let c = submit_choices(&app, "chatcmpl", prompt, params, n)?;
    let reply = Reply {
        id: c.id,
        created: unix_now(),
        model: app.model.clone(),
        prompter: app.prompter.clone(),
        want_logprobs,
        reading,
    };
    if !sampling.stream.unwrap_or(false) {
        let fs = finish_all(c.rxs).await?;
        let choices = fs
            .iter()
            .enumerate()
            .map(|(i, f)| reply.choice(i, f, tools.as_ref()))
            .collect();
        let all: Vec<&Finished> = fs.iter().collect();
        return Ok(Json(ChatCompletion {
            id: reply.id.clone(),
            object: "chat.completion",
            created: reply.created,
            model: reply.model.clone(),
            choices,
            usage: usage_of(c.prompt_tokens, &all),
            timings: TimingsOut::of(&fs[0]),
        })
        .into_response());
    }
    let reply = Arc::new(reply);
    let ended: Ended = Arc::new(Mutex::new(Vec::new()));
    let streams = c
        .rxs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let mut frames = ChoiceStream::new(reply.clone(), i, tools.clone(), ended.clone());
            (rx, move |s: Stage<'_>| frames.frames(s))
        })
        .collect::<Vec<_>>();
    let usage = include_usage(&sampling);
    let prompt_tokens = c.prompt_tokens;
    let tail = move |done: &[(usize, Finished)]| {
        if !usage || done.is_empty() {
            return Vec::new();
        }
        // the usage chunk has no choices, as in OpenAI's stream
        let all: Vec<&Finished> = done.iter().map(|(_, f)| f).collect();
        let mut last = reply.chunk(0, Delta::default(), None, None, None);
        last["choices"] = serde_json::json!([]);
        last["usage"] = serde_json::json!(usage_of(prompt_tokens, &all));
        vec![last]
    };
    Ok(sse_choices(streams, ended, tail).into_response())
}

/// What every answer of a request shares.
struct Reply {
    id: String,
    created: u64,
    model: String,
    prompter: Arc<Prompter>,
    want_logprobs: bool,
    /// How the answers set their reasoning apart.
    reading: Reading,
}

impl Reply {
    fn logprobs(&self, l: &[TokenLogprob]) -> Option<ChatLogprobs> {
        self.want_logprobs
            .then(|| logprobs::chat(self.prompter.tokenizer(), l))
    }

    /// Choice `index` of a whole answer.
    fn choice(
        &self,
        index: usize,
        f: &Finished,
        tools: Option<&(ToolFormat, Vec<ToolSpec>)>,
    ) -> ChatChoice {
        let a = read_answer(&f.text, tools, self.reading);
        let calls = wire_calls(&a);
        let reasoning = (!a.reasoning.is_empty()).then_some(a.reasoning);
        let content = a.content;
        ChatChoice {
            index,
            finish_reason: chat_finish_reason(&f.stop, !calls.is_empty()),
            message: AssistantMessage {
                role: "assistant",
                content: (calls.is_empty() || !content.is_empty()).then_some(content),
                reasoning_content: reasoning,
                tool_calls: (!calls.is_empty()).then_some(calls),
            },
            logprobs: self.logprobs(&f.logprobs),
        }
    }

    /// One streamed chunk of choice `index`.
    fn chunk(
        &self,
        index: usize,
        delta: Delta,
        finish: Option<&'static str>,
        logprobs: Option<ChatLogprobs>,
        f: Option<&Finished>,
    ) -> serde_json::Value {
        serde_json::to_value(ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice {
                index,
                delta,
                finish_reason: finish,
                logprobs,
            }],
            usage: None,
            timings: f.map(TimingsOut::of),
        })
        .unwrap_or_default()
    }
}

/// One streamed choice: answers that may call tools show text only where
/// no call can be; answers with reasoning, their reasoning and content
/// apart (harmony's calls, which its splitter never shows, at the end; the
/// content after a `<think>` block through the tool stream).
struct ChoiceStream {
    reply: Arc<Reply>,
    index: usize,
    calls: Option<(ToolStream, Vec<ToolSpec>)>,
    splitter: Option<Splitter>,
    held_lps: Vec<TokenLogprob>,
    ended: Ended,
}

impl ChoiceStream {
    fn new(
        reply: Arc<Reply>,
        index: usize,
        tools: Option<(ToolFormat, Vec<ToolSpec>)>,
        ended: Ended,
    ) -> ChoiceStream {
        let splitter = splitter(tools.as_ref(), reply.reading);
        ChoiceStream {
            reply,
            index,
            splitter,
            calls: tools.map(|(format, specs)| (ToolStream::new(format), specs)),
            held_lps: Vec::new(),
            ended,
        }
    }

    fn frames(&mut self, stage: Stage<'_>) -> Vec<serde_json::Value> {
        match stage {
            Stage::Start => vec![self.chunk(Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Delta::default()
            })],
            Stage::Text(t, l) if self.splitter.is_some() => {
                self.held_lps.extend_from_slice(l);
                let parts = self
                    .splitter
                    .as_mut()
                    .map(|h| h.push(t))
                    .unwrap_or_default();
                let parts = self.through_calls(parts);
                self.parts(parts)
            }
            Stage::Text(t, l) => {
                self.held_lps.extend_from_slice(l);
                let shown = match &mut self.calls {
                    Some((s, _)) => s.push(t),
                    None => t.to_string(),
                };
                // text held for calls, or none with no logprobs to send
                if shown.is_empty() && (self.calls.is_some() || self.held_lps.is_empty()) {
                    return Vec::new();
                }
                vec![self.text(shown)]
            }
            Stage::End(f) => self.end(f),
        }
    }

    fn chunk(&self, delta: Delta) -> serde_json::Value {
        self.reply.chunk(self.index, delta, None, None, None)
    }

    /// After a `<think>` block, content goes through the tool stream (which
    /// holds what may be a call); harmony's splitter never shows its calls.
    fn through_calls(&mut self, parts: Vec<(Part, String)>) -> Vec<(Part, String)> {
        let Some((s, _)) = self
            .calls
            .as_mut()
            .filter(|_| matches!(self.splitter, Some(Splitter::Think(_))))
        else {
            return parts;
        };
        parts
            .into_iter()
            .map(|(p, t)| match p {
                Part::Content => (p, s.push(&t)),
                Part::Reasoning => (p, t),
            })
            .filter(|(_, t)| !t.is_empty())
            .collect()
    }

    /// Reasoning and content pieces as deltas; the log-probabilities held
    /// so far go with the first.
    fn parts(&mut self, parts: Vec<(Part, String)>) -> Vec<serde_json::Value> {
        parts
            .into_iter()
            .map(|(part, t)| {
                let lps = self.reply.logprobs(&std::mem::take(&mut self.held_lps));
                let delta = match part {
                    Part::Reasoning => Delta {
                        reasoning_content: Some(t),
                        ..Delta::default()
                    },
                    Part::Content => Delta {
                        content: Some(t),
                        ..Delta::default()
                    },
                };
                self.reply.chunk(self.index, delta, None, lps, None)
            })
            .collect()
    }

    /// Text, with the log-probabilities held for it.
    fn text(&mut self, t: String) -> serde_json::Value {
        let lps = self.reply.logprobs(&std::mem::take(&mut self.held_lps));
        let delta = Delta {
            content: Some(t),
            ..Delta::default()
        };
        self.reply.chunk(self.index, delta, None, lps, None)
    }

    fn end(&mut self, f: &Finished) -> Vec<serde_json::Value> {
        let mut out = match self.splitter.as_mut() {
            Some(h) => {
                let rest = h.finish();
                let rest = self.through_calls(rest);
                self.parts(rest)
            }
            None => Vec::new(),
        };
        let mut made_calls = false;
        if let Some((s, specs)) = self.calls.take() {
            // the tool stream saw the content after any <think> block
            let whole = match self.splitter {
                Some(Splitter::Think(_)) => self.reply.reading.split(&f.text).1,
                _ => f.text.clone(),
            };
            let (rest, answer) = s.finish(&whole, &specs);
            if !rest.is_empty() {
                out.push(self.text(rest));
            }
            if !answer.calls.is_empty() {
                made_calls = true;
                out.push(self.chunk(Delta {
                    tool_calls: Some(call_deltas(wire_calls(&answer))),
                    ..Delta::default()
                }));
            }
        }
        let reason = chat_finish_reason(&f.stop, made_calls);
        out.push(
            self.reply
                .chunk(self.index, Delta::default(), Some(reason), None, Some(f)),
        );
        if let Ok(mut e) = self.ended.lock() {
            e.push((self.index, f.clone()));
        }
        out
    }
}

/// A chat answer's `finish_reason`: `tool_calls` when it made calls.
fn chat_finish_reason(stop: &StopReason, made_calls: bool) -> &'static str {
    if made_calls {
        "tool_calls"
    } else {
        finish_reason(stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ats_core::chat::reasoning::ReasoningFormat;

    const ANSWER: &str = "<|channel|>analysis<|message|>They ask for 2+2.<|end|>\
        <|start|>assistant<|channel|>final<|message|>4.";

    /// A reply for the gpt-oss fixture's vocabulary (harmony's tokens).
    fn reply() -> Arc<Reply> {
        let path = ats_tests::repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf");
        let gguf = ats_core::gguf::GgufFile::open(&path).expect("the gpt-oss fixture");
        let tokenizer = ats_core::Tokenizer::from_gguf(&gguf.metadata).expect("its tokenizer");
        let template = ats_core::ChatTemplate::from_gguf(&gguf.metadata).map_err(|e| e.to_string());
        let prompter = Arc::new(Prompter::new(tokenizer, template, 256, None));
        assert_eq!(prompter.reasoning(), ReasoningFormat::Harmony);
        Arc::new(Reply {
            id: "chatcmpl-test".into(),
            created: 0,
            model: "gpt-oss".into(),
            reading: Reading::of(prompter.reasoning(), ""),
            prompter,
            want_logprobs: false,
        })
    }

    fn finished(text: &str) -> Finished {
        Finished {
            text: text.into(),
            stop: StopReason::Eog,
            completion_tokens: 9,
            held_back_bytes: 0,
            logprobs: Vec::new(),
            timings: Default::default(),
            vision: None,
        }
    }

    /// The frames of `answer` streamed in pieces of `size` bytes (at most).
    fn streamed(
        answer: &str,
        tools: Option<(ToolFormat, Vec<ToolSpec>)>,
        size: usize,
    ) -> Vec<serde_json::Value> {
        streamed_to(reply(), answer, tools, size)
    }

    /// [`streamed`] for `reply`.
    fn streamed_to(
        reply: Arc<Reply>,
        answer: &str,
        tools: Option<(ToolFormat, Vec<ToolSpec>)>,
        size: usize,
    ) -> Vec<serde_json::Value> {
        let mut s = ChoiceStream::new(reply, 0, tools, Arc::default());
        let mut frames = s.frames(Stage::Start);
        for piece in answer.as_bytes().chunks(size) {
            let t = std::str::from_utf8(piece).unwrap();
            frames.extend(s.frames(Stage::Text(t, &[])));
        }
        frames.extend(s.frames(Stage::End(&finished(answer))));
        frames
    }

    /// The text of every delta's `name` field, joined.
    fn delta_text(frames: &[serde_json::Value], name: &str) -> String {
        frames
            .iter()
            .filter_map(|f| f["choices"][0]["delta"][name].as_str())
            .collect()
    }

    #[test]
    fn a_harmony_answer_has_its_reasoning_apart() {
        let c = reply().choice(0, &finished(ANSWER), None);
        assert_eq!(c.message.content.as_deref(), Some("4."));
        assert_eq!(
            c.message.reasoning_content.as_deref(),
            Some("They ask for 2+2.")
        );
        // a vocabulary without harmony's tokens keeps the text as it is
        let prompter = Arc::new(super::super::fuzz::prompter());
        let plain = Reply {
            reading: Reading::of(prompter.reasoning(), ""),
            prompter,
            ..Arc::try_unwrap(reply()).ok().unwrap()
        };
        let c = plain.choice(0, &finished(ANSWER), None);
        assert_eq!(c.message.content.as_deref(), Some(ANSWER));
        assert!(c.message.reasoning_content.is_none());
    }

    #[test]
    fn a_streamed_harmony_answer_sends_reasoning_then_content_deltas() {
        let frames = streamed(ANSWER, None, 5);
        let field = |name: &str| delta_text(&frames, name);
        assert_eq!(field("reasoning_content"), "They ask for 2+2.");
        assert_eq!(field("content"), "4.");
        // reasoning deltas all come before the first content text
        let kinds: Vec<&str> = frames
            .iter()
            .filter_map(|f| {
                let d = &f["choices"][0]["delta"];
                if d["reasoning_content"].is_string() {
                    Some("r")
                } else if d["content"].as_str().is_some_and(|c| !c.is_empty()) {
                    Some("c")
                } else {
                    None
                }
            })
            .collect();
        let first_c = kinds.iter().position(|k| *k == "c").unwrap();
        assert!(kinds[first_c..].iter().all(|k| *k == "c"), "{kinds:?}");
    }

    const CALL: &str = "<|channel|>analysis<|message|>Weather, then.<|end|>\
        <|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>\
        <|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json\
        <|message|>{\"city\": \"Oslo\"}";

    fn weather() -> (ToolFormat, Vec<ToolSpec>) {
        let spec = ToolSpec {
            name: "weather".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        };
        (ToolFormat::Harmony, vec![spec])
    }

    #[test]
    fn a_harmony_call_comes_back_as_tool_calls_with_its_reasoning() {
        let tools = weather();
        assert_oslo_call(&reply().choice(0, &finished(CALL), Some(&tools)));
    }

    /// The choice calls the weather for Oslo after reasoning "Weather,
    /// then." and saying "Checking.".
    fn assert_oslo_call(c: &ChatChoice) {
        assert_eq!(c.finish_reason, "tool_calls");
        assert_eq!(
            c.message.reasoning_content.as_deref(),
            Some("Weather, then.")
        );
        assert_eq!(c.message.content.as_deref(), Some("Checking."));
        let calls = c.message.tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].function.name, "weather");
        assert_eq!(calls[0].function.arguments, "{\"city\":\"Oslo\"}");
    }

    #[test]
    fn a_streamed_harmony_call_sends_reasoning_content_then_the_call() {
        let frames = streamed(CALL, Some(weather()), 7);
        let field = |name: &str| delta_text(&frames, name);
        assert_eq!(field("reasoning_content"), "Weather, then.");
        // the call's arguments never show as text
        assert_eq!(field("content"), "Checking.");
        let last = frames.len() - 1;
        let call = &frames[last - 1]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "weather");
        assert_eq!(frames[last]["choices"][0]["finish_reason"], "tool_calls");
        // a call to an undeclared function is shown as text at the end
        let other = CALL.replace("functions.weather", "functions.rm");
        let frames = streamed(&other, Some(weather()), other.len());
        let text = delta_text(&frames, "content");
        assert!(
            text.starts_with("Checking.<|start|>assistant<|channel|>commentary to=functions.rm"),
            "{text}"
        );
        assert_eq!(
            frames.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
    }

    /// A reply whose answers open with a `<think>` block, or begin inside
    /// one the prompt opened (`open`).
    fn thinking(open: bool) -> Arc<Reply> {
        let reading = Reading {
            format: ReasoningFormat::Think,
            open,
        };
        Arc::new(Reply {
            reading,
            ..Arc::try_unwrap(reply()).ok().unwrap()
        })
    }

    #[test]
    fn a_think_block_is_reasoning_content_whole_or_streamed() {
        for (open, answer) in [
            (false, "<think>\nThey ask for 2+2.\n</think>\n\n4."),
            (true, "\nThey ask for 2+2.\n</think>\n\n4."),
        ] {
            let c = thinking(open).choice(0, &finished(answer), None);
            assert_eq!(c.message.content.as_deref(), Some("4."));
            assert_eq!(
                c.message.reasoning_content.as_deref(),
                Some("\nThey ask for 2+2.\n")
            );
            for size in [1, 3, 64] {
                let frames = streamed_to(thinking(open), answer, None, size);
                assert_eq!(
                    delta_text(&frames, "reasoning_content"),
                    "\nThey ask for 2+2.\n"
                );
                assert_eq!(delta_text(&frames, "content"), "4.");
            }
        }
        // an answer without the block is all content
        let c = thinking(false).choice(0, &finished("4."), None);
        assert_eq!(c.message.content.as_deref(), Some("4."));
        assert!(c.message.reasoning_content.is_none());
    }

    #[test]
    fn a_glm_call_after_a_think_block_is_reasoning_then_tool_calls() {
        const GLM_CALL: &str = "<think>Weather, then.</think>\nChecking.\n<tool_call>weather\n\
            <arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>";
        let (_, specs) = weather();
        let tools = (ToolFormat::Glm, specs);
        assert_oslo_call(&thinking(false).choice(0, &finished(GLM_CALL), Some(&tools)));
        for size in [1, 4, 200] {
            let frames = streamed_to(thinking(false), GLM_CALL, Some(tools.clone()), size);
            assert_eq!(delta_text(&frames, "reasoning_content"), "Weather, then.");
            // the call never shows as text
            assert_eq!(delta_text(&frames, "content"), "Checking.\n");
            let last = frames.len() - 1;
            let call = &frames[last - 1]["choices"][0]["delta"]["tool_calls"][0];
            assert_eq!(call["function"]["arguments"], "{\"city\":\"Oslo\"}");
            assert_eq!(frames[last]["choices"][0]["finish_reason"], "tool_calls");
        }
    }
}
