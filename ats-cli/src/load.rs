//! Building the devices, the cost model, the planner and the engine from the
//! command line, saying in one line what was chosen.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use ats_core::device::Device;
use ats_core::round::MAX_CONTEXT;
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::engine::{Engine, EngineConfig};
use ats_sched::planner::{Planner, PlannerConfig};
use ats_sched::profile::{
    CostModel, DeviceProfile, Profile, default_profile_path, hardware_fingerprint, load_profile,
};
use ats_sched::sim::{SimGpu, SimGpuConfig};
use ats_sched::size::fmt_bytes;

use tracing::{info, warn};

use crate::args::ModelArgs;
use crate::usage::usage_bail;

/// Most CPU threads per core `--threads` may ask for: past a few, more
/// threads only contend (and starting thousands takes minutes).
const MAX_THREADS_PER_CORE: usize = 8;

/// CPU threads to use: the flag, else every core.
pub fn threads(flag: Option<usize>) -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match flag {
        Some(0) => usage_bail!("--threads must be at least 1"),
        Some(n) if n > MAX_THREADS_PER_CORE * cores => usage_bail!(
            "--threads {n} is more than {MAX_THREADS_PER_CORE} per core of the {cores} cores here: give at most {}",
            MAX_THREADS_PER_CORE * cores
        ),
        Some(n) => Ok(n),
        None => Ok(cores),
    }
}

/// The devices of a run: the host CPU and, when asked for and available, a
/// GPU (device 1), with the simulated GPU's settings when it is simulated.
pub struct Devices {
    /// Device 0 is the host CPU.
    pub list: Vec<Arc<dyn Device>>,
    /// Settings of the simulated GPU, if device 1 is one.
    pub sim: Option<SimGpuConfig>,
}

/// The host CPU and, when asked for and available, a GPU (device 1).
pub fn devices(args: &ModelArgs) -> Result<Devices> {
    let t = threads(args.threads)?;
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(t)?);
    let mut devs = vec![cpu];
    let mut sim = None;
    if let Some(spec) = &args.sim_gpu {
        let mut cfg = SimGpuConfig::parse(spec).map_err(anyhow::Error::msg)?;
        if let Some(v) = args.vram {
            cfg.memory = v;
        }
        let inner: Arc<dyn Device> = Arc::new(CpuDevice::with_isa(
            1,
            ats_cpu::matmul::Isa::detect(),
            "sim-gpu-kernels",
        )?);
        info!(
            "using a SIMULATED GPU ({} budget, {} GB/s copies, speed {} x one CPU thread)",
            fmt_bytes(cfg.memory),
            cfg.copy_gbps,
            cfg.speed
        );
        devs.push(Arc::new(SimGpu::new(inner, cfg.clone())));
        sim = Some(cfg);
    } else if args.vram.is_some() {
        match ats_cuda::open_device(args.vram) {
            Ok(gpu) => devs.push(gpu),
            Err(e) => warn!("no usable GPU ({e}): running on the CPU"),
        }
    }
    Ok(Devices { list: devs, sim })
}

/// The names of the real devices, which key the machine's profile.
pub fn real_device_names(devices: &[Arc<dyn Device>]) -> Vec<String> {
    devices
        .iter()
        .filter(|d| d.info().kind != ats_core::device::DeviceKind::SimulatedGpu)
        .map(|d| d.info().name.clone())
        .collect()
}

/// The machine's profile (or `--profile FILE`), turned into a cost model for
/// the devices; a simulated GPU's profile is derived from the CPU's.
pub fn cost_model(args: &ModelArgs, devs: &Devices) -> Result<CostModel> {
    let devices = &devs.list;
    let fp = hardware_fingerprint(&real_device_names(devices));
    let profile: Option<Profile> = match &args.profile {
        Some(p) => Some(
            load_profile(p, None)
                .map_err(anyhow::Error::msg)?
                .with_context(|| format!("{}: no such profile", p.display()))?,
        ),
        None => match default_profile_path(&fp) {
            Some(p) => load_profile(&p, Some(&fp)).unwrap_or(None),
            None => None,
        },
    };
    let empty = |d: &Arc<dyn Device>| DeviceProfile {
        device: d.info().name.clone(),
        kind: match d.info().kind {
            ats_core::device::DeviceKind::Cpu => "cpu".into(),
            ats_core::device::DeviceKind::Gpu => "gpu".into(),
            ats_core::device::DeviceKind::SimulatedGpu => "simulated_gpu".into(),
        },
        ..Default::default()
    };
    let cpu_profile = profile
        .as_ref()
        .and_then(|p| p.device(&devices[0].info().name).cloned())
        .unwrap_or_else(|| empty(&devices[0]));
    let per_device = devices
        .iter()
        .map(|d| {
            let dp = match (&devs.sim, d.info().kind) {
                (Some(cfg), ats_core::device::DeviceKind::SimulatedGpu) => {
                    cfg.derive_profile(&d.info().name, &cpu_profile)
                }
                _ => profile
                    .as_ref()
                    .and_then(|p| p.device(&d.info().name).cloned())
                    .unwrap_or_else(|| empty(d)),
            };
            (dp, d.info().parallelism.unwrap_or(1))
        })
        .collect();
    Ok(CostModel::new(per_device))
}

/// A loaded model and what loading took.
pub struct Loaded {
    /// The engine.
    pub engine: Engine,
    /// Milliseconds to load and plan.
    pub load_ms: f64,
}

/// The context length `-c` asks for (default: the model's, at most 4096),
/// checked against what positions can address.
pub fn context_len(args: &ModelArgs, spec: &ModelSpec) -> Result<usize> {
    let n_ctx = args.ctx.unwrap_or(spec.hp.n_ctx_train.min(4096));
    if !(1..=MAX_CONTEXT).contains(&n_ctx) {
        usage_bail!("--ctx-size must be 1 to {MAX_CONTEXT} tokens, not {n_ctx}");
    }
    Ok(n_ctx)
}

/// Opens the model, plans it and loads it onto the devices.
pub fn load(args: &ModelArgs, all_logits: bool) -> Result<Loaded> {
    let t0 = Instant::now();
    let spec = Arc::new(
        ModelSpec::open(&args.model)
            .with_context(|| format!("cannot load {}", args.model.display()))?,
    );
    let devs = devices(args)?;
    let mut loaded = load_on(args, spec, devs, all_logits)?;
    loaded.load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    Ok(loaded)
}

/// Plans an opened model and loads it onto `devs` (already made: the
/// VLM path encodes its images on them first).
pub fn load_on(
    args: &ModelArgs,
    spec: Arc<ModelSpec>,
    devs: Devices,
    all_logits: bool,
) -> Result<Loaded> {
    let t0 = Instant::now();
    let file_name = args
        .model
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let spinner = crate::progress::spinner(format!("loading {file_name}"));
    let cost = cost_model(args, &devs)?;
    let devices = devs.list;
    let n_ctx = context_len(args, &spec)?;
    let cfg = EngineConfig {
        n_ctx: Some(n_ctx),
        kv_type: args.kv_type,
        policy: args.policy,
        max_chunk: args.batch,
        resched: args.resched(),
        ..EngineConfig::default()
    };
    if args.batch == Some(0) {
        usage_bail!("--batch-size must be at least 1");
    }
    let graph = Arc::new(spec.graph()?);
    let pcfg = PlannerConfig {
        policy: cfg.policy,
        n_ctx,
        kv_type: cfg.kv_type,
        slots_per_role: cfg.slots_per_role,
        all_logits,
        max_tier: args.batch,
        force_kind: None,
        resched: cfg.resched.clone(),
    };
    let planner = Planner::new(graph, &devices, cost, pcfg)?;
    {
        let names: Vec<String> = devices.iter().map(|d| d.info().name.clone()).collect();
        spinner.suspend(|| {
            info!(
                "{} ({}, {} layers, {}), ctx {}, kv {:?}, policy {}, devices {}, threads {}",
                file_name,
                spec.arch.name(),
                spec.hp.n_layer,
                fmt_bytes(spec.gguf.file_len()),
                n_ctx,
                cfg.kv_type,
                cfg.policy.name(),
                names.join(" + "),
                devices[0].info().parallelism.unwrap_or(1),
            );
            for n in &planner.plans().report.notes {
                info!("note: {n}");
            }
        });
    }
    let engine = Engine::new(spec, devices, planner, cfg)?;
    spinner.finish_and_clear();
    let load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    tracing::debug!(load_ms, "model loaded");
    Ok(Loaded { engine, load_ms })
}
