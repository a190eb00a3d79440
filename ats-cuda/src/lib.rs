//! `ats-cuda`: the CUDA backend of ATS.
//!
//! Everything goes through cudarc with dynamic loading, so the crate builds
//! with no CUDA installed. [`open_device`] probes for the driver library
//! before touching it, so a machine without one gets a clear error instead
//! of a panic.

mod blas;
pub mod device;
pub mod driver;
pub mod geometry;
pub mod info;
pub mod kernels;
pub mod memory;
mod ops;
pub mod staging;
pub mod streams;
pub mod workspace;

use std::sync::Arc;

use ats_core::device::Device;

pub use device::{CudaDevice, CudaOptions};
pub use driver::driver_present;
pub use info::{GpuFacts, list_gpus};

/// Why the CUDA backend cannot do something.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A library is not installed (or not where it is looked for).
    #[error(
        "{lib} was not found (install {package}, or add its folder to LD_LIBRARY_PATH; also searched: {searched})"
    )]
    MissingLibrary {
        /// The library file.
        lib: &'static str,
        /// What ships it.
        package: &'static str,
        /// Folders searched besides the loader's path.
        searched: String,
    },
    /// The driver is present but reports no usable GPU.
    #[error("no CUDA GPU: {0}")]
    NoGpu(String),
    /// A driver call failed.
    #[error("{call}: {message}")]
    Driver {
        /// What was being done.
        call: String,
        /// The driver's error.
        message: String,
    },
    /// NVRTC failed outside compilation.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// A launch that does not fit (grid, scratch area).
    #[error("{0}")]
    Launch(String),
    /// A kernel source did not compile.
    #[error("kernel {file} does not compile for {arch}: {message}")]
    Compile {
        /// The source file.
        file: &'static str,
        /// The target architecture.
        arch: String,
        /// NVRTC's status and log.
        message: String,
    },
}

/// Opens GPU 0 with an optional memory budget (see [`CudaOptions::budget`]).
/// Without a driver, a GPU or NVRTC this is an error naming what is missing,
/// never a panic.
pub fn open_device(budget: Option<u64>) -> Result<Arc<dyn Device>, CudaError> {
    let dev = CudaDevice::open(CudaOptions {
        budget,
        ..CudaOptions::default()
    })?;
    Ok(Arc::new(dev))
}

#[cfg(test)]
mod tests {
    #[test]
    fn opening_never_panics() {
        // no driver: an error naming it; a driver without GPU: an error;
        // a GPU: a device
        match super::open_device(Some(1 << 30)) {
            Ok(d) => assert_eq!(d.info().kind, ats_core::device::DeviceKind::Gpu),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
