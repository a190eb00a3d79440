//! From the command line to a session: the run configuration (from the
//! flags, once), the machine (the host CPU and the GPU the flags ask for),
//! the cost model (the machine's profile), then the session, saying in one
//! line what was chosen.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use ats_core::device::{Device, DeviceKind};
use ats_core::machine::{DeviceId, Machine};
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_cpu::matmul::Isa;
use ats_sched::config::RunConfig;
use ats_sched::profile::{
    CostModel, DeviceProfile, Profile, default_profile_path, hardware_fingerprint, load_profile,
};
use ats_sched::session::Session;
use ats_sched::sim::{MachineSpec, SimGpu, SimGpuConfig, VirtualMachine};
use ats_sched::size::fmt_bytes;
use tracing::info;

use crate::args::{DeviceArgs, ModelArgs};
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

/// The host threads a run uses: on a machine model (`--sim-machine`) the
/// modelled threads (`--threads`, else the preset's cores), else this
/// machine's ([`threads`]).
pub fn run_threads(args: &DeviceArgs) -> Result<usize> {
    match &args.sim_machine {
        Some(spec) => {
            let spec = MachineSpec::parse(spec).map_err(anyhow::Error::msg)?;
            match args.threads {
                Some(0) => usage_bail!("--threads must be at least 1"),
                Some(n) => Ok(n),
                None => Ok(spec.host.cores),
            }
        }
        None => threads(args.threads),
    }
}

/// The machine of a run, with the simulated GPU's settings when its GPU is one.
pub struct Built {
    /// The devices by role.
    pub machine: Machine,
    /// Settings of the simulated GPU, if the GPU is one.
    pub sim: Option<SimGpuConfig>,
    /// The machine model, when the run is on one (`--sim-machine`).
    pub vm: Option<VirtualMachine>,
}

/// The host CPU and, when asked for and available, a GPU. Without a usable
/// GPU for `--vram`, one line on stderr says so and the run stays on the
/// CPU, whatever the verbosity; `--require-gpu` makes it an error instead.
pub fn machine(args: &DeviceArgs) -> Result<Built> {
    if let Some(spec) = &args.sim_machine {
        return sim_machine(spec, args);
    }
    let host: Arc<dyn Device> = Arc::new(CpuDevice::with_isa(
        threads(args.threads)?,
        isa(args),
        "cpu",
    )?);
    let (gpu, sim): (Option<Arc<dyn Device>>, _) = match &args.sim_gpu {
        Some(spec) => {
            let (gpu, cfg) = sim_gpu(spec, args.vram, isa(args))?;
            (Some(gpu), Some(cfg))
        }
        None if args.vram.is_some() || args.require_gpu => match ats_cuda::open_device(args.vram) {
            Ok(gpu) => (Some(gpu), None),
            Err(e) if args.require_gpu => {
                anyhow::bail!("no usable GPU ({e}), and --require-gpu was given")
            }
            Err(e) => {
                eprintln!("ats: warning: no usable GPU ({e}): running on the CPU");
                (None, None)
            }
        },
        None => (None, None),
    };
    Ok(Built {
        machine: Machine::new(host, gpu)?,
        sim,
        vm: None,
    })
}

/// A machine model from `--sim-machine SPEC`: the host runs `--threads`
/// threads (default: the preset's cores), the GPU's budget is `--vram`;
/// the ops compute on every core of this machine.
fn sim_machine(spec: &str, args: &DeviceArgs) -> Result<Built> {
    let model_threads = run_threads(args)?;
    let spec = MachineSpec::parse(spec).map_err(anyhow::Error::msg)?;
    let real = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !crate::logging::quiet() {
        eprintln!(
            "ats: SIMULATED machine, timed in virtual time: {}; {} host threads modelled",
            spec.summary(),
            model_threads
        );
    }
    crate::report::set_simulated(spec.name.clone());
    let vm = VirtualMachine::new(
        spec,
        model_threads,
        args.vram,
        Arc::new(CpuDevice::with_isa(real, isa(args), "cpu")?),
        sim_kernels(real, isa(args))?,
    );
    Ok(Built {
        machine: vm.machine().clone(),
        sim: None,
        vm: Some(vm),
    })
}

/// A real CPU device for a modelled device's kernels.
fn sim_kernels(threads: usize, isa: Isa) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(CpuDevice::with_isa(threads, isa, "sim-kernels")?))
}

/// `--isa`, or the best instruction set this CPU has.
fn isa(args: &DeviceArgs) -> Isa {
    args.isa.unwrap_or_else(Isa::detect)
}

/// A simulated GPU from `--sim-gpu SPEC`, its budget `--vram` if given.
fn sim_gpu(spec: &str, vram: Option<u64>, isa: Isa) -> Result<(Arc<dyn Device>, SimGpuConfig)> {
    let mut cfg = SimGpuConfig::parse(spec).map_err(anyhow::Error::msg)?;
    if let Some(v) = vram {
        cfg.memory = v;
    }
    let inner: Arc<dyn Device> = Arc::new(CpuDevice::with_isa(1, isa, "sim-gpu-kernels")?);
    info!(
        "using a SIMULATED GPU ({} budget, {} GB/s copies, speed {} x one CPU thread)",
        fmt_bytes(cfg.memory),
        cfg.copy_gbps,
        cfg.speed
    );
    Ok((Arc::new(SimGpu::new(inner, cfg.clone())), cfg))
}

/// The names of the real devices, which key the machine's profile.
pub fn real_device_names(machine: &Machine) -> Vec<String> {
    machine
        .iter()
        .filter(|(_, d)| d.info().kind != DeviceKind::SimulatedGpu)
        .map(|(_, d)| d.info().name.clone())
        .collect()
}

/// The machine's profile (or `--profile FILE`), turned into a cost model for
/// its devices; a simulated GPU's profile is derived from the CPU's.
pub fn cost_model(args: &ModelArgs, built: &Built) -> Result<CostModel> {
    if let Some(vm) = &built.vm {
        if args.profile.is_some() {
            anyhow::bail!(
                "--profile with --sim-machine: a machine model is profiled in virtual time, not from a file"
            );
        }
        let real = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kernels = sim_kernels(real, isa(&args.devices))?;
        return vm
            // a quick profile, as the H200 runs it is fitted to were planned with
            .cost_model(true, &|_| kernels.clone())
            .map_err(anyhow::Error::msg);
    }
    let m = &built.machine;
    let profile = read_profile(args, m)?;
    let of = |d: &Arc<dyn Device>| {
        profile
            .as_ref()
            .and_then(|p| p.device(&d.info().name).cloned())
            .unwrap_or_else(|| DeviceProfile {
                device: d.info().name.clone(),
                kind: d.info().kind.name().into(),
                ..Default::default()
            })
    };
    let host = of(m.host());
    let gpu = m.gpu().map(|g| match &built.sim {
        Some(cfg) => cfg.derive_profile(&g.info().name, &host),
        None => of(g),
    });
    let threads = |d: &Arc<dyn Device>| d.info().parallelism.unwrap_or(1);
    let host_threads = threads(m.host());
    let gpu_threads = m.gpu().map(threads);
    Ok(CostModel::new((host, host_threads), gpu.zip(gpu_threads)))
}

/// `--profile FILE`, else the machine's cached profile if there is one.
fn read_profile(args: &ModelArgs, m: &Machine) -> Result<Option<Profile>> {
    if let Some(p) = &args.profile {
        let profile = load_profile(p, None)
            .map_err(anyhow::Error::msg)?
            .with_context(|| format!("{}: no such profile", p.display()))?;
        return Ok(Some(profile));
    }
    let fp = hardware_fingerprint(&real_device_names(m));
    let cached =
        default_profile_path(&fp).and_then(|p| load_profile(&p, Some(&fp)).unwrap_or(None));
    // the cache holds the CPU's speeds with its best kernels
    match args.devices.isa.filter(|&isa| isa != Isa::detect()) {
        Some(isa) if cached.is_some() => {
            eprintln!(
                "ats: --isa {isa}: the cached profile was measured with {}; planning without it",
                Isa::detect()
            );
            Ok(None)
        }
        _ => Ok(cached),
    }
}

/// A loaded model and what loading took.
pub struct Loaded {
    /// The session.
    pub session: Session,
    /// Milliseconds to load and plan.
    pub load_ms: f64,
}

/// Opens the model, plans it and loads it onto the machine the flags ask for.
pub fn load(args: &ModelArgs, all_logits: bool) -> Result<Loaded> {
    let t0 = Instant::now();
    let spec = open_model(args)?;
    let built = machine(&args.devices)?;
    let mut loaded = load_on(args, spec, built, all_logits)?;
    loaded.load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    Ok(loaded)
}

/// Opens and checks the model file.
pub fn open_model(args: &ModelArgs) -> Result<Arc<ModelSpec>> {
    let hold = crate::hold::choose(&args.model, args.mmap);
    let spec = ModelSpec::open_with(&args.model, hold)
        .with_context(|| format!("cannot load {}", args.model.display()))?;
    crate::hold::report(hold, spec.gguf.backing().huge_pages());
    Ok(Arc::new(spec))
}

/// Plans an opened model and loads it onto `built` (already made: the VLM
/// path encodes its images on it first).
pub fn load_on(
    args: &ModelArgs,
    spec: Arc<ModelSpec>,
    built: Built,
    all_logits: bool,
) -> Result<Loaded> {
    let t0 = Instant::now();
    let run = args.run_config(&spec, all_logits)?;
    let spinner = crate::progress::spinner(format!("loading {}", file_name(args)));
    let cost = cost_model(args, &built)?;
    spinner.suspend(|| log_run(args, &spec, &run, &built.machine));
    let session = Session::new(spec, built.machine, cost, run).map_err(budget_hint)?;
    spinner.suspend(|| {
        for n in &session.plan_set().notes {
            info!("note: {n}");
        }
    });
    spinner.finish_and_clear();
    let load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    tracing::debug!(load_ms, "model loaded");
    Ok(Loaded { session, load_ms })
}

/// A budget too small for any plan says which flag raises it.
pub fn budget_hint(e: ats_sched::session::SessionError) -> anyhow::Error {
    use ats_sched::planner::PlanError;
    use ats_sched::session::SessionError;
    match &e {
        SessionError::Plan(PlanError::BudgetTooSmall { minimum, .. }) => {
            anyhow::anyhow!("{e}; give at least --vram {}", fmt_bytes(*minimum))
        }
        _ => e.into(),
    }
}

/// The model file's name, for messages.
fn file_name(args: &ModelArgs) -> String {
    args.model
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The one line a run starts with: the model, the run configuration, the machine.
fn log_run(args: &ModelArgs, spec: &ModelSpec, run: &RunConfig, machine: &Machine) {
    info!(
        "{} ({}, {} layers, {}), {}, devices {}",
        file_name(args),
        spec.arch.name(),
        spec.hp.n_layer,
        fmt_bytes(spec.gguf.file_len()),
        run.summary(),
        machine.describe(),
    );
}

/// The device whose peak memory reports follow: the GPU, else the host.
pub fn reported_device(machine: &Machine) -> (DeviceId, &Arc<dyn Device>) {
    machine.accelerator_or_host()
}
