//! Helpers shared by the workspace integration tests: where the fixtures
//! are, reading reference arrays, comparing logits.

pub mod edited;
pub mod fuzz;
pub mod hf_fixture;

use std::path::PathBuf;

use ats_core::machine::Machine;
use ats_sched::config::{Policy, RunConfig};
use safetensors::SafeTensors;

/// `../shared/fixtures` beside the workspace root.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
}

/// `tests/fixtures` in this repository: fixtures made by the repository's
/// own scripts (`scripts/fixtures/`), small enough to commit.
pub fn repo_fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The directory models are fetched into (`$ATS_MODELS` or `~/.cache/ats/models`).
pub fn models_dir() -> PathBuf {
    std::env::var_os("ATS_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ats/models")
        })
}

/// SmolLM2-135M-Instruct Q4_1, fetched with `../shared/scripts/fetch-smollm2.sh`
/// when absent; `None` (after printing why) when it cannot be had.
pub fn smollm2() -> Option<PathBuf> {
    let p = models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        return Some(p);
    }
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/scripts/fetch-smollm2.sh");
    let ok = std::process::Command::new("bash")
        .arg(&script)
        .arg(models_dir())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok && p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipping: SmolLM2 is not available and {} could not fetch it",
            script.display()
        );
        None
    }
}

/// A reference file's arrays.
pub struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    /// Reads `fixtures/<dir>/reference.safetensors` (or another file under fixtures).
    pub fn open(rel: &str) -> Reference {
        let p = fixtures().join(rel);
        Reference {
            bytes: std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        }
    }

    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("valid safetensors")
    }

    /// Reads a reference file at `path`.
    pub fn open_path(path: &std::path::Path) -> Reference {
        Reference {
            bytes: std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    /// An F32 array and its shape.
    pub fn f32(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let st = self.st();
        let t = st
            .tensor(name)
            .unwrap_or_else(|_| panic!("no array {name}"));
        let v = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (v, t.shape().to_vec())
    }

    /// An I64 array and its shape.
    pub fn i64(&self, name: &str) -> (Vec<i64>, Vec<usize>) {
        let st = self.st();
        let t = st
            .tensor(name)
            .unwrap_or_else(|_| panic!("no array {name}"));
        let v = t
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (v, t.shape().to_vec())
    }

    /// An I64 array as token ids.
    pub fn ids(&self, name: &str) -> Vec<u32> {
        self.i64(name).0.into_iter().map(|x| x as u32).collect()
    }
}

/// The largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Index of the largest value.
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// The host CPU with `threads` threads.
pub fn cpu(threads: usize) -> std::sync::Arc<dyn ats_core::device::Device> {
    std::sync::Arc::new(ats_cpu::CpuDevice::new(threads).unwrap())
}

/// A machine of `host` alone.
pub fn host_only(host: std::sync::Arc<dyn ats_core::device::Device>) -> Machine {
    Machine::host_only(host).unwrap()
}

/// A machine of `host` and `gpu`.
pub fn with_gpu(
    host: std::sync::Arc<dyn ats_core::device::Device>,
    gpu: std::sync::Arc<dyn ats_core::device::Device>,
) -> Machine {
    Machine::new(host, Some(gpu)).unwrap()
}

/// A CPU-only session for a fixture or model file.
pub fn cpu_engine(
    path: &std::path::Path,
    n_ctx: usize,
    kv: ats_core::device::KvType,
) -> ats_sched::session::Session {
    use std::sync::Arc;
    let spec = Arc::new(ats_core::spec::ModelSpec::open(path).unwrap_or_else(|e| panic!("{e}")));
    engine_on(spec, host_only(cpu(2)), n_ctx, kv, Policy::Ats, true)
}

/// The run configuration of the tests' sessions.
pub fn run_config(
    spec: &ats_core::spec::ModelSpec,
    n_ctx: usize,
    kv: ats_core::device::KvType,
    policy: Policy,
    all_logits: bool,
) -> RunConfig {
    RunConfig {
        n_ctx,
        kv_type: kv,
        policy,
        all_logits,
        ..RunConfig::for_model(spec, 2)
    }
}

/// A session for `spec` on `machine` with a default-roofline cost model.
pub fn engine_on(
    spec: std::sync::Arc<ats_core::spec::ModelSpec>,
    machine: Machine,
    n_ctx: usize,
    kv: ats_core::device::KvType,
    policy: Policy,
    all_logits: bool,
) -> ats_sched::session::Session {
    try_engine_on(spec, machine, n_ctx, kv, policy, all_logits).unwrap_or_else(|e| panic!("{e}"))
}

/// [`engine_on`] that returns planning and loading failures as their messages.
pub fn try_engine_on(
    spec: std::sync::Arc<ats_core::spec::ModelSpec>,
    machine: Machine,
    n_ctx: usize,
    kv: ats_core::device::KvType,
    policy: Policy,
    all_logits: bool,
) -> Result<ats_sched::session::Session, String> {
    let cost = default_cost(&machine);
    try_engine_with_cost(spec, machine, cost, n_ctx, kv, policy, all_logits)
}

/// A cost model with no measurements (each device a default roofline of its
/// kind), for tests that need plans but not a machine's profile.
pub fn default_cost(machine: &Machine) -> ats_sched::profile::CostModel {
    use ats_sched::profile::{CostModel, DeviceProfile};
    let of = |d: &std::sync::Arc<dyn ats_core::device::Device>, kind: &str| {
        (
            DeviceProfile {
                device: d.info().name.clone(),
                kind: kind.into(),
                ..Default::default()
            },
            d.info().parallelism.unwrap_or(1),
        )
    };
    CostModel::new(
        of(machine.host(), "cpu"),
        machine.gpu().map(|g| of(g, "gpu")),
    )
}

/// [`try_engine_on`] with the given cost model.
pub fn try_engine_with_cost(
    spec: std::sync::Arc<ats_core::spec::ModelSpec>,
    machine: Machine,
    cost: ats_sched::profile::CostModel,
    n_ctx: usize,
    kv: ats_core::device::KvType,
    policy: Policy,
    all_logits: bool,
) -> Result<ats_sched::session::Session, String> {
    let run = run_config(&spec, n_ctx, kv, policy, all_logits);
    ats_sched::session::Session::new(spec, machine, cost, run).map_err(|e| e.to_string())
}

/// The vision-language fixtures: directory, text model, mmproj.
pub const VL_FIXTURES: [(&str, &str, &str); 2] = [
    ("qwen2_vl", "qwen2_vl-f32.gguf", "mmproj-qwen2_vl-f32.gguf"),
    (
        "qwen2_5_vl",
        "qwen2_5_vl-f32.gguf",
        "mmproj-qwen2_5_vl-f32.gguf",
    ),
];

/// The test images of the vision-language fixtures.
pub const VL_IMAGES: [&str; 2] = ["small", "large"];

/// A VL fixture's model pair, checked against each other.
pub fn vl_fixture(dir: &str) -> ats_vision::Vlm {
    let (_, model, mmproj) = VL_FIXTURES
        .iter()
        .find(|f| f.0 == dir)
        .unwrap_or_else(|| panic!("no VL fixture {dir}"));
    let d = fixtures().join(dir);
    ats_vision::Vlm::open(&d.join(model), &d.join(mmproj)).unwrap_or_else(|e| panic!("{e}"))
}

/// A simulated GPU with `budget` bytes whose kernels run on `threads` CPU
/// threads, with no launch or sync costs and 1 TB/s copies.
pub fn sim_gpu(budget: u64, threads: usize) -> std::sync::Arc<dyn ats_core::device::Device> {
    sim_gpu_with(
        ats_sched::sim::SimGpuConfig {
            memory: budget,
            launch_us: 0.0,
            sync_us: 0.0,
            copy_gbps: 1000.0,
            ..ats_sched::sim::SimGpuConfig::default()
        },
        threads,
    )
}

/// A simulated GPU with the given settings whose kernels run on `threads` CPU threads.
pub fn sim_gpu_with(
    cfg: ats_sched::sim::SimGpuConfig,
    threads: usize,
) -> std::sync::Arc<dyn ats_core::device::Device> {
    let inner: std::sync::Arc<dyn ats_core::device::Device> = std::sync::Arc::new(
        ats_cpu::CpuDevice::with_isa(threads, ats_cpu::matmul::Isa::detect(), "sim-gpu-kernels")
            .unwrap(),
    );
    std::sync::Arc::new(ats_sched::sim::SimGpu::new(inner, cfg))
}

/// A xorshift64 generator for the tests' random placements: deterministic
/// from its seed, no dependency.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// True with probability `pct` percent.
    pub fn coin(&mut self, pct: u64) -> bool {
        self.next_u64() % 100 < pct
    }
}

/// A 2560x1440 PNG with edges, gradients and texture, written to `dir`.
pub fn write_1440p_png(dir: &std::path::Path) -> std::path::PathBuf {
    let img = image::RgbImage::from_fn(2560, 1440, |x, y| {
        let stripe = if (x / 80 + y / 60) % 2 == 0 { 200 } else { 40 };
        image::Rgb([(x * 255 / 2559) as u8, stripe, ((x ^ y) & 0xff) as u8])
    });
    let path = dir.join("scene-1440p.png");
    img.save(&path).expect("writing a PNG to a temp dir");
    path
}

/// The GPU if `on_gpu`, else the host: for the tests' random placements.
pub fn gpu_if(on_gpu: bool) -> ats_core::machine::DeviceId {
    if on_gpu {
        ats_core::machine::DeviceId::Gpu
    } else {
        ats_core::machine::DeviceId::Host
    }
}

/// A machine model (`--sim-machine SPEC`) with ATS on `threads` host
/// threads and a GPU budget of `vram` bytes; its ops compute on this
/// machine's CPU (two threads per device).
pub fn sim_machine(
    spec: &str,
    threads: usize,
    vram: Option<u64>,
) -> ats_sched::sim::VirtualMachine {
    let spec = ats_sched::sim::MachineSpec::parse(spec).unwrap_or_else(|e| panic!("{e}"));
    ats_sched::sim::VirtualMachine::new(spec, threads, vram, cpu(2), sim_kernels())
}

/// A real CPU device for a simulated device's kernels (its own ledger).
pub fn sim_kernels() -> std::sync::Arc<dyn ats_core::device::Device> {
    std::sync::Arc::new(
        ats_cpu::CpuDevice::with_isa(2, ats_cpu::matmul::Isa::detect(), "sim-kernels").unwrap(),
    )
}

/// A model of synth preset `preset`'s real shapes (`llama-8b`, ...) with
/// all-zero weights, as a sparse file in `dir`: for machine models that
/// only time (`compute=off`).
pub fn zeros_model(
    dir: &std::path::Path,
    preset: &str,
) -> std::sync::Arc<ats_core::spec::ModelSpec> {
    let path = dir.join(format!("{preset}-zeros.gguf"));
    ats_core::synth::SynthSpec::preset(preset)
        .unwrap_or_else(|| panic!("no synth preset {preset}"))
        .write_zeros(&path, None)
        .unwrap();
    std::sync::Arc::new(ats_core::spec::ModelSpec::open(&path).unwrap())
}

/// The cost model a run on `vm` plans with: its profile in virtual time.
pub fn sim_cost(vm: &ats_sched::sim::VirtualMachine) -> ats_sched::profile::CostModel {
    vm.cost_model(true, &|_| sim_kernels())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A session of `spec` on `vm` (`threads` host threads, `vram` bytes)
/// planned for decode `depth` tokens deep, as `--workload DEPTH` states it,
/// that keeps its first plans: no re-plan and no audition (plans judged by
/// their estimates and runs alone).
pub fn frozen_decode_session(
    spec: &std::sync::Arc<ats_core::spec::ModelSpec>,
    vm: &ats_sched::sim::VirtualMachine,
    threads: usize,
    vram: u64,
    depth: usize,
) -> ats_sched::session::Session {
    let run = RunConfig {
        n_ctx: depth + 64,
        kv_type: ats_core::device::KvType::F16,
        policy: Policy::Ats,
        resched: ats_sched::rescheduler::ReschedConfig {
            epsilon: 1e12,
            audition_rounds: 0,
            ..Default::default()
        },
        vram: Some(vram),
        workload: Some(ats_sched::config::Workload {
            depth,
            prompt: 1,
            generate: 64,
        }),
        ..RunConfig::for_model(spec, threads)
    };
    sim_session(spec, vm, &run)
}

/// A session of `spec` on the machine model `vm`, planned for `run` from
/// the machine's profile ([`sim_cost`]).
pub fn sim_session(
    spec: &std::sync::Arc<ats_core::spec::ModelSpec>,
    vm: &ats_sched::sim::VirtualMachine,
    run: &RunConfig,
) -> ats_sched::session::Session {
    let planner =
        ats_sched::planner::Planner::new(spec.graph().clone(), vm.machine(), sim_cost(vm), run)
            .unwrap_or_else(|e| panic!("{e}"));
    ats_sched::session::Session::with_planner(spec.clone(), vm.machine().clone(), planner)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Median virtual seconds of three decode rounds of `e`.
pub fn median_decode_secs(e: &mut ats_sched::session::Session) -> f64 {
    let mut t: Vec<f64> = (0..3u32)
        .map(|i| {
            let t0 = e.now();
            e.decode(101 + i * 7919)
                .unwrap_or_else(|err| panic!("{err}"));
            e.now() - t0
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[1]
}

/// Virtual seconds of the first decode round of `e` after its auditions
/// (a re-audition may follow the first; at least 40 rounds run): the round
/// of the plan they kept. Panics when auditions go on past `max` rounds.
pub fn tpot_after_auditions(e: &mut ats_sched::session::Session, max: u32) -> f64 {
    for i in 0..max {
        let during = e.planner().auditioning();
        let t0 = e.now();
        e.decode(100 + i).unwrap_or_else(|err| panic!("{err}"));
        let tpot = e.now() - t0;
        if i >= 40 && !during && !e.planner().auditioning() {
            return tpot;
        }
    }
    panic!("still auditioning after {max} rounds")
}

/// Puts each KV cache of `plan` on the device its attention node runs on
/// (a plan that moves nodes at random must move their caches with them).
pub fn caches_follow_attention(g: &ats_core::graph::Graph, plan: &mut ats_sched::exec::ExecPlan) {
    for (i, n) in g.nodes.iter().enumerate() {
        if let ats_core::graph::Op::Attention(a) = &n.op
            && let Some(c) = a.cache
        {
            plan.kv_device[c] = plan.node_device[i];
        }
    }
}
