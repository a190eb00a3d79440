//! The modelled host CPU: a real CPU device computes every op (exact
//! outputs), and the op's modelled duration advances the host's virtual
//! clock.

use std::sync::Arc;

use ats_core::device::{Buffer, Device, DeviceError, DeviceInfo, DeviceKind, NodeArgs};
use ats_core::graph::Graph;
use ats_core::ledger::{Ledger, Region};
use ats_core::round::Round;

use super::clock::Model;
use super::timing::work_of;

/// The host CPU of a modelled machine.
pub struct VirtualCpu {
    inner: Arc<dyn Device>,
    model: Arc<Model>,
    info: DeviceInfo,
    threads: usize,
}

impl std::fmt::Debug for VirtualCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VirtualCpu({}, {} threads)",
            self.info.name, self.threads
        )
    }
}

impl VirtualCpu {
    /// The host of `model` running `threads` threads, computing with `inner`
    /// (a real CPU device, whose own thread count only sets how fast the
    /// simulation runs).
    pub(crate) fn new(inner: Arc<dyn Device>, model: Arc<Model>, threads: usize) -> VirtualCpu {
        let threads = threads.max(1);
        VirtualCpu {
            info: DeviceInfo {
                name: format!("cpu (simulated: {})", model.spec.host.name),
                kind: DeviceKind::Cpu,
                memory_bytes: None,
                parallelism: Some(threads),
            },
            inner,
            model,
            threads,
        }
    }
}

impl Device for VirtualCpu {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn ledger(&self) -> &Arc<Ledger> {
        self.inner.ledger()
    }

    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        self.inner.alloc(region, bytes, label)
    }

    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.model.host_memcpy(src.len());
        self.inner.write(dst, offset, src)
    }

    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.model.host_memcpy(dst.len());
        self.inner.read(src, offset, dst)
    }

    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError> {
        if self.model.spec.compute {
            self.inner.run(args)?;
        } else {
            super::fake_routing(self.inner.as_ref(), args, args.output)?;
        }
        let kv_f16 = args
            .kv
            .as_ref()
            .is_none_or(|kv| kv.dtype == ats_core::device::KvType::F16);
        let w = work_of(args.graph, args.node_id, args.round, kv_f16);
        self.model.cpu_op(&w, self.threads);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn node_scratch_bytes(&self, graph: &Graph, node: usize, round: &Round) -> u64 {
        self.inner.node_scratch_bytes(graph, node, round)
    }

    fn enter(&self, f: &mut (dyn FnMut() + Send)) {
        self.inner.enter(f)
    }

    fn now(&self) -> f64 {
        self.model.now()
    }

    fn virtual_time(&self) -> bool {
        true
    }
}
