//! Progress bars on a terminal; nothing (the caller logs plain lines) when
//! standard error is a file or a pipe, under `-q`, or with JSON logs.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether bars are drawn.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal() && !crate::logging::quiet() && !crate::logging::json()
}

/// A spinner with a message and the elapsed time, for work of unknown length.
pub fn spinner(msg: impl Into<String>) -> ProgressBar {
    if !enabled() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner().with_message(msg.into());
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// A bar over `len` steps.
pub fn bar(len: u64) -> ProgressBar {
    if !enabled() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:<28} [{bar:30}] {pos}/{len} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}
