//! `--vram` on a machine without a usable GPU: the run goes on on the CPU
//! and says so in one line on stderr, even with `-q`; `--require-gpu` makes
//! it an error instead. (On a machine with a GPU these say why they skip.)

mod common;

use common::{qwen2, run, stderr, stdout};

/// Whether this machine has a GPU the CLI can use (then there is no fallback to see).
fn has_gpu() -> bool {
    let o = run(&["devices"]);
    !stdout(&o).contains("no usable GPU")
}

fn run_args<'a>(model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "-q", "run", "-m", model, "-p", "hello", "-n", "2", "--temp", "0", "-t", "1", "-c", "64",
        "--vram", "2G",
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn a_missing_gpu_is_one_line_on_stderr_even_when_quiet() {
    if has_gpu() {
        eprintln!("this machine has a usable GPU: no fallback to check");
        return;
    }
    let model = qwen2().to_str().unwrap().to_string();
    let o = run(&run_args(&model, &[]));
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "exactly one line with -q: {err}");
    assert!(
        lines[0].contains("no usable GPU") && lines[0].contains("running on the CPU"),
        "{err}"
    );
    assert!(!stdout(&o).is_empty(), "the answer is still printed");
}

#[test]
fn require_gpu_fails_instead_of_falling_back() {
    if has_gpu() {
        eprintln!("this machine has a usable GPU: --require-gpu would succeed");
        return;
    }
    let model = qwen2().to_str().unwrap().to_string();
    let o = run(&run_args(&model, &["--require-gpu"]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no usable GPU") && err.contains("--require-gpu"),
        "{err}"
    );
    assert!(stdout(&o).is_empty(), "nothing ran");
}
