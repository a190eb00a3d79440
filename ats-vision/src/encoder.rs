//! Running the vision graph on a device: the CPU reading weights from the
//! mapping, or a GPU with every vision weight left in host memory and
//! streamed block by block through temp slots (two per role: a double
//! buffer). Every allocation is accounted to the ledger's vision region and
//! freed when the image is done, so the language model finds the device empty.

use std::sync::Arc;
use std::time::Instant;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::graph::Op;
use ats_core::ledger::Region;
use ats_core::machine::{DeviceId, Machine};
use ats_core::round::Round;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor, Schedule, SlotPlan};
use ats_sched::size::fmt_bytes;

use crate::VisionError;
use crate::graph::VisionGraph;
use crate::preprocess::PixelValues;
use crate::spec::VisionSpec;

/// The largest Q chunk the encoder picks by itself: beyond it a bigger
/// chunk buys no measurable reuse of the key/value blocks (see the report in
/// `tests/tests/vision_highres.rs`).
pub const MAX_Q_BLOCK: usize = 256;
/// The smallest Q chunk the encoder tries before giving up on a budget.
pub const MIN_Q_BLOCK: usize = 16;

/// Where the encoder runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderDevice {
    /// The GPU when the machine has one and the image's encoder fits its
    /// free memory, else the host CPU, saying why in [`EncodeStats::note`].
    Auto,
    /// The host CPU.
    Host,
    /// The GPU; an image that does not fit is an error.
    Gpu,
}

/// Encoder settings.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    /// Where to run.
    pub device: EncoderDevice,
    /// Query rows per attention block; `None`: the largest up to
    /// [`MAX_Q_BLOCK`] whose scratch fits the device's free memory.
    pub q_block: Option<usize>,
    /// Temp slots per weight role on a GPU (2 = double buffering).
    pub slots_per_role: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            device: EncoderDevice::Auto,
            q_block: None,
            slots_per_role: 2,
        }
    }
}

/// What encoding one image will take on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodePlan {
    /// Where it runs.
    pub device: DeviceId,
    /// The Q chunk.
    pub q_block: usize,
    /// Activation slot bytes.
    pub activation_bytes: u64,
    /// Temp slot bytes (streamed weights; 0 on the CPU).
    pub temp_bytes: u64,
    /// Attention scratch bytes (the largest attention node's).
    pub scratch_bytes: u64,
    /// Why the plan is not what was asked for, if it is not.
    pub note: Option<String>,
}

impl EncodePlan {
    /// Bytes the device needs at the peak.
    pub fn total_bytes(&self) -> u64 {
        self.activation_bytes + self.temp_bytes + self.scratch_bytes
    }
}

/// What encoding an image took.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct EncodeStats {
    /// The device's name.
    pub device: String,
    /// Wall time, milliseconds.
    pub ms: f64,
    /// Patches encoded.
    pub n_patches: usize,
    /// The Q chunk used.
    pub q_block: usize,
    /// The plan's estimate of the peak, bytes.
    pub planned_bytes: u64,
    /// The device ledger's vision-region peak so far, bytes.
    pub vision_peak_bytes: u64,
    /// A line for the user when the encoder did not run where asked.
    pub note: Option<String>,
}

/// One image's embeddings: `n_tokens` rows of `n_embd`, in raster order of
/// the merged grid.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageEmbedding {
    /// `n_tokens * n_embd` values.
    pub data: Vec<f32>,
    /// Image tokens.
    pub n_tokens: usize,
    /// Values per token (the language model's hidden size).
    pub n_embd: usize,
    /// (t, h, w) of the merged grid.
    pub grid: [usize; 3],
    /// What encoding took.
    pub stats: EncodeStats,
}

/// Encodes images with a vision tower on a machine's devices.
pub struct VisionEncoder {
    spec: Arc<VisionSpec>,
    machine: Machine,
    cfg: EncoderConfig,
}

impl std::fmt::Debug for VisionEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VisionEncoder({:?} on {:?})",
            self.spec.projector, self.machine
        )
    }
}

impl VisionEncoder {
    /// An encoder for `spec` on `machine`.
    pub fn new(
        spec: Arc<VisionSpec>,
        machine: Machine,
        cfg: EncoderConfig,
    ) -> Result<VisionEncoder, VisionError> {
        if cfg.device == EncoderDevice::Gpu && !machine.has_gpu() {
            return Err(VisionError::Input(
                "the encoder was asked to run on the GPU and the machine has none".into(),
            ));
        }
        if cfg.q_block == Some(0) {
            return Err(VisionError::Input(
                "the attention Q chunk must be at least 1 row".into(),
            ));
        }
        Ok(VisionEncoder { spec, machine, cfg })
    }

    /// The projector.
    pub fn spec(&self) -> &Arc<VisionSpec> {
        &self.spec
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The device of role `d` (the GPU's presence is checked in [`VisionEncoder::new`]).
    fn device(&self, d: DeviceId) -> Result<&Arc<dyn Device>, VisionError> {
        self.machine
            .get(d)
            .ok_or_else(|| VisionError::Input(format!("the machine has no {d}")))
    }

    /// Every node on `device`, every weight in host memory (read in place on
    /// the CPU, streamed through temp slots on the GPU).
    fn exec_plan(vg: &VisionGraph, device: DeviceId) -> ExecPlan {
        let mut p = ExecPlan::all_cpu(&vg.graph);
        p.node_device.fill(device);
        p
    }

    fn round(vg: &VisionGraph, q_block: usize, rows: Option<Arc<Vec<f32>>>) -> Round {
        Round {
            input_rows: rows,
            n_rows: vg.n_patches(),
            positions: vg.positions.clone(),
            segments: vg.segments.clone(),
            attn_q_block: q_block,
            ..Round::default()
        }
    }

    /// What `vg` would take on device `d`, with the Q chunk chosen from its free memory.
    pub fn plan_on(&self, vg: &VisionGraph, d: DeviceId) -> Result<EncodePlan, VisionError> {
        let dev = self.device(d)?;
        let g = &vg.graph;
        let sched = Schedule::build(g, &Self::exec_plan(vg, d), vg.n_patches(), 0);
        let activation_bytes = sched.compute_bytes(d) as u64;
        let temp_bytes = match d {
            DeviceId::Host => 0,
            // the executor's rule: every weight streams, in order of use
            DeviceId::Gpu => {
                let order: Vec<usize> = g
                    .nodes
                    .iter()
                    .flat_map(|n| n.weights.iter().copied())
                    .collect();
                SlotPlan::new(g, &order, self.cfg.slots_per_role).total_bytes()
            }
        };
        let scratch = |q: usize| {
            let round = Self::round(vg, q, None);
            (0..g.nodes.len())
                .filter(|&i| matches!(g.nodes[i].op, Op::Attention(_)))
                .map(|i| dev.node_scratch_bytes(g, i, &round))
                .max()
                .unwrap_or(0)
        };
        let fixed = activation_bytes + temp_bytes;
        let free = dev.ledger().available();
        let q_block = match self.cfg.q_block {
            Some(q) => q,
            None => {
                // the largest chunk whose scratch fits beside the activations and slots
                let mut q = MAX_Q_BLOCK;
                while q > MIN_Q_BLOCK && fixed.saturating_add(scratch(q)) > free {
                    q /= 2;
                }
                q
            }
        };
        Ok(EncodePlan {
            device: d,
            q_block,
            activation_bytes,
            temp_bytes,
            scratch_bytes: scratch(q_block),
            note: None,
        })
    }

    /// Where and how `vg` runs under the configuration.
    pub fn plan(&self, vg: &VisionGraph) -> Result<EncodePlan, VisionError> {
        match self.cfg.device {
            EncoderDevice::Host => self.plan_on(vg, DeviceId::Host),
            EncoderDevice::Gpu => {
                let p = self.plan_on(vg, DeviceId::Gpu)?;
                match self.shortfall(vg, &p) {
                    None => Ok(p),
                    Some(problem) => Err(VisionError::Memory {
                        device: self.device(DeviceId::Gpu)?.info().name.clone(),
                        problem: format!(
                            "{problem}; give the image fewer pixels or the GPU a larger budget"
                        ),
                    }),
                }
            }
            EncoderDevice::Auto => {
                let Some(gpu) = self.machine.gpu() else {
                    return self.plan_on(vg, DeviceId::Host);
                };
                let p = self.plan_on(vg, DeviceId::Gpu)?;
                let Some(problem) = self.shortfall(vg, &p) else {
                    return Ok(p);
                };
                let mut cpu = self.plan_on(vg, DeviceId::Host)?;
                cpu.note = Some(format!(
                    "vision encoder on the CPU: on {} {problem}",
                    gpu.info().name
                ));
                Ok(cpu)
            }
        }
    }

    /// Why `p` does not fit its device's free memory (`None`: it fits).
    fn shortfall(&self, vg: &VisionGraph, p: &EncodePlan) -> Option<String> {
        let free = self.machine.get(p.device)?.ledger().available();
        (p.total_bytes() > free).then(|| {
            format!(
                "the {}x{} patch image needs {} ({} activations, {} weight slots, {} attention scratch), {} free",
                vg.grid[1],
                vg.grid[2],
                fmt_bytes(p.total_bytes()),
                fmt_bytes(p.activation_bytes),
                fmt_bytes(p.temp_bytes),
                fmt_bytes(p.scratch_bytes),
                fmt_bytes(free),
            )
        })
    }

    /// Encodes one image's pixel values; every device allocation of the
    /// encoder is released before this returns.
    pub fn encode(&self, pv: &PixelValues) -> Result<ImageEmbedding, VisionError> {
        let t0 = Instant::now();
        let hp = &self.spec.hp;
        let grid = pv.grid_thw;
        let vg = self.spec.graph(grid)?;
        if pv.row_len != hp.row_len()
            || pv.data.len() != pv.n_patches * pv.row_len
            || pv.n_patches != vg.n_patches()
        {
            return Err(VisionError::BadGrid {
                grid,
                problem: format!(
                    "{} values in {} rows of {}, the tower takes rows of {}",
                    pv.data.len(),
                    pv.n_patches,
                    pv.row_len,
                    hp.row_len()
                ),
            });
        }
        let plan = self.plan(&vg)?;
        let d = plan.device;
        let host: Arc<dyn HostMemory> = self.spec.gguf.backing().clone();
        let dev = self.device(d)?;
        if d == DeviceId::Gpu {
            dev.pin_host(&host)
                .map_err(ats_sched::exec::ExecError::from)?;
        }
        let round = Arc::new(Self::round(
            &vg,
            plan.q_block,
            Some(Arc::new(pv.data.clone())),
        ));
        let n_tokens = vg.n_tokens;
        let cfg = ExecConfig {
            kv_capacity: 1,
            kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
            kv_type: KvType::F32,
            slots_per_role: self.cfg.slots_per_role,
            region: Some(Region::Vision),
        };
        let exec_plan = Self::exec_plan(&vg, d);
        let data = {
            let mut ex = Executor::new(
                Arc::new(vg.graph),
                host,
                self.machine.clone(),
                cfg,
                exec_plan,
            )?;
            ex.run(&round)?.to_vec()
            // the executor and every buffer it holds are dropped here
        };
        // the timings of the encoder's kernels are the vision phase's: left
        // queued, the language engine's cost model would read them as its own nodes
        let _ = dev.drain_timings();
        let stats = EncodeStats {
            device: dev.info().name.clone(),
            ms: t0.elapsed().as_secs_f64() * 1000.0,
            n_patches: pv.n_patches,
            q_block: plan.q_block,
            planned_bytes: plan.total_bytes(),
            vision_peak_bytes: dev.ledger().peak_in(Region::Vision),
            note: plan.note.clone(),
        };
        let m = hp.merge_size;
        Ok(ImageEmbedding {
            n_embd: data.len() / n_tokens.max(1),
            data,
            n_tokens,
            grid: [grid[0], grid[1] / m, grid[2] / m],
            stats,
        })
    }
}
