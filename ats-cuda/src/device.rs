//! [`CudaDevice`]: one NVIDIA GPU as an ATS [`Device`].
//!
//! - Every allocation is reserved in the ledger first, by region; the
//!   device's own scratch (matmul tiles, attention splits, MoE buffers),
//!   kernel-argument ring and cuBLAS workspace are reserved as `workspace`
//!   when the device opens.
//! - Activations move through pinned, mapped host memory with an SM copy
//!   kernel on the compute stream; weights move with the copy engine on the
//!   transfer stream; events order the two.
//! - Kernels are NVRTC-compiled at first use and cached per device.

use std::sync::{Arc, Mutex, MutexGuard};

use ats_core::device::{
    Buffer, Device, DeviceError, DeviceInfo, DeviceKind, DeviceTimings, Event, HostBytes,
    HostMemory, NodeArgs, Stream,
};
use ats_core::ledger::{Ledger, Region};
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, PushKernelArg, result, sys};

use crate::CudaError;
use crate::blas::Blas;
use crate::driver::{Lib, ensure};
use crate::geometry;
use crate::kernels::{KernelCache, Module};
use crate::memory::{CudaStorage, DeviceMem, MappedHost, Registered, device_ptr, drv};
use crate::staging::{Staging, pieces};
use crate::streams::{GpuEvent, Spans, Streams, gpu_event};
use crate::workspace::{RoundData, Workspace};

/// Settings of a CUDA device.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Which GPU.
    pub ordinal: usize,
    /// The memory budget (`None`: what the GPU has free at open, less a
    /// twentieth, at most 512 MiB, for the driver's own allocations).
    pub budget: Option<u64>,
    /// Device scratch for matmul tiles, attention splits and routed experts.
    pub scratch_bytes: usize,
    /// Pinned, mapped host memory for activation copies.
    pub staging_bytes: usize,
    /// Use cuBLAS for prefill-sized products when it is installed.
    pub use_cublas: bool,
    /// Record per-node kernel times and per-copy times with events.
    pub timings: bool,
    /// Where compiled kernels are kept ([`crate::kernels::default_cache_dir`]).
    pub kernel_cache: Option<std::path::PathBuf>,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            ordinal: 0,
            budget: None,
            scratch_bytes: 48 << 20,
            staging_bytes: 16 << 20,
            use_cublas: true,
            timings: true,
            kernel_cache: crate::kernels::default_cache_dir(),
        }
    }
}

/// Bytes of the cuBLAS workspace (what cuBLAS recommends for Hopper).
const CUBLAS_WORKSPACE: usize = 32 << 20;
/// Bytes of the kernel-argument ring (permutations and other small tables).
const ARGS_RING: usize = 1 << 20;
/// Staging slots (copies in flight).
const STAGING_SLOTS: usize = 4;

/// Mutable state, behind one lock: every call enqueues in order.
pub(crate) struct State {
    pub staging: Staging,
    pub work: Workspace,
    pub round: Option<RoundData>,
    pub spans: Spans,
    pub registered: Vec<Registered>,
}

/// An NVIDIA GPU.
pub struct CudaDevice {
    info: DeviceInfo,
    ledger: Arc<Ledger>,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) streams: Streams,
    pub(crate) kernels: KernelCache,
    pub(crate) blas: Option<Blas>,
    pub(crate) sm_count: u32,
    arch: (i32, i32),
    opts: CudaOptions,
    notes: Vec<String>,
    state: Mutex<State>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice({}, sm_{}{}, {} SMs)",
            self.info.name, self.arch.0, self.arch.1, self.sm_count
        )
    }
}

impl CudaDevice {
    /// Opens a GPU. Fails with the reason when there is no driver, no GPU,
    /// no NVRTC, or not enough memory for the budget.
    pub fn open(opts: CudaOptions) -> Result<CudaDevice, CudaError> {
        ensure(Lib::Driver)?;
        // SAFETY: the driver library is loaded (checked above).
        drv("cuInit", result::init())?;
        let count = drv("cuDeviceGetCount", result::device::get_count())?;
        if count <= opts.ordinal as i32 {
            return Err(CudaError::NoGpu(format!(
                "the driver reports {count} GPUs, GPU {} was asked for",
                opts.ordinal
            )));
        }
        let ctx = drv("creating the CUDA context", CudaContext::new(opts.ordinal))?;
        // SAFETY: no stream or slice exists yet; from here on the device
        // orders its two streams with explicit events.
        unsafe { ctx.disable_event_tracking() };
        let name = drv("cuDeviceGetName", ctx.name())?;
        let arch = drv("reading the compute capability", ctx.compute_capability())?;
        // kernels need NVRTC unless every cubin is cached already
        let cached = opts
            .kernel_cache
            .as_ref()
            .is_some_and(|d| crate::kernels::cache_complete(d, arch));
        if !cached {
            ensure(Lib::Nvrtc)?;
        }
        let sm_count = drv(
            "reading the SM count",
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        )? as u32;
        let can_map = drv(
            "reading CAN_MAP_HOST_MEMORY",
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
        )?;
        if can_map == 0 {
            return Err(CudaError::NoGpu(format!(
                "{name} cannot map host memory, which activation copies need"
            )));
        }
        let (free, total) = drv("cuMemGetInfo", ctx.mem_get_info())?;
        let budget = match opts.budget {
            Some(b) if b > free as u64 => {
                return Err(CudaError::NoGpu(format!(
                    "the budget of {b} bytes exceeds the {free} bytes {name} has free"
                )));
            }
            Some(b) => b,
            None => free as u64 - (free as u64 / 20).min(512 << 20),
        };
        let ledger = Ledger::new(name.clone(), Some(budget));
        let streams = Streams::new(&ctx)?;
        let kernels = KernelCache::new(ctx.clone(), arch, opts.kernel_cache.clone());
        let mut notes = Vec::new();
        let lease =
            |bytes: usize, label: &str| ledger.reserve(Region::Workspace, bytes as u64, label);
        let over = |e: ats_core::ledger::OverBudget| CudaError::NoGpu(e.to_string());
        let blas = if !opts.use_cublas {
            notes.push("cuBLAS is off: prefill products use the tiled kernels".to_string());
            None
        } else {
            match ensure(Lib::Cublas) {
                Ok(_) => {
                    let l = lease(CUBLAS_WORKSPACE, "cuBLAS workspace").map_err(over)?;
                    let mem = DeviceMem::alloc(&ctx, CUBLAS_WORKSPACE)?;
                    let b = Blas::new(&streams.compute, mem.ptr(), CUBLAS_WORKSPACE)?;
                    Some((
                        b,
                        Buffer::new(Box::new(CudaStorage { mem }), CUBLAS_WORKSPACE, &name, l),
                    ))
                }
                Err(e) => {
                    notes.push(format!(
                        "cuBLAS unavailable ({e}): prefill products use the tiled kernels"
                    ));
                    None
                }
            }
        };
        let alloc_ws = |bytes: usize, label: &str| -> Result<Buffer, CudaError> {
            let l = lease(bytes, label).map_err(over)?;
            let mem = DeviceMem::alloc(&ctx, bytes)?;
            Ok(Buffer::new(Box::new(CudaStorage { mem }), bytes, &name, l))
        };
        let scratch = alloc_ws(opts.scratch_bytes, "device scratch")?;
        let args = alloc_ws(ARGS_RING, "kernel argument ring")?;
        let staging = Staging::new(MappedHost::alloc(&ctx, opts.staging_bytes)?, STAGING_SLOTS);
        let (blas, blas_ws) = match blas {
            Some((b, ws)) => (Some(b), Some(ws)),
            None => (None, None),
        };
        let info = DeviceInfo {
            name: name.clone(),
            kind: DeviceKind::Gpu,
            memory_bytes: Some(total as u64),
            parallelism: Some(sm_count as usize),
        };
        Ok(CudaDevice {
            info,
            ledger,
            ctx,
            streams,
            kernels,
            blas,
            sm_count,
            arch,
            opts,
            notes,
            state: Mutex::new(State {
                staging,
                work: Workspace::new(scratch, args, blas_ws),
                round: None,
                spans: Spans::default(),
                registered: Vec::new(),
            }),
        })
    }

    pub(crate) fn info_name(&self) -> &str {
        &self.info.name
    }

    /// The compute capability `(major, minor)`.
    pub fn arch(&self) -> (i32, i32) {
        self.arch
    }

    /// The options it was opened with.
    pub fn options(&self) -> &CudaOptions {
        &self.opts
    }

    /// One-line notes about what the device does differently from the
    /// default (cuBLAS missing or off).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether prefill products go through cuBLAS.
    pub fn uses_cublas(&self) -> bool {
        self.blas.is_some()
    }

    /// Compiles and loads every kernel module now.
    pub fn load_kernels(&self) -> Result<(), CudaError> {
        self.kernels.load_all()
    }

    /// `(free, total)` bytes the driver reports for the GPU.
    pub fn mem_info(&self) -> Result<(usize, usize), CudaError> {
        drv("cuMemGetInfo", self.ctx.mem_get_info())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn backend(&self, e: CudaError) -> DeviceError {
        DeviceError::Backend {
            device: self.info.name.clone(),
            message: e.to_string(),
        }
    }

    fn bad(&self, message: String) -> DeviceError {
        DeviceError::BadArgument {
            device: self.info.name.clone(),
            message,
        }
    }

    pub(crate) fn bind(&self) -> Result<(), DeviceError> {
        drv("binding the context", self.ctx.bind_to_thread()).map_err(|e| self.backend(e))
    }

    /// The device address of a buffer of this device, checked to hold
    /// `offset + len` bytes.
    pub(crate) fn ptr_of(
        &self,
        b: &Buffer,
        offset: usize,
        len: usize,
    ) -> Result<CUdeviceptr, DeviceError> {
        let p = device_ptr(b)
            .ok_or_else(|| self.bad(format!("buffer of {} is not CUDA memory", b.device())))?;
        if offset.checked_add(len).is_none_or(|e| e > b.len()) {
            return Err(self.bad(format!(
                "{len} bytes at {offset} overrun a {}-byte buffer",
                b.len()
            )));
        }
        Ok(p + offset as u64)
    }

    /// Launches `copy_bytes(src, dst, n)` on the compute stream.
    pub(crate) fn sm_copy(
        &self,
        src: CUdeviceptr,
        dst: CUdeviceptr,
        n: usize,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let f = self.kernels.function(Module::Copy, "copy_bytes")?;
        let cfg = geometry::elementwise((n as u64).div_ceil(16), self.sm_count);
        let n = n as u64;
        let mut b = self.streams.compute.launch_builder(&f);
        b.arg(&src).arg(&dst).arg(&n);
        // SAFETY: `src` and `dst` are device-accessible ranges of `n` bytes
        // (device memory or mapped host memory), checked by the callers.
        drv("launching copy_bytes", unsafe { b.launch(cfg) }).map(|_| ())
    }

    /// Copies host bytes to device address `dst` through the staging ring,
    /// with the SM copy kernel on the compute stream.
    pub(crate) fn stage_in(
        &self,
        st: &mut State,
        dst: CUdeviceptr,
        src: &[u8],
    ) -> Result<(), CudaError> {
        let slot_bytes = st.staging.slot_bytes();
        for (off, len) in pieces(src.len(), slot_bytes) {
            let slot = st.staging.take()?;
            st.staging
                .mem_mut()
                .write(slot.offset, &src[off..off + len]);
            let from = st.staging.mem().dev_ptr(slot.offset);
            self.sm_copy(from, dst + off as u64, len)?;
            let done = self.streams.record(Stream::Compute)?;
            st.staging.release_after(slot, done);
        }
        Ok(())
    }

    fn stage_out(&self, st: &mut State, src: CUdeviceptr, dst: &mut [u8]) -> Result<(), CudaError> {
        let slot_bytes = st.staging.slot_bytes();
        for (off, len) in pieces(dst.len(), slot_bytes) {
            let slot = st.staging.take()?;
            let to = st.staging.mem().dev_ptr(slot.offset);
            self.sm_copy(src + off as u64, to, len)?;
            let done = self.streams.record(Stream::Compute)?;
            drv("waiting for a device-to-host copy", done.synchronize())?;
            st.staging.mem().read(slot.offset, &mut dst[off..off + len]);
        }
        Ok(())
    }

    /// Copies with the copy engine on the transfer stream after the compute
    /// stream's earlier work, and makes the compute stream wait for it.
    fn engine_in(&self, dst: CUdeviceptr, src: &[u8], wait_host: bool) -> Result<(), CudaError> {
        self.streams.order(Stream::Transfer, Stream::Compute)?;
        // SAFETY: `dst` holds `src.len()` bytes (checked by the caller); the
        // host range stays valid until the copy finished (waited below, or
        // owned by a registration for asynchronous copies).
        drv("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(dst, src, self.streams.transfer.cu_stream())
        })?;
        let done = self.streams.record(Stream::Transfer)?;
        drv(
            "ordering compute after a copy",
            self.streams.compute.wait(&done),
        )?;
        if wait_host {
            drv("waiting for a host-to-device copy", done.synchronize())?;
        }
        Ok(())
    }

    fn event_of<'e>(&self, e: &'e Event) -> Result<&'e GpuEvent, DeviceError> {
        gpu_event(e).ok_or_else(|| self.bad("event of another device".into()))
    }
}

/// Whether writes into a region are activations (SM copies on the compute
/// stream) rather than weights or caches (copy engine).
fn is_activation(region: Region) -> bool {
    matches!(region, Region::Compute | Region::Vision | Region::Workspace)
}

impl Device for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        let lease = self.ledger.reserve(region, bytes as u64, label)?;
        let mem = DeviceMem::alloc(&self.ctx, bytes).map_err(|e| self.backend(e))?;
        if bytes > 0 {
            // zeroed like the CPU's buffers, in stream order
            // SAFETY: `mem` holds `bytes` bytes of this context.
            drv("cuMemsetD8Async", unsafe {
                result::memset_d8_async(mem.ptr(), 0, bytes, self.streams.compute.cu_stream())
            })
            .map_err(|e| self.backend(e))?;
        }
        Ok(Buffer::new(
            Box::new(CudaStorage { mem }),
            bytes,
            &self.info.name,
            lease,
        ))
    }

    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        let p = self.ptr_of(dst, offset, src.len())?;
        self.bind()?;
        let mut st = self.lock();
        let r = if is_activation(dst.region()) {
            self.stage_in(&mut st, p, src)
        } else {
            self.engine_in(p, src, true)
        };
        r.map_err(|e| self.backend(e))
    }

    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        let p = self.ptr_of(src, offset, dst.len())?;
        self.bind()?;
        let mut st = self.lock();
        self.stage_out(&mut st, p, dst).map_err(|e| self.backend(e))
    }

    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError> {
        self.bind()?;
        let mut st = self.lock();
        let start = if self.opts.timings {
            Some(
                self.streams
                    .record_timed(Stream::Compute, &mut st.spans.pool)
                    .map_err(|e| self.backend(e))?,
            )
        } else {
            None
        };
        crate::ops::run(self, &mut st, args)?;
        if let Some(start) = start {
            let end = self
                .streams
                .record_timed(Stream::Compute, &mut st.spans.pool)
                .map_err(|e| self.backend(e))?;
            st.spans.nodes.push((args.node_id, start, end));
            st.spans.bound();
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.bind()?;
        drv(
            "synchronising the transfer stream",
            self.streams.transfer.synchronize(),
        )
        .and_then(|_| {
            drv(
                "synchronising the compute stream",
                self.streams.compute.synchronize(),
            )
        })
        .map_err(|e| self.backend(e))
    }

    fn supports_async(&self) -> bool {
        true
    }

    fn copy_async(&self, dst: &Buffer, offset: usize, src: &HostBytes) -> Result<(), DeviceError> {
        let p = self.ptr_of(dst, offset, src.len)?;
        self.bind()?;
        let mut st = self.lock();
        let start = if self.opts.timings {
            Some(
                self.streams
                    .record_timed(Stream::Transfer, &mut st.spans.pool)
                    .map_err(|e| self.backend(e))?,
            )
        } else {
            None
        };
        // SAFETY: `p` holds `src.len` bytes (checked above). A registered
        // source (pin_host) is kept alive by `src.owner` and by the
        // registration, which waits for the context before it is dropped; a
        // pageable source is staged by the driver before this call returns.
        drv("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(p, src.bytes(), self.streams.transfer.cu_stream())
        })
        .map_err(|e| self.backend(e))?;
        if let Some(start) = start {
            let end = self
                .streams
                .record_timed(Stream::Transfer, &mut st.spans.pool)
                .map_err(|e| self.backend(e))?;
            st.spans.copies.push((src.len as u64, start, end));
            st.spans.bound();
        }
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
        let d = self.ptr_of(dst, 0, src.len)?;
        let r = self.ptr_of(routing, 0, rows * 2 * top_k * 4)?;
        let n_expert = src.len / per_expert.max(1);
        if per_expert == 0 || n_expert * per_expert != src.len {
            return Err(self.bad(format!(
                "{} bytes are not whole experts of {per_expert} bytes",
                src.len
            )));
        }
        let ints = |n: usize, what: &str| {
            i32::try_from(n).map_err(|_| self.bad(format!("{n} {what} exceed a kernel argument")))
        };
        let (rows_i, top_k_i) = (
            ints(rows, "routing rows")?,
            ints(top_k, "experts per token")?,
        );
        self.bind()?;
        let st = self.lock();
        // the SMs read the experts straight from the pinned mapping
        let s = st
            .registered
            .iter()
            .find(|x| x.is(&src.owner))
            .map(|x| x.dev_ptr(src.offset))
            .ok_or_else(|| {
                self.bad("routed copies read pinned host memory: pin_host the source first".into())
            })?;
        let cfg = geometry::routed_copy(per_expert as u64, n_expert, self.sm_count)
            .map_err(|m| self.bad(m))?;
        let f = self
            .kernels
            .function(Module::Copy, "copy_routed_experts")
            .map_err(|e| self.backend(e))?;
        let per = per_expert as u64;
        let mut b = self.streams.transfer.launch_builder(&f);
        b.arg(&s)
            .arg(&d)
            .arg(&per)
            .arg(&r)
            .arg(&rows_i)
            .arg(&top_k_i);
        // The bytes copied depend on the routing, known only on the device,
        // so this copy is not timed as a copy of some number of bytes.
        // SAFETY: `s` is the mapped device address of `src.len` registered
        // host bytes (kept alive by the registration), `d` holds `src.len`
        // bytes and `r` the routing's `rows * 2 * top_k` floats (checked
        // above); the grid has one block row per expert of `per_expert` bytes.
        drv("launching copy_routed_experts", unsafe { b.launch(cfg) })
            .map(|_| ())
            .map_err(|e| self.backend(e))
    }

    fn record_event(&self, stream: Stream) -> Result<Event, DeviceError> {
        self.bind()?;
        let ev = self.streams.record(stream).map_err(|e| self.backend(e))?;
        Ok(Event(Arc::new(GpuEvent(ev))))
    }

    fn wait_event(&self, stream: Stream, event: &Event) -> Result<(), DeviceError> {
        let ev = self.event_of(event)?;
        self.bind()?;
        drv("waiting on an event", self.streams.get(stream).wait(&ev.0))
            .map_err(|e| self.backend(e))
    }

    fn sync_event(&self, event: &Event) -> Result<(), DeviceError> {
        let ev = self.event_of(event)?;
        self.bind()?;
        drv("synchronising an event", ev.0.synchronize()).map_err(|e| self.backend(e))
    }

    fn pin_host(&self, mem: &Arc<dyn HostMemory>) -> Result<bool, DeviceError> {
        self.bind()?;
        let mut st = self.lock();
        // registrations nobody else holds any more: release them now
        if st.registered.iter().any(|r| r.orphaned()) {
            st.registered.retain(|r| !r.orphaned());
        }
        if st.registered.iter().any(|r| r.is(mem)) {
            return Ok(true);
        }
        if mem.bytes().is_empty() {
            return Ok(false);
        }
        let r = Registered::new(&self.ctx, mem).map_err(|e| self.backend(e))?;
        st.registered.push(r);
        Ok(true)
    }

    fn drain_timings(&self) -> DeviceTimings {
        let mut st = self.lock();
        let nodes = std::mem::take(&mut st.spans.nodes);
        let copies = std::mem::take(&mut st.spans.copies);
        drop(st);
        if self.bind().is_err() {
            return DeviceTimings::default();
        }
        let t = DeviceTimings {
            nodes: nodes
                .iter()
                .filter_map(|(n, a, b)| Spans::secs(a, b).ok().map(|s| (*n, s)))
                .collect(),
            copies: copies
                .iter()
                .filter_map(|(n, a, b)| Spans::secs(a, b).ok().map(|s| (*n, s)))
                .collect(),
        };
        // read and complete: the events can time other work
        let events = (nodes.into_iter().flat_map(|(_, a, b)| [a, b]))
            .chain(copies.into_iter().flat_map(|(_, a, b)| [a, b]));
        self.lock().spans.pool.extend(events);
        t
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // queued work may still use buffers and registrations
        self.ctx.record_err(self.ctx.bind_to_thread());
        self.ctx.record_err(self.ctx.synchronize());
    }
}
