//! The server's web page in a real headless Chromium, driven by
//! `tests/web/page.mjs` (playwright-core): against the Qwen2-VL fixture
//! with its projector on a simulated GPU whose budget splits the model, and
//! against the qwen2 fixture on the CPU alone. Skips, saying why, where node
//! or Chromium is missing, unless `ATS_REQUIRE_BROWSER=1` (CI) makes that a
//! failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{Server, fixture, qwen2};

/// One browser at a time: the two tests share a few cores with the servers.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The script's own guard is 60 s; this one catches a node that hangs
/// before it starts its timer.
const LIMIT: Duration = Duration::from_secs(90);

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web")
}

fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var_os("ATS_CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(PathBuf::from));
    candidates.into_iter().find(|p| p.exists())
}

fn has(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Chromium's path, or why the test cannot run here.
fn browser() -> Result<PathBuf, String> {
    if !has("node") {
        return Err("node is not installed".into());
    }
    let chromium = chromium().ok_or("Chromium is not installed (apt-get install chromium)")?;
    let dir = web_dir();
    if !dir.join("node_modules/playwright-core").exists() {
        if !has("npm") {
            return Err("npm is not installed, and tests/web has no node_modules".into());
        }
        // the committed lock file pins what `npm ci` installs
        let ok = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "npm ci in {} failed", dir.display());
    }
    Ok(chromium)
}

/// Runs the page script against `server`; panics with its output if it fails.
fn drive(server: &Server, chromium: &Path, shot: &Path, expect: &str, image: Option<&Path>) {
    let mut cmd = Command::new("node");
    cmd.arg(web_dir().join("page.mjs"))
        .arg(&server.base)
        .arg(shot)
        .arg(expect)
        .env("ATS_CHROMIUM", chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(i) = image {
        cmd.arg(i);
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = cmd.spawn().expect("node starts");
    let start = Instant::now();
    while child.try_wait().expect("node runs").is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("node's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the page test failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        out.status,
        server.log()
    );
    eprintln!(
        "page findings: {}\nscreenshot: {}",
        stdout.trim(),
        shot.display()
    );
    assert!(shot.exists(), "no screenshot at {}", shot.display());
}

fn screenshot(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web_page");
    std::fs::create_dir_all(&dir).expect("the artifact folder");
    dir.join(name)
}

/// Chromium's path, or None after saying why the test skips.
fn browser_or_skip() -> Option<PathBuf> {
    match browser() {
        Ok(c) => Some(c),
        Err(why) if std::env::var("ATS_REQUIRE_BROWSER").as_deref() == Ok("1") => {
            panic!("ATS_REQUIRE_BROWSER=1 and {why}")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

#[test]
fn the_page_chats_reads_an_image_and_draws_a_split_model() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let model = fixture("qwen2_vl/qwen2_vl-f32.gguf");
    let mmproj = fixture("qwen2_vl/mmproj-qwen2_vl-f32.gguf");
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/profile-quick-2cpu.json"
    );
    // with this profile a simulated GPU 8 times one thread's speed holds
    // some of the fixture's layers in 3 MB, and not the rest
    let server = Server::start(
        &model,
        &[
            "--mmproj",
            mmproj.to_str().unwrap(),
            "--sim-gpu",
            "speed=8,copy=4",
            "--vram",
            "3M",
            "--profile",
            profile,
            "-c",
            "1024",
        ],
    );
    let image = fixture("vl_images/small.png");
    let shot = screenshot("split.png");
    drive(&server, &chromium, &shot, "split", Some(&image));
}

#[test]
fn the_page_works_on_the_cpu_alone() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let server = Server::start(&qwen2(), &["-c", "512"]);
    let shot = screenshot("cpu.png");
    drive(&server, &chromium, &shot, "cpu", None);
}
