//! The Responses stream: the answer's text, reasoning and tool calls as
//! numbered, named events, and the output items they build.

use ats_core::chat::harmony::Part;
use ats_core::chat::reasoning::{Reading, Splitter};
use ats_core::chat::tools::{ToolFormat, ToolSpec};
use axum::response::sse::Event;
use serde_json::{Value, json};

use crate::serve::queue::Finished;
use crate::serve::routes::Stage;
use crate::serve::tools::{ToolStream, splitter, wire_calls};
use crate::serve::wire::WireToolCall;

use super::Head;

/// A streamed response: the named events of the Responses API, numbered.
pub(super) struct EventStream {
    head: Head,
    seq: u64,
    /// The items opened so far, in output order (a harmony answer's
    /// reasoning and its message, each opened with its first text).
    items: Vec<OpenItem>,
    /// The tool-call stream, when tools are in play.
    calls: Option<(ToolStream, Vec<ToolSpec>)>,
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
    /// The stream of `head`'s response, reading the answer's tool calls of
    /// `tools` when in play and its reasoning as `reading` says.
    pub(super) fn new(
        head: Head,
        tools: Option<(ToolFormat, Vec<ToolSpec>)>,
        reading: Reading,
    ) -> EventStream {
        EventStream {
            head,
            seq: 0,
            items: Vec::new(),
            splitter: splitter(tools.as_ref(), reading),
            calls: tools.map(|(format, specs)| (ToolStream::new(format), specs)),
            reading,
        }
    }

    pub(super) fn frames(&mut self, stage: Stage<'_>) -> Vec<Event> {
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
pub(super) fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
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
pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        vec![text_part(text)]
    } else {
        Vec::new()
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

/// A function call item.
pub(super) fn call_item(c: &WireToolCall) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{}", c.id),
        "call_id": c.id,
        "name": c.function.name,
        "arguments": c.function.arguments,
        "status": "completed",
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::as_chat::Echo;
    use super::*;
    use crate::serve::prompt::Prompter;

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
