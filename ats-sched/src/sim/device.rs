//! The simulated GPU device.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use ats_core::device::{
    Buffer, BufferStorage, Device, DeviceError, DeviceInfo, DeviceKind, Event, HostBytes, KvArg,
    NodeArgs, Stream, WeightArg, WeightData,
};
use ats_core::graph::Graph;
use ats_core::ledger::{Ledger, Region};
use ats_core::round::Round;

use super::config::SimGpuConfig;
use super::worker::{SimEvent, Worker};

/// A simulated-GPU buffer: memory of the inner device, reserved in the sim's ledger.
struct SimStorage {
    inner: Buffer,
}

impl BufferStorage for SimStorage {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// What the simulation did, for reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimStats {
    /// Kernels run.
    pub kernels: u64,
    /// Kernels whose inner computation took longer than their simulated time.
    pub saturated: u64,
    /// Simulated kernel seconds.
    pub kernel_secs: f64,
    /// Weight copies done.
    pub copies: u64,
    /// Bytes copied host<->device.
    pub copy_bytes: u64,
    /// Simulated copy seconds.
    pub copy_secs: f64,
    /// Simulated seconds per node run, since the last drain.
    pub node_secs: Vec<(usize, f64)>,
    /// `(bytes, simulated seconds)` per weight copy, since the last drain.
    pub copy_log: Vec<(u64, f64)>,
}

struct Shared {
    inner: Arc<dyn Device>,
    cfg: SimGpuConfig,
    start: Instant,
    stats: Mutex<SimStats>,
    error: Mutex<Option<String>>,
    name: String,
}

impl Shared {
    fn fail(&self, e: impl ToString) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(|| e.to_string());
    }

    fn copy_secs(&self, bytes: usize) -> f64 {
        let slow = self
            .cfg
            .copy_slowdown
            .at(self.start.elapsed().as_secs_f64());
        bytes as f64 / (self.cfg.copy_gbps * 1e9) * slow
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, SimStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A simulated GPU (see the module docs).
pub struct SimGpu {
    info: DeviceInfo,
    ledger: Arc<Ledger>,
    shared: Arc<Shared>,
    compute: Worker,
    transfer: Worker,
}

impl std::fmt::Debug for SimGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimGpu({:?})", self.shared.cfg)
    }
}

/// An owned copy of a node's arguments, for the compute thread.
struct OwnedArgs {
    graph: Arc<Graph>,
    node_id: usize,
    round: Arc<Round>,
    inputs: Vec<Buffer>,
    output: Buffer,
    weights: Vec<Buffer>,
    /// Keys, values, rows, rows per block, element type.
    kv: Option<(Buffer, Buffer, usize, usize, ats_core::device::KvType)>,
}

impl SimGpu {
    /// A simulated GPU computing with `inner` (a CPU device of its own, so its
    /// ledger and threads are separate from the host's).
    pub fn new(inner: Arc<dyn Device>, cfg: SimGpuConfig) -> SimGpu {
        let name = "sim-gpu".to_string();
        SimGpu {
            info: DeviceInfo {
                name: name.clone(),
                kind: DeviceKind::SimulatedGpu,
                memory_bytes: Some(cfg.memory),
                parallelism: inner.info().parallelism,
            },
            ledger: Ledger::new(&name, Some(cfg.memory)),
            shared: Arc::new(Shared {
                inner,
                cfg,
                start: Instant::now(),
                stats: Mutex::new(SimStats::default()),
                error: Mutex::new(None),
                name,
            }),
            compute: Worker::new("sim-gpu-compute"),
            transfer: Worker::new("sim-gpu-transfer"),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SimGpuConfig {
        &self.shared.cfg
    }

    /// A copy of the statistics so far.
    pub fn stats(&self) -> SimStats {
        self.shared.stats().clone()
    }

    /// Clears the statistics.
    pub fn reset_stats(&self) {
        *self.shared.stats() = SimStats::default();
    }

    fn inner_buf(&self, b: &Buffer) -> Result<Buffer, DeviceError> {
        b.storage::<SimStorage>()
            .map(|s| s.inner.clone())
            .ok_or_else(|| DeviceError::BadArgument {
                device: self.info.name.clone(),
                message: format!("buffer of {} is not simulated-GPU memory", b.device()),
            })
    }

    fn worker(&self, s: Stream) -> &Worker {
        match s {
            Stream::Compute => &self.compute,
            Stream::Transfer => &self.transfer,
        }
    }

    fn check_error(&self) -> Result<(), DeviceError> {
        if let Some(e) = self
            .shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(DeviceError::Backend {
                device: self.info.name.clone(),
                message: e,
            });
        }
        Ok(())
    }

    fn event(ev: &Event) -> Result<Arc<SimEvent>, DeviceError> {
        ev.0.clone()
            .downcast::<SimEvent>()
            .map_err(|_| DeviceError::BadArgument {
                device: "sim-gpu".into(),
                message: "event of another device".into(),
            })
    }
}

impl Device for SimGpu {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        let lease = self.ledger.reserve(region, bytes as u64, label)?;
        let inner = self.shared.inner.alloc(region, bytes, label)?;
        Ok(Buffer::new(
            Box::new(SimStorage { inner }),
            bytes,
            &self.info.name,
            lease,
        ))
    }

    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        let inner = self.inner_buf(dst)?;
        let data = src.to_vec();
        let sh = self.shared.clone();
        self.compute.submit(move |tl| {
            let t0 = Instant::now();
            let secs = sh.cfg.sync_us * 1e-6 + sh.copy_secs(data.len());
            if let Err(e) = sh.inner.write(&inner, offset, &data) {
                sh.fail(e);
            }
            let mut st = sh.stats();
            st.copy_bytes += data.len() as u64;
            st.copy_secs += secs;
            drop(st);
            tl.advance(t0, secs);
        });
        self.check_error()
    }

    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        let inner = self.inner_buf(src)?;
        let out = Arc::new(Mutex::new(vec![0u8; dst.len()]));
        let (sh, o) = (self.shared.clone(), out.clone());
        self.compute.submit(move |tl| {
            let t0 = Instant::now();
            let mut buf = o.lock().unwrap_or_else(|p| p.into_inner());
            let secs = sh.cfg.sync_us * 1e-6 + sh.copy_secs(buf.len());
            if let Err(e) = sh.inner.read(&inner, offset, &mut buf) {
                sh.fail(e);
            }
            let mut st = sh.stats();
            st.copy_bytes += buf.len() as u64;
            st.copy_secs += secs;
            drop(st);
            tl.advance(t0, secs);
        });
        self.compute.fence();
        self.check_error()?;
        dst.copy_from_slice(&out.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(())
    }

    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError> {
        let weights = args
            .weights
            .iter()
            .map(|w| match &w.data {
                WeightData::Device(b) => self.inner_buf(b),
                WeightData::Host(_) => Err(DeviceError::Node {
                    device: self.info.name.clone(),
                    node: args.node.name.clone(),
                    message: format!(
                        "weight {} is in host memory; a GPU needs it copied first",
                        w.info.name
                    ),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let job = OwnedArgs {
            graph: args.graph.clone(),
            node_id: args.node_id,
            round: args.round.clone(),
            inputs: args
                .inputs
                .iter()
                .map(|b| self.inner_buf(b))
                .collect::<Result<_, _>>()?,
            output: self.inner_buf(args.output)?,
            weights,
            kv: match &args.kv {
                Some(kv) => Some((
                    self.inner_buf(kv.k)?,
                    self.inner_buf(kv.v)?,
                    kv.capacity,
                    kv.block_tokens,
                    kv.dtype,
                )),
                None => None,
            },
        };
        // the kernel's scratch lives in this device's memory while it runs
        // (reserved on the compute stream, when the kernel starts: the host
        // may have queued many kernels ahead)
        let scratch = self.node_scratch_bytes(args.graph, args.node_id, args.round);
        let (ledger, region) = (self.ledger.clone(), args.output.region());
        let sh = self.shared.clone();
        self.compute.submit(move |tl| {
            let node = &job.graph.nodes[job.node_id];
            let _lease = if scratch > 0 {
                match ledger.reserve(region, scratch, &format!("{} scratch", node.name)) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        sh.fail(e);
                        return;
                    }
                }
            } else {
                None
            };
            let t0 = Instant::now();
            let wargs: Vec<WeightArg<'_>> = node
                .weights
                .iter()
                .zip(&job.weights)
                .map(|(&w, b)| WeightArg {
                    info: &job.graph.weights[w],
                    data: WeightData::Device(b),
                })
                .collect();
            let a = NodeArgs {
                graph: &job.graph,
                node_id: job.node_id,
                node,
                round: &job.round,
                inputs: &job.inputs,
                output: &job.output,
                weights: &wargs,
                kv: job
                    .kv
                    .as_ref()
                    .map(|(k, v, capacity, block_tokens, dtype)| KvArg {
                        k,
                        v,
                        capacity: *capacity,
                        block_tokens: *block_tokens,
                        dtype: *dtype,
                    }),
            };
            if let Err(e) = sh.inner.run(&a) {
                sh.fail(e);
            }
            let took = t0.elapsed().as_secs_f64();
            let slow = sh.cfg.compute_slowdown.at(sh.start.elapsed().as_secs_f64());
            let secs = sh.cfg.launch_us * 1e-6 + took / sh.cfg.speed * slow;
            let mut st = sh.stats();
            st.kernels += 1;
            if took > secs {
                st.saturated += 1;
            }
            st.kernel_secs += secs.max(took);
            st.node_secs.push((job.node_id, secs.max(took)));
            drop(st);
            tl.advance(t0, secs);
        });
        Ok(())
    }

    fn node_scratch_bytes(&self, graph: &Graph, node: usize, round: &Round) -> u64 {
        self.shared.inner.node_scratch_bytes(graph, node, round)
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.transfer.fence();
        self.compute.fence();
        self.check_error()
    }

    fn supports_async(&self) -> bool {
        true
    }

    fn copy_async(&self, dst: &Buffer, offset: usize, src: &HostBytes) -> Result<(), DeviceError> {
        let inner = self.inner_buf(dst)?;
        let (sh, src) = (self.shared.clone(), src.clone());
        self.transfer.submit(move |tl| {
            let t0 = Instant::now();
            let secs = sh.copy_secs(src.len);
            if let Err(e) = sh.inner.write(&inner, offset, src.bytes()) {
                sh.fail(e);
            }
            let mut st = sh.stats();
            st.copies += 1;
            st.copy_bytes += src.len as u64;
            st.copy_secs += secs;
            st.copy_log.push((src.len as u64, secs));
            drop(st);
            tl.advance(t0, secs);
        });
        Ok(())
    }

    fn copy_routed_async(
        &self,
        dst: &Buffer,
        src: &HostBytes,
        per_expert: usize,
        routing: &Buffer,
        rows: usize,
        top_k: usize,
    ) -> Result<(), DeviceError> {
        let inner = self.inner_buf(dst)?;
        let routing = self.inner_buf(routing)?;
        let (sh, src) = (self.shared.clone(), src.clone());
        self.transfer.submit(move |tl| {
            let t0 = Instant::now();
            let mut ids = vec![0u8; rows * 2 * top_k * 4];
            if let Err(e) = sh.inner.read(&routing, 0, &mut ids) {
                sh.fail(e);
                return;
            }
            let n_expert = src.len / per_expert.max(1);
            let hit = ats_core::graph::experts_chosen(&ids, rows, top_k, n_expert);
            let mut bytes = 0usize;
            for (e, _) in hit.iter().enumerate().filter(|x| *x.1) {
                let off = e * per_expert;
                if let Err(err) = sh
                    .inner
                    .write(&inner, off, &src.bytes()[off..off + per_expert])
                {
                    sh.fail(err);
                }
                bytes += per_expert;
            }
            let secs = sh.copy_secs(bytes);
            let mut st = sh.stats();
            st.copies += 1;
            st.copy_bytes += bytes as u64;
            st.copy_secs += secs;
            st.copy_log.push((bytes as u64, secs));
            drop(st);
            tl.advance(t0, secs);
        });
        Ok(())
    }

    fn record_event(&self, stream: Stream) -> Result<Event, DeviceError> {
        Ok(Event(self.worker(stream).marker()))
    }

    fn wait_event(&self, stream: Stream, event: &Event) -> Result<(), DeviceError> {
        let ev = Self::event(event)?;
        self.worker(stream).submit(move |tl| {
            ev.wait();
            // work waiting on another stream cannot start before it is signalled
            tl.advance(Instant::now(), 0.0);
        });
        Ok(())
    }

    fn drain_timings(&self) -> ats_core::device::DeviceTimings {
        let mut st = self.shared.stats();
        ats_core::device::DeviceTimings {
            nodes: std::mem::take(&mut st.node_secs),
            copies: std::mem::take(&mut st.copy_log),
        }
    }

    fn sync_event(&self, event: &Event) -> Result<(), DeviceError> {
        Self::event(event)?.wait();
        self.check_error()
    }
}

impl Drop for SimGpu {
    fn drop(&mut self) {
        // let queued work finish before the inner buffers go away
        self.transfer.fence();
        self.compute.fence();
        let _ = &self.shared.name;
    }
}
