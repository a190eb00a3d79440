//! The CPU as a [`Device`]: host memory, synchronous execution on a
//! [`Team`] of exactly the requested number of threads.

use std::sync::Arc;

use ats_core::device::{Buffer, Device, DeviceError, DeviceInfo, DeviceKind, NodeArgs};
use ats_core::graph::Graph;
use ats_core::ledger::{Ledger, Region};
use ats_core::round::Round;

use crate::matmul::Isa;
use crate::storage::{CpuStorage, cpu_storage};
use crate::team::Team;

/// Why a CPU device cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// Zero threads.
    #[error("--threads must be at least 1")]
    ZeroThreads,
    /// The thread pool could not start.
    #[error("cannot start {threads} CPU threads: {message}")]
    Pool {
        /// Threads asked for.
        threads: usize,
        /// The runtime's message.
        message: String,
    },
    /// A forced instruction set this CPU lacks.
    #[error("instruction set {0} is not available on this CPU")]
    Isa(Isa),
}

/// The host CPU: its own thread pool, kernels for every op.
pub struct CpuDevice {
    info: DeviceInfo,
    ledger: Arc<Ledger>,
    team: Team,
    isa: Isa,
}

impl std::fmt::Debug for CpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CpuDevice({} threads, {})",
            self.threads(),
            self.isa.name()
        )
    }
}

impl CpuDevice {
    /// A CPU device with `threads` threads and the best instruction set detected.
    pub fn new(threads: usize) -> Result<CpuDevice, CpuError> {
        Self::with_isa(threads, Isa::detect(), "cpu")
    }

    /// A CPU device with a chosen instruction set (tests of the portable path)
    /// and a name for its ledger.
    pub fn with_isa(threads: usize, isa: Isa, name: &str) -> Result<CpuDevice, CpuError> {
        if threads == 0 {
            return Err(CpuError::ZeroThreads);
        }
        if !isa.is_available() {
            return Err(CpuError::Isa(isa));
        }
        let team = Team::new(threads, "ats-cpu").map_err(|e| CpuError::Pool {
            threads,
            message: e.to_string(),
        })?;
        Ok(CpuDevice {
            info: DeviceInfo {
                name: name.to_string(),
                kind: DeviceKind::Cpu,
                memory_bytes: None,
                parallelism: Some(threads),
            },
            ledger: Ledger::new(name, None),
            team,
            isa,
        })
    }

    /// Threads in the pool.
    pub fn threads(&self) -> usize {
        self.team.threads()
    }

    /// The instruction set the kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Runs `f` with the device's team as the current one (kernels called
    /// from `f` fan out over it).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.team.install(f)
    }

    fn storage<'a>(&self, b: &'a Buffer) -> Result<&'a CpuStorage, DeviceError> {
        cpu_storage(b).ok_or_else(|| DeviceError::BadArgument {
            device: self.info.name.clone(),
            message: format!("buffer of {} is not CPU memory", b.device()),
        })
    }

    fn range_check(&self, b: &Buffer, offset: usize, len: usize) -> Result<(), DeviceError> {
        if offset.checked_add(len).is_none_or(|e| e > b.len()) {
            return Err(DeviceError::BadArgument {
                device: self.info.name.clone(),
                message: format!("{len} bytes at {offset} overrun a {}-byte buffer", b.len()),
            });
        }
        Ok(())
    }
}

impl Device for CpuDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        let lease = self.ledger.reserve(region, bytes as u64, label)?;
        let storage = CpuStorage::try_zeroed(bytes).ok_or_else(|| DeviceError::OutOfMemory {
            device: self.info.name.clone(),
            bytes: bytes as u64,
            label: label.to_string(),
        })?;
        Ok(Buffer::new(
            Box::new(storage),
            bytes,
            &self.info.name,
            lease,
        ))
    }

    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.range_check(dst, offset, src.len())?;
        let mut g = self.storage(dst)?.write();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut g[..]);
        bytes[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.range_check(src, offset, dst.len())?;
        let g = self.storage(src)?.read();
        let bytes: &[u8] = bytemuck::cast_slice(&g[..]);
        dst.copy_from_slice(&bytes[offset..offset + dst.len()]);
        Ok(())
    }

    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError> {
        let name = &self.info.name;
        let isa = self.isa;
        // kernel scratch is device memory too: the ledger holds it while the node runs
        let scratch = self.node_scratch_bytes(args.graph, args.node_id, args.round);
        let _lease = if scratch > 0 {
            Some(self.ledger.reserve(
                args.output.region(),
                scratch,
                &format!("{} scratch", args.node.name),
            )?)
        } else {
            None
        };
        self.team.install(|| crate::ops::run(args, isa, name))
    }

    fn node_scratch_bytes(&self, graph: &Graph, node: usize, round: &Round) -> u64 {
        crate::ops::attention_shape(graph, node, round)
            .map_or(0, |s| s.scratch_bytes(self.threads()))
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn enter(&self, f: &mut (dyn FnMut() + Send)) {
        self.team.install(f)
    }
}
