//! The `Device` trait every backend implements, and the handles it hands out.
//!
//! The trait is narrow: allocate through the budget ledger, move bytes in and
//! out, run a graph node, synchronise. Asynchronous copies, events and pinned
//! host memory are optional capabilities with default methods that answer
//! "unsupported", so the scheduler asks instead of downcasting.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::graph::{Graph, Node, WeightInfo};
use crate::ledger::{Lease, Ledger, OverBudget, Region};
use crate::round::Round;

/// What kind of device this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// A real GPU.
    Gpu,
    /// A simulated GPU (CPU kernels behind a budget and throttles), for tests and planning.
    SimulatedGpu,
}

impl DeviceKind {
    /// The name profiles and reports use (`cpu`, `gpu`, `simulated_gpu`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
            DeviceKind::SimulatedGpu => "simulated_gpu",
        }
    }
}

/// Static facts about a device.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    /// Name for logs and reports (`cpu`, `NVIDIA GeForce RTX 4070`, `sim-gpu`).
    pub name: String,
    /// Kind.
    pub kind: DeviceKind,
    /// Total memory, if known.
    pub memory_bytes: Option<u64>,
    /// Compute threads (CPU) or streaming multiprocessors (GPU), if meaningful.
    pub parallelism: Option<usize>,
}

/// Errors of device operations.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The ledger refused an allocation.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    /// The ledger allowed an allocation but the memory itself could not be had.
    #[error("{device}: cannot allocate {bytes} bytes for {label}")]
    OutOfMemory {
        /// Device name.
        device: String,
        /// Bytes asked for.
        bytes: u64,
        /// What the memory was for.
        label: String,
    },
    /// An optional capability the device does not have.
    #[error("{device} does not support {what}")]
    Unsupported {
        /// Device name.
        device: String,
        /// The capability.
        what: &'static str,
    },
    /// A node could not run.
    #[error("{device}: node {node}: {message}")]
    Node {
        /// Device name.
        device: String,
        /// Node name.
        node: String,
        /// What went wrong.
        message: String,
    },
    /// A buffer or argument that does not belong to this device or does not fit.
    #[error("{device}: {message}")]
    BadArgument {
        /// Device name.
        device: String,
        /// What went wrong.
        message: String,
    },
    /// A driver or runtime failure.
    #[error("{device}: {message}")]
    Backend {
        /// Device name.
        device: String,
        /// The driver's message.
        message: String,
    },
}

/// Backend-specific memory behind a [`Buffer`].
pub trait BufferStorage: Any + Send + Sync {
    /// For the owning backend to downcast.
    fn as_any(&self) -> &dyn Any;
}

struct BufferInner {
    storage: Box<dyn BufferStorage>,
    len: usize,
    region: Region,
    device: String,
    _lease: Lease,
}

/// Device memory: a cheap, cloneable handle; the memory and its ledger
/// reservation are released when the last clone is dropped.
#[derive(Clone)]
pub struct Buffer(Arc<BufferInner>);

impl Buffer {
    /// Wraps backend storage of `len` bytes whose reservation is `lease`.
    pub fn new(storage: Box<dyn BufferStorage>, len: usize, device: &str, lease: Lease) -> Buffer {
        Buffer(Arc::new(BufferInner {
            storage,
            len,
            region: lease.region(),
            device: device.to_string(),
            _lease: lease,
        }))
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// The ledger region it was reserved in.
    pub fn region(&self) -> Region {
        self.0.region
    }

    /// The name of the device that owns it.
    pub fn device(&self) -> &str {
        &self.0.device
    }

    /// The backend storage, if it is of type `T`.
    pub fn storage<T: 'static>(&self) -> Option<&T> {
        self.0.storage.as_any().downcast_ref::<T>()
    }

    /// Whether two handles refer to the same memory.
    pub fn same(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({} bytes, {}, {})",
            self.0.len, self.0.region, self.0.device
        )
    }
}

/// Host memory that outlives asynchronous copies: a model mapping, a pinned
/// staging area. Backends may downcast to recognise their own pinned memory.
pub trait HostMemory: Any + Send + Sync {
    /// All bytes.
    fn bytes(&self) -> &[u8];
    /// For backends to downcast.
    fn as_any(&self) -> &dyn Any;
}

impl HostMemory for crate::gguf::Backing {
    fn bytes(&self) -> &[u8] {
        crate::gguf::Backing::bytes(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A range of host memory kept alive by its owner.
#[derive(Clone)]
pub struct HostBytes {
    /// The memory.
    pub owner: Arc<dyn HostMemory>,
    /// Start of the range.
    pub offset: usize,
    /// Length of the range.
    pub len: usize,
}

impl HostBytes {
    /// The bytes of the range.
    pub fn bytes(&self) -> &[u8] {
        &self.owner.bytes()[self.offset..self.offset + self.len]
    }
}

impl fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBytes({}..+{})", self.offset, self.len)
    }
}

/// Where a node's weight is when the node runs.
#[derive(Clone, Debug)]
pub enum WeightData<'a> {
    /// In host memory (a CPU device computes on it directly).
    Host(&'a [u8]),
    /// In this device's memory (resident, or copied into a temp slot).
    Device(&'a Buffer),
}

/// A weight argument of a node.
#[derive(Clone, Debug)]
pub struct WeightArg<'a> {
    /// The tensor's description.
    pub info: &'a WeightInfo,
    /// Its bytes.
    pub data: WeightData<'a>,
}

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvType {
    /// Half precision (the default, as llama.cpp).
    F16,
    /// Single precision.
    F32,
}

impl KvType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            KvType::F16 => 2,
            KvType::F32 => 4,
        }
    }
}

/// The KV cache of one attention layer on this device.
#[derive(Clone, Debug)]
pub struct KvArg<'a> {
    /// Keys: `capacity` rows of `n_kv_heads * head_dim`.
    pub k: &'a Buffer,
    /// Values, same layout.
    pub v: &'a Buffer,
    /// Rows the buffers hold.
    pub capacity: usize,
    /// Rows per cache block, for sequences whose tokens live in blocks
    /// ([`crate::round::CacheRows::Blocks`]).
    pub block_tokens: usize,
    /// Element type.
    pub dtype: KvType,
}

/// Everything a device needs to run one node. Graph and round are shared
/// (`Arc`) so an asynchronous device can keep them until the node has run.
#[derive(Clone, Debug)]
pub struct NodeArgs<'a> {
    /// The graph (value shapes, weight infos).
    pub graph: &'a Arc<Graph>,
    /// The node's index in the graph.
    pub node_id: usize,
    /// The node (`&graph.nodes[node_id]`).
    pub node: &'a Node,
    /// The round's inputs (positions, past length, outputs).
    pub round: &'a Arc<Round>,
    /// Input activations on this device, in `node.inputs` order (none for the token input).
    pub inputs: &'a [Buffer],
    /// The output activation's buffer on this device (at least as large as the value).
    pub output: &'a Buffer,
    /// Weights in `node.weights` order.
    pub weights: &'a [WeightArg<'a>],
    /// The layer's KV cache, for attention with a cache.
    pub kv: Option<KvArg<'a>>,
}

/// An ordering point on a device stream.
#[derive(Clone)]
pub struct Event(pub Arc<dyn Any + Send + Sync>);

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Event")
    }
}

/// Measured times of asynchronous work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceTimings {
    /// `(node id, seconds)` of kernels.
    pub nodes: Vec<(usize, f64)>,
    /// `(bytes, seconds)` of host-to-device weight copies.
    pub copies: Vec<(u64, f64)>,
}

/// The two streams of an asynchronous device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Kernels and activation copies.
    Compute,
    /// Weight copies into temp slots.
    Transfer,
}

/// Seconds on the wall clock since a process-wide epoch (the first call):
/// the clock of every real device ([`Device::now`]).
pub fn wall_clock() -> f64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// A compute device: the CPU, a CUDA GPU, a simulated GPU.
pub trait Device: Send + Sync {
    /// Static facts.
    fn info(&self) -> &DeviceInfo;

    /// The ledger every allocation goes through.
    fn ledger(&self) -> &Arc<Ledger>;

    /// Allocates `bytes` in `region`, reserving them in the ledger first.
    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError>;

    /// Copies host bytes into a buffer, ordered after earlier work on the
    /// compute stream; returns when `src` may be reused.
    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError>;

    /// Copies a buffer's bytes to the host after the compute stream's earlier
    /// work finished (a GPU->CPU switch: the one place the host waits).
    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError>;

    /// Runs (or enqueues on the compute stream) one node.
    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError>;

    /// Waits until all work submitted so far has finished.
    fn synchronize(&self) -> Result<(), DeviceError>;

    /// Bytes of scratch memory [`Device::run`] takes for node `node` of
    /// `graph` in `round`, beyond its input and output buffers. Devices
    /// reserve it in their ledger (in the output buffer's region) while the
    /// node runs, so callers that plan memory ask here first. Default: none.
    fn node_scratch_bytes(&self, _graph: &Graph, _node: usize, _round: &Round) -> u64 {
        0
    }

    /// Whether the device has a transfer stream and events
    /// ([`Device::copy_async`], [`Device::record_event`], [`Device::wait_event`]).
    fn supports_async(&self) -> bool {
        false
    }

    /// Copies host memory into a buffer on the transfer stream, without
    /// waiting; order it with events.
    fn copy_async(
        &self,
        _dst: &Buffer,
        _offset: usize,
        _src: &HostBytes,
    ) -> Result<(), DeviceError> {
        Err(self.unsupported("asynchronous copies"))
    }

    /// On the transfer stream, copies from a stacked expert tensor in host
    /// memory (`src`, `per_expert` bytes per expert) into `dst` at the same
    /// offsets only the experts that `routing` selects. `routing` is on this
    /// device: `rows` rows of `top_k` expert ids (as f32) then `top_k`
    /// weights, read on the device after earlier work (order it with an
    /// event): the host never waits for the ids.
    fn copy_routed_async(
        &self,
        _dst: &Buffer,
        _src: &HostBytes,
        _per_expert: usize,
        _routing: &Buffer,
        _rows: usize,
        _top_k: usize,
    ) -> Result<(), DeviceError> {
        Err(self.unsupported("routed expert copies"))
    }

    /// Records an event after the work submitted so far to `stream`.
    fn record_event(&self, _stream: Stream) -> Result<Event, DeviceError> {
        Err(self.unsupported("events"))
    }

    /// Makes later work on `stream` wait for `event`.
    fn wait_event(&self, _stream: Stream, _event: &Event) -> Result<(), DeviceError> {
        Err(self.unsupported("events"))
    }

    /// Blocks the host until `event` has completed.
    fn sync_event(&self, _event: &Event) -> Result<(), DeviceError> {
        Err(self.unsupported("events"))
    }

    /// Makes host memory (a model mapping) faster to copy from, e.g. by
    /// page-locking it. Devices without the notion accept and do nothing.
    fn pin_host(&self, _mem: &Arc<dyn HostMemory>) -> Result<bool, DeviceError> {
        Ok(false)
    }

    /// Runs `f` in the device's preferred host context: the CPU device runs
    /// it on its thread pool, so the nodes `f` submits start without a
    /// thread hand-off each. Other devices just call `f`.
    fn enter(&self, f: &mut (dyn FnMut() + Send)) {
        f()
    }

    /// Times of the work the device ran asynchronously since the last call
    /// (devices that run synchronously are timed by the caller and return
    /// nothing here).
    fn drain_timings(&self) -> DeviceTimings {
        DeviceTimings::default()
    }

    /// The device's clock, in seconds since an arbitrary epoch: what the
    /// executor, the cost model and the re-scheduler time work with. Real
    /// devices read the wall clock ([`wall_clock`]); devices of a machine
    /// model answer the model's virtual time, which advances only by the
    /// modelled durations of the work submitted to them.
    fn now(&self) -> f64 {
        wall_clock()
    }

    /// Whether [`Device::now`] is a model's virtual clock rather than the
    /// wall clock (reports say the timings are simulated).
    fn virtual_time(&self) -> bool {
        false
    }

    /// The error for an optional capability this device lacks.
    fn unsupported(&self, what: &'static str) -> DeviceError {
        DeviceError::Unsupported {
            device: self.info().name.clone(),
            what,
        }
    }
}
