//! The server under load and faults, on loopback: 1,000 requests from 16
//! clients at once on the Qwen2-VL fixture (a simulated GPU with a small
//! budget), mixing text and image chats, streams, completions, clients that
//! go away mid-stream and bad requests. Every request is answered or
//! cleanly refused; every temperature-0 answer equals the same request run
//! alone; the ledger never passes the budget; the server's resident memory
//! does not grow in both halves of the run (a leak would).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::{EventStream, Server, get, post};
use serde_json::{Value, json};

const CLIENTS: usize = 16;
const REQUESTS: usize = 1000;
const WARM_UP: usize = 96;
const TEXTS: [&str; 6] = [
    "Hello there.",
    "What is the capital of France?",
    "Write a haiku about rain.",
    "Count from one to five.",
    "Explain gravity briefly.",
    "copyright",
];

/// What one request of the mix is.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A chat of text (variant), whole or streamed.
    Chat(usize, bool),
    /// A chat about an image, whole.
    Image(usize),
    /// A text completion.
    Completion(usize),
    /// A stream the client drops after its first chunk.
    Disconnect(usize),
    /// A request the server must refuse with a 4xx.
    Bad(usize),
}

/// Request `k` of the mix.
fn kind(k: usize) -> Kind {
    let v = k / 10;
    match k % 10 {
        0..=2 => Kind::Chat(v % TEXTS.len(), false),
        3 | 4 => Kind::Chat(v % TEXTS.len(), true),
        5 => Kind::Image(v % 2),
        6 => Kind::Completion(v % TEXTS.len()),
        7 => Kind::Disconnect(v % TEXTS.len()),
        _ => Kind::Bad(v),
    }
}

fn image_url(i: usize) -> String {
    let name = ["vl_images/small.png", "vl_images/large.png"][i];
    let bytes = std::fs::read(common::fixture(name)).unwrap();
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

fn chat_body(messages: Value, stream: bool) -> String {
    json!({"messages": messages, "temperature": 0, "max_tokens": 8, "ignore_eos": true,
           "stream": stream})
    .to_string()
}

fn text_messages(v: usize) -> Value {
    json!([{"role": "user", "content": TEXTS[v]}])
}

/// The answer to request `kind` (`None` for those with none to compare);
/// panics on anything but an answer or a clean refusal.
fn send(server: &Server, images: &[String], kind: Kind) -> Option<String> {
    let chat = server.url("/v1/chat/completions");
    match kind {
        Kind::Chat(v, false) => Some(content(&chat, &chat_body(text_messages(v), false))),
        Kind::Chat(v, true) => {
            let events = EventStream::open(&chat, &chat_body(text_messages(v), true)).all();
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            Some(
                events
                    .iter()
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .filter_map(|v| {
                        v["choices"][0]["delta"]["content"]
                            .as_str()
                            .map(String::from)
                    })
                    .collect(),
            )
        }
        Kind::Image(i) => {
            let m = json!([{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": images[i]}},
                {"type": "text", "text": "Describe the image."}]}]);
            Some(content(&chat, &chat_body(m, false)))
        }
        Kind::Completion(v) => {
            let body = json!({"prompt": TEXTS[v], "temperature": 0, "max_tokens": 8,
                              "ignore_eos": true});
            let (s, a) = post(&server.url("/v1/completions"), &body.to_string());
            assert_eq!(s, 200, "{a}");
            Some(a["choices"][0]["text"].as_str().unwrap().to_string())
        }
        Kind::Disconnect(v) => {
            let body = json!({"messages": text_messages(v), "max_tokens": 64, "stream": true});
            let mut s = EventStream::open(&chat, &body.to_string());
            assert!(s.next_data().is_some());
            None
        }
        Kind::Bad(b) => {
            let bodies = [
                r#"{"messages": [{"role": "user", "#.to_string(),
                json!({"messages": [{"role": "wizard", "content": "hi"}]}).to_string(),
                json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})
                    .to_string(),
                json!({"messages": [{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]})
                .to_string(),
            ];
            let (s, e) = post(&chat, &bodies[b % bodies.len()]);
            assert!((400..500).contains(&s), "{s}: {e}");
            assert!(e["error"]["message"].is_string(), "{e}");
            None
        }
    }
}

fn content(url: &str, body: &str) -> String {
    let (s, a) = post(url, body);
    assert_eq!(s, 200, "{a}");
    a["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The key under which a request's answer is compared.
fn key(k: Kind) -> Option<String> {
    match k {
        Kind::Chat(v, _) => Some(format!("chat {v}")),
        Kind::Image(i) => Some(format!("image {i}")),
        Kind::Completion(v) => Some(format!("completion {v}")),
        Kind::Disconnect(_) | Kind::Bad(_) => None,
    }
}

/// Runs requests `range` of the mix from `CLIENTS` threads; returns each
/// answer with its key.
fn run_mix(
    server: &Server,
    images: &[String],
    range: std::ops::Range<usize>,
) -> Vec<(String, String)> {
    let next = Arc::new(Mutex::new(range));
    let out = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for _ in 0..CLIENTS {
            s.spawn(|| {
                loop {
                    let Some(k) = next.lock().unwrap().next() else {
                        return;
                    };
                    let kind = kind(k);
                    if let (Some(answer), Some(key)) = (send(server, images, kind), key(kind)) {
                        out.lock().unwrap().push((key, answer));
                    }
                }
            });
        }
    });
    Arc::try_unwrap(out).unwrap().into_inner().unwrap()
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Every device's ledger within its budget; returns the GPU's peak.
fn check_ledger(server: &Server) -> u64 {
    let (_, st) = get(&server.url("/v1/ats/state"));
    let mut gpu_peak = 0;
    for d in st["devices"].as_array().unwrap() {
        if let Some(b) = d["budget_bytes"].as_u64() {
            let (used, peak) = (
                d["used_bytes"].as_u64().unwrap(),
                d["peak_bytes"].as_u64().unwrap(),
            );
            assert!(used <= b && peak <= b, "{d}");
            gpu_peak = peak;
        }
    }
    gpu_peak
}

#[test]
fn a_thousand_mixed_requests_from_sixteen_clients() {
    let mmproj = common::fixture("qwen2_vl/mmproj-qwen2_vl-f32.gguf");
    // One glibc arena: with one arena per client thread, RSS grew by up to
    // 2.1 MB (5.2%) over 1000 requests as late arenas were touched, which
    // failed CI with no leak; with one arena it grew 0-556 KiB under a CPU
    // burner, so a leak of 2 KiB per request still fails the check below.
    let server = Server::start_with_env(
        &common::fixture("qwen2_vl/qwen2_vl-f32.gguf"),
        &[
            "--mmproj",
            mmproj.to_str().unwrap(),
            "--sim-gpu",
            "--vram",
            "24M",
            "--parallel",
            "4",
            "--queue",
            "32",
        ],
        &[("MALLOC_ARENA_MAX", "1")],
    );
    let images = [image_url(0), image_url(1)];

    // each distinct request alone, one at a time: the reference answers
    let mut want = std::collections::HashMap::new();
    for k in 0..60 {
        let kind = kind(k);
        if let Some(key) = key(kind) {
            want.entry(key)
                .or_insert_with(|| send(&server, &images, kind).unwrap());
        }
    }

    run_mix(&server, &images, 0..WARM_UP);
    let rss_warm = rss_kib(server.pid());

    let watching = AtomicBool::new(true);
    let (answers, rss_half) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut polls = 0;
            while watching.load(Ordering::SeqCst) {
                check_ledger(&server);
                polls += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            polls
        });
        let half = WARM_UP + REQUESTS / 2;
        let mut answers = run_mix(&server, &images, WARM_UP..half);
        let rss_half = rss_kib(server.pid());
        answers.extend(run_mix(&server, &images, half..WARM_UP + REQUESTS));
        watching.store(false, Ordering::SeqCst);
        assert!(watcher.join().unwrap() > 0);
        (answers, rss_half)
    });

    for (key, answer) in &answers {
        assert_eq!(answer, &want[key], "{key} under load differs from alone");
    }
    let expected = (WARM_UP..WARM_UP + REQUESTS)
        .filter(|&k| key(kind(k)).is_some())
        .count();
    assert_eq!(answers.len(), expected);

    // every request ended: none left running, none failed in the engine
    let h = common::wait_health(&server, |h| h["running"] == 0 && h["queued"] == 0);
    assert_eq!(h["failed"], 0, "{h}");
    assert!(
        h["cancelled"].as_u64().unwrap() > 0,
        "disconnects cancel: {h}"
    );
    assert!(check_ledger(&server) > 0);

    let rss_after = rss_kib(server.pid());
    eprintln!(
        "{REQUESTS} requests: {} answers compared, {h}; resident {rss_warm} KiB after warm-up, {rss_half} KiB at half, {rss_after} KiB after",
        answers.len()
    );
    // A leak grows both halves. A new high-water mark (a rare burst of
    // concurrent requests; glibc keeps what it got) grows one: once it
    // grew one half by 4.7 MB (13%) on a loaded CI machine with no leak.
    // 2.5% of 34 MB is 870 KiB, so a leak of 2 KiB per request (1 MB a half)
    // still fails.
    let growth = (rss_half.saturating_sub(rss_warm)).min(rss_after.saturating_sub(rss_half));
    assert!(
        growth as f64 <= rss_warm as f64 * 0.025,
        "resident memory grew in both halves: {rss_warm} KiB after warm-up, {rss_half} KiB at half, {rss_after} KiB after"
    );
}
