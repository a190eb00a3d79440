//! `ats-cli serve` as clients see it: the real binary on a free loopback
//! port, spoken to over HTTP.

mod common;

use base64::Engine as _;
use common::{EventStream, Server, get, post, qwen2, wait_health};
use serde_json::{Value, json};

fn chat_body(content: &str, max_tokens: u32, stream: bool) -> String {
    json!({
        "model": "anything",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": true},
        "user": "tests",
    })
    .to_string()
}

/// The answer of a non-streamed chat completion.
fn answer(server: &Server, content: &str, max_tokens: u32) -> String {
    let (status, v) = post(
        &server.url("/v1/chat/completions"),
        &chat_body(content, max_tokens, false),
    );
    assert_eq!(status, 200, "{v}");
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The concatenated deltas of a streamed chat completion.
fn streamed_answer(server: &Server, content: &str, max_tokens: u32) -> String {
    let events = EventStream::open(
        &server.url("/v1/chat/completions"),
        &chat_body(content, max_tokens, true),
    )
    .all();
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[test]
fn streamed_deltas_equal_the_non_streamed_answer() {
    let server = Server::start(&qwen2(), &["--alias", "qwen2-fixture"]);
    let (status, models) = get(&server.url("/v1/models"));
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "qwen2-fixture");
    let (status, health) = get(&server.url("/health"));
    assert_eq!((status, &health["status"]), (200, &json!("ok")));

    let url = server.url("/v1/chat/completions");
    let (status, full) = post(&url, &chat_body("the license grants", 12, false));
    assert_eq!(status, 200, "{full}");
    assert_eq!(full["object"], "chat.completion");
    assert_eq!(full["model"], "qwen2-fixture");
    let text = full["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(full["choices"][0]["message"]["role"], "assistant");
    assert!(!text.is_empty());
    let usage = &full["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    let finish = full["choices"][0]["finish_reason"].as_str().unwrap();
    if finish == "length" {
        assert_eq!(usage["completion_tokens"], 12);
    }

    let events = EventStream::open(&url, &chat_body("the license grants", 12, true)).all();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one id per stream");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, text);
    // the finish reason, then a usage chunk with no choices
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], finish);
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    assert_eq!(&chunks[n - 1]["usage"], usage);

    // `run --chat` renders and tokenizes the same way: the same answer
    let model = qwen2();
    let out = common::run(&[
        "-q",
        "run",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "the license grants",
        "--chat",
        "-n",
        "12",
        "--temp",
        "0",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), format!("{text}\n"));

    // text completions: streamed and not, the same text
    let body = |stream: bool| {
        json!({"prompt": "the license grants", "max_tokens": 10, "temperature": 0, "stream": stream})
            .to_string()
    };
    let (status, c) = post(&server.url("/v1/completions"), &body(false));
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["object"], "text_completion");
    let ctext = c["choices"][0]["text"].as_str().unwrap();
    let cevents = EventStream::open(&server.url("/v1/completions"), &body(true)).all();
    let cstreamed: String = cevents
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(String::from))
        .collect();
    assert_eq!(cstreamed, ctext);
    assert!(c["usage"]["completion_tokens"].as_u64().unwrap() <= 10);
}

#[test]
fn ten_concurrent_requests_are_all_answered_correctly() {
    let server = Server::start(&qwen2(), &[]);
    let prompts = ["permission is hereby granted", "copyright", "the software"];
    let expected: Vec<String> = prompts.iter().map(|p| answer(&server, p, 6)).collect();
    let server = std::sync::Arc::new(server);
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let s = server.clone();
            std::thread::spawn(move || {
                let p = prompts[i % 3];
                if i % 2 == 0 {
                    (i, answer(&s, p, 6))
                } else {
                    (i, streamed_answer(&s, p, 6))
                }
            })
        })
        .collect();
    for h in handles {
        let (i, got) = h.join().unwrap();
        assert_eq!(got, expected[i % 3], "request {i}");
    }
    let h = wait_health(&server, |h| h["busy"] == false && h["queued"] == 0);
    assert_eq!(h["served"], 13);
    assert_eq!(h["failed"], 0);
}

#[test]
fn full_queue_is_503_and_a_disconnect_frees_the_engine() {
    // a long context so the first answer runs until it is cancelled
    let server = Server::start(
        &qwen2(),
        &["--parallel", "1", "--queue", "1", "-c", "16384"],
    );
    let long = json!({
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 16000, "ignore_eos": true, "temperature": 0, "stream": true,
    })
    .to_string();
    let mut stream = EventStream::open(&server.url("/v1/chat/completions"), &long);
    for _ in 0..3 {
        let d = stream.next_data().expect("chunks arrive");
        assert_ne!(d, "[DONE]");
    }
    wait_health(&server, |h| h["busy"] == true);
    // one request waits in the queue...
    let url = server.url("/v1/chat/completions");
    let waiting = std::thread::spawn(move || post(&url, &chat_body("copyright", 4, false)));
    wait_health(&server, |h| h["queued"] == 1);
    // ...so the next one finds the queue full
    let (status, err) = post(
        &server.url("/v1/chat/completions"),
        &chat_body("x", 4, false),
    );
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "queue_full");
    assert!(err["error"]["message"].as_str().unwrap().contains("busy"));
    // the first client goes away: its generation stops and the waiting one runs
    drop(stream);
    let (status, v) = waiting.join().unwrap();
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string());
    let h = wait_health(&server, |h| h["busy"] == false && h["queued"] == 0);
    assert_eq!(h["cancelled"], 1);
    assert_eq!(h["served"], 2);
    assert!(server.log().contains("stop Cancelled"), "{}", server.log());
    // and the server keeps serving
    let (status, _) = post(
        &server.url("/v1/chat/completions"),
        &chat_body("x", 2, false),
    );
    assert_eq!(status, 200);
}

fn assert_error(status: u16, v: &Value, want: u16, param: Option<&str>, words: &str) {
    assert_eq!(status, want, "{v}");
    let e = &v["error"];
    let msg = e["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {v}"));
    assert!(msg.contains(words), "{msg:?} lacks {words:?}");
    assert!(e["type"].is_string(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
}

fn png_data_url(rel: &str) -> String {
    let bytes = std::fs::read(common::fixture(rel)).unwrap();
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let server = Server::start(
        &qwen2(),
        &[
            "--max-body",
            "64KiB",
            "--max-prompt-tokens",
            "64",
            "--max-tokens",
            "100",
        ],
    );
    let chat = server.url("/v1/chat/completions");
    let cmpl = server.url("/v1/completions");
    let user = |content: Value| json!({"messages": [{"role": "user", "content": content}]});

    let (s, v) = post(&chat, r#"{"messages": [{"role": "user", "#);
    assert_error(s, &v, 400, None, "malformed JSON");
    let (s, v) = post(&chat, r#"{"messages": []} trailing"#);
    assert_error(s, &v, 400, None, "malformed JSON");
    let (s, v) = post(&chat, r#"{"model": "m"}"#);
    assert_error(s, &v, 400, None, "messages");
    let (s, v) = post(&chat, r#"{"messages": []}"#);
    assert_error(s, &v, 400, Some("messages"), "must not be empty");
    let mut wrong = user(json!("hi"));
    wrong["temperature"] = json!("hot");
    let (s, v) = post(&chat, &wrong.to_string());
    assert_error(s, &v, 400, Some("temperature"), "invalid type");
    let mut wrong = user(json!("hi"));
    wrong["stream"] = json!("yes");
    let (s, v) = post(&chat, &wrong.to_string());
    assert_error(s, &v, 400, Some("stream"), "invalid type");
    let (s, v) = post(&chat, &user(json!(5)).to_string());
    assert_error(s, &v, 400, Some("messages[0].content"), "string or a list");
    let (s, v) = post(
        &chat,
        &json!({"messages": [{"role": "wizard", "content": "hi"}]}).to_string(),
    );
    assert_error(s, &v, 400, Some("messages[0].role"), "unknown role");
    let (s, v) = post(&chat, &user(json!([{"type": "input_audio"}])).to_string());
    assert_error(
        s,
        &v,
        400,
        Some("messages[0].content[0].type"),
        "input_audio",
    );

    // images, valid or not, on a server without a projector: refused for
    // that, before their data is read
    let junk = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(b"not an image at all")
    );
    let image = |url: &str| {
        user(json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]))
        .to_string()
    };
    for url in [
        junk.as_str(),
        "data:image/png;base64,@@@",
        "https://example.invalid/cat.png",
        &png_data_url("vl_images/small.png"),
    ] {
        let (s, v) = post(&chat, &image(url));
        assert_error(
            s,
            &v,
            400,
            Some("messages[0].content[1]"),
            "started without --mmproj",
        );
    }

    // limits and features not served
    let mut many = user(json!("hi"));
    many["n"] = json!(17);
    let (s, v) = post(&chat, &many.to_string());
    assert_error(s, &v, 400, Some("n"), "1 to 16");
    let mut big = user(json!("hi"));
    big["max_tokens"] = json!(101);
    let (s, v) = post(&chat, &big.to_string());
    assert_error(s, &v, 400, Some("max_tokens"), "limit of 100");
    let long = "copyright notice ".repeat(40);
    let (s, v) = post(&chat, &user(json!(long)).to_string());
    assert_error(s, &v, 400, Some("messages"), "limit of 64");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let huge = user(json!("a".repeat(80 * 1024))).to_string();
    let (s, v) = post(&chat, &huge);
    assert_error(s, &v, 413, None, "--max-body");
    let (s, v) = post(&cmpl, r#"{"prompt": 5}"#);
    assert_error(s, &v, 400, Some("prompt"), "prompt must be");
    let (s, v) = post(&cmpl, r#"{"prompt": [1, 2, 99999]}"#);
    assert_error(s, &v, 400, Some("prompt"), "outside the vocabulary");
    let (s, v) = post(&cmpl, r#"{"prompt": ""}"#);
    assert_error(s, &v, 400, Some("prompt"), "empty");

    // routes
    let (s, v) = get(&server.url("/v1/nothing"));
    assert_error(s, &v, 404, None, "/v1/nothing");
    let (s, v) = get(&chat);
    assert_error(s, &v, 405, None, "GET");

    // still serving, and nothing reached the engine
    let (s, v) = post(
        &cmpl,
        r#"{"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0}"#,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    let (_, h) = get(&server.url("/health"));
    assert_eq!(h["served"], 1);
    assert_eq!(h["failed"], 0);
}

#[test]
fn image_request_without_a_projector_is_refused_by_name() {
    // Qwen2-VL's text model, served without its projector: the image is
    // refused with the reason.
    let server = Server::start(&common::fixture("qwen2_vl/qwen2_vl-f32.gguf"), &[]);
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": png_data_url("vl_images/large.png"), "detail": "auto"}},
        {"type": "text", "text": "Describe the image."},
    ]}], "max_tokens": 4});
    let (s, v) = post(&server.url("/v1/chat/completions"), &body.to_string());
    assert_error(s, &v, 400, Some("messages[0].content[0]"), "--mmproj");
    // text still works on it
    let (s, v) = post(
        &server.url("/v1/chat/completions"),
        &chat_body("Describe the image.", 4, false),
    );
    assert_eq!(s, 200, "{v}");
}

#[test]
fn images_in_chat_answer_as_vlm_does_and_are_cached() {
    let want = common::vlm_answer("vl_images/small.png", "Describe the image.", 8);
    let server = Server::start(
        &common::fixture("qwen2_vl/qwen2_vl-f32.gguf"),
        &[
            "--mmproj",
            common::fixture("qwen2_vl/mmproj-qwen2_vl-f32.gguf")
                .to_str()
                .unwrap(),
        ],
    );
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": png_data_url("vl_images/small.png")}},
        {"type": "text", "text": "Describe the image."},
    ]}], "max_tokens": 8, "temperature": 0, "ignore_eos": true});
    let url = server.url("/v1/chat/completions");
    let (s, first) = post(&url, &body.to_string());
    assert_eq!(s, 200, "{first}");
    assert_eq!(first["choices"][0]["message"]["content"], want.as_str());
    let vision = &first["timings"]["vision"];
    assert_eq!(
        (vision["images"].as_u64(), vision["cached"].as_u64()),
        (Some(1), Some(0)),
        "{first}"
    );
    assert!(vision["image_tokens"].as_u64().unwrap() > 0);
    // the same image again: neither encoded again nor computed again
    let (s, again) = post(&url, &body.to_string());
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["choices"][0]["message"]["content"], want.as_str());
    assert_eq!(again["timings"]["vision"]["cached"], 1, "{again}");
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let prompt = again["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        cached > 0 && cached < prompt,
        "{cached} of {prompt} prompt tokens cached"
    );
    // streamed: the same text
    let stream_body = json!({"messages": body["messages"], "max_tokens": 8, "temperature": 0,
        "ignore_eos": true, "stream": true});
    let text: String = EventStream::open(&url, &stream_body.to_string())
        .all()
        .iter()
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, want);
    // a URL the server would have to fetch, and a broken data URL: 400s naming the field
    for (url_value, needle) in [
        ("https://example.com/cat.png", "data URL"),
        ("data:image/png;base64,@@@", "base64"),
        ("data:image/png;base64,aGVsbG8=", "image 1"),
    ] {
        let bad = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url_value}},
            {"type": "text", "text": "Describe the image."},
        ]}], "max_tokens": 2});
        let (s, v) = post(&url, &bad.to_string());
        assert_eq!(s, 400, "{url_value}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{url_value}: {v}"
        );
    }
}

#[test]
fn the_engine_state_says_where_the_model_sits_and_what_the_rounds_did() {
    let server = Server::start(&qwen2(), &["--sim-gpu", "--vram", "3M", "--parallel", "2"]);
    let (s, v) = post(
        &server.url("/v1/chat/completions"),
        &chat_body("copyright", 3, false),
    );
    assert_eq!(s, 200, "{v}");
    let (s, st) = get(&server.url("/v1/ats/state"));
    assert_eq!(s, 200, "{st}");
    assert_eq!(st["model"]["arch"], "qwen2");
    assert_eq!(st["model"]["parallel"], 2);
    let tensors = st["plan"]["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty());
    let placements: std::collections::HashSet<&str> = tensors
        .iter()
        .map(|t| t["placement"].as_str().unwrap())
        .collect();
    assert!(
        placements.contains("gpu") || placements.contains("cpu"),
        "{placements:?}"
    );
    let gpu = st["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["role"] == "gpu")
        .expect("the simulated GPU");
    assert_eq!(gpu["budget_bytes"], 3_000_000);
    assert!(gpu["used_bytes"].as_u64().unwrap() <= 3_000_000);
    let rounds = st["rounds"].as_array().unwrap();
    // the prompt, then a decode round per token after the first
    assert!(rounds.len() >= 3, "{rounds:?}");
    assert!(rounds.iter().all(|r| r["tier"].as_u64().unwrap() >= 1));
    assert_eq!(rounds.last().unwrap()["decode_tokens"], 1);
    assert_eq!(st["requests"]["served"], 1);
}

#[test]
fn embeddings_are_the_sessions_pooled_states_as_floats_or_base64() {
    let server = Server::start(&qwen2(), &["--pooling", "last"]);
    let url = server.url("/v1/embeddings");
    let texts = [
        "Permission is hereby granted",
        "the software is provided as is",
    ];
    let (s, v) = post(&url, &json!({"input": texts, "model": "x"}).to_string());
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    // what the library gives for the same tokens
    let mut engine = ats_tests::cpu_engine(&qwen2(), 256, ats_core::device::KvType::F16);
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(data[i]["index"], i);
        let got: Vec<f32> = data[i]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let ids = engine
            .tokenizer()
            .unwrap()
            .encode(text, true, true)
            .unwrap();
        let want = engine
            .embed(&ids, ats_sched::session::Pooling::Last)
            .unwrap();
        assert_eq!(got.len(), want.len());
        assert!(ats_tests::max_abs_diff(&got, &want) < 1e-3, "input {i}");
    }
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 4);
    // base64: the same values as little-endian f32
    let (s, b) = post(
        &url,
        &json!({"input": texts[0], "encoding_format": "base64"}).to_string(),
    );
    assert_eq!(s, 200, "{b}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let floats: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // JSON text parses back to within an ulp of the f32 written
    let plain: Vec<f32> = data[0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert!(ats_tests::max_abs_diff(&floats, &plain) < 1e-7);
    for (bad, param) in [
        (json!({"input": []}), "input"),
        (json!({"input": "x", "dimensions": 8}), "dimensions"),
        (
            json!({"input": "x", "encoding_format": "int8"}),
            "encoding_format",
        ),
    ] {
        let (s, e) = post(&url, &bad.to_string());
        assert_eq!(s, 400, "{bad}: {e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }
}

#[test]
fn smollm2_answers_a_question() {
    let Some(model) = ats_tests::smollm2() else {
        return;
    };
    let server = Server::start(&model, &["-c", "512"]);
    let (status, v) = post(
        &server.url("/v1/completions"),
        r#"{"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}"#,
    );
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(text.starts_with(" Paris"), "{text:?}");
    let got = answer(&server, "Hello! Who are you?", 16);
    assert!(!got.trim().is_empty());
    assert_eq!(streamed_answer(&server, "Hello! Who are you?", 16), got);
}

/// The server's resident memory, from /proc (Linux).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[test]
fn load_of_200_requests_8_at_a_time_is_answered_or_cleanly_refused() {
    // a short queue, so that some of the load is refused with 503s
    let server = std::sync::Arc::new(Server::start(&qwen2(), &["--queue", "4"]));
    let prompts = ["permission is hereby granted", "copyright", "the software"];
    // the expected answers, and a warm server for the memory baseline
    let expected: Vec<String> = prompts.iter().map(|p| answer(&server, p, 4)).collect();
    let baseline = rss_kib(server.pid());
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let s = server.clone();
            let expected = expected.clone();
            std::thread::spawn(move || {
                let (mut ok, mut busy) = (0, 0);
                for i in 0..25 {
                    let k = (t + i) % 3;
                    let (status, v) = post(
                        &s.url("/v1/chat/completions"),
                        &chat_body(prompts[k], 4, false),
                    );
                    match status {
                        200 => {
                            assert_eq!(v["choices"][0]["message"]["content"], expected[k]);
                            ok += 1;
                        }
                        503 => {
                            assert_eq!(v["error"]["code"], "queue_full", "{v}");
                            busy += 1;
                        }
                        _ => panic!("status {status}: {v}"),
                    }
                }
                (ok, busy)
            })
        })
        .collect();
    let (mut ok, mut busy) = (0, 0);
    for h in handles {
        let (o, b) = h.join().unwrap();
        ok += o;
        busy += b;
    }
    assert_eq!(ok + busy, 200);
    assert!(ok > 0, "nothing answered");
    let h = wait_health(&server, |h| h["busy"] == false && h["queued"] == 0);
    assert_eq!(h["served"], 3 + ok);
    assert_eq!(h["failed"], 0);
    // memory comes back near where it was: nothing grows per request
    if let (Some(before), Some(after)) = (baseline, rss_kib(server.pid())) {
        eprintln!(
            "server RSS: {before} KiB warm, {after} KiB after 200 requests ({ok} answered, {busy} refused)"
        );
        assert!(
            after < before + 64 * 1024,
            "RSS {before} KiB -> {after} KiB"
        );
    }
    // and it still answers
    assert_eq!(answer(&server, prompts[0], 4), expected[0]);
}

/// gpt-oss's template takes `reasoning_effort` and its own kwargs
/// (`builtin_tools`) into its system message, in chat and in Responses
/// (`reasoning.effort`), which says the effort back.
#[test]
fn reasoning_effort_and_template_kwargs_reach_the_prompt() {
    let server = Server::start(&common::gpt_oss(), &[]);
    let tokens = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, v) = post(&server.url("/v1/chat/completions"), &body.to_string());
        assert_eq!(status, 200, "{v}");
        v["usage"]["prompt_tokens"].as_u64().unwrap()
    };
    let plain = tokens(json!({}));
    let python = tokens(json!({"chat_template_kwargs": {"builtin_tools": ["python"]}}));
    assert!(python > plain + 20, "{python} vs {plain}");
    // "medium" is the template's default: the same prompt
    assert_eq!(tokens(json!({"reasoning_effort": "medium"})), plain);
    let (status, v) = post(
        &server.url("/v1/chat/completions"),
        &json!({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"})
            .to_string(),
    );
    assert_eq!(
        (status, &v["error"]["param"]),
        (400, &json!("reasoning_effort"))
    );
    let (status, v) = post(
        &server.url("/v1/responses"),
        &json!({"input": "hi", "max_output_tokens": 1, "reasoning": {"effort": "low"}}).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["reasoning"]["effort"], "low");
    // the server's own variables, under the request's
    let kwargs = r#"{"builtin_tools": ["python"]}"#;
    let server = Server::start(&common::gpt_oss(), &["--chat-template-kwargs", kwargs]);
    let (_, v) = post(
        &server.url("/v1/chat/completions"),
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).to_string(),
    );
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(python));
    let (_, v) = post(
        &server.url("/v1/chat/completions"),
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "chat_template_kwargs": {"builtin_tools": []}})
        .to_string(),
    );
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(plain));
}
