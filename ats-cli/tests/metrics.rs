//! `GET /metrics` as a Prometheus scraper reads it: the text exposition
//! format parsed line by line, each family with its HELP and TYPE, and the
//! values those of the server's own state; and what it counts when
//! requests outgrow the KV pool (they give way, none fails).

mod common;

use std::collections::HashMap;

use common::{Server, get, post, qwen2};
use serde_json::json;

/// Samples by their name and label set as written (`name{a="b"}`).
struct Scrape {
    samples: HashMap<String, f64>,
    types: HashMap<String, String>,
}

/// Parses `text`, checking what the format requires of it.
fn parse(text: &str) -> Scrape {
    let mut samples = HashMap::new();
    let mut types = HashMap::new();
    let mut helped = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has a text");
            assert!(!help.trim().is_empty(), "{line}");
            helped.push(name.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert!(
                helped.last().map(String::as_str) == Some(name),
                "HELP before TYPE: {line}"
            );
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "{name} twice"
            );
        } else {
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let (key, value) = line.rsplit_once(' ').expect("a sample has a value");
            let name = key.split('{').next().unwrap();
            assert!(name.starts_with("ats_"), "{line}");
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{line}"
            );
            assert!(types.contains_key(name), "a sample before its TYPE: {line}");
            if types[name] == "counter" {
                assert!(
                    name.ends_with("_total"),
                    "a counter's name ends in _total: {name}"
                );
            }
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
            assert!(samples.insert(key.to_string(), v).is_none(), "{key} twice");
        }
    }
    Scrape { samples, types }
}

impl Scrape {
    fn value(&self, key: &str) -> f64 {
        *self
            .samples
            .get(key)
            .unwrap_or_else(|| panic!("no sample {key}"))
    }
}

fn scrape(server: &Server) -> Scrape {
    let mut r = common::agent()
        .get(&server.url("/metrics"))
        .call()
        .expect("answered");
    assert_eq!(r.status(), 200);
    let ct = r
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    parse(&r.body_mut().read_to_string().unwrap())
}

#[test]
fn metrics_count_requests_tokens_the_pool_and_each_ledger_region() {
    let server = Server::start(&qwen2(), &["--sim-gpu", "--vram", "3M", "--parallel", "2"]);
    let before = scrape(&server);
    assert_eq!(before.value("ats_requests_served_total"), 0.0);
    assert_eq!(before.value("ats_parallel_sequences"), 2.0);
    assert_eq!(before.value("ats_queue_capacity"), 16.0);
    assert_eq!(before.types["ats_requests_running"], "gauge");

    let body = json!({
        "messages": [{"role": "user", "content": "copyright"}],
        "temperature": 0,
        "max_tokens": 3,
    });
    let (s, v) = post(&server.url("/v1/chat/completions"), &body.to_string());
    assert_eq!(s, 200, "{v}");
    let (s, bad) = post(&server.url("/v1/chat/completions"), "{\"messages\": 3}");
    assert_eq!(s, 400, "{bad}");

    let m = scrape(&server);
    let usage = &v["usage"];
    assert_eq!(m.value("ats_requests_served_total"), 1.0);
    assert_eq!(
        m.value("ats_requests_failed_total"),
        0.0,
        "a 400 is no engine failure"
    );
    assert_eq!(
        m.value("ats_requests_preempted_total"),
        0.0,
        "one request never gives way"
    );
    assert_eq!(m.value("ats_requests_running"), 0.0);
    assert_eq!(m.value("ats_requests_queued"), 0.0);
    assert_eq!(
        m.value("ats_prompt_tokens_total"),
        usage["prompt_tokens"].as_f64().unwrap()
    );
    assert_eq!(
        m.value("ats_generated_tokens_total"),
        usage["completion_tokens"].as_f64().unwrap()
    );

    let (_, st) = get(&server.url("/v1/ats/state"));
    let pool = &st["pool"];
    assert_eq!(
        m.value("ats_kv_pool_blocks{state=\"total\"}"),
        pool["blocks"].as_f64().unwrap()
    );
    assert_eq!(
        m.value("ats_kv_pool_blocks{state=\"cached\"}"),
        pool["cached"].as_f64().unwrap()
    );
    assert_eq!(
        m.value("ats_kv_pool_block_tokens"),
        pool["block_tokens"].as_f64().unwrap()
    );
    for d in st["devices"].as_array().unwrap() {
        let id = format!(
            "role=\"{}\",device=\"{}\"",
            d["role"].as_str().unwrap(),
            d["device"].as_str().unwrap()
        );
        let mut sum = 0.0;
        for r in d["regions"].as_array().unwrap() {
            let key = format!(
                "ats_memory_used_bytes{{{id},region=\"{}\"}}",
                r[0].as_str().unwrap()
            );
            assert_eq!(m.value(&key), r[1].as_f64().unwrap(), "{key}");
            sum += m.value(&key);
        }
        assert_eq!(
            sum,
            d["used_bytes"].as_f64().unwrap(),
            "regions add up to {id}'s use"
        );
        let budget = format!("ats_memory_budget_bytes{{{id}}}");
        match d["budget_bytes"].as_u64() {
            Some(b) => assert_eq!(m.value(&budget), b as f64),
            None => assert!(!m.samples.contains_key(&budget)),
        }
        assert!(m.value(&format!("ats_memory_peak_bytes{{{id}}}")) >= sum);
    }
    assert_eq!(
        m.value("ats_memory_budget_bytes{role=\"gpu\",device=\"sim-gpu\"}"),
        3e6
    );
    let replans = st["replans"]["replans"].as_f64().unwrap();
    assert_eq!(m.value("ats_replans_total{outcome=\"changed\"}"), replans);
    assert_eq!(m.types["ats_replans_total"], "counter");
}

#[test]
fn requests_outgrowing_the_pool_give_way_and_each_answers_as_alone() {
    // A pool of 4 blocks (the context, 128 tokens) for 4 requests at once
    // whose answers take 3 blocks each: the newest give way and resume.
    let server = Server::start(&qwen2(), &["-c", "128", "--parallel", "4", "--queue", "64"]);
    let texts = ["copyright notice", "hello there", "the license", "warranty"];
    let body = |i: usize| {
        json!({
            "messages": [{"role": "user", "content": texts[i % 4]}],
            "temperature": 0,
            "max_tokens": 50 + (i % 3) * 5,
            "ignore_eos": true,
        })
        .to_string()
    };
    let answer = |i: usize| {
        let (s, v) = post(&server.url("/v1/chat/completions"), &body(i));
        assert_eq!(s, 200, "request {i}: {v}");
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // each distinct request alone first
    let alone: Vec<String> = (0..12).map(answer).collect();
    let together: Vec<(usize, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|t| {
                let answer = &answer;
                s.spawn(move || {
                    (0..3)
                        .map(|k| (t + 12 * k, answer(t + 12 * k)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client"))
            .collect()
    });
    for (i, got) in &together {
        assert_eq!(got, &alone[i % 12], "request {i}: its answer alone");
    }
    let m = scrape(&server);
    assert_eq!(m.value("ats_requests_failed_total"), 0.0);
    assert!(
        m.value("ats_requests_preempted_total") >= 1.0,
        "4 answers of 3 blocks in a pool of 4"
    );
}
