//! Structured output, tools and logprobs as clients see them, on the
//! qwen2 fixture: its weights are random, so every well-formed answer here
//! is the grammar's doing.

mod common;

use common::{EventStream, Server, post, qwen2};
use serde_json::{Value, json};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": -5, "maximum": 500},
            "colour": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}
        },
        "required": ["n", "colour", "tags"],
        "additionalProperties": false
    })
}

fn chat(server: &Server, body: Value) -> (u16, Value) {
    post(&server.url("/v1/chat/completions"), &body.to_string())
}

/// The streamed content of a chat request.
fn streamed(server: &Server, body: Value) -> String {
    streamed_field(server, body, "content")
}

/// A streamed chat request's deltas of `field` (`content`, `reasoning_content`), joined.
fn streamed_field(server: &Server, mut body: Value, field: &str) -> String {
    body["stream"] = json!(true);
    EventStream::open(&server.url("/v1/chat/completions"), &body.to_string())
        .all()
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|v| v["choices"][0]["delta"][field].as_str().map(String::from))
        .collect()
}

#[test]
fn json_schema_answers_match_the_schema_streamed_or_not() {
    let server = Server::start(&qwen2(), &[]);
    for seed in 0..4 {
        let body = json!({
            "messages": [{"role": "user", "content": "the license grants"}],
            "max_tokens": 200, "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "thing", "strict": true, "schema": schema()}}
        });
        let (status, v) = chat(&server, body.clone());
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let a: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!((-5..=500).contains(&a["n"].as_i64().unwrap()), "{a}");
        assert!(
            ["red", "green", "blue"].contains(&a["colour"].as_str().unwrap()),
            "{a}"
        );
        let tags = a["tags"].as_array().unwrap();
        assert!(
            tags.len() <= 3
                && tags
                    .iter()
                    .all(|t| t.as_str().unwrap().chars().count() <= 8)
        );
        assert_eq!(a.as_object().unwrap().len(), 3, "{a}");
        assert_eq!(streamed(&server, body), text, "the same answer streamed");
    }
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
        "temperature": 0, "response_format": {"type": "json_object"}});
    let (status, v) = chat(&server, body);
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    if v["choices"][0]["finish_reason"] == "stop" {
        let a: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(a.is_object());
    } else {
        // cut by max_tokens inside an object: still the start of one
        assert!(text.starts_with('{'), "{text:?}");
    }
}

#[test]
fn what_cannot_be_enforced_is_a_400_naming_it() {
    let server = Server::start(&qwen2(), &[]);
    let user = json!([{"role": "user", "content": "hi"}]);
    let weather = json!([{"type": "function", "function": {"name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}}),
            "response_format",
            "objekt",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": true}}}),
            "response_format",
            "JSON object",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            "response_format.json_schema.schema",
            "schema",
        ),
        // a keyword the grammar cannot enforce is refused, never ignored
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                    "unevaluatedProperties": false}}}}),
            "response_format",
            "unevaluatedProperties",
        ),
        (
            json!({"response_format": {"type": "xml"}}),
            "response_format.type",
            "xml",
        ),
        (
            json!({"tools": weather, "tool_choice": {"type": "function", "function": {"name": "time"}}}),
            "tool_choice",
            "time",
        ),
        (
            json!({"tool_choice": "required"}),
            "tool_choice",
            "no tools",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f",
            "parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}}}],
            "tool_choice": "required"}),
            "tools",
            "none",
        ),
        (
            json!({"logprobs": false, "top_logprobs": 2}),
            "top_logprobs",
            "logprobs",
        ),
        (
            json!({"logprobs": true, "top_logprobs": 50}),
            "top_logprobs",
            "20",
        ),
    ];
    for (extra, param, says) in cases {
        let mut body = json!({"messages": user, "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, v) = chat(&server, body.clone());
        assert_eq!(status, 400, "{body} -> {v}");
        assert_eq!(v["error"]["param"], param, "{body} -> {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(says), "{body} -> {msg}");
    }
    let bad_args = json!({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
            "function": {"name": "weather", "arguments": "not json"}}]}], "max_tokens": 4});
    let (status, v) = chat(&server, bad_args);
    assert_eq!(status, 400);
    assert_eq!(
        v["error"]["param"],
        "messages[1].tool_calls[0].function.arguments"
    );
}

#[test]
fn a_required_call_and_logprobs_have_openai_shape() {
    let server = Server::start(&qwen2(), &[]);
    let body = json!({
        "messages": [{"role": "user", "content": "weather?"}],
        "max_tokens": 100, "temperature": 0, "logprobs": true, "top_logprobs": 2,
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                "required": ["unit"], "additionalProperties": false}}}],
        "tool_choice": "required"
    });
    let (status, v) = chat(&server, body);
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    assert_eq!(c["message"]["content"], Value::Null);
    let call = &c["message"]["tool_calls"][0];
    assert_eq!(
        (&call["type"], &call["function"]["name"]),
        (&json!("function"), &json!("weather"))
    );
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(
        args == json!({"unit": "c"}) || args == json!({"unit": "f"}),
        "{args}"
    );
    let lps = c["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        lps.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for t in lps {
        assert!(t["logprob"].as_f64().unwrap() <= 0.0);
        assert!(t["top_logprobs"].as_array().unwrap().len() <= 2);
        assert_eq!(
            t["top_logprobs"][0]["token"], t["token"],
            "greedy: the most likely"
        );
    }
}

/// gpt-oss's own call format: its template lists the tools, the required
/// call is a harmony message to `functions.weather`, and the answer comes
/// back as `tool_calls`, streamed or not (`logit_bias` steers the random
/// fixture past the reasoning the grammar allows first).
#[test]
fn a_required_call_in_harmony_comes_back_as_tool_calls() {
    let bias = common::harmony_call_bias();
    let server = Server::start(&common::gpt_oss(), &[]);
    let body = json!({
        "messages": [{"role": "user", "content": "weather?"}],
        "max_tokens": 60, "temperature": 0, "logit_bias": bias,
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                "required": ["unit"], "additionalProperties": false}}}],
        "tool_choice": "required"
    });
    let (call, args) = weather_call(&server, body.clone());
    assert!(
        args == json!({"unit": "c"}) || args == json!({"unit": "f"}),
        "{args}"
    );
    assert!(server.log().contains("harmony"), "{}", server.log());
    // streamed: no harmony markup as content, the same call at the end
    let (content, streamed_call) = streamed_call(&server, body);
    assert!(!content.contains("<|"), "{content:?}");
    assert_eq!(streamed_call["arguments"], call["function"]["arguments"]);
}

/// A request that must call `weather`: its answer's first call and that
/// call's arguments.
fn weather_call(server: &Server, body: Value) -> (Value, Value) {
    let (status, v) = chat(server, body);
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    let call = c["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "weather", "{v}");
    let args = call["function"]["arguments"].as_str().unwrap();
    let args = serde_json::from_str(args).unwrap();
    (call, args)
}

/// A streamed chat request's content and its first call's function.
fn streamed_call(server: &Server, mut body: Value) -> (String, Value) {
    body["stream"] = json!(true);
    let events: Vec<Value> =
        EventStream::open(&server.url("/v1/chat/completions"), &body.to_string())
            .all()
            .iter()
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
    let content: String = events
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
        .collect();
    let call = events
        .iter()
        .find_map(|v| {
            let f = &v["choices"][0]["delta"]["tool_calls"][0]["function"];
            f.is_object().then(|| f.clone())
        })
        .expect("a tool_calls delta");
    (content, call)
}

/// A JSON schema on gpt-oss: the answer is a harmony `final` message (after
/// any reasoning), so `content` is the JSON alone, streamed or not.
#[test]
fn a_json_schema_on_gpt_oss_is_its_final_message() {
    let server = Server::start(&common::gpt_oss(), &[]);
    let body = json!({
        "messages": [{"role": "user", "content": "the license grants"}],
        "max_tokens": 200, "temperature": 0, "logit_bias": common::harmony_final_bias(),
        "response_format": {"type": "json_schema",
            "json_schema": {"name": "thing", "strict": true, "schema": schema()}}
    });
    let mut with_lps = body.clone();
    with_lps["logprobs"] = json!(true);
    let (status, v) = chat(&server, with_lps);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let a: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(
        ["red", "green", "blue"].contains(&a["colour"].as_str().unwrap()),
        "{a}"
    );
    // the model wrote a harmony message, not bare JSON
    let first = &v["choices"][0]["logprobs"]["content"][0]["token"];
    assert_eq!(first, "<|channel|>", "{v}");
    assert_eq!(streamed(&server, body), text);
}

/// The glm4moe fixture: GLM-4.5's tool and reasoning markers as control
/// tokens, a template that writes `<arg_key>` calls and opens a `<think>`
/// block when `enable_thinking` is true.
fn glm4moe() -> std::path::PathBuf {
    ats_tests::repo_fixtures().join("glm4moe/glm4moe-f32.gguf")
}

/// A required call on GLM-4.5 is its own `<tool_call>` block, read back as
/// `tool_calls`, whole or streamed (the markup never shows as content).
#[test]
fn a_required_call_on_glm4moe_is_its_own_tool_call_block() {
    let gguf = ats_core::gguf::GgufFile::open(glm4moe()).unwrap();
    let tok = ats_core::Tokenizer::from_gguf(&gguf.metadata).unwrap();
    // the grammar lets the model think first, which the random weights
    // would do until the token limit
    let think = tok.token_id("<think>").unwrap().to_string();
    let server = Server::start(&glm4moe(), &[]);
    let body = json!({
        "messages": [{"role": "user", "content": "weather?"}],
        "max_tokens": 40, "temperature": 0, "logit_bias": {think: -100},
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"enum": ["Oslo", "Bergen"]}},
                "required": ["city"]}}}],
        "tool_choice": "required"
    });
    let (call, args) = weather_call(&server, body.clone());
    assert!(
        args == json!({"city": "Oslo"}) || args == json!({"city": "Bergen"}),
        "{args}"
    );
    assert!(
        server.log().contains("glm (<tool_call>"),
        "{}",
        server.log()
    );
    let (content, streamed_call) = streamed_call(&server, body);
    assert!(!content.contains("<tool_call>"), "{content:?}");
    assert_eq!(streamed_call["arguments"], call["function"]["arguments"]);
}

/// A prompt that opens a `<think>` block (`enable_thinking`) makes the
/// answer reasoning until it closes the block (the random weights never
/// do here): all of it is `reasoning_content`, whole or streamed; without
/// it the same model's answer is content.
#[test]
fn a_think_block_the_prompt_opens_is_reasoning_content_on_glm4moe() {
    let server = Server::start(&glm4moe(), &[]);
    let ask = |thinking: bool| {
        json!({
            "messages": [{"role": "user", "content": "2+2?"}],
            "max_tokens": 12, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": thinking}
        })
    };
    let (status, v) = chat(&server, ask(true));
    assert_eq!(status, 200, "{v}");
    let m = &v["choices"][0]["message"];
    let reasoning = m["reasoning_content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!reasoning.is_empty(), "{v}");
    assert!(m["content"].as_str().unwrap_or_default().is_empty(), "{v}");
    let streamed = streamed_field(&server, ask(true), "reasoning_content");
    assert_eq!(streamed, reasoning);
    // the block closed empty by the template: the answer is content
    let (status, v) = chat(&server, ask(false));
    assert_eq!(status, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert!(m["reasoning_content"].is_null(), "{v}");
    assert!(!m["content"].as_str().unwrap_or_default().is_empty(), "{v}");
}
