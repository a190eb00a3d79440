//! Helpers for the tests that run the real `ats-cli` binary: fixture paths,
//! running a command, and a server on a free loopback port.

#![allow(dead_code)] // each test file uses a different part

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_ats-cli");

/// A fixture file under `../shared/fixtures`.
pub fn fixture(rel: &str) -> PathBuf {
    let p = ats_tests::fixtures().join(rel);
    assert!(p.exists(), "missing fixture {}", p.display());
    p
}

/// The qwen2 fixture: a chat template, a tokenizer, 5.8 MB.
pub fn qwen2() -> PathBuf {
    fixture("qwen2/qwen2-f32.gguf")
}

/// Runs `ats-cli args...` with stdin closed.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// Runs `ats-cli args...` with `input` on stdin.
pub fn run_with_input(args: &[&str], input: &str) -> Output {
    run_with_input_env(args, input, &[])
}

/// [`run_with_input`] with extra environment variables.
pub fn run_with_input_env(args: &[&str], input: &str, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 output")
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A running `ats-cli serve`, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `ats-cli serve -m model --port 0 -t 1 extra...` and waits
    /// until it listens.
    pub fn start(model: &std::path::Path, extra: &[&str]) -> Server {
        Self::start_with_env(model, extra, &[])
    }

    /// [`Server::start`] with extra environment variables for the server.
    pub fn start_with_env(model: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(BIN)
            .envs(env.iter().copied())
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args(["--port", "0", "-t", "1"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let mut base = None;
        let mut line = String::new();
        while base.is_none() {
            line.clear();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                panic!(
                    "the server stopped before listening:\n{}",
                    log.lock().unwrap()
                );
            }
            log.lock().unwrap().push_str(&line);
            if let Some(at) = line.find("listening on ") {
                base = Some(line[at + "listening on ".len()..].trim().to_string());
            }
        }
        // keep draining the log so the server never blocks on a full pipe
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut buf = String::new();
            while err.read_line(&mut buf).unwrap_or(0) > 0 {
                sink.lock().unwrap().push_str(&buf);
                buf.clear();
            }
        });
        Server {
            child,
            base: base.unwrap(),
            log,
        }
    }

    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP agent that returns error statuses as responses, with a generous
/// overall timeout so a hung server fails the test instead of hanging it.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into()
}

/// POSTs a JSON body; returns the status and the parsed JSON answer.
pub fn post(url: &str, body: &str) -> (u16, serde_json::Value) {
    let mut r = agent()
        .post(url)
        .content_type("application/json")
        .send(body)
        .expect("the request is answered");
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .unwrap();
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?} (status {status})"));
    (status, v)
}

/// GETs a JSON document.
pub fn get(url: &str) -> (u16, serde_json::Value) {
    let mut r = agent().get(url).call().expect("the request is answered");
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

/// A streamed (server-sent events) answer being read.
pub struct EventStream {
    reader: BufReader<Box<dyn Read + Send>>,
}

impl EventStream {
    /// POSTs `body` and expects a 200 event stream.
    pub fn open(url: &str, body: &str) -> EventStream {
        let r = agent()
            .post(url)
            .content_type("application/json")
            .send(body)
            .expect("the request is answered");
        assert_eq!(r.status().as_u16(), 200);
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        EventStream {
            reader: BufReader::new(Box::new(r.into_body().into_reader())),
        }
    }

    /// The next `data:` payload (`None` at the end of the stream).
    pub fn next_data(&mut self) -> Option<String> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some(d) = line.strip_prefix("data:") {
                return Some(d.trim().to_string());
            }
        }
    }

    /// Every payload up to the end, `[DONE]` included.
    pub fn all(mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(d) = self.next_data() {
            out.push(d);
        }
        out
    }
}

/// Polls `/health` until `pred` holds (at most about a minute).
pub fn wait_health(
    server: &Server,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    for _ in 0..1200 {
        let (_, h) = get(&server.url("/health"));
        if pred(&h) {
            return h;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "health never reached the expected state; log:\n{}",
        server.log()
    );
}

/// What `ats-cli vlm` answers (greedy) for one image and a prompt on the
/// Qwen2-VL fixture.
pub fn vlm_answer(image: &str, prompt: &str, n: usize) -> String {
    let out = run(&[
        "vlm",
        "-m",
        fixture("qwen2_vl/qwen2_vl-f32.gguf").to_str().unwrap(),
        "--mmproj",
        fixture("qwen2_vl/mmproj-qwen2_vl-f32.gguf")
            .to_str()
            .unwrap(),
        "--image",
        fixture(image).to_str().unwrap(),
        "-p",
        prompt,
        "-n",
        &n.to_string(),
        "--temp",
        "0",
        "--ignore-eos",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim_end_matches('\n').to_string()
}

/// The gpt-oss fixture (harmony's chat format and tokens).
pub fn gpt_oss() -> PathBuf {
    ats_tests::repo_fixtures().join("gpt-oss/gpt-oss-f32.gguf")
}

/// `logit_bias` that steers the gpt-oss fixture's random weights through a
/// required call's grammar straight to the call: the tokens that begin
/// "analysis" banned, a note ended at once, and "commentary" made a call
/// rather than a note (the grammar lets a model reason first, which the
/// fixture would do until the token limit).
pub fn harmony_call_bias() -> serde_json::Map<String, serde_json::Value> {
    let tok = gpt_oss_tokenizer();
    let mut bias = banned_prefixes(&tok, &["analysis"]);
    let id = |t: &str| tok.token_id(t).unwrap().to_string();
    bias.insert(id("<|end|>"), 100.into());
    bias.insert(id("<|message|>"), (-100).into());
    bias
}

/// `logit_bias` that steers the gpt-oss fixture past the notes a harmony
/// answer grammar allows, straight to its `final` message.
pub fn harmony_final_bias() -> serde_json::Map<String, serde_json::Value> {
    banned_prefixes(&gpt_oss_tokenizer(), &["analysis", "commentary"])
}

fn gpt_oss_tokenizer() -> ats_core::Tokenizer {
    let gguf = ats_core::gguf::GgufFile::open(gpt_oss()).unwrap();
    ats_core::Tokenizer::from_gguf(&gguf.metadata).unwrap()
}

/// A bias of -100 on every token that begins one of `words`.
fn banned_prefixes(
    tok: &ats_core::Tokenizer,
    words: &[&str],
) -> serde_json::Map<String, serde_json::Value> {
    let mut bias = serde_json::Map::new();
    for id in 0..tok.vocab_size() as u32 {
        let piece = tok.token_to_piece(id).unwrap_or_default();
        if !piece.is_empty() && words.iter().any(|w| w.as_bytes().starts_with(piece)) {
            bias.insert(id.to_string(), (-100).into());
        }
    }
    bias
}
