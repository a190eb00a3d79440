//! The command line: the subcommands, parsed by clap, run, and their
//! errors turned into exit codes.

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;
use crate::{cmd, logging, serve, usage};

/// ATS: run language and vision-language models inside a VRAM budget.
#[derive(Parser, Debug)]
#[command(name = "ats-cli", version, about, after_help = EXAMPLES)]
struct Cli {
    /// Only errors on standard error (no status lines, progress or timings).
    #[arg(short = 'q', long = "quiet", global = true)]
    quiet: bool,
    /// Log lines for people (text) or tools (json, one object per line);
    /// RUST_LOG filters them (e.g. RUST_LOG=debug).
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

const EXAMPLES: &str = "Examples:
  ats-cli run -m SmolLM2-135M-Instruct.Q4_1.gguf -p \"The capital of France is\" -n 32 --temp 0
  ats-cli chat -m SmolLM2-135M-Instruct.Q4_1.gguf --vram 2G
  ats-cli serve -m SmolLM2-135M-Instruct.Q4_1.gguf --port 8080
  ats-cli vlm -m Qwen2.5-VL-3B.gguf --mmproj mmproj.gguf --image scene.png --vram 2G
  ats-cli bench -m model.gguf -p 512 -n 128 -t 2
  ats-cli plan -m model.gguf --vram 2G --sim-gpu
  ats-cli inspect model.gguf --tensors

Exit codes: 0 success, 1 runtime error, 2 usage error.";

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Generate text from a prompt.
    Run(cmd::run::RunArgs),
    /// Chat with the model in the terminal.
    Chat(cmd::chat::ChatArgs),
    /// Serve the model over HTTP with OpenAI's API.
    Serve(serve::ServeArgs),
    /// Describe images with a vision-language model.
    Vlm(cmd::vlm::VlmArgs),
    /// Write the logits of every position.
    Eval(cmd::eval::EvalArgs),
    /// Perplexity over a text file (llama.cpp's method).
    Perplexity(cmd::perplexity::PerplexityArgs),
    /// Prompt and generation speed.
    Bench(cmd::bench::BenchArgs),
    /// Show the placement plan under a VRAM budget.
    Plan(cmd::plan::PlanArgs),
    /// Measure this machine's kernels, copies and switches.
    Profile(cmd::profile::ProfileArgs),
    /// Describe a GGUF file.
    Inspect(cmd::inspect::InspectArgs),
    /// Write a random-weight model of a real architecture's shapes.
    Synth(cmd::synth::SynthArgs),
    /// List the GPUs: memory, compute capability, PCIe link, measured bandwidth.
    Devices(cmd::devices::DevicesArgs),
}

/// The whole `ats-cli` binary: parses the command line, runs the
/// subcommand and exits with 0 (success), 1 (runtime error) or 2 (usage
/// error).
pub fn main() {
    // clap prints usage errors and exits with 2 (0 for --help and --version)
    let cli = Cli::parse();
    logging::init(cli.log_format, cli.quiet);
    let r = match cli.cmd {
        Cmd::Run(a) => cmd::run::run(a),
        Cmd::Chat(a) => cmd::chat::run(a),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Vlm(a) => cmd::vlm::run(a),
        Cmd::Eval(a) => cmd::eval::run(a),
        Cmd::Perplexity(a) => cmd::perplexity::run(a),
        Cmd::Bench(a) => cmd::bench::run(a),
        Cmd::Plan(a) => cmd::plan::run(a),
        Cmd::Profile(a) => cmd::profile::run(a),
        Cmd::Inspect(a) => cmd::inspect::run(a),
        Cmd::Synth(a) => cmd::synth::run(a),
        Cmd::Devices(a) => cmd::devices::run(a),
    };
    if let Err(e) = r {
        let usage = e.downcast_ref::<usage::UsageError>().is_some();
        let code = if usage { 2 } else { 1 };
        let message = chain(&e);
        if logging::json() {
            tracing::error!(exit_code = code, error = %message, "failed");
        } else {
            eprintln!("error: {message}");
            if usage {
                eprintln!("For more information, try '--help'.");
            }
        }
        std::process::exit(code);
    }
}

/// An error and its causes on one line, as `{:#}` joins them, except that a
/// cause whose text its parent already ends with is not said again (errors
/// that print their source, like `"image.png: {source}"`, would show it twice).
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_the_message_already_says_is_not_repeated() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "image.png: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::other("image data is empty");
        let e = anyhow::Error::new(Outer(io)).context("cannot describe the image");
        assert_eq!(
            super::chain(&e),
            "cannot describe the image: image.png: image data is empty"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::chain(&plain), "outer: inner");
    }
}
