//! The install-phase profile: measured kernel times per device (and per CPU
//! thread count, and on the CPU also under concurrent copy traffic), copy
//! bandwidths and the fixed cost of a device switch; saved once per machine.

mod bench;
mod cost;
mod micros;
mod store;

pub use bench::{BenchOptions, profile_devices, profile_devices_with};
pub use cost::{CostModel, NodeAt, op_key};
pub use store::{default_profile_path, hardware_fingerprint, load_profile, save_profile};

use serde::{Deserialize, Serialize};

/// What a sample measured: an op and the dimensions its cost depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpKey {
    /// Op kind (`matmul`, `attention`, `rms_norm`, ...).
    pub op: String,
    /// Weight type, for ops with a weight matrix.
    pub dtype: Option<String>,
    /// Output columns (matmul rows of W; attention query width).
    pub m: usize,
    /// Input columns (matmul cols of W; attention KV width).
    pub k: usize,
    /// Rows of the round (tokens).
    pub tokens: usize,
    /// Keys attended (attention) or experts (MoE); 0 otherwise.
    pub ctx: usize,
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// What ran.
    pub key: OpKey,
    /// CPU threads (1 on other devices).
    pub threads: usize,
    /// Measured while copy traffic ran concurrently (memory-controller contention).
    pub contended: bool,
    /// FLOPs of the run.
    pub flops: f64,
    /// Bytes the run moved through memory.
    pub bytes: f64,
    /// Median seconds.
    pub secs: f64,
}

/// Measurements of one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// Device name.
    pub device: String,
    /// `cpu`, `gpu` or `simulated_gpu`.
    pub kind: String,
    /// Kernel samples.
    pub samples: Vec<Sample>,
    /// Host-to-device bandwidth from pinned memory, GB/s (non-CPU devices).
    pub h2d_pinned_gbps: Option<f64>,
    /// Host-to-device bandwidth from pageable memory, GB/s.
    pub h2d_pageable_gbps: Option<f64>,
    /// Device-to-host bandwidth, GB/s.
    pub d2h_gbps: Option<f64>,
    /// Fixed cost of switching to and from this device (synchronisation, launch), seconds.
    pub switch_secs: Option<f64>,
    /// The device's routed-expert copy (experts chosen on the device, read
    /// from pinned host memory) per count of experts copied at once; empty
    /// for devices without one and in profiles older than the samples.
    #[serde(default)]
    pub routed_copies: Vec<RoutedCopySample>,
}

/// One timing of [`ats_core::device::Device::copy_routed_async`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoutedCopySample {
    /// Distinct experts the routing chose.
    pub experts: usize,
    /// Bytes copied (the chosen experts').
    pub bytes: u64,
    /// Median seconds.
    pub secs: f64,
}

/// A machine's profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Format version.
    pub version: u32,
    /// Hardware fingerprint the profile belongs to.
    pub fingerprint: String,
    /// Whether this was a `--quick` profile.
    pub quick: bool,
    /// Seconds the profiling took.
    pub took_secs: f64,
    /// Per device.
    pub devices: Vec<DeviceProfile>,
}

/// The current profile format version.
pub const PROFILE_VERSION: u32 = 1;

impl Profile {
    /// The profile of a device by name.
    pub fn device(&self, name: &str) -> Option<&DeviceProfile> {
        self.devices.iter().find(|d| d.device == name)
    }
}
