//! The real `ats-cli` binary on the fixture models and SmolLM2: answers,
//! JSON reports, exit codes.

mod common;

use common::{qwen2, run, run_with_input, stderr, stdout};
use serde_json::Value;

fn model() -> String {
    qwen2().to_str().unwrap().to_string()
}

#[test]
fn run_prints_the_greedy_continuation() {
    // the library's greedy continuation (checked against Hugging Face in the
    // workspace tests) is what the binary prints
    let prompt = "Permission is hereby granted, free of charge";
    let mut engine = ats_tests::cpu_engine(&qwen2(), 256, ats_core::device::KvType::F32);
    let ids = engine
        .tokenizer()
        .unwrap()
        .encode(prompt, true, true)
        .unwrap();
    let params = ats_sched::session::GenParams {
        max_tokens: 16,
        sampler: ats_core::SamplerConfig::greedy(),
        stop: Vec::new(),
        ignore_eos: true,
        ..Default::default()
    };
    let want = engine.generate(&ids, &params, &mut |_| true).unwrap();
    assert_eq!(want.tokens.len(), 16);
    let m = model();
    let args = [
        "run",
        "-m",
        &m,
        "-p",
        prompt,
        "-n",
        "16",
        "--temp",
        "0",
        "--ignore-eos",
        "--kv-type",
        "f32",
        "-t",
        "1",
        "-c",
        "256",
    ];
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{}\n", want.text));
    // the portable kernels, forced, give the same bits and so the same text
    let scalar = run(&[&args[..], &["--isa", "scalar"]].concat());
    assert!(scalar.status.success(), "{}", stderr(&scalar));
    assert_eq!(stdout(&scalar), stdout(&out));
    // the file's mapping holds the same bytes as the resident copy the
    // binary reads by default (the library above maps it)
    let mapped = run(&[&args[..], &["--mmap"]].concat());
    assert!(mapped.status.success(), "{}", stderr(&mapped));
    assert_eq!(stdout(&mapped), stdout(&out));
    // the timings block and the memory line
    let err = stderr(&out);
    for want in [
        "load time",
        "prompt eval",
        "eval time",
        "time to first token",
        "memory cpu",
    ] {
        assert!(err.contains(want), "{want:?} missing from:\n{err}");
    }
}

#[test]
fn eval_writes_the_reference_logits() {
    let reference = ats_tests::Reference::open("qwen2/reference.safetensors");
    let ids: Vec<String> = reference
        .ids("input_ids")
        .iter()
        .map(|i| i.to_string())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("logits.safetensors");
    let out = run(&[
        "-q",
        "eval",
        "-m",
        &model(),
        "--ids",
        &ids.join(","),
        "-o",
        out_path.to_str().unwrap(),
        "--kv-type",
        "f32",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "-q keeps standard error empty");
    let bytes = std::fs::read(&out_path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("logits").unwrap();
    assert_eq!(t.shape(), [24, 512]);
    let got: Vec<f32> = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let (want, _) = reference.f32("logits");
    let diff = ats_tests::max_abs_diff(&got, &want);
    assert!(diff < 1e-3, "max abs diff {diff}");
}

#[test]
fn plan_json_fits_the_budget() {
    let out = run(&[
        "plan",
        "-m",
        &model(),
        "--vram",
        "3M",
        "--sim-gpu",
        "--json",
        "-c",
        "256",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["budget_bytes"], 3_000_000);
    assert!(v["peak_bytes"].as_u64().unwrap() <= 3_000_000);
    let tensors = v["tensors"].as_array().unwrap();
    // 2 layers of 12 tensors (q/k/v with biases), embeddings, output norm, output
    assert!(tensors.len() >= 24, "{} tensors", tensors.len());
    assert!(!v["tiers"].as_array().unwrap().is_empty());
}

#[test]
fn bench_runs_each_test_at_the_depth_asked() {
    // the context holds the depth and the longer test, nothing more
    let out = run(&[
        "bench",
        "-m",
        &model(),
        "-p",
        "8",
        "-n",
        "4",
        "-d",
        "24",
        "-r",
        "1",
        "--json",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pp8 @ d24", "tg4 @ d24"]);
    assert_eq!(v["n_depth"], 24);
    // the decode breakdown covers the timed tokens only, not the warm-up
    assert_eq!(v["decode_breakdown"]["rounds"], 4);
    assert_eq!(v["decode_breakdown"]["devices"][0]["device"], "cpu");
    // a context one token short of depth + test is an error, not a silent truncation
    let out = run(&[
        "bench",
        "-m",
        &model(),
        "-p",
        "8",
        "-n",
        "0",
        "-d",
        "24",
        "-r",
        "1",
        "-c",
        "31",
        "-t",
        "1",
    ]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("do not fit the context"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bench_json_reports_both_tests() {
    let out = run(&[
        "bench",
        "-m",
        &model(),
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "2",
        "--json",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let tests = v["tests"].as_array().unwrap();
    let names: Vec<&str> = tests.iter().map(|t| t["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["pp16", "tg4"]);
    for t in tests {
        assert_eq!(t["samples_ts"].as_array().unwrap().len(), 2);
        assert!(t["avg_ts"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(v["repetitions"], 2);
    assert!(
        v["memory"].as_array().unwrap()[0]["peak_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn bench_parallel_reports_each_batch_and_its_plan() {
    let out = run(&[
        "bench",
        "-m",
        &model(),
        "-p",
        "12",
        "-n",
        "3",
        "-r",
        "1",
        "--parallel",
        "1,3",
        "--json",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let tests = v["tests"].as_array().unwrap();
    let batches: Vec<u64> = tests
        .iter()
        .map(|t| t["parallel"].as_u64().unwrap())
        .collect();
    assert_eq!(batches, [1, 3]);
    for t in tests {
        assert!(t["pp_ts"].as_f64().unwrap() > 0.0);
        assert!(t["tg_ts"].as_f64().unwrap() > 0.0);
        assert_eq!(t["tg_samples_ts"].as_array().unwrap().len(), 1);
    }
    // one decode token per sequence: a batch of 3 runs the plan of tier 4 (the smallest holding it)
    assert_eq!(tests[0]["tg_tier"], 1);
    assert_eq!(tests[1]["tg_tier"], 4);
    // three sequences of 15 tokens, each in whole KV blocks
    assert!(v["n_ctx"].as_u64().unwrap() >= 3 * 15);
    let bad = run(&["bench", "-m", &model(), "--parallel", "0,2"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

#[test]
fn synth_takes_a_donors_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("tiny-with-vocab.gguf");
    let out = run(&[
        "synth",
        "--preset",
        "tiny",
        "--vocab-from",
        &model(),
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let donor = ats_core::spec::ModelSpec::open(qwen2()).unwrap();
    let synth = ats_core::spec::ModelSpec::open(&out_path).unwrap();
    assert_eq!(synth.hp.n_vocab, donor.hp.n_vocab);
    let text = "Permission is hereby granted";
    let ids = |s: &ats_core::spec::ModelSpec| {
        ats_core::tokenizer::Tokenizer::from_gguf(&s.gguf.metadata)
            .unwrap()
            .encode(text, true, true)
            .unwrap()
    };
    assert_eq!(ids(&synth), ids(&donor));
    // and it runs from text
    let run_out = run(&[
        "run",
        "-m",
        out_path.to_str().unwrap(),
        "-p",
        text,
        "-n",
        "2",
        "--temp",
        "0",
        "-t",
        "1",
        "-c",
        "64",
    ]);
    assert!(run_out.status.success(), "{}", stderr(&run_out));
}

#[test]
fn inspect_describes_the_file() {
    let out = run(&["inspect", &model()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = stdout(&out);
    assert!(s.contains("architecture:  qwen2"), "{s}");
    assert!(s.contains("chat template: yes"), "{s}");
    assert!(s.contains("runnable:      yes"), "{s}");
}

#[test]
fn chat_answers_like_run_and_forgets_on_reset() {
    let m = model();
    let reference = run(&[
        "-q",
        "run",
        "-m",
        &m,
        "-p",
        "hello there",
        "--chat",
        "-n",
        "8",
        "--temp",
        "0",
        "-t",
        "1",
    ]);
    assert!(reference.status.success(), "{}", stderr(&reference));
    let answer = stdout(&reference);
    // two turns, /reset, the first question again: the same answer twice
    let out = run_with_input(
        &["chat", "-m", &m, "-n", "8", "--temp", "0", "-t", "1"],
        "hello there\nand then?\n/reset\n/nonsense\n/image /no/such.png\nhello there\n/exit\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // answers may hold newlines: the first and the last are the reference
    let s = stdout(&out);
    assert!(s.starts_with(&answer), "{s:?} vs {answer:?}");
    assert!(s.ends_with(&answer), "{s:?} vs {answer:?}");
    assert!(
        s.len() > 2 * answer.len(),
        "a second answer in between: {s:?}"
    );
    let err = stderr(&out);
    assert!(err.contains("conversation forgotten"), "{err}");
    assert!(err.contains("unknown command /nonsense"), "{err}");
    assert!(err.contains("cannot read /no/such.png"), "{err}");
    assert!(err.contains("[prompt "), "a speed line per turn: {err}");
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    let m = model();
    let cases: &[&[&str]] = &[
        &[],
        &["run"],
        &["run", "-m", &m, "--no-such-flag"],
        &["run", "-m", &m],
        &["run", "-m", &m, "-p", "x", "-n", "0"],
        &["run", "-m", &m, "-p", "x", "--temp", "warm"],
        &["run", "-m", &m, "-p", "x", "-t", "0"],
        &[
            "run",
            "-m",
            &m,
            "-p",
            "x",
            "--chat-template-kwargs",
            "{\"a\": 1}",
        ],
        &[
            "run",
            "-m",
            &m,
            "-p",
            "x",
            "--chat",
            "--chat-template-kwargs",
            "[1]",
        ],
        &[
            "run",
            "-m",
            &m,
            "-p",
            "x",
            "--chat",
            "--chat-template-kwargs",
            "{\"messages\": 1}",
        ],
        &["serve", "-m", &m, "--chat-template-kwargs", "{"],
        &["bench", "-m", &m, "-r", "0"],
        &["eval", "-m", &m, "-o", "/dev/null"],
        &["serve", "-m", &m, "--port", "70000"],
        &["serve", "-m", &m, "--host", "not an address"],
        &["synth", "--preset", "nope", "-o", "/dev/null"],
        &["run", "-m", &m, "-p", "x", "--isa", "sse4"],
        &["--log-format", "xml", "inspect", &m],
    ];
    for args in cases {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).trim().is_empty(), "{args:?} says nothing");
    }
}

#[test]
fn runtime_errors_exit_1_and_help_exits_0() {
    let out = run(&["run", "-m", "/no/such/model.gguf", "-p", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot load /no/such/model.gguf"),
        "{}",
        stderr(&out)
    );
    // an instruction set ATS knows but this CPU cannot run
    if cfg!(target_arch = "x86_64") {
        let out = run(&["run", "-m", &model(), "-p", "x", "--isa", "neon"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("neon is not available"),
            "{}",
            stderr(&out)
        );
    }
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let s = stdout(&out);
    for want in ["Examples:", "serve", "chat", "Exit codes"] {
        assert!(s.contains(want), "{want:?} missing from --help");
    }
    let out = run(&["serve", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("/v1/chat/completions"));
}

#[test]
fn json_logs_are_one_object_per_line() {
    let out = run(&[
        "--log-format",
        "json",
        "run",
        "-m",
        &model(),
        "-p",
        "hi",
        "-n",
        "2",
        "-t",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "timings" && l["fields"]["ttft_ms"].is_number()),
        "{err}"
    );
    let out = run(&[
        "--log-format",
        "json",
        "run",
        "-m",
        "/no/such.gguf",
        "-p",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let last: Value = serde_json::from_str(stderr(&out).lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert_eq!(last["fields"]["exit_code"], 1);
}

#[test]
fn smollm2_knows_the_capital_of_france() {
    let Some(path) = ats_tests::smollm2() else {
        return;
    };
    let out = run(&[
        "-q",
        "run",
        "-m",
        path.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "-n",
        "8",
        "--temp",
        "0",
        "-c",
        "256",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(" Paris"), "{}", stdout(&out));
    let out = run(&["inspect", path.to_str().unwrap()]);
    assert!(stdout(&out).contains("architecture:  llama"));
    let out = run(&[
        "bench",
        "-m",
        path.to_str().unwrap(),
        "-p",
        "32",
        "-n",
        "4",
        "-r",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["tests"].as_array().unwrap().len(), 2);
}

#[test]
fn chat_takes_images_and_reads_the_last_turn_from_the_cache() {
    let m = common::fixture("qwen2_vl/qwen2_vl-f32.gguf");
    let mmproj = common::fixture("qwen2_vl/mmproj-qwen2_vl-f32.gguf");
    let image = common::fixture("vl_images/small.png");
    let (m, mmproj, image) = (
        m.to_str().unwrap(),
        mmproj.to_str().unwrap(),
        image.to_str().unwrap(),
    );
    let common_args = ["-n", "6", "--temp", "0", "--ignore-eos", "-t", "1"];
    let mut vlm_args = vec!["-q", "vlm", "-m", m, "--mmproj", mmproj, "--image", image];
    vlm_args.extend(["-p", "Describe the image."]);
    vlm_args.extend(common_args);
    let reference = run(&vlm_args);
    assert!(reference.status.success(), "{}", stderr(&reference));
    let want = stdout(&reference);
    let mut chat_args = vec!["chat", "-m", m, "--mmproj", mmproj];
    chat_args.extend(common_args);
    let out = run_with_input(
        &chat_args,
        &format!("/image {image}\nDescribe the image.\nAnd the colours?\n/exit\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let s = stdout(&out);
    assert!(s.starts_with(&want), "{s:?} vs vlm's {want:?}");
    let err = stderr(&out);
    assert!(err.contains("attached to the next message"), "{err}");
    // the second turn finds the first (image included) in the KV pool
    let cached: Vec<usize> = err
        .lines()
        .filter_map(|l| {
            l.split_once(" tokens (")?
                .1
                .split_once(" cached")?
                .0
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(cached.len(), 2, "{err}");
    assert!(cached[0] == 0 && cached[1] > 0, "{cached:?}: {err}");
}

#[test]
fn ctrl_c_in_chat_stops_the_answer_not_the_program() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    // an answer that would run for 16k tokens unless stopped
    let mut child = Command::new(common::BIN)
        .args([
            "chat",
            "-m",
            &model(),
            "-c",
            "16384",
            "--ignore-eos",
            "--temp",
            "0",
            "-t",
            "1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let err_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    stdin.write_all(b"go on\n").unwrap();
    stdin.flush().unwrap();
    // the answer has started once text arrives
    let mut first = [0u8; 16];
    let n = stdout.read(&mut first).unwrap();
    assert!(n > 0, "no answer text");
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // the answer stops...
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines.recv_timeout(left).expect("the answer never stopped");
        if line.contains("(stopped)") {
            break;
        }
    }
    // ...and the program still reads commands
    stdin.write_all(b"/reset\n/exit\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let err = err_reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("conversation forgotten"), "{err}");
    assert!(
        err.contains("[prompt "),
        "the stopped turn's speed line: {err}"
    );
}

/// `--chat-template-kwargs` reaches the template in `run --chat` (gpt-oss's
/// `builtin_tools` lengthens its system message).
#[test]
fn chat_template_kwargs_reach_run_chat() {
    let model = common::gpt_oss();
    let dir = tempfile::tempdir().unwrap();
    let prompt_tokens = |extra: &[&str]| {
        let path = dir.path().join("t.json");
        let mut args = vec![
            "run",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "hi",
            "--chat",
            "-n",
            "1",
        ];
        args.extend_from_slice(&["--timings-json", path.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let out = run(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let t: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        t["prompt_tokens"].as_u64().unwrap()
    };
    let plain = prompt_tokens(&[]);
    let python = prompt_tokens(&[
        "--chat-template-kwargs",
        "{\"builtin_tools\": [\"python\"]}",
    ]);
    assert!(python > plain + 20, "{python} vs {plain}");
}

/// `run --chat` on a model that reasons in `<think>` blocks: with the
/// block opened by the template (`enable_thinking`), the answer is reasoning
/// (the random weights never close it here) and goes to standard error,
/// leaving standard output empty; with the block closed by the template,
/// the answer is on standard output.
#[test]
fn run_chat_prints_a_think_block_on_standard_error() {
    let model = ats_tests::repo_fixtures().join("glm4moe/glm4moe-f32.gguf");
    let model = model.to_str().unwrap();
    let answer = |thinking: bool| {
        let kwargs = format!("{{\"enable_thinking\": {thinking}}}");
        let out = run(&[
            "run",
            "-m",
            model,
            "--chat",
            "-p",
            "2+2?",
            "-n",
            "6",
            "--temp",
            "0",
            "-t",
            "1",
            "--chat-template-kwargs",
            &kwargs,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        (stdout(&out), stderr(&out))
    };
    let (out, err) = answer(true);
    assert_eq!(out.trim(), "", "the reasoning stays off standard output");
    assert!(!err.trim().is_empty(), "the reasoning is on standard error");
    let (plain, _) = answer(false);
    assert!(!plain.trim().is_empty(), "the answer is on standard output");
}
