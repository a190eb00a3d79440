//! A deterministic fuzz test of request handling before the engine: a seeded
//! mutation loop feeds a few thousand broken, odd and valid bodies to the
//! request checks and the prompt builder (tokenizer, chat template, image
//! decoding) on the qwen2 fixture. Nothing may panic; every refusal must be
//! a 4xx with a message; and the loop must reach both outcomes often, or it
//! tests nothing.

use base64::Engine as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::params::Defaults;
use super::prompt::Prompter;
use super::request::{check_chat, check_completion};

/// Bodies per endpoint.
const ROUNDS: usize = 2500;

pub(super) fn prompter() -> Prompter {
    let path = ats_tests::fixtures().join("qwen2/qwen2-f32.gguf");
    let gguf = ats_core::gguf::GgufFile::open(&path).expect("the qwen2 fixture");
    let tokenizer = ats_core::Tokenizer::from_gguf(&gguf.metadata).expect("its tokenizer");
    let template = ats_core::ChatTemplate::from_gguf(&gguf.metadata).map_err(|e| e.to_string());
    Prompter::new(tokenizer, template, 256, None)
}

fn tiny_png_url() -> String {
    let img = image::RgbImage::from_pixel(3, 2, image::Rgb([200, 10, 30]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .expect("encoding a PNG");
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

fn chat_seeds() -> Vec<Value> {
    vec![
        json!({"messages": [{"role": "user", "content": "Hello there"}], "temperature": 0, "max_tokens": 8}),
        json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": tiny_png_url(), "detail": "low"}}]},
            {"role": "assistant", "content": null},
            {"role": "developer", "content": "ok", "name": "x"}],
            "stream": true, "stream_options": {"include_usage": true}, "stop": ["\n", "END"],
            "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -3, "n": 1, "user": "u",
            "tool_choice": "auto", "response_format": {"type": "text"}, "logprobs": false}),
        json!({"messages": [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "d",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": "required", "logprobs": true, "top_logprobs": 2}),
        json!({"messages": [{"role": "user", "content": "A person"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
                "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
    ]
}

fn completion_seeds() -> Vec<Value> {
    vec![
        json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}),
        json!({"prompt": [1, 2, 3], "stream": true, "stop": "x", "repeat_penalty": 1.1,
            "ignore_eos": true, "echo": false, "best_of": 1, "suffix": ""}),
        json!({"prompt": ["one prompt"], "logit_bias": {}, "presence_penalty": 0}),
    ]
}

/// Field names worth planting: the ones the server reads.
const KEYS: &[&str] = &[
    "messages",
    "prompt",
    "role",
    "content",
    "type",
    "text",
    "image_url",
    "url",
    "stream",
    "stream_options",
    "include_usage",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "seed",
    "stop",
    "n",
    "logit_bias",
    "tools",
    "tool_choice",
    "response_format",
    "logprobs",
    "top_logprobs",
    "tool_calls",
    "tool_call_id",
    "function",
    "arguments",
    "parameters",
    "json_schema",
    "schema",
    "echo",
    "suffix",
    "best_of",
    "ignore_eos",
    "user",
    "model",
    "name",
    "reasoning_effort",
    "chat_template_kwargs",
    "reasoning_content",
    "reasoning",
    "effort",
];

fn random_value(rng: &mut StdRng, depth: usize) -> Value {
    match rng.random_range(0..14) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random_range(-3i64..300)),
        3 => json!(i64::MIN),
        4 => json!(u64::MAX),
        5 => json!(rng.random_range(-2.0f64..2.0)),
        6 => json!(1e300),
        7 => json!(
            [
                "user",
                "assistant",
                "system",
                "tool",
                "text",
                "image_url",
                ""
            ][rng.random_range(0..7)]
        ),
        8 => json!("data:image/png;base64,iVBORw0KGgo="),
        9 => json!("é\u{0}\u{1F600}<|im_start|>".repeat(rng.random_range(0..4))),
        10 => json!("x".repeat(rng.random_range(0..2000))),
        11 if depth < 3 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        12 if depth < 3 => {
            let mut o = serde_json::Map::new();
            for _ in 0..rng.random_range(0..4) {
                let k = KEYS[rng.random_range(0..KEYS.len())];
                o.insert(k.into(), random_value(rng, depth + 1));
            }
            Value::Object(o)
        }
        _ => json!({"role": "user", "content": "hi"}),
    }
}

/// A random node of `v`, found by walking down from the root.
fn random_node<'a>(rng: &mut StdRng, v: &'a mut Value) -> &'a mut Value {
    let len = match &*v {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    };
    if len == 0 || rng.random_bool(0.3) {
        return v;
    }
    let i = rng.random_range(0..len);
    match v {
        Value::Array(a) => random_node(rng, &mut a[i]),
        Value::Object(o) => random_node(rng, o.values_mut().nth(i).expect("in range")),
        other => other,
    }
}

/// A structural change: a value replaced, a key removed or planted.
fn mutate_value(rng: &mut StdRng, v: &mut Value) {
    let node = random_node(rng, v);
    match rng.random_range(0..4) {
        0 => *node = random_value(rng, 0),
        1 => {
            if let Value::Object(o) = node
                && !o.is_empty()
            {
                let k = o.keys().nth(rng.random_range(0..o.len())).cloned();
                k.map(|k| o.remove(&k));
            }
        }
        2 => {
            if let Value::Object(o) = node {
                let k = KEYS[rng.random_range(0..KEYS.len())];
                o.insert(k.into(), random_value(rng, 1));
            }
        }
        _ => {
            if let Value::Array(a) = node {
                if a.is_empty() || rng.random_bool(0.5) {
                    a.push(random_value(rng, 1));
                } else {
                    a.remove(rng.random_range(0..a.len()));
                }
            }
        }
    }
}

/// A byte-level change: a byte flipped, planted, deleted, a range
/// repeated, or the tail cut off.
fn mutate_bytes(rng: &mut StdRng, b: &mut Vec<u8>) {
    const PLANT: &[u8] = b"{}[]\",:\\0-9.eE+nulltrue \xff\xc3\x00";
    if b.is_empty() {
        b.push(PLANT[rng.random_range(0..PLANT.len())]);
        return;
    }
    let i = rng.random_range(0..b.len());
    match rng.random_range(0..5) {
        0 => b[i] ^= 1 << rng.random_range(0..8),
        1 => b.insert(i, PLANT[rng.random_range(0..PLANT.len())]),
        2 => {
            let end = (i + rng.random_range(1..8)).min(b.len());
            b.drain(i..end);
        }
        3 => {
            let end = (i + rng.random_range(1..16)).min(b.len());
            let piece = b[i..end].to_vec();
            b.splice(i..i, piece);
        }
        _ => b.truncate(i),
    }
}

/// Runs `check` on mutations of `seeds`; returns (accepted, refused).
fn fuzz(
    seeds: &[Value],
    rng: &mut StdRng,
    check: &dyn Fn(&[u8]) -> Result<(), u16>,
) -> (usize, usize) {
    let (mut ok, mut refused) = (0, 0);
    for round in 0..ROUNDS {
        let mut v = seeds[round % seeds.len()].clone();
        for _ in 0..rng.random_range(0..3) {
            mutate_value(rng, &mut v);
        }
        let mut bytes = serde_json::to_vec(&v).expect("serialising");
        if rng.random_bool(0.4) {
            for _ in 0..rng.random_range(1..4) {
                mutate_bytes(rng, &mut bytes);
            }
        }
        match check(&bytes) {
            Ok(()) => ok += 1,
            Err(status) => {
                assert!(
                    (400..500).contains(&status),
                    "status {status} for {:?}",
                    String::from_utf8_lossy(&bytes)
                );
                refused += 1;
            }
        }
    }
    (ok, refused)
}

fn defaults() -> Defaults {
    Defaults {
        sampler: ats_core::SamplerConfig::greedy(),
        seed: Some(1),
        max_tokens: 64,
        vocab: 1000,
        template_kwargs: Default::default(),
    }
}

fn refusal(e: super::errors::ApiError) -> u16 {
    assert!(!e.message.is_empty(), "an error without a message");
    // the JSON body is what clients see: it must always serialise
    assert!(e.json()["error"]["message"].is_string());
    e.status.as_u16()
}

#[test]
fn mutated_requests_never_panic_and_get_4xx_answers() {
    let p = prompter();
    let d = defaults();
    let mut rng = StdRng::seed_from_u64(0x5eed_0007);
    let chat = |b: &[u8]| -> Result<(), u16> {
        let check = check_chat(b, &d).map_err(refusal)?;
        assert!((1..=64).contains(&check.params.max_tokens));
        let ids = p.prepare_chat(check).map_err(refusal)?.prompt;
        assert!((1..=256).contains(&ids.n_tokens()));
        Ok(())
    };
    let (ok, refused) = fuzz(&chat_seeds(), &mut rng, &chat);
    eprintln!("chat: {ok} accepted, {refused} refused");
    assert!(
        ok > 100 && refused > 500,
        "chat: {ok} accepted, {refused} refused"
    );
    let completion = |b: &[u8]| -> Result<(), u16> {
        let (prompt, params, _) = check_completion(b, &d).map_err(refusal)?;
        assert!((1..=64).contains(&params.max_tokens));
        let ids = p.completion(prompt).map_err(refusal)?;
        assert!((1..=256).contains(&ids.len()));
        Ok(())
    };
    let (ok, refused) = fuzz(&completion_seeds(), &mut rng, &completion);
    eprintln!("completion: {ok} accepted, {refused} refused");
    assert!(
        ok > 100 && refused > 500,
        "completion: {ok} accepted, {refused} refused"
    );
}
