//! Options shared by the commands that load a model.

use std::path::PathBuf;

use anyhow::Result;
use ats_core::chat::TemplateKwargs;
use ats_core::device::KvType;
use ats_core::round::MAX_CONTEXT;
use ats_core::sampling::SamplerField;
use ats_core::spec::ModelSpec;
use ats_cpu::matmul::Isa;
use ats_sched::config::{ConfigError, Policy, RunConfig, Workload};
use ats_sched::rescheduler::{ReschedConfig, Tau};
use clap::Args;

use crate::usage::usage_bail;

/// The devices of a run: CPU threads and the GPU (real, simulated, or none).
#[derive(Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// CPU threads (default: all cores).
    #[arg(short = 't', long = "threads", value_name = "N")]
    pub threads: Option<usize>,
    /// GPU memory budget: 2G (= 2,000 MB), 2GB, 2GiB, 1500M, 1500MiB, or bytes.
    #[arg(long = "vram", value_name = "SIZE", value_parser = parse_vram)]
    pub vram: Option<u64>,
    /// Use a simulated GPU (no real GPU needed), optionally with settings.
    #[arg(long = "sim-gpu", value_name = "SPEC", num_args = 0..=1, default_missing_value = "", long_help = SIM_HELP)]
    pub sim_gpu: Option<String>,
    /// Run on a machine model in virtual time: a preset (rtx3060-laptop,
    /// rtx4090-desktop, pcie-gen3-desktop, pcie-gen5-desktop, h200-host) or
    /// a file, then key=value overrides and load scenarios.
    #[arg(long = "sim-machine", value_name = "NAME|FILE", long_help = SIM_MACHINE_HELP, conflicts_with = "sim_gpu")]
    pub sim_machine: Option<String>,
    /// Fail instead of running on the CPU when --vram is given and no GPU can be used.
    #[arg(long = "require-gpu")]
    pub require_gpu: bool,
    /// The CPU kernels' instruction set (scalar, avx2, avx512, avx512vnni;
    /// default: the best this CPU has); one this CPU lacks is an error.
    #[arg(long = "isa", value_name = "NAME", value_parser = parse_isa)]
    pub isa: Option<Isa>,
}

fn parse_isa(s: &str) -> Result<Isa, String> {
    s.parse()
        .map_err(|e: ats_cpu::matmul::UnknownIsa| e.to_string())
}

/// Loading a model and choosing devices.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model file (GGUF).
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    pub model: PathBuf,
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    pub ctx: Option<usize>,
    /// KV cache element type.
    #[arg(long = "kv-type", value_name = "f16|f32", default_value = "f16", value_parser = parse_kv)]
    pub kv_type: KvType,
    /// Placement policy.
    #[arg(long = "policy", value_name = "NAME", default_value = "ats", value_parser = parse_policy)]
    pub policy: Policy,
    /// Use this profile instead of the machine's cached one.
    #[arg(long = "profile", value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Largest prompt chunk per round (default: the planner's tier choice).
    #[arg(short = 'b', long = "batch-size", value_name = "N")]
    pub batch: Option<usize>,
    /// Choose the memory layout for requests of PROMPT tokens generating
    /// GEN tokens (default: a prompt filling half the context, then 128
    /// tokens; `bench` plans for its own -d, -p and -n).
    #[arg(long = "workload", value_name = "PROMPT,GEN", value_parser = parse_workload)]
    pub workload: Option<Workload>,
    /// Re-plan when measured op or copy times drift from the plan's by more
    /// than this fraction (load-aware re-scheduling).
    #[arg(long = "replan-threshold", value_name = "FRACTION", default_value_t = 0.15, value_parser = parse_fraction)]
    pub replan_threshold: f64,
    /// At most one re-plan per this many recent decode-token times.
    #[arg(long = "replan-interval", value_name = "TOKENS", default_value_t = 5.0, value_parser = parse_interval)]
    pub replan_interval: f64,
    /// Decode rounds each candidate decode plan runs when generation starts,
    /// to keep the fastest by measurement (0: trust the estimates).
    #[arg(long = "audition-rounds", value_name = "N", default_value_t = 6, value_parser = parse_audition)]
    pub audition_rounds: usize,
    /// Map the model file rather than read it into memory: for a model
    /// larger than memory (its pages come and go). Decode is slower: the
    /// mapping has 4 KiB pages, a resident copy huge ones.
    #[arg(long = "mmap")]
    pub mmap: bool,
    /// Sequences that may run at once: set by the commands that run
    /// several (`serve --parallel`, `bench --parallel`), not a flag of its own.
    #[arg(skip = 1usize)]
    pub parallel: usize,
}

impl ModelArgs {
    /// The re-scheduling settings the flags ask for.
    pub fn resched(&self) -> ReschedConfig {
        ReschedConfig {
            epsilon: self.replan_threshold,
            tau: Tau::TpotMultiple(self.replan_interval),
            audition_rounds: self.audition_rounds,
            ..ReschedConfig::default()
        }
    }

    /// The run configuration the flags ask for, for `spec` (the one place
    /// flags become settings; usage errors for values out of range).
    pub fn run_config(&self, spec: &ModelSpec, all_logits: bool) -> Result<RunConfig> {
        if self.batch == Some(0) {
            usage_bail!("--batch-size must be at least 1");
        }
        let mut run = RunConfig::for_model(spec, crate::load::run_threads(&self.devices)?);
        if let Some(c) = self.ctx {
            run.n_ctx = c;
        }
        run.kv_type = self.kv_type;
        run.policy = self.policy;
        run.max_chunk = self.batch;
        run.all_logits = all_logits;
        run.vram = self.devices.vram;
        run.resched = self.resched();
        run.parallel = self.parallel;
        run.workload = self.workload;
        match run.validate() {
            Ok(()) => Ok(run),
            Err(ConfigError::Context(n)) => {
                usage_bail!("--ctx-size must be 1 to {MAX_CONTEXT} tokens, not {n}")
            }
            Err(ConfigError::Zero { what }) => usage_bail!("{what} must be at least 1"),
            Err(e @ ConfigError::BlockRows(_)) => usage_bail!("{e}"),
        }
    }
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    let bad = || format!("{s:?}: give prompt and generated tokens, e.g. 512,128");
    let (p, g) = s.split_once(',').ok_or_else(bad)?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|_| bad());
    let (prompt, generate) = (n(p)?, n(g)?);
    if prompt.max(generate) > MAX_CONTEXT {
        return Err(format!(
            "{s:?}: at most {MAX_CONTEXT} tokens each, the longest context"
        ));
    }
    Ok(Workload {
        depth: 0,
        prompt,
        generate,
    })
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?}: give a fraction >= 0, e.g. 0.15")),
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?}: give a number of token times >= 0, e.g. 5")),
    }
}

fn parse_audition(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n != 1 => Ok(n),
        _ => Err(format!(
            "{s:?}: give 0 (off) or at least 2 (a warm-up and a measured round)"
        )),
    }
}

const SIM_HELP: &str = "Use a simulated GPU: CPU kernels behind a strict memory budget, its own \
compute and transfer threads, throttled copies. Alone, it is a default simulated GPU (8 GB, \
8 GB/s copies, kernels as fast as one CPU thread); with SPEC, comma-separated key=value \
settings: mem=SIZE, copy=GB/s, speed=X (relative to one CPU thread), launch=US, sync=US, \
slow=T:F;T:F (kernel slowdown factor F from T seconds), copyslow=T:F;... (copy slowdown). \
--vram sets its budget.";

const SIM_MACHINE_HELP: &str = "Run on a machine model in virtual time: every op computes \
for real (exact logits), but each op's, copy's and synchronisation's duration comes from a model \
of the machine (CPU cores and memory bandwidth shared with PCIe traffic, the GPU's rates, the \
link's generation and width, launch and sync costs), so timings are the same on any machine \
under any load, and every report says they are simulated. NAME is a preset: rtx3060-laptop, \
rtx4090-desktop, pcie-gen3-desktop, pcie-gen5-desktop, h200-host; FILE holds base=NAME then \
key=value lines. Comma-separated overrides follow, e.g. \
rtx3060-laptop,pcie=gen3x8,cpuload=20:0.5;40:0,thermal=60:0.7 (quote the semicolons). Keys: \
cores, core_gflops, core_attn_gflops, core_gbps, mem_gbps, dispatch_us; vram, gpu_gbps, \
matvec_eff, elem_eff, gemm_tflops, gemm_ramp, attn_tflops, attn_ramp, kernel_us, attn_us, \
launch_us, sync_us; pcie=genGxL, h2d_gbps, d2h_gbps, pageable_gbps, sm_copy_gbps, copy_us; \
scenario scripts T:V;T:V over virtual seconds: cpuload (share of cores other programs take), \
gpuload (share of SM time), pcieslow (link slowdown >= 1), thermal and cputhermal (clock share); \
gamevram=SIZE (VRAM another program holds); compute=off (time only, no logits: for models too \
large to compute here). --vram is ATS's budget; --threads the host threads (default: the \
preset's cores).";

fn parse_kv(s: &str) -> Result<KvType, String> {
    match s {
        "f16" => Ok(KvType::F16),
        "f32" => Ok(KvType::F32),
        _ => Err(format!("{s:?}: use f16 or f32")),
    }
}

/// `--vram` values.
pub fn parse_vram(s: &str) -> Result<u64, String> {
    ats_sched::size::parse_size(s)
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    Policy::parse(s)
}

/// Sampling flags, range-checked by the sampler's own check
/// ([`SamplerField::check`]), as a server checks request fields.
#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// Temperature (0: greedy).
    #[arg(long = "temp", default_value_t = 0.8, value_parser = temperature, allow_negative_numbers = true)]
    pub temp: f32,
    /// Top-k (0: off).
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: usize,
    /// Top-p, 0 to 1 (1: off).
    #[arg(long = "top-p", default_value_t = 0.95, value_parser = top_p, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Min-p, 0 to 1 (0: off).
    #[arg(long = "min-p", default_value_t = 0.05, value_parser = min_p, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Repetition penalty, above 0 (1: off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0, value_parser = repeat_penalty, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// OpenAI's frequency penalty, -2 to 2 (0: off).
    #[arg(long = "frequency-penalty", default_value_t = 0.0, value_parser = frequency_penalty, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// OpenAI's presence penalty, -2 to 2 (0: off).
    #[arg(long = "presence-penalty", default_value_t = 0.0, value_parser = presence_penalty, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Tokens the penalties look back over.
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Random seed (default: 42; for serve, a fresh one per request).
    #[arg(short = 's', long = "seed")]
    pub seed: Option<u64>,
}

/// Chat template flags (`chat`, `run --chat`, `serve`).
#[derive(Args, Debug, Clone, Default)]
pub struct TemplateArgs {
    /// More variables for the chat template, a JSON object, as
    /// llama-server takes them: '{"enable_thinking": false}' (Qwen3),
    /// '{"reasoning_effort": "high"}' (gpt-oss). A server's requests may
    /// set their own (`chat_template_kwargs`), which win.
    #[arg(long = "chat-template-kwargs", value_name = "JSON", value_parser = parse_template_kwargs)]
    pub chat_template_kwargs: Option<TemplateKwargs>,
}

impl TemplateArgs {
    /// The variables given (none: an empty object).
    pub fn kwargs(&self) -> TemplateKwargs {
        self.chat_template_kwargs.clone().unwrap_or_default()
    }
}

fn parse_template_kwargs(s: &str) -> Result<TemplateKwargs, String> {
    let m: TemplateKwargs =
        serde_json::from_str(s).map_err(|e| format!("not a JSON object: {e}"))?;
    match ats_core::chat::reserved_name(&m) {
        Some(k) => Err(format!("{k:?} is set by ATS itself")),
        None => Ok(m),
    }
}

fn sample_value(s: &str, field: SamplerField) -> Result<f32, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    field.check(v).map_err(|e| e.to_string())
}

fn temperature(s: &str) -> Result<f32, String> {
    sample_value(s, SamplerField::Temperature)
}

fn top_p(s: &str) -> Result<f32, String> {
    sample_value(s, SamplerField::TopP)
}

fn min_p(s: &str) -> Result<f32, String> {
    sample_value(s, SamplerField::MinP)
}

fn repeat_penalty(s: &str) -> Result<f32, String> {
    sample_value(s, SamplerField::RepeatPenalty)
}

fn frequency_penalty(s: &str) -> Result<f32, String> {
    sample_value(s, SamplerField::FrequencyPenalty)
}

fn presence_penalty(s: &str) -> Result<f32, String> {
    sample_value(s, SamplerField::PresencePenalty)
}

/// The seed when `--seed` is not given (run, chat).
pub const DEFAULT_SEED: u64 = 42;

impl SampleArgs {
    /// The sampler settings.
    pub fn config(&self) -> ats_core::SamplerConfig {
        ats_core::SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed.unwrap_or(DEFAULT_SEED),
        }
    }
}
