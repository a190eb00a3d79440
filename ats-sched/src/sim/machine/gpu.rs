//! The modelled GPU: its own strictly budgeted ledger, memory and kernels
//! of a real CPU device underneath (every op computes, so outputs are
//! exact), and streams, events and copies timed by the machine's clock.
//!
//! Work runs as soon as it is issued, on the calling thread: issue order
//! is a valid order for every dependency the executor expresses (a wait is
//! always on an event recorded earlier), so computing eagerly gives the
//! outputs an asynchronous device would, while the clock gives each piece
//! of work the time it would start and end on the modelled machine.

use std::sync::Arc;

use ats_core::device::{
    Buffer, BufferStorage, Device, DeviceError, DeviceInfo, DeviceKind, DeviceTimings, Event,
    HostBytes, HostMemory, KvArg, NodeArgs, Stream, WeightArg, WeightData,
};
use ats_core::graph::Graph;
use ats_core::ledger::{Ledger, Region};
use ats_core::round::Round;

use super::clock::{Dir, Model, StreamId};
use super::timing::work_of;

/// A modelled-GPU buffer: memory of the inner device, reserved in the model's ledger.
struct VStorage {
    inner: Buffer,
}

impl BufferStorage for VStorage {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A point on a stream: the virtual time the stream reaches it.
#[derive(Debug)]
struct VEvent(f64);

/// The GPU of a modelled machine.
pub struct VirtualGpu {
    inner: Arc<dyn Device>,
    model: Arc<Model>,
    info: DeviceInfo,
    ledger: Arc<Ledger>,
}

impl std::fmt::Debug for VirtualGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VirtualGpu({})", self.info.name)
    }
}

fn stream(s: Stream) -> StreamId {
    match s {
        Stream::Compute => StreamId::Compute,
        Stream::Transfer => StreamId::Transfer,
    }
}

/// Whether writes into a region are activations (SM copies on the compute
/// stream, as the CUDA backend does) rather than weights or caches (the
/// copy engine, the host waiting).
fn is_activation(region: Region) -> bool {
    matches!(region, Region::Compute | Region::Vision | Region::Workspace)
}

impl VirtualGpu {
    /// The GPU of `model`, its ledger's budget `budget` bytes, its memory
    /// that of `inner` (a CPU device of its own).
    pub(crate) fn new(inner: Arc<dyn Device>, model: Arc<Model>, budget: u64) -> VirtualGpu {
        let name = format!("sim {} ({})", model.spec.gpu.name, model.spec.name);
        VirtualGpu {
            info: DeviceInfo {
                name: name.clone(),
                kind: DeviceKind::SimulatedGpu,
                memory_bytes: Some(model.spec.gpu.memory),
                parallelism: Some(model.spec.gpu.sms),
            },
            ledger: Ledger::new(&name, Some(budget)),
            inner,
            model,
        }
    }

    fn inner_buf(&self, b: &Buffer) -> Result<Buffer, DeviceError> {
        b.storage::<VStorage>()
            .map(|s| s.inner.clone())
            .ok_or_else(|| DeviceError::BadArgument {
                device: self.info.name.clone(),
                message: format!("buffer of {} is not memory of this GPU", b.device()),
            })
    }

    fn event(&self, ev: &Event) -> Result<f64, DeviceError> {
        ev.0.downcast_ref::<VEvent>()
            .map(|e| e.0)
            .ok_or_else(|| DeviceError::BadArgument {
                device: self.info.name.clone(),
                message: "event of another device".into(),
            })
    }

    fn compute(&self) -> bool {
        self.model.spec.compute
    }
}

impl Device for VirtualGpu {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        let lease = self.ledger.reserve(region, bytes as u64, label)?;
        let inner = self.inner.alloc(region, bytes, label)?;
        Ok(Buffer::new(
            Box::new(VStorage { inner }),
            bytes,
            &self.info.name,
            lease,
        ))
    }

    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        let inner = self.inner_buf(dst)?;
        // without computing, activations still land: a routing decides
        // which experts a routed copy moves
        if self.compute() || is_activation(dst.region()) {
            self.inner.write(&inner, offset, src)?;
        }
        if is_activation(dst.region()) {
            // staged into pinned memory, then an SM copy on the compute stream
            self.model.host_memcpy(src.len());
            self.model.sm_copy(src.len(), Dir::H2d, false);
        } else {
            self.model.engine_copy(src.len(), true, true, true, false);
        }
        Ok(())
    }

    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        let inner = self.inner_buf(src)?;
        if self.compute() {
            self.inner.read(&inner, offset, dst)?;
        }
        self.model.sm_copy(dst.len(), Dir::D2h, true);
        self.model.host_memcpy(dst.len());
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
        let inputs: Vec<Buffer> = args
            .inputs
            .iter()
            .map(|b| self.inner_buf(b))
            .collect::<Result<_, _>>()?;
        let output = self.inner_buf(args.output)?;
        let kv = match &args.kv {
            Some(kv) => Some((self.inner_buf(kv.k)?, self.inner_buf(kv.v)?, kv)),
            None => None,
        };
        if self.compute() {
            let wargs: Vec<WeightArg<'_>> = args
                .node
                .weights
                .iter()
                .zip(&weights)
                .map(|(&w, b)| WeightArg {
                    info: &args.graph.weights[w],
                    data: WeightData::Device(b),
                })
                .collect();
            let a = NodeArgs {
                graph: args.graph,
                node_id: args.node_id,
                node: args.node,
                round: args.round,
                inputs: &inputs,
                output: &output,
                weights: &wargs,
                kv: kv.as_ref().map(|(k, v, kv)| KvArg {
                    k,
                    v,
                    capacity: kv.capacity,
                    block_tokens: kv.block_tokens,
                    dtype: kv.dtype,
                }),
            };
            self.inner.run(&a)?;
        } else {
            super::fake_routing(self.inner.as_ref(), args, &output)?;
        }
        let kv_f16 = args
            .kv
            .as_ref()
            .is_none_or(|kv| kv.dtype == ats_core::device::KvType::F16);
        let w = work_of(args.graph, args.node_id, args.round, kv_f16);
        self.model.gpu_kernel(Some(args.node_id), &w);
        Ok(())
    }

    fn node_scratch_bytes(&self, _graph: &Graph, _node: usize, _round: &Round) -> u64 {
        // as the CUDA backend: attention needs no scratch beyond its buffers
        0
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.model.synchronize();
        Ok(())
    }

    fn supports_async(&self) -> bool {
        true
    }

    fn copy_async(&self, dst: &Buffer, offset: usize, src: &HostBytes) -> Result<(), DeviceError> {
        let inner = self.inner_buf(dst)?;
        if self.compute() {
            self.inner.write(&inner, offset, src.bytes())?;
        }
        self.model.engine_copy(src.len, false, false, false, true);
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
        let mut ids = vec![0u8; rows * 2 * top_k * 4];
        // the routing is on the device: reading it costs the host nothing
        self.inner.read(&routing, 0, &mut ids)?;
        let n_expert = src.len / per_expert.max(1);
        let hit = ats_core::graph::experts_chosen(&ids, rows, top_k, n_expert);
        let mut bytes = 0usize;
        let mut experts = 0usize;
        for (e, _) in hit.iter().enumerate().filter(|x| *x.1) {
            let off = e * per_expert;
            if self.compute() {
                self.inner
                    .write(&inner, off, &src.bytes()[off..off + per_expert])?;
            }
            bytes += per_expert;
            experts += 1;
        }
        self.model.routed_copy(bytes, experts);
        Ok(())
    }

    fn record_event(&self, s: Stream) -> Result<Event, DeviceError> {
        Ok(Event(Arc::new(VEvent(self.model.record(stream(s))))))
    }

    fn wait_event(&self, s: Stream, event: &Event) -> Result<(), DeviceError> {
        let t = self.event(event)?;
        self.model.wait(stream(s), t);
        Ok(())
    }

    fn sync_event(&self, event: &Event) -> Result<(), DeviceError> {
        let t = self.event(event)?;
        self.model.host_wait(t);
        Ok(())
    }

    fn pin_host(&self, _mem: &Arc<dyn HostMemory>) -> Result<bool, DeviceError> {
        Ok(true)
    }

    fn drain_timings(&self) -> DeviceTimings {
        self.model.drain()
    }

    fn now(&self) -> f64 {
        self.model.now()
    }

    fn virtual_time(&self) -> bool {
        true
    }
}
