//! The fuzz target `server_request`: one request body's bytes through every
//! endpoint's checks and prompt builder (`ats_cli::requests`): the JSON read
//! as the endpoint's fields, tools, `tool_choice` and `response_format`,
//! Responses input items, embeddings inputs, the qwen2 fixture's chat
//! template and tokenizer, grammars compiled; and, for bodies that carry
//! images, image data URLs decoded and preprocessed for the qwen2-vl
//! fixture's projector. Nothing may panic; an accepted body's prompts and
//! token limit are within the server's limits; a refused one is a 4xx whose
//! JSON error has a message.

use std::io::Cursor;

use ats_cli::requests::{Checked, Endpoint, Refusal, RequestChecker};
use base64::Engine as _;
use serde_json::{Value, json};

use super::Target;
use crate::fixtures;
use crate::fuzz::class_of;

/// Longest prompt the checkers accept, in tokens (small: images are resized
/// to what it holds, which keeps preprocessing fast).
const MAX_PROMPT: usize = 256;
/// Largest `max_tokens`, and the chat default.
const MAX_TOKENS: usize = 64;
/// Most embeddings inputs (the server's and OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// The target: a text server (qwen2) and a vision server (qwen2-vl with its
/// projector).
pub struct ServerRequest {
    text: RequestChecker,
    vision: RequestChecker,
}

fn endpoint_name(e: Endpoint) -> &'static str {
    match e {
        Endpoint::Chat => "chat",
        Endpoint::Completions => "completions",
        Endpoint::Responses => "responses",
        Endpoint::Embeddings => "embeddings",
    }
}

/// The target's invariants on one outcome; its class.
fn judge(e: Endpoint, out: Result<Checked, Refusal>) -> Result<String, String> {
    let name = endpoint_name(e);
    match out {
        Ok(c) => {
            let n = c.prompt_tokens.len();
            assert!((1..=MAX_INPUTS).contains(&n), "{name}: {n} prompts");
            assert!(
                c.prompt_tokens.iter().all(|t| (1..=MAX_PROMPT).contains(t)),
                "{name}: prompts of {:?} tokens",
                c.prompt_tokens
            );
            if e == Endpoint::Embeddings {
                assert!(c.max_tokens.is_none(), "{name}: {c:?}");
            } else {
                let m = c.max_tokens.unwrap_or(0);
                assert!((1..=MAX_TOKENS).contains(&m), "{name}: max_tokens {m}");
            }
            Ok(format!("{name} constrained={}", c.constrained))
        }
        Err(r) => {
            assert!((400..500).contains(&r.status), "{name}: {r:?}");
            assert!(!r.message.is_empty(), "{name}: a refusal without a message");
            assert!(r.body["error"]["message"].is_string(), "{name}: {r:?}");
            Err(format!("{name}: {}", class_of(&r.message)))
        }
    }
}

/// Whether a body may carry an image: only those go to the vision server
/// too (without images it renders what the text server does, twice as slow).
fn may_have_image(b: &[u8]) -> bool {
    b.windows(5).any(|w| w == b"image")
}

impl Target for ServerRequest {
    const NAME: &'static str = "server_request";
    const MAX_LEN: usize = 1 << 15;

    fn new() -> Self {
        let f = fixtures();
        let text = RequestChecker::open(
            &f.join("qwen2/qwen2-f32.gguf"),
            None,
            MAX_PROMPT,
            MAX_TOKENS,
        )
        .expect("the qwen2 fixture");
        let vision = RequestChecker::open(
            &f.join("qwen2_vl/qwen2_vl-f32.gguf"),
            Some(&f.join("qwen2_vl/mmproj-qwen2_vl-f32.gguf")),
            MAX_PROMPT,
            MAX_TOKENS,
        )
        .expect("the qwen2-vl fixture and its projector");
        ServerRequest { text, vision }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let mut bodies = chat_seeds();
        bodies.extend(responses_seeds());
        bodies.extend(completion_seeds());
        bodies.extend(embeddings_seeds());
        bodies.iter().map(|v| v.to_string().into_bytes()).collect()
    }

    fn dict() -> Vec<Vec<u8>> {
        DICT.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let mut classes = Vec::new();
        let mut accepted = false;
        for e in Endpoint::ALL {
            let c = judge(e, self.text.check(e, b));
            accepted |= c.is_ok();
            let (Ok(class) | Err(class)) = c;
            classes.push(class);
        }
        if may_have_image(b) {
            for e in [Endpoint::Chat, Endpoint::Responses] {
                let c = judge(e, self.vision.check(e, b));
                accepted |= c.is_ok();
                let (Ok(class) | Err(class)) = c;
                classes.push(format!("vision {class}"));
            }
        }
        let class = classes.join("; ");
        if accepted { Ok(class) } else { Err(class) }
    }
}

/// Field names and values the server reads, for libFuzzer's dictionary.
const DICT: &[&str] = &[
    "\"messages\"",
    "\"logit_bias\"",
    "\"reasoning_content\"",
    "\"reasoning_effort\"",
    "\"chat_template_kwargs\"",
    "\"prompt\"",
    "\"input\"",
    "\"instructions\"",
    "\"role\"",
    "\"user\"",
    "\"assistant\"",
    "\"system\"",
    "\"developer\"",
    "\"tool\"",
    "\"content\"",
    "\"type\"",
    "\"text\"",
    "\"image_url\"",
    "\"input_text\"",
    "\"input_image\"",
    "\"output_text\"",
    "\"url\"",
    "\"detail\"",
    "\"low\"",
    "\"high\"",
    "\"data:image/png;base64,",
    "\"data:image/jpeg;base64,",
    ";base64,",
    "\"stream\"",
    "\"stream_options\"",
    "\"include_usage\"",
    "\"max_tokens\"",
    "\"max_completion_tokens\"",
    "\"max_output_tokens\"",
    "\"temperature\"",
    "\"top_p\"",
    "\"top_k\"",
    "\"min_p\"",
    "\"repeat_penalty\"",
    "\"seed\"",
    "\"stop\"",
    "\"n\"",
    "\"logit_bias\"",
    "\"tools\"",
    "\"tool_choice\"",
    "\"auto\"",
    "\"none\"",
    "\"required\"",
    "\"response_format\"",
    "\"json_object\"",
    "\"json_schema\"",
    "\"schema\"",
    "\"strict\"",
    "\"format\"",
    "\"logprobs\"",
    "\"top_logprobs\"",
    "\"tool_calls\"",
    "\"tool_call_id\"",
    "\"function\"",
    "\"function_call\"",
    "\"function_call_output\"",
    "\"call_id\"",
    "\"output\"",
    "\"arguments\"",
    "\"parameters\"",
    "\"properties\"",
    "\"required\"",
    "\"name\"",
    "\"encoding_format\"",
    "\"base64\"",
    "\"float\"",
    "\"dimensions\"",
    "\"echo\"",
    "\"suffix\"",
    "\"best_of\"",
    "\"previous_response_id\"",
    "\"background\"",
    "\"<|im_start|>\"",
    "\"<|vision_start|>\"",
    "null",
    "true",
    "false",
    "-1",
    "18446744073709551616",
    "1e309",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
];

/// A tiny picture in `format`, as a data URL.
fn image_url(format: image::ImageFormat, mime: &str, w: u32, h: u32) -> String {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x * 40) as u8, (y * 40) as u8, 90])
    });
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format)
        .expect("encoding a seed image");
    let b64 = base64::engine::general_purpose::STANDARD.encode(out.into_inner());
    format!("data:{mime};base64,{b64}")
}

fn chat_seeds() -> Vec<Value> {
    use image::ImageFormat as F;
    let weather = json!([{"type": "function", "function": {"name": "weather", "description": "d",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}]);
    let mut seeds = vec![
        json!({"messages": [{"role": "user", "content": "Hello there"}], "temperature": 0, "max_tokens": 8}),
        json!({"messages": [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "reasoning_content": "think",
                "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
            "logit_bias": {"5": -100, "17": 3.5}, "tools": weather.clone(),
            "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": false}}),
        json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}]},
            {"role": "assistant", "content": null},
            {"role": "developer", "content": "ok", "name": "x"}],
            "stream": true, "stream_options": {"include_usage": true}, "stop": ["\n", "END"],
            "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -3, "n": 1, "user": "u",
            "tool_choice": "auto", "response_format": {"type": "text"}, "logprobs": false}),
        json!({"messages": [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
            "tools": weather, "tool_choice": "required", "logprobs": true, "top_logprobs": 2}),
        json!({"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": weather,
            "tool_choice": {"type": "function", "function": {"name": "weather"}}}),
        json!({"messages": [{"role": "user", "content": "A person"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
                "schema": {"type": "object", "properties": {"name": {"type": "string"},
                    "age": {"type": "integer", "minimum": 0}}, "required": ["name"]}}}}),
        json!({"messages": [{"role": "user", "content": "Any JSON"}],
            "response_format": {"type": "json_object"}, "max_completion_tokens": 16}),
    ];
    for (format, mime, w, h) in [
        (F::Png, "image/png", 3, 2),
        (F::Jpeg, "image/jpeg", 16, 9),
        (F::Gif, "image/gif", 5, 5),
        (F::Bmp, "image/bmp", 2, 7),
        (F::WebP, "image/webp", 8, 8),
    ] {
        seeds.push(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": image_url(format, mime, w, h), "detail": "low"}}]}],
            "max_tokens": 4}));
    }
    let png = image_url(F::Png, "image/png", 4, 4);
    seeds.push(json!({"messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png}},
            {"type": "image_url", "image_url": png}]},
        {"role": "assistant", "content": "Two squares."},
        {"role": "user", "content": "And now?"}], "tools": weather}));
    seeds
}

fn responses_seeds() -> Vec<Value> {
    let png = image_url(image::ImageFormat::Png, "image/png", 3, 3);
    vec![
        json!({"input": "Hello", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0}),
        json!({"model": "m", "stream": true, "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": png, "detail": "low"}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": {"t": 20}},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "weather"}}),
        json!({"input": [{"role": "user", "content": "A person"}],
            "text": {"format": {"type": "json_schema", "name": "p", "strict": true,
                "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
        json!({"input": "x", "previous_response_id": "resp_1", "store": false, "background": false}),
    ]
}

fn completion_seeds() -> Vec<Value> {
    vec![
        json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}),
        json!({"prompt": [1, 2, 3], "stream": true, "stop": "x", "repeat_penalty": 1.1,
            "ignore_eos": true, "echo": false, "best_of": 1, "suffix": "", "logprobs": 2}),
        json!({"prompt": ["one prompt"], "logit_bias": {}, "presence_penalty": 0}),
    ]
}

fn embeddings_seeds() -> Vec<Value> {
    vec![
        json!({"input": "A sentence to embed", "model": "m"}),
        json!({"input": ["one", "two", "three"], "encoding_format": "base64"}),
        json!({"input": [1, 2, 3], "encoding_format": "float"}),
        json!({"input": [[1, 2], [3, 4, 5]], "dimensions": 8}),
    ]
}
