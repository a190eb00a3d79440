//! The command-line rows of the bad-input matrix (`docs/reliability.md`):
//! the `ats-cli` binary exits with status 1 and one `error:` line that names
//! the problem, never a panic.

use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ats-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs `ats-cli` and returns (exit code, stderr).
fn ats(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ats-cli"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    (out.status.code(), err)
}

#[test]
fn a_non_utf8_prompt_file_is_named() {
    let p = scratch("prompt.txt");
    std::fs::write(&p, b"Hello \xff\xfe world").unwrap();
    let model = fixtures().join("llama/llama-f32.gguf");
    let (code, err) = ats(&[
        "run",
        "-m",
        model.to_str().unwrap(),
        "-f",
        p.to_str().unwrap(),
        "-n",
        "1",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("prompt.txt") && err.contains("not UTF-8") && err.contains("offset 6"),
        "{err}"
    );
}

#[test]
fn a_truncated_or_foreign_model_file_is_named() {
    let good = std::fs::read(fixtures().join("llama/llama-f32.gguf")).unwrap();
    let cut = scratch("cut.gguf");
    std::fs::write(&cut, &good[..good.len() / 2]).unwrap();
    let png = fixtures().join("vl_images/small.png");
    for (model, want) in [
        (cut.to_str().unwrap(), "cut.gguf"),
        (png.to_str().unwrap(), "not a GGUF file"),
        ("/nonexistent/model.gguf", "model.gguf"),
    ] {
        let (code, err) = ats(&["run", "-m", model, "-p", "hi", "-n", "1"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(want), "{model}: {err}");
    }
}

#[test]
fn bad_sizes_and_counts_are_refused() {
    let model = fixtures().join("llama/llama-f32.gguf");
    let m = model.to_str().unwrap();
    let (code, err) = ats(&["run", "-m", m, "-p", "hi", "--vram", "lots"]);
    assert_eq!(code, Some(2), "clap usage error: {err}");
    assert!(err.contains("lots"), "{err}");
    let (code, err) = ats(&["run", "-m", m, "-p", "hi", "-n", "0"]);
    assert_eq!(code, Some(2), "a usage error: {err}");
    assert!(err.contains("-n must be at least 1"), "{err}");
    let (code, err) = ats(&["run", "-m", m, "-p", "hi", "--workload", "512"]);
    assert_eq!(code, Some(2), "clap usage error: {err}");
    assert!(err.contains("512,128"), "{err}");
    let (code, err) = ats(&["run", "-m", m, "-p", "hi", "--workload", "1,99999999999"]);
    assert_eq!(code, Some(2), "clap usage error: {err}");
    assert!(err.contains("at most"), "{err}");
}

#[test]
fn contexts_beyond_positions_or_memory_are_errors_not_aborts() {
    let model = fixtures().join("llama/llama-f32.gguf");
    let m = model.to_str().unwrap();
    // beyond what i32 positions address: a usage error before anything loads
    for args in [
        &["run", "-m", m, "-c", "1000000000000", "-p", "hi", "-n", "1"][..],
        &["plan", "-m", m, "-c", "0"][..],
        &[
            "bench",
            "-m",
            m,
            "-d",
            "1000000000000",
            "-n",
            "1",
            "-r",
            "1",
        ][..],
        &[
            "bench",
            "-m",
            m,
            "-p",
            "18446744073709551615",
            "-n",
            "0",
            "-r",
            "1",
        ][..],
    ] {
        let (code, err) = ats(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("2147483647"), "{args:?}: {err}");
    }
    // addressable but larger than any memory (hundreds of GB of KV cache):
    // the allocation is refused with the bytes and the buffer named; only a
    // kernel that grants every request (overcommit mode 1) lets it run
    let (code, err) = ats(&["run", "-m", m, "-c", "2147483647", "-p", "hi", "-n", "1"]);
    let grants_all =
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|s| s.trim() == "1");
    if !(grants_all && code == Some(0)) {
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("cannot allocate") && err.contains("kv."),
            "{err}"
        );
    }
}
