//! Facts about the GPUs for `ats-cli devices`: name, memory, compute
//! capability, and the PCIe link as the kernel reports it in sysfs.

use std::path::Path;

use cudarc::driver::{CudaContext, result, sys};

use crate::CudaError;
use crate::driver::{Lib, ensure};
use crate::memory::drv;

/// What the driver (and sysfs) say about one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuFacts {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name.
    pub name: String,
    /// Total memory in bytes.
    pub total_bytes: u64,
    /// Free memory in bytes.
    pub free_bytes: u64,
    /// Compute capability.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// PCI bus id (`0000:65:00.0`).
    pub pci_bus_id: Option<String>,
    /// Current PCIe link: generation and lanes.
    pub pcie_link: Option<(u32, u32)>,
    /// Maximum PCIe link: generation and lanes.
    pub pcie_max_link: Option<(u32, u32)>,
}

/// Every GPU the driver reports.
pub fn list_gpus() -> Result<Vec<GpuFacts>, CudaError> {
    ensure(Lib::Driver)?;
    drv("cuInit", result::init())?;
    let count = drv("cuDeviceGetCount", result::device::get_count())?;
    if count == 0 {
        return Err(CudaError::NoGpu("the driver reports no GPU".into()));
    }
    (0..count as usize).map(facts).collect()
}

fn facts(ordinal: usize) -> Result<GpuFacts, CudaError> {
    let ctx = drv("creating a CUDA context", CudaContext::new(ordinal))?;
    let name = drv("cuDeviceGetName", ctx.name())?;
    let (free, total) = drv("cuMemGetInfo", ctx.mem_get_info())?;
    let cc = drv("reading the compute capability", ctx.compute_capability())?;
    let sm = drv(
        "reading the SM count",
        ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    )?;
    let mut buf = [0 as std::ffi::c_char; 64];
    // SAFETY: the buffer holds 64 chars and its length is passed.
    let bus =
        unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, ctx.cu_device()) }
            .result()
            .ok()
            .map(|_| {
                // SAFETY: the driver wrote a NUL-terminated string into `buf`.
                unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .to_lowercase()
            });
    let dir = bus
        .as_ref()
        .map(|b| Path::new("/sys/bus/pci/devices").join(b));
    let link = |speed: &str, width: &str| {
        let d = dir.as_ref()?;
        let s = std::fs::read_to_string(d.join(speed)).ok()?;
        let w = std::fs::read_to_string(d.join(width)).ok()?;
        Some((pcie_generation(&s)?, w.trim().parse().ok()?))
    };
    Ok(GpuFacts {
        ordinal,
        name,
        total_bytes: total as u64,
        free_bytes: free as u64,
        compute_capability: cc,
        sm_count: sm as u32,
        pcie_link: link("current_link_speed", "current_link_width"),
        pcie_max_link: link("max_link_speed", "max_link_width"),
        pci_bus_id: bus,
    })
}

/// The PCIe generation of a sysfs link speed (`16.0 GT/s PCIe` is 4).
pub fn pcie_generation(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    // 2.5, 5, 8, 16, 32, 64 GT/s
    [2.5, 5.0, 8.0, 16.0, 32.0, 64.0]
        .iter()
        .position(|&g| (gts - g).abs() < 0.01)
        .map(|i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_speeds_map_to_generations() {
        assert_eq!(pcie_generation("16.0 GT/s PCIe\n"), Some(4));
        assert_eq!(pcie_generation("2.5 GT/s PCIe"), Some(1));
        assert_eq!(pcie_generation("32.0 GT/s PCIe"), Some(5));
        assert_eq!(pcie_generation("Unknown"), None);
        assert_eq!(pcie_generation("12.0 GT/s"), None);
    }

    #[test]
    fn listing_without_a_driver_is_an_error() {
        match list_gpus() {
            Ok(g) => assert!(!g.is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
