//! Simulated machines. [`machine`]: a whole machine in virtual time (the
//! machine model behind `--sim-machine`). The rest of this module: a
//! simulated GPU, for machines without one: named as a simulation
//! everywhere it appears. It runs the CPU kernels of an inner device on its
//! own worker threads (a compute stream and a transfer stream), keeps its own
//! strictly budgeted ledger, and stretches kernels and copies to the speeds it
//! is configured for (copy bandwidth, kernel speed, launch and sync
//! overheads, slowdowns scripted over time).
//!
//! A kernel's simulated time is `launch + t_inner / speed * slowdown(t)`,
//! where `t_inner` is what the inner device took: the worker sleeps for the
//! difference, so the simulation can emulate GPUs up to as fast as the inner
//! device itself (`speed <= 1` per inner thread). When the inner kernel is
//! slower than the simulated time, the sim is saturated: it counts those
//! kernels so reports can say so.

mod config;
mod device;
pub mod machine;
mod throttle;
mod worker;

pub use config::{SIM_GPU_KEYS, SimGpuConfig, Slowdown};
pub use device::{SimGpu, SimStats};
pub use machine::{MachineSpec, VirtualMachine};
pub use throttle::Throttled;
