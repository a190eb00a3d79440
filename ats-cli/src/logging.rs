//! Logging through `tracing`: one subscriber on standard error, configured
//! once from `--log-format`, `-q` and `RUST_LOG`.

use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;

use clap::ValueEnum;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `ats: message key=value`, for people.
    #[default]
    Text,
    /// One JSON object per line, for tools.
    Json,
}

/// What `init` was given, for code that prints outside `tracing` (the
/// timings block, progress bars).
#[derive(Clone, Copy, Debug)]
struct Settings {
    format: LogFormat,
    quiet: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Our crates log at `info`, dependencies only warnings, unless `RUST_LOG`
/// says otherwise; `-q` keeps errors only.
const DEFAULT_FILTER: &str =
    "warn,ats_cli=info,ats_core=info,ats_cpu=info,ats_cuda=info,ats_sched=info,ats_vision=info";

/// Installs the subscriber. `RUST_LOG`, when set, wins over `-q`.
pub fn init(format: LogFormat, quiet: bool) {
    let _ = SETTINGS.set(Settings { format, quiet });
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(if quiet { "error" } else { DEFAULT_FILTER }));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.event_format(Plain).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
}

/// `-q` was given.
pub fn quiet() -> bool {
    SETTINGS.get().is_some_and(|s| s.quiet)
}

/// `--log-format json` was given.
pub fn json() -> bool {
    SETTINGS.get().is_some_and(|s| s.format == LogFormat::Json)
}

/// `ats: message key=value`, with the level named only when it is not `info`
/// (the status lines llama.cpp users know).
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write!(w, "ats: ")?;
        match *meta.level() {
            Level::INFO => {}
            Level::WARN => write!(w, "warning: ")?,
            Level::ERROR => write!(w, "error: ")?,
            l => write!(w, "{} {}: ", l.as_str().to_lowercase(), meta.target())?,
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}
