//! A machine model in virtual time (`--sim-machine`): a consumer PC (or the
//! lent GPU host) whose devices compute every op for real, so outputs are
//! exact, while each op's, copy's and synchronisation's duration comes from
//! a model of the machine: per device, compute rates, memory bandwidth and
//! fixed costs per op kind ([`timing`]); the copy engine and SM-driven
//! copies over a PCIe link of a given generation and width; the host's
//! memory bandwidth shared by CPU kernels and PCIe traffic; other programs
//! taking cores, SM time, VRAM or link bandwidth, and thermal walls, all
//! scripted over time ([`spec::Scenario`]). A discrete-event clock
//! ([`clock`]) orders the host thread, the compute and transfer streams and
//! events exactly as the executor issues them, and every device answers
//! [`Device::now`] from it: the executor, the cost model and the
//! re-scheduler time work by it, so a run gives the same numbers on any
//! machine under any load.
//!
//! Beside it, [`super::SimGpu`] runs real threads against the wall clock.

pub(crate) mod clock;
mod gpu;
mod host;
mod presets;
pub mod script;
pub mod spec;
pub(crate) mod timing;

pub use clock::ModelStats;
pub use gpu::VirtualGpu;
pub use host::VirtualCpu;
pub use script::Script;
pub use spec::{MACHINE_KEYS, MachineSpec, PRESETS, Scenario};

use std::sync::Arc;

use ats_core::device::{Buffer, Device, DeviceError, NodeArgs};
use ats_core::graph::Op;
use ats_core::machine::Machine;

use crate::profile::{BenchOptions, CostModel, Profile, profile_devices_with};
use clock::Model;

/// A modelled machine: its devices and its clock.
#[derive(Clone)]
pub struct VirtualMachine {
    model: Arc<Model>,
    machine: Machine,
    threads: usize,
}

impl std::fmt::Debug for VirtualMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VirtualMachine({})", self.model.spec.name)
    }
}

impl VirtualMachine {
    /// The machine `spec` with ATS on `threads` host threads and a GPU
    /// budget of `vram` bytes (`None`: what the scenario leaves of the
    /// device's memory). `host_inner` and `gpu_inner` are real CPU devices
    /// that compute the ops (separate ones: each device has its own ledger).
    pub fn new(
        spec: MachineSpec,
        threads: usize,
        vram: Option<u64>,
        host_inner: Arc<dyn Device>,
        gpu_inner: Arc<dyn Device>,
    ) -> VirtualMachine {
        let budget = vram.unwrap_or(u64::MAX).min(spec.vram_available());
        let model = Arc::new(Model::new(spec));
        let host: Arc<dyn Device> = Arc::new(VirtualCpu::new(host_inner, model.clone(), threads));
        let gpu: Arc<dyn Device> = Arc::new(VirtualGpu::new(gpu_inner, model.clone(), budget));
        VirtualMachine {
            machine: Machine::new(host, Some(gpu)).expect("a CPU host and a GPU"),
            model,
            threads,
        }
    }

    /// The devices.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The spec.
    pub fn spec(&self) -> &MachineSpec {
        &self.model.spec
    }

    /// Host threads ATS runs.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Virtual seconds on the host thread.
    pub fn now(&self) -> f64 {
        self.model.now()
    }

    /// Seconds on the scenario's clock (its scripts' time).
    pub fn scenario_time(&self) -> f64 {
        self.model.scenario_time()
    }

    /// Starts the scenario's scripts now (by default they count from the
    /// machine's start, before the model was loaded).
    pub fn start_scenario(&self) {
        self.model.start_scenario()
    }

    /// Advances the host's clock by `secs` of other work (think time,
    /// a client's pause).
    pub fn idle(&self, secs: f64) {
        self.model.host_busy(secs)
    }

    /// What the model did so far.
    pub fn stats(&self) -> ModelStats {
        self.model.stats()
    }

    /// Clears [`VirtualMachine::stats`].
    pub fn reset_stats(&self) {
        self.model.reset_stats()
    }

    /// What `ats-cli profile` would measure on this machine: the
    /// install-phase micro-benchmarks run on a twin of it with a quiet
    /// scenario (the machine idle, as when a profile is taken), only timed
    /// (`compute=off`: outputs are left as they were); the contended CPU samples run beside modelled PCIe
    /// traffic at the link's rate. `make_inner` makes the real CPU devices
    /// the twin's devices sit on. Deterministic, and quick: nothing is
    /// computed.
    pub fn profile(
        &self,
        quick: bool,
        make_inner: &dyn Fn(&str) -> Arc<dyn Device>,
    ) -> Result<Profile, String> {
        let mut spec = self.model.spec.clone();
        spec.scenario = Scenario::default();
        spec.compute = false;
        // the same machine profiles the same: keep each profile for the process
        static CACHE: std::sync::Mutex<Vec<(String, Profile)>> = std::sync::Mutex::new(Vec::new());
        let key = format!("{}|{}|{quick}", spec.to_file_text(), self.threads);
        let cached = CACHE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|c| c.0 == key)
            .map(|c| c.1.clone());
        let mut profile = match cached {
            Some(p) => p,
            None => {
                let p = self.measure_profile(&spec, quick, make_inner)?;
                CACHE
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((key, p.clone()));
                p
            }
        };
        // the profile belongs to this machine's devices, by name
        for (d, (_, dev)) in profile.devices.iter_mut().zip(self.machine.iter()) {
            d.device = dev.info().name.clone();
        }
        Ok(profile)
    }

    fn measure_profile(
        &self,
        spec: &MachineSpec,
        quick: bool,
        make_inner: &dyn Fn(&str) -> Arc<dyn Device>,
    ) -> Result<Profile, String> {
        let twin = |threads: usize| {
            VirtualMachine::new(
                spec.clone(),
                threads,
                // the whole device: the profile measures speeds, not capacity
                Some(spec.gpu.memory),
                make_inner("sim-host-kernels"),
                make_inner("sim-gpu-kernels"),
            )
        };
        let main = twin(self.threads);
        let mut opts = BenchOptions::new(quick, self.threads);
        opts.zero_weights = true;
        // virtual time repeats itself: one timed run after the warm-up
        opts.reps = 1;
        let model = main.model.clone();
        let link = spec.link.h2d_gbps;
        let traffic = move || -> Box<dyn std::any::Any> {
            model.set_background_dma(link);
            Box::new(Traffic(model.clone()))
        };
        profile_devices_with(
            &main.machine,
            &|t| Ok(twin(t).machine.host().clone()),
            &opts,
            &mut |_, _, _| {},
            &traffic,
        )
    }

    /// A cost model from [`VirtualMachine::profile`] (what a run on this
    /// machine plans with).
    pub fn cost_model(
        &self,
        quick: bool,
        make_inner: &dyn Fn(&str) -> Arc<dyn Device>,
    ) -> Result<CostModel, String> {
        let p = self.profile(quick, make_inner)?;
        let host = p.devices.first().cloned().unwrap_or_default();
        let gpu = p.devices.get(1).cloned().unwrap_or_default();
        Ok(CostModel::new(
            (host, self.threads),
            Some((gpu, self.model.spec.gpu.sms)),
        ))
    }
}

/// Modelled copy traffic while alive (the profile's contended samples).
struct Traffic(Arc<Model>);

impl Drop for Traffic {
    fn drop(&mut self) {
        self.0.set_background_dma(0.0);
    }
}

/// Without computing (`compute=off`), a router still has to choose experts
/// (the routed copies and the expert kernels follow its choice): `top_k`
/// distinct experts per row, a fixed pseudo-random pattern of the node and
/// the row's position, written into `output` (on `dev`).
pub(crate) fn fake_routing(
    dev: &dyn Device,
    args: &NodeArgs<'_>,
    output: &Buffer,
) -> Result<(), DeviceError> {
    let Op::MoeRouter {
        n_expert, top_k, ..
    } = args.node.op
    else {
        return Ok(());
    };
    let shape = args.round.shape();
    let rows = args.graph.values[args.node.output]
        .rows
        .resolve(shape.n_tokens, shape.n_outputs);
    let mut vals: Vec<f32> = Vec::with_capacity(rows * 2 * top_k);
    // an odd stride visits every expert of a power-of-two count before repeating
    let stride = if n_expert % 2 == 0 {
        2 * (n_expert / 4) + 1
    } else {
        1
    };
    for r in 0..rows {
        let pos = args
            .round
            .positions
            .data
            .get(r)
            .copied()
            .unwrap_or(r as i32) as u64;
        let mut h = (args.node_id as u64 ^ (pos << 20)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
        let first = (h % n_expert as u64) as usize;
        let want = top_k.min(n_expert);
        let mut ids = Vec::with_capacity(want);
        for j in 0..2 * n_expert {
            let e = (first + j * stride) % n_expert;
            if !ids.contains(&e) {
                ids.push(e);
            }
            if ids.len() == want {
                break;
            }
        }
        for e in 0..n_expert {
            if ids.len() == want {
                break;
            }
            if !ids.contains(&e) {
                ids.push(e);
            }
        }
        vals.extend(ids.iter().map(|&i| i as f32));
        vals.extend(std::iter::repeat_n(1.0 / top_k as f32, top_k));
    }
    let bytes: &[u8] = bytemuck::cast_slice(&vals);
    let n = bytes.len().min(output.len());
    dev.write(output, 0, &bytes[..n])
}
