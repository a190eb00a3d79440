//! The server through OpenAI's own Python client (`pip install openai
//! jsonschema`): the scripts in `tests/openai/` run against the real binary
//! on loopback, on SmolLM2 (structured output, logprobs, tools in the
//! generic format) and on the qwen2 fixture with a template that renders
//! tools (the Hermes format); the Responses API, embeddings, cached turns
//! and n choices on SmolLM2; images in chat and Responses on the Qwen2-VL
//! fixture; gpt-oss's harmony calls and reasoning on its fixture. Where python3, `openai` or `jsonschema` is
//! missing the tests say so and skip; `.ci/run` installs them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

/// Why the client tests cannot run here, if they cannot.
fn missing_python() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import openai, jsonschema"])
        .output();
    match out {
        Err(e) => Some(format!("python3 cannot run: {e}")),
        Ok(o) if !o.status.success() => Some(format!(
            "python3 lacks openai or jsonschema (pip install openai jsonschema): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai")
}

/// Runs `script` against `server`; fails with its output when a test fails.
fn run_script(server: &Server, script: &str) {
    run_script_env(server, script, &[]);
}

/// [`run_script`] with more environment variables for the script.
fn run_script_env(server: &Server, script: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let out = Command::new("python3")
        .arg(scripts().join(script))
        .envs(env.iter().copied())
        .env("ATS_BASE_URL", &server.base)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(scripts())
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{script}:\n{text}");
    assert!(
        out.status.success(),
        "{script} failed:\n{text}\nserver log:\n{}",
        server.log()
    );
}

fn smollm2_server() -> Option<Server> {
    if let Some(why) = missing_python() {
        eprintln!("skipped: {why}");
        return None;
    }
    let Some(model) = ats_tests::smollm2() else {
        panic!("SmolLM2 is not fetched: bash ../shared/scripts/fetch-smollm2.sh");
    };
    Some(Server::start(&model, &["-c", "1024"]))
}

#[test]
fn structured_output_on_smollm2() {
    let Some(server) = smollm2_server() else {
        return;
    };
    run_script(&server, "structured.py");
}

#[test]
fn logprobs_on_smollm2() {
    let Some(server) = smollm2_server() else {
        return;
    };
    run_script(&server, "logprobs.py");
}

#[test]
fn tools_in_the_generic_format_on_smollm2() {
    let Some(server) = smollm2_server() else {
        return;
    };
    run_script(&server, "tools.py");
    assert!(
        server.log().contains("tool calls in the generic"),
        "{}",
        server.log()
    );
}

/// `tools.py` on the qwen2 fixture with a template (`tests/data/NAME`)
/// whose tool-call format the log must name. The fixture's weights are
/// random: only the grammar makes its required calls well formed.
fn tools_on_the_fixture(template: &str, format: &str) {
    if let Some(why) = missing_python() {
        eprintln!("skipped: {why}");
        return;
    }
    let template = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(template);
    let server = Server::start(
        &common::qwen2(),
        &["--chat-template-file", template.to_str().unwrap()],
    );
    run_script(&server, "tools.py");
    let want = format!("tool calls in the {format}");
    assert!(server.log().contains(&want), "{}", server.log());
}

#[test]
fn tools_in_the_hermes_format_on_the_qwen2_fixture() {
    tools_on_the_fixture("hermes-tools.jinja", "hermes");
}

#[test]
fn tools_in_the_llama3_format_on_the_qwen2_fixture() {
    tools_on_the_fixture("llama3-tools.jinja", "llama3");
}

#[test]
fn responses_on_smollm2() {
    let Some(server) = smollm2_server() else {
        return;
    };
    run_script(&server, "responses.py");
}

#[test]
fn embeddings_cached_turns_and_n_choices_on_smollm2() {
    let Some(server) = smollm2_server() else {
        return;
    };
    run_script(&server, "serving.py");
}

#[test]
fn images_in_chat_and_responses_on_the_qwen2_vl_fixture() {
    if let Some(why) = missing_python() {
        eprintln!("skipped: {why}");
        return;
    }
    let image = common::fixture("vl_images/small.png");
    let want = common::vlm_answer("vl_images/small.png", "Describe the image.", 8);
    let mmproj = common::fixture("qwen2_vl/mmproj-qwen2_vl-f32.gguf");
    let server = Server::start(
        &common::fixture("qwen2_vl/qwen2_vl-f32.gguf"),
        &["--mmproj", mmproj.to_str().unwrap()],
    );
    run_script_env(
        &server,
        "vision.py",
        &[
            ("ATS_VLM_WANT", want.as_ref()),
            ("ATS_IMAGE", image.as_os_str()),
        ],
    );
}

/// `harmony.py` on the gpt-oss fixture, with the biases that steer its
/// random weights from reasoning to the required call.
#[test]
fn harmony_calls_and_reasoning_on_the_gpt_oss_fixture() {
    if let Some(why) = missing_python() {
        eprintln!("skipped: {why}");
        return;
    }
    let bias = serde_json::Value::Object(common::harmony_call_bias()).to_string();
    let server = Server::start(&common::gpt_oss(), &[]);
    run_script_env(&server, "harmony.py", &[("ATS_LOGIT_BIAS", bias.as_ref())]);
    assert!(
        server.log().contains("tool calls in the harmony"),
        "{}",
        server.log()
    );
}
