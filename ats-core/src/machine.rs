//! The devices of one run, named by their role: the host CPU and at most one
//! GPU (real or simulated). Nothing finds a device by its position in a list.

use std::fmt;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use crate::device::{Device, DeviceKind};

/// The role of a device in a [`Machine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceId {
    /// The host CPU: runs what no other device runs and owns host memory.
    Host,
    /// The GPU (a CUDA device, or a simulated GPU in tests and planning).
    Gpu,
}

impl DeviceId {
    /// Both roles, host first.
    pub const ALL: [DeviceId; 2] = [DeviceId::Host, DeviceId::Gpu];

    /// The role's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            DeviceId::Host => "host",
            DeviceId::Gpu => "gpu",
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One value per device role, indexed by [`DeviceId`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PerDevice<T> {
    /// The host's value.
    pub host: T,
    /// The GPU's value (kept even on a machine without one).
    pub gpu: T,
}

impl<T> PerDevice<T> {
    /// `f(role)` for each role.
    pub fn from_fn(mut f: impl FnMut(DeviceId) -> T) -> Self {
        PerDevice {
            host: f(DeviceId::Host),
            gpu: f(DeviceId::Gpu),
        }
    }

    /// `(role, value)` pairs, host first.
    pub fn iter(&self) -> impl Iterator<Item = (DeviceId, &T)> {
        [(DeviceId::Host, &self.host), (DeviceId::Gpu, &self.gpu)].into_iter()
    }

    /// `(role, value)` pairs, host first, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (DeviceId, &mut T)> {
        [
            (DeviceId::Host, &mut self.host),
            (DeviceId::Gpu, &mut self.gpu),
        ]
        .into_iter()
    }
}

impl<T> Index<DeviceId> for PerDevice<T> {
    type Output = T;
    fn index(&self, d: DeviceId) -> &T {
        match d {
            DeviceId::Host => &self.host,
            DeviceId::Gpu => &self.gpu,
        }
    }
}

impl<T> IndexMut<DeviceId> for PerDevice<T> {
    fn index_mut(&mut self, d: DeviceId) -> &mut T {
        match d {
            DeviceId::Host => &mut self.host,
            DeviceId::Gpu => &mut self.gpu,
        }
    }
}

/// Why a set of devices is not a machine.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MachineError {
    /// The host role needs a CPU device.
    #[error("the host device must be a CPU, not {0} ({1:?})")]
    HostNotCpu(String, DeviceKind),
    /// The GPU role needs a GPU (real or simulated).
    #[error("the GPU device must be a GPU or a simulated GPU, not {0} ({1:?})")]
    GpuNotGpu(String, DeviceKind),
}

/// The devices of a run: the host CPU and an optional GPU.
#[derive(Clone)]
pub struct Machine {
    host: Arc<dyn Device>,
    gpu: Option<Arc<dyn Device>>,
}

impl Machine {
    /// A machine of the host CPU alone.
    pub fn host_only(host: Arc<dyn Device>) -> Result<Machine, MachineError> {
        Machine::new(host, None)
    }

    /// A machine of the host CPU and, if given, a GPU; each must be of its
    /// role's kind.
    pub fn new(
        host: Arc<dyn Device>,
        gpu: Option<Arc<dyn Device>>,
    ) -> Result<Machine, MachineError> {
        let kind = host.info().kind;
        if kind != DeviceKind::Cpu {
            return Err(MachineError::HostNotCpu(host.info().name.clone(), kind));
        }
        if let Some(g) = &gpu
            && g.info().kind == DeviceKind::Cpu
        {
            return Err(MachineError::GpuNotGpu(
                g.info().name.clone(),
                DeviceKind::Cpu,
            ));
        }
        Ok(Machine { host, gpu })
    }

    /// The host CPU.
    pub fn host(&self) -> &Arc<dyn Device> {
        &self.host
    }

    /// The GPU, if the machine has one.
    pub fn gpu(&self) -> Option<&Arc<dyn Device>> {
        self.gpu.as_ref()
    }

    /// Whether the machine has a GPU.
    pub fn has_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// The device in role `id`, if the machine has it.
    pub fn get(&self, id: DeviceId) -> Option<&Arc<dyn Device>> {
        match id {
            DeviceId::Host => Some(&self.host),
            DeviceId::Gpu => self.gpu.as_ref(),
        }
    }

    /// The roles present, host first.
    pub fn ids(&self) -> impl Iterator<Item = DeviceId> + '_ {
        DeviceId::ALL.into_iter().filter(|&d| self.get(d).is_some())
    }

    /// `(role, device)` for each device present, host first.
    pub fn iter(&self) -> impl Iterator<Item = (DeviceId, &Arc<dyn Device>)> {
        std::iter::once((DeviceId::Host, &self.host))
            .chain(self.gpu.iter().map(|g| (DeviceId::Gpu, g)))
    }

    /// The device where the most memory matters: the GPU if there is one,
    /// else the host (the ledger reports follow it).
    pub fn accelerator_or_host(&self) -> (DeviceId, &Arc<dyn Device>) {
        match &self.gpu {
            Some(g) => (DeviceId::Gpu, g),
            None => (DeviceId::Host, &self.host),
        }
    }

    /// The machine's clock: the host's ([`Device::now`]), in seconds. Work
    /// is timed by it: on real devices the wall clock, under a machine model
    /// the virtual time the host thread has reached.
    pub fn now(&self) -> f64 {
        self.host.now()
    }

    /// Whether the machine's clock is a model's virtual time.
    pub fn virtual_time(&self) -> bool {
        self.host.virtual_time()
    }

    /// The names of the devices, host first (`cpu + sim-gpu`).
    pub fn describe(&self) -> String {
        self.iter()
            .map(|(_, d)| d.info().name.clone())
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

impl fmt::Debug for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Machine({})", self.describe())
    }
}
